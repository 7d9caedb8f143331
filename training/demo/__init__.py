"""The end-to-end demo (``scjepa demo``: train, export, serve, replay) and the replay
client (``scjepa replay``) that streams a CSV or benchmark series through POST /ingest.

May import everything else in the project; nothing imports it.
"""

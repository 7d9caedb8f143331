"""The evaluation protocol of docs/evaluation.md (``scjepa evaluate``, protocol.py):
encoder features, the anomaly-prediction probe, baselines and floors, metrics with
intervals, results files and the markdown report (``scjepa report``).

May import model/, training.data and training.pretrain (checkpoints); not service/.
"""

"""Benchmarks of the hot paths (``scjepa bench train | infer | serve``) and the HTTP
load generator that ``bench serve`` drives the running service with.

May import everything else in the project: it measures it from outside.
"""

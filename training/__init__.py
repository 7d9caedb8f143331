"""Offline side of SC-JEPA (PyTorch): raw benchmark data -> pre-trained model -> evaluated
probe -> ONNX artifact, plus the tools that drive the service from outside.

Rooms: data/ (loaders, windows, splits), pretrain/ (the SC-JEPA training run),
evaluate/ (the protocol of docs/evaluation.md: probes, baselines, metrics, report),
export.py (the artifact), bench/ (benchmarks, load generator), demo/ (demo, replay client).
May import model/ and service's torch-free contract (service.manifest); never the reverse.
"""

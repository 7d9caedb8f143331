"""The online risk service: FastAPI + onnxruntime, never PyTorch.

main.py (app factory, lifespan) -> routes/ (thin handlers) -> scoring.py (ingest ->
windows -> micro-batch -> risk records) over store/ (Redis or memory), batcher.py and
inference.py (onnxruntime). manifest.py is the artifact contract training writes to.
"""

"""The online risk service: FastAPI + onnxruntime, never PyTorch or training/.

main.py (app factory, lifespan) -> handlers.py (POST /ingest, GET /risk/{stream}; served
by fastpaths.py ahead of FastAPI or by routes/) -> scoring.py (ingest -> windows ->
micro-batch -> risk records) over store/ (Redis or memory), batcher.py and inference.py
(onnxruntime). manifest.py is the artifact contract training writes to.
"""

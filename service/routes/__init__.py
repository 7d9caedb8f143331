"""FastAPI routes, thin: POST /ingest and GET /risk/{stream} adapt service.handlers."""

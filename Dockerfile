# Minimal service image for now; the deployment issue makes it multi-stage with a CUDA
# runtime base, a CPU-slim target and a training target.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY model ./model
COPY training ./training
COPY service ./service
RUN pip install --no-cache-dir ".[cpu]"
RUN useradd --create-home --uid 10001 scjepa
USER scjepa
CMD ["scjepa", "--help"]

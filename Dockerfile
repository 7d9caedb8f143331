# Targets (the last stage, `runtime-cpu`, is the default):
#   runtime-cpu  the service on python:3.11-slim with onnxruntime (CPU). No PyTorch.
#                                                docker build -t scjepa:cpu .
#   runtime      the service on an NVIDIA CUDA runtime base with onnxruntime-gpu; uses the
#                GPU when the container gets one (--gpus / compose profile `gpu`), CPU
#                otherwise. No PyTorch.          docker build --target runtime -t scjepa:gpu .
#   train        PyTorch (CPU wheels by default) for scjepa pretrain / evaluate / export;
#                CUDA wheels: --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128
#                (any PyTorch index that carries TORCH_SPEC)
#                                                docker build --target train -t scjepa:train .
#
# Every service image runs `scjepa serve` as a non-root user, reads its settings from
# SCJEPA_* environment variables (service/config.py) and expects the model artifact
# (model.onnx + manifest.json) mounted read-only at /models/current. Its HEALTHCHECK
# (deploy/docker/healthcheck.py) probes /readyz on the --host/--port of the `scjepa
# serve` running in the container, so it follows a command that changes the port, and
# sends the ops key in /run/secrets/ops_key when there is one (docker compose's secret;
# SCJEPA_OPS_KEY_ROUTES may put /readyz behind it).
#
# Build with BuildKit (DOCKER_BUILDKIT=1, the default of recent Docker): it builds only
# the stages a target needs, where the legacy builder would also build `train` (and
# reach the PyTorch index) for `--target runtime-cpu`. No `# syntax=` line: BuildKit
# would pull a frontend image; the builder's own Dockerfile frontend is enough.
#
# Tested: runtime-cpu, built and run by `make deploy-test` (tests/deploy/test_stack.py)
# on a base made from Debian packages (--build-arg PYTHON_IMAGE=<local base>; see
# deploy/test/README.md). NOT tested here: `runtime`, `build-gpu` (CUDA base) and
# `train` (PyTorch index); no GPU or CUDA registry is reachable from the CI machine.
#
# Build args for a pip mirror (builder stages only, so their values stay out of the
# service images' history): PIP_INDEX_URL, PIP_EXTRA_INDEX_URL; a proxy goes in Docker's
# predefined HTTP_PROXY / HTTPS_PROXY / NO_PROXY build args.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# Both service images install with deploy/docker/constraints.txt: the same onnxruntime
# version (onnxruntime on CPU, onnxruntime-gpu on CUDA) and the same versions of every
# other package. The CUDA base and onnxruntime-gpu must agree on the CUDA major version:
# the PyPI onnxruntime-gpu 1.31.1 wheel links CUDA 13 (libcublas.so.13,
# libcudart.so.13) and cuDNN 9, so the host needs an NVIDIA driver >= 580. For CUDA 12
# hosts pin both onnxruntime lines of constraints.txt to 1.23.2 and build with
#   --build-arg CUDA_IMAGE=nvidia/cuda:12.6.3-cudnn-runtime-ubuntu24.04
#   (onnxruntime-gpu==1.23.2 links CUDA 12)
ARG CUDA_IMAGE=nvidia/cuda:13.0.0-cudnn-runtime-ubuntu24.04

# ---------------------------------------------------------------- CPU service builder
FROM ${PYTHON_IMAGE} AS build-cpu
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY deploy/docker/constraints.txt pyproject.toml README.md ./
COPY model ./model
COPY training ./training
COPY service ./service
# Versions: pyproject.toml's ranges, pinned to the tested resolution by
# constraints.txt. pip and setuptools only install: the runtime venv lacks them.
# hadolint ignore=DL3013
RUN python -m venv /opt/venv \
    && pip install -c constraints.txt ".[cpu]" \
    && pip uninstall --yes pip setuptools

# ------------------------------------------------------------------------------ train
FROM ${PYTHON_IMAGE} AS train
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ARG TORCH_SPEC=torch==2.13.0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 PATH=/opt/venv/bin:$PATH
WORKDIR /app
# TORCH_SPEC is pinned (build arg)
# hadolint ignore=DL3013
RUN python -m venv /opt/venv \
    && pip install --index-url "${TORCH_INDEX_URL}" "${TORCH_SPEC}"
COPY pyproject.toml README.md ./
COPY model ./model
COPY training ./training
COPY service ./service
COPY configs ./configs
# hadolint ignore=DL3013
RUN pip install ".[train,cpu]" \
    && useradd --create-home --uid 10001 scjepa \
    && mkdir -p /app/runs /app/artifacts /app/results \
    && chown scjepa:scjepa /app/runs /app/artifacts /app/results
USER 10001:10001
ENTRYPOINT ["scjepa"]
CMD ["--help"]

# ---------------------------------------------------------------- GPU service builder
# Untested here (no CUDA base image or GPU in CI): kept as it is documented above.
FROM ${CUDA_IMAGE} AS build-gpu
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY deploy/docker/constraints.txt pyproject.toml README.md ./
COPY model ./model
COPY training ./training
COPY service ./service
# the CPU image's versions (constraints.txt), onnxruntime-gpu at onnxruntime's version
# hadolint ignore=DL3013
RUN pip install -c constraints.txt ".[gpu]"

# ---------------------------------------------------------------------------- runtime
# Untested here (no CUDA base image or GPU in CI).
FROM ${CUDA_IMAGE} AS runtime
ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 \
    PATH=/opt/venv/bin:$PATH SCJEPA_ARTIFACT=/models/current SCJEPA_PROVIDER=auto
# The venv's interpreter is this image's /usr/bin/python3 (same base as build-gpu).
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 10001 scjepa \
    && mkdir -p /models
COPY --from=build-gpu /opt/venv /opt/venv
COPY deploy/docker/healthcheck.py /usr/local/bin/scjepa-healthcheck
WORKDIR /home/scjepa
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=60s --retries=5 \
    CMD ["python", "/usr/local/bin/scjepa-healthcheck", "/readyz"]
CMD ["scjepa", "serve", "--host", "0.0.0.0", "--port", "8000"]

# ------------------------------------------------------------------------ runtime-cpu
# The default target (last stage). The compose deployment runs it as `api` and
# `scorer` (`scorer-gpu` runs `runtime`); its root
# file system can be read-only (a tmpfs at /tmp): nothing is written at run time.
FROM ${PYTHON_IMAGE} AS runtime-cpu
LABEL org.opencontainers.image.title="scjepa risk service (CPU)" \
      org.opencontainers.image.description="SC-JEPA anomaly risk service: FastAPI + onnxruntime (CPU)"
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PATH=/opt/venv/bin:$PATH \
    SCJEPA_ARTIFACT=/models/current SCJEPA_PROVIDER=cpu
# (layers ordered small first: each one is a full copy on the vfs storage driver)
RUN useradd --create-home --no-log-init --uid 10001 scjepa && mkdir -p /models
WORKDIR /home/scjepa
COPY deploy/docker/healthcheck.py /usr/local/bin/scjepa-healthcheck
COPY --from=build-cpu /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=5 \
    CMD ["python", "/usr/local/bin/scjepa-healthcheck", "/readyz"]
CMD ["scjepa", "serve", "--host", "0.0.0.0", "--port", "8000"]

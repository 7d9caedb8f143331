# Two set-up commands on a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv at the repo root.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
# A CPU build of PyTorch; on a CUDA host set TORCH_SPEC (and pip's index) to a CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: venv demo test deploy-test lint format clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q "$(TORCH_SPEC)"
	$(BIN)/pip install -q -e ".[train,cpu,dev]"
	touch $@

# Trains + exports a small model on first use (cached in artifacts/demo/), serves it in
# memory and replays held-out data; --keep-serving keeps /ui up until Ctrl-C.
# e.g. make demo DEMO_ARGS="--rate 500"  (DEMO_ARGS= exits after the summary)
DEMO_ARGS ?= --keep-serving
demo: venv
	$(BIN)/scjepa demo $(DEMO_ARGS)

# the same checks as .pre-commit-config.yaml: service/ under strict mypy, model/ and
# training/ under pyproject's [tool.mypy] overrides
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy --strict service/
	$(BIN)/mypy model/ training/

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# Every test but the GPU ones and the deploy test (below). Under CI=true (.ci/run) a
# test whose component is missing (redis-server, promtool, chromium, docker-compose,
# ../shared/datasets, torch, ...) FAILS instead of skipping; the run ends with the list
# of absent components (tests/support/components.py).
test: lint
	$(BIN)/python -m pytest -m "not requires_cuda and not deploy"

# Builds the images (Dockerfile target runtime-cpu on a base made from Debian packages,
# Redis, Prometheus, Alertmanager and redis_exporter stand-ins) and runs
# docker-compose.yml's api + scorer + redis + alertmanager + redis-exporter + prometheus
# on loopback ports with their secrets and hardening, then checks ingest scored by the
# scorer container, /risk, Prometheus' scrape of both tiers, rules and Alertmanager,
# stream alerts and a Redis restart through the running stack; tears it all down (tests/deploy/test_stack.py). Needs root,
# docker.io, docker-compose, mmdebstrap; about 5-7 minutes (under 15).
deploy-test: venv
	$(BIN)/python -m pytest -m deploy -s -v -p no:cacheprovider tests/deploy/test_stack.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

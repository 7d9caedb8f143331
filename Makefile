# Two set-up commands on a fresh machine: `make demo` and `make test`.
# Both create (or reuse) .venv at the repo root.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
# A CPU build of PyTorch; on a CUDA host set TORCH_SPEC (and pip's index) to a CUDA build.
TORCH_SPEC ?= torch==2.13.0

.PHONY: venv demo test lint format clean

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

test: lint
	$(BIN)/python -m pytest -m "not requires_cuda"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

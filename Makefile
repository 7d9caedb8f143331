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

demo: venv
	$(BIN)/scjepa demo

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

test: lint
	$(BIN)/python -m pytest -m "not requires_cuda"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache

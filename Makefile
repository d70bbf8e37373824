# Set-up and everyday commands. Each target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/dd-etl demo

lint: $(STAMP)
	$(BIN)/ruff check dd_etl tests bench
	$(BIN)/ruff format --check dd_etl tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest --durations=10

bench: $(STAMP)
	$(BIN)/python bench/bench_trace_spine.py

clean:
	rm -rf $(VENV) traces/demo .pytest_cache .mypy_cache .ruff_cache .hypothesis

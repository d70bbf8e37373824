# Set-up and everyday commands. Each target installs what it needs into .venv first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv  # installs in parallel: a third of the time pip took
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'
	$(BIN)/python -m dd_etl.delta_jars  # Delta's jars for Spark, from Maven Central, once
	touch $(STAMP)

TAXI := assets/taxi/pipeline.yaml
DEMO_EPOCHS := 0 1 2 3

demo: $(STAMP)
	rm -rf assets/taxi/data assets/taxi/out traces/taxi
	@for e in $(DEMO_EPOCHS); do \
	  echo "== epoch $$e: new trips, fare corrections, deletions, a zone renamed"; \
	  $(BIN)/python assets/taxi/generate.py assets/taxi/data --epoch $$e || exit 1; \
	  $(BIN)/dd-etl run $(TAXI) || exit 1; \
	done
	$(BIN)/dd-etl read $(TAXI) fares_by_passengers
	$(BIN)/dd-etl read $(TAXI) trips_by_borough
	$(BIN)/dd-etl read $(TAXI) reachable_from_zone_1
	$(BIN)/dd-etl changes $(TAXI) trips_by_borough --from 3 --to 4
	$(BIN)/dd-etl status $(TAXI)
	$(BIN)/dd-etl verify $(TAXI)

lint: $(STAMP)
	$(BIN)/ruff check dd_etl tests bench
	$(BIN)/ruff format --check dd_etl tests bench
	$(BIN)/mypy

test: lint
	$(BIN)/pytest -n 2 --dist worksteal --durations=25

bench: $(STAMP)
	$(BIN)/python bench/bench_trace_spine.py
	$(BIN)/python bench/bench_min_retraction.py
	$(BIN)/python bench/bench_batch_writer.py
	$(BIN)/python bench/bench_incremental.py
	$(BIN)/python bench/bench_bfs.py
	$(BIN)/python bench/bench_dagster_runs.py
	$(BIN)/python bench/bench_many_views.py
	$(BIN)/python bench/bench_object_storage.py

clean:
	-$(BIN)/dd-etl server stop 2>/dev/null
	rm -rf $(VENV) traces/demo traces/taxi assets/taxi/data assets/taxi/out .pytest_cache .mypy_cache .ruff_cache .hypothesis

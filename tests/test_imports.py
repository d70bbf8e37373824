"""Every module of the package imports on its own: no import cycle hides behind
the order in which other modules happen to be imported first."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dd_etl

PACKAGE = Path(dd_etl.__file__).parent

# In one fresh interpreter, each module is imported with every dd_etl module
# forgotten first, as if it were the first import of a new process; third-party
# modules stay loaded, as they cannot take part in a cycle of ours.
IMPORT_EACH_ALONE = """
import importlib, json, sys, traceback
failures = {}
for name in json.loads(sys.argv[1]):
    for loaded in [m for m in sys.modules if m == "dd_etl" or m.startswith("dd_etl.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception:
        failures[name] = traceback.format_exc(limit=-3)
print(json.dumps(failures))
"""


def modules() -> list[str]:
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_imports_alone() -> None:
    names = modules()
    assert "dd_etl.sources" in names and "dd_etl.trace.arrow_files" in names
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH_ALONE, json.dumps(names)],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parent,
    )
    failures = json.loads(done.stdout.strip().splitlines()[-1])
    assert failures == {}, "\n".join(f"{m}:\n{tb}" for m, tb in failures.items())


# Dagster starts every run, and its daemon every evaluation, in a process that
# loads the code location: the definitions are built from the pipeline files
# alone, and Spark, Arrow and the runtime are imported by the step that needs them.
LOAD_DEFINITIONS = """
import json, sys
from dd_etl.dagster import pipeline_definitions
defs = pipeline_definitions([sys.argv[1]])
jobs = defs.get_repository_def().get_all_jobs()
heavy = ("pyspark", "pyarrow", "deltalake", "dd_etl.runtime", "dd_etl.trace")
print(json.dumps({"jobs": len(jobs), "loaded": sorted(m for m in heavy if m in sys.modules)}))
"""


def test_loading_the_dagster_definitions_imports_no_spark() -> None:
    demo = PACKAGE.parent / "assets" / "taxi" / "pipeline.yaml"
    done = subprocess.run(
        [sys.executable, "-c", LOAD_DEFINITIONS, str(demo)],
        capture_output=True,
        text=True,
        check=True,
        cwd=PACKAGE.parent,
    )
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded["jobs"] >= 4  # the tick, the backfills, the audit
    assert loaded["loaded"] == []

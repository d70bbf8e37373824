"""Benchmark: Dagster runs of the taxi demo, each in a process of its own, with and
without the dd_etl server.

Dagster's run launcher starts every run in a new process. Each epoch of the demo
(``assets/taxi``, copied to a scratch directory) is one run of the pipeline's
tick job, ``dagster job execute`` as a process of its own, timed from its start
to its exit. With the server (``DD_ETL_SERVER`` on, the default) the run hands
its step to the server, started by the first run and kept by the later ones;
without it (``off``) every run starts Spark itself. The two sequences alternate
``--repeats`` times, each on a fresh warehouse. Results:
``bench/results/dagster_runs.json`` and ``bench/results/dagster_runs.png``.

``--schedule-every S`` measures what a schedule meets instead: the runs after the
load start every S seconds, on a server whose idle time (``--idle``) is shorter,
as an hourly schedule meets a server that idles out after 15 minutes. Each run
either carries the next tick's due time, as the tick schedule tags its runs
(``dd_etl/warm_until``), or does not. Results: ``dagster_schedule.json``/``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RESULTS, environment, recorded_argv, spark_session, write_json
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from dd_etl.dagster.names import PIPELINES_ENV, WARM_UNTIL_TAG
from dd_etl.server import client, identity

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
MODES = {"server": "on", "own process": "off"}
SCHEDULED = ("told the next tick", "not told")


def sequence(
    root: Path, epochs: int, server: str, every: float | None = None, idle: float = 900.0,
    told: bool = False,
) -> list[float]:  # fmt: skip
    """Seconds of each epoch's Dagster run, on a fresh copy of the demo; with
    ``every``, the runs after the first start ``every`` seconds apart."""
    shutil.rmtree(root, ignore_errors=True)
    demo = root / "assets" / "taxi"
    shutil.copytree(ROOT / "assets" / "taxi", demo)
    (root / "home").mkdir()
    env = {
        **os.environ,
        "DAGSTER_HOME": str(root / "home"),
        PIPELINES_ENV: str(demo / "pipeline.yaml"),
        identity.SERVER_ENV: server,
        identity.DIRECTORY_ENV: str(root / "servers"),
        identity.IDLE_ENV: str(idle),
    }
    seconds = []
    due = time.time()
    for epoch in range(epochs):
        subprocess.run(
            [sys.executable, str(demo / "generate.py"), str(demo / "data"), "--epoch", str(epoch)],
            check=True,
            capture_output=True,
        )
        if every is not None and epoch > 0:
            time.sleep(max(0.0, due - time.time()))
        due = time.time() + (every or 0.0)
        tags = ["--tags", json.dumps({WARM_UNTIL_TAG: str(due)})] if told else []
        started = time.perf_counter()
        run = subprocess.run(
            [
                BIN / "dagster",
                "job",
                "execute",
                "-m",
                "dd_etl.dagster.location",
                "-j",
                "taxi_tick",
                *tags,
            ],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
        )
        seconds.append(round(time.perf_counter() - started, 2))
        if run.returncode != 0:
            raise SystemExit(f"epoch {epoch} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        print(f"{server}{' told' if told else ''}: epoch {epoch} {seconds[-1]} s", flush=True)
    for path in identity.sockets(root / "servers") if (root / "servers").exists() else []:
        client.ask(path, {"kind": "stop"})
    time.sleep(2)  # the server's JVM exits before the next sequence starts
    return seconds


def plot(result: dict[str, Any], out: Path) -> None:
    fig = Figure(figsize=(8, 4.5))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    epochs = range(result["epochs"])
    width = 0.4
    for i, mode in enumerate(result["runs"]):
        runs = result["runs"][mode]
        means = [statistics.mean(r[e] for r in runs) for e in epochs]
        bars = ax.bar([e + (i - 0.5) * width for e in epochs], means, width, label=mode)
        ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_xticks(list(epochs), [f"epoch {e}" for e in epochs])
    ax.set_ylabel("seconds per Dagster run (process start to exit)")
    every = result.get("schedule_every")
    scheduled = f", every {every:.0f} s, server idle after {result['idle']:.0f} s" if every else ""
    ax.set_title(f"Taxi demo as Dagster runs{scheduled}, mean of {result['repeats']} sequences")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--schedule-every", type=float, default=None)
    parser.add_argument("--idle", type=float, default=20.0)
    args = parser.parse_args()
    every = args.schedule_every
    scratch = Path(tempfile.mkdtemp(prefix="dagster_runs_", dir=args.workdir))
    runs: dict[str, list[list[float]]] = {mode: [] for mode in (SCHEDULED if every else MODES)}
    try:
        for _ in range(args.repeats):
            if every is None:
                for mode, server in MODES.items():
                    runs[mode].append(sequence(scratch / "demo", args.epochs, server))
                continue
            for mode in SCHEDULED:
                told = mode == SCHEDULED[0]
                runs[mode].append(
                    sequence(scratch / "demo", args.epochs, "on", every, args.idle, told)
                )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    spark = spark_session("bench_dagster_runs")  # for the environment, after the runs
    try:
        env = environment(spark)
    finally:
        spark.stop()
    result = {"argv": recorded_argv(), "epochs": args.epochs, "repeats": args.repeats}
    if every is not None:
        result |= {"schedule_every": every, "idle": args.idle}
    result |= {"runs": runs, "environment": env}
    name = "dagster_runs" if every is None else "dagster_schedule"
    write_json(name, result)
    plot(result, RESULTS / f"{name}.png")
    print(f"wrote {RESULTS / f'{name}.json'} and {RESULTS / f'{name}.png'}")


if __name__ == "__main__":
    main()

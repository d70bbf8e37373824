"""The taxi demo on a Spark standalone cluster of 1 and of 2 workers (one core each,
started by ``infra/spark-standalone.sh`` on this machine), and on local Spark of
as many cores for reference: the same data, epoch by epoch, each ``dd-etl run``
in a process of its own (no dd_etl server), as a scheduled run meets it.

    python bench/bench_cluster.py [--epochs 4] [--trips 400] [--workers 1,2]

Per setup: the wall seconds of each whole command, as a user waits for it, and
the seconds the run itself reports (``ran epoch N in S``), which leave out
starting Python and Spark. Every ``dd-etl run`` is a new Spark application, so
a cluster starts its executors anew each time. Records ``results/cluster.json``
and ``results/cluster.png``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pyspark  # noqa: E402

from bench.common import RESULTS, code_version, recorded_argv, write_json  # noqa: E402

TAXI = ROOT / "assets" / "taxi"
SCRIPT = ROOT / "infra" / "spark-standalone.sh"
DD_ETL = [sys.executable, "-m", "dd_etl.cli"]
RAN = re.compile(r"(?:ran|completed interrupted) epoch \d+ in ([0-9.]+)s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def demo_copy(root: Path) -> Path:
    """The demo's pipeline in ``root``: its warehouse there, its master left to
    ``DD_ETL_SPARK_MASTER`` (a master in the file would win over it)."""
    root.mkdir(parents=True)
    text = (TAXI / "pipeline.yaml").read_text()
    lines = [
        "warehouse: warehouse" if line.startswith("warehouse:") else line
        for line in text.splitlines()
        if not line.strip().startswith("master:")
    ]
    (root / "pipeline.yaml").write_text("\n".join(lines) + "\n")
    return root / "pipeline.yaml"


def generate(root: Path, epoch: int, trips: int) -> None:
    subprocess.run(
        [sys.executable, str(TAXI / "generate.py"), str(root / "data"), "--epoch", str(epoch),
         "--trips", str(trips)],
        check=True,
        capture_output=True,
    )  # fmt: skip


def epochs_on(master: str, root: Path, epochs: int, trips: int) -> dict[str, Any]:
    """The demo's epochs with Spark on ``master``: wall and run seconds of each."""
    pipeline = demo_copy(root)
    env = {**os.environ, "DD_ETL_SERVER": "off", "DD_ETL_SPARK_MASTER": master}
    env["PYSPARK_PYTHON"] = sys.executable
    env.pop("PYTHONPATH", None)  # executors need no dd_etl code
    walls: list[float] = []
    runs: list[float | None] = []
    for epoch in range(epochs):
        generate(root, epoch, trips)
        started = time.perf_counter()
        done = subprocess.run([*DD_ETL, "run", str(pipeline)], env=env, capture_output=True,
                              text=True)  # fmt: skip
        walls.append(round(time.perf_counter() - started, 3))
        if done.returncode != 0:
            raise RuntimeError(f"epoch {epoch} on {master} failed:\n{done.stderr[-3000:]}")
        found = RAN.search(done.stderr)
        runs.append(float(found.group(1)) if found else None)
        print(f"  epoch {epoch}: {walls[-1]}s (run {runs[-1]}s)", flush=True)
    return {"master": master, "wall_seconds": walls, "run_seconds": runs}


def on_cluster(workers: int, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The demo's epochs on a fresh cluster of ``workers`` workers of one core."""
    state = root / f"cluster_{workers}"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {
        "PYTHON": sys.executable,
        "SPARK_MASTER_PORT": str(free_port()),
        "SPARK_WORKER_INSTANCES": str(workers),
        "SPARK_WORKER_CORES": "1",
        "SPARK_WORKER_MEMORY": args.worker_memory,
        "SPARK_LOCAL_DIRS": str(state / "local"),
    }
    started = time.perf_counter()
    start = subprocess.run(["bash", str(SCRIPT), "start", str(state)], env=env,
                           capture_output=True, text=True)  # fmt: skip
    try:
        if start.returncode != 0:
            raise RuntimeError(f"the cluster did not start:\n{start.stderr}")
        seconds = round(time.perf_counter() - started, 3)
        url = start.stdout.strip().splitlines()[-1]
        print(f"{workers} worker(s) at {url}, started in {seconds}s:", flush=True)
        result = epochs_on(url, root / f"taxi_{workers}_workers", args.epochs, args.trips)
        master = f"spark:// standalone, {workers} x 1 core, {args.worker_memory}"
        return {**result, "master": master, "cluster_start_seconds": seconds}
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], env=env, check=False)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, key, title in zip(
        axes,
        ("wall_seconds", "run_seconds"),
        ("whole command (a new Spark each time)", "the run itself (as it reports)"),
        strict=True,
    ):
        for name, series in result["setups"].items():
            values = [v if v is not None else float("nan") for v in series[key]]
            ax.plot(range(len(values)), values, marker="o", label=name)
        ax.set_title(title)
        ax.set_xticks(range(result["epochs"]))
        ax.set_xlabel("epoch (0: the load)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("seconds")
    axes[0].legend()
    fig.suptitle(f"taxi demo, {result['trips_per_epoch']} new trips an epoch: "
                 "standalone workers of one core vs local Spark")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--trips", type=int, default=400, help="new trips per epoch")
    parser.add_argument("--workers", default="1,2", help="cluster sizes, comma-separated")
    parser.add_argument("--worker-memory", default="1g")
    parser.add_argument("--no-local", action="store_true", help="skip the local references")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--name", default="cluster", help="results/<name>.json and .png")
    args = parser.parse_args()
    sizes = [int(w) for w in args.workers.split(",") if w.strip()]
    root = Path(tempfile.mkdtemp(prefix="bench_cluster_", dir=args.workdir))
    result: dict[str, Any] = {
        "environment": {
            "code": code_version(),
            "pyspark": pyspark.__version__,
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "load_average_1_5_15min": [round(x, 1) for x in os.getloadavg()],
        },
        "argv": recorded_argv(),
        "epochs": args.epochs,
        "trips_per_epoch": args.trips,
        "setups": {},
    }
    try:
        for workers in sizes:
            label = f"{workers} worker{'s' if workers > 1 else ''}"
            result["setups"][label] = on_cluster(workers, root, args)
            write_json(args.name, result)
            if not args.no_local:
                print(f"local[{workers}]:", flush=True)
                result["setups"][f"local[{workers}]"] = epochs_on(
                    f"local[{workers}]", root / f"taxi_local_{workers}", args.epochs, args.trips
                )
                write_json(args.name, result)
        plot(result, RESULTS / f"{args.name}.png")
        print(f"wrote {RESULTS / (args.name + '.json')} and {RESULTS / (args.name + '.png')}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

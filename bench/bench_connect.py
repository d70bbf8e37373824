"""Two ways to keep Spark warm between commands, on the taxi demo's commands:
dd_etl's server process (``dd-etl`` hands each command to it) and a local Spark
Connect server (``dd_etl.spark_connect``; each ``dd-etl`` runs in its own
process as a Connect client). Side by side in one process, one after the other:

    python bench/bench_connect.py [--epochs 6] [--repeats 3]
    python bench/bench_connect.py --trips 10000000 --change 0.001 --epochs 3

Per way: a fresh server, the demo's epochs (``dd-etl run``, the first being the
load), ``read`` and ``status`` repeated, then a scheduled tick on a fresh server
(the warm one stopped, as an idle one leaves after 15 minutes): what an hourly
schedule meets. Wall seconds of each whole command, as a user waits for it.
By default the demo's sizes (1,200 trips loaded, 400 new an epoch); ``--trips``
loads that many (generated once, copied for each way) and ``--change`` makes
each epoch's new trips that share of them. Records ``results/connect.json`` and
``results/connect.png`` (``connect_<trips>.json`` and ``.png`` with ``--trips``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, code_version, write_json  # noqa: E402
from dd_etl import spark_connect  # noqa: E402

TAXI = ROOT / "assets" / "taxi"
PORT = 15131


def demo_copy(root: Path) -> Path:
    root.mkdir(parents=True)
    text = (TAXI / "pipeline.yaml").read_text()
    lines = ["warehouse: warehouse" if x.startswith("warehouse:") else x for x in text.splitlines()]
    (root / "pipeline.yaml").write_text("\n".join(lines) + "\n")
    return root / "pipeline.yaml"


def timed(args: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{done.stderr[-3000:]}")
    return round(seconds, 3)


class Data:
    """The demo's data at the sizes chosen: the load generated once, copied for
    each way; the later epochs generated in place."""

    def __init__(self, root: Path, trips: int | None, change: float) -> None:
        self.loaded = trips
        self.new = 400 if trips is None else max(1, round(trips * change))
        self.load = root / "load"
        self._generate(self.load, 0)

    def generate(self, root: Path, epoch: int) -> None:
        if epoch == 0:
            shutil.copytree(self.load, root / "data")
        else:
            self._generate(root / "data", epoch)

    def _generate(self, data: Path, epoch: int) -> None:
        args = [str(data), "--epoch", str(epoch), "--trips", str(self.new)]
        if self.loaded is not None:
            args += ["--loaded", str(self.loaded)]
        subprocess.run(
            [sys.executable, str(TAXI / "generate.py"), *args], check=True, capture_output=True
        )


def commands(
    pipeline: Path, data: Data, env: dict[str, str], epochs: int, repeats: int, restart: Any
) -> dict[str, Any]:
    dd_etl = [sys.executable, "-m", "dd_etl.cli"]
    runs = []
    for epoch in range(epochs):
        data.generate(pipeline.parent, epoch)
        runs.append(timed([*dd_etl, "run", str(pipeline)], env))
        print(f"  epoch {epoch}: {runs[-1]}s", flush=True)
    reads = [
        timed([*dd_etl, "read", str(pipeline), "trips_by_borough"], env) for _ in range(repeats)
    ]
    statuses = [timed([*dd_etl, "status", str(pipeline)], env) for _ in range(repeats)]
    restart()
    data.generate(pipeline.parent, epochs)
    cold = timed([*dd_etl, "run", str(pipeline)], env)
    print(f"  reads {reads}, statuses {statuses}, tick on a fresh server {cold}s", flush=True)
    return {"runs": runs, "read": reads, "status": statuses, "cold_tick": cold}


def through_server(root: Path, data: Data, epochs: int, repeats: int) -> dict[str, Any]:
    env = {**os.environ, "DD_ETL_SERVER_DIR": str(root / "servers")}
    env.pop("DD_ETL_SERVER", None)

    def stop() -> None:
        subprocess.run([sys.executable, "-m", "dd_etl.cli", "server", "stop"], env=env, check=True)
        time.sleep(2)

    try:
        return commands(demo_copy(root / "server"), data, env, epochs, repeats, stop)
    finally:
        stop()


def through_connect(root: Path, data: Data, epochs: int, repeats: int) -> dict[str, Any]:
    state = root / "connect_server"
    starts: list[float] = []

    def start() -> str:
        started = time.perf_counter()
        url = spark_connect.start(state, PORT, "local[2]", {"spark.ui.enabled": "false"})
        starts.append(round(time.perf_counter() - started, 3))
        return url

    def restart() -> None:
        spark_connect.stop(state)
        start()

    env = {**os.environ, "DD_ETL_SERVER": "off", "DD_ETL_SPARK_REMOTE": start()}
    try:
        result = commands(demo_copy(root / "connect"), data, env, epochs, repeats, restart)
    finally:
        spark_connect.stop(state)
    return {**result, "server_start": starts}


def plot(result: dict[str, Any], path: Path, sizes: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ways = ("server", "connect")
    labels = ["load", "epoch (median of later)", "read", "status", "tick, fresh server"]

    def values(r: dict[str, Any]) -> list[float]:
        return [
            r["runs"][0],
            statistics.median(r["runs"][1:]),
            statistics.median(r["read"]),
            statistics.median(r["status"]),
            r["cold_tick"],
        ]

    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.38
    for i, way in enumerate(ways):
        xs = [x + (i - 0.5) * width for x in range(len(labels))]
        name = "dd_etl server" if way == "server" else "Spark Connect server"
        ax.bar(xs, values(result[way]), width, label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel("seconds of the whole command")
    ax.set_title(f"taxi demo ({sizes}): dd_etl's server vs a local Spark Connect server")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--trips", type=int, help="trips loaded (default: the demo's 1,200)")
    parser.add_argument("--change", type=float, default=0.001, help="new trips an epoch, a share")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench_connect_"))
    name = "connect" if args.trips is None else f"connect_{args.trips}"
    try:
        data = Data(root, args.trips, args.change)
        loaded = 3 * data.new if args.trips is None else args.trips
        sizes = f"{loaded:,} trips loaded, {data.new:,} new an epoch"
        result: dict[str, Any] = {
            "environment": {"code": code_version(), "cpu_count": os.cpu_count()},
            "epochs": args.epochs,
            "trips_loaded": loaded,
            "new_trips_per_epoch": data.new,
        }
        print(f"{sizes}; dd_etl server:", flush=True)
        result["server"] = through_server(root, data, args.epochs, args.repeats)
        print("Spark Connect:", flush=True)
        result["connect"] = through_connect(root, data, args.epochs, args.repeats)
        write_json(name, result)
        plot(result, RESULTS / f"{name}.png", sizes)
        print(f"wrote {RESULTS / name}.json and .png")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()

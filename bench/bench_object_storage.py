"""The taxi demo with its warehouse, sources and sinks on S3 against the same
pipeline on a local disk, epoch by epoch in one Spark session:

    python bench/bench_object_storage.py [--epochs 8]
    python bench/bench_object_storage.py --trips 1000000 --change 0.001 --epochs 4

The store is S3Proxy (in memory, on this machine: no network's latency, only
the requests' own cost). Three copies of the pipeline take the same data each
epoch: on the local disk, on S3, and on S3 through a proxy that counts the
requests (GET, HEAD, PUT, POST, DELETE, and LIST: a GET of a bucket) without
changing them. The first two are timed (``run_tick``, as a warm server runs
it); the third's counts are per epoch, where they should follow the traces an
epoch touches, not the traces' history. Records ``results/object_storage.json``
and ``.png`` (``object_storage_<trips>`` with ``--trips``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from bench.common import code_version, environment, run_recorded  # noqa: E402
from dd_etl.pipeline import open_pipeline  # noqa: E402
from dd_etl.pipeline.tick import run_tick  # noqa: E402
from tests.support.cluster_pipelines import taxi_generator, taxi_pipeline  # noqa: E402
from tests.support.faulty_proxy import FaultyProxy, Seen, proxying  # noqa: E402
from tests.support.s3_pipelines import KEY_ENV, SECRET_ENV, on_store, upload  # noqa: E402
from tests.support.s3_server import S3Server, started  # noqa: E402

WAYS = ("local", "s3")


def kind(request: Seen) -> str:
    """A request by what it does: a GET of a bucket (no key) is a listing."""
    path = urlparse(request.path).path.strip("/")
    return "LIST" if request.method == "GET" and "/" not in path else request.method


def benchmark(
    spark: SparkSession, root: Path, server: S3Server, proxy: FaultyProxy, args: argparse.Namespace
) -> dict[str, Any]:
    generate = taxi_generator().generate
    buckets = {"s3": server.bucket(), "counted": server.bucket()}
    files = {
        "local": taxi_pipeline(root / "local", "../data"),
        "s3": on_store(taxi_pipeline(root / "s3", "data"), server, buckets["s3"]),
        "counted": on_store(
            taxi_pipeline(root / "counted", "data"), server, buckets["counted"], proxy.endpoint
        ),
    }
    epochs: list[dict[str, Any]] = []
    new_trips = max(1, int(args.trips * args.change)) if args.trips else 400
    for epoch in range(args.epochs):
        said = generate(root / "data", epoch, new_trips, args.trips or None)
        for bucket in buckets.values():
            upload(root / "data", server, bucket)
        record: dict[str, Any] = {"epoch": epoch, "data": said}
        for way in (*WAYS, "counted"):
            before = len(proxy.seen())
            started_at = time.perf_counter()
            run_tick(open_pipeline(files[way], spark))
            seconds = round(time.perf_counter() - started_at, 3)
            if way == "counted":
                record["requests"] = dict(Counter(kind(s) for s in proxy.seen()[before:]))
            else:
                record[way] = seconds
        print(epoch, {k: v for k, v in record.items() if k != "data"}, flush=True)
        epochs.append(record)
    return {
        "benchmark": "object_storage",
        "code": code_version(),
        "trips": args.trips or "demo",
        "change": args.change if args.trips else None,
        "epochs": epochs,
        "environment": environment(spark, store="S3Proxy 4.0.0, transient-nio2, 127.0.0.1"),
    }


def plot(result: dict[str, Any], path: Path) -> None:
    fig = Figure(figsize=(10, 4))
    FigureCanvasAgg(fig)
    seconds, requests = fig.subplots(1, 2)
    epochs = [e["epoch"] for e in result["epochs"]]
    for way in WAYS:
        seconds.plot(epochs, [e[way] for e in result["epochs"]], "o-", label=way)
    kinds = sorted({k for e in result["epochs"] for k in e["requests"]})
    bottom = [0] * len(epochs)
    for k in kinds:
        counts = [e["requests"].get(k, 0) for e in result["epochs"]]
        requests.bar(epochs, counts, bottom=bottom, label=k)
        bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
    seconds.set_title("seconds per epoch (epoch 0: the load)")
    requests.set_title("object-store requests per epoch")
    for ax in (seconds, requests):
        ax.set_xlabel("epoch")
        ax.legend()
    fig.suptitle(f"the taxi demo on S3 and on a local disk ({result['trips']} trips)")
    fig.savefig(path, dpi=100)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--trips", type=int, default=0, help="loaded trips (default: the demo's)")
    parser.add_argument("--change", type=float, default=0.001)
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    name = f"object_storage_{args.trips}" if args.trips else "object_storage"
    with started() as server, proxying(server.endpoint) as proxy:
        os.environ |= {KEY_ENV: server.access_key, SECRET_ENV: server.secret_key}
        run_recorded(
            name,
            lambda spark, root: benchmark(spark, root, server, proxy, args),
            plot,
            args.workdir,
            args.keep,
            object_storage=True,
        )


if __name__ == "__main__":
    main()

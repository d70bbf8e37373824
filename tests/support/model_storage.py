"""An in-memory ``Storage``: the pure-Python model of the Delta store.

It follows the same contract as ``DeltaStorage`` (compare-and-set commits of
state plus file actions, files sorted and split by key hash, merges by hash
slice) so the trace logic can be checked exhaustively without Spark.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterable, Sequence

from dd_etl.lattice import Antichain, Time, advance_by
from dd_etl.trace.batch import DataFile, batch_dir, batch_id_of_path
from dd_etl.trace.columns import KEY_HASH, time_columns
from dd_etl.trace.file_stats import make_stats
from dd_etl.trace.placement import BULK, Placement
from dd_etl.trace.spine import HashRange
from dd_etl.trace.state import Merge, TraceState
from dd_etl.trace.storage import Commit, Snapshot, StaleVersion
from dd_etl.trace.trace import Trace

Data = tuple[object, ...]
Update = tuple[Data, Time, int]


def key_hash(data: Data) -> int:
    digest = hashlib.blake2b(repr(data[0]).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def consolidate(updates: Iterable[Update]) -> list[Update]:
    sums: dict[tuple[Data, Time], int] = defaultdict(int)
    for data, t, diff in updates:
        sums[(data, t)] += diff
    return [(d, t, n) for (d, t), n in sums.items() if n != 0]


def accumulate(updates: Iterable[Update], at: Time | None) -> dict[Data, int]:
    from dd_etl.lattice import less_equal

    out: dict[Data, int] = defaultdict(int)
    for data, t, diff in updates:
        if at is None or less_equal(t, at):
            out[data] += diff
    return {d: n for d, n in out.items() if n != 0}


class MemoryStorage:
    def __init__(self, name: str = "model", dims: int = 1, rows_per_file: int = 2) -> None:
        self.rows_per_file = rows_per_file
        self.blobs: dict[str, list[Update]] = {}
        self.stats: dict[str, DataFile] = {}
        state = TraceState.new(name, dims, ("k",), "{}")
        self.versions: list[tuple[TraceState, frozenset[str]]] = [(state, frozenset())]
        self.txns: dict[str, int] = {}
        self._files_written = 0

    def load(self, known: Snapshot | None = None) -> Snapshot:
        state, paths = self.versions[-1]
        files: dict[str, list[DataFile]] = defaultdict(list)
        for p in sorted(paths):
            files[batch_id_of_path(p)].append(self.stats[p])
        return Snapshot(len(self.versions) - 1, state, dict(files))

    def stamp(self, version: int) -> object:
        return None

    def commit(self, expected_version: int, commit: Commit) -> int:
        if expected_version != len(self.versions) - 1:
            raise StaleVersion(f"at {len(self.versions) - 1}, expected {expected_version}")
        _, paths = self.versions[-1]
        added = {f.path for f in commit.add}
        removed = {f.path for f in commit.remove}
        assert not added & removed and removed <= paths and all(p in self.blobs for p in added)
        self.versions.append((commit.state, (paths - removed) | added))
        if commit.txn_version is not None:
            self.txns[commit.state.name] = commit.txn_version
        return expected_version + 1

    def _write(
        self, directory: str, state: TraceState, updates: Iterable[Update]
    ) -> list[DataFile]:
        rows = sorted(consolidate(updates), key=lambda u: (key_hash(u[0]), repr(u)))
        files = []
        for i in range(0, len(rows), self.rows_per_file):
            chunk = rows[i : i + self.rows_per_file]
            self._files_written += 1
            path = f"{directory}/part-{self._files_written:05d}.parquet"
            self.blobs[path] = chunk
            hashes = [key_hash(d) for d, _, _ in chunk]
            mins = {KEY_HASH: min(hashes)}
            maxs = {KEY_HASH: max(hashes)}
            for j, c in enumerate(time_columns(state.dims)):
                mins[c] = min(t[j] for _, t, _ in chunk)
                maxs[c] = max(t[j] for _, t, _ in chunk)
            f = DataFile(path, len(chunk) * 10, len(chunk), make_stats(len(chunk), mins, maxs))
            self.stats[path] = f
            files.append(f)
        return files

    def write_batch(
        self,
        state: TraceState,
        batch_id: str,
        updates: list[Update],
        at_most: int | None = None,
        distinct: bool = False,
        placement: Placement = BULK,
    ) -> list[DataFile]:
        # where the work runs changes nothing in memory (``placement``); a caller's
        # bound must hold: Delta storage trusts it and writes nothing for 0
        assert at_most is None or len(consolidate(updates)) <= at_most, "bound broken"
        # and so must its word that no two updates share data and time
        assert not distinct or len({(d, t) for d, t, _ in updates}) == len(updates), "not distinct"
        return self._write(batch_dir(batch_id), state, updates)

    def merge_slice(
        self, state: TraceState, merge: Merge, inputs: Sequence[DataFile], hashes: HashRange
    ) -> list[DataFile]:
        picked = [
            (d, advance_by(t, merge.since), n)
            for f in inputs
            for d, t, n in self.blobs[f.path]
            if hashes.start <= key_hash(d) < hashes.end
        ]
        return self._write(f"{batch_dir(merge.id)}/{hashes.start}", state, picked)

    def discard(self, files: Sequence[DataFile]) -> None:
        for f in files:
            self.blobs.pop(f.path, None)

    def exists(self, file: DataFile) -> bool:
        return file.path in self.blobs


class ModelTrace(Trace[list[Update]]):
    storage: MemoryStorage

    def updates(self) -> list[Update]:
        return [u for f in self.files() for u in self.storage.blobs[f.path]]

    def read_at(self, at: Time | None) -> dict[Data, int]:
        if at is not None:
            assert self.state.since.less_equal_time(at)
        return accumulate(self.updates(), at)


def model_trace(dims: int = 1, rows_per_file: int = 2) -> ModelTrace:
    return ModelTrace(MemoryStorage(dims=dims, rows_per_file=rows_per_file))


def frontier(*times: Time) -> Antichain:
    return Antichain(times)

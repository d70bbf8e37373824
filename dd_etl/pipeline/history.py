"""Loading a source's history: the data that was there before the pipeline
started, taken in oldest first as a sequence of epochs (so every view's history,
``read --as-of`` and the change feeds reflect it) rather than as one big epoch.

Each epoch is an ordinary tick whose sources take in at most ``per_epoch`` new
files or table versions. A load that is stopped, or crashes, continues where
it stopped when run again: the positions taken in are committed with each epoch.
"""

from __future__ import annotations

from collections.abc import Callable

from dd_etl.errors import PipelineError
from dd_etl.pipeline.build import Pipeline
from dd_etl.pipeline.progress import Progress
from dd_etl.pipeline.status import tick_due
from dd_etl.pipeline.tick import TickReport, _quiet, next_epoch, run_tick


class EpochOutOfOrder(PipelineError):
    pass


def load_history(
    pipeline: Pipeline,
    per_epoch: int = 1,
    from_epoch: int | None = None,
    to_epoch: int | None = None,
    progress: Progress = _quiet,
    on_epoch: Callable[[TickReport], None] | None = None,
) -> list[TickReport]:
    """Ticks of at most ``per_epoch`` new files/versions per source until the sources
    are caught up (or epoch ``to_epoch`` is done). Epochs are taken in order:
    ``from_epoch`` past the next one is refused; epochs already committed are skipped."""
    if per_epoch < 1:
        raise PipelineError(f"per_epoch must be at least 1, not {per_epoch}")
    epoch, _ = next_epoch(pipeline)
    if from_epoch is not None and from_epoch > epoch:
        raise EpochOutOfOrder(
            f"epochs are taken in order: pipeline {pipeline.name!r} is at epoch {epoch}, "
            f"so epoch {from_epoch} cannot be loaded before epochs {epoch}..{from_epoch - 1}"
        )
    done: list[TickReport] = []
    while True:
        if to_epoch is not None and epoch > to_epoch:
            break  # already committed: nothing to do
        if tick_due(pipeline.loaded) is None:  # caught up, no epoch left open
            break
        report = run_tick(pipeline, progress, limit=per_epoch)
        done.append(report)
        if on_epoch is not None:
            on_epoch(report)
        epoch, _ = next_epoch(pipeline)
    return done

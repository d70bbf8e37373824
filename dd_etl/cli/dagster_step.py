"""``dd-etl dagster-step``, hidden: a Dagster step of a pipeline's assets that a
Dagster process handed to the server (``dd_etl.dagster.step``)."""

from __future__ import annotations

import typer

app = typer.Typer()


@app.command("dagster-step", hidden=True)
def dagster_step(step: str) -> None:
    """Run the step (JSON) here: progress on standard error, results on standard output."""
    from dd_etl.dagster.step import Step, answer

    answer(Step.from_json(step))

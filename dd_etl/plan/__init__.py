"""Dataflow graphs: the Python collection API, and (later) SQL compiled to it."""

from dd_etl.plan.dataflow import Collection, Dataflow

__all__ = ["Collection", "Dataflow"]

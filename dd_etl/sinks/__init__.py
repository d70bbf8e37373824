"""Where views go besides their traces: plain Delta tables kept current, change feeds."""

from dd_etl.sinks.change_feed import ChangeFeed
from dd_etl.sinks.materialized import MaterializedView

__all__ = ["ChangeFeed", "MaterializedView"]

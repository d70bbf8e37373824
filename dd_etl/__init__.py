"""dd_etl."""

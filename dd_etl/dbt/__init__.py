"""dbt projects as pipelines: dbt-core compiles the project (``compiler.py``), what
cannot be kept up to date is refused (``refusals.py``), and its models, seeds,
sources and tests become the pipeline's views and sources (``views.py``), its
tests' failures read as ``dbt test`` reads them (``tests.py``)."""

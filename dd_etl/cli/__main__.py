"""``python -m dd_etl.cli``: the ``dd-etl`` command."""

from dd_etl.cli.app import app

if __name__ == "__main__":
    app(prog_name="dd-etl")

"""``python -m dd_etl.cli``: the ``dd-etl`` command."""

from dd_etl.cli.main import main

if __name__ == "__main__":
    main()

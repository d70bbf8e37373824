"""Where a record of a CSV file starts: the line an error about one of its values
names, so that the user finds the row to correct.

Spark's reader does not say which line a row came from, so once Spark has found a
bad value (its file, its column and the text read), the driver reads that file
again with Python's ``csv`` module, split the way Spark's options say, and counts
lines to the first record holding that text in that column. Lines are counted
as a text editor numbers them: from 1, the header line counted, a record that
spans lines (a quoted line break) at the line where it starts.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO

from dd_etl.lake import Location


def record_line(file: Location, column: int, value: str, options: Mapping[str, str]) -> int | None:
    """The line of ``file`` where the first record whose ``column``-th field (from 0)
    reads ``value`` starts, the file split as Spark's CSV ``options`` say; None when
    no record does (options the ``csv`` module cannot follow, or an unreadable file:
    the error then names the file alone)."""
    split = _split({k.lower(): v for k, v in options.items()})
    if split is None:
        return None
    try:
        with _text(file, split.encoding) as stream:
            records = csv.reader(
                _comments_blanked(stream, split.comment),
                delimiter=split.delimiter,
                quotechar=split.quote,
                escapechar=split.escape,
                quoting=csv.QUOTE_MINIMAL if split.quote else csv.QUOTE_NONE,
            )
            header = split.header
            start = 1  # empty lines are no records (as in Spark), but count as lines
            for record in records:
                if record and header:
                    header = False
                elif column < len(record) and record[column] == value:
                    return start
                start = records.line_num + 1
    except (OSError, csv.Error):
        return None
    return None


@dataclass(frozen=True)
class _Split:
    """How Spark's options split a CSV file, as the ``csv`` module takes it."""

    header: bool
    comment: str
    encoding: str
    delimiter: str
    quote: str | None
    escape: str | None


def _split(options: Mapping[str, str]) -> _Split | None:
    """Spark's CSV options (lower-cased names) as a ``_Split``; None when the ``csv``
    module cannot split the file so (a separator of several characters)."""
    sep = options.get("sep", options.get("delimiter", ","))
    sep = {"\\t": "\t"}.get(sep, sep)
    quote = options.get("quote", '"')  # Spark: an empty quote turns quoting off
    escape = options.get("escape", "\\")
    if len(sep) != 1 or len(quote) > 1 or len(escape) > 1:
        return None
    return _Split(
        header=options.get("header", "false").strip().lower() == "true",
        comment=options.get("comment", ""),
        encoding=options.get("encoding", options.get("charset", "utf-8")),
        delimiter=sep,
        quote=quote or None,
        escape=escape or None,
    )


def _text(file: Location, encoding: str) -> IO[str]:
    """The file as text for the ``csv`` module (line ends kept), gzip or not (told
    by its name); bytes the encoding cannot read are replaced rather than stopping
    the search."""
    stream = file.filesystem.open_input_stream(file.fs_path, compression="detect")
    return io.TextIOWrapper(stream, encoding=encoding, errors="replace", newline="")


def _comments_blanked(lines: Iterator[str], comment: str) -> Iterator[str]:
    """``lines`` with those that start with ``comment`` made empty: Spark skips
    them, and the line count keeps them."""
    for line in lines:
        yield "\n" if comment and line.startswith(comment) else line

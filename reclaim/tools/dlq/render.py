"""How ``reclaim dlq`` prints: rich tables for people, one JSON document with ``--json``."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from reclaim.tools.dlq.records import DeadLetter, iso, record_fields, text
from reclaim.tools.dlq.selection import Selection, Stats, age_ms

ERROR_COLUMN_CHARS = 80
"""The error message as a table shows it; ``show`` prints all of it."""


def console(*, stderr: bool = False) -> Console:
    """A console that keeps long names whole when the output is not a terminal (a pipe, a file)."""
    stream = sys.stderr if stderr else sys.stdout
    return Console(file=stream, width=None if stream.isatty() else 400, soft_wrap=False)


def print_json(value: object) -> None:
    print(json.dumps(value, indent=2, default=str))


def ago(millis: int | None) -> str:
    """``42s``, ``5m``, ``3h``, ``2d`` (rounded down); ``?`` when unknown."""
    if millis is None:
        return "?"
    seconds = millis // 1000
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def letters_table(letters: Sequence[DeadLetter], now_ms: int) -> Table:
    """One row per dead letter: where, when, why, which chunk and where it came from."""
    table = Table(box=None, header_style="bold")
    table.add_column("at", no_wrap=True)
    table.add_column("age", no_wrap=True, justify="right")
    table.add_column("outcome", no_wrap=True)
    table.add_column("error class", no_wrap=True)
    table.add_column("attempt", justify="right")
    table.add_column("stream", no_wrap=True)
    table.add_column("chunk", overflow="fold")
    table.add_column("origin", no_wrap=True)
    table.add_column("group", no_wrap=True)
    table.add_column("error", no_wrap=True, overflow="ellipsis", max_width=ERROR_COLUMN_CHARS)
    for letter in letters:
        table.add_row(letter.coordinates, ago(age_ms(letter, now_ms)), letter.outcome, letter.error_class,
                      str(letter.attempt or ""), letter.stream, letter.chunk, str(letter.origin or ""),
                      letter.group, Text(" ".join(letter.error.split())))
    return table


def counts_line(topic: str, selection: Selection[Any], newest_first: bool) -> str:
    """The counts every listing ends with, e.g. ``3 matching of 10 records in t (1 duplicate left out)``."""
    shown = len(selection.records)
    order = "newest" if newest_first else "oldest"
    copies = f", {selection.duplicates} duplicate(s) left out" if selection.duplicates else ""
    limited = f"; showing the {order} {shown}" if shown < selection.unique else ""
    return f"{selection.matching} matching of {selection.total} records in {topic}{copies}{limited}"


def print_list(topic: str, selection: Selection[DeadLetter], now_ms: int, newest_first: bool) -> None:
    out = console()
    if selection.records:
        out.print(letters_table(selection.records, now_ms))
    out.print(counts_line(topic, selection, newest_first), highlight=False)


def print_show(letter: DeadLetter) -> None:
    """Every part of one record: where it sits, why it is there, the decoded value, every header."""
    table = Table(box=None, show_header=False)
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold")
    where: tuple[tuple[str, object], ...] = (
        ("record", letter.coordinates), ("topic", letter.topic),
        ("dead-lettered at", _when(letter.timestamp_ms)), ("key", text(letter.key)))
    why: tuple[tuple[str, object], ...] = (
        ("outcome", letter.outcome), ("error class", letter.error_class), ("error", letter.error),
        ("attempt", letter.attempt), ("origin", letter.origin),
        ("original timestamp", _when(letter.original_timestamp_ms)), ("group", letter.group), ("stack", letter.stack))
    decoded = _flat(record_fields(letter.info)) if letter.info is not None else [("decode error", letter.decode_error)]
    headers = [(f"header {key}", text(data)) for key, data in letter.headers]
    for index, section in enumerate((where, why, decoded, headers)):
        if index:
            table.add_row()
        for name, value in section:
            table.add_row(name, Text("" if value is None else str(value)))
    console().print(table)


def _when(millis: int | None) -> str:
    if millis is None:
        return "unknown"
    return f"{iso(millis) or 'not a date'} ({millis})"


def _flat(fields: Mapping[str, object], prefix: str = "") -> list[tuple[str, str]]:
    rows: list[tuple[str, str]] = []
    for name, value in fields.items():
        if isinstance(value, Mapping):
            rows.extend(_flat(value, f"{prefix}{name}.") if value else [(f"{prefix}{name}", "{}")])
        else:
            rows.append((f"{prefix}{name}", "" if value is None else str(value)))
    return rows


def print_stats(topic: str, stats: Stats) -> None:
    out = console()
    for title, counts in (("outcome", stats.by_outcome), ("error class", stats.by_error_class),
                          ("stream", stats.by_stream), ("dead-lettered", stats.by_age)):
        table = Table(title, "records", box=None, header_style="bold")
        for name, count in counts.items():
            table.add_row(Text(name), str(count))
        out.print(table)
        out.print()
    chosen = stats.selection
    copies = f", {chosen.duplicates} duplicate(s) left out" if chosen.duplicates else ""
    out.print(f"{chosen.unique} record(s) counted: {chosen.matching} matching of {chosen.total} records in "
              f"{topic}{copies}", highlight=False)

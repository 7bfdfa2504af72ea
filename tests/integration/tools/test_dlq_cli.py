"""``reclaim dlq list | show | stats`` against a real broker, as an operator runs them: the figures match
what a real worker dead-lettered; copies of one record count once; failures are one line."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.exits import ExitCode
from reclaim.tools.topics import admin_client, create_topics, topic_specs
from tests.support.cli import run_reclaim
from tests.support.dlq import FATAL, SLOW, dead_letter, dlq, env_of, flush, one_line_error, pending
from tests.support.pipeline import Pipeline, outcomes

pytestmark = pytest.mark.integration


"""When the forged dead letters' original records were written (plus their offset)."""


def test_list_show_and_stats_match_what_a_real_worker_dead_lettered(pipe: Pipeline, tmp_path: Path) -> None:
    before = int(time.time() * 1000)
    forged = [pending("scope/stream/../escape"),  # a name no binding addresses: raised, so with a stack
              pending("scope/stream/0.#epoch.0.E-1-O-0.x", binding="nowhere"),
              pending("scope/other/0.#epoch.0.E-1-O-0.y", stream="scope/other", binding="nowhere")]
    for info in forged:
        pipe.producer.send(pipe.topics.deletion, pipe.codec.encode(info, pipe.topics.deletion),
                           key=info.chunk_name.encode())
    pipe.producer.send(pipe.topics.deletion, b"not avro at all", key=b"poison")
    flush(pipe)
    worker = pipe.worker()
    reports = pipe.drain(worker, lambda rs: sum(r.dead_lettered for r in rs) >= 4)
    assert outcomes(reports) == {"fatal": 3, "undecodable": 1}
    after = int(time.time() * 1000)

    listing = dlq(pipe, tmp_path, "list")
    assert {k: listing[k] for k in ("total", "matching", "unique", "duplicates", "shown")} == {
        "total": 4, "matching": 4, "unique": 4, "duplicates": 0, "shown": 4}
    records = listing["records"]
    assert [r["offset"] for r in records] == sorted((r["offset"] for r in records), reverse=True)  # newest first
    assert {r["group"] for r in records} == {pipe.group_id}
    assert all(before <= r["original_timestamp_ms"] <= after for r in records)
    assert all(r["origin"].startswith(pipe.topics.deletion + "[") for r in records)
    by_chunk = {r["chunk"]: r for r in records}
    escape = by_chunk["scope/stream/../escape"]
    assert (escape["outcome"], escape["error_class"], escape["attempt"]) == ("fatal", "InvalidChunkNameError", 1)

    shown = dlq(pipe, tmp_path, "show", f"{escape['partition']}:{escape['offset']}")
    assert shown["record"]["chunk_name"] == "scope/stream/../escape" and shown["record"]["mark_id"] == "mark-forged"
    assert shown["stack"].startswith("InvalidChunkNameError at ") and "validate_chunk_name" in shown["stack"]
    headers = {h["key"]: h["value"] for h in shown["headers"]}
    assert headers["reclaim.group"] == pipe.group_id and headers["reclaim.outcome"] == "fatal"
    poison = by_chunk["<undecodable>"]
    undecodable = dlq(pipe, tmp_path, "show", "--partition", str(poison["partition"]), "--offset",
                      str(poison["offset"]))
    assert undecodable["record"] is None and undecodable["decode_error"].startswith("wrong marker bytes")
    assert undecodable["key"] == "poison"

    counted = dlq(pipe, tmp_path, "stats")
    assert counted["by_outcome"] == {"fatal": 3, "undecodable": 1}
    assert counted["by_error_class"] == {"UnknownBinding": 2, "InvalidChunkNameError": 1, "RecordDecodeError": 1}
    assert counted["by_stream"] == {"scope/stream": 2, "(undecodable)": 1, "scope/other": 1}
    assert counted["by_age"] == {"<1h": 4, "<1d": 0, "<7d": 0, "older": 0}
    assert dlq(pipe, tmp_path, "stats", "--error-class", "UnknownBinding", "--stream", "scope/other")["unique"] == 1

    # The table an operator reads: every chunk, and the counts on the last line.
    table = run_reclaim("dlq", "list", "--limit", "2", "--oldest-first", env=env_of(pipe, tmp_path), timeout=120,
                        check=True).stdout
    assert "scope/stream/../escape" in table or "scope/stream/0.#epoch.0.E-1-O-0.x" in table
    assert table.rstrip().endswith(f"4 matching of 4 records in {pipe.topics.dlq}; showing the oldest 2")


def test_a_record_dead_lettered_by_two_groups_is_listed_and_counted_once(pipe: Pipeline, tmp_path: Path) -> None:
    dead_letter(pipe, 7, FATAL, "group-a")
    dead_letter(pipe, 8, SLOW, "group-a")
    dead_letter(pipe, 7, FATAL, "group-b")  # the same original record, from another group
    flush(pipe)
    listing = dlq(pipe, tmp_path, "list", "--oldest-first")
    assert (listing["total"], listing["unique"], listing["duplicates"]) == (3, 2, 1)
    assert [(r["offset"], r["group"]) for r in listing["records"]] == [(0, "group-a"), (1, "group-a")]
    counted = dlq(pipe, tmp_path, "stats")
    assert counted["by_outcome"] == {"fatal": 1, "retryable-error": 1} and counted["duplicates"] == 1
    assert dlq(pipe, tmp_path, "list", "--from-offset", "2")["records"][0]["group"] == "group-b"
    assert dlq(pipe, tmp_path, "list", "--reason", "INJECTED", "--attempt", "3")["unique"] == 1
    assert dlq(pipe, tmp_path, "list", "--attempt", "4")["matching"] == 0
    assert dlq(pipe, tmp_path, "list", "--newer-than", "1h", "--older-than", "1s")["unique"] == 2
    assert dlq(pipe, tmp_path, "list", "--older-than", "1h")["matching"] == 0


@pytest.mark.parametrize(("args", "message"), [
    (["list", "--limit", "-5"], "--limit must be at least 1, got -5"),
    (["list", "--limit", "ten"], "--limit: cannot read 'ten' as a whole number"),
    (["stats", "--older-than", "5x"], "--older-than: cannot read '5x' as a duration"),
    (["show"], "name the record: PARTITION:OFFSET"),
    (["show", "0-4"], "cannot read '0-4' as PARTITION:OFFSET"),
    (["replay", "--rate", "0"], "--rate must be a positive number"),
    (["purge"], "purge needs filters, --up-to PARTITION:OFFSET, or --all"),
    (["purge", "--up-to", "0:3", "--reason", "fatal"], "--up-to drops one partition's oldest records"),
    (["purge", "--all", "--reason", "fatal"], "--all drops every record: give it without filters"),
    (["replay", "--rate", "inf"], "--rate must be a positive number"),  # was an OverflowError traceback
    (["purge", "--reason", "", "--yes"], "--outcome/--reason must not be empty"),  # matched, so dropped, all
    (["list", "--stream", " "], "--stream must not be empty"),
    (["replay", "--from-offset", "5", "--to-offset", "3"], "--from-offset 5 is after --to-offset 3"),
    (["stats", "--newer-than", "1h", "--older-than", "2h"], "no record is both"),
])
def test_bad_flags_are_one_usage_line(tmp_path: Path, args: list[str], message: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    result = run_reclaim("dlq", *args, env={**env, "RECLAIM_STATE_DIR": str(tmp_path)}, timeout=60)
    assert message in one_line_error(result, ExitCode.USAGE)


def test_no_broker_or_no_topics_is_one_line_and_exit_2(kafka_bootstrap: str, tmp_path: Path,
                                                       unique_name: Callable[[str], str]) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    nobody = {**base, "RECLAIM_STATE_DIR": str(tmp_path), "RECLAIM_BOOTSTRAP": "127.0.0.1:1"}
    assert "cannot reach a Kafka broker at 127.0.0.1:1" in one_line_error(
        run_reclaim("dlq", "list", env=nobody, timeout=60), ExitCode.UNAVAILABLE)

    prefix = unique_name("t") + "."
    env = {**nobody, "RECLAIM_BOOTSTRAP": kafka_bootstrap, "RECLAIM_TOPIC_PREFIX": prefix}
    line = one_line_error(run_reclaim("dlq", "stats", env=env, timeout=60), ExitCode.UNAVAILABLE)
    assert f"missing topic {prefix}ledger-deletion.dlq" in line and "reclaim topics create" in line

    # A DLQ made before replays were remembered: replay asks for `reclaim topics create`.
    from reclaim.settings import Settings

    older = [spec for spec in topic_specs(Settings(topic_prefix=prefix)) if not spec.name.endswith("-replayed")]
    create_topics(admin_client(kafka_bootstrap), older)
    line = one_line_error(run_reclaim("dlq", "replay", env=env, timeout=60), ExitCode.UNAVAILABLE)
    assert f"missing topic {prefix}ledger-deletion.dlq-replayed" in line and "reclaim topics create" in line
    line = one_line_error(run_reclaim("dlq", "list", "--partition", "5", env=env, timeout=60), ExitCode.USAGE)
    assert f"{prefix}ledger-deletion.dlq has no partition 5 (it has 1)" in line  # not "0 matching"
    result = run_reclaim("dlq", "show", "0:0", env=env, timeout=60)
    assert f"no record at 0:0: partition 0 of {prefix}ledger-deletion.dlq holds no records" in one_line_error(
        result, ExitCode.USAGE)

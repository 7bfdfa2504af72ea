"""``reclaim deletions stalled`` against a real broker and store: a chunk retired long ago whose pending delete
was lost is found (and nothing else is), sent through phase 1 again with ``--resend``, and deleted by the
worker; then nothing is stalled."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from reclaim.exits import ExitCode
from reclaim.storage.chunks import ChunkHandle
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState
from tests.support.cli import run_reclaim
from tests.support.dlq import env_of
from tests.support.pipeline import Pipeline, outcomes

pytestmark = pytest.mark.integration

DAY = 86_400.0


def retire(pipe: Pipeline, chunk: ChunkRecord, mark_id: str, committed_s_ago: float) -> None:
    """``chunk`` retired under a committed mark, as phase 1 leaves it, with no pending delete sent: its record
    lost (purged from the DLQ, say)."""
    with pipe.store.transaction() as txn:
        row = txn.get_chunk(chunk.name)
        assert row is not None
        txn.put_chunk(replace(row, active=False, mark_id=mark_id))
        if txn.get_mark(mark_id) is None:
            txn.put_mark(MarkRecord(mark_id, MarkState.COMMITTED, time.time() - committed_s_ago))


def stalled(pipe: Pipeline, tmp_path: Path, *args: str, code: int) -> dict[str, object]:
    result = run_reclaim("deletions", "stalled", "--json", *args, env=env_of(pipe, tmp_path), timeout=120)
    assert result.returncode == code, (result.stdout, result.stderr)
    found: dict[str, object] = json.loads(result.stdout)
    return found


def test_a_chunk_whose_pending_delete_was_lost_is_found_resent_and_deleted(pipe: Pipeline, tmp_path: Path) -> None:
    [fs] = [pipe.bindings.get("fs-tier2")]
    assert isinstance(fs, FileSystemChunkStorage)
    lost, recent, gone, live = pipe.write_chunks(fs, "scope/stream/0.#epoch.0", 4)
    retire(pipe, lost, "mark-old", committed_s_ago=2 * DAY)
    retire(pipe, recent, "mark-recent", committed_s_ago=60)  # phase 2 may still be on its way
    retire(pipe, gone, "mark-old", committed_s_ago=2 * DAY)
    fs.delete(ChunkHandle(gone.name, read_only=False))  # deleted, its row's cleanup lost: the audit's dangling

    textfile = tmp_path / "reclaim_stalled.prom"
    found = stalled(pipe, tmp_path, "--metrics-file", str(textfile), code=ExitCode.FINDINGS)
    assert found["stalled"] == 1 and found["rows_checked"] == 4
    samples = {(s.name, tuple(s.labels.items())): s.value
               for family in text_string_to_metric_families(textfile.read_text()) for s in family.samples}
    assert samples[("reclaim_stalled_chunks", (("binding", "fs-tier2"),))] == 1.0
    assert time.time() - samples[("reclaim_stalled_last_run_timestamp_seconds", ())] < 120
    assert found["bindings"] == {"fs-tier2": {"count": 1, "names": [lost.name]}}
    assert stalled(pipe, tmp_path, "--older-than", "30s", code=ExitCode.FINDINGS)["stalled"] == 2
    text = run_reclaim("deletions", "stalled", env=env_of(pipe, tmp_path), timeout=120).stdout
    assert text.splitlines()[-1] == "total: 1 stalled of 4 chunk rows" and lost.name in text

    sent = stalled(pipe, tmp_path, "--resend", code=ExitCode.FINDINGS)
    assert sent["resent"] == {"count": 1, "names": [lost.name]} and sent["failed"] == {"count": 0, "names": []}
    worker = pipe.worker()
    reports = pipe.drain(worker, lambda rs: sum(sum(r.outcomes.values()) for r in rs) >= 1)
    assert outcomes(reports) == {"deleted": 1}
    assert not fs.exists(lost.name) and pipe.store.get_chunk(lost.name) is None
    assert fs.exists(recent.name) and fs.exists(live.name)
    assert stalled(pipe, tmp_path, "--metrics-file", str(textfile), code=ExitCode.OK)["stalled"] == 0
    assert 'reclaim_stalled_chunks{binding="fs-tier2"} 0.0' in textfile.read_text()


def test_flags_of_stalled_are_refused_with_inflight_and_a_bad_metrics_file_before_anything(
        pipe: Pipeline, tmp_path: Path) -> None:
    result = run_reclaim("deletions", "inflight", "--resend", env=env_of(pipe, tmp_path), timeout=60)
    assert result.returncode == ExitCode.USAGE
    assert result.stderr.strip() == ("reclaim: error: deletions inflight: unrecognized arguments: --resend "
                                     "(see reclaim deletions inflight --help)")
    refused = run_reclaim("deletions", "stalled", "--metrics-file", str(tmp_path / "no-dir" / "s.prom"),
                          env=env_of(pipe, tmp_path), timeout=60)
    assert refused.returncode == ExitCode.UNAVAILABLE
    assert refused.stderr.strip().endswith(f"there is no directory {tmp_path / 'no-dir'}; nothing was checked")

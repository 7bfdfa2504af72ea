"""Helpers of the ``reclaim dlq`` tests: dead letters on the real broker and the command run on them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from reclaim.consumers.retry import Delivery, RetryTiers
from reclaim.consumers.routing import route
from reclaim.deletion.outcomes import Outcome, Route, Verdict
from reclaim.schemas.ledger import ChunkLocation, LedgerComponent, LedgerType, PendingDeleteLedgerInfo, ledger_id_for
from tests.support.cli import run_reclaim
from tests.support.pipeline import Pipeline


def env_of(pipeline: Pipeline, tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a ``reclaim`` command serving ``pipeline``."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    return {**base, **pipeline.worker_env(tmp_path / "tier2"), **extra}


def dlq(pipeline: Pipeline, tmp_path: Path, *args: str, code: int = 0, **extra: str) -> Any:
    """``reclaim dlq <args> --json``'s document, after checking the exit status."""
    result = run_reclaim("dlq", *args, "--json", env=env_of(pipeline, tmp_path, **extra), timeout=120)
    assert result.returncode == code, (result.stdout, result.stderr)
    return json.loads(result.stdout)


def dead_letter(pipeline: Pipeline, origin_offset: int, verdict: Verdict, group: str,
                chunk: str | None = None) -> None:
    """Produce a DLQ record with exactly the headers the worker's routing writes for ``verdict``."""
    chunk = chunk or f"scope/stream/0.#epoch.0.E-1-O-{origin_offset}.forged"
    now = int(time.time() * 1000)
    tiers = RetryTiers(pipeline.topics.retries, max_attempts=3)
    # Its last try; every group that reads the original record sees its one timestamp.
    delivery = Delivery(3, now - 5000, None, pipeline.topics.deletion, 0, origin_offset, ORIGINALS_AT + origin_offset)
    routing = route(verdict, delivery, tiers, pipeline.topics.dlq, now, group)
    assert routing.route is Route.DLQ
    pipeline.producer.send(pipeline.topics.dlq, pipeline.codec.encode(pending(chunk), pipeline.topics.dlq),
                           key=chunk.encode(), headers=routing.headers)


def flush(pipeline: Pipeline) -> None:
    assert pipeline.producer.producer.flush(10) == 0


FATAL = Verdict(Outcome.FATAL, "access denied", "StorageAccessDeniedError")


SLOW = Verdict(Outcome.RETRYABLE, "injected: endpoint unavailable", "StorageUnavailableError")


def one_line_error(result: subprocess.CompletedProcess[str], code: int) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("reclaim: error: "), result.stderr
    return lines[0]


def pending(chunk: str, stream: str = "scope/stream", binding: str = "fs-tier2") -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(stream, LedgerComponent.SEGMENT, LedgerType.LEDGER, ledger_id_for(chunk), chunk,
                                   f"{stream}/0.#epoch.0", binding, ChunkLocation(chunk), "mark-forged",
                                   int(time.time() * 1000))


ORIGINALS_AT = int(time.time() * 1000) - 9000

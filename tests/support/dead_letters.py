"""Dead letters built in memory for the DLQ plan tests."""

from __future__ import annotations

from reclaim.consumers.retry import Delivery, RetryTiers
from reclaim.consumers.routing import route
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.schemas.codec import build_codec
from reclaim.schemas.ledger import ChunkLocation, LedgerComponent, LedgerType, PendingDeleteLedgerInfo, ledger_id_for
from reclaim.tools.dlq.records import DeadLetter, dead_letter

NOW = 1_800_000_000_000


def letter(offset: int, *, origin_offset: int | None = None, verdict: Verdict | None = None, age_ms: int = 0,
           attempt: int = 1, group: str = "g1", value: bytes | None = None, stream: str = "scope/stream",
           partition: int = 0) -> DeadLetter:
    """A dead letter with the headers the worker's routing writes."""
    delivery = Delivery(attempt, NOW - 2 * HOUR, None, "t.ledger-deletion", 0,
                        offset if origin_offset is None else origin_offset, NOW - 3 * HOUR)
    routing = route(verdict or Verdict(Outcome.FATAL, "access denied", "StorageAccessDeniedError"), delivery,
                    TIERS, "t.ledger-deletion.dlq", NOW, group)
    data = value if value is not None else CODEC.encode(info(f"{stream}/0.#epoch.0.E-1-O-{offset}.a", stream), "")
    return dead_letter("t.ledger-deletion.dlq", partition, offset, NOW - age_ms, b"key", data, routing.headers, CODEC)


CODEC = build_codec()


HOUR = 3_600_000


TIERS = RetryTiers(((10, "t.ledger-deletion.retry-10s"),), max_attempts=3)


def info(chunk: str = "scope/stream/0.#epoch.0.E-1-O-0.a", stream: str = "scope/stream") -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(stream, LedgerComponent.SEGMENT, LedgerType.LEDGER, ledger_id_for(chunk), chunk,
                                   f"{stream}/0.#epoch.0", "fs-tier2", ChunkLocation(chunk), "mark-1", NOW - HOUR)

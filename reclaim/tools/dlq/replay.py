"""``reclaim dlq replay``: dead letters sent back to the deletion topic, each once, at a bounded rate.

A replayed record keeps its key and value and carries none of the retry headers, so phase 2 takes it
as a new record on its first attempt. It names where it came from instead: ``reclaim.replayed-from``
(``<dlq-topic>/<partition>/<offset>``) and ``reclaim.replayed-origin`` (the original deletion record's
``<topic>/<partition>/<offset>``, when known). It keeps the original's signature headers (key id and
signature, see ``security/signing.py``): a signature covers the deletion topic, key and value, which a
replay does not change, so a genuine record still verifies and a forged one is still refused.

Each record sent is remembered in the compacted topic ``<prefix>ledger-deletion.dlq-replayed``, keyed
by its DLQ coordinates, so every operator's replay, from any machine, skips it: a record is skipped
when its coordinates are remembered with the same DLQ timestamp (a recreated DLQ starts its offsets
again), or when another copy of the same original record (its coordinates and timestamp) was replayed.

The DLQ is read twice: the first read chooses what to send and holds only where each chosen record sits
(:class:`~reclaim.tools.dlq.selection.Sendable`); the second reads the records again and sends each chosen
one as it comes, so a replay holds a few hundred bytes a chosen record, not the records. A chosen record
no longer there at the second read (purged, or past the topic's retention, in between) is not sent, and
counted as ``gone``.

A record's delivery to the deletion topic (idempotent producer, ``acks=all``) is confirmed before it
is remembered. If the process dies in between, the record was sent but is not remembered: the next
replay sends it again. That is at most one duplicate, which phase 2 handles idempotently (the second
finds the copy gone: ``already-gone``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, Message

from reclaim.exits import Unavailable
from reclaim.producers.config import quiet_logger
from reclaim.producers.producer import DeliveryTracker, RecordProducer
from reclaim.schemas.codec import RecordCodec
from reclaim.security.signing import signature_headers
from reclaim.tools.dlq.reader import letter_of, read_each
from reclaim.tools.dlq.records import DeadLetter, Located
from reclaim.tools.dlq.selection import Sendable

H_REPLAYED_FROM = "reclaim.replayed-from"
H_REPLAYED_ORIGIN = "reclaim.replayed-origin"

DEFAULT_RATE = 100
"""Records per second a replay sends unless told otherwise."""
CONFIRM_EVERY = 500
"""Most records sent before their deliveries are awaited and remembered."""
DELIVERY_TIMEOUT_S = 30.0

_QUIET = quiet_logger("dlq-replay")


def dlq_coordinates(letter: Located) -> str:
    """``<dlq-topic>/<partition>/<offset>``: the key a replayed record is remembered by."""
    return f"{letter.topic}/{letter.partition}/{letter.offset}"


def _origin(letter: Located) -> str | None:
    origin = letter.origin
    return None if origin is None else f"{origin.topic}/{origin.partition}/{origin.offset}"


def replay_headers(letter: DeadLetter) -> list[tuple[str, bytes]]:
    """The headers a replayed record is sent with: where it came from, its signature, and no retry history."""
    headers = [(H_REPLAYED_FROM, dlq_coordinates(letter).encode())]
    origin = _origin(letter)
    if origin is not None:
        headers.append((H_REPLAYED_ORIGIN, origin.encode()))
    headers.extend(signature_headers(letter.headers))
    return headers


def memo(letter: DeadLetter, now_ms: int) -> tuple[bytes, bytes]:
    """The key and value that remember ``letter`` as replayed."""
    value = {"dlq_timestamp_ms": letter.timestamp_ms, "origin": _origin(letter),
             "original_timestamp_ms": letter.original_timestamp_ms, "replayed_at_ms": now_ms}
    return dlq_coordinates(letter).encode(), json.dumps(value, sort_keys=True).encode()


@dataclass
class Replayed:
    """The dead letters replayed so far, as their memos say.

    ``origins`` holds, per original record's coordinates, the original timestamps replayed (None: a memo
    that does not say, which matches any).
    """

    timestamps: dict[str, int | None] = field(default_factory=dict)
    origins: dict[str, set[int | None]] = field(default_factory=dict)

    @classmethod
    def of(cls, memos: Iterable[tuple[bytes | None, bytes | None]]) -> Replayed:
        """From memo records (key, value) in topic order; a value that is not a memo is ignored."""
        replayed = cls()
        for key, value in memos:
            try:
                fields = json.loads(value or b"")
            except ValueError:
                continue
            if key is None or not isinstance(fields, dict):
                continue
            timestamp = fields.get("dlq_timestamp_ms")
            replayed.timestamps[key.decode("utf-8", "replace")] = timestamp if isinstance(timestamp, int) else None
            if isinstance(fields.get("origin"), str):
                original = fields.get("original_timestamp_ms")
                replayed.origins.setdefault(fields["origin"], set()).add(original if isinstance(original, int)
                                                                         else None)
        return replayed

    def __contains__(self, letter: object) -> bool:
        if not isinstance(letter, DeadLetter | Sendable):
            return False
        coordinates = dlq_coordinates(letter)
        if coordinates in self.timestamps and self.timestamps[coordinates] == letter.timestamp_ms:
            return True
        origin = _origin(letter)
        if origin is None or origin not in self.origins:
            return False
        # Another copy of the same record was replayed; the same coordinates of a deletion topic created
        # again (another original timestamp) are another record, which must not be skipped.
        replayed = self.origins[origin]
        return None in replayed or letter.original_timestamp_ms is None or letter.original_timestamp_ms in replayed


def read_replayed(address: str, topic: str) -> Replayed:
    """What the memo topic says has been replayed."""
    memos: list[tuple[bytes | None, bytes | None]] = []
    read_each(address, topic, lambda msg: memos.append((msg.key(), msg.value())))
    return Replayed.of(memos)


class Pacer:
    """Spaces calls to :meth:`wait` ``1 / rate`` seconds apart on average (bursts are not made up for)."""

    def __init__(self, rate: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if not rate > 0:
            raise ValueError(f"rate must be positive, got {rate}")
        self.rate = rate
        self._interval = 1.0 / rate
        self._clock = clock
        self._sleep = sleep
        self._next: float | None = None

    def wait(self) -> None:
        now = self._clock()
        if self._next is not None and self._next > now:
            self._sleep(self._next - now)
            now = self._next
        self._next = now + self._interval


@dataclass(frozen=True)
class ReplayTopics:
    """Where replayed records go and where they are remembered."""

    deletion: str
    replayed: str


@dataclass(frozen=True)
class ReplaySource:
    """The DLQ read again to send what the first read chose: the broker, the DLQ topic and its codec."""

    address: str
    dlq: str
    codec: RecordCodec


def replay(source: ReplaySource, topics: ReplayTopics, chosen: Sequence[Sendable], pacer: Pacer,
           on_sent: Callable[[int], None] = lambda _n: None, timeout_s: float = DELIVERY_TIMEOUT_S
           ) -> tuple[int, int]:
    """Read the DLQ again and send each of ``chosen`` as it is read to the deletion topic, remembering each
    once its delivery is confirmed; ``(sent, gone)``, gone being those of ``chosen`` the DLQ no longer holds
    (or holds another record at their place: the topic was created again).

    Raises :class:`~reclaim.exits.Unavailable` when a delivery or a memo is not confirmed (what was
    confirmed before stays sent and remembered).
    """
    wanted = {(letter.partition, letter.offset): letter.timestamp_ms for letter in chosen}
    sender = _Sender(source.address, topics, pacer, on_sent, timeout_s)
    try:
        def take(msg: Message) -> None:
            place = (msg.partition() or 0, msg.offset() or 0)
            if place in wanted:
                letter = letter_of(msg, source.codec, source.dlq)
                if letter.timestamp_ms == wanted.pop(place):
                    sender.add(letter)

        read_each(source.address, source.dlq, take)
        sender.flush()
    finally:
        sender.close()
    return sender.sent, len(chosen) - sender.sent


class _Sender:
    """Sends replayed records in groups of about a second's worth, each group's deliveries confirmed and
    then remembered before the next is sent, so little is ever sent and not yet remembered."""

    def __init__(self, address: str, topics: ReplayTopics, pacer: Pacer, on_sent: Callable[[int], None],
                 timeout_s: float) -> None:
        self._errors: list[KafkaError] = []
        self._producer = RecordProducer(address, "idempotent-producer", {"logger": _QUIET,
                                                                         "error_cb": self._errors.append})
        self._topics = topics
        self._pacer = pacer
        self._on_sent = on_sent
        self._timeout_s = timeout_s
        self._size = max(1, min(CONFIRM_EVERY, int(pacer.rate)))
        self._group: list[DeadLetter] = []
        self.sent = 0

    def add(self, letter: DeadLetter) -> None:
        self._group.append(letter)
        if len(self._group) >= self._size:
            self.flush()

    def flush(self) -> None:
        group, self._group = self._group, []
        if not group:
            return
        confirmed = _send(self._producer, self._topics.deletion, group, self._pacer, self._timeout_s)
        _remember(self._producer, self._topics.replayed, confirmed, self._timeout_s)
        self.sent += len(confirmed)
        self._on_sent(len(confirmed))
        if len(confirmed) < len(group):
            raise Unavailable(f"{len(group) - len(confirmed)} record(s) not confirmed by the broker within "
                              f"{self._timeout_s:g} s ({self.sent} sent and remembered): run the replay again")

    def close(self) -> None:
        self._producer.close()


def _send(producer: RecordProducer, topic: str, letters: Sequence[DeadLetter], pacer: Pacer,
          timeout_s: float) -> list[DeadLetter]:
    tracker = DeliveryTracker()
    for index, letter in enumerate(letters):
        pacer.wait()
        producer.send(topic, letter.value, key=letter.key, headers=replay_headers(letter),
                      on_delivery=tracker.callback(index))
    unconfirmed = producer.wait(tracker, timeout_s)
    return [letter for index, letter in enumerate(letters) if index not in unconfirmed]


def _remember(producer: RecordProducer, topic: str, letters: Sequence[DeadLetter], timeout_s: float) -> None:
    if not letters:
        return
    tracker = DeliveryTracker()
    now_ms = int(time.time() * 1000)
    for index, letter in enumerate(letters):
        key, value = memo(letter, now_ms)
        producer.send(topic, value, key=key, on_delivery=tracker.callback(index))
    missing = producer.wait(tracker, timeout_s)
    if missing:
        raise Unavailable(f"{len(missing)} replayed record(s) were sent but could not be remembered in {topic}: "
                          "a later replay sends them once more, which phase 2 handles as already gone")

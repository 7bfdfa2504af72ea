"""How reclaim reads confluent-kafka's errors: classification, a rate-limited ``error_cb``, commit results.

confluent-kafka hands a client's *fatal* error (an idempotent producer fenced or out of sequence, a
static consumer fenced) to no ``error_cb``: it raises it as a :class:`KafkaException` from the
``poll``/``flush``/``consume`` call that served it, and ``produce`` fails with ``_FATAL`` afterwards.
When a callback runs in the same call, the binding can turn that exception into a ``SystemError``, or
lose it. So the fatal error is caught three ways, all kept by one
:class:`KafkaErrorLog` per client: the ``error_cb``, librdkafka's ``FATAL`` log line (seen by
:class:`RdkafkaLogger`), and the exception passed to :meth:`KafkaErrorLog.raise_if_fatal`.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from reclaim.errors import ReclaimError
from reclaim.logs import LogLimiter
from reclaim.producers.rdkafka_levels import error_level, line_level

log = logging.getLogger(__name__)

#: The same error code of one client is logged at most once per this many seconds.
ERROR_LOG_INTERVAL_S = 30.0

# Delivery reports carry a bare code: the binding never sets ``retriable()`` on them, so the codes
# librdkafka itself retries or recovers from are named here.
_TRANSIENT_CODES = frozenset({
    KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError._TIMED_OUT_QUEUE, KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN, KafkaError._QUEUE_FULL, KafkaError.REQUEST_TIMED_OUT,
    KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NOT_ENOUGH_REPLICAS,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND, KafkaError.BROKER_NOT_AVAILABLE,
    KafkaError.NETWORK_EXCEPTION, KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
})


class ErrorKind(enum.Enum):
    """What a Kafka error means for the client that saw it."""

    FATAL = "fatal"          # the client instance is unusable; the process must stop
    RETRIABLE = "retriable"  # the same operation may succeed later
    OTHER = "other"          # this operation failed; the client is still usable


def classify(error: KafkaError) -> ErrorKind:
    """The :class:`ErrorKind` of ``error``, from its flags (``fatal()``, ``retriable()``) and code."""
    if error.fatal() or error.code() == KafkaError._FATAL:
        return ErrorKind.FATAL
    if error.retriable() or error.code() in _TRANSIENT_CODES:
        return ErrorKind.RETRIABLE
    return ErrorKind.OTHER


def describe(error: KafkaError) -> str:
    """``NAME: reason`` of ``error`` on one line."""
    return f"{error.name()}: {' '.join(error.str().split())}"


def kafka_error_of(exc: BaseException) -> KafkaError | None:
    """The :class:`KafkaError` a :class:`KafkaException` carries, looking through ``raise … from`` chains.

    A fatal error served while a callback runs reaches the caller as a ``SystemError`` caused by the
    ``KafkaException``, hence the chain. ``None`` when no ``KafkaError`` is found.
    """
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, KafkaException) and current.args and isinstance(current.args[0], KafkaError):
            return current.args[0]
        current = current.__cause__ or current.__context__
    return None


def is_no_offset(exc: KafkaException) -> bool:
    """True when ``exc`` says there was nothing to commit (``_NO_OFFSET``), which is not a failure."""
    error = kafka_error_of(exc)
    return error is not None and error.code() == KafkaError._NO_OFFSET


class FatalKafkaError(ReclaimError):
    """A Kafka client hit a fatal error and cannot be used again; the process has to stop.

    Not retryable: the same client fails the same way. A new process (a new client) may succeed.
    """

    retryable = False

    def __init__(self, client: str, error: KafkaError) -> None:
        super().__init__(f"fatal Kafka error in {client} client, it cannot be used again: {describe(error)}")
        self.client = client
        self.error = error


class ProducerQueueFullError(ReclaimError):
    """The producer's local queue stayed full for the whole bound: the broker is not taking records.

    Retryable: nothing was queued, so sending again later is safe.
    """

    retryable = True

    def __init__(self, topic: str, waited_s: float) -> None:
        super().__init__(f"producer queue still full after waiting {waited_s:g}s to send to {topic}: "
                         "the broker is not taking records")
        self.topic = topic
        self.waited_s = waited_s


class CommitError(ReclaimError):
    """The broker refused the commit of one or more partitions.

    Retryable unless a partition's error is fatal: uncommitted records are delivered again and
    judged again, which is harmless (every outcome reclaim records is idempotent).
    """

    def __init__(self, failed: Sequence[TopicPartition]) -> None:
        parts = ", ".join(f"{tp.topic}[{tp.partition}]@{tp.offset}: {describe(tp.error)}"
                          for tp in failed if tp.error is not None)
        super().__init__(f"commit failed for {len(failed)} partition(s): {parts}")
        self.failed = list(failed)
        self.retryable = not any(tp.error is not None and classify(tp.error) is ErrorKind.FATAL for tp in failed)


def check_committed(result: Sequence[TopicPartition] | None) -> None:
    """Raise :class:`CommitError` naming every partition of a commit ``result`` whose ``error`` is set.

    ``result`` is what ``Consumer.commit(asynchronous=False)`` returned; ``None`` (nothing returned)
    passes.
    """
    failed = [tp for tp in result or () if tp.error is not None]
    if failed:
        raise CommitError(failed)


class KafkaErrorLog:
    """The ``error_cb`` of one client: logs librdkafka's error events rate-limited, keeps its fatal error.

    librdkafka repeats an event such as ``_ALL_BROKERS_DOWN`` for as long as the cause lasts; each
    error code is logged at most once per ``interval_s``, with the count of the repeats suppressed
    since its last line. The first fatal error is kept in :attr:`fatal_error` for the client's owner,
    which calls :meth:`raise_if_fatal` on its own thread.

    Parameters
    ----------
    client : str
        Names the client in log lines and errors, e.g. ``"idempotent-producer"``.
    interval_s : float
        Least time between two lines of the same error code.
    clock : callable
        Monotonic seconds; tests inject their own.
    forward : callable, optional
        Another ``error_cb`` that receives every event too.
    """

    def __init__(self, client: str, interval_s: float = ERROR_LOG_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic,
                 forward: Callable[[KafkaError], object] | None = None) -> None:
        self.client = client
        self.interval_s = interval_s
        self._limiter = LogLimiter(interval_s, clock)
        self._forward = forward
        self._lock = threading.Lock()
        self._fatal: KafkaError | None = None

    @property
    def fatal_error(self) -> KafkaError | None:
        """The first fatal error this client reported, or ``None``."""
        return self._fatal

    def __call__(self, error: KafkaError) -> None:
        if classify(error) is ErrorKind.FATAL:
            self.record_fatal(error)
        else:
            held = self.admit(error.code())
            if held is not None:  # a condition librdkafka retries by itself is news, not a warning
                log.log(error_level(error), "kafka client error: client=%s %s%s", self.client, describe(error),
                        self._limiter.suffix(held))
        if self._forward is not None:
            self._forward(error)

    def admit(self, key: Hashable) -> int | None:
        """Whether an event of ``key`` (an error code, a log facility) is logged now: the repeats
        suppressed since its last line, or ``None`` when this one is suppressed too."""
        return self._limiter.admit(key)

    def record_fatal(self, error: KafkaError) -> None:
        """Keep ``error`` as this client's fatal error unless one is kept already; log it once.

        A kept error with the bare ``_FATAL`` code gives way to one that names the cause.
        """
        with self._lock:
            kept = self._fatal
            if kept is not None and (kept.code() != KafkaError._FATAL or error.code() == KafkaError._FATAL):
                return
            self._fatal = error
        if kept is None:
            log.error("kafka client fatal error: client=%s %s", self.client, describe(error))

    def raise_if_fatal(self, exc: BaseException | None = None) -> None:
        """Raise :class:`FatalKafkaError` when this client has a fatal error.

        ``exc``, an exception from one of the client's calls, is examined first: a fatal
        :class:`KafkaError` inside it is recorded. Returns when there is no fatal error, so the caller
        re-raises ``exc`` itself.
        """
        error = kafka_error_of(exc) if exc is not None else None
        if error is not None and classify(error) is ErrorKind.FATAL:
            self.record_fatal(error)
        if self._fatal is not None:
            raise FatalKafkaError(self.client, self._fatal) from exc


class _Logger(Protocol):
    def log(self, level: int, msg: str, *args: object) -> None: ...


class RdkafkaLogger:
    """The ``logger`` of one client: passes librdkafka's log lines on, and records its ``FATAL`` line.

    librdkafka logs a fatal error (facility ``FATAL``) before it raises the error event, so the
    error is known even when confluent-kafka loses the exception of that event. While a broker is
    down librdkafka repeats its lines (``FAIL``, ``ERROR``) every reconnect: each facility is passed on
    at most once per the error log's interval, with the count of the lines held back, unless the
    target logs at debug level. A warning about a condition librdkafka retries by itself is passed on as
    info (:func:`reclaim.producers.rdkafka_levels.line_level`).
    """

    def __init__(self, target: _Logger, errors: KafkaErrorLog) -> None:
        self.target = target
        self.errors = errors

    def log(self, level: int, msg: str, *args: object) -> None:
        """The call confluent-kafka makes: ``log(level, "%s [%s] %s", facility, client name, line)``."""
        facility = args[0] if args else msg
        if len(args) == 3:
            level = line_level(level, str(facility), str(args[2]))
        debugging = getattr(self.target, "isEnabledFor", lambda _level: False)(logging.DEBUG)
        held = None if debugging else self.errors.admit(("log", facility))
        if debugging:
            self.target.log(level, msg, *args)
        elif held is not None:
            self.target.log(level, msg + (f" ({held} more lines held back)" if held else ""), *args)
        if len(args) == 3 and args[0] == "FATAL":
            reason = str(args[2])
            if reason.startswith("[thrd:") and "]: " in reason:
                reason = reason.split("]: ", 1)[1]
            self.errors.record_fatal(KafkaError(KafkaError._FATAL, reason, fatal=True))

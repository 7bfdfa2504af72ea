"""The level of librdkafka's log lines and error events in reclaim's log: what librdkafka retries by itself is
news (info), not a warning; what needs a person stays a warning.

librdkafka reports a condition it recovers from as loudly as one it cannot: a coordinator still loading its
state fails the idempotent producer's first PID request with a warning line ("Failed to acquire idempotence
PID ...: Coordinator load in progress: retrying"), and a broker connection that drops is an error event
(``_TRANSPORT``) before the client reconnects. A one-shot command showed them as warnings although it
succeeded. Error events carry a code, read here; log lines carry only text, so their facility and the phrases
librdkafka writes for a retried condition are read instead.
"""

from __future__ import annotations

import logging

from confluent_kafka import KafkaError

#: Error codes of conditions librdkafka retries or recovers from by itself: a broker connection lost (it
#: reconnects), a coordinator or leader that moves or still loads (it asks again). Those left out of this set
#: but retriable still stop something a user waits for (all brokers down, a record not delivered in time, a
#: full queue, too few in-sync replicas) and stay warnings.
RETRIED_CODES = frozenset({
    KafkaError._TRANSPORT, KafkaError.COORDINATOR_LOAD_IN_PROGRESS, KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.LEADER_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.REQUEST_TIMED_OUT, KafkaError.NETWORK_EXCEPTION, KafkaError.BROKER_NOT_AVAILABLE,
})

#: Phrases of librdkafka's log lines about a condition it retries: its own word for it, a coordinator still
#: loading or moving, and a broker connection lost or refused (it reconnects with backoff).
RETRIED_PHRASES = (
    ": retrying", "Coordinator load in progress", "Not coordinator", "Coordinator not available",
    "Connection refused", "Disconnected", "Connection reset", "Broker transport failure", "Receive failed",
    "Send failed",
)

#: Facilities whose lines are about a broker connection or a retried request; a line of another facility
#: (a configuration warning, a poll interval exceeded, an authentication failure) keeps its level.
RETRYING_FACILITIES = frozenset({"GETPID", "FAIL", "COORDINATOR", "FINDCOORD", "CGRPCOORD", "METADATA", "REQTMOUT",
                                 "BROKERFAIL", "DISCONNECT"})

#: What a line about a failed authentication or TLS handshake says: never quiet, even from ``FAIL``.
NEVER_QUIET = ("SASL", "SSL", "authentication", "Authentication", "certificate")


def error_level(error: KafkaError) -> int:
    """The level of an error event that is not fatal: info for a condition librdkafka retries by itself."""
    return logging.INFO if error.code() in RETRIED_CODES else logging.WARNING


def line_level(level: int, facility: str, line: str) -> int:
    """The level of one librdkafka log line (``level`` as confluent-kafka maps it): at most info for a
    warning or error about a condition librdkafka retries by itself, else ``level``."""
    if level < logging.WARNING or facility not in RETRYING_FACILITIES:
        return level
    if any(phrase in line for phrase in NEVER_QUIET):
        return level
    return logging.INFO if any(phrase in line for phrase in RETRIED_PHRASES) else level

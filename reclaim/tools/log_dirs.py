"""Partition sizes for ``--max-bytes``: Kafka's ``DescribeLogDirs``, asked through kafka-python, because librdkafka
(reclaim's Kafka client everywhere else) has no DescribeLogDirs yet (librdkafka #5192).

The same broker, the same principal: the operator's client properties (librdkafka's names, ``RECLAIM_KAFKA_*``)
are mapped to kafka-python's settings; a security property with no counterpart there is refused in one line rather
than connecting otherwise than the rest of reclaim does. The brokers answer DescribeLogDirs only to a principal
with Describe on the cluster; without it they answer no partition, and every size stays unknown (so no size
forces anything).

A partition's size is its largest replica's (the leader's, but for a follower that has not caught up): the bytes
of its log segments on the brokers' disks. On a tiered topic (KIP-405) that is the local part only. That size
counts bytes below the partition's start until their segment is deleted, so the topic poller does not use it as
it is: :class:`SizeReckoner` turns it into the bytes of the records still there.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from reclaim.exits import Unavailable, UsageError
from reclaim.producers import client_properties as properties
from reclaim.producers.config import client_properties

log = logging.getLogger(__name__)
# kafka-python logs its whole configuration, SASL password included, at DEBUG when a client starts: its loggers say
# warnings and errors only, whatever level the process runs at.
logging.getLogger("kafka").setLevel(logging.WARNING)

TIMEOUT_MS = 30_000

_MAPPED: dict[str, tuple[str, Callable[[str], Any]]] = {
    "security.protocol": ("security_protocol", str.upper),
    "sasl.mechanism": ("sasl_mechanism", str.upper),
    "sasl.mechanisms": ("sasl_mechanism", str.upper),
    "sasl.username": ("sasl_plain_username", str),
    "sasl.password": ("sasl_plain_password", str),
    "ssl.ca.location": ("ssl_cafile", str),
    "ssl.certificate.location": ("ssl_certfile", str),
    "ssl.key.location": ("ssl_keyfile", str),
    "ssl.key.password": ("ssl_password", str),
    "ssl.endpoint.identification.algorithm": ("ssl_check_hostname", lambda value: value.lower() == "https"),
    "client.id": ("client_id", str),
}
_SECURITY = ("security.", "sasl.", "ssl.")


def kafka_python_settings(bootstrap: str, props: Mapping[str, str]) -> dict[str, Any]:
    """kafka-python's settings for the brokers at ``bootstrap`` as ``props`` (librdkafka's names) reach them; a
    security property kafka-python has no counterpart for is a :class:`~reclaim.exits.UsageError`. Other properties
    (tuning) do not change what DescribeLogDirs answers and are left out."""
    settings: dict[str, Any] = {
        "bootstrap_servers": properties.bootstrap_servers(bootstrap, props).split(","),
        "client_id": "reclaim-log-dirs"}
    for name, value in sorted(props.items()):
        if name in _MAPPED:
            key, convert = _MAPPED[name]
            settings[key] = convert(value)
        elif name.startswith(_SECURITY):
            raise UsageError(f"--max-bytes reads partition sizes with kafka-python (librdkafka has no "
                             f"DescribeLogDirs), which reclaim cannot give Kafka property {name}: use --max, or "
                             "certificate and key files (ssl.*.location) and SASL PLAIN or SCRAM")
    return settings


class LogDirSizes:
    """Partition sizes from the brokers' DescribeLogDirs, one request per broker for every partition asked; the
    client is made on first use and kept."""

    def __init__(self, bootstrap: str, props: Mapping[str, str] | None = None, timeout_ms: int = TIMEOUT_MS) -> None:
        self.bootstrap, self.props, self.timeout_ms = bootstrap, props, timeout_ms
        self._client: Any = None

    def __call__(self, wanted: Mapping[str, Iterable[int]]) -> dict[tuple[str, int], int]:
        """Each partition's size in bytes, of the ``{topic: partitions}`` wanted; a partition no broker answered
        for (none may be described to this principal) is left out. The brokers not answering is
        :class:`~reclaim.exits.Unavailable`, and so is anything else the client raises; client properties
        kafka-python cannot take are a :class:`~reclaim.exits.UsageError`."""
        asked = {topic: sorted(partitions) for topic, partitions in wanted.items()}
        if not asked:
            return {}
        if self._client is None:
            settings = kafka_python_settings(self.bootstrap, client_properties() if self.props is None else self.props)
        try:
            if self._client is None:
                from kafka import KafkaAdminClient

                self._client = KafkaAdminClient(**settings, request_timeout_ms=self.timeout_ms,
                                                bootstrap_timeout_ms=self.timeout_ms)
            answers = self._client.describe_log_dirs(asked)
        except Exception as exc:  # noqa: BLE001 - a third-party client: whatever it raises fails the sizes only
            self.close()
            raise Unavailable(f"reading partition sizes (DescribeLogDirs): {type(exc).__name__}: {exc}") from None
        return partition_sizes(answers, asked)

    def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            client.close()


def partition_sizes(answers: Iterable[Mapping[str, Any]], asked: Mapping[str, Iterable[int]]
                    ) -> dict[tuple[str, int], int]:
    """The largest replica's size of each partition asked, from kafka-python's ``describe_log_dirs`` answers (one
    per broker, each its log directories' topics and partitions); a log directory in error and a replica being
    moved to another directory (``is_future_key``) are left out."""
    wanted = {(topic, partition) for topic, partitions in asked.items() for partition in partitions}
    sizes: dict[tuple[str, int], int] = {}
    for broker in answers:
        for log_dir in broker.get("log_dirs", ()):
            if log_dir.get("error_code", 0):
                continue
            for topic in log_dir.get("topics", ()):
                for partition in topic.get("partitions", ()):
                    key = (topic["name"], int(partition["partition_index"]))
                    if key in wanted and not partition.get("is_future_key"):
                        sizes[key] = max(sizes.get(key, 0), int(partition["partition_size"]))
    return sizes


class SizeReckoner:
    """Each partition's bytes from its start to its end, reckoned from what it grew by per record.

    DescribeLogDirs' size is every byte of the partition's segments, those below its start included until the
    broker deletes the whole segment holding them: a start moved by DeleteRecords into a segment leaves that
    segment's size as it was until it rolls and goes. A size so counted would move the start again on every pass.
    The bytes per record are taken instead from the latest growth seen, ``(size - size before) / (end - end
    before)`` between two observations where both grew; a segment deleted in between only lowers that figure, so
    the bytes reckoned err low and ``--max-bytes`` keeps more, never less. Until a partition has grown between
    two observations of this process, its bytes are unknown and no size forces it."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, int], tuple[int, int]] = {}
        self.per_record: dict[tuple[str, int], float] = {}

    def reckon(self, topic: str, partition: int, low: int, high: int, size: int) -> int | None:
        """The bytes of ``[low, high)`` with the partition's size on disk ``size`` now; None while unknown."""
        key = (topic, partition)
        before = self.last.get(key)
        self.last[key] = (high, size)
        if before is not None and high > before[0] and size > before[1]:
            self.per_record[key] = (size - before[1]) / (high - before[0])
        rate = self.per_record.get(key)
        return None if rate is None else int(max(0, high - low) * rate)

    def forget(self, topic: str) -> None:
        for held in (self.last, self.per_record):
            for key in [k for k in held if k[0] == topic]:
                del held[key]

"""Checks a command runs before its work: the broker answers, the topics exist, the endpoints answer.

Each check is bounded in time and ends in one :class:`~reclaim.exits.Unavailable` line naming what was tried
and what to do; librdkafka's own retries stay out of the terminal while it waits.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ClusterMetadata, ConfigResource, ResourceType

from reclaim.exits import Unavailable
from reclaim.producers.config import kafka_config, quiet_logger
from reclaim.producers.kafka_errors import kafka_error_of
from reclaim.settings import Settings

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry

BROKER_TIMEOUT_S = 10.0
"""How long a command waits for the broker to answer before it gives up."""

log = logging.getLogger(__name__)
_QUIET = quiet_logger("preflight")


def bootstrap(settings: Settings) -> str:
    """The configured broker address, without contacting it. None configured is one line: a process is
    told where its broker is (flag, environment or config file), it never goes looking for a local stack."""
    if settings.bootstrap:
        return settings.bootstrap
    raise Unavailable("no Kafka broker configured: set --bootstrap, RECLAIM_BOOTSTRAP or a config file's "
                      f"bootstrap (for the local stack: reclaim --config {settings.state_dir / 'local.toml'} ..., "
                      "which `reclaim local up` writes)")


def broker(settings: Settings, timeout_s: float = BROKER_TIMEOUT_S) -> str:
    """The broker address, once a broker there has answered a metadata request."""
    address = bootstrap(settings)
    cluster_metadata(address, timeout_s)
    return address


def cluster_metadata(address: str, timeout_s: float = BROKER_TIMEOUT_S) -> ClusterMetadata:
    """The cluster's topic metadata, or one line saying the broker at ``address`` did not answer."""
    seen: list[KafkaError] = []
    config = kafka_config(address, "admin")
    # Only this answer matters here: librdkafka's events are kept for the message, not logged.
    config.update({"logger": _QUIET, "error_cb": seen.append})
    admin = AdminClient(config)
    try:
        return admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        error = seen[-1] if seen else kafka_error_of(exc)
        cause = error.str() if error is not None else str(exc)
        raise Unavailable(f"cannot reach a Kafka broker at {address} within {timeout_s:g} s ({cause}): check "
                          "--bootstrap / RECLAIM_BOOTSTRAP, or start the local stack with `reclaim local up`") from exc


def require_deleting(address: str, topics: Iterable[str], timeout_s: float = BROKER_TIMEOUT_S) -> None:
    """Every topic in ``topics`` keeps each record until its retention (``cleanup.policy=delete``); else
    one line naming them. Compaction keeps one record a key, and the records of a chunk's copies share
    theirs (the chunk name): on a compacted deletion topic a copy's record could vanish unread, its
    object leaked."""
    wanted = list(topics)
    config = kafka_config(address, "admin")
    config.update({"logger": _QUIET})
    admin = AdminClient(config)
    resources = [ConfigResource(ResourceType.TOPIC, topic) for topic in wanted]
    try:
        configs = {r.name: f.result(timeout=timeout_s) for r, f in admin.describe_configs(resources).items()}
    except KafkaException as exc:
        raise Unavailable(f"cannot read the configuration of {', '.join(wanted)} on {address}: {exc}") from exc
    compacting = [topic for topic in wanted if "compact" in str(getattr(configs[topic].get("cleanup.policy"),
                                                                        "value", ""))]
    if compacting:
        raise Unavailable(f"topic{'s' if len(compacting) > 1 else ''} {', '.join(compacting)} on {address} "
                          "compact (cleanup.policy): compaction drops pending deletes that share a key; set "
                          "cleanup.policy=delete (see `reclaim topics describe`)")


def serve_metrics(port: int, addr: str = "127.0.0.1", registry: CollectorRegistry | None = None) -> None:
    """Serve Prometheus metrics (``registry``'s, else the process's) on ``addr:port``; a port in use or an
    address not ours is one line."""
    from prometheus_client import REGISTRY, start_http_server

    try:
        start_http_server(port, addr=addr, registry=REGISTRY if registry is None else registry)
    except OSError as exc:
        raise Unavailable(f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc} (choose another "
                          "--metrics-port / RECLAIM_METRICS_PORT)") from exc
    log.info("metrics on http://%s:%s/metrics", addr, port)


def _denied(address: str, topics: list[str], timeout_s: float) -> list[str]:
    """Which of ``topics``, absent from the metadata, the broker refuses to describe to this principal."""
    if not topics:
        return []
    config = kafka_config(address, "admin")
    config.update({"logger": _QUIET})
    admin = AdminClient(config)
    denied = []
    for topic in topics:
        try:
            error = admin.list_topics(topic=topic, timeout=timeout_s).topics[topic].error
        except (KafkaException, KeyError):
            continue
        if error is not None and error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            denied.append(topic)
    return denied


def require_topics(address: str, topics: Iterable[str], timeout_s: float = BROKER_TIMEOUT_S) -> None:
    """Every topic in ``topics`` exists on the broker at ``address``; else one line naming the missing."""
    existing = cluster_metadata(address, timeout_s).topics
    missing = [topic for topic in topics if topic not in existing]
    denied = _denied(address, missing, timeout_s)
    if denied:
        # A topic the principal may not describe is left out of the metadata as if it did not exist.
        raise Unavailable(f"not authorized for topic{'s' if len(denied) > 1 else ''} {', '.join(denied)} on "
                          f"{address} (TOPIC_AUTHORIZATION_FAILED): this principal lacks the ACLs of the role "
                          "(see `reclaim acls plan`)")
    if missing:
        raise Unavailable(f"missing topic{'s' if len(missing) > 1 else ''} {', '.join(missing)} on {address}: "
                          "run `reclaim topics create` (with the same --topic-prefix and retry delays)")

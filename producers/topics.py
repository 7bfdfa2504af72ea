"""The names of reclaim's Kafka topics, derived from one prefix and the retry delays."""

from __future__ import annotations

from dataclasses import dataclass


def retry_suffix(delay_seconds: int) -> str:
    """``retry-10s`` for a 10-second tier."""
    return f"retry-{delay_seconds}s"


@dataclass(frozen=True)
class TopicNames:
    """Every topic reclaim reads or writes. Build it with :meth:`for_prefix`."""

    deletion: str
    retries: tuple[tuple[int, str], ...]
    dlq: str
    subscriber_cuts: str
    subscribers: str
    stream_config: str
    stream_cuts: str
    truncation: str
    stream_topology: str
    retention_rejects: str
    retention_wakeups: str
    topic_retention: str
    topic_cuts: str
    topic_truncation: str
    topic_truncation_dlq: str

    @classmethod
    def for_prefix(cls, prefix: str = "reclaim.", retry_delays: tuple[int, ...] = (10, 60, 600)) -> TopicNames:
        if not retry_delays or any(d <= 0 for d in retry_delays) or list(retry_delays) != sorted(set(retry_delays)):
            raise ValueError(f"retry delays must be positive, distinct and increasing, got {retry_delays}")
        deletion = f"{prefix}ledger-deletion"
        return cls(
            deletion=deletion,
            retries=tuple((d, f"{deletion}.{retry_suffix(d)}") for d in retry_delays),
            dlq=f"{deletion}.dlq",
            subscriber_cuts=f"{prefix}subscriber-cuts",
            subscribers=f"{prefix}subscribers",
            stream_config=f"{prefix}stream-config",
            stream_cuts=f"{prefix}stream-cuts",
            truncation=f"{prefix}truncation",
            stream_topology=f"{prefix}stream-topology",
            retention_rejects=f"{prefix}retention-rejects",
            retention_wakeups=f"{prefix}retention-wakeups",
            topic_retention=f"{prefix}topic-retention",
            topic_cuts=f"{prefix}topic-cuts",
            topic_truncation=f"{prefix}topic-truncation",
            topic_truncation_dlq=f"{prefix}topic-truncation.dlq",
        )

    @property
    def retry_topics(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.retries)

    @property
    def deletion_inputs(self) -> tuple[str, ...]:
        """The topics phase-2 workers consume: the deletion topic and its retry tiers."""
        return (self.deletion, *self.retry_topics)

"""The controller's topology sink on Kafka: each stream's ``StreamTopology`` on a compacted topic, keyed by stream."""

from __future__ import annotations

import logging

from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher, PublishError
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.topology import StreamTopology
from reclaim.security.signing import RecordSigner

log = logging.getLogger(__name__)


class TopologyPublishError(PublishError):
    """The broker did not confirm a topology within the timeout (or refused it).

    Retryable: the controller's operation stays pending and its retry or recovery publishes again.
    """

    def __init__(self, stream: str, topic: str, detail: str) -> None:
        super().__init__(f"topology of {stream!r}", topic, detail)
        self.stream = stream


class KafkaTopologyPublisher:
    """Publishes topologies keyed by stream and returns only once the broker confirmed each one.

    Keyed by stream, so compaction keeps a stream's latest topology and its records stay in order
    on one partition. Give it an ``idempotent-producer`` so a retried send is not duplicated (a
    duplicate would be harmless, only wasteful).
    """

    def __init__(self, producer: RecordProducer, codec: RecordCodec, topic: str, timeout_s: float = 30.0,
                 signer: RecordSigner | None = None) -> None:
        self._publisher = ConfirmedPublisher(producer, codec, timeout_s, signer)
        self._topic = topic

    @property
    def topic(self) -> str:
        return self._topic

    def publish(self, topology: StreamTopology) -> None:
        """Send ``topology`` and wait for its delivery report.

        Raises
        ------
        TopologyPublishError
            When the broker refused it or did not confirm it within the timeout.
        RecordEncodeError
            When the codec cannot encode it (e.g. a schema registry refused the schema).
        """
        try:
            self._publisher.publish(self._topic, topology, topology.stream)
        except PublishError as exc:
            raise TopologyPublishError(topology.stream, self._topic, exc.detail) from exc
        log.info("topology published topic=%s stream=%s epochs=%d sealed=%d state=%s", self._topic, topology.stream,
                 len(topology.epochs), len(topology.sealed_lengths), topology.state.name)

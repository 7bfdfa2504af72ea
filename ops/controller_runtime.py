"""A stream controller wired for a reclaim process: metadata store, tier-2, phase 1 and the topology topic."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ops import preflight, runtime
from ops.settings import Settings
from producers.producer import RecordProducer
from producers.publisher import ConfirmedPublisher
from producers.topology import KafkaTopologyPublisher
from segments.chunked import ChunkedSegmentStorage
from segments.streams import StreamController
from storage.metadata import DEFAULT_MAX_ROLLING_LENGTH


@contextmanager
def stream_controller(settings: Settings, max_rolling_length: int | None = None
                      ) -> Iterator[tuple[StreamController, ConfirmedPublisher]]:
    """The controller over the configured stores (its garbage goes to phase 1) and a publisher on its producer;
    what they write (pending deletes, topologies, recorded cuts) is signed with the controller's key."""
    bootstrap = preflight.broker(settings)
    store = runtime.metadata_store(settings)
    bindings = runtime.storage_bindings(settings, writer=True)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    codec = runtime.codec(settings)
    try:
        service = runtime.deletion_service(settings, store, producer)
        signer = runtime.record_signer(settings, "controller")
        segments = ChunkedSegmentStorage(store, bindings.get(settings.stream_binding), service, bindings=bindings,
                                         max_rolling_length=max_rolling_length or DEFAULT_MAX_ROLLING_LENGTH)
        topology = KafkaTopologyPublisher(producer, codec, runtime.topic_names(settings).stream_topology,
                                          signer=signer)
        controller = StreamController.beside(segments, settings.metadata_location, topology_sink=topology)
        try:
            yield controller, ConfirmedPublisher(producer, codec, signer=signer)
        finally:
            controller.close()
    finally:
        producer.close()
        bindings.close()
        store.close()

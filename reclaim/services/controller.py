"""A stream controller wired for a reclaim process: metadata store, tier-2, phase 1 and the topology topic."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NoReturn

from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.producers.topology import KafkaTopologyPublisher
from reclaim.security.errors import SigningError
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import GarbageSink, PreparedMark
from reclaim.segments.streams import StreamController
from reclaim.services import preflight, runtime
from reclaim.settings import Settings
from reclaim.storage.metadata import DEFAULT_MAX_ROLLING_LENGTH, ChunkRecord, MetadataTransaction


class _NoPhaseOne:
    """The garbage sink of a controller that holds no controller key: it takes no chunk, so a truncation
    through it fails before the layout changes instead of publishing unsigned pending deletes."""

    def prepare(self, chunks: Sequence[ChunkRecord]) -> NoReturn:
        raise SigningError("this command runs without the controller's key: it cannot hand chunks to phase 1")

    def commit(self, txn: MetadataTransaction, prepared: PreparedMark, chunks: Sequence[ChunkRecord]) -> NoReturn:
        raise SigningError("this command runs without the controller's key: it cannot hand chunks to phase 1")


@contextmanager
def stream_controller(settings: Settings, max_rolling_length: int | None = None, *, controller_key: bool = True
                      ) -> Iterator[tuple[StreamController, ConfirmedPublisher]]:
    """The controller over the configured stores (its garbage goes to phase 1) and a publisher on its producer;
    what they write (pending deletes, topologies, recorded cuts) is signed with the controller's key.

    ``controller_key`` False is for a command that publishes nothing as the controller (``streams set-policy``,
    run by an admin whose keyring holds only the admin's key; ``streams cut`` and ``history``): no controller
    key is looked for, the controller publishes no topology, its publisher signs nothing (sign with
    ``signed_by``), and its phase 1 refuses every chunk (:class:`~reclaim.security.errors.SigningError`)."""
    bootstrap = preflight.broker(settings)
    store = runtime.metadata_store(settings)
    bindings = runtime.storage_bindings(settings, writer=True)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    codec = runtime.codec(settings)
    try:
        service: GarbageSink = _NoPhaseOne()
        signer, topology = None, None
        if controller_key:
            service = runtime.deletion_service(settings, store, producer)
            signer = runtime.record_signer(settings, "controller")
            topology = KafkaTopologyPublisher(producer, codec, runtime.topic_names(settings).stream_topology,
                                              signer=signer)
        segments = ChunkedSegmentStorage(store, bindings.get(settings.stream_binding), service, bindings=bindings,
                                         max_rolling_length=max_rolling_length or DEFAULT_MAX_ROLLING_LENGTH)
        controller = StreamController.beside(segments, settings.metadata_location, topology_sink=topology)
        try:
            yield controller, ConfirmedPublisher(producer, codec, signer=signer)
        finally:
            controller.close()
    finally:
        producer.close()
        bindings.close()
        store.close()

"""PDP-47's client side: subscribers join and leave streams and publish their truncation cuts."""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable

from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.producers.topics import TopicNames
from reclaim.schemas.base import millis_now
from reclaim.schemas.streams import RetentionPolicy, StreamConfig, StreamCut
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.security.keyring import Algorithm, Keyring
from reclaim.security.signing import RecordSigner

log = logging.getLogger(__name__)


def subscriber_key(stream: str, subscriber: str) -> str:
    """The key of a subscriber's records: compaction keeps its latest change and its latest cut."""
    return f"{stream}#{subscriber}"


class SubscriberClient:
    """Adds and removes subscribers and publishes their truncation cuts (PDP-47's controller API, on the bus).

    Every call returns once the broker confirmed the record. Generations order a subscriber's
    changes and cuts: the retention job ignores (and reports) anything older than it has seen.

    With a ``keyring``, each subscriber's changes and cuts are signed with that subscriber's own key
    (a subscriber key whose subject is its name; one signer per subscriber, made on first use), so one
    client may publish for several subscribers; a subscriber without a key in it is a
    :class:`~reclaim.security.errors.SigningError`. Without one they carry the ``publisher``'s signature, if
    any. A policy (:meth:`set_policy`) always carries the ``publisher``'s: the retention job obeys
    only an admin's, so pass ``publisher.signed_by(admin_signer)``.

    Every record names the incarnation of its stream, as ``incarnations`` (stream name to incarnation: e.g.
    :meth:`~reclaim.segments.streams.StreamController.incarnation`, or what ``reclaim streams cut`` prints)
    says: the retention job refuses a record of another incarnation, so a record of a stream deleted and
    created again under its name does nothing to the new one. Without ``incarnations`` the records name
    none, which the job accepts only while record authentication is not enforced.

    Examples
    --------
    >>> client = SubscriberClient(publisher, TopicNames.for_prefix(), keyring=keyring)  # doctest: +SKIP
    >>> client.add_subscriber("scope/orders", "billing", generation=1)  # doctest: +SKIP
    >>> client.update_truncation_cut("scope/orders", "billing", 1, cut)  # doctest: +SKIP
    """

    def __init__(self, publisher: ConfirmedPublisher, topics: TopicNames,
                 clock: Callable[[], int] = millis_now, keyring: Keyring | None = None,
                 incarnations: Callable[[str], str | None] | None = None) -> None:
        self.publisher = publisher
        self.incarnations = incarnations
        self.topics = topics
        self.clock = clock
        self.keyring = keyring
        self._publishers: dict[str, ConfirmedPublisher] = {}

    def _incarnation(self, stream: str) -> str | None:
        return None if self.incarnations is None else self.incarnations(stream)

    def publisher_for(self, subscriber: str) -> ConfirmedPublisher:
        """The publisher of ``subscriber``'s records: signing with its own key when there is a keyring."""
        if self.keyring is None:
            return self.publisher
        publisher = self._publishers.get(subscriber)
        if publisher is None:
            signer = RecordSigner(self.keyring, "subscriber", subject=subscriber, prefer=Algorithm.ED25519)
            publisher = self._publishers[subscriber] = self.publisher.signed_by(signer)
        return publisher

    def add_subscriber(self, stream: str, subscriber: str, generation: int) -> None:
        self._change(stream, subscriber, generation, SubscriberChangeType.ADD)

    def remove_subscriber(self, stream: str, subscriber: str, generation: int) -> None:
        """Unsubscribe: from now on the subscriber holds no truncation back."""
        self._change(stream, subscriber, generation, SubscriberChangeType.REMOVE)

    def _change(self, stream: str, subscriber: str, generation: int, change: SubscriberChangeType) -> None:
        record = SubscriberChange(stream, subscriber, generation, change, self.clock(), self._incarnation(stream))
        self.publisher_for(subscriber).publish(self.topics.subscribers, record, subscriber_key(stream, subscriber))
        log.info("subscriber %s stream=%s subscriber=%s generation=%d", change.name.lower(), stream, subscriber,
                 generation)

    def update_truncation_cut(self, stream: str, subscriber: str, generation: int, cut: StreamCut) -> None:
        """Publish that ``subscriber`` has consumed ``stream`` up to ``cut``."""
        record = SubscriberCut(stream, subscriber, generation, cut, self.clock(), self._incarnation(stream))
        self.publisher_for(subscriber).publish(self.topics.subscriber_cuts, record,
                                               subscriber_key(stream, subscriber))
        log.info("truncation cut published stream=%s subscriber=%s generation=%d segments=%d", stream, subscriber,
                 generation, len(cut))

    def set_policy(self, stream: str, policy: RetentionPolicy) -> StreamConfig:
        """Publish ``stream``'s retention policy for the retention job, signed by the ``publisher``'s signer."""
        record = StreamConfig(stream, policy, self.clock(), self._incarnation(stream))
        self.publisher.publish(self.topics.stream_config, record, stream)
        return record


class ReleaseMode(enum.Enum):
    """When a subscriber's reader publishes its truncation cut (PDP-47)."""

    AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT = "automatic"
    MANUAL_RELEASE_AT_USER_STREAMCUT = "manual"


class SubscriberReader:
    """A subscriber's position tracker: checkpoints its read position and releases cuts for truncation.

    With ``AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT`` every :meth:`checkpoint` publishes the checkpoint's
    cut; with ``MANUAL_RELEASE_AT_USER_STREAMCUT`` nothing is published until :meth:`release`.
    A cut is never published twice in a row.
    """

    def __init__(self, client: SubscriberClient, stream: str, subscriber: str, generation: int,
                 mode: ReleaseMode = ReleaseMode.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT) -> None:
        self.client = client
        self.stream, self.subscriber, self.generation = stream, subscriber, generation
        self.mode = mode
        self.last_checkpoint: StreamCut | None = None
        self.released: StreamCut | None = None

    def checkpoint(self, position: StreamCut) -> None:
        """Record that everything before ``position`` is processed; publish it in automatic mode."""
        self.last_checkpoint = position
        if self.mode is ReleaseMode.AUTOMATIC_RELEASE_AT_LAST_CHECKPOINT:
            self.release(position)

    def release(self, cut: StreamCut | None = None) -> None:
        """Publish ``cut`` (by default the last checkpoint) as the subscriber's truncation cut."""
        chosen = cut if cut is not None else self.last_checkpoint
        if chosen is None or chosen == self.released:
            return
        self.client.update_truncation_cut(self.stream, self.subscriber, self.generation, chosen)
        self.released = chosen

"""Subscribers on the real broker: changes and cuts confirmed, keyed per subscriber, released by checkpoint mode."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher, PublishError
from reclaim.producers.subscribers import ReleaseMode, SubscriberClient, SubscriberReader, subscriber_key
from reclaim.producers.topics import TopicNames
from reclaim.schemas import build_codec
from reclaim.schemas.streams import RetentionPolicy, RetentionType, StreamConfig, StreamCut
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.security.errors import SigningError
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.rules import signers_of
from reclaim.security.signing import RecordSigner, RecordVerifier, Signer
from tests.support.kafka_io import consume_from_start

pytestmark = pytest.mark.integration

STREAM = "scope/orders"


def client_for(bootstrap: str, topics: TopicNames) -> SubscriberClient:
    return SubscriberClient(ConfirmedPublisher(RecordProducer(bootstrap, "idempotent-producer"), build_codec()),
                            topics, clock=lambda: 1_700_000_000_000)


def test_changes_cuts_and_policy_reach_their_topics(kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames],
                                                     unique_name: Callable[[str], str]) -> None:
    topics = kafka_topics()
    client = client_for(kafka_bootstrap, topics)
    cut = StreamCut.from_mapping({0: 10, 1: 20})
    client.add_subscriber(STREAM, "billing", 1)
    client.update_truncation_cut(STREAM, "billing", 1, cut)
    client.remove_subscriber(STREAM, "billing", 2)
    client.set_policy(STREAM, RetentionPolicy(RetentionType.TIME, None, 60_000))
    client.publisher.close()
    codec = build_codec()
    changes = consume_from_start(kafka_bootstrap, [topics.subscribers], unique_name("g"), 2)
    assert [codec.decode(m.value(), SubscriberChange).change for m in changes] == [SubscriberChangeType.ADD,
                                                                                      SubscriberChangeType.REMOVE]
    assert {m.key() for m in changes} == {subscriber_key(STREAM, "billing").encode()}
    (published,) = consume_from_start(kafka_bootstrap, [topics.subscriber_cuts], unique_name("g"), 1)
    assert codec.decode(published.value(), SubscriberCut) == SubscriberCut(STREAM, "billing", 1, cut,
                                                                           1_700_000_000_000)
    (config,) = consume_from_start(kafka_bootstrap, [topics.stream_config], unique_name("g"), 1)
    assert codec.decode(config.value(), StreamConfig).policy.min_limit == 60_000


def test_reader_releases_at_checkpoints_or_only_when_told(kafka_bootstrap: str,
                                                          kafka_topics: Callable[..., TopicNames],
                                                          unique_name: Callable[[str], str]) -> None:
    topics = kafka_topics()
    client = client_for(kafka_bootstrap, topics)
    automatic = SubscriberReader(client, STREAM, "auto", 1)
    manual = SubscriberReader(client, STREAM, "manual", 1, ReleaseMode.MANUAL_RELEASE_AT_USER_STREAMCUT)
    first, second = StreamCut.from_mapping({0: 5}), StreamCut.from_mapping({0: 9})
    automatic.checkpoint(first)
    automatic.checkpoint(first)  # the same cut again is not published twice
    manual.checkpoint(first)
    manual.checkpoint(second)
    manual.release()
    client.publisher.close()
    codec = build_codec()
    cuts = consume_from_start(kafka_bootstrap, [topics.subscriber_cuts], unique_name("g"), 2)
    decoded = sorted((c.subscriber, c.cut.as_dict()) for c in (codec.decode(m.value(), SubscriberCut) for m in cuts))
    assert decoded == [("auto", {0: 5}), ("manual", {0: 9})]


def test_an_unconfirmed_publish_raises_a_retryable_error() -> None:
    # A real fault: nothing listens on this port, so the broker never confirms.
    publisher = ConfirmedPublisher(RecordProducer("127.0.0.1:1", "producer", {"message.timeout.ms": 1000}),
                                   build_codec(), timeout_s=3)
    client = SubscriberClient(publisher, TopicNames.for_prefix("x."))
    with pytest.raises(PublishError) as caught:
        client.add_subscriber(STREAM, "billing", 1)
    assert caught.value.retryable and "not confirmed" in str(caught.value)


def test_with_a_keyring_each_subscriber_signs_with_its_own_key_and_the_policy_with_the_publisher_s(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], unique_name: Callable[[str], str]) -> None:
    keyring = Keyring([new_key("billing-1", "subscriber", Algorithm.ED25519, subject="billing", streams=[STREAM]),
                       new_key("audit-1", "subscriber", Algorithm.ED25519, subject="audit", streams=[STREAM]),
                       new_key("admin-1", "admin", Algorithm.ED25519)])
    topics = kafka_topics()
    publisher = ConfirmedPublisher(RecordProducer(kafka_bootstrap, "idempotent-producer"), build_codec())
    client = SubscriberClient(publisher, topics, keyring=keyring)
    cut = StreamCut.from_mapping({0: 10})
    for name in ("billing", "audit"):
        client.add_subscriber(STREAM, name, 1)
        client.update_truncation_cut(STREAM, name, 1, cut)
    with pytest.raises(SigningError, match="subscriber 'ghost'"):
        client.add_subscriber(STREAM, "ghost", 1)  # no key of its own: nothing sent
    SubscriberClient(publisher.signed_by(RecordSigner(keyring, "admin")), topics).set_policy(
        STREAM, RetentionPolicy(RetentionType.TIME, None, 60_000))
    publisher.close()

    verifier, codec = RecordVerifier(keyring), build_codec()
    for topic, kind in ((topics.subscribers, SubscriberChange), (topics.subscriber_cuts, SubscriberCut)):
        for message in consume_from_start(kafka_bootstrap, [topic], unique_name("g"), 2):
            signer = verifier.verify(topic, message.key(), message.value(), message.headers(), signers_of(kind))
            assert isinstance(signer, Signer), signer
            record = codec.decode(message.value(), kind)
            assert verifier.check_subject(topic, signer, record.subscriber, record.stream) is None  # type: ignore[attr-defined]
            assert signer.key_id == f"{record.subscriber}-1"  # type: ignore[attr-defined]
    (config,) = consume_from_start(kafka_bootstrap, [topics.stream_config], unique_name("g"), 1)
    signer = verifier.verify(topics.stream_config, config.key(), config.value(), config.headers(),
                             signers_of(StreamConfig))
    assert isinstance(signer, Signer) and signer.role == "admin"

"""The secured broker itself: SASL_SSL with SCRAM credentials, ACLs enforced, the admin a super user."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from reclaim.localstack.kafka_security import SecureBroker
from reclaim.producers.config import quiet_logger
from reclaim.settings import Settings
from reclaim.tools.topics import create_topics, describe_topics, topic_specs

pytestmark = pytest.mark.integration


def _metadata_error(config: dict[str, object]) -> KafkaError | None:
    """The error a client with ``config`` meets asking for metadata (None when it gets an answer)."""
    seen: list[KafkaError] = []
    admin = AdminClient({**config, "error_cb": seen.append, "logger": quiet_logger("tests.security")})
    try:
        admin.list_topics(timeout=3)
    except KafkaException as exc:
        admin.poll(1)  # the error events that say why come through poll
        return seen[-1] if seen else exc.args[0]
    return None


def test_a_client_without_credentials_or_with_a_wrong_password_cannot_connect(secure_kafka: SecureBroker) -> None:
    good = secure_kafka.create_user("alice-connect")
    assert _metadata_error(good) is None
    wrong = _metadata_error({**good, "sasl.password": "not-the-password"})
    assert wrong is not None and wrong.code() == KafkaError._AUTHENTICATION
    for config in (
        {"bootstrap.servers": secure_kafka.bootstrap},  # PLAINTEXT
        {k: v for k, v in good.items() if not k.startswith("sasl.")} | {"security.protocol": "SSL"},  # TLS, no SASL
        {k: v for k, v in good.items() if k != "ssl.ca.location"},  # the system's CAs do not know the broker's
    ):
        assert _metadata_error(config) is not None, config


def test_a_user_with_no_acl_sees_no_topic_and_the_admin_creates_reclaims_topics(
        secure_kafka: SecureBroker, unique_name: Callable[[str], str]) -> None:
    settings = Settings(topic_prefix=unique_name("sec") + ".", retry_delays=(1, 2), partitions=1)
    admin = AdminClient(secure_kafka.admin_properties())
    specs = topic_specs(settings)
    assert set(create_topics(admin, specs).values()) == {"created"}
    assert all(row["exists"] for row in describe_topics(admin, specs))
    nobody = AdminClient(secure_kafka.create_user("nobody"))
    assert not set(nobody.list_topics(timeout=10).topics) & {spec.name for spec in specs}

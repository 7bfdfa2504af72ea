"""Unit tests of the levels librdkafka's lines and error events get: what it retries by itself is info."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError

from reclaim.producers.kafka_errors import KafkaErrorLog, RdkafkaLogger
from reclaim.producers.rdkafka_levels import error_level, line_level

W, E, INFO = logging.WARNING, logging.ERROR, logging.INFO


@pytest.mark.parametrize(("level", "facility", "line", "expected"), [
    # The idempotent producer's first PID request while the transaction coordinator loads: retried.
    (W, "GETPID", "[thrd:main]: Failed to acquire idempotence PID from broker localhost:9092/1: "
                  "Broker: Coordinator load in progress: retrying", INFO),
    (W, "GETPID", "[thrd:main]: Failed to acquire idempotence PID from broker b/1: Broker: Not coordinator: "
                  "retrying", INFO),
    # A broker connection refused or dropped: librdkafka reconnects.
    (E, "FAIL", "[thrd:127.0.0.1:9092/bootstrap]: 127.0.0.1:9092/bootstrap: Connect to ipv4#127.0.0.1:9092 failed: "
                "Connection refused (after 0ms in state CONNECT)", INFO),
    (E, "FAIL", "[thrd:b/1]: b/1: Disconnected (after 600003ms in state UP)", INFO),
    (W, "REQTMOUT", "[thrd:b/1]: b/1: Timed out MetadataRequest in flight (after 60001ms, timeout #0): retrying", INFO),
    # What needs a person keeps its level: authentication, TLS, misconfiguration, a poll interval exceeded.
    (E, "FAIL", "[thrd:b/1]: sasl_ssl://b:9093/1: SASL authentication error: Authentication failed during "
                "authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512", E),
    (E, "FAIL", "[thrd:b/1]: ssl://b:9093/bootstrap: SSL handshake failed: certificate verify failed", E),
    (E, "FAIL", "[thrd:b/1]: b:9092/bootstrap: Disconnected: verify that security.protocol is correctly configured, "
                "broker might require SASL authentication", E),
    (W, "CONFWARN", "[thrd:app]: Configuration property retries is a producer property: retrying ignored", W),
    (W, "MAXPOLL", "[thrd:main]: Application maximum poll interval (300000ms) exceeded by 88ms", W),
    (E, "FAIL", "[thrd:b/1]: b/1: Connect to ipv4#10.0.0.1:9092 failed: No route to host", E),
    # Below a warning: unchanged.
    (logging.DEBUG, "GETPID", "Failed to acquire idempotence PID: retrying", logging.DEBUG),
])
def test_a_retried_condition_is_info_and_a_real_problem_keeps_its_level(level: int, facility: str, line: str,
                                                                        expected: int) -> None:
    assert line_level(level, facility, line) == expected


@pytest.mark.parametrize(("code", "level"), [
    (KafkaError._TRANSPORT, INFO), (KafkaError.COORDINATOR_LOAD_IN_PROGRESS, INFO), (KafkaError.NOT_COORDINATOR, INFO),
    (KafkaError.LEADER_NOT_AVAILABLE, INFO), (KafkaError.REQUEST_TIMED_OUT, INFO),
    # Retriable, but something a user waits for stopped: still a warning.
    (KafkaError._ALL_BROKERS_DOWN, W), (KafkaError._MSG_TIMED_OUT, W), (KafkaError.NOT_ENOUGH_REPLICAS, W),
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, W), (KafkaError.SASL_AUTHENTICATION_FAILED, W),
])
def test_the_level_of_an_error_event(code: int, level: int) -> None:
    assert error_level(KafkaError(code)) == level


def test_the_error_log_and_the_rdkafka_logger_apply_the_levels(caplog: pytest.LogCaptureFixture) -> None:
    errors = KafkaErrorLog("idempotent-producer")
    logger = RdkafkaLogger(logging.getLogger("reclaim.rdkafka"), errors)
    with caplog.at_level(logging.INFO):
        logger.log(W, "%s [%s] %s", "GETPID", "rdkafka#producer-1",
                   "[thrd:main]: Failed to acquire idempotence PID from broker b/1: Broker: Coordinator load in "
                   "progress: retrying")
        logger.log(W, "%s [%s] %s", "CONFWARN", "rdkafka#producer-1", "[thrd:app]: No `bootstrap.servers` configured")
        errors(KafkaError(KafkaError._TRANSPORT, "b/1: Disconnected"))
        errors(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert [(r.levelno, r.name) for r in caplog.records] == [
        (INFO, "reclaim.rdkafka"), (W, "reclaim.rdkafka"),
        (INFO, "reclaim.producers.kafka_errors"), (W, "reclaim.producers.kafka_errors")], caplog.text

"""Unit tests of reclaim's reading of Kafka errors: classification, the rate-limited error_cb, commit checks."""

from __future__ import annotations

import logging

import pytest
from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from reclaim.producers.config import error_log, kafka_config
from reclaim.producers.kafka_errors import (
    ErrorKind,
    FatalKafkaError,
    KafkaErrorLog,
    ProducerQueueFullError,
    RdkafkaLogger,
    check_committed,
    classify,
    is_no_offset,
    kafka_error_of,
)
from reclaim.producers.producer import DeliveryTracker, RecordProducer

LOGGER = "reclaim.producers.kafka_errors"


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def error_lines(caplog: pytest.LogCaptureFixture, logger: str = LOGGER) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


@pytest.mark.parametrize(("error", "kind"), [
    (KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence gap", fatal=True), ErrorKind.FATAL),
    (KafkaError(KafkaError._FATAL), ErrorKind.FATAL),
    (KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS, retriable=True), ErrorKind.RETRIABLE),
    (KafkaError(KafkaError._MSG_TIMED_OUT), ErrorKind.RETRIABLE),
    (KafkaError(KafkaError._ALL_BROKERS_DOWN), ErrorKind.RETRIABLE),
    (KafkaError(KafkaError.NOT_ENOUGH_REPLICAS), ErrorKind.RETRIABLE),
    # A group coordinator that moves or still loads answers offset fetches with these, unflagged.
    (KafkaError(KafkaError.NOT_COORDINATOR), ErrorKind.RETRIABLE),
    (KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS), ErrorKind.RETRIABLE),
    (KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), ErrorKind.OTHER),
    (KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED), ErrorKind.OTHER),
])
def test_classify(error: KafkaError, kind: ErrorKind) -> None:
    assert classify(error) is kind


def test_a_fatal_flag_wins_over_a_retriable_one() -> None:
    assert classify(KafkaError(KafkaError._TRANSPORT, fatal=True, retriable=True)) is ErrorKind.FATAL


def test_is_no_offset_reads_the_kafka_error() -> None:
    assert is_no_offset(KafkaException(KafkaError(KafkaError._NO_OFFSET)))
    assert not is_no_offset(KafkaException(KafkaError(KafkaError.REBALANCE_IN_PROGRESS)))


@pytest.mark.parametrize("exc", [KafkaException(), KafkaException("no offset"), KafkaException(KafkaError._NO_OFFSET)])
def test_is_no_offset_is_false_when_the_exception_carries_no_kafka_error(exc: KafkaException) -> None:
    assert not is_no_offset(exc)


def test_kafka_error_of_looks_through_the_cause_chain() -> None:
    fatal = KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied", fatal=True)
    wrapped = SystemError("callback returned a result with an exception set")
    wrapped.__cause__ = KafkaException(fatal)
    assert kafka_error_of(wrapped) is fatal
    assert kafka_error_of(ValueError("unrelated")) is None


def test_check_committed_passes_when_no_partition_failed() -> None:
    check_committed(None)
    check_committed([])
    check_committed([TopicPartition("reclaim.ledger-deletion", 0, 42), TopicPartition("reclaim.ledger-deletion", 1, 7)])


def test_the_error_log_logs_a_repeated_code_once_per_interval_with_the_suppressed_count(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    errors = KafkaErrorLog("consumer g1", interval_s=30, clock=clock)
    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")
    with caplog.at_level(logging.INFO, LOGGER):  # _TRANSPORT, retried by librdkafka, is an info line
        for step in range(5):           # t = 100 .. 104: one line, four repeats suppressed
            clock.now = 100.0 + step
            errors(down)
        errors(KafkaError(KafkaError._TRANSPORT, "connection refused"))  # another code: its own line
        clock.now = 130.0
        errors(down)
    lines = error_lines(caplog)
    assert len(lines) == 3
    assert "client=consumer g1 _ALL_BROKERS_DOWN: 1/1 brokers are down" in lines[0] and "more like it" not in lines[0]
    assert "_TRANSPORT" in lines[1]
    assert "(4 more like it in the last 30s)" in lines[2]
    assert errors.fatal_error is None


def test_admit_counts_from_the_last_logged_line() -> None:
    clock = FakeClock()
    errors = KafkaErrorLog("producer", interval_s=10, clock=clock)
    assert errors.admit(1) == 0
    clock.now += 9.9
    assert errors.admit(1) is None
    clock.now += 0.1
    assert errors.admit(1) == 1
    assert errors.admit(2) == 0


def test_the_error_log_keeps_the_first_fatal_error_and_raises_it() -> None:
    errors = KafkaErrorLog("idempotent-producer")
    errors.raise_if_fatal()  # nothing yet
    first = KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence gap", fatal=True)
    errors(first)
    errors(KafkaError(KafkaError._FATAL, "Local: Fatal error", fatal=True))
    assert errors.fatal_error is first
    with pytest.raises(FatalKafkaError) as caught:
        errors.raise_if_fatal()
    assert not caught.value.retryable
    assert str(caught.value) == ("fatal Kafka error in idempotent-producer client, it cannot be used again: "
                                 "OUT_OF_ORDER_SEQUENCE_NUMBER: sequence gap")


def test_raise_if_fatal_records_a_fatal_error_raised_by_a_client_call() -> None:
    errors = KafkaErrorLog("producer")
    raised = KafkaException(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied", fatal=True))
    with pytest.raises(FatalKafkaError) as caught:
        errors.raise_if_fatal(raised)
    assert caught.value.__cause__ is raised
    assert errors.fatal_error is not None and errors.fatal_error.code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


def test_a_bare_fatal_code_gives_way_to_an_error_that_names_the_cause() -> None:
    errors = KafkaErrorLog("producer")
    errors.record_fatal(KafkaError(KafkaError._FATAL, "Unable to produce message", fatal=True))
    cause = KafkaError(KafkaError.PRODUCER_FENCED, "fenced", fatal=True)
    errors.record_fatal(cause)
    errors.record_fatal(KafkaError(KafkaError._FATAL, "Unable to produce message", fatal=True))
    assert errors.fatal_error is cause


def test_the_rdkafka_logger_passes_lines_on_and_records_the_fatal_line(caplog: pytest.LogCaptureFixture) -> None:
    errors = KafkaErrorLog("idempotent-producer")
    logger = RdkafkaLogger(logging.getLogger("reclaim.rdkafka"), errors)
    with caplog.at_level(logging.INFO, "reclaim.rdkafka"):
        logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#producer-1", "[thrd:b/1]: connect failed")
        assert errors.fatal_error is None
        logger.log(logging.CRITICAL, "%s [%s] %s", "FATAL", "rdkafka#producer-1",
                   "[thrd:main]: Fatal error: Broker: Producer fenced")
    assert [r.getMessage() for r in caplog.records if r.name == "reclaim.rdkafka"] == [
        "FAIL [rdkafka#producer-1] [thrd:b/1]: connect failed",
        "FATAL [rdkafka#producer-1] [thrd:main]: Fatal error: Broker: Producer fenced"]
    with pytest.raises(FatalKafkaError, match="_FATAL: Fatal error: Broker: Producer fenced$"):
        errors.raise_if_fatal()


def test_raise_if_fatal_returns_for_a_non_fatal_client_error() -> None:
    errors = KafkaErrorLog("producer")
    errors.raise_if_fatal(KafkaException(KafkaError(KafkaError._TRANSPORT)))
    assert errors.fatal_error is None


def test_the_error_log_refuses_a_negative_interval() -> None:
    with pytest.raises(ValueError, match="interval_s must not be negative"):
        KafkaErrorLog("producer", interval_s=-1)


def test_kafka_config_installs_one_error_log_per_client_and_forwards_to_an_overriding_error_cb() -> None:
    received: list[KafkaError] = []
    first = kafka_config("127.0.0.1:9092", "consumer", {"group.id": "workers", "error_cb": received.append})
    second = kafka_config("127.0.0.1:9092", "admin")
    assert error_log(first) is not error_log(second)
    assert error_log(first).client == "consumer workers" and error_log(second).client == "admin"
    assert isinstance(first["logger"], RdkafkaLogger) and first["logger"].errors is error_log(first)
    event = KafkaError(KafkaError._TRANSPORT)
    first["error_cb"](event)
    assert received == [event]


def test_error_log_of_a_config_not_built_by_kafka_config_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no reclaim error log"):
        error_log({"bootstrap.servers": "127.0.0.1:9092"})


def test_queue_full_error_is_retryable_and_names_topic_and_wait() -> None:
    error = ProducerQueueFullError("reclaim.truncation", 2.5)
    assert error.retryable
    assert str(error) == ("producer queue still full after waiting 2.5s to send to reclaim.truncation: "
                          "the broker is not taking records")


def delivered(tracker: DeliveryTracker, index: int, err: KafkaError | None, partition: int = 0) -> None:
    tracker.callback(index)(err, Message(topic="reclaim.ledger-deletion", partition=partition, value=b"v"))


def test_the_tracker_keeps_a_fatal_delivery_error() -> None:
    tracker = DeliveryTracker()
    delivered(tracker, 0, None)
    delivered(tracker, 1, KafkaError(KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER, "sequence gap", fatal=True))
    assert tracker.confirmed == {0}
    assert tracker.fatal is not None and tracker.fatal.code() == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert tracker.unconfirmed() == {1}


def test_the_tracker_logs_other_failures_once_per_code_and_counts_them(caplog: pytest.LogCaptureFixture) -> None:
    tracker = DeliveryTracker()
    with caplog.at_level(logging.INFO, "reclaim.producers.producer"):
        for index in range(3):
            delivered(tracker, index, KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), partition=index)
        delivered(tracker, 3, KafkaError(KafkaError._MSG_TIMED_OUT))
        delivered(tracker, 4, None)
        tracker.log_failures()
    assert tracker.fatal is None
    assert tracker.unconfirmed() == {0, 1, 2, 3}
    assert tracker.failure_counts == {"MSG_SIZE_TOO_LARGE": 3, "_MSG_TIMED_OUT": 1}
    lines = error_lines(caplog, "reclaim.producers.producer")
    assert len(lines) == 3
    assert "MSG_SIZE_TOO_LARGE" in lines[0] and "kind=other" in lines[0]
    assert "_MSG_TIMED_OUT" in lines[1] and "kind=retriable" in lines[1]
    assert lines[2] == "delivery failed for 3 records: error=MSG_SIZE_TOO_LARGE"


class _ClientRaisingAfterAFatalError:
    """Stands in for the client (the binding's state cannot be forced from a real broker): its flush
    raises what a delivery callback raised while the binding still held the fatal error's exception."""

    def flush(self, timeout_s: float) -> int:
        raise AttributeError("__getitem__")


def test_any_exception_from_a_client_call_after_a_fatal_error_is_that_fatal_error() -> None:
    producer = RecordProducer("127.0.0.1:9", "idempotent-producer")
    producer._producer = _ClientRaisingAfterAFatalError()  # type: ignore[assignment]
    producer.errors.record_fatal(KafkaError(KafkaError.CLUSTER_AUTHORIZATION_FAILED, "denied", fatal=True))
    tracker = DeliveryTracker()
    tracker.callback(0)
    with pytest.raises(FatalKafkaError, match="CLUSTER_AUTHORIZATION_FAILED") as raised:
        producer.wait(tracker, timeout_s=1)
    assert isinstance(raised.value.__cause__, AttributeError)


def test_an_exception_from_a_client_call_without_a_fatal_error_is_raised_as_it_is() -> None:
    producer = RecordProducer("127.0.0.1:9", "idempotent-producer")
    producer._producer = _ClientRaisingAfterAFatalError()  # type: ignore[assignment]
    tracker = DeliveryTracker()
    tracker.callback(0)
    with pytest.raises(AttributeError):
        producer.wait(tracker, timeout_s=1)

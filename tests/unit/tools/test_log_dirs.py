"""Partition sizes for ``--max-bytes``: the operator's librdkafka properties as kafka-python's settings, and
kafka-python's DescribeLogDirs answers read into one size per partition."""

from __future__ import annotations

import logging

import pytest

from reclaim.exits import Unavailable, UsageError
from reclaim.tools.log_dirs import LogDirSizes, SizeReckoner, kafka_python_settings, partition_sizes


def test_a_scram_over_tls_principal_is_carried_over() -> None:
    settings = kafka_python_settings("SASL_SSL://b1:9093,b2:9093", {
        "security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "poller",
        "sasl.password": "s3cret", "ssl.ca.location": "/etc/ca.pem", "ssl.endpoint.identification.algorithm": "none",
        "socket.keepalive.enable": "true"})
    assert settings["bootstrap_servers"] == ["b1:9093", "b2:9093"]
    assert {k: settings[k] for k in ("security_protocol", "sasl_mechanism", "sasl_plain_username",
                                     "sasl_plain_password", "ssl_cafile", "ssl_check_hostname")} == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512", "sasl_plain_username": "poller",
        "sasl_plain_password": "s3cret", "ssl_cafile": "/etc/ca.pem", "ssl_check_hostname": False}
    assert "socket_keepalive_enable" not in settings  # tuning: left out


def test_mutual_tls_files_and_hostname_checks_are_carried_over() -> None:
    settings = kafka_python_settings("b1:9093", {
        "security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem",
        "ssl.key.password": "pw", "ssl.endpoint.identification.algorithm": "https"})
    assert (settings["ssl_certfile"], settings["ssl_keyfile"], settings["ssl_password"], settings["ssl_check_hostname"]
            ) == ("/c.pem", "/k.pem", "pw", True)


@pytest.mark.parametrize("name", ["sasl.oauthbearer.method", "ssl.keystore.location", "ssl.ca.pem",
                                  "sasl.kerberos.service.name"])
def test_a_security_property_kafka_python_cannot_take_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(UsageError, match=f"cannot give Kafka property {name}: use --max") as caught:
        kafka_python_settings("b1:9093", {"security.protocol": "SASL_SSL", name: "x"})
    assert "\n" not in str(caught.value)


def log_dir(topics: dict[str, list[tuple[int, int, bool]]], error_code: int = 0) -> dict[str, object]:
    return {"error_code": error_code, "log_dir": "/data", "total_bytes": 1, "usable_bytes": 1, "topics": [
        {"name": name, "partitions": [{"partition_index": p, "partition_size": size, "offset_lag": 0,
                                       "is_future_key": future} for p, size, future in parts]}
        for name, parts in topics.items()]}


def test_each_partition_is_its_largest_replica_of_those_asked() -> None:
    answers = [
        {"broker": 1, "log_dirs": [log_dir({"orders": [(0, 1000, False), (1, 40, False)], "other": [(0, 9, False)]})]},
        {"broker": 2, "log_dirs": [log_dir({"orders": [(0, 900, False)]}),  # a follower behind
                                   log_dir({"orders": [(1, 5000, True)]}),  # being moved: not counted
                                   log_dir({"orders": [(2, 7000, False)]}, error_code=57)]},  # offline dir
    ]
    assert partition_sizes(answers, {"orders": [0, 1, 2]}) == {("orders", 0): 1000, ("orders", 1): 40}


def test_no_answer_leaves_every_size_unknown() -> None:
    assert partition_sizes([{"broker": 1, "log_dirs": []}], {"orders": [0]}) == {}


def test_bytes_are_unknown_until_the_partition_grows_between_two_observations() -> None:
    reckoner = SizeReckoner()
    assert reckoner.reckon("orders", 0, 0, 100, 10_000) is None
    assert reckoner.reckon("orders", 0, 0, 100, 10_000) is None  # no growth: still unknown
    assert reckoner.reckon("orders", 0, 0, 150, 15_000) == 150 * 100  # 100 bytes a record


def test_a_start_moved_inside_a_segment_does_not_count_the_bytes_left_below_it() -> None:
    # DeleteRecords moves the start to 120; the segment keeps its bytes, so the size on disk stays 15,000.
    reckoner = SizeReckoner()
    reckoner.reckon("orders", 0, 0, 100, 10_000)
    reckoner.reckon("orders", 0, 0, 150, 15_000)
    assert reckoner.reckon("orders", 0, 120, 150, 15_000) == 30 * 100  # the 30 records left, not 15,000


def test_a_segment_deleted_between_observations_makes_the_bytes_err_low() -> None:
    # 50 records of 100 bytes written while a 4,000-byte segment below the start went: the size grew by 1,000 only.
    reckoner = SizeReckoner()
    reckoner.reckon("orders", 0, 0, 100, 10_000)
    reckoner.reckon("orders", 0, 0, 150, 15_000)
    assert reckoner.reckon("orders", 0, 40, 200, 16_000) == 160 * 20  # 20 bytes a record: less than there are
    assert reckoner.reckon("orders", 0, 40, 210, 16_000) == 170 * 20  # no growth: the last figure holds


def test_a_topic_forgotten_starts_again_unknown() -> None:
    reckoner = SizeReckoner()
    reckoner.reckon("orders", 0, 0, 100, 10_000)
    reckoner.reckon("orders", 0, 0, 150, 15_000)
    reckoner.reckon("clicks", 0, 0, 1, 10)
    reckoner.forget("orders")
    assert reckoner.reckon("orders", 0, 0, 150, 15_000) is None
    assert reckoner.last == {("clicks", 0): (1, 10), ("orders", 0): (150, 15_000)}


def test_brokers_that_do_not_answer_are_unavailable_in_one_line() -> None:
    sizes = LogDirSizes("127.0.0.1:1", {}, timeout_ms=1000)  # a closed port: no broker there
    with pytest.raises(Unavailable, match=r"^reading partition sizes \(DescribeLogDirs\): ") as caught:
        sizes({"orders": [0]})
    assert "\n" not in str(caught.value)
    with pytest.raises(UsageError, match="cannot give Kafka property ssl.keystore.location"):
        LogDirSizes("127.0.0.1:1", {"ssl.keystore.location": "/k.p12"})({"orders": [0]})


def test_the_sasl_password_reaches_no_log_line_even_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    props = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "poller",
             "sasl.password": "s3cret-never-logged"}
    with caplog.at_level(logging.DEBUG), pytest.raises(Unavailable) as caught:
        LogDirSizes("127.0.0.1:1", props, timeout_ms=1000)({"orders": [0]})
    assert "s3cret-never-logged" not in caplog.text and "s3cret-never-logged" not in str(caught.value)

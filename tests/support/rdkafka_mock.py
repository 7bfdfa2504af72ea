"""librdkafka's own mock Kafka cluster, reached through ctypes, for faults a real broker will not produce.

The mock cluster speaks the Kafka protocol on loopback ports inside this process; any client (the
confluent-kafka ones reclaim builds) connects to it like to a broker. Unlike a real broker it takes
injected request errors, e.g. a fatal ``CLUSTER_AUTHORIZATION_FAILED`` answer to an idempotent
producer's ``InitProducerId``. confluent-kafka-python does not wrap this API, hence ctypes on the
librdkafka the wheel ships.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from pathlib import Path
from types import TracebackType

import confluent_kafka

#: Kafka protocol ApiKeys the tests inject errors into.
OFFSET_COMMIT = 8
INIT_PRODUCER_ID = 22

_RD_KAFKA_PRODUCER = 0


def _load_librdkafka() -> ctypes.CDLL:
    bundled = sorted((Path(confluent_kafka.__file__).parent.parent / "confluent_kafka.libs").glob("librdkafka*.so*"))
    path = str(bundled[0]) if bundled else ctypes.util.find_library("rdkafka")
    if path is None:
        raise RuntimeError("librdkafka not found next to confluent_kafka nor on the library path")
    lib = ctypes.CDLL(path)
    vp, cp = ctypes.c_void_p, ctypes.c_char_p
    lib.rd_kafka_conf_new.restype = vp
    lib.rd_kafka_new.argtypes = [ctypes.c_int, vp, cp, ctypes.c_size_t]
    lib.rd_kafka_new.restype = vp
    lib.rd_kafka_destroy.argtypes = [vp]
    lib.rd_kafka_mock_cluster_new.argtypes = [vp, ctypes.c_int]
    lib.rd_kafka_mock_cluster_new.restype = vp
    lib.rd_kafka_mock_cluster_destroy.argtypes = [vp]
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
    lib.rd_kafka_mock_cluster_bootstraps.restype = cp
    lib.rd_kafka_mock_topic_create.argtypes = [vp, cp, ctypes.c_int, ctypes.c_int]
    lib.rd_kafka_mock_topic_create.restype = ctypes.c_int
    lib.rd_kafka_mock_push_request_errors_array.argtypes = [vp, ctypes.c_int16, ctypes.c_size_t,
                                                            ctypes.POINTER(ctypes.c_int)]
    return lib


class MockCluster:
    """A librdkafka mock cluster with ``brokers`` brokers; use as a context manager."""

    def __init__(self, brokers: int = 1) -> None:
        self._lib = _load_librdkafka()
        errstr = ctypes.create_string_buffer(512)
        # The cluster lives in a handle of its own, which never connects anywhere.
        self._rk = self._lib.rd_kafka_new(_RD_KAFKA_PRODUCER, self._lib.rd_kafka_conf_new(), errstr, len(errstr))
        if not self._rk:
            raise RuntimeError(f"librdkafka handle for the mock cluster: {errstr.value.decode()}")
        self._cluster = self._lib.rd_kafka_mock_cluster_new(self._rk, brokers)
        if not self._cluster:
            self._lib.rd_kafka_destroy(self._rk)
            raise RuntimeError("librdkafka could not create a mock cluster")
        self.bootstrap: str = self._lib.rd_kafka_mock_cluster_bootstraps(self._cluster).decode()

    def create_topic(self, name: str, partitions: int = 1) -> None:
        code = self._lib.rd_kafka_mock_topic_create(self._cluster, name.encode(), partitions, 1)
        if code:
            raise RuntimeError(f"mock topic {name}: error code {code}")

    def push_request_errors(self, api_key: int, *codes: int) -> None:
        """The next ``len(codes)`` requests of ``api_key`` are answered with these error codes, in order."""
        errors = (ctypes.c_int * len(codes))(*codes)
        self._lib.rd_kafka_mock_push_request_errors_array(self._cluster, api_key, len(codes), errors)

    def close(self) -> None:
        if self._cluster:
            self._lib.rd_kafka_mock_cluster_destroy(self._cluster)
            self._cluster = None
            self._lib.rd_kafka_destroy(self._rk)

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

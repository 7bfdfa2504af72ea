"""Prometheus metrics of the storage layer, defined once for every binding and the metadata store."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

STORAGE_OPERATIONS = Counter(
    "reclaim_storage_operations_total",
    "Chunk storage operations by binding, operation and outcome (ok or the error class).",
    ["binding", "operation", "outcome"],
)

STORAGE_OPERATION_SECONDS = Histogram(
    "reclaim_storage_operation_seconds",
    "Latency of chunk storage operations by binding and operation.",
    ["binding", "operation"],
    buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)

STORAGE_BYTES = Counter(
    "reclaim_storage_bytes_total",
    "Bytes moved by chunk storage, by binding and direction (read or written).",
    ["binding", "direction"],
)

STORAGE_DELETED_CHUNKS = Counter(
    "reclaim_storage_deleted_chunks_total",
    "Chunks handled by delete and delete_many, by binding and per-key outcome.",
    ["binding", "outcome"],
)

METADATA_TRANSACTIONS = Counter(
    "reclaim_metadata_transactions_total",
    "Metadata store transactions by outcome (committed, conflict, rolled_back, unavailable).",
    ["outcome"],
)

"""reclaim's metrics as an exporter shows them: lower-case snake label values, zero series, no ``_created``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.parser import text_string_to_metric_families

import reclaim.consumers.truncation_applier  # noqa: F401 - registers reclaim_truncations
import reclaim.retention.spark_metrics  # noqa: F401 - registers reclaim_retention_*
import reclaim.services.health  # noqa: F401 - registers reclaim_dependency_up
import reclaim.services.topic_applier  # noqa: F401 - registers reclaim_topic_truncations_total
import reclaim.services.topic_poller  # noqa: F401 - registers reclaim_topic_retention_*
from reclaim.deletion import metrics
from reclaim.storage import metrics as storage_metrics
from reclaim.storage.metrics import snake

#: Labels whose values reclaim names itself; topic, tier, binding and dependency carry outside names.
OWN_LABELS = {"outcome", "ledger_type", "reason", "result", "kind", "direction", "operation"}
SNAKE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)*$")


def samples() -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for family in REGISTRY.collect() for s in family.samples
            if s.name.startswith("reclaim_")]


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


@pytest.mark.parametrize(("text", "expected"), [
    ("OFFLOAD_LEDGER", "offload_ledger"), ("LEDGER", "ledger"), ("already-gone", "already_gone"),
    ("DELETED", "deleted"), ("ChunkNotFoundError", "chunk_not_found_error"), ("S3Error", "s3_error"),
    ("HTTPTimeout", "http_timeout"), ("retryable-error", "retryable_error"), ("ok", "ok"),
])
def test_snake_makes_lower_case_snake_label_values(text: str, expected: str) -> None:
    assert snake(text) == expected


def test_every_label_reclaim_names_is_lower_case_snake() -> None:
    metrics.initialise(["t.ledger-deletion"], ["t.ledger-deletion.retry-10s"], ["fs-tier2"])
    storage_metrics.initialise(["fs-tier2"])
    bad = {(name, key, v) for name, labels, _ in samples() for key, v in labels.items()
           if key in OWN_LABELS and not SNAKE.match(v)}
    assert bad == set()


def test_known_label_values_start_at_zero() -> None:
    assert value("reclaim_deletion_outcomes_total", outcome="already_gone") is not None
    assert value("reclaim_deletion_outcomes_total", outcome="ownership_mismatch") is not None
    assert value("reclaim_ledgers_deleted_total", ledger_type="offload_ledger") is not None
    assert value("reclaim_ledger_delete_failures_total", ledger_type="ledger",
                 reason="storage_unavailable_error") is not None
    assert value("reclaim_deletion_dlq_sent_total", reason="fatal") is not None
    assert value("reclaim_deletion_dlq_sent_total", reason="retryable_error") is not None  # attempts ran out
    assert value("reclaim_deletion_dlq_sent_total", reason="deleted") is None  # acked, never dead-lettered
    assert value("reclaim_mark_batches_total", result="partial") is not None
    assert value("reclaim_metadata_transactions_total", outcome="rolled_back") is not None
    assert value("reclaim_truncations_total", outcome="no_op") is not None
    assert value("reclaim_truncations_total", outcome="unknown_stream") is not None
    assert value("reclaim_retention_rejects_total", kind="stale_generation") is not None


def test_initialise_creates_the_series_of_topics_tiers_and_bindings() -> None:
    retry = ["x.ledger-deletion.retry-10s", "x.ledger-deletion.retry-60s"]
    metrics.initialise(["x.ledger-deletion", *retry], retry, ["s3-x"])
    storage_metrics.initialise(["s3-x"])
    for tier in retry:
        assert value("reclaim_deletion_retries_sent_total", tier=tier) == 0.0
    assert value("reclaim_deletion_messages_received_total", topic="x.ledger-deletion") == 0.0
    assert value("reclaim_deletion_batch_delete_seconds_count", binding="s3-x") == 0.0
    assert value("reclaim_storage_operations_total", binding="s3-x", operation="delete_many",
                 outcome="storage_unavailable_error") == 0.0
    assert value("reclaim_storage_operations_total", binding="s3-x", operation="get_info", outcome="ok") == 0.0
    assert value("reclaim_storage_deleted_chunks_total", binding="s3-x", outcome="already_gone") == 0.0
    assert value("reclaim_storage_bytes_total", binding="s3-x", direction="written") == 0.0


def test_no_created_series_are_exported() -> None:
    text = generate_latest(REGISTRY).decode()
    assert "reclaim_deletion_outcomes_total" in text
    assert "_created" not in text


def test_the_audit_gauges_are_written_as_a_textfile(tmp_path: Path) -> None:
    path = tmp_path / "reclaim_audit.prom"
    storage_metrics.write_textfile(path, {"s3-tier2": 3, "fs-tier2": 0}, finished_at=1_700_000_000.0)
    storage_metrics.write_textfile(path, {"s3-tier2": 2}, finished_at=1_700_000_060.0)
    found = {(s.name, tuple(sorted(s.labels.items())), s.value)
             for family in text_string_to_metric_families(path.read_text()) for s in family.samples}
    assert found == {("reclaim_audit_orphans", (("binding", "s3-tier2"),), 2.0),
                     ("reclaim_audit_last_run_timestamp_seconds", (), 1_700_000_060.0)}
    assert list(tmp_path.iterdir()) == [path]  # written atomically: no temporary file left


def test_the_stalled_gauges_are_a_textfile_of_their_own(tmp_path: Path) -> None:
    audit, stalled = tmp_path / "reclaim_audit.prom", tmp_path / "reclaim_stalled.prom"
    storage_metrics.write_textfile(audit, {"fs-tier2": 1}, finished_at=1_700_000_000.0)
    storage_metrics.write_stalled_textfile(stalled, {"fs-tier2": 4, "s3-tier2": 0}, finished_at=1_700_000_060.0)
    found = {(s.name, tuple(sorted(s.labels.items())), s.value)
             for family in text_string_to_metric_families(stalled.read_text()) for s in family.samples}
    assert found == {("reclaim_stalled_chunks", (("binding", "fs-tier2"),), 4.0),
                     ("reclaim_stalled_chunks", (("binding", "s3-tier2"),), 0.0),
                     ("reclaim_stalled_last_run_timestamp_seconds", (), 1_700_000_060.0)}
    assert "reclaim_stalled" not in audit.read_text()  # node_exporter reads both files: no family twice


def test_the_audit_textfile_refuses_negative_counts(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="counts must be >= 0"):
        storage_metrics.write_textfile(tmp_path / "a.prom", {"s3-tier2": -1})
    assert not (tmp_path / "a.prom").exists()

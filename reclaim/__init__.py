"""reclaim: safe deletion and retention for tiered stream storage, on Kafka and Spark.

The names a program builds with are here; each is imported on first use, so ``import reclaim`` loads
neither Spark nor a database driver (those come with the ``reclaim[spark]`` and ``reclaim[postgres]``
extras). The command line (:mod:`reclaim.cli`) and the processes it runs (:mod:`reclaim.services`)
are built from the same names.

Tasks, each from one :class:`Settings` (see the library page of the docs for an example of each):
    :func:`load_settings` reads a config file and the environment; :func:`create_topics` makes reclaim's
    topics; :func:`open_deletions` publishes pending deletes for chunks (:class:`Deletions`);
    :func:`open_streams` creates, writes and truncates streams; :func:`audit` returns the audit's
    :class:`AuditReport`; :func:`start_worker` runs phase 2 on a thread until :meth:`Worker.stop`.
Deletion (the two phases):
    :class:`LedgerDeletionService` marks chunks deleted in the metadata store and publishes one
    ``PendingDeleteLedgerInfo`` a chunk (phase 1); :class:`DeletionWorker` (configured by
    :class:`WorkerConfig`) consumes them, verifies ownership and deletes the chunks from tier-2 (phase 2).
Tier-2 storage:
    :class:`FileSystemChunkStorage`, :class:`S3ChunkStorage` (with :class:`S3Settings`), and
    :class:`StorageBindings`, the bindings a deployment has, by tier.
Metadata:
    :func:`open_metadata_store` opens :class:`SQLiteMetadataStore` or :class:`PostgresMetadataStore` by
    location (a path or a ``postgresql://`` URL).
Streams and retention:
    :class:`StreamController` (streams over segments, scaling, truncation), :class:`RetentionJob` and
    :class:`RetentionJobConfig` (the Spark Structured Streaming job, started by
    :func:`start_retention_job`).
Records:
    :class:`Keyring`, :class:`RecordSigner` and :class:`RecordVerifier` sign and check reclaim's records.
Errors:
    :class:`ReclaimError` is the root of every error reclaim raises on purpose.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pkgutil

    # Never run; for jedi, the engine of some editors. jedi looks for the sub-packages of a package whose
    # first 50 lines hold `extend_path(__path__` in each reclaim/ folder on its path: here also
    # .package/reclaim, where `make venv` links the folders that pyproject's package-dir maps into reclaim.
    # At run time setuptools' import hook maps them, and reclaim's one folder is this one.
    __path__ = pkgutil.extend_path(__path__, __name__)

    from reclaim.api import (
        Deletions,
        Worker,
        audit,
        create_topics,
        load_settings,
        open_deletions,
        open_streams,
        start_worker,
    )
    from reclaim.consumers.deletion_worker import DeletionWorker, WorkerConfig
    from reclaim.deletion.mark import LedgerDeletionService, MarkResult
    from reclaim.errors import ReclaimError
    from reclaim.retention.spark_job import RetentionJob, RetentionJobConfig, start_retention_job
    from reclaim.schemas.streams import StreamCut
    from reclaim.security.keyring import Keyring
    from reclaim.security.signing import RecordSigner, RecordVerifier
    from reclaim.segments.streams import StreamController
    from reclaim.settings import Settings
    from reclaim.storage.bindings import StorageBindings
    from reclaim.storage.filesystem import FileSystemChunkStorage
    from reclaim.storage.s3 import S3ChunkStorage, S3Settings
    from reclaim.storage.sql_store import PostgresMetadataStore, SQLiteMetadataStore, open_metadata_store
    from reclaim.tools.audit import AuditReport

#: Where each public name is defined: its module under reclaim.
_MODULES = {
    "Deletions": "api",
    "Worker": "api",
    "audit": "api",
    "create_topics": "api",
    "load_settings": "api",
    "open_deletions": "api",
    "open_streams": "api",
    "start_worker": "api",
    "DeletionWorker": "consumers.deletion_worker",
    "WorkerConfig": "consumers.deletion_worker",
    "LedgerDeletionService": "deletion.mark",
    "MarkResult": "deletion.mark",
    "ReclaimError": "errors",
    "RetentionJob": "retention.spark_job",
    "RetentionJobConfig": "retention.spark_job",
    "start_retention_job": "retention.spark_job",
    "StreamCut": "schemas.streams",
    "Keyring": "security.keyring",
    "RecordSigner": "security.signing",
    "RecordVerifier": "security.signing",
    "StreamController": "segments.streams",
    "Settings": "settings",
    "StorageBindings": "storage.bindings",
    "FileSystemChunkStorage": "storage.filesystem",
    "S3ChunkStorage": "storage.s3",
    "S3Settings": "storage.s3",
    "PostgresMetadataStore": "storage.sql_store",
    "SQLiteMetadataStore": "storage.sql_store",
    "open_metadata_store": "storage.sql_store",
    "AuditReport": "tools.audit",
}

__all__ = [
    "AuditReport",
    "DeletionWorker",
    "Deletions",
    "FileSystemChunkStorage",
    "Keyring",
    "LedgerDeletionService",
    "MarkResult",
    "PostgresMetadataStore",
    "ReclaimError",
    "RecordSigner",
    "RecordVerifier",
    "RetentionJob",
    "RetentionJobConfig",
    "S3ChunkStorage",
    "S3Settings",
    "SQLiteMetadataStore",
    "Settings",
    "StorageBindings",
    "StreamController",
    "StreamCut",
    "Worker",
    "WorkerConfig",
    "audit",
    "create_topics",
    "load_settings",
    "open_deletions",
    "open_metadata_store",
    "open_streams",
    "start_retention_job",
    "start_worker",
]


def __getattr__(name: str) -> Any:
    """Each public name imported on first use (PEP 562)."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'reclaim' has no attribute {name!r}")
    try:
        value = getattr(import_module(f"reclaim.{module}"), name)
    except ModuleNotFoundError as exc:
        from reclaim.extras import missing_extra

        missing = missing_extra(exc, f"reclaim.{name}")
        if missing is None:
            raise
        raise missing from exc
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])

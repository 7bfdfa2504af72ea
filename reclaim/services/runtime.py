"""Builds a process's long-lived parts from its settings: metadata store, bindings, codec, pipeline."""

from __future__ import annotations

import logging
from pathlib import Path

from prometheus_client import Gauge

from reclaim.consumers.deletion_worker import DeletionWorker, WorkerConfig
from reclaim.deletion.executor import DeletionExecutor
from reclaim.deletion.mark import LedgerDeletionService
from reclaim.exits import Unavailable, UsageError
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.producer import RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.schemas.codec import RecordCodec, build_codec
from reclaim.security.keyring import Algorithm, Keyring, load_keyring
from reclaim.security.live import KeyringFile
from reclaim.security.signing import AuthMode, RecordSigner, RecordVerifier
from reclaim.services import client_security, preflight
from reclaim.settings import AWS_S3, RECORD_AUTH_MODES, Settings
from reclaim.storage.azure import AzureChunkStorage, AzureSettings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkStorage, Tier
from reclaim.storage.errors import MetadataError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.gcs import GcsChunkStorage, GcsSettings
from reclaim.storage.s3 import S3ChunkStorage, S3Settings
from reclaim.storage.sql_store import SQLMetadataStore, is_postgres_url, open_metadata_store

log = logging.getLogger(__name__)


def topic_names(settings: Settings) -> TopicNames:
    return TopicNames.for_prefix(settings.topic_prefix, settings.retry_delays)


def metadata_store(settings: Settings, *, create: bool = True) -> SQLMetadataStore:
    """The metadata store (SQLite file or PostgreSQL database); a writer (``create``) makes or migrates it,
    a reader or a worker never does: for them a missing, foreign or corrupt store, or a server that does
    not answer, is one :class:`~reclaim.exits.Unavailable` line."""
    location = settings.metadata_location
    if create and not is_postgres_url(location):
        Path(location).parent.mkdir(parents=True, exist_ok=True)
    try:
        return open_metadata_store(location, create=create, pool_size=settings.metadata_pool_size)
    except MetadataError as exc:
        raise Unavailable(f"{exc}: check --metadata-url / RECLAIM_METADATA_URL, or --metadata-path / "
                          "RECLAIM_METADATA_PATH (or --state-dir); only writers create the store") from exc


def s3_settings(settings: Settings) -> S3Settings | None:
    """The S3 tier-2 binding's settings when one is configured, else None.

    ``RECLAIM_S3_ENDPOINT`` (a URL, or ``aws`` for AWS S3 in ``s3_region``) with the configured
    credentials, or boto3's credential chain when no access key is set. The local stack's endpoint is
    used only when configured (``reclaim --config <state-dir>/local.toml``), like any other.
    """
    if not settings.s3_endpoint:
        return None
    return S3Settings(
        bucket=settings.s3_bucket, endpoint_url=None if settings.s3_endpoint == AWS_S3 else settings.s3_endpoint,
        access_key=settings.s3_access_key, secret_key=settings.s3_secret_key,
        session_token=settings.s3_session_token, region=settings.s3_region, path_style=settings.s3_path_style,
        conditional_deletes=(settings.s3_endpoint == AWS_S3 if settings.s3_conditional_deletes is None
                             else settings.s3_conditional_deletes))


def s3_binding(settings: Settings) -> S3ChunkStorage | None:
    """The S3 tier-2 binding when one is configured (see :func:`s3_settings`), else None."""
    binding = s3_settings(settings)
    return None if binding is None else S3ChunkStorage(binding, name="s3-tier2")


def gcs_settings(settings: Settings) -> GcsSettings | None:
    """The GCS tier-2 binding's settings when a bucket is configured (``RECLAIM_GCS_BUCKET``), else None."""
    if not settings.gcs_bucket:
        return None
    return GcsSettings(bucket=settings.gcs_bucket, project=settings.gcs_project,
                       credentials_file=settings.gcs_credentials_file, endpoint=settings.gcs_endpoint)


def azure_settings(settings: Settings) -> AzureSettings | None:
    """The Azure tier-2 binding's settings when a container is configured (``RECLAIM_AZURE_CONTAINER``), else
    None."""
    if not settings.azure_container:
        return None
    return AzureSettings(container=settings.azure_container, account_url=settings.azure_account_url,
                         connection_string=settings.azure_connection_string,
                         account_key=settings.azure_account_key, sas_token=settings.azure_sas_token)


def cloud_bindings(settings: Settings) -> list[ChunkStorage]:
    """The object-store tier-2 bindings configured: ``s3-tier2``, ``gcs-tier2``, ``azure-tier2``."""
    s3 = s3_binding(settings)
    gcs = gcs_settings(settings)
    azure = azure_settings(settings)
    return ([] if s3 is None else [s3]) + ([] if gcs is None else [GcsChunkStorage(gcs)]) \
        + ([] if azure is None else [AzureChunkStorage(azure)])


def storage_bindings(settings: Settings, *, writer: bool = False) -> StorageBindings:
    """The filesystem tier-2 binding (always), the S3 one (when an endpoint is configured) and the filesystem
    tier-1 one, ``fs-tier1`` (when its root is set: the hot binding offload copies from).

    What is configured decides, never what happens to answer: a binding that is down stays registered,
    so its records wait in the retry tiers instead of being dead-lettered as unknown.

    Only a ``writer`` (or ``RECLAIM_FS_CREATE_ROOT``) creates the filesystem root when it is missing;
    a worker or an audit refuses a missing root (an unmounted volume) instead of taking it for empty.
    """
    bindings = StorageBindings([FileSystemChunkStorage(settings.fs_tier2_root, name="fs-tier2",
                                                       delete_workers=settings.delete_parallelism,
                                                       create=writer or settings.fs_create_root)])
    for cloud in cloud_bindings(settings):
        bindings.register(cloud)
    if settings.fs_tier1_root is not None:
        bindings.register(FileSystemChunkStorage(settings.fs_tier1_root, name="fs-tier1", tier=Tier.TIER1,
                                                 delete_workers=settings.delete_parallelism,
                                                 create=writer or settings.fs_create_root))
    return bindings


def binding_names(settings: Settings) -> list[str]:
    """The names of the bindings :func:`storage_bindings` registers, without opening any."""
    return (["fs-tier2"] + (["s3-tier2"] if s3_settings(settings) is not None else [])
            + (["gcs-tier2"] if gcs_settings(settings) is not None else [])
            + (["azure-tier2"] if azure_settings(settings) is not None else [])
            + (["fs-tier1"] if settings.fs_tier1_root is not None else []))


_HOW_TO_CONFIGURE = {
    "s3-tier2": "set its endpoint (RECLAIM_S3_ENDPOINT / --s3-endpoint)",
    "gcs-tier2": "set its bucket (RECLAIM_GCS_BUCKET)",
    "azure-tier2": "set its container (RECLAIM_AZURE_CONTAINER, with RECLAIM_AZURE_ACCOUNT_URL)",
    "fs-tier1": "set its root (RECLAIM_FS_TIER1_ROOT / --fs-tier1-root)",
}


def how_to_configure(binding: str) -> str:
    """What configures the binding named ``binding``, as the end of a sentence's first part."""
    return _HOW_TO_CONFIGURE.get(binding, "configure it")


def bindings_not_configured(settings: Settings) -> dict[str, str]:
    """The bindings of :func:`storage_bindings` that ``settings`` leave out, each with what would configure it."""
    # GCS and Azure are named only where chunk rows name them (dangling): most deployments use neither.
    if s3_settings(settings) is not None:
        return {}
    return {"s3-tier2": "no S3 endpoint: set --s3-endpoint, RECLAIM_S3_ENDPOINT or the config file's s3_endpoint"}


def codec(settings: Settings) -> RecordCodec:
    """Single-object encoding, or the Confluent wire format through the configured registry (its
    credentials and CA from the settings, never in the URL the client keeps)."""
    url, registry_config = client_security.registry_connection(settings)
    return build_codec(url, registry_config=registry_config)


def keyring(settings: Settings) -> Keyring | None:
    """The keyring of this process (``RECLAIM_KEYRING``), or None when it has none."""
    return None if settings.keyring is None else load_keyring(settings.keyring)


def keyring_file(settings: Settings) -> KeyringFile | None:
    """The keyring of this process as its running signers and verifiers follow it (read again when it
    changes), or None when it has none."""
    return None if settings.keyring is None else KeyringFile(settings.keyring)


AUTH_MODE = Gauge("reclaim_record_auth_mode", "How this process verifies the records it obeys: 1 for its mode "
                  "(enforce; rollout, where unsigned records are obeyed; off, where nothing is verified)", ["mode"])


def require_record_auth(settings: Settings, service: str) -> None:
    """Refuse to start ``service`` (it obeys records that truncate streams) without a keyring, unless record
    authentication was turned off explicitly; say its mode at start (a warning in rollout) and in a gauge."""
    if settings.keyring is None and settings.record_auth != "off":
        raise UsageError(f"{service} obeys records that truncate streams and has no keyring to verify them by: set "
                         f"RECLAIM_KEYRING (keyring = \"...\" in the config file), or record_auth = \"off\" "
                         f"(RECLAIM_RECORD_AUTH=off) to obey records from anyone who can write its topics")
    mode = "off" if settings.keyring is None or settings.record_auth == "off" else settings.record_auth or "enforce"
    for each in RECORD_AUTH_MODES:
        AUTH_MODE.labels(each).set(1 if each == mode else 0)
    if mode == "rollout":
        log.warning("record authentication in rollout: %s obeys unsigned records (logged, counted in "
                    "reclaim_unsigned_records_accepted_total); switch to enforce once that counter stays flat", service)


def record_verifier(settings: Settings) -> RecordVerifier | None:
    """What checks the signatures of the records this process obeys, following the keyring file as it
    changes; None when record authentication is off (no keyring, or ``record_auth=off``), which is logged
    once as a warning."""
    keys = keyring_file(settings) if settings.record_auth != "off" else None
    if keys is None:
        log.warning("record authentication is off (no keyring: set RECLAIM_KEYRING): records from anyone who can "
                    "write reclaim's topics are obeyed")
        return None
    return RecordVerifier(keys, AuthMode(settings.record_auth or AuthMode.ENFORCE.value))


def record_signer(settings: Settings, role: str, subject: str | None = None,
                  prefer: Algorithm | None = None) -> RecordSigner | None:
    """What signs the records this process writes as ``role``: None without a keyring; a keyring without
    a key for the role is a :class:`~reclaim.security.errors.SigningError` (one line), unless record_auth is
    off or in rollout, where the records go unsigned."""
    keys = keyring_file(settings)
    if keys is None:
        return None
    if keys.current().signing_key(role, subject) is None and settings.record_auth in ("off", "rollout"):
        log.warning("the keyring has no key for role %s: its records go unsigned", role)
        return None
    return RecordSigner(keys, role, subject, prefer)


def deletion_service(settings: Settings, store: SQLMetadataStore,
                     producer: RecordProducer) -> LedgerDeletionService:
    """Phase 1 wired to the deletion topic through ``producer`` (an idempotent one), signing its records
    with the controller's key when there is a keyring."""
    topics = topic_names(settings)
    publisher = KafkaPendingDeletePublisher(producer, codec(settings), topics.deletion,
                                            signer=record_signer(settings, "controller", prefer=Algorithm.HMAC_SHA256))
    return LedgerDeletionService(store, publisher, commit_within_s=settings.mark_timeout_s / 2)


def deletion_worker(settings: Settings, store: SQLMetadataStore, bindings: StorageBindings,
                    index: int = 0) -> DeletionWorker:
    """Phase 2: consumer ``index`` of the configured group over the deletion topic and its retry tiers."""
    instance_id = f"{settings.instance_id}-{index}" if settings.instance_id else None
    config = WorkerConfig(
        bootstrap=preflight.bootstrap(settings), topics=topic_names(settings), group_id=settings.group_id,
        batch_size=settings.batch_size, poll_timeout_s=settings.poll_timeout_s,
        max_attempts=settings.max_attempts, instance_id=instance_id, assignment=settings.assignment,
        consumer_overrides={"auto.commit.interval.ms": settings.commit_interval_ms},
    )
    executor = DeletionExecutor(store, bindings, mark_timeout_s=settings.mark_timeout_s)
    return DeletionWorker(config, executor, codec(settings), verifier=record_verifier(settings))

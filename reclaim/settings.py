"""reclaim's process settings: read once from the environment (``RECLAIM_*``), overridden by CLI flags."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reclaim.durations import EXAMPLES, parse_duration
from reclaim.secret_files import secret_text

DEFAULT_RETRY_DELAYS = (10, 60, 600)
MAX_BATCH_SIZE = 1_000_000
#: The most of each count a setting may ask for: far past any real deployment, so that a typo (a few extra
#: zeros) is refused in one line rather than spawning that many processes or asking for that many partitions.
COUNT_LIMITS = {"partitions": 10_000, "processes": 1024, "consumers": 256, "delete_parallelism": 1024,
                "metadata_pool_size": 1024, "max_attempts": 1000, "replication_factor": 100}
"""The most records librdkafka's ``consume`` returns at once."""
MAX_COMMIT_INTERVAL_MS = 86_400_000
"""librdkafka's bound on ``auto.commit.interval.ms``."""

RECORD_AUTH_MODES = ("enforce", "rollout", "off")
ASSIGNMENTS = ("eager", "cooperative-sticky")
"""How the worker's consumer group shares partitions: Kafka's classic eager protocol (every rebalance
revokes everything) or incremental cooperative rebalancing (only the partitions that move are revoked)."""

SECRET_FILES = {"s3_access_key": "s3_access_key_file", "s3_secret_key": "s3_secret_key_file",
                "s3_session_token": "s3_session_token_file",
                "azure_connection_string": "azure_connection_string_file",
                "azure_account_key": "azure_account_key_file", "azure_sas_token": "azure_sas_token_file",
                "schema_registry_basic_auth": "schema_registry_basic_auth_file"}
"""The settings that may be read from a file instead (``<name>_file``), by the setting's name: one setting
given two ways, so a source that names either one sets it (:mod:`reclaim.config_file`)."""
READ_SECRET_FILES = {secret: file for secret, file in SECRET_FILES.items() if secret.startswith(("s3_", "azure_"))}
"""Those read when the settings are (the registry's basic auth is read where its client is configured)."""

AWS_S3 = "aws"
"""The ``s3_endpoint`` that means AWS S3 itself: no endpoint URL, the region's endpoint chosen by boto3."""

METADATA_URL_HELP = ("a metadata store shared by hosts: postgresql://USER:PASSWORD@HOST:PORT/DATABASE "
                     "(RECLAIM_METADATA_URL; wins over --metadata-path)")


def _default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reclaim"


@dataclass(frozen=True)
class Settings:
    """Everything a reclaim process is configured with. Build it with :meth:`from_env`.

    Each field ``name`` is read from ``RECLAIM_<NAME>``; a CLI flag that is given wins.
    """

    state_dir: Path = Path(".reclaim")
    cache_dir: Path = field(default_factory=_default_cache)
    bootstrap: str | None = None
    topic_prefix: str = "reclaim."
    partitions: int = 4
    replication_factor: int = 1
    deletion_retention_ms: int = 7 * 24 * 3600 * 1000
    dlq_retention_ms: int = 30 * 24 * 3600 * 1000
    retry_delays: tuple[int, ...] = DEFAULT_RETRY_DELAYS
    s3_endpoint: str | None = None
    s3_bucket: str = "reclaim-tier2"
    # No access key: boto3's credential chain (profile, environment, web identity, instance role).
    s3_access_key: str | None = None
    s3_secret_key: str | None = None
    s3_session_token: str | None = None
    # The same three read from files (``s3_secret_key_file``: a mounted secret); read once, by ``from_env``.
    s3_access_key_file: Path | None = None
    s3_secret_key_file: Path | None = None
    s3_session_token_file: Path | None = None
    s3_region: str = "us-east-1"
    # None: path-style for an endpoint URL, virtual-hosted on AWS S3.
    s3_path_style: bool | None = None
    # Deletes conditional on the ETag checked (If-Match), for servers that honour it. None: on for AWS S3 itself,
    # off for an endpoint URL (MinIO ignores the condition and deletes).
    s3_conditional_deletes: bool | None = None
    # Google Cloud Storage (gcs-tier2, registered when a bucket is set): Application Default Credentials unless
    # a service-account key file is named; an endpoint only for an emulator or a private endpoint.
    gcs_bucket: str | None = None
    gcs_project: str | None = None
    gcs_credentials_file: Path | None = None
    gcs_endpoint: str | None = None
    # Azure Blob Storage (azure-tier2, registered when a container is set): a connection string, or the
    # account URL with an account key, a SAS token or else DefaultAzureCredential.
    azure_container: str | None = None
    azure_account_url: str | None = None
    azure_connection_string: str | None = None
    azure_account_key: str | None = None
    azure_sas_token: str | None = None
    azure_connection_string_file: Path | None = None
    azure_account_key_file: Path | None = None
    azure_sas_token_file: Path | None = None
    schema_registry_url: str | None = None
    schema_registry_basic_auth: str | None = None
    schema_registry_basic_auth_file: Path | None = None
    schema_registry_ca_location: Path | None = None
    # The metadata store: a SQLite file (``metadata_path``, default ``<state_dir>/metadata.db``) or, for
    # processes on several hosts, a PostgreSQL database (``metadata_url``, which wins when set).
    metadata_path: Path | None = None
    metadata_url: str | None = None
    metadata_pool_size: int = 8
    # Phase-2 worker.
    fs_root: Path | None = None
    fs_create_root: bool = False
    # Offload: a filesystem tier-1 binding (fs-tier1, registered only when its root is set), the binding
    # offloaded copies go to, and how long the hot copy is kept after the switch for readers to move.
    fs_tier1_root: Path | None = None
    offload_binding: str = "s3-tier2"
    offload_release_after_s: float = 4 * 3600.0
    # The offloader service: how often each process passes over its streams, and how long its leases last
    # (a dead process's streams move to the others after that long).
    offload_every_s: float = 30.0
    offload_lease_s: float = 90.0
    group_id: str = "reclaim-deletion"
    instance_id: str | None = None
    assignment: str = "eager"
    consumers: int = 1
    # Worker processes under one supervisor; None: the host's usable cores, capped by the deletion topic's
    # partitions over ``consumers`` (reclaim.services.supervisor.default_processes).
    processes: int | None = None
    batch_size: int = 1000
    poll_timeout_s: float = 1.0
    delete_parallelism: int = 8
    max_attempts: int = 10
    mark_timeout_s: float = 300.0
    commit_interval_ms: int = 1000
    # How long the group may have lag, hold no retry tier and store no final offset before the alert
    # ReclaimDeletionNoProgress fires: the worker exports it, so the rule reads each group's own.
    stall_after_s: float = 600.0
    metrics_port: int | None = None
    # Retention, controller side.
    truncation_group_id: str = "reclaim-truncation"
    record_every_s: float = 60.0
    stream_binding: str = "fs-tier2"
    # Authenticated records: the keyring file this process signs with and verifies by, and whether an
    # unsigned record is refused (enforce, the default with a keyring), accepted while signing is rolled
    # out (rollout), or nothing is verified (off, the default without a keyring).
    keyring: Path | None = None
    record_auth: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, spelled: Mapping[str, str] | None = None,
                 **overrides: Any) -> Settings:
        """Settings from ``RECLAIM_<FIELD>`` variables, then ``overrides`` (CLI flags) that are not None.

        A value that is refused is named as the user gave it: ``spelled[field]`` (a flag, a config key) where
        given, else ``RECLAIM_<FIELD>`` for a variable, else the field's name."""
        env = os.environ if env is None else env
        spelled = spelled or {}
        values: dict[str, Any] = {}
        given: dict[str, str] = {}
        for f in fields(cls):
            raw = env.get(f"RECLAIM_{f.name.upper()}")
            if raw:
                given[f.name] = spelled.get(f.name, f"RECLAIM_{f.name.upper()}")
                values[f.name] = _parse(given[f.name], str(f.type), raw, duration=f.name.endswith("_s"))
        values.update({k: v for k, v in overrides.items() if v is not None})
        given.update({k: spelled.get(k, k) for k, v in overrides.items() if v is not None})
        for f in fields(cls):
            if "Path" in str(f.type) and values.get(f.name) is not None:
                values[f.name] = Path(values[f.name])
        try:
            _read_secret_files(values)
            settings = replace(cls(), **values)
            settings.validate()
        except ValueError as exc:
            raise ValueError(_as_given(str(exc), given)) from exc
        return settings

    @property
    def metadata_file(self) -> Path:
        return self.metadata_path or self.state_dir / "metadata.db"

    @property
    def metadata_location(self) -> str:
        """Where the metadata store is: a ``postgresql://`` URL, else the SQLite file's path."""
        if self.metadata_url:
            return self.metadata_url.removeprefix("sqlite://") if self.metadata_url.startswith("sqlite://") \
                else self.metadata_url
        return str(self.metadata_file)

    @property
    def metadata_shown(self) -> str:
        """The metadata location as logs and messages show it (a URL without its password)."""
        if self.metadata_url and self.metadata_url.startswith(("postgresql://", "postgres://")):
            from reclaim.storage.postgres_base import describe

            return f"PostgreSQL {describe(self.metadata_url)}"
        return self.metadata_location

    @property
    def fs_tier2_root(self) -> Path:
        return self.fs_root or self.state_dir / "tier2"

    def _validate_clouds(self) -> None:
        """The GCS and Azure settings: URLs with a host, and credentials that go with a place to use them."""
        for name in ("gcs_endpoint", "azure_account_url"):
            value = getattr(self, name)
            url = urlsplit(value or "")
            if value and (url.scheme not in ("http", "https") or not url.hostname):
                raise ValueError(f"{name} must be an http:// or https:// URL with a host, got {value!r}")
        azure_settings = ("azure_account_url", "azure_connection_string", "azure_account_key", "azure_sas_token")
        if not self.azure_container and any(getattr(self, name) for name in azure_settings):
            raise ValueError("azure_account_url, azure_connection_string, azure_account_key and azure_sas_token "
                             "need azure_container: the container of the azure-tier2 binding")
        if self.azure_container and not (self.azure_account_url or self.azure_connection_string):
            raise ValueError("azure_container needs azure_account_url (https://ACCOUNT.blob.core.windows.net) or "
                             "azure_connection_string")
        if self.azure_connection_string and (self.azure_account_key or self.azure_sas_token):
            raise ValueError("azure_connection_string carries its own credentials: leave out azure_account_key "
                             "and azure_sas_token")
        if self.azure_account_key and self.azure_sas_token:
            raise ValueError("azure_account_key and azure_sas_token are both set: keep one")
        if not self.gcs_bucket and any((self.gcs_project, self.gcs_credentials_file, self.gcs_endpoint)):
            raise ValueError("gcs_project, gcs_credentials_file and gcs_endpoint need gcs_bucket: the bucket of the "
                             "gcs-tier2 binding")

    def validate(self) -> None:
        positive = {"partitions": self.partitions, "batch_size": self.batch_size, "max_attempts": self.max_attempts,
                    "delete_parallelism": self.delete_parallelism, "metadata_pool_size": self.metadata_pool_size,
                    "consumers": self.consumers, "replication_factor": self.replication_factor}
        if self.processes is not None:
            positive["processes"] = self.processes
        for name, value in positive.items():
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
            if value > COUNT_LIMITS.get(name, value):
                raise ValueError(f"{name} must be at most {COUNT_LIMITS[name]}, got {value}")
        if self.batch_size > MAX_BATCH_SIZE:
            raise ValueError(f"batch_size must be at most {MAX_BATCH_SIZE} (librdkafka's limit), got {self.batch_size}")
        # NaN compares false with everything, so "not > 0" and isfinite keep it (and infinity) out.
        if not all(math.isfinite(value) and value > 0 for value in (self.poll_timeout_s, self.mark_timeout_s)):
            raise ValueError("poll_timeout_s and mark_timeout_s must be positive, got "
                             f"{self.poll_timeout_s} and {self.mark_timeout_s}")
        if not (math.isfinite(self.offload_release_after_s) and self.offload_release_after_s >= 0):
            raise ValueError("offload_release_after_s must be a number of seconds >= 0, got "
                             f"{self.offload_release_after_s}")
        if not all(math.isfinite(value) and value > 0 for value in (self.offload_every_s, self.offload_lease_s)):
            raise ValueError("offload_every_s and offload_lease_s must be positive numbers of seconds, got "
                             f"{self.offload_every_s} and {self.offload_lease_s}")
        if self.offload_lease_s <= self.offload_every_s:
            raise ValueError(f"offload_lease_s ({self.offload_lease_s:g}) must be longer than offload_every_s "
                             f"({self.offload_every_s:g}): a lease would lapse between two passes")
        if not (math.isfinite(self.stall_after_s) and self.stall_after_s > 0):
            raise ValueError(f"stall_after_s must be a positive number of seconds, got {self.stall_after_s}")
        if not 0 <= self.commit_interval_ms <= MAX_COMMIT_INTERVAL_MS:
            raise ValueError(f"commit_interval_ms must be between 0 and {MAX_COMMIT_INTERVAL_MS}, "
                             f"got {self.commit_interval_ms}")
        if self.metrics_port is not None and not 1 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics_port must be between 1 and 65535, got {self.metrics_port}")
        for name in ("group_id", "truncation_group_id"):
            if not getattr(self, name).strip():  # librdkafka aborts the process on an empty group.id
                raise ValueError(f"{name} must not be empty")
        endpoint = urlsplit(self.s3_endpoint or "")
        if self.s3_endpoint and self.s3_endpoint != AWS_S3 and (endpoint.scheme not in ("http", "https")
                                                                or not endpoint.hostname):
            # botocore's own refusal came only at the first request, after a logged traceback.
            raise ValueError(f"s3_endpoint must be an http:// or https:// URL with a host, or {AWS_S3!r} for AWS S3, "
                             f"got {self.s3_endpoint!r}")
        if bool(self.s3_access_key) != bool(self.s3_secret_key):
            raise ValueError("s3_access_key and s3_secret_key go together (leave both out for boto3's credential "
                             "chain: AWS_PROFILE, AWS_ACCESS_KEY_ID, web identity, instance role)")
        if self.s3_session_token and not self.s3_access_key:
            raise ValueError("s3_session_token needs s3_access_key and s3_secret_key")
        self._validate_clouds()
        if self.schema_registry_basic_auth and self.schema_registry_basic_auth_file:
            raise ValueError("schema_registry_basic_auth and schema_registry_basic_auth_file are both set: keep one")
        if not self.retry_delays or any(delay < 1 for delay in self.retry_delays):
            raise ValueError(f"retry_delays must be whole seconds >= 1, e.g. 10,60,600; got {self.retry_delays}")
        if self.metadata_url and not self.metadata_url.startswith(("postgresql://", "postgres://", "sqlite://")):
            raise ValueError("metadata_url must be a postgresql://user:password@host:port/database URL "
                             f"(or sqlite://PATH), got {self.metadata_url.split('://')[0]!r}...")
        if self.assignment not in ASSIGNMENTS:
            raise ValueError(f"assignment must be one of {', '.join(ASSIGNMENTS)}, got {self.assignment!r}")
        if self.record_auth is not None and self.record_auth not in RECORD_AUTH_MODES:
            raise ValueError(f"record_auth must be one of {', '.join(RECORD_AUTH_MODES)}, got {self.record_auth!r}")
        if self.record_auth in ("enforce", "rollout") and self.keyring is None:
            raise ValueError(f"record_auth={self.record_auth} needs a keyring (RECLAIM_KEYRING, a keyring file)")
        if not math.isfinite(self.record_every_s) or self.record_every_s < 0:
            raise ValueError(f"record_every_s must be a number of seconds >= 0, got {self.record_every_s}")


def _read_secret_files(values: dict[str, Any]) -> None:
    """Each of ``READ_SECRET_FILES`` that names a file: its secret set to the file's text (one line for a file
    that cannot be read, or a secret given both ways)."""
    for secret, file_setting in READ_SECRET_FILES.items():
        path = values.get(file_setting)
        if path is None:
            continue
        if values.get(secret):
            raise ValueError(f"{secret} and {file_setting} are both set: keep one")
        try:
            values[secret] = secret_text(path)
        except ValueError as exc:
            raise ValueError(f"{file_setting}: {exc}") from None


def redact_password(url: str) -> str:
    """``url`` with the password of its user part masked (``postgresql://u:********@host/db``), and any
    ``password=`` / ``sslpassword=`` query parameter (libpq takes both); each URL of a comma-separated
    list (a Schema Registry's) too."""
    return ",".join(_QUERY_PASSWORD.sub(r"\1********", re.sub(r"^(\s*[a-z][a-z0-9+.-]*://[^:/@]*:)[^@]*@",
                                                              r"\1********@", part))
                    for part in url.split(","))


_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?password=)[^&#]*", re.IGNORECASE)


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


def _bool(raw: str) -> bool:
    word = raw.strip().lower()
    if word not in _TRUE | _FALSE:
        raise ValueError(raw)
    return word in _TRUE


def _ints(raw: str) -> tuple[int, ...]:
    return tuple(int(part) for part in raw.split(",") if part.strip())


def _parse(label: str, type_name: str, raw: str, *, duration: bool) -> Any:
    # A setting named ``*_s`` is seconds: any duration (``90``, ``15m``, ``1h``), as its flag takes.
    convert, expected = (parse_duration, f"a duration, e.g. {EXAMPLES}") if duration else _reader(type_name)
    try:
        return convert(raw)
    except ValueError as exc:
        raise ValueError(f"{label}: cannot read {raw!r} as {expected}") from exc


_LEADING_NAMES = re.compile(r"^\w+(?:(?:, | and )\w+)*")


def _as_given(message: str, given: Mapping[str, str]) -> str:
    """A refusal that starts with settings' names (``metrics_port must be ...``, ``s3_access_key and
    s3_secret_key go together``) with each name as the user gave it: ``--metrics-port``, ``RECLAIM_METRICS_PORT``
    or a config key. Only the leading names: later words may be plain English (``a keyring file``)."""
    found = _LEADING_NAMES.match(message)
    if found is None:
        return message
    names = re.sub(r"\w+", lambda word: given.get(word.group(), word.group()), found.group())
    return names + message[found.end():]


def _reader(type_name: str) -> tuple[Callable[[str], Any], str]:
    """How a variable of the settings field type ``type_name`` is read, and what it must hold, in words
    (not ``int | None``)."""
    if type_name.startswith("bool"):
        return _bool, f"true or false ({'/'.join(sorted(_TRUE))} or {'/'.join(sorted(_FALSE))})"
    if "tuple" in type_name:
        return _ints, "a comma list of whole numbers"
    if type_name.startswith("int"):
        return int, "a whole number"
    if type_name.startswith("float"):
        return float, "a number"
    return str, "text"

"""reclaim's process settings: read once from the environment (``RECLAIM_*``), overridden by CLI flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

DEFAULT_RETRY_DELAYS = (10, 60, 600)


def _default_cache() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "reclaim"


@dataclass(frozen=True)
class Settings:
    """Everything a reclaim process is configured with. Build it with :meth:`from_env`."""

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
    s3_access_key: str = "reclaim"
    s3_secret_key: str = "reclaim-secret"
    s3_region: str = "us-east-1"
    schema_registry_url: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``RECLAIM_<FIELD>`` variables, then ``overrides`` (CLI flags) that are not None."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = env.get(f"RECLAIM_{f.name.upper()}")
            if raw is not None and raw != "":
                values[f.name] = _parse(f.name, raw)
        values.update({k: v for k, v in overrides.items() if v is not None})
        for name in ("state_dir", "cache_dir"):
            if name in values:
                values[name] = Path(values[name])
        return replace(cls(), **values)


def _parse(name: str, raw: str) -> Any:
    if name in {"state_dir", "cache_dir"}:
        return Path(raw)
    if name in {"partitions", "replication_factor", "deletion_retention_ms", "dlq_retention_ms"}:
        try:
            return int(raw)
        except ValueError as exc:
            raise ValueError(f"RECLAIM_{name.upper()} must be an integer, got {raw!r}") from exc
    if name == "retry_delays":
        try:
            return tuple(int(part) for part in raw.split(",") if part.strip())
        except ValueError as exc:
            raise ValueError(f"RECLAIM_RETRY_DELAYS must be seconds separated by commas, got {raw!r}") from exc
    return raw

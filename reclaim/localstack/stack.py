"""``reclaim local up | down | status``: the local Kafka broker and S3 endpoint, tracked by pid."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reclaim.extras import require
from reclaim.localstack.kafka_broker import BrokerPorts, broker_answers, choose_ports, start_broker
from reclaim.localstack.kafka_security import (
    ADMIN_CONFIG,
    ADMIN_PROPERTIES,
    BrokerSecurity,
    admin_client_properties,
    prepare,
    reclaim_config,
    write_private,
)
from reclaim.localstack.procs import StackError, pid_runs, stop_pid
from reclaim.localstack.s3_server import S3Endpoint, answers, ensure_bucket, start_s3
from reclaim.security.keyring import Algorithm, Keyring, load_keyring, new_key
from reclaim.settings import AWS_S3, Settings
from reclaim.storage.filesystem import FileSystemChunkStorage

log = logging.getLogger(__name__)
STATE_FILE = "stack.json"
#: Under the state directory: the secured broker's data, its CA and the admin's properties (``local up --secure``).
SECURE_DIR = "kafka-secure"
#: The config file `up` writes for the stack it started (see :func:`local_config`).
LOCAL_CONFIG = "local.toml"


@dataclass
class StackState:
    """What ``up`` started: pids and addresses, persisted in the state directory."""

    kafka_pid: int | None = None
    kafka_client_port: int | None = None
    kafka_controller_port: int | None = None
    s3_pid: int | None = None
    s3_url: str | None = None
    s3_bucket: str | None = None
    kafka_secure: bool = False
    """The broker ``up`` started is the secured one (SASL_SSL, ACLs): see :func:`secure_files`."""

    @property
    def bootstrap(self) -> str | None:
        return f"127.0.0.1:{self.kafka_client_port}" if self.kafka_client_port else None

    @classmethod
    def load(cls, state_dir: Path) -> StackState:
        if state_dir.exists() and not state_dir.is_dir():
            raise StackError(f"the state directory {state_dir} is not a directory: check --state-dir / "
                             "RECLAIM_STATE_DIR")
        path = state_dir / STATE_FILE
        if not path.exists():
            return cls()
        try:
            data = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise _unreadable(path, str(exc)) from exc
        if not isinstance(data, dict):
            raise _unreadable(path, "not a JSON object")
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for key, value in fields.items():
            wanted = str if key in ("s3_url", "s3_bucket") else bool if key == "kafka_secure" else int
            if value is not None and (type(value) is not wanted):
                raise _unreadable(path, f"{key} is {value!r}")
        return cls(**fields)

    def save(self, state_dir: Path) -> None:
        state_dir.mkdir(parents=True, exist_ok=True)
        (state_dir / STATE_FILE).write_text(json.dumps(asdict(self), indent=2))


def _unreadable(path: Path, why: str) -> StackError:
    return StackError(f"cannot read the local stack's state {path} ({why}): stop any server it started by its "
                      "pid, then remove the file")


def _kafka_ours(state: StackState, state_dir: Path) -> bool:
    """The state's broker pid still runs the broker ``up`` started from this state directory (a pid in a
    stale state file may belong to another process by now, which reclaim must never signal)."""
    if not state.kafka_pid:
        return False
    config = _kafka_dir(state_dir, state.kafka_secure) / "server.properties"
    return any(pid_runs(state.kafka_pid, "kafka.Kafka", path) for path in {str(config), str(config.resolve())})


def _s3_ours(state: StackState) -> bool:
    """The state's S3 pid still runs the moto server ``up`` started on the state's port."""
    if not (state.s3_pid and state.s3_url):
        return False
    return pid_runs(state.s3_pid, "moto.server", state.s3_url.rpartition(":")[2])


def _kafka_dir(state_dir: Path, secure: bool) -> Path:
    return state_dir / SECURE_DIR / "kafka" if secure else state_dir / "kafka"


def secure_files(state_dir: Path) -> tuple[Path, Path, Path]:
    """The secured local broker's CA certificate, the admin's librdkafka properties file and the same as a
    reclaim config file (``reclaim --config``; both mode 0600, the password in them)."""
    secure = state_dir / SECURE_DIR
    return secure / "tls" / "ca.crt", secure / ADMIN_PROPERTIES, secure / ADMIN_CONFIG


def _admin_properties(state: StackState, state_dir: Path) -> dict[str, str] | None:
    """How ``up``'s broker is asked whether it answers: as the admin when it is the secured one."""
    if not state.kafka_secure:
        return None
    return admin_client_properties(secure_files(state_dir)[1])


def _kafka_running(state: StackState, state_dir: Path) -> bool:
    return bool(_kafka_ours(state, state_dir) and state.bootstrap
                and broker_answers(state.bootstrap, properties=_admin_properties(state, state_dir)))


def _s3_running(state: StackState) -> bool:
    # An HTTP answer, not an open port: a stopped or hung server still accepts connections.
    return bool(_s3_ours(state) and state.s3_url and answers(state.s3_url))


def up(settings: Settings, secure: bool = False) -> StackState:
    """Start whatever of the stack is not running; idempotent.

    With ``secure``, the broker is the secured one (SASL_SSL with SCRAM-SHA-512, the StandardAuthorizer,
    nothing allowed that no ACL grants), its data, CA and admin credentials under ``<state-dir>/kafka-secure``.
    """
    require("local", "the local stack")  # before anything starts: its S3 endpoint is moto's server
    state = StackState.load(settings.state_dir)
    if _kafka_running(state, settings.state_dir) and state.kafka_secure != secure:
        running, asked = ("secured", "PLAINTEXT") if state.kafka_secure else ("PLAINTEXT", "secured")
        raise StackError(f"the local Kafka broker runs {running}, not {asked}: run `reclaim local down`, then "
                         f"`reclaim local up{' --secure' if secure else ''}`")
    # A server of ours that runs but does not answer is not replaced: a second one would be left untracked
    # (or, for the broker, fail on the same data directory), and the first would hang whoever uses it.
    stuck = []
    if _kafka_ours(state, settings.state_dir) and not _kafka_running(state, settings.state_dir):
        stuck.append(f"Kafka broker (pid {state.kafka_pid}) at {state.bootstrap}")
    if _s3_ours(state) and not _s3_running(state):
        stuck.append(f"S3 endpoint (pid {state.s3_pid}) at {state.s3_url}")
    if stuck:
        raise StackError(f"the local {' and '.join(stuck)} runs but does not answer: run `reclaim local down`, "
                         "then `reclaim local up`")
    if not _kafka_running(state, settings.state_dir):
        previous = None
        if state.kafka_client_port and state.kafka_controller_port:
            previous = BrokerPorts(state.kafka_client_port, state.kafka_controller_port)
        ports = choose_ports(previous)
        security: BrokerSecurity | None = prepare(settings.state_dir / SECURE_DIR, ports.bootstrap) if secure else None
        proc = start_broker(_kafka_dir(settings.state_dir, secure), settings.cache_dir, ports, security=security)
        state.kafka_pid, state.kafka_client_port, state.kafka_controller_port = proc.pid, ports.client, ports.controller
        state.kafka_secure = secure
        state.save(settings.state_dir)
        log.info("kafka broker started: pid=%s bootstrap=%s", proc.pid, ports.bootstrap)
    if not _s3_running(state):
        s3_proc, endpoint = start_s3(settings.state_dir / "s3.log")
        state.s3_pid, state.s3_url = s3_proc.pid, endpoint.url
        state.save(settings.state_dir)
        log.info("s3 endpoint started: pid=%s url=%s", s3_proc.pid, endpoint.url)
    assert state.s3_url is not None
    ensure_bucket(S3Endpoint(url=state.s3_url), settings.s3_bucket)
    FileSystemChunkStorage(settings.fs_tier2_root, name="fs-tier2").close()  # the filesystem tier-2 root, as the bucket
    state.s3_bucket = settings.s3_bucket
    state.save(settings.state_dir)
    local_keyring(settings.state_dir)
    write_private(local_config(settings.state_dir), local_config_text(settings, state))
    return state


#: The keyring `up` makes for the local stack (kept across `down` and `up`): the config it writes names it.
LOCAL_KEYRING = "keyring.toml"
LOCAL_ROLES = ("controller", "admin", "retention-job", "topic-retention")
"""The signing roles of the local stack's keyring; a subscriber's key is added with `reclaim keys new`."""


def local_keyring(state_dir: Path) -> Path:
    """The local stack's keyring, made on first use (mode 0600): every signing role's key in one file, as one
    user plays every role, so that the tour runs with record authentication on. A deployment gives each
    process only its own keys and the public halves of those it verifies (docs/operations/security.md). A
    keyring made by an earlier reclaim gets a key for each role it lacks."""
    path = state_dir / LOCAL_KEYRING
    if not path.exists():
        keys = [new_key(f"local-{role}", role, Algorithm.ED25519) for role in LOCAL_ROLES]
        keys.append(new_key("local-controller.deletes", "controller", Algorithm.HMAC_SHA256))
        write_private(path, Keyring(keys).to_toml())
        log.info("keyring for the local stack made: %s", path)
        return path
    held = load_keyring(path)
    missing = [role for role in LOCAL_ROLES if held.signing_key(role) is None and held.get(f"local-{role}") is None]
    if missing:
        added = [new_key(f"local-{role}", role, Algorithm.ED25519) for role in missing]
        write_private(path, Keyring([*held, *added]).to_toml())
        log.info("keyring for the local stack %s: keys added for %s", path, ", ".join(missing))
    return path


def local_config(state_dir: Path) -> Path:
    """The config file ``up`` writes for the stack it started: every command pointed at it with
    ``reclaim --config <file>`` (or ``RECLAIM_CONFIG``) uses this broker, S3 endpoint and bucket, as the
    admin of a secured broker. Nothing else finds the local stack: a command told of no broker says so."""
    return state_dir / LOCAL_CONFIG


def local_config_text(settings: Settings, state: StackState) -> str:
    """What ``up`` writes to :func:`local_config` for the stack ``state`` describes."""
    assert state.bootstrap is not None and state.s3_url is not None
    # The broker's address is the top-level bootstrap; the admin's properties file names it as librdkafka does.
    admin = admin_client_properties(secure_files(settings.state_dir)[1]) if state.kafka_secure else {}
    endpoint = S3Endpoint(url=state.s3_url)
    s3 = {"s3_endpoint": endpoint.url, "s3_bucket": settings.s3_bucket, "s3_region": endpoint.region,
          "s3_access_key": endpoint.access_key or "", "s3_secret_key": endpoint.secret_key or ""}
    header = (f"# reclaim's settings for the local stack `reclaim local up` started in {settings.state_dir}:\n"
              f"#   reclaim --config {local_config(settings.state_dir)} <command>\n")
    return header + reclaim_config(state.bootstrap, admin, state_dir=str(settings.state_dir),
                                   keyring=str(settings.state_dir / LOCAL_KEYRING), **s3)


def down(settings: Settings) -> StackState:
    """Stop the processes ``up`` started (by pid) and forget them; data stays for the next ``up``."""
    state = StackState.load(settings.state_dir)
    if not (settings.state_dir / STATE_FILE).exists():
        return state  # nothing was started from here: create no state directory either
    for pid, ours in ((state.kafka_pid, _kafka_ours(state, settings.state_dir)), (state.s3_pid, _s3_ours(state))):
        if pid and ours:
            stop_pid(pid)
        elif pid:
            log.info("pid %s from %s is not a server reclaim started (gone, or reused): left alone",
                     pid, settings.state_dir / STATE_FILE)
    state.kafka_pid = state.s3_pid = None
    state.s3_url = None
    state.save(settings.state_dir)
    return state


#: What ``status`` says of a local server: started and answering; not started (never, or ``down``
#: stopped it); started but gone or not answering.
RUNNING, STOPPED, NOT_HEALTHY = "running", "stopped", "not healthy"


def part_state(pid: int | None, healthy: bool) -> str:
    """:data:`RUNNING`, :data:`STOPPED` or :data:`NOT_HEALTHY`, for a server with this pid on record."""
    if healthy:
        return RUNNING
    return NOT_HEALTHY if pid else STOPPED


def status(settings: Settings) -> dict[str, dict[str, Any]]:
    """Bootstrap address, pid, health and state (:func:`part_state`) of each local server."""
    state = StackState.load(settings.state_dir)
    kafka: dict[str, Any] = {"bootstrap": state.bootstrap, "pid": state.kafka_pid,
                             "healthy": _kafka_running(state, settings.state_dir)}
    kafka["state"] = part_state(state.kafka_pid, kafka["healthy"])
    if state.kafka_secure:
        ca, admin, config = secure_files(settings.state_dir)
        kafka.update({"security": "SASL_SSL", "ca": str(ca), "admin_properties": str(admin),
                      "admin_config": str(config)})
    s3: dict[str, Any] = {"endpoint": state.s3_url, "pid": state.s3_pid, "bucket": state.s3_bucket,
                          "healthy": _s3_running(state)}
    s3["state"] = part_state(state.s3_pid, s3["healthy"])
    return {"kafka": kafka, "s3": s3}


def configured_s3(settings: Settings) -> S3Endpoint | None:
    """The S3 endpoint reclaim is configured with (``RECLAIM_S3_ENDPOINT``), else None."""
    return require_s3(settings) if settings.s3_endpoint else None


def require_s3(settings: Settings) -> S3Endpoint:
    """The configured S3 endpoint with the configured credentials (none: boto3's chain)."""
    if settings.s3_endpoint == AWS_S3:
        raise StackError(f"s3_endpoint {AWS_S3!r} is AWS S3 itself: this needs an endpoint URL")
    if not settings.s3_endpoint:
        raise StackError("no S3 endpoint configured: set --s3-endpoint or RECLAIM_S3_ENDPOINT (for the local stack, "
                         f"reclaim --config {local_config(settings.state_dir)} ...)")
    return S3Endpoint(url=settings.s3_endpoint, access_key=settings.s3_access_key,
                      secret_key=settings.s3_secret_key, session_token=settings.s3_session_token,
                      region=settings.s3_region)

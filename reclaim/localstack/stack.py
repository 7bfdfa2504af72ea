"""``reclaim local up | down | status``: the local Kafka broker, S3 endpoint and tier-2 emulators, tracked by pid."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from reclaim.extras import require
from reclaim.localstack.emulators import DEFAULT_STORE, EMULATORS, TIER2_CHOICES, Emulator
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
    # The tier-2 emulators ``up --tier2 gcs|azure`` started (:mod:`reclaim.localstack.emulators`): each has a
    # URL on record until ``down`` stops it, and its bucket or container after.
    gcs_pid: int | None = None
    gcs_url: str | None = None
    gcs_bucket: str | None = None
    azure_pid: int | None = None
    azure_url: str | None = None
    azure_container: str | None = None

    @property
    def bootstrap(self) -> str | None:
        return f"127.0.0.1:{self.kafka_client_port}" if self.kafka_client_port else None

    def emulator(self, emulator: Emulator) -> tuple[int | None, str | None]:
        """The pid and URL of ``emulator`` on record."""
        pid: int | None = getattr(self, f"{emulator.name}_pid")
        url: str | None = getattr(self, f"{emulator.name}_url")
        return pid, url

    def started(self) -> list[Emulator]:
        """The emulators on record: started by an ``up`` and not stopped by ``down`` since."""
        return [emulator for emulator in EMULATORS.values() if self.emulator(emulator)[1]]

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
            wanted = bool if key == "kafka_secure" else int if key.endswith(("_pid", "_port")) else str
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


def _emulator_ours(state: StackState, emulator: Emulator, state_dir: Path) -> bool:
    """The state's pid of ``emulator`` still runs the emulator ``up`` started from this state directory."""
    pid, url = state.emulator(emulator)
    return bool(pid and url and emulator.runs(pid, url, state_dir))


def _emulator_running(state: StackState, emulator: Emulator, state_dir: Path) -> bool:
    url = state.emulator(emulator)[1]
    return bool(_emulator_ours(state, emulator, state_dir) and url and emulator.answers(url))


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


def up(settings: Settings, secure: bool = False, tier2: str = "s3") -> StackState:
    """Start whatever of the stack is not running; idempotent.

    With ``secure``, the broker is the secured one (SASL_SSL with SCRAM-SHA-512, the StandardAuthorizer,
    nothing allowed that no ACL grants), its data, CA and admin credentials under ``<state-dir>/kafka-secure``.
    The S3 endpoint always runs; ``tier2`` ``gcs`` or ``azure`` adds that emulator (fake-gcs-server, built with
    ``go install`` on first use; Azurite, installed with npm on first use), and an emulator an earlier ``up``
    started is kept until ``down``. Each has its bucket or container, and its settings are in ``local.toml``.
    """
    require("local", "the local stack")  # before anything starts: its S3 endpoint is moto's server
    if tier2 not in TIER2_CHOICES:
        raise StackError(f"no tier-2 emulator {tier2!r}: choose one of {', '.join(TIER2_CHOICES)}")
    state = StackState.load(settings.state_dir)
    emulators = [emulator for emulator in EMULATORS.values() if emulator.name == tier2 or emulator in state.started()]
    for emulator in emulators:  # a missing client, `go` or `npm` is said before anything starts
        emulator.require_client()
        emulator.get_server(settings.cache_dir)
    if _kafka_running(state, settings.state_dir) and state.kafka_secure != secure:
        running, asked = ("secured", "PLAINTEXT") if state.kafka_secure else ("PLAINTEXT", "secured")
        raise StackError(f"the local Kafka broker runs {running}, not {asked}: run `reclaim local down`, then "
                         f"`reclaim local up{' --secure' if secure else ''}`")
    _refuse_stuck(state, settings.state_dir)
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
    for emulator in emulators:
        _up_emulator(settings, state, emulator)
    local_keyring(settings.state_dir)
    write_private(local_config(settings.state_dir), local_config_text(settings, state))
    return state


def _refuse_stuck(state: StackState, state_dir: Path) -> None:
    """A server of ours that runs but does not answer is not replaced: a second one would be left untracked
    (or, for the broker, fail on the same data directory), and the first would hang whoever uses it."""
    stuck = []
    if _kafka_ours(state, state_dir) and not _kafka_running(state, state_dir):
        stuck.append(f"Kafka broker (pid {state.kafka_pid}) at {state.bootstrap}")
    if _s3_ours(state) and not _s3_running(state):
        stuck.append(f"S3 endpoint (pid {state.s3_pid}) at {state.s3_url}")
    for emulator in EMULATORS.values():
        if _emulator_ours(state, emulator, state_dir) and not _emulator_running(state, emulator, state_dir):
            pid, url = state.emulator(emulator)
            stuck.append(f"{emulator.server} (pid {pid}) at {url}")
    if stuck:
        raise StackError(f"the local {' and '.join(stuck)} runs but does not answer: run `reclaim local down`, "
                         "then `reclaim local up`")


def _up_emulator(settings: Settings, state: StackState, emulator: Emulator) -> None:
    """Start ``emulator`` unless it runs, and make its bucket or container (``reclaim-tier2`` unless set)."""
    if not _emulator_running(state, emulator, settings.state_dir):
        pid, url = emulator.start(emulator.work_dir(settings.state_dir), settings.cache_dir)
        setattr(state, f"{emulator.name}_pid", pid)
        setattr(state, f"{emulator.name}_url", url)
        state.save(settings.state_dir)
        log.info("%s started: pid=%s url=%s", emulator.server, pid, url)
    running = state.emulator(emulator)[1]
    assert running is not None
    store = getattr(settings, emulator.store_setting) or DEFAULT_STORE
    emulator.ensure_store(running, store)
    setattr(state, emulator.store_setting, store)
    state.save(settings.state_dir)


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
    clouds: dict[str, str] = {}
    for emulator in state.started():
        url, store = state.emulator(emulator)[1], getattr(state, emulator.store_setting)
        assert url is not None
        clouds |= emulator.settings_of(url, store or DEFAULT_STORE)
    return header + reclaim_config(state.bootstrap, admin, state_dir=str(settings.state_dir),
                                   keyring=str(settings.state_dir / LOCAL_KEYRING), **s3, **clouds)


def down(settings: Settings) -> StackState:
    """Stop the processes ``up`` started (by pid) and forget them; data stays for the next ``up``."""
    state = StackState.load(settings.state_dir)
    if not (settings.state_dir / STATE_FILE).exists():
        return state  # nothing was started from here: create no state directory either
    servers = [(state.kafka_pid, _kafka_ours(state, settings.state_dir)), (state.s3_pid, _s3_ours(state))]
    servers += [(state.emulator(emulator)[0], _emulator_ours(state, emulator, settings.state_dir))
                for emulator in EMULATORS.values()]
    for pid, ours in servers:
        if pid and ours:
            stop_pid(pid)
        elif pid:
            log.info("pid %s from %s is not a server reclaim started (gone, or reused): left alone",
                     pid, settings.state_dir / STATE_FILE)
    state.kafka_pid = state.s3_pid = state.gcs_pid = state.azure_pid = None
    state.s3_url = state.gcs_url = state.azure_url = None
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
    """Bootstrap address, pid, health and state (:func:`part_state`) of each local server: the broker, the S3
    endpoint and each emulator on record (``gcs``, ``azure``)."""
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
    report = {"kafka": kafka, "s3": s3}
    for emulator in state.started():
        pid, url = state.emulator(emulator)
        store = emulator.store_setting.partition("_")[2]  # bucket, container
        part: dict[str, Any] = {"endpoint": url, "pid": pid, store: getattr(state, emulator.store_setting),
                                "healthy": _emulator_running(state, emulator, settings.state_dir)}
        part["state"] = part_state(pid, part["healthy"])
        report[emulator.name] = part
    return report


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

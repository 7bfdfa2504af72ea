"""The command line as an operator meets it: one line and a documented exit status for every expected
failure, global options anywhere, the config file's precedence, and nothing created by a reader."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.exits import ExitCode
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.localstack.stack import StackState
from reclaim.producers.topics import TopicNames
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.topics import TopicSpec, admin_client, create_topics
from tests.support.cli import NOBODY, clean_env, one_line_error, run_reclaim

TAGS = ChunkTags(component="c", stream="scope/stream", segment="scope/stream/0.E-1-O-0", writer_epoch=1)


def store_at(state: Path) -> SQLiteMetadataStore:
    state.mkdir(parents=True, exist_ok=True)
    return SQLiteMetadataStore(state / "metadata.db")


def test_version(tmp_path: Path) -> None:
    result = run_reclaim("--version", env=clean_env(tmp_path))
    assert result.returncode == 0
    assert result.stdout.startswith("reclaim ")


@pytest.mark.parametrize("args", [
    ["-q", "config", "show"], ["config", "show", "-q"],
    ["--log-format", "json", "config", "show"], ["config", "show", "--log-format", "json"],
])
def test_global_options_go_before_or_after_the_command(tmp_path: Path, args: list[str]) -> None:
    result = run_reclaim(*args, env=clean_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "bootstrap = None" in result.stdout


def test_bad_usage_exits_64(tmp_path: Path) -> None:
    result = run_reclaim("topics", "descrbe", env=clean_env(tmp_path))
    assert result.returncode == ExitCode.USAGE
    assert "invalid choice: 'descrbe'" in result.stderr


@pytest.mark.parametrize(("args", "env", "message"), [
    (["worker", "--retry-delays", "10,abc"], {}, "--retry-delays: cannot read '10,abc' as whole seconds"),
    (["worker", "--retry-delays", "10,0"], {}, "--retry-delays must be whole seconds >= 1"),
    (["config", "show"], {"RECLAIM_BATCH_SIZE": "many"}, "RECLAIM_BATCH_SIZE: cannot read 'many' as a whole number"),
    (["config", "show"], {"RECLAIM_PARTITIONS": "0"}, "RECLAIM_PARTITIONS must be at least 1, got 0"),
    # Each of these reached a traceback, a librdkafka abort (exit 134), exit 2 or an idle worker before.
    (["worker", "--metrics-port", "99999"], {}, "error: --metrics-port must be between 1 and 65535, got 99999"),
    (["worker", "--batch-size", "2000000"], {}, "error: --batch-size must be at most 1000000"),
    (["worker", "--poll-timeout-s", "nan"], {}, "worker: argument --poll-timeout-s: must be a duration above 0"),
    (["worker", "--commit-interval-ms", "-1"], {}, "--commit-interval-ms must be between 0 and 86400000, got -1"),
    (["deletions", "inflight", "--group-id", ""], {}, "--group-id must not be empty"),
    (["truncation-applier", "--record-every-s", "inf"], {}, "argument --record-every-s: must be at least 0s"),
    (["offloader", "--offload-every-s", "0"], {}, "offloader: argument --offload-every-s: must be a duration above 0"),
    (["config", "show"], {"RECLAIM_OFFLOAD_LEASE_S": "10"}, "a lease would lapse between two passes"),
    (["config", "show"], {"RECLAIM_MARK_TIMEOUT_S": "inf"},
     "poll_timeout_s and RECLAIM_MARK_TIMEOUT_S must be positive, got 1.0 and inf"),
    (["config", "show"], {"RECLAIM_LOG_FORMAT": "xml"}, "RECLAIM_LOG_FORMAT must be text or json, got 'xml'"),
    (["config", "show"], {"RECLAIM_S3_ENDPOINT": "notaurl"}, "RECLAIM_S3_ENDPOINT must be an http:// or https:// URL"),
    (["config", "show"], {"RECLAIM_S3_ENDPOINT": "http://"}, "RECLAIM_S3_ENDPOINT must be an http:// or https:// URL"),
    (["config", "show"], {"RECLAIM_RECORD_AUTH": "strict"}, "RECLAIM_RECORD_AUTH must be one of enforce, rollout, off"),
    (["config", "show"], {"RECLAIM_RECORD_AUTH": "enforce"}, "RECLAIM_RECORD_AUTH=enforce needs a keyring"),
    (["keys", "new", "--role", "root", "--id", "k", "--keyring", "k.toml"], {}, "--role must be one of"),
    (["keys", "new", "--role", "admin", "--keyring", "k.toml"], {}, "keys new needs --id"),
    (["keys", "new", "--role", "subscriber", "--id", "k", "--keyring", "k.toml"], {}, "--subject names the subscriber"),
    (["keys", "new", "--role", "admin", "--id", "a b", "--keyring", "k.toml"], {}, "key id 'a b' must be"),
    (["keys", "list"], {}, "keys needs a keyring file"),
])
def test_a_bad_setting_value_is_one_line_and_exit_64(tmp_path: Path, args: list[str], env: dict[str, str],
                                                    message: str) -> None:
    line = one_line_error(run_reclaim(*args, env=clean_env(tmp_path, **env)), ExitCode.USAGE)
    assert message in line


def test_config_file_precedence_is_flag_then_env_then_file_then_default(tmp_path: Path) -> None:
    config = tmp_path / "reclaim.toml"
    config.write_text('bootstrap = "file:1"\ntopic_prefix = "file."\nbatch_size = 7\n'
                      'fs_create_root = true\nretry_delays = [5, 50]\n')
    env = clean_env(tmp_path, RECLAIM_TOPIC_PREFIX="env.", RECLAIM_BATCH_SIZE="9")
    result = run_reclaim("--config", str(config), "config", "show", "--json", "--topic-prefix", "flag.",
                         "--bootstrap", "flag:1", env=env)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["bootstrap"] == "flag:1"  # flag over file
    assert shown["topic_prefix"] == "flag."  # flag over env over file
    assert shown["batch_size"] == 9  # env over file
    assert shown["fs_create_root"] is True and shown["retry_delays"] == [5, 50]  # file over default
    assert shown["partitions"] == 4  # default
    assert shown["s3_secret_key"] is None, "no key configured: boto3's credential chain, not the local stack's keys"
    with_url = run_reclaim("config", "show", "--json", env={
        **env, "RECLAIM_METADATA_URL": "postgresql://reclaim:hunter2@db-1:5432/reclaim"})
    assert json.loads(with_url.stdout)["metadata_url"] == "postgresql://reclaim:********@db-1:5432/reclaim"
    assert "hunter2" not in with_url.stdout + with_url.stderr
    # RECLAIM_CONFIG names the file when --config does not.
    from_env = run_reclaim("config", "show", "--json", env={**env, "RECLAIM_CONFIG": str(config)})
    assert json.loads(from_env.stdout)["bootstrap"] == "file:1"


@pytest.mark.parametrize(("text", "message"), [
    ('bootstrapp = "x"\n', "unknown setting 'bootstrapp' (did you mean 'bootstrap'?)"),
    ("batch_size = [1\n", "config file"),
    ('batch_size = "x"\n', ": batch_size: cannot read 'x' as a whole number"),
    ('mark_timeout_s = "soon"\n', ": mark_timeout_s: cannot read 'soon' as a duration"),
    ("partitions = 0\n", ": partitions must be at least 1, got 0"),
    ("[bootstrap]\nhost = 'x'\n", "bootstrap cannot be a table"),
    ("[s3]\nendpoint = 'x'\n", "unknown setting 's3'"),
    # Empty values were taken as "not set", so the file's author silently got the default broker.
    ('bootstrap = ""\n', "bootstrap is empty (leave it out for the default)"),
    ("retry_delays = []\n", "retry_delays is empty"),
])
def test_a_bad_config_file_is_one_line_and_exit_64(tmp_path: Path, text: str, message: str) -> None:
    config = tmp_path / "reclaim.toml"
    config.write_text(text)
    line = one_line_error(run_reclaim("config", "show", "--config", str(config), env=clean_env(tmp_path)),
                          ExitCode.USAGE)
    assert message in line


def test_a_config_file_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    config = tmp_path / "reclaim.toml"
    config.write_bytes(b"\xff\xfe batch_size = 1\n")
    line = one_line_error(run_reclaim("config", "show", "--config", str(config), env=clean_env(tmp_path)),
                          ExitCode.USAGE)
    assert f"config file {config}: 'utf-8' codec can't decode" in line


def test_a_missing_config_file_is_named(tmp_path: Path) -> None:
    line = one_line_error(run_reclaim("--config", str(tmp_path / "nope.toml"), "config", "show",
                                      env=clean_env(tmp_path)), ExitCode.USAGE)
    assert f"config file {tmp_path / 'nope.toml'} does not exist" in line


@pytest.mark.parametrize("args", [["topics", "describe"], ["topics", "create"], ["deletions", "inflight"]])
def test_an_unreachable_broker_is_one_line_and_exit_2(tmp_path: Path, args: list[str]) -> None:
    line = one_line_error(run_reclaim(*args, "--bootstrap", NOBODY, env=clean_env(tmp_path), timeout=60),
                          ExitCode.UNAVAILABLE)
    assert f"cannot reach a Kafka broker at {NOBODY} within 10 s" in line
    assert not (tmp_path / "state").exists()  # a reader creates nothing


def test_no_broker_configured_and_no_local_stack(tmp_path: Path) -> None:
    line = one_line_error(run_reclaim("topics", "describe", env=clean_env(tmp_path)), ExitCode.UNAVAILABLE)
    assert ("no Kafka broker configured: set --bootstrap, RECLAIM_BOOTSTRAP or a config file's bootstrap (for the "
            f"local stack: reclaim --config {tmp_path / 'state' / 'local.toml'} ..., which `reclaim local up` writes)"
            in line)


def test_the_worker_never_looks_for_a_local_stack(tmp_path: Path) -> None:
    """A stack's state file in the state directory is not a broker address: a worker told of no broker says so
    first, in one line, whatever else is missing."""
    StackState(kafka_pid=os.getpid(), kafka_client_port=9092, kafka_controller_port=9093,
               s3_url=f"http://{NOBODY}").save(tmp_path / "state")
    line = one_line_error(run_reclaim("worker", env=clean_env(tmp_path)), ExitCode.UNAVAILABLE)
    assert line.startswith("reclaim: error: no Kafka broker configured:")


def test_the_worker_never_creates_a_metadata_store(tmp_path: Path) -> None:
    line = one_line_error(run_reclaim("worker", "--bootstrap", NOBODY, "--create-fs-root", env=clean_env(tmp_path)),
                          ExitCode.UNAVAILABLE)
    assert f"no metadata store at {tmp_path / 'state' / 'metadata.db'}" in line
    assert not (tmp_path / "state").exists()


@pytest.mark.parametrize("content", [b"this is not a database, just some bytes" * 200, b""])
def test_a_corrupt_or_foreign_store_is_one_line(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "metadata.db").write_bytes(content)
    line = one_line_error(run_reclaim("worker", "--bootstrap", NOBODY, "--create-fs-root", env=clean_env(tmp_path)),
                          ExitCode.UNAVAILABLE)
    assert "metadata.db" in line and "metadata store" in line
    assert (tmp_path / "state" / "metadata.db").read_bytes() == content  # left exactly as it was


def test_the_worker_stops_in_bounded_time_on_an_unreachable_broker(tmp_path: Path) -> None:
    store_at(tmp_path / "state").close()
    result = run_reclaim("worker", "--bootstrap", NOBODY, "--create-fs-root", env=clean_env(tmp_path), timeout=60)
    line = one_line_error(result, ExitCode.UNAVAILABLE)
    assert f"cannot reach a Kafka broker at {NOBODY}" in line


def test_the_worker_stops_on_an_unreachable_s3_endpoint(tmp_path: Path) -> None:
    store_at(tmp_path / "state").close()
    endpoint = f"http://{NOBODY}"  # a free port could be taken by another server meanwhile; port 1 never is
    result = run_reclaim("worker", "--bootstrap", NOBODY, "--create-fs-root", "--s3-endpoint", endpoint,
                         env=clean_env(tmp_path, RECLAIM_S3_ACCESS_KEY="key", RECLAIM_S3_SECRET_KEY="secret"),
                         timeout=120)
    line = one_line_error(result, ExitCode.UNAVAILABLE)
    assert "storage binding 's3-tier2'" in line and "S3 endpoint unreachable" in line


def test_the_local_stacks_s3_endpoint_down_stops_the_worker(tmp_path: Path) -> None:
    """The local stack's settings (its local.toml) name an S3 endpoint that no longer answers: the binding is
    configured all the same (its records must wait, not be dead-lettered as unknown), so the worker stops in
    one line."""
    state = tmp_path / "state"
    store_at(state).close()
    config = state / "local.toml"
    config.write_text(f'bootstrap = "{NOBODY}"\ns3_endpoint = "http://{NOBODY}"\ns3_bucket = "reclaim-tier2"\n'
                      's3_access_key = "reclaim"\ns3_secret_key = "reclaim-secret"\n')
    line = one_line_error(run_reclaim("--config", str(config), "worker", "--create-fs-root", env=clean_env(tmp_path),
                                      timeout=120), ExitCode.UNAVAILABLE)
    assert "storage binding 's3-tier2'" in line and "S3 endpoint unreachable" in line


def test_the_worker_refuses_rows_on_a_binding_it_is_not_configured_with(tmp_path: Path) -> None:
    """The store names s3-tier2 but no S3 endpoint is configured: its records would be dead-lettered
    as unknown, so the worker does not start."""
    store = store_at(tmp_path / "state")
    location = ChunkLocation("s3-tier2", Tier.TIER2, "reclaim-tier2", "scope/stream/0.E-1-O-0.c0")
    with store.transaction() as txn:
        txn.put_chunk(ChunkRecord(name="scope/stream/0.E-1-O-0.c0", segment="scope/stream/0.E-1-O-0", start_offset=0,
                                  length=1, tags=TAGS, locations=(location,)))
    store.close()
    line = one_line_error(run_reclaim("worker", "--bootstrap", NOBODY, "--create-fs-root", env=clean_env(tmp_path)),
                          ExitCode.UNAVAILABLE)
    assert "storage binding 's3-tier2', which is not configured" in line


def test_a_closed_output_pipe_is_no_traceback(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "reclaim", "config", "show"], env=clean_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader went away before anything was written
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, stderr
    assert stderr == ""


@pytest.mark.integration
def test_missing_topics_stop_the_worker(tmp_path: Path, kafka_bootstrap: str,
                                        unique_name: Callable[[str], str]) -> None:
    store_at(tmp_path / "state").close()
    prefix = unique_name("absent") + "."
    line = one_line_error(run_reclaim("worker", "--bootstrap", kafka_bootstrap, "--create-fs-root", "--topic-prefix",
                                      prefix, env=clean_env(tmp_path), timeout=60), ExitCode.UNAVAILABLE)
    assert f"missing topics {prefix}ledger-deletion" in line and "run `reclaim topics create`" in line


@pytest.mark.integration
def test_a_compacted_deletion_topic_stops_the_worker(tmp_path: Path, kafka_bootstrap: str,
                                                     unique_name: Callable[[str], str]) -> None:
    """It started: compaction keeps one record a key, and a chunk's copies share theirs (records lost)."""
    store_at(tmp_path / "state").close()
    prefix = unique_name("compacted") + "."
    deletion = TopicNames.for_prefix(prefix).deletion
    create_topics(admin_client(kafka_bootstrap), [TopicSpec(deletion, 1, {"cleanup.policy": "compact"})])
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=prefix)
    assert run_reclaim("topics", "create", env=env).returncode == 1  # the others created, the mismatch named
    line = one_line_error(run_reclaim("worker", "--create-fs-root", env=env, timeout=60), ExitCode.UNAVAILABLE)
    assert f"topic {deletion} on {kafka_bootstrap} compact" in line and "cleanup.policy=delete" in line


@pytest.mark.integration
def test_inflight_on_missing_topics_is_no_false_all_clear(tmp_path: Path, kafka_bootstrap: str,
                                                         unique_name: Callable[[str], str]) -> None:
    """It printed 0 (nothing in flight) and exit 0 for topics that do not exist, e.g. a mistyped prefix."""
    prefix = unique_name("absent") + "."
    line = one_line_error(run_reclaim("deletions", "inflight", "--bootstrap", kafka_bootstrap, "--topic-prefix",
                                      prefix, env=clean_env(tmp_path), timeout=60), ExitCode.UNAVAILABLE)
    assert f"missing topics {prefix}ledger-deletion" in line and "run `reclaim topics create`" in line


@pytest.mark.integration
def test_topics_create_reports_a_partition_mismatch(tmp_path: Path, kafka_bootstrap: str,
                                                    unique_name: Callable[[str], str]) -> None:
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=unique_name("mismatch") + ".")
    run_reclaim("topics", "create", "--partitions", "2", env=env, check=True)
    again = run_reclaim("topics", "create", "--partitions", "3", "--json", env=env)
    assert again.returncode == ExitCode.FINDINGS, again.stderr
    rows = {row["topic"]: row for row in json.loads(again.stdout)}
    deletion = next(row for topic, row in rows.items() if topic.endswith("ledger-deletion"))
    assert deletion["outcome"] == "exists"
    assert deletion["mismatch"] == "2 partitions, configured 3"
    assert "differs from its configuration: 2 partitions, configured 3" in again.stderr
    # The DLQ always has one partition: it matches whatever --partitions says.
    assert next(row for topic, row in rows.items() if topic.endswith(".dlq"))["mismatch"] is None


def test_s3_endpoint_settings_reach_the_worker_from_a_config_file(tmp_path: Path, s3_endpoint: S3Endpoint) -> None:
    """The config file's S3 endpoint and credentials configure the binding the worker checks (its bucket
    is missing here; a real server would answer wrong credentials with access denied)."""
    store_at(tmp_path / "state").close()
    config = tmp_path / "reclaim.toml"
    config.write_text(f's3_endpoint = "{s3_endpoint.url}"\ns3_bucket = "no-such-bucket-here"\n'
                      f's3_access_key = "{s3_endpoint.access_key}"\ns3_secret_key = "{s3_endpoint.secret_key}"\n')
    line = one_line_error(run_reclaim("worker", "--config", str(config), "--bootstrap", NOBODY, "--create-fs-root",
                                      env=clean_env(tmp_path), timeout=120), ExitCode.UNAVAILABLE)
    assert "S3 bucket 'no-such-bucket-here' of storage binding 's3-tier2' does not exist" in line


def test_a_metrics_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_reclaim("worker", "--bootstrap", NOBODY, "--metrics-port", str(port), env=clean_env(tmp_path))
    line = one_line_error(result, ExitCode.UNAVAILABLE)
    assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use" in line


def test_local_down_never_signals_a_process_it_did_not_start(tmp_path: Path) -> None:
    # A stale state file whose pids now belong to another process (here a session leader, as a reused
    # pid may well be): `local down` must leave it running, not SIGTERM its process group.
    foreign = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        state = StackState(kafka_pid=foreign.pid, kafka_client_port=1, kafka_controller_port=2,
                           s3_pid=foreign.pid, s3_url="http://127.0.0.1:1")
        state.save(tmp_path / "state")
        result = run_reclaim("local", "down", env=clean_env(tmp_path))
        assert result.returncode == 0, result.stderr
        assert foreign.poll() is None, "local down killed a process reclaim did not start"
        assert json.loads((tmp_path / "state" / "stack.json").read_text())["kafka_pid"] is None
    finally:
        foreign.kill()
        foreign.wait()


@pytest.mark.parametrize("content", [b"{bad", b"[1]", b'{"kafka_pid": "x"}', b"\xff"])
@pytest.mark.parametrize("action", ["status", "down", "up"])
def test_an_unreadable_stack_state_is_one_line_naming_it(tmp_path: Path, content: bytes, action: str) -> None:
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "stack.json").write_bytes(content)
    line = one_line_error(run_reclaim("local", action, env=clean_env(tmp_path)), ExitCode.UNAVAILABLE)
    assert f"cannot read the local stack's state {tmp_path / 'state' / 'stack.json'}" in line


@pytest.mark.parametrize("action", ["status", "down", "up"])
def test_a_state_dir_that_is_a_file_is_one_line(tmp_path: Path, action: str) -> None:
    (tmp_path / "state").write_text("")
    line = one_line_error(run_reclaim("local", action, env=clean_env(tmp_path)), ExitCode.UNAVAILABLE)
    assert f"the state directory {tmp_path / 'state'} is not a directory" in line


@pytest.mark.integration
@pytest.mark.parametrize("tail", ["bad prefix/", "y" * 230])
def test_a_topic_prefix_kafka_refuses_creates_nothing(tmp_path: Path, kafka_bootstrap: str,
                                                     unique_name: Callable[[str], str], tail: str) -> None:
    """A too-long prefix created the shorter names and failed on the longer ones, exit 2."""
    prefix = unique_name("illegal") + tail
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=prefix)
    line = one_line_error(run_reclaim("topics", "create", env=env, timeout=60), ExitCode.USAGE)
    assert "makes topic names Kafka refuses" in line
    from confluent_kafka.admin import AdminClient

    existing = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    assert not [topic for topic in existing if topic.startswith(prefix)]


def test_local_down_with_nothing_up_creates_nothing(tmp_path: Path) -> None:
    result = run_reclaim("local", "down", env=clean_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "state").exists()


def test_a_local_s3_endpoint_that_accepts_but_never_answers(tmp_path: Path) -> None:
    """`local status` called it healthy (its port was open) and `local up` hung in boto3 on it."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    hung = ("import socket, sys, time\ns = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[2]))); s.listen()\n"
            "time.sleep(120)")
    # Named as `up` names moto, so that it counts as the stack's own endpoint.
    fake = subprocess.Popen([sys.executable, "-c", hung, "moto.server", str(port)], start_new_session=True)
    try:
        state = StackState(s3_pid=fake.pid, s3_url=f"http://127.0.0.1:{port}")
        state.save(tmp_path / "state")
        env = clean_env(tmp_path)
        for _ in range(50):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        status = run_reclaim("local", "status", "--json", env=env, timeout=30)
        assert status.returncode == ExitCode.UNHEALTHY
        assert not json.loads(status.stdout)["s3"]["healthy"]
        line = one_line_error(run_reclaim("local", "up", env=env, timeout=30), ExitCode.UNAVAILABLE)
        assert f"S3 endpoint (pid {fake.pid}) at http://127.0.0.1:{port} runs but does not answer" in line
        assert fake.poll() is None
    finally:
        fake.kill()
        fake.wait()

"""``reclaim retention-job``: the Spark retention query as a process, with metrics and a clean stop on signals."""

from __future__ import annotations

import logging
import math
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from reclaim.exits import Unavailable, UsageError
from reclaim.localstack.procs import exit_status, stop_on_signals
from reclaim.retention.spark_auth import JobKeys, job_keys
from reclaim.security.errors import SigningError
from reclaim.security.keyring import Keyring
from reclaim.security.live import KeyringFile
from reclaim.security.signing import AuthMode
from reclaim.services import client_security, preflight, runtime
from reclaim.settings import AWS_S3, Settings

if TYPE_CHECKING:
    from reclaim.retention.spark_job import RetentionJob, RetentionJobConfig
    from reclaim.retention.spark_metrics import BatchSummary
    from reclaim.retention.spark_session import S3aStore

log = logging.getLogger(__name__)

MAX_STATE_BUCKETS = 2**31 - 1
SHORTEST_PERIOD_S = 0.001  # Spark counts both periods in whole milliseconds: below this they are 0
LONGEST_PERIOD_S = 366 * 86400.0
# The master URLs Spark accepts (``SparkContext``): anything else failed only once Spark had started, in a traceback.
MASTER = re.compile(r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[\d+,\d+,\d+\]"
                    r"|(spark|mesos|k8s)://\S+|yarn")

@dataclass(frozen=True)
class RetentionJobSettings(Settings):
    """Settings of ``reclaim retention-job``: the common ones plus the job's, each read from ``RECLAIM_<NAME>``."""

    checkpoint: str | None = None
    master: str = "local[*]"
    executor_python: str | None = None
    """The Python on a cluster's executors (a path on their hosts); None: ``PYSPARK_PYTHON``, else ``python3``."""
    trigger_interval_s: float = 5.0
    reevaluate_s: float = 30.0
    state_buckets: int = 64

    @property
    def checkpoint_location(self) -> str:
        """A path or URI Spark can write; by default under the state directory."""
        return self.checkpoint or str(self.state_dir / "retention-checkpoint")

    def validate(self) -> None:
        super().validate()
        periods = (self.trigger_interval_s, self.reevaluate_s)
        if not all(math.isfinite(period) and period > 0 for period in periods) or self.state_buckets <= 0:
            raise ValueError("trigger_interval_s, reevaluate_s and state_buckets must be positive")
        for name, period in (("trigger_interval_s", self.trigger_interval_s), ("reevaluate_s", self.reevaluate_s)):
            if not SHORTEST_PERIOD_S <= period <= LONGEST_PERIOD_S:
                raise ValueError(f"{name} must be between {SHORTEST_PERIOD_S:g} and {LONGEST_PERIOD_S:.0f} seconds, "
                                 f"got {period:g}")
        if self.state_buckets > MAX_STATE_BUCKETS:  # Spark casts a row's bucket to INT: above, buckets wrapped
            raise ValueError(f"state_buckets must be at most {MAX_STATE_BUCKETS}, got {self.state_buckets}")
        if not MASTER.fullmatch(self.master):
            raise ValueError(f"master must be a Spark master URL (local, local[N], local[*], spark://host:port, "
                             f"yarn, k8s://..., mesos://...), got {self.master!r}")

    @classmethod
    def of(cls, base: Settings, flags: object) -> RetentionJobSettings:
        """``base`` (flags and environment already merged) with the job's own flags (attributes of ``flags``,
        None when not given) and variables."""
        common = {f.name: getattr(base, f.name) for f in fields(Settings)}
        own = {name: getattr(flags, name, None) for name in ("checkpoint", "master", "executor_python",
                                                            "trigger_interval_s", "reevaluate_s", "state_buckets",
                                                            "metrics_port")}
        given = {k: v for k, v in own.items() if v is not None}
        settings = cls.from_env(spelled={k: f"--{k.replace('_', '-')}" for k in given}, **{**common, **given})
        assert isinstance(settings, RetentionJobSettings)
        return settings


BUCKETS_FILE = "reclaim-state-buckets"


def pin_checkpoint(location: str, buckets: int) -> None:
    """Check a local checkpoint before Spark starts: a directory, writable, made with ``buckets`` state buckets.

    A stream's state lives in the bucket its name hashes to, so another bucket count would start streams
    over with no state while their old state still decides in the old bucket. The count a new local
    checkpoint is made with is written beside Spark's files; a checkpoint elsewhere (hdfs://, s3a://) or
    made before that file existed is not checked.
    """
    parsed = urlparse(location)
    if parsed.scheme not in ("", "file"):
        return
    path = Path(parsed.path if parsed.scheme else location)
    if path.exists() and not path.is_dir():
        raise UsageError(f"checkpoint {location} is a file, not a directory")
    pinned = path / BUCKETS_FILE
    try:
        if pinned.is_file():
            made_with = pinned.read_text().strip()
            if made_with != str(buckets):
                raise UsageError(f"state_buckets {buckets} differs from the {made_with} the checkpoint {location} "
                                 f"was made with: keep {made_with}, or start from a new checkpoint")
        elif not (path / "offsets").exists():  # a new checkpoint: the count it is made with
            path.mkdir(parents=True, exist_ok=True)
            pinned.write_text(f"{buckets}\n")
    except OSError as exc:
        raise Unavailable(f"checkpoint {location} cannot be used: {exc}") from exc


def job_config(settings: RetentionJobSettings, once: bool) -> RetentionJobConfig:
    from reclaim.retention.spark_io import RetentionTopics
    from reclaim.retention.spark_job import RetentionJobConfig

    registry_url, registry_config = client_security.registry_connection(settings)
    return RetentionJobConfig(
        bootstrap=client_security.spark_bootstrap(preflight.bootstrap(settings)),
        topics=RetentionTopics.from_names(runtime.topic_names(settings)),
        checkpoint=settings.checkpoint_location, trigger_interval_s=settings.trigger_interval_s,
        reevaluate_ms=round(settings.reevaluate_s * 1000), once=once, registry_url=registry_url,
        registry_config=tuple(sorted(registry_config.items())), state_buckets=settings.state_buckets,
        kafka_options=client_security.spark_kafka_options(), keys=executor_keys(settings))


def checkpoint_store(settings: RetentionJobSettings) -> S3aStore | None:
    """How an ``s3a://`` checkpoint is reached (Hadoop's s3a connector): with reclaim's S3 settings, the tier-2
    binding's endpoint (none, or ``aws``: AWS S3 in ``s3_region``), region, path style and keys (none: s3a's
    credential chain on each host); None for a checkpoint elsewhere."""
    from reclaim.retention.spark_session import S3aStore, uses_s3a

    if not uses_s3a(settings.checkpoint_location):
        return None
    return S3aStore(endpoint=None if settings.s3_endpoint in (None, AWS_S3) else settings.s3_endpoint,
                    region=settings.s3_region, path_style=settings.s3_path_style, access_key=settings.s3_access_key,
                    secret_key=settings.s3_secret_key, session_token=settings.s3_session_token)


def executor_keys(settings: Settings, keyring: Keyring | None = None) -> JobKeys | None:
    """What the job's executors verify inputs by and sign truncation events with, from the keyring read here,
    on the driver (``keyring``: as last read, else the file): executors read no file, the keys travel inside
    the job (``reclaim.retention.spark_auth``).

    None without a keyring. A keyring without an ed25519 key of the retention-job role is a
    :class:`~reclaim.security.errors.SigningError` (one line), unless record_auth is off or in rollout, where
    the events go unsigned (and an applier with a keyring refuses them).
    """
    if keyring is None:
        keyring = runtime.keyring(settings)
    mode = None if keyring is None or settings.record_auth == "off" else AuthMode(settings.record_auth or "enforce")
    if mode is None:
        log.warning("record authentication is off (no keyring, or record_auth=off): the retention job obeys inputs "
                    "from anyone who can write its topics")
    if keyring is None:
        return None
    try:
        return job_keys(keyring, mode)
    except SigningError as exc:
        if mode is AuthMode.ENFORCE:
            raise
        log.warning("%s: the job's truncation events go unsigned", exc)
    return None if mode is None else job_keys(keyring, mode, sign=False)


class KeyWatch:
    """The job's keys as the keyring file changes: the executors' keys travel inside the query, so a key
    retired or added reaches them only in a query started again (from its checkpoint) with the new keys."""

    def __init__(self, settings: Settings, keys: KeyringFile) -> None:
        self.settings, self.keys = settings, keys
        self._seen = keys.current()

    def changed(self) -> JobKeys | None:
        """The executors' new keys when the file changed since last asked; None when it has not."""
        keyring = self.keys.current()
        if keyring is self._seen:
            return None
        self._seen = keyring
        return executor_keys(self.settings, keyring)


def run_retention_job(settings: RetentionJobSettings, once: bool = False, metrics_addr: str = "127.0.0.1", *,
                      spark_log: Path | None = None, say: Callable[[str], None] | None = None,
                      tell: Callable[[str], None] | None = None) -> int:
    """Run the job until it finishes (``once``), fails (exit 1) or a signal stops it (SIGTERM exit 0, Ctrl-C 130).

    ``spark_log``: the file that Spark's, Ivy's and py4j's output goes to (None: the terminal); ``tell`` is
    given a line naming it once Spark is about to start. ``say``: where the run's summary goes, a line for each
    batch of a ``once`` run and a line of totals (None: the log).
    """
    from reclaim.retention.spark_job import RetentionJobError, run_available, start_retention_job
    from reclaim.retention.spark_session import build_spark_session, executor_problems, is_local

    runtime.require_record_auth(settings, "the retention job")
    stop = stop_on_signals("stopping the retention query", log.info)
    pin_checkpoint(settings.checkpoint_location, settings.state_buckets)
    preflight.broker(settings)  # bounded and in one line, before Spark starts
    config = job_config(settings, once)
    if settings.metrics_port is not None:
        preflight.serve_metrics(settings.metrics_port, metrics_addr)
    if spark_log is not None and tell is not None:
        tell(f"Spark's log: {spark_log}")
    spark = build_spark_session("reclaim-retention-job", settings.cache_dir, master=settings.master,
                                shuffle_partitions=settings.partitions, s3a=checkpoint_store(settings),
                                executor_python=settings.executor_python, log_file=spark_log)
    report = say or log.info
    try:
        if not is_local(settings.master) and (problems := executor_problems(spark)):
            raise Unavailable(f"the executors cannot run the retention job: {'; '.join(problems)}")
        if once:
            batches = run_available(spark, config, stop=stop)
            for batch in batches:
                report(batch.log_line())
            return exit_status(_report(batches, None, report), stop)
        keys = runtime.keyring_file(settings) if config.keys is not None else None
        watch = None if keys is None else KeyWatch(settings, keys)
        return exit_status(_supervise(lambda keyed: start_retention_job(spark, keyed), config, stop, watch, report),
                           stop)
    except RetentionJobError as exc:
        log.error("%s", exc)
        return 1
    finally:
        spark.stop()


def _supervise(start: Callable[[RetentionJobConfig], RetentionJob], config: RetentionJobConfig,
               stop: threading.Event, watch: KeyWatch | None, report: Callable[[str], None] = log.info) -> int:
    """Run the query until it ends or ``stop``, starting it again with the new keys whenever ``watch`` sees
    the keyring change; 1 if the query failed."""
    jobs = [start(config)]  # the running query last; those before it are stopped
    batches: list[BatchSummary] = []
    try:
        while jobs[-1].query.isActive and not stop.wait(0.5):
            keys = None if watch is None else watch.changed()
            if keys is not None:
                log.info("the keyring changed: restarting the retention query with the new keys")
                batches += jobs.pop().stop()
                config = replace(config, keys=keys)
                jobs.append(start(config))
        failure = jobs[-1].query.exception()
    finally:
        if jobs:
            batches += jobs[-1].stop()
    return _report(batches, None if failure is None else str(failure), report)


def _report(batches: list[BatchSummary], failure: str | None, report: Callable[[str], None]) -> int:
    """Tell ``report`` the run's totals (and log its failure): the process's exit code."""
    report(f"retention job stopped after {len(batches)} batch(es): {sum(b.input_rows for b in batches)} input "
           f"rows, {sum(b.streams_decided for b in batches)} stream(s) decided, {sum(b.events for b in batches)} "
           f"event(s), {sum(b.reject_count for b in batches)} reject(s)")
    if failure is not None:
        log.error("retention query failed: %s", failure.splitlines()[0])
        return 1
    return 0

"""A Spark standalone cluster on loopback: a master and workers run from the installed PySpark's own jars.

The workers' executors get a Python of their own that does not have reclaim (:func:`executor_python`): a
job that runs on this cluster proves it ships reclaim to its executors. Each worker offers little (one
core, 1 GiB by default): the machine is shared with a Kafka broker and an S3 server. Every port is a free
one and the daemons' web UIs listen on free ports too (the master's ``/json/`` says which workers and
applications it has).

    python -m devtools.spark_cluster [--workers N]    # start one, print its master URL, stop on Ctrl-C
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reclaim.localstack.procs import StackError, free_port, port_open, spawn, stop_pid, wait_until
from reclaim.retention.spark_session import EXECUTOR_REQUIREMENTS
from reclaim.tools.audit_spark import AUDIT_REQUIREMENTS

#: What the executors' Python holds: the retention job's packages and the Spark audit's.
REQUIREMENTS = (*EXECUTOR_REQUIREMENTS, *AUDIT_REQUIREMENTS)

ROOT = Path(__file__).resolve().parent.parent
CONSTRAINTS = ROOT / "constraints.txt"
DAEMON_MEMORY = "256m"
"""The heap of the master and of each worker daemon (Spark's default is 1g): they only schedule."""
LEFT_OUT_OF_WORKERS = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON",
                       "SPARK_CONF_DIR")
"""This process's variables the daemons (and so the executors) do not inherit: nothing of this process's
Python may reach the executors but what the job itself ships."""


def spark_home() -> Path:
    """The installed PySpark's folder: Spark's jars, ``bin/spark-class`` and ``python/lib/pyspark.zip``."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def executor_python(cache_dir: Path) -> Path:
    """A Python for the executors, made once under ``cache_dir``: a virtualenv of this interpreter's version
    (PySpark refuses a worker of another) holding :data:`REQUIREMENTS` only, pinned by the
    repository's ``constraints.txt``. reclaim is not installed in it, nor pyspark (Spark ships its own).

    The packages come from PyPI the first time (about 90 MB; seconds from pip's cache).
    """
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    venv = cache_dir / f"spark-executor-python{version}"
    python = venv / "bin" / "python"
    wanted = "\n".join([*REQUIREMENTS, _pins()]) + "\n"
    stamp = venv / "reclaim-requirements.txt"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / f".spark-executor-python{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be making it: wait, then use it
        if python.exists() and stamp.is_file() and stamp.read_text() == wanted:
            return python
        try:
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True,
                           text=True)
            pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
            if CONSTRAINTS.is_file():
                pip += ["-c", str(CONSTRAINTS)]
            subprocess.run([*pip, *REQUIREMENTS], check=True, capture_output=True, text=True)
        except subprocess.CalledProcessError as exc:
            raise StackError(f"the executors' Python could not be made in {venv}: {(exc.stderr or '')[-2000:]}") \
                from exc
        stamp.write_text(wanted)
    return python


def _pins() -> str:
    """The constraint lines of the requirements, so that a changed pin makes the environment again."""
    if not CONSTRAINTS.is_file():
        return ""
    names = {name.lower().replace("_", "-") for name in REQUIREMENTS}
    return "\n".join(line for line in CONSTRAINTS.read_text().splitlines()
                     if line.split("==")[0].strip().lower().replace("_", "-") in names)


@dataclass(frozen=True)
class SparkCluster:
    """A running standalone cluster: where its master is, its processes and their logs."""

    master_url: str
    """``spark://host:port``, the ``--master`` of a job."""
    web_url: str
    """The master's web UI; ``<web_url>/json/`` lists workers and applications."""
    master_pid: int
    worker_pids: tuple[int, ...]
    logs: tuple[Path, ...]
    """The master's log, then each worker's."""
    work_dirs: tuple[Path, ...]
    """Each worker's work directory: ``<app id>/<executor id>/`` holds an executor's stderr and the files
    and archives shipped to it."""
    python: Path
    """The executors' Python (:func:`executor_python`), to give a job as ``PYSPARK_PYTHON``."""

    @property
    def pids(self) -> tuple[int, ...]:
        return (self.master_pid, *self.worker_pids)

    def status(self) -> dict[str, Any]:
        """The master's own account (its ``/json/``): workers, active and completed applications."""
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=5) as response:
            status: dict[str, Any] = json.load(response)
        return status

    def executor_dirs(self, app_id: str) -> list[Path]:
        """The working directory of every executor the workers ran for application ``app_id``."""
        return sorted(path for work in self.work_dirs for path in (work / app_id).glob("*") if path.is_dir())

    def stop(self) -> None:
        """Stop the workers (their executors with them), then the master."""
        for pid in (*self.worker_pids, self.master_pid):
            stop_pid(pid)


def _alive_workers(web_url: str) -> int:
    try:
        with urllib.request.urlopen(f"{web_url}/json/", timeout=1) as response:
            return sum(worker["state"] == "ALIVE" for worker in json.load(response)["workers"])
    except (OSError, urllib.error.HTTPError, ValueError, KeyError):
        return -1


def start_spark_cluster(work: Path, cache_dir: Path, workers: int = 2, cores: int = 1, memory: str = "1g",
                        host: str = "127.0.0.1", timeout: float = 90.0) -> SparkCluster:
    """Start a master and ``workers`` workers of ``cores`` cores and ``memory`` each on ``host``, their logs
    and work directories under ``work``; return once every worker has registered with the master.

    Raises :class:`~reclaim.localstack.procs.StackError` when the executors' Python cannot be made or a
    daemon does not get ready within ``timeout``; what was started is stopped again.
    """
    python = executor_python(cache_dir)
    home = spark_home()
    env = {name: value for name, value in os.environ.items() if name not in LEFT_OUT_OF_WORKERS}
    env.update(SPARK_HOME=str(home), SPARK_LOCAL_IP=host, SPARK_DAEMON_MEMORY=DAEMON_MEMORY)
    spark_class = str(home / "bin" / "spark-class")
    port, web_port = free_port(host), free_port(host)
    master_log = work / "master.log"
    master = spawn([spark_class, "org.apache.spark.deploy.master.Master", "--host", host, "--port", str(port),
                    "--webui-port", str(web_port)], master_log, env=env)
    started, logs, dirs = [master.pid], [master_log], []
    web_url = f"http://{host}:{web_port}"
    try:
        wait_until(lambda: port_open(host, port) and _alive_workers(web_url) >= 0, timeout, "Spark master",
                   master, master_log)
        deadline = time.monotonic() + timeout
        for index in range(workers):
            log, work_dir = work / f"worker-{index}.log", work / f"worker-{index}"
            worker = spawn([spark_class, "org.apache.spark.deploy.worker.Worker", f"spark://{host}:{port}",
                            "--host", host, "--port", str(free_port(host)), "--webui-port", str(free_port(host)),
                            "--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir)], log, env=env)
            started.append(worker.pid)
            logs.append(log)
            dirs.append(work_dir)
        wait_until(lambda: _alive_workers(web_url) == workers, max(deadline - time.monotonic(), 1.0),
                   f"{workers} Spark worker(s)", None, logs[-1])
    except StackError:
        for pid in reversed(started):
            stop_pid(pid)
        raise
    return SparkCluster(f"spark://{host}:{port}", web_url, master.pid, tuple(started[1:]), tuple(logs), tuple(dirs),
                        python)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devtools.spark_cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--work", type=Path, default=Path(".reclaim") / "spark-cluster")
    args = parser.parse_args(argv)
    from reclaim.settings import Settings

    began = time.monotonic()
    cluster = start_spark_cluster(args.work, Settings.from_env().cache_dir, workers=args.workers)
    print(f"{cluster.master_url} (web UI {cluster.web_url}, executors' Python {cluster.python}) "
          f"up in {time.monotonic() - began:.1f}s; Ctrl-C stops it", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

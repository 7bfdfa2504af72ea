"""Spark sessions for reclaim: local ones on this interpreter, or on a cluster with reclaim's code shipped to it.

A local master (``local``, ``local[N]``, ``local-cluster[...]``) runs Python workers on the interpreter
that runs this code, so they import reclaim as this process does. Any other master (``spark://``,
``yarn``, ``k8s://``, ``mesos://``) runs executors on hosts that need not have reclaim installed:
the session ships reclaim's own package to them (:func:`reclaim_archive`), and their Python must hold
the third-party packages reclaim's executor-side code imports (:data:`EXECUTOR_REQUIREMENTS`).

The Kafka connector, and Hadoop's s3a connector when a path the job uses is an ``s3a://`` URI, come
from Maven Central through ``spark.jars.packages``; Spark hands the jars to the executors itself.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import re
import sys
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger(__name__)

EXECUTOR_REQUIREMENTS = ("pandas", "pyarrow", "fastavro", "cryptography", "prometheus-client")
"""What the Python of a cluster's executors must have installed (reclaim itself is shipped): Spark's grouped
state needs pandas and pyarrow; reclaim's stateful step imports fastavro (records), cryptography
(signatures) and prometheus-client (its counters). numpy comes with pandas. Spark ships its own
``pyspark`` and py4j to the executors' Python workers."""

EXECUTOR_MODULES = ("pandas", "pyarrow", "fastavro", "cryptography", "prometheus_client")
"""The modules of :data:`EXECUTOR_REQUIREMENTS`, as the executors import them."""

REGISTRY_REQUIREMENTS = ("confluent-kafka", "authlib", "cachetools", "httpx2", "attrs", "certifi")
"""Also needed on the executors when records use the Confluent wire format (a Schema Registry URL is set):
confluent-kafka's Schema Registry client and what it imports."""

EXECUTOR_ENTRY = "reclaim.retention.spark_state"
"""The module of the job's stateful step: what the executors import first."""

SHIPPED_AS = "reclaim-code"
"""The folder reclaim's archive is unpacked into, in each executor's working directory; on the Python
workers' ``PYTHONPATH``."""


def kafka_connector_package() -> str:
    """The Maven coordinates of the Spark Kafka connector matching the installed PySpark."""
    import pyspark

    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}"


IVY_SETTINGS = """<ivysettings>
  <settings defaultResolver="central"/>
  <caches defaultCacheDir="{cache}"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/>
  </resolvers>
</ivysettings>
"""


def ivy_settings(ivy_dir: Path) -> Path:
    """Ivy settings that resolve from Maven Central only, into our own cache.

    Spark's built-in settings also consult ``~/.m2``, where Maven often leaves a pom without its jar,
    which fails the download; and a packages host this machine may not reach.
    """
    ivy_dir.mkdir(parents=True, exist_ok=True)
    path = ivy_dir / "ivysettings.xml"
    text = IVY_SETTINGS.format(cache=ivy_dir / "cache")
    if not path.exists() or path.read_text() != text:
        path.write_text(text)
    return path


# -- Hadoop's s3a connector ------------------------------------------------------------------------------------

AWS_SDK_OF_HADOOP = {"3.4.1": "2.24.6", "3.4.2": "2.29.52", "3.4.3": "2.35.4", "3.5.0": "2.35.4"}
"""The AWS SDK v2 version each Hadoop release's hadoop-aws is built against (``aws-java-sdk-v2.version`` in
``hadoop-project``'s pom): PySpark 4.0 ships Hadoop 3.4.1, 4.1 ships 3.4.2, 4.2 ships 3.5.0."""

S3A_SDK_MODULES = ("s3", "s3-transfer-manager")
"""The AWS SDK modules s3a loads (its client, and the transfer manager its uploads and copies go through),
with what they depend on. hadoop-aws itself names the SDK's ``bundle``: every AWS service in one shaded
jar of 686 MB, which Spark would copy to every executor of every application."""

S3A_EXCLUDES = ("software.amazon.awssdk:bundle", "io.netty:*", "org.apache.httpcomponents:*",
                "commons-codec:commons-codec", "commons-logging:commons-logging", "org.slf4j:slf4j-api")
"""Left out of the resolution: the bundle, and the libraries the SDK modules depend on that Spark's own jars
already hold in newer versions (Netty, Apache HttpClient, commons-codec, commons-logging as jcl-over-slf4j,
slf4j), which would only sit behind Spark's on the class path."""


def hadoop_version() -> str:
    """The Hadoop version of the installed PySpark, from the name of its ``hadoop-client-api`` jar."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    for jar in jars.glob("hadoop-client-api-*.jar"):
        found = re.fullmatch(r"hadoop-client-api-(\d+(?:\.\d+)+)\.jar", jar.name)
        if found:
            return found.group(1)
    raise RuntimeError(f"no hadoop-client-api jar in {jars}: cannot tell which hadoop-aws matches this PySpark")


def s3a_packages(hadoop: str) -> tuple[list[str], list[str]]:
    """The Maven coordinates of the s3a connector for Hadoop ``hadoop``, and those to exclude.

    hadoop-aws of the same version (it must match hadoop-common), and the AWS SDK modules s3a needs at
    the version its pom names. For a Hadoop release not in :data:`AWS_SDK_OF_HADOOP`, hadoop-aws with the
    bundle its pom names: correct, but 686 MB on every executor.
    """
    aws = f"org.apache.hadoop:hadoop-aws:{hadoop}"
    sdk = AWS_SDK_OF_HADOOP.get(hadoop)
    if sdk is None:
        log.warning("Hadoop %s: AWS SDK version unknown, s3a gets hadoop-aws's whole SDK bundle", hadoop)
        return [aws], []
    return [aws, *(f"software.amazon.awssdk:{module}:{sdk}" for module in S3A_SDK_MODULES)], list(S3A_EXCLUDES)


def uses_s3a(*locations: str) -> bool:
    """Whether any of ``locations`` (paths or URIs the job reads or writes) is on s3a."""
    return any(urlsplit(location).scheme == "s3a" for location in locations)


@dataclass(frozen=True)
class S3aStore:
    """How the s3a connector reaches the object store behind ``s3a://`` paths.

    ``endpoint`` None is AWS S3 itself, in ``region``; a URL is an S3-compatible server, TLS or not by its
    scheme, with path-style addressing unless ``path_style`` is False. Without ``access_key`` s3a's own
    credential chain applies on each JVM (driver and executors alike): the ``AWS_*`` variables of that
    host's environment, then its instance role. Spark redacts the keys (``spark.redaction.regex`` matches
    ``secret``, ``token`` and ``access.key``) wherever it shows its configuration.
    """

    endpoint: str | None = None
    region: str = "us-east-1"
    path_style: bool | None = None
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)

    def hadoop_options(self) -> dict[str, str]:
        """The ``fs.s3a.*`` Hadoop options (each set as ``spark.hadoop.<name>``)."""
        options = {"fs.s3a.endpoint.region": self.region}
        if self.endpoint is not None:
            options["fs.s3a.endpoint"] = self.endpoint
            options["fs.s3a.connection.ssl.enabled"] = str(urlsplit(self.endpoint).scheme == "https").lower()
        path_style = self.endpoint is not None if self.path_style is None else self.path_style
        options["fs.s3a.path.style.access"] = str(path_style).lower()
        if self.access_key and self.secret_key:
            options["fs.s3a.access.key"] = self.access_key
            options["fs.s3a.secret.key"] = self.secret_key
            if self.session_token:
                options["fs.s3a.session.token"] = self.session_token
                options["fs.s3a.aws.credentials.provider"] = (
                    "org.apache.hadoop.fs.s3a.TemporaryAWSCredentialsProvider")
        return options


# -- reclaim's code, shipped to a cluster ------------------------------------------------------------------


def is_local(master: str) -> bool:
    """Whether ``master`` runs every Python worker on this host with this process's environment."""
    return master.startswith("local")


def package_folders(package: str = "reclaim") -> dict[str, Path]:
    """Each folder of ``package``'s files, by the dotted package it holds, as this interpreter imports them.

    Installed from a wheel, every subpackage lies under ``reclaim/``. Installed editable from this
    repository, pyproject's package-dir maps folders beside ``reclaim/`` into the package (``retention/``
    is ``reclaim.retention``) through an import hook, where no directory listing finds them: a folder beside
    one of the package's own is taken when the import system resolves ``reclaim.<folder>`` to it.
    """
    [own] = importlib.import_module(package).__path__  # a regular package: one folder
    folder = Path(own).resolve()
    folders = {package: folder}
    for sibling in sorted(folder.parent.iterdir()):
        if sibling == folder or not (sibling / "__init__.py").is_file():
            continue
        spec = importlib.util.find_spec(f"{package}.{sibling.name}")
        if spec is not None and any(Path(location).resolve() == sibling.resolve()
                                    for location in spec.submodule_search_locations or ()):
            folders[f"{package}.{sibling.name}"] = sibling.resolve()
    return folders


def _package_files(folders: Mapping[str, Path]) -> Iterator[tuple[str, Path]]:
    """(name in the archive, file) for every file of the package but bytecode and hidden files."""
    for name, folder in sorted(folders.items()):
        prefix = name.replace(".", "/")
        for path in sorted(folder.rglob("*")):
            parts = path.relative_to(folder).parts
            if path.is_file() and "__pycache__" not in parts and not any(part.startswith(".") for part in parts) \
                    and path.suffix != ".pyc":
                yield f"{prefix}/{'/'.join(parts)}", path


def reclaim_archive(out_dir: Path) -> Path:
    """A zip of the reclaim package as this interpreter imports it, under ``out_dir``, named by its content.

    It travels as a Spark archive (``spark.archives``), unpacked in each executor's working directory,
    not as a ``pyFiles`` zip imported in place: reclaim reads its Avro schemas through file paths
    (``reclaim.schemas.avro_schema.AVRO_DIR``), which a zip on ``sys.path`` does not give. Nor is it a
    packed environment (venv-pack, conda-pack) in ``spark.archives``: that would carry pandas, pyarrow and
    numpy, some 300 MB, to every executor of every run, where a cluster's executors have a Python of their
    own with those; reclaim is 0.4 MB and changes with each release. The same content gives the same file,
    so a job started again ships what it shipped before. The file must stay while a job runs: an executor
    started later (in place of a lost one) fetches it from the driver.
    """
    files = list(_package_files(package_folders()))
    digest = hashlib.sha256()
    for name, path in files:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    archive = out_dir / f"reclaim-{digest.hexdigest()[:16]}.zip"
    if archive.is_file():
        return archive
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = archive.with_suffix(f".{os.getpid()}.part")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as zipped:
        for name, path in files:
            zipped.write(path, name)
    partial.replace(archive)
    return archive


SPARK_HAS = ["org.apache.hadoop:hadoop-client-api", "org.apache.hadoop:hadoop-client-runtime"]
"""What the Kafka connector depends on that Spark's own jars hold at the same version (the connector is built with
Spark's Hadoop): 50 MB that every executor would copy, left out for a cluster."""


def cluster_options(cache_dir: Path, executor_python: str | None) -> dict[str, str]:
    """The options that let executors without reclaim run its code: the archive, and their Python's path.

    The executors' Python is the one PySpark names in ``PYSPARK_PYTHON`` on the driver (it travels with
    each Python function): ``executor_python`` when given, else the environment's, else ``python3``. It
    must be the driver's Python version and hold :data:`EXECUTOR_REQUIREMENTS`; Spark adds its own pyspark.
    """
    if executor_python:
        os.environ["PYSPARK_PYTHON"] = executor_python
    archive = reclaim_archive(cache_dir / "spark-archives")
    log.info("shipping reclaim to the executors as %s; their Python: %s", archive.name,
             os.environ.get("PYSPARK_PYTHON", "python3"))
    # Relative to the executor's working directory, where the Python workers start and the archive is unpacked.
    return {"spark.archives": f"{archive}#{SHIPPED_AS}", "spark.executorEnv.PYTHONPATH": SHIPPED_AS}


def build_spark_session(app_name: str, cache_dir: Path, master: str = "local[2]", shuffle_partitions: int = 2,
                        *, s3a: S3aStore | None = None, executor_python: str | None = None,
                        packages: Sequence[str] = (), conf: Mapping[str, str] | None = None,
                        log_file: Path | None = None) -> SparkSession:
    """A Spark session with the Kafka connector (and s3a with ``s3a``, and the Maven coordinates in
    ``packages``), its jars cached under ``cache_dir``; ``conf`` holds any other Spark settings. With
    ``log_file``, the output of Spark's JVM, Ivy and py4j goes there, not to the terminal
    (:func:`reclaim.retention.spark_output.spark_output_to`).

    On a local master, workers run the interpreter that runs this code (``PYSPARK_PYTHON``), so they
    see the same packages; shuffle partitions are few because the local machine has few cores. On any
    other master, reclaim is shipped to the executors (:func:`cluster_options`), whose Python is
    ``executor_python`` (see there). Spark's own defaults (``spark-defaults.conf`` in ``SPARK_CONF_DIR``)
    still apply to what is not set here, e.g. ``spark.executor.memory`` or ``spark.driver.host``.
    """
    from pyspark.sql import SparkSession

    jars, excludes, options = [kafka_connector_package(), *packages], [], {}
    if is_local(master):
        os.environ["PYSPARK_PYTHON"] = sys.executable
        os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    else:
        options.update(cluster_options(cache_dir, executor_python))
        excludes += SPARK_HAS
    if s3a is not None:
        s3a_jars, s3a_excludes = s3a_packages(hadoop_version())
        jars += s3a_jars
        excludes += s3a_excludes
        options.update({f"spark.hadoop.{name}": value for name, value in s3a.hadoop_options().items()})
    options["spark.jars.packages"] = ",".join(jars)
    if excludes:
        options["spark.jars.excludes"] = ",".join(excludes)
    ivy = cache_dir / "ivy"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars.ivy", str(ivy))
        .config("spark.jars.ivySettings", str(ivy_settings(ivy)))
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for name, value in {**options, **(conf or {})}.items():
        builder = builder.config(name, value)
    if log_file is None:
        return builder.getOrCreate()
    from reclaim.retention.spark_output import spark_output_to

    with spark_output_to(log_file):
        return builder.getOrCreate()


def executor_problems(spark: SparkSession, modules: Sequence[str] = EXECUTOR_MODULES,
                      entry: str = EXECUTOR_ENTRY) -> list[str]:
    """What keeps a cluster's executors from running reclaim's Python, one line each; empty when nothing does.

    One small job, a task for each executor core, asks the executors' Python for ``modules`` and then imports
    ``entry`` from the shipped code. Without it a missing package surfaced as a Python traceback from
    inside the first batch, repeated for each retried task. The Python workers it starts are the ones the
    job's query then reuses.
    """
    def probe(_: object) -> tuple[str, str, tuple[str, ...], str]:
        # Pickled by value: it runs where reclaim is not installed, before the shipped code is known to import.
        import importlib
        import importlib.util
        import socket
        import sys

        missing = tuple(module for module in modules if importlib.util.find_spec(module) is None)
        failure = ""
        if not missing:
            try:
                importlib.import_module(entry)
            except Exception as exc:  # noqa: BLE001 - whatever the import raises is the answer
                failure = f"{type(exc).__name__}: {exc}"
        return sys.executable, socket.gethostname(), missing, failure

    slots = max(spark.sparkContext.defaultParallelism, 1)
    try:
        seen = set(spark.sparkContext.parallelize(range(slots), slots).map(probe).collect())
    except Exception as exc:  # noqa: BLE001 - Py4J wraps the executors' failure; its reason is what matters
        return [f"no executor ran Python ({os.environ.get('PYSPARK_PYTHON', 'python3')}): {_reason(exc)}"]
    problems = []
    for python, host, missing, failure in sorted(seen):
        if missing:
            problems.append(f"{python} on {host} lacks {', '.join(missing)}")
        elif failure:
            problems.append(f"{python} on {host} cannot import {entry}: {failure}")
    return problems


def _reason(exc: BaseException) -> str:
    """The line of a Spark job failure that says why (a Python error, a program that cannot run), else its first."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for marker in ("[PYTHON_VERSION_MISMATCH]", "Cannot run program", "Error: "):
        for line in lines:
            if marker in line:
                return line[line.index(marker) if marker.startswith(("[", "C")) else 0:][:300]
    return lines[0][:300] if lines else type(exc).__name__

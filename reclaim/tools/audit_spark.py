"""``reclaim audit --spark``: the audit as a Spark job, for a tier-2 one process cannot list in time.

On the model of Apache Iceberg's ``DeleteOrphanFiles`` action: the listing is split into tasks that run
on the executors, the metadata store's chunk rows are read as a table, and the two are anti-joined both
ways on Spark. What it finds, and the report and exit status, are the one-process audit's
(:mod:`reclaim.tools.audit`), and every finding is confirmed on the driver by the same code before it
counts:

1. **Listing.** The driver walks the top levels of each binding's name tree (``scope/stream/...``:
   ``/`` is a directory on the filesystem binding and S3's delimiter) and hands each prefix below them
   to a task, which lists it whole (:meth:`~reclaim.storage.base.BaseChunkStorage.iter_object_pages`):
   a stream's chunks are one task. Or, given an S3 Inventory manifest for a binding, its data files
   (CSV or Parquet) are the tasks: no LIST request at all, and a snapshot up to a day old, which the
   confirmation below corrects.
2. **Rows.** PostgreSQL's ``chunks`` table is read over JDBC by the executors (several partitions);
   a SQLite store is exported by the driver to Parquet, a page at a time, and read from there.
3. **Anti-joins.** Objects with no row claiming them on their binding, older than the grace, are
   orphan candidates; rows whose location names a binding that was listed but whose object was not
   listed are missing or dangling candidates; rows naming a binding, bucket or tier that is not
   configured are dangling.
4. **Confirmation** (driver, a page at a time): an orphan candidate must still exist, a gone row's
   object must still be absent and its row be read again, exactly as the one-process audit does; only
   then does ``--repair`` send the orphans through phase 1.

Iceberg's known traps, and what happens here:

- *A prefix or scheme that differs between the listing and the rows* (``s3://`` against ``s3a://``, a
  trailing slash): rows and objects are joined on (binding, chunk name), never on a URI. A listing's
  keys become chunk names through the binding's own key prefix; an inventory's rows must name the
  binding's bucket (another bucket fails the run: Iceberg's ``prefixMismatchMode=ERROR``), its keys
  outside the key prefix are not the binding's, and its manifest may be given as ``s3://`` or ``s3a://``.
- *Files of writes still in flight*: an object younger than the grace is *recent*, not an orphan, and a
  candidate is checked again before it counts.
- *A listing that fails half way*: the listing is materialised (persisted and counted) before anything
  else; a task that fails (after Spark's retries) fails the run with one line, and nothing is repaired.
"""

from __future__ import annotations

import functools
import gzip
import io
import json
import logging
import time
import urllib.parse
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from reclaim.exits import Unavailable
from reclaim.segments.backup import LAYOUT_PREFIX
from reclaim.storage.azure import AzureChunkStorage, AzureSettings
from reclaim.storage.base import BaseChunkStorage, StoredObject
from reclaim.storage.chunks import OFFLOAD_PREFIX, ChunkStorage
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.gcs import GcsChunkStorage, GcsSettings
from reclaim.storage.metadata import MetadataStore
from reclaim.storage.s3 import S3ChunkStorage, S3Settings
from reclaim.tools.audit import (
    GRACE_S,
    PAGE,
    AuditHooks,
    AuditReport,
    BindingAudit,
    ObjectState,
    Sample,
    _check_copies,
    _still_there,
    held_by_offloads,
    probe,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

LISTING = "binding STRING, name STRING, size LONG, modified DOUBLE"
ROWS = "name STRING, active INT, mark_id STRING, locations STRING"
LOCATIONS = "array<struct<binding:string,tier:string,bucket:string,key:string,copy:string>>"
#: How many levels of the name tree the driver walks before it hands prefixes to tasks.
MAX_DEPTH = 2
AUDIT_REQUIREMENTS = ("boto3", "google-cloud-storage", "azure-storage-blob", "azure-identity")
"""What a cluster's executors need for the audit, beyond the retention job's packages: the clients their S3, GCS
and Azure listings go through."""
JDBC_DRIVER = "org.postgresql:postgresql:42.7.14"
"""The PostgreSQL JDBC driver the executors read the chunk rows with (``spark.jars.packages``)."""


@dataclass(frozen=True)
class BindingSpec:
    """What an executor rebuilds a binding from: its name and tier, and an object store binding's settings (S3,
    GCS, Azure: credentials included, so an executor signs in as the driver does) or a filesystem binding's
    root (which the executors must see at the same path)."""

    name: str
    tier: str
    s3: S3Settings | None = None
    root: str | None = None
    gcs: GcsSettings | None = None
    azure: AzureSettings | None = None

    @classmethod
    def of(cls, binding: BaseChunkStorage) -> BindingSpec:
        if isinstance(binding, S3ChunkStorage):
            return cls(binding.name, binding.tier.value, s3=binding.settings)
        if isinstance(binding, GcsChunkStorage):
            return cls(binding.name, binding.tier.value, gcs=binding.settings)
        if isinstance(binding, AzureChunkStorage):
            return cls(binding.name, binding.tier.value, azure=binding.settings)
        if isinstance(binding, FileSystemChunkStorage):
            return cls(binding.name, binding.tier.value, root=str(binding.root))
        raise Unavailable(f"storage binding {binding.name!r} cannot be audited on Spark: only filesystem, S3, GCS "
                          "and Azure bindings can be rebuilt on the executors")

    def build(self) -> BaseChunkStorage:
        from reclaim.storage.chunks import Tier

        if self.s3 is not None:
            return S3ChunkStorage(self.s3, name=self.name, tier=Tier(self.tier))
        if self.gcs is not None:
            return GcsChunkStorage(self.gcs, name=self.name, tier=Tier(self.tier))
        if self.azure is not None:
            return AzureChunkStorage(self.azure, name=self.name, tier=Tier(self.tier))
        assert self.root is not None
        return FileSystemChunkStorage(self.root, name=self.name, tier=Tier(self.tier), create=False)


@functools.lru_cache(maxsize=8)
def _executor_binding(spec: BindingSpec) -> BaseChunkStorage:
    """One binding per spec and executor process (an S3 client is built once)."""
    return spec.build()


@dataclass(frozen=True)
class Split:
    """One listing task: the objects under ``prefix`` (``whole``), or only those directly under it."""

    binding: BindingSpec
    prefix: str
    whole: bool


def plan_splits(binding: BaseChunkStorage, target: int, max_depth: int = MAX_DEPTH) -> list[Split]:
    """The listing tasks of ``binding``: the driver reads the top ``max_depth`` levels of its name tree
    (stopping early once there are ``target`` prefixes), and each prefix below is one task.

    A level with more than a page of objects directly under a prefix is not walked on the driver: that
    prefix becomes one task listing everything under it. Every object is in exactly one task.
    """
    spec = BindingSpec.of(binding)
    splits: list[Split] = []
    level = [""]
    for _ in range(max_depth):
        if len(level) >= target:
            break
        below: list[str] = []
        for prefix in level:
            direct, children, flat = 0, [], False
            for page in binding.iter_level_pages(prefix):
                direct += len(page.objects)
                children += page.prefixes
                if direct > PAGE:
                    flat = True
                    break
            if flat:
                splits.append(Split(spec, prefix, whole=True))
                continue
            if direct:
                splits.append(Split(spec, prefix, whole=False))
            below += children
        level = below
    return splits + [Split(spec, prefix, whole=True) for prefix in level]


def list_split(split: Split) -> Iterator[tuple[str, str, int, float]]:
    """The listing rows of one task (run on an executor); a storage failure fails the task."""
    binding = _executor_binding(split.binding)
    pages: Iterator[Sequence[StoredObject]] = (
        binding.iter_object_pages(split.prefix) if split.whole
        else (page.objects for page in binding.iter_level_pages(split.prefix)))
    for page in pages:
        for obj in page:
            if not obj.name.startswith(LAYOUT_PREFIX):
                yield split.binding.name, obj.name, obj.size, obj.modified


# --- S3 Inventory ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InventoryFile:
    """One data file of an S3 Inventory report, read by one task."""

    binding: BindingSpec
    location: str
    """``s3://bucket/key`` (read with the binding's client and credentials) or a local path."""
    file_format: str
    columns: tuple[str, ...]


def s3_location(url: str) -> tuple[str, str] | None:
    """``(bucket, key)`` of an ``s3://`` or ``s3a://`` URL (the scheme Hadoop writes), else None."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("s3", "s3a") or not parts.netloc:
        return None
    return parts.netloc, parts.path.lstrip("/")


def _read_bytes(binding: BaseChunkStorage, location: str) -> bytes:
    found = s3_location(location)
    if found is None:
        return Path(location).read_bytes()
    if not isinstance(binding, S3ChunkStorage):
        raise Unavailable(f"{location} is on S3, but binding {binding.name!r} is no S3 binding")
    bucket, key = found
    body: bytes = binding.client.get_object(Bucket=bucket, Key=key)["Body"].read()
    return body


def inventory_files(binding: BaseChunkStorage, manifest: str) -> list[InventoryFile]:
    """The data files an S3 Inventory ``manifest.json`` lists, checked against ``binding``.

    The manifest must be of the binding's bucket (``sourceBucket``), in CSV or Parquet, with at least
    the ``Key``, ``Size`` and ``LastModifiedDate`` fields. Its files are in ``destinationBucket`` (an ARN);
    a manifest read from a local path finds each file beside it, by its base name.
    """
    if not isinstance(binding, S3ChunkStorage):
        raise Unavailable(f"--inventory names binding {binding.name!r}, which is no S3 binding")
    try:
        document = json.loads(_read_bytes(binding, manifest))
    except Exception as exc:  # noqa: BLE001 - a file, JSON or botocore error alike: one line, nothing audited
        raise Unavailable(f"cannot read the inventory manifest {manifest}: {exc}") from exc
    source = document.get("sourceBucket")
    if source != binding.bucket:
        raise Unavailable(f"the inventory {manifest} is of bucket {source!r}, but binding {binding.name!r} is "
                          f"bucket {binding.bucket!r}; nothing was audited")
    file_format = str(document.get("fileFormat", "")).upper()
    if file_format not in ("CSV", "PARQUET"):
        raise Unavailable(f"the inventory {manifest} is in {document.get('fileFormat')!r}: CSV and Parquet are read")
    columns = tuple(c.strip() for c in str(document.get("fileSchema", "")).split(","))
    needed = {"Key", "Size", "LastModifiedDate"} - set(columns)
    if file_format == "CSV" and needed:
        raise Unavailable(f"the inventory {manifest} lacks the field(s) {', '.join(sorted(needed))}")
    destination = str(document.get("destinationBucket", "")).removeprefix("arn:aws:s3:::")
    local = s3_location(manifest) is None
    spec = BindingSpec.of(binding)
    return [InventoryFile(spec, str(Path(manifest).parent / Path(entry["key"]).name) if local
                          else f"s3://{destination}/{entry['key']}", file_format, columns)
            for entry in document.get("files", [])]


def _inventory_records(item: InventoryFile, data: bytes) -> Iterator[dict[str, Any]]:
    if item.file_format == "CSV":
        import csv

        text = gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data
        for values in csv.reader(io.StringIO(text.decode())):
            yield dict(zip(item.columns, values, strict=False))
        return
    import pyarrow.parquet as pq

    for batch in pq.ParquetFile(io.BytesIO(data)).iter_batches():
        yield from batch.to_pylist()


def _modified(value: Any) -> float:
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    from datetime import datetime

    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def list_inventory_file(item: InventoryFile) -> Iterator[tuple[str, str, int, float]]:
    """The listing rows of one inventory data file (run on an executor).

    CSV keys are URL-encoded (S3 writes them so), Parquet keys are not. Versions that are not the latest
    and delete markers are no objects. A row of another bucket fails the task (and the run); a key
    outside the binding's key prefix is not the binding's.
    """
    binding = _executor_binding(item.binding)
    assert item.binding.s3 is not None
    bucket, key_prefix = item.binding.s3.bucket, item.binding.s3.key_prefix
    for record in _inventory_records(item, _read_bytes(binding, item.location)):
        if str(record.get("Bucket", bucket)) != bucket:
            raise ValueError(f"inventory file {item.location} lists bucket {record.get('Bucket')!r}, not {bucket!r}")
        if str(record.get("IsLatest", "true")).lower() == "false" or \
                str(record.get("IsDeleteMarker", "false")).lower() == "true":
            continue
        key = str(record["Key"])
        if item.file_format == "CSV":
            key = urllib.parse.unquote_plus(key)
        if not key.startswith(key_prefix):
            continue
        name = key[len(key_prefix):]
        if name and not name.startswith(LAYOUT_PREFIX):
            yield item.binding.name, name, int(record.get("Size") or 0), _modified(record["LastModifiedDate"])


# --- the chunk rows ------------------------------------------------------------------------------------


def jdbc_source(url: str, password: str | None = None) -> tuple[str, dict[str, str]]:
    """A ``postgresql://user:password@host:port/db?params`` URL as Spark's JDBC URL and its properties
    (the credentials apart, so the URL can be shown). ``password`` stands in for one the URL leaves out
    (libpq's ``passfile``, which the JDBC driver does not read; the parameter is not passed on)."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or "localhost"
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    params = [param for param in parts.query.split("&") if param and urllib.parse.unquote(
        param.partition("=")[0]) != "passfile"]
    query = f"?{'&'.join(params)}" if params else ""
    properties = {"driver": "org.postgresql.Driver"}
    if parts.username:
        properties["user"] = urllib.parse.unquote(parts.username)
    if parts.password:
        properties["password"] = urllib.parse.unquote(parts.password)
    elif password is not None:
        properties["password"] = password
    return f"jdbc:postgresql://{netloc}{parts.path}{query}", properties


def export_rows(store: MetadataStore, directory: Path) -> Path:
    """Every chunk row of ``store`` as Parquet files under ``directory``, a page at a time (the driver's
    memory stays bounded), for the executors to read; the directory."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("name", pa.string()), ("active", pa.int32()), ("mark_id", pa.string()),
                        ("locations", pa.string())])
    directory.mkdir(parents=True, exist_ok=True)
    after, part = "", 0
    with pq.ParquetWriter(directory / "rows-0.parquet", schema) as writer:
        while rows := store.chunks_after(after, PAGE * 10):
            after = rows[-1].name
            locations = [json.dumps([{"binding": loc.binding, "tier": loc.tier.value, "bucket": loc.bucket,
                                      "key": loc.key, "copy": loc.copy} for loc in row.locations]) for row in rows]
            writer.write_table(pa.table([[r.name for r in rows], [int(r.active) for r in rows],
                                         [r.mark_id for r in rows], locations], schema=schema))
            part += 1
    return directory


def chunk_rows(spark: SparkSession, store: MetadataStore, metadata_url: str | None, work: Path,
               partitions: int) -> DataFrame:
    """The chunk rows as a table: over JDBC from PostgreSQL (``metadata_url``), else exported from ``store``."""
    if metadata_url is not None:
        from reclaim.storage.postgres_base import login_password  # the postgres dependencies, only now

        password = None if urllib.parse.urlsplit(metadata_url).password else login_password(metadata_url)
        url, properties = jdbc_source(metadata_url, password)
        predicates = [f"mod(abs(hashtext(name)), {partitions}) = {i}" for i in range(partitions)]
        frame: DataFrame = spark.read.jdbc(url, "(SELECT name, active, mark_id, locations FROM chunks) AS rows",
                                           predicates=predicates, properties=properties)
        return frame.selectExpr("name", "CAST(active AS INT) AS active", "mark_id", "locations")
    return spark.read.schema(ROWS).parquet(str(export_rows(store, work / "rows")))


# --- the job -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SparkAuditSources:
    """Where the audit's tables come from: a split target, PostgreSQL's URL (None: export the store),
    inventory manifests by binding name, and a local directory for the SQLite export."""

    work: Path
    metadata_url: str | None = None
    inventories: tuple[tuple[str, str], ...] = ()
    splits_per_core: int = 4


def listing_table(spark: SparkSession, bindings: Sequence[BaseChunkStorage], sources: SparkAuditSources
                  ) -> DataFrame:
    """Every object of ``bindings`` as a ``LISTING`` row: each binding's split listing, or its inventory."""
    cores = spark.sparkContext.defaultParallelism
    inventories = dict(sources.inventories)
    unknown = sorted(set(inventories) - {b.name for b in bindings})
    if unknown:
        raise Unavailable(f"--inventory names no audited binding: {', '.join(unknown)}")
    splits: list[Split] = []
    files: list[InventoryFile] = []
    for binding in bindings:
        if binding.name in inventories:
            files += inventory_files(binding, inventories[binding.name])
        else:
            splits += plan_splits(binding, cores * sources.splits_per_core)
    context = spark.sparkContext
    rdds = []
    if splits:
        rdds.append(context.parallelize(splits, len(splits)).flatMap(list_split))
    if files:
        rdds.append(context.parallelize(files, len(files)).flatMap(list_inventory_file))
    rdd = rdds[0] if len(rdds) == 1 else context.union(rdds) if rdds else context.emptyRDD()
    return spark.createDataFrame(rdd, LISTING)


def spark_audit(spark: SparkSession, store: MetadataStore, bindings: Sequence[BaseChunkStorage],
                configured: Iterable[ChunkStorage] | None = None, *, sources: SparkAuditSources,
                grace_s: float = GRACE_S, limit: int = 20, hooks: AuditHooks | None = None) -> AuditReport:
    """Audit ``bindings`` against ``store`` on Spark; the same report as :func:`reclaim.tools.audit.audit`.

    Raises :class:`~reclaim.exits.Unavailable` when a binding, the store or a Spark task fails: the report
    is whole or there is none, and ``hooks.orphans`` (the repair) is called only once the listing and
    the joins are complete.
    """
    from pyspark.sql import functions as F
    from pyspark.storagelevel import StorageLevel

    probe(bindings)
    now = time.time()
    report = AuditReport(grace_s, [BindingAudit(b.name, limit) for b in bindings])
    results = {b.name: r for b, r in zip(bindings, report.bindings, strict=True)}
    by_name = {b.name: b for b in bindings}
    known: list[ChunkStorage] = list(bindings if configured is None else configured)
    try:
        listing = listing_table(spark, bindings, sources).persist(StorageLevel.MEMORY_AND_DISK)
        listed = listing.count()  # the whole listing, before anything is judged or repaired
        log.info("audit: %d objects listed on %d binding(s)", listed, len(bindings))
        rows = chunk_rows(spark, store, sources.metadata_url,
                          sources.work, max(2, spark.sparkContext.defaultParallelism))
        # Each copy with the object it names: the chunk's name, or an offloaded copy's _offload/<copy>/<chunk>.
        located = (rows.select("name", "active", F.explode(F.from_json("locations", LOCATIONS)).alias("loc"))
                   .select("name", "active", F.col("loc.binding").alias("binding"),
                           F.col("loc.bucket").alias("bucket"), F.col("loc.tier").alias("tier"),
                           F.when(F.col("loc.copy").isNull(), F.col("name"))
                           .otherwise(F.concat(F.lit(OFFLOAD_PREFIX), F.col("loc.copy"), F.lit("/"), F.col("name")))
                           .alias("object"))
                   .persist(StorageLevel.MEMORY_AND_DISK))
        objects = _object_states(listing, located, now - grace_s)
        for binding, state, count in objects.groupBy("binding", "state").count().collect():
            if state != ObjectState.ORPHAN.value:
                setattr(results[binding], state, count)
        unreachable = _unreachable(spark, located, known)
        for label, count, names in _samples(unreachable, limit):
            sample = report.unconfigured.setdefault(label, Sample(limit))
            sample.count, sample.names = count, names
        orphans = objects.where(F.col("state") == ObjectState.ORPHAN.value).select("binding", "name", "size",
                                                                                  "modified")
        gone = (located.join(unreachable.select("name", "binding"), ["name", "binding"], "left_anti")
                .where(F.col("binding").isin(list(by_name)))
                .join(listing.select("binding", F.col("name").alias("object")), ["binding", "object"], "left_anti")
                .select("binding", "name").distinct())
        orphan_pages = list(_pages(orphans.orderBy("binding", "name")))
        gone_pages = list(_pages(gone.orderBy("binding", "name")))
    except Unavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - Py4J and PySpark wrap a failed task alike
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise Unavailable(f"the audit's Spark job failed: {first}; the audit is incomplete and nothing was "
                          "repaired") from exc
    _confirm(store, by_name, results, orphan_pages, gone_pages, now, grace_s, hooks or AuditHooks())
    return report


def _object_states(listing: DataFrame, located: DataFrame, orphan_before: float) -> DataFrame:
    """Each listed object with its state: live or pending by the row that claims it on its binding,
    else orphan (modified before ``orphan_before``) or recent."""
    from pyspark.sql import functions as F

    claims = located.select("binding", F.col("object").alias("name"), "active").distinct()
    state = (F.when(F.col("active") == 1, ObjectState.LIVE.value)
             .when(F.col("active").isNotNull(), ObjectState.PENDING.value)
             .when(F.col("modified") <= orphan_before, ObjectState.ORPHAN.value)
             .otherwise(ObjectState.RECENT.value))
    return listing.join(claims, ["binding", "name"], "left").withColumn("state", state)


def _unreachable(spark: SparkSession, located: DataFrame, known: Sequence[ChunkStorage]) -> DataFrame:
    """Row locations that no configured binding holds, with the label the report files them under
    (:func:`reclaim.tools.audit.unreachable`)."""
    from pyspark.sql import functions as F

    configured = spark.createDataFrame([(b.name, b.bucket, b.tier.value) for b in known],
                                       "c_binding STRING, c_bucket STRING, c_tier STRING")
    joined = located.join(F.broadcast(configured), located.binding == configured.c_binding, "left")
    label = (F.when(F.col("c_binding").isNull(), F.col("binding"))
             .when(~F.col("bucket").eqNullSafe(F.col("c_bucket")) | (F.col("tier") != F.col("c_tier")),
                   F.concat(F.col("binding"), F.lit(" (bucket "), F.coalesce(F.col("bucket"), F.lit("None")),
                            F.lit(", "), F.col("tier"), F.lit(")"))))
    return joined.withColumn("label", label).where(F.col("label").isNotNull()).select("label", "name", "binding")


def _samples(unreachable: DataFrame, limit: int) -> list[tuple[str, int, list[str]]]:
    """Per label: how many locations, and the first ``limit`` row names in name order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    counts = {label: count for label, count in unreachable.groupBy("label").count().collect()}
    ranked = unreachable.withColumn("rank", F.row_number().over(Window.partitionBy("label").orderBy("name")))
    names: dict[str, list[str]] = {label: [] for label in counts}
    for label, name, _ in ranked.where(F.col("rank") <= limit).orderBy("label", "rank").select(
            "label", "name", "rank").collect():
        names[label].append(name)
    return [(label, counts[label], names[label]) for label in sorted(counts)]


def _pages(frame: DataFrame) -> Iterator[tuple[str, list[Any]]]:
    """The rows of ``frame`` (binding first, in binding order) as pages of at most ``PAGE`` per binding."""
    page: list[Any] = []
    current: str | None = None
    for row in frame.toLocalIterator():
        if row[0] != current or len(page) == PAGE:
            if page and current is not None:
                yield current, page
            current, page = row[0], []
        page.append(row)
    if page and current is not None:
        yield current, page


def _confirm(store: MetadataStore, bindings: dict[str, BaseChunkStorage], results: dict[str, BindingAudit],
             orphan_pages: list[tuple[str, list[Any]]], gone_pages: list[tuple[str, list[Any]]], now: float,
             grace_s: float, hooks: AuditHooks) -> None:
    """Count only the findings that hold when read again (the one-process audit's checks), then repair."""
    for name, page in orphan_pages:
        binding = bindings[name]
        held, candidates = held_by_offloads(store, name, [StoredObject(row[1], int(row[2]), float(row[3]))
                                                          for row in page], now)
        results[name].pending += len(held)
        still = _still_there(binding, candidates)
        for obj in still:
            results[name].count(ObjectState.ORPHAN, obj.name)
        if still and hooks.orphans is not None:
            hooks.orphans(binding, still)
    for name, page in gone_pages:
        binding = bindings[name]
        current = store.get_chunks([row[1] for row in page])
        claimed = [row for row in current.values() if any(loc.binding == name for loc in row.locations)]
        if claimed:
            _check_copies(store, binding, sorted(claimed, key=lambda r: r.name), results[name], lambda: now,
                          grace_s)

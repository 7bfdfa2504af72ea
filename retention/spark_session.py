"""Local Spark sessions for reclaim: the Kafka connector from Maven Central and workers on this interpreter."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


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


def build_spark_session(app_name: str, cache_dir: Path, master: str = "local[2]",
                        shuffle_partitions: int = 2) -> SparkSession:
    """A Spark session with the Kafka connector, its jars cached under ``cache_dir``.

    Workers run the interpreter that runs this code (``PYSPARK_PYTHON``), so they see the same
    packages; shuffle partitions are few because the local machine has few cores.
    """
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    ivy = cache_dir / "ivy"
    return (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.jars.packages", kafka_connector_package())
        .config("spark.jars.ivy", str(ivy))
        .config("spark.jars.ivySettings", str(ivy_settings(ivy)))
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )

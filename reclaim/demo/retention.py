"""The demo's retention part: two subscribers at different speeds, the Spark job, the applier and phase 2."""

from __future__ import annotations

import uuid
from pathlib import Path

from reclaim.demo.output import demo_settings, drain, say, step
from reclaim.demo.topics import show_topic_retention
from reclaim.demo.walkthrough import Retention, consumption, max_limit
from reclaim.retention.spark_session import build_spark_session
from reclaim.services import runtime
from reclaim.services.controller import stream_controller
from reclaim.settings import Settings
from reclaim.tools.audit import audit_binding


def show_retention(settings: Settings, bootstrap: str, log_file: Path | None = None) -> None:
    """Consumption-based retention on a fresh stream, then a size maximum overriding a stalled subscriber;
    Spark's, Ivy's and py4j's output to ``log_file`` (None: the terminal)."""
    demo = demo_settings(settings, bootstrap, "demo-retention")
    work = settings.state_dir / "demo-retention"
    say("  starting Spark (local) for the retention job ...")
    spark = build_spark_session("reclaim-demo-retention", settings.cache_dir, log_file=log_file)
    store, bindings = runtime.metadata_store(demo), runtime.storage_bindings(demo, writer=True)
    try:
        with stream_controller(demo, max_rolling_length=256) as (controller, publisher):
            retention = Retention(demo, controller, publisher, spark, work, say,
                                  stream=f"demo/events-{uuid.uuid4().hex[:6]}",
                                  drained=lambda: drain(demo, store, bindings))
            step(f"consumption-based retention on {retention.stream}: subscribers 'fast' and 'slow'")
            consumption(retention)
            step("a size maximum overrides a stalled subscriber")
            max_limit(retention, max_bytes=512)
            result = audit_binding(store, bindings, "fs-tier2")
            say(f"  audit: {result.live} live chunks, {result.pending} pending, {len(result.orphans)} orphans, "
                f"{len(result.missing)} missing")
            if not result.clean:
                raise AssertionError(f"audit not clean: {result}")
            retention.applier.close()
        # The same job decides for plain Kafka topics: its checkpoint goes on.
        show_topic_retention(settings, bootstrap, spark, retention.job)
    finally:
        bindings.close()
        store.close()
        # The Kafka connector's cached producer lives as long as this process's JVM, past the broker the
        # demo stops next; its reconnect warnings would be the demo's last lines.
        spark.sparkContext.setLogLevel("ERROR")
        spark.stop()

"""What the demo's parts share: printing as it goes, and draining phase 2 until nothing is in flight."""

from __future__ import annotations

import shutil
import time

from consumers.lag import estimated_inflight
from ops import runtime, stack
from ops.settings import Settings
from storage.bindings import StorageBindings
from storage.sql_store import SQLMetadataStore


def demo_settings(settings: Settings, bootstrap: str, part: str) -> Settings:
    """Settings for one part of the demo: a fresh store and tier-2 under ``<state-dir>/<part>``.

    Every part's phase-2 worker is in one group, so a later part (and a later demo) reads only the
    pending deletes published after what the earlier ones committed.
    """
    work = settings.state_dir / part
    shutil.rmtree(work, ignore_errors=True)
    return Settings.from_env(state_dir=settings.state_dir, metadata_path=work / "metadata.db",
                             fs_root=work / "tier2", bootstrap=bootstrap, topic_prefix=settings.topic_prefix,
                             retry_delays=settings.retry_delays, group_id="reclaim-demo",
                             batch_size=200, poll_timeout_s=0.5)


def say(text: str) -> None:
    print(text, flush=True)


def drain(settings: Settings, store: SQLMetadataStore, bindings: StorageBindings,
          timeout_s: float = 60.0) -> None:
    """Run a phase-2 worker until its group has no deletion left in flight."""
    worker = runtime.deletion_worker(settings, store, bindings)
    topics = runtime.topic_names(settings).deletion_inputs
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            report = worker.run_once()
            if report.received or report.outcomes:
                # A batch polled now finishes in a later call, overlapped with the next one's checks.
                outcomes = {k.value: v for k, v in report.outcomes.items()}
                say(f"  worker: {report.received} records polled; finished: {outcomes}, "
                    f"{report.stored} offsets stored")
                continue
            worker.commit()
            inflight = estimated_inflight(stack.require_bootstrap(settings), settings.group_id, topics)
            if inflight == 0:
                say("  estimated in-flight deletions: 0")
                return
        raise TimeoutError(f"deletions still in flight after {timeout_s:.0f}s")
    finally:
        worker.close()

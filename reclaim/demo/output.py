"""What the demo's parts share: printing as it goes, and draining phase 2 until nothing is in flight."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from reclaim.consumers.lag import estimated_inflight
from reclaim.localstack import stack
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.services import runtime
from reclaim.settings import Settings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.sql_store import SQLMetadataStore

DEMO_ROLES = (("controller", None), ("admin", None), ("retention-job", None), ("subscriber", "fast"),
              ("subscriber", "slow"))
"""The keys of the demo's keyring: every part that signs, and each of its subscribers."""


def demo_keyring(settings: Settings) -> Path:
    """A keyring for every part of the demo, made fresh under the state directory (mode 0600).

    One file holds every role's keys because one process plays every role; a deployment gives each
    process only its own keys and the public halves of those it verifies (see the README's Security).
    """
    keys = [new_key(f"demo-{role}" + (f"-{subject}" if subject else ""), role, Algorithm.ED25519, subject)
            for role, subject in DEMO_ROLES]
    keys.append(new_key("demo-controller.deletes", "controller", Algorithm.HMAC_SHA256))
    path = settings.state_dir / "demo-keyring.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(Keyring(keys).to_toml())
    return path


def demo_settings(settings: Settings, bootstrap: str, part: str) -> Settings:
    """Settings for one part of the demo: a fresh store and tier-2 under ``<state-dir>/<part>``, and the demo's
    keyring, so every record is signed and verified.

    Every part's phase-2 worker is in one group, so a later part (and a later demo) reads only the
    pending deletes published after what the earlier ones committed.
    """
    work = settings.state_dir / part
    shutil.rmtree(work, ignore_errors=True)
    return Settings.from_env(state_dir=settings.state_dir, metadata_path=work / "metadata.db",
                             fs_root=work / "tier2", bootstrap=bootstrap, topic_prefix=settings.topic_prefix,
                             retry_delays=settings.retry_delays, group_id="reclaim-demo",
                             batch_size=200, poll_timeout_s=0.5, keyring=settings.state_dir / "demo-keyring.toml")


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

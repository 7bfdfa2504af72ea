"""What the demo's parts share: printing as it goes, and draining phase 2 until nothing is in flight."""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import replace
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from reclaim.consumers.lag import estimated_inflight
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.localstack.stack import StackState
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.services import preflight, runtime
from reclaim.settings import Settings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.sql_store import SQLMetadataStore

DEMO_ROLES = (("controller", None), ("admin", None), ("retention-job", None), ("subscriber", "fast"),
              ("subscriber", "slow"), ("topic-retention", None))
"""The keys of the demo's keyring: every part that signs, and each of its subscribers."""
DEMO_STREAMS = ("demo/events", "demo/events-*")
"""The streams the demo's subscribers are granted: the retention part's (``demo/events-<hex>``, one a run)."""


def demo_keyring(settings: Settings) -> Path:
    """A keyring for every part of the demo, made fresh under the state directory (mode 0600).

    One file holds every role's keys because one process plays every role; a deployment gives each
    process only its own keys and the public halves of those it verifies (see docs/operations/security.md).
    """
    keys = [new_key(f"demo-{role}" + (f"-{subject}" if subject else ""), role, Algorithm.ED25519, subject,
                    DEMO_STREAMS if role == "subscriber" else None) for role, subject in DEMO_ROLES]
    keys.append(new_key("demo-controller.deletes", "controller", Algorithm.HMAC_SHA256))
    path = settings.state_dir / "demo-keyring.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(Keyring(keys).to_toml())
    return path


def stack_settings(settings: Settings, state: StackState) -> Settings:
    """``settings`` pointed at the local stack ``state`` describes: its broker, its S3 endpoint with the local
    endpoint's keys, its bucket (what ``<state-dir>/local.toml`` holds for a command run by hand)."""
    assert state.bootstrap is not None and state.s3_url is not None
    endpoint = S3Endpoint(url=state.s3_url)
    return replace(settings, bootstrap=state.bootstrap, s3_endpoint=endpoint.url, s3_access_key=endpoint.access_key,
                   s3_secret_key=endpoint.secret_key, s3_region=endpoint.region,
                   s3_bucket=state.s3_bucket or settings.s3_bucket)


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
                             s3_endpoint=settings.s3_endpoint, s3_access_key=settings.s3_access_key,
                             s3_secret_key=settings.s3_secret_key, s3_region=settings.s3_region,
                             s3_bucket=settings.s3_bucket,
                             retry_delays=settings.retry_delays, group_id="reclaim-demo",
                             batch_size=200, poll_timeout_s=0.5, keyring=settings.state_dir / "demo-keyring.toml")


#: The demo's story on stdout: never wrapped (a line is one fact, whatever the terminal's width), no
#: highlighting of numbers inside the lines; colour only on a terminal.
CONSOLE = Console(soft_wrap=True, highlight=False)


def say(text: str) -> None:
    """One line of the story, as it is (no markup); a leading newline is a blank line before it."""
    if text.startswith("\n"):
        CONSOLE.print()
    CONSOLE.print(text.lstrip("\n"), markup=False)


def step(title: str) -> None:
    """The start of one step of the story: a blank line and the step's title, ruled."""
    CONSOLE.print()
    CONSOLE.rule(f"[bold]{escape(title)}", align="left")


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
            inflight = estimated_inflight(preflight.bootstrap(settings), settings.group_id, topics)
            if inflight == 0:
                say("  estimated in-flight deletions: 0")
                return
        raise TimeoutError(f"deletions still in flight after {timeout_s:.0f}s")
    finally:
        worker.close()

"""The library page's examples, run as written against the real broker: settings, phase 1, a stream written
and truncated, a worker in-process, the audit; what they delete is gone from tier-2."""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import reclaim
from reclaim.errors import ReclaimError
from tests.support.library import config_file, examples, register_chunk, tier2_names

LEDGER_CHUNK = "ledgers/7.chunk-0"


def run(code: str, namespace: dict[str, Any]) -> str:
    """Run one example in ``namespace`` (shared by the page's examples); what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "library.md", "exec"), namespace)  # noqa: S102 - the docs' own examples
    return printed.getvalue()


def test_the_library_page_examples_delete_what_they_say(kafka_bootstrap: str, tmp_path: Path,
                                                        unique_name: Callable[[str], str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in [v for v in os.environ if v.startswith("RECLAIM_")]:
        monkeypatch.delenv(variable)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("RECLAIM_BOOTSTRAP", kafka_bootstrap)
    config_file(tmp_path, bootstrap=kafka_bootstrap, topic_prefix=unique_name("lib") + ".")
    from_env, from_file, publish, stream, worker, audit = examples("python")
    namespace: dict[str, Any] = {}

    assert run(from_env, namespace).strip() == kafka_bootstrap
    monkeypatch.delenv("RECLAIM_BOOTSTRAP")  # the file's (the same broker) is read next
    run(from_file, namespace)
    settings = namespace["settings"]
    assert settings.group_id == "shop-deletion" and settings.state_dir == Path(".reclaim")

    register_chunk(settings, LEDGER_CHUNK)
    assert run(publish, namespace).strip() == f"('{LEDGER_CHUNK}',) ()"
    with reclaim.open_deletions(settings) as deletions, pytest.raises(ReclaimError, match="marked deleted already"):
        deletions.publish([LEDGER_CHUNK])

    assert run(stream, namespace).strip().endswith(" 2048")
    before = tier2_names(settings)
    assert LEDGER_CHUNK in before and len(before) == 5  # the ledger's chunk and the stream's four
    live = max(before - {LEDGER_CHUNK})  # the stream's last chunk, in its live layout
    with reclaim.open_deletions(settings) as deletions, pytest.raises(ReclaimError, match="live segment"):
        deletions.publish([live])

    run(worker, namespace)
    assert namespace["worker"].gone == 3
    after = tier2_names(settings)
    assert LEDGER_CHUNK not in after and len(after) == 2 and after < before and live in after

    run(audit, namespace)
    report = namespace["report"]
    assert report.clean and report.totals()["live"] == 2 and report.totals()["pending"] == 0
    assert namespace["document"]["clean"] is True

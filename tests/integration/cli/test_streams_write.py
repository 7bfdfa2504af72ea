"""``reclaim streams write`` as a user runs it from the shell: bytes piped in become events in the stream's
segments, in chunks of the size the stream was created with, and a truncation at the tail cut it prints
hands every one of those chunks to phase 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import clean_env, run_reclaim

STREAM = "scope/orders"


def write(env: dict[str, str], data: bytes, *args: str) -> subprocess.CompletedProcess[bytes]:
    """``reclaim streams write STREAM ARGS`` with ``data`` on its stdin."""
    return subprocess.run([sys.executable, "-m", "reclaim", "streams", "write", STREAM, *args], input=data,
                          capture_output=True, env=env, timeout=120, check=False)


def stored(state: Path, segment: int) -> bytes:
    """The bytes of the segment's chunk files, in offset order."""
    folder = state / "tier2" / "chunks" / "scope" / "orders"
    chunks = sorted(folder.glob(f"{segment}.*"), key=lambda path: int(path.name.split("-O-")[1].split(".")[0]))
    return b"".join(path.read_bytes() for path in chunks)


@pytest.mark.integration
def test_bytes_piped_in_are_events_in_chunks_that_a_truncation_hands_to_phase_1(
        tmp_path: Path, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=unique_name("write") + ".")
    run_reclaim("topics", "create", env=env, check=True, timeout=120)
    run_reclaim("streams", "create", STREAM, "--segments", "2", "--chunk-size", "1024", env=env, check=True,
                timeout=120)
    data = os.urandom(5000)

    done = write(env, data, "--event-size", "2000")
    assert done.returncode == 0, done.stderr.decode()
    # Events of 2000, 2000 and 1000 bytes to segments 0, 1, 0, in chunks of at most 1024 bytes: the third fills
    # the last chunk of segment 0 before it starts another.
    assert done.stdout.decode().strip() == (f"stream {STREAM}: 5000 bytes written in 3 event(s); 5 chunk(s) in its "
                                            'active segments, size 5000, tail cut {"0": 3000, "1": 2000}')
    state = tmp_path / "state"
    assert stored(state, 0) == data[:2000] + data[4000:]
    assert stored(state, 1) == data[2000:4000]

    from_file = tmp_path / "more.bin"
    from_file.write_bytes(b"y" * 10)
    again = run_reclaim("streams", "write", STREAM, "--file", str(from_file), env=env, check=True, timeout=120)
    assert "10 bytes written in 1 event(s)" in again.stdout and '"0": 3010' in again.stdout

    cut = json.loads(run_reclaim("streams", "cut", STREAM, env=env, check=True, timeout=120).stdout)["cut"]
    assert cut == {"0": 3010, "1": 2000}
    truncated = run_reclaim("streams", "truncate", STREAM, "--cut", json.dumps(cut), env=env, check=True,
                            timeout=120)
    assert truncated.stdout.strip() == f"stream {STREAM}: truncated"
    store = SQLiteMetadataStore(state / "metadata.db")
    try:
        chunks = [chunk for segment in (f"{STREAM}/0.#epoch.0", f"{STREAM}/1.#epoch.0")
                  for chunk in store.list_chunks(segment, active_only=False)]
    finally:
        store.close()
    assert len(chunks) == 5 and not any(chunk.active for chunk in chunks)  # all handed to phase 1

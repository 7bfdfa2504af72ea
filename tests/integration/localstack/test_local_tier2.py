"""``reclaim local up --tier2 gcs|azure``: the emulator runs next to the stack, ``local.toml`` registers its
binding, a chunk goes through it, and ``local down`` stops it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from reclaim import config_file
from reclaim.localstack import stack
from reclaim.localstack.procs import pid_alive
from reclaim.services import runtime
from reclaim.settings import Settings
from reclaim.storage.chunks import ChunkTags
from tests.support.cli import run_reclaim
from tests.support.servers import server_unavailable

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TAGS = ChunkTags(component="local-up", stream="scope/stream", segment="0", writer_epoch=1)

#: Per emulator: the binding local.toml registers, the setting naming its store, and what a missing server says.
EMULATORS = {
    "gcs": ("gcs-tier2", "gcs_bucket", "GCS endpoint (fake-gcs-server)", "cannot build fake-gcs-server"),
    "azure": ("azure-tier2", "azure_container", "Azure Blob endpoint (Azurite)", "cannot install Azurite"),
}


def reclaim(*args: str, state_dir: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("RECLAIM_")}
    return run_reclaim(*args, env={**env, "RECLAIM_STATE_DIR": str(state_dir)}, check=check)


@pytest.mark.parametrize("tier2", sorted(EMULATORS))
def test_up_with_an_emulator_registers_its_binding_and_down_stops_it(tier2: str, tmp_path: Path) -> None:
    binding_name, store_setting, what, missing = EMULATORS[tier2]
    state = tmp_path / "state"
    try:
        up = reclaim("local", "up", "--tier2", tier2, state_dir=state, check=False)
        if up.returncode != 0 and missing in up.stderr:  # no `go` or `npm`: a server unavailable, not a bug
            server_unavailable(what, RuntimeError(up.stderr.strip()))
        assert up.returncode == 0, up.stderr
        report = json.loads(reclaim("local", "status", "--json", state_dir=state).stdout)
        assert {part: facts["state"] for part, facts in report.items()} == {
            "kafka": "running", "s3": "running", tier2: "running"}
        emulator = report[tier2]
        assert f"{tier2:6} endpoint={emulator['endpoint']} " in up.stdout

        config = stack.local_config(state)
        shown = json.loads(reclaim("--config", str(config), "config", "show", "--json", state_dir=state).stdout)
        assert shown[store_setting] == "reclaim-tier2"
        assert shown["gcs_endpoint" if tier2 == "gcs" else "azure_account_url"] == emulator["endpoint"]

        bindings = runtime.storage_bindings(Settings.from_env(config_file.load(config)))
        try:
            binding = bindings.get(binding_name)
            binding.check()
            handle = binding.create_with_content(f"local-up-{tier2}", b"through local.toml",
                                                 TAGS)
            assert binding.read(handle, 0, 18) == b"through local.toml"
        finally:
            bindings.close()

        # up is idempotent, a plain one too: the emulator keeps running, and local.toml still names it.
        reclaim("local", "up", state_dir=state)
        assert json.loads(reclaim("local", "status", "--json", state_dir=state).stdout)[tier2]["pid"] == emulator["pid"]
        assert emulator["endpoint"] in config.read_text()
        reclaim("local", "down", state_dir=state)
        assert not pid_alive(emulator["pid"])
        after = reclaim("local", "status", "--json", state_dir=state, check=False)
        assert after.returncode == 3 and tier2 not in json.loads(after.stdout)
    finally:
        stack.down(Settings(state_dir=state))  # whatever the test left running, even when it failed

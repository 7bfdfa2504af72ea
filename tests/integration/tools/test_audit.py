"""``reclaim audit`` on a real filesystem tier-2 and the S3 endpoint: every finding, the grace, the JSON
document, and the runs it refuses (exit 2, one line, nothing created)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

import reclaim
from reclaim.exits import ExitCode
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.storage.azure import AzureChunkStorage
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkLocation, Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.gcs import GcsChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.audit import AuditReport, audit, audit_binding
from tests.support.audit import HOUR, TAGS, aged, chunk, findings_fixture, name, one_line_error, put, run_audit

NOBODY = "http://127.0.0.1:1"  # nothing ever listens on port 1


def test_every_object_and_row_is_classified(fs: FileSystemChunkStorage, store: SQLiteMetadataStore) -> None:
    findings_fixture(fs, store)
    report = audit(store, [fs], grace_s=HOUR)
    (result,) = report.bindings
    assert (result.live, result.pending, result.recent, result.cleaning) == (1, 1, 1, 1)
    assert result.orphans.names == [name(6)]
    assert result.missing.names == [name(2)]
    assert result.dangling.names == [name(3)]
    assert {where: s.names for where, s in report.unconfigured.items()} == {"old-tier2": [name(5)]}
    assert not report.clean
    # A grace of zero takes the young object for an orphan and the fresh cleanup for a lost one.
    eager = audit(store, [fs], grace_s=0).bindings[0]
    assert sorted(eager.orphans.names) == [name(6), name(7)]
    assert sorted(eager.dangling.names) == [name(3), name(4)]


def test_a_clean_store_is_clean_and_one_binding_can_be_audited_alone(fs: FileSystemChunkStorage,
                                                                     store: SQLiteMetadataStore) -> None:
    put(store, chunk(fs, name(0)), chunk(fs, name(1), active=False, mark_id="m"))
    result = audit_binding(store, StorageBindings([fs]), "fs-tier2")
    assert (result.live, result.pending, result.clean) == (1, 1, True)


def test_the_command_reports_each_finding_and_exits_1(tmp_path: Path, fs: FileSystemChunkStorage,
                                                      store: SQLiteMetadataStore) -> None:
    findings_fixture(fs, store)
    result = run_audit(tmp_path)
    assert result.returncode == ExitCode.FINDINGS, result.stderr
    assert ("fs-tier2: 1 live, 1 pending deletion, 1 orphans, 1 missing, 1 dangling; within the 1h grace: "
            "1 recent objects, 1 rows in cleanup") in result.stdout
    for line in (f"  orphan   {name(6)}", f"  missing  {name(2)}", f"  dangling {name(3)}",
                 "old-tier2: not configured, 1 chunk rows name it (dangling)", f"  dangling {name(5)}",
                 "total: 1 live, 1 pending, 1 recent, 1 cleaning, 1 orphans, 1 missing, 2 dangling"):
        assert line in result.stdout.splitlines(), result.stdout


def test_the_library_audit_names_the_bindings_not_configured(tmp_path: Path, fs: FileSystemChunkStorage,
                                                              store: SQLiteMetadataStore) -> None:
    put(store, chunk(fs, name(0)))
    report = reclaim.audit(reclaim.Settings(state_dir=tmp_path / "state", fs_root=fs.root))
    assert report.clean and [b.binding for b in report.bindings] == ["fs-tier2"]
    assert list(report.not_configured) == list(report.to_dict()["not_configured"]) == ["s3-tier2"]


def test_the_metrics_file_holds_the_orphans_per_binding(tmp_path: Path, fs: FileSystemChunkStorage,
                                                        store: SQLiteMetadataStore) -> None:
    findings_fixture(fs, store)
    textfile = tmp_path / "reclaim_audit.prom"
    result = run_audit(tmp_path, "--metrics-file", str(textfile))
    assert result.returncode == ExitCode.FINDINGS, result.stderr
    text = textfile.read_text()
    assert 'reclaim_audit_orphans{binding="fs-tier2"} 1.0' in text
    assert "reclaim_audit_last_run_timestamp_seconds " in text


def test_a_name_holding_a_newline_is_one_escaped_line_of_the_report(tmp_path: Path, fs: FileSystemChunkStorage,
                                                                     store: SQLiteMetadataStore) -> None:
    put(store, chunk(fs, name(0)))
    odd = fs.root / "chunks" / "evil\n  orphan   FORGED"  # no valid chunk name: written behind reclaim's back
    odd.write_bytes(b"x")
    result = run_audit(tmp_path, "--grace", "0")
    assert result.returncode == ExitCode.FINDINGS, result.stderr
    lines = result.stdout.splitlines()
    assert "  orphan   'evil\\n  orphan   FORGED'" in lines and "  orphan   FORGED" not in lines, result.stdout
    assert json.loads(run_audit(tmp_path, "--grace", "0", "--json").stdout)["bindings"]["fs-tier2"]["orphans"][
        "names"] == ["evil\n  orphan   FORGED"]


def test_a_metrics_file_that_cannot_be_replaced_is_exit_2_before_anything_is_audited(
        tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore) -> None:
    findings_fixture(fs, store)
    device = tmp_path / "fifo"  # stands for /dev/null, which the atomic replace swapped for a plain file
    os.mkfifo(device)
    for target, says in ((device, "is not a regular file"), (tmp_path, "is not a regular file"),
                         (tmp_path / "gone" / "m.prom", f"there is no directory {tmp_path / 'gone'}")):
        line = one_line_error(run_audit(tmp_path, "--metrics-file", str(target)))
        assert says in line and "nothing was audited" in line
    assert device.is_fifo()


def test_json_is_one_document_with_counts_names_and_totals(tmp_path: Path, fs: FileSystemChunkStorage,
                                                           store: SQLiteMetadataStore) -> None:
    findings_fixture(fs, store)
    for i in range(8, 11):
        fs.create_with_content(name(i), b"x", TAGS)
        aged(fs, name(i), 3 * HOUR)
    result = run_audit(tmp_path, "--json", "--limit", "2", "--grace", "90m")
    assert result.returncode == ExitCode.FINDINGS, result.stderr
    document = json.loads(result.stdout)
    assert set(document) == {"clean", "grace_s", "bindings", "unconfigured", "not_configured", "totals"}
    assert (document["clean"], document["grace_s"]) == (False, 5400.0)
    fs_report = document["bindings"]["fs-tier2"]
    assert fs_report["orphans"]["count"] == 4 and len(fs_report["orphans"]["names"]) == 2
    assert set(fs_report["orphans"]["names"]) <= {name(i) for i in (6, 8, 9, 10)}
    assert {key: fs_report[key] for key in ("live", "pending", "recent", "cleaning", "clean")} == \
        {"live": 1, "pending": 1, "recent": 1, "cleaning": 1, "clean": False}
    assert fs_report["missing"] == {"count": 1, "names": [name(2)]}
    assert document["unconfigured"] == {"old-tier2": {"count": 1, "names": [name(5)]}}
    assert list(document["not_configured"]) == ["s3-tier2"]
    assert document["totals"] == {"live": 1, "pending": 1, "recent": 1, "cleaning": 1, "orphans": 4,
                                  "missing": 1, "dangling": 2}


def test_a_clean_run_exits_0_and_progress_goes_to_stderr(tmp_path: Path, fs: FileSystemChunkStorage,
                                                         store: SQLiteMetadataStore) -> None:
    put(store, chunk(fs, name(0)))
    result = run_audit(tmp_path, "--progress")
    assert result.returncode == ExitCode.OK, result.stderr
    assert "fs-tier2: 1 live, 0 pending deletion, 0 orphans, 0 missing, 0 dangling" in result.stdout
    assert "objects listed on fs-tier2" in result.stderr and "chunk rows checked" in result.stderr
    assert "objects listed" not in run_audit(tmp_path).stderr, "no progress when stderr is no terminal"


def test_a_clean_run_names_the_bindings_audited_and_those_not_configured(
        tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore) -> None:
    put(store, chunk(fs, name(0)))
    result = run_audit(tmp_path)
    assert result.returncode == ExitCode.OK, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "audited: fs-tier2"
    assert lines[1] == ("s3-tier2: not configured, not audited (no S3 endpoint: set --s3-endpoint, "
                        "RECLAIM_S3_ENDPOINT or the config file's s3_endpoint)")
    document = json.loads(run_audit(tmp_path, "--json").stdout)
    assert (document["clean"], list(document["bindings"])) == (True, ["fs-tier2"])
    assert document["not_configured"] == {"s3-tier2": "no S3 endpoint: set --s3-endpoint, RECLAIM_S3_ENDPOINT or "
                                                       "the config file's s3_endpoint"}


def test_a_missing_metadata_store_is_exit_2_and_nothing_is_created(tmp_path: Path,
                                                                   fs: FileSystemChunkStorage) -> None:
    typo = tmp_path / "typo" / "metdata.db"
    before = sorted(tmp_path.rglob("*"))
    line = one_line_error(run_audit(tmp_path, "--metadata-path", str(typo)))
    assert str(typo) in line
    assert sorted(tmp_path.rglob("*")) == before, "the audit created a file or directory"


def test_a_missing_filesystem_root_is_exit_2_and_not_created(tmp_path: Path, store: SQLiteMetadataStore) -> None:
    root = tmp_path / "not-mounted"
    line = one_line_error(run_audit(tmp_path, "--fs-root", str(root), RECLAIM_FS_CREATE_ROOT="true"))
    assert "fs-tier2" in line and str(root) in line
    assert not root.exists()


def test_a_corrupt_metadata_store_is_exit_2_in_one_line(tmp_path: Path, fs: FileSystemChunkStorage) -> None:
    corrupt = tmp_path / "corrupt.db"
    corrupt.write_bytes(b"SQLite format 3\x00" + os.urandom(4096))
    before = corrupt.read_bytes()
    line = one_line_error(run_audit(tmp_path, "--metadata-path", str(corrupt)))
    assert str(corrupt) in line
    assert corrupt.read_bytes() == before


def test_an_s3_endpoint_that_does_not_answer_is_exit_2_naming_s3_tier2(tmp_path: Path, fs: FileSystemChunkStorage,
                                                                        store: SQLiteMetadataStore) -> None:
    put(store, chunk(fs, name(0)))
    line = one_line_error(run_audit(tmp_path, "--s3-endpoint", NOBODY))
    assert "'s3-tier2'" in line and "127.0.0.1:1" in line


def test_bad_flags_are_usage_errors(tmp_path: Path) -> None:
    for args in (["--grace", "soon"], ["--limit", "-1"]):
        result = run_audit(tmp_path, *args)
        assert result.returncode == ExitCode.USAGE, result.stderr


@pytest.mark.integration
def test_s3_orphans_are_told_from_recent_objects_by_the_grace(
        tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore, s3_endpoint: S3Endpoint,
        make_tier2: Callable[[str], object]) -> None:
    s3 = make_tier2("s3")
    assert isinstance(s3, S3ChunkStorage)
    put(store, chunk(s3, name(0)), chunk(s3, name(1), write=False), chunk(fs, name(2)))
    s3.create_with_content(name(3), b"x", TAGS)  # no row: recent within an hour, an orphan with no grace
    flags = ("--s3-endpoint", s3_endpoint.url, "--s3-bucket", str(s3.bucket), "--json")
    credentials = s3_endpoint.credentials_env()  # a real server checks them
    within = json.loads(run_audit(tmp_path, *flags, **credentials).stdout)
    assert within["bindings"]["s3-tier2"] | {"clean": None} == {
        "live": 1, "pending": 0, "recent": 1, "cleaning": 0, "orphans": {"count": 0, "names": []},
        "missing": {"count": 1, "names": [name(1)]}, "dangling": {"count": 0, "names": []}, "clean": None}
    assert within["bindings"]["fs-tier2"]["live"] == 1
    assert within["not_configured"] == {}, "every binding reclaim knows is configured"
    assert run_audit(tmp_path, *flags[:-1], **credentials).stdout.splitlines()[0] == "audited: fs-tier2, s3-tier2"
    eager = run_audit(tmp_path, *flags, "--grace", "0", **credentials)
    assert eager.returncode == ExitCode.FINDINGS
    assert json.loads(eager.stdout)["bindings"]["s3-tier2"]["orphans"] == {"count": 1, "names": [name(3)]}


def cloud_env(binding: BaseChunkStorage) -> dict[str, str]:
    """The variables that configure ``binding`` (on its emulator) for a ``reclaim`` command."""
    if isinstance(binding, GcsChunkStorage):
        return {"RECLAIM_GCS_BUCKET": binding.settings.bucket, "RECLAIM_GCS_ENDPOINT": str(binding.settings.endpoint)}
    assert isinstance(binding, AzureChunkStorage)
    return {"RECLAIM_AZURE_CONTAINER": binding.settings.container,
            "RECLAIM_AZURE_ACCOUNT_URL": str(binding.settings.account_url),
            "RECLAIM_AZURE_ACCOUNT_KEY": str(binding.settings.account_key)}


@pytest.mark.integration
def test_gcs_and_azure_are_audited_as_configured_by_their_settings(
        tmp_path: Path, fs: FileSystemChunkStorage, store: SQLiteMetadataStore,
        cloud_binding: BaseChunkStorage) -> None:
    cloud = cloud_binding
    put(store, chunk(cloud, name(0)), chunk(cloud, name(1), write=False), chunk(fs, name(2)))
    cloud.create_with_content(name(3), b"x", TAGS)  # no row: recent within an hour, an orphan with no grace
    env = cloud_env(cloud)
    within = json.loads(run_audit(tmp_path, "--json", **env).stdout)
    assert within["bindings"][cloud.name] | {"clean": None} == {
        "live": 1, "pending": 0, "recent": 1, "cleaning": 0, "orphans": {"count": 0, "names": []},
        "missing": {"count": 1, "names": [name(1)]}, "dangling": {"count": 0, "names": []}, "clean": None}
    eager = run_audit(tmp_path, "--json", "--grace", "0", **env)
    assert eager.returncode == ExitCode.FINDINGS
    assert json.loads(eager.stdout)["bindings"][cloud.name]["orphans"] == {"count": 1, "names": [name(3)]}
    secret = env.get("RECLAIM_AZURE_ACCOUNT_KEY")
    assert secret is None or secret not in eager.stdout + eager.stderr


@pytest.mark.integration
def test_rows_on_a_bucket_the_binding_no_longer_has_are_dangling(
        fs: FileSystemChunkStorage, store: SQLiteMetadataStore, make_tier2: Callable[[str], object]) -> None:
    s3 = make_tier2("s3")
    assert isinstance(s3, S3ChunkStorage)
    elsewhere = ChunkLocation("s3-tier2", Tier.TIER2, "an-old-bucket", name(0))
    put(store, chunk(s3, name(0), write=False, location=elsewhere), chunk(s3, name(1)))
    report: AuditReport = audit(store, [fs, s3], grace_s=HOUR)
    assert {where: s.names for where, s in report.unconfigured.items()} == {
        "s3-tier2 (bucket an-old-bucket, TIER2)": [name(0)]}
    assert report.bindings[1].live == 1 and report.bindings[1].missing.count == 0

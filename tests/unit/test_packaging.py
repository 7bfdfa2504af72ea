"""What gets installed: one ``reclaim`` package mapped from the repository's folders, its public names,
and the optional parts behind extras."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import reclaim
from reclaim.extras import EXTRA_OF, MissingExtraError, extra_of, missing_extra, require
from tests.support.paths import REPO

ROOT = REPO
SETUPTOOLS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _folder_of(package: str) -> Path:
    """Where ``package`` lives in the repository, by the package-dir table (a nested name under its root)."""
    mapping: dict[str, str] = SETUPTOOLS["package-dir"]
    root = max((name for name in mapping if package == name or package.startswith(f"{name}.")), key=len)
    return ROOT / mapping[root] / package.removeprefix(root).lstrip(".").replace(".", "/")


def test_every_folder_of_the_package_is_listed() -> None:
    # package-dir does not combine with find: a folder left out of the list would be left out of the wheel.
    listed = set(SETUPTOOLS["packages"])
    found = set()
    for name, folder in SETUPTOOLS["package-dir"].items():
        for path in (ROOT / folder).rglob("*"):
            if path.is_dir() and "__pycache__" not in path.parts and any(path.iterdir()):
                relative = path.relative_to(ROOT / folder).parts
                if name == "reclaim" and relative[0] in {n.removeprefix("reclaim.") for n in SETUPTOOLS["package-dir"]}:
                    continue
                found.add(".".join((name, *relative)))
        found.add(name)
    assert found - listed == set(), "folders missing from [tool.setuptools] packages"
    assert all(_folder_of(package).is_dir() for package in listed)


def test_the_repository_keeps_the_design_folders_at_its_top_level() -> None:
    for folder in ("producers", "consumers", "schemas", "deletion", "retention"):
        assert (ROOT / folder / "__init__.py").is_file()
        assert SETUPTOOLS["package-dir"][f"reclaim.{folder}"] == folder
    assert (ROOT / "docker-compose.yml").is_file() and (ROOT / "pyproject.toml").is_file()


def test_the_public_names_are_the_documented_ones() -> None:
    assert reclaim.__all__ == sorted(reclaim._MODULES)
    for name in reclaim.__all__:
        value = getattr(reclaim, name)
        assert value.__module__ == f"reclaim.{reclaim._MODULES[name]}", name
        assert value.__doc__, f"reclaim.{name} has no docstring"
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        reclaim.nothing_here  # noqa: B018


def test_importing_reclaim_and_its_worker_loads_no_optional_part() -> None:
    code = ("import sys, reclaim, reclaim.services.worker, reclaim.cli.main; reclaim.DeletionWorker; "
            "reclaim.S3ChunkStorage; reclaim.open_metadata_store; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {sorted(EXTRA_OF)!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd="/")
    assert done.stdout.strip() == "[]"


def test_a_missing_optional_part_is_one_line_naming_its_extra() -> None:
    exc = ModuleNotFoundError("No module named 'pyspark'", name="pyspark")
    assert extra_of(exc) == "spark"
    assert str(missing_extra(exc, "reclaim retention-job")) == (
        "reclaim retention-job needs the spark extra (pyspark is not installed): pip install 'reclaim[spark]'")
    assert missing_extra(ModuleNotFoundError("x", name="yaml"), "anything") is None
    assert set(EXTRA_OF.values()) <= set(PROJECT["optional-dependencies"])
    require("spark", "the retention job")  # installed here
    EXTRA_OF["reclaim_no_such_module"] = "spark"
    try:
        with pytest.raises(MissingExtraError, match=r"pip install 'reclaim\[spark\]'"):
            require("spark", "the retention job")
    finally:
        del EXTRA_OF["reclaim_no_such_module"]


def test_the_core_dependencies_hold_no_optional_part() -> None:
    core = " ".join(PROJECT["dependencies"]).lower()
    assert not any(module in core for module in ("pyspark", "pandas", "pyarrow", "psycopg", "moto"))
    assert PROJECT["requires-python"] == ">=3.11"
    assert all("==" not in requirement for requirements in (PROJECT["dependencies"],
               *PROJECT["optional-dependencies"].values()) for requirement in requirements), \
        "exact pins belong in constraints.txt"


@pytest.mark.slow
def test_the_wheel_holds_reclaim_and_nothing_else(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr and "deprecat" not in done.stderr.lower(), done.stderr
    (wheel,) = tmp_path.glob("reclaim-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/", 1)[0] for name in names} == {"reclaim", wheel.name.split("-py3")[0] + ".dist-info"}
    for folder in ("producers", "consumers", "schemas", "deletion", "retention", "storage", "segments", "security"):
        assert f"reclaim/{folder}/__init__.py" in names
    assert "reclaim/schemas/avro/ledger_deletion.avsc" in names or any(
        name.startswith("reclaim/schemas/avro/") and name.endswith(".avsc") for name in names)
    assert "reclaim/localstack/kafka/pom.xml" in names and "reclaim/py.typed" in names
    text = b"".join(zipfile.ZipFile(wheel).read(name) for name in names if name.endswith(".py"))
    # Only the local stack's own servers are fetched or built by the package (Kafka's jars with Maven,
    # fake-gcs-server with `go install`, Azurite with npm for `local up --tier2`); the test tooling stays out.
    for needle in (b"apt-get", b"netns", b"toxiproxy", b"devtools", b"promtool", b"minio_server"):
        assert needle not in text, needle

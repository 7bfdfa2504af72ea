"""pyright, and so Pylance, resolves every reclaim import of the repository through pyproject's
``[tool.pyright]`` (needs Node.js: pyright runs on it)."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path

import pytest

from devtools import importcheck
from tests.support.servers import server_unavailable

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def node() -> str:
    found = shutil.which("node")
    if found is None:
        server_unavailable("Node.js (pyright runs on it)", FileNotFoundError("no node on PATH"))
    return str(found)


def small_project(root: Path, pyright_table: str) -> None:
    """A package-dir layout like reclaim's: ``things/`` is ``reclaim.things``."""
    (root / "pyproject.toml").write_text(textwrap.dedent("""\
        [tool.setuptools.package-dir]
        "reclaim" = "reclaim"
        "reclaim.things" = "things"
        """) + pyright_table)
    for folder in ("reclaim", "things"):
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text("")
    (root / "things" / "kinds.py").write_text("KIND = 1\n")
    (root / "user.py").write_text("from reclaim.things.kinds import KIND\nfrom reclaim.things.kinds import SORT\n")


@pytest.mark.usefixtures("node")
def test_a_missing_name_is_reported_at_the_line_that_imports_it(tmp_path: Path) -> None:
    small_project(tmp_path, '[tool.pyright]\nextraPaths = [".package"]\n')
    assert importcheck.check(tmp_path) == [
        'user.py:2: from reclaim.things.kinds import SORT: "SORT" is unknown import symbol']


@pytest.mark.usefixtures("node")
def test_without_the_tree_in_pyrights_table_the_mapped_folders_are_not_found(tmp_path: Path) -> None:
    small_project(tmp_path, "")
    failures = importcheck.check(tmp_path)
    assert len(failures) == 2
    assert all('Import "reclaim.things.kinds" could not be resolved' in failure for failure in failures)


@pytest.mark.slow
@pytest.mark.usefixtures("node")
def test_every_reclaim_import_of_the_repository_resolves() -> None:
    assert importcheck.check() == []

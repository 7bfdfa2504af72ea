"""The package as editors see it: jedi resolves every ``reclaim.<folder>`` through ``.package/``, which
nothing at run time sees, and the import check gathers each reclaim import of a file."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jedi
import pytest

from devtools import importcheck, package_links
from tests.support.paths import REPO


def make_project(root: Path, package_dir: str) -> None:
    (root / "pyproject.toml").write_text(f"[tool.setuptools.package-dir]\n{package_dir}")
    for folder in ("reclaim", "things", "other"):
        (root / folder).mkdir()
        (root / folder / "__init__.py").write_text("")


def test_the_tree_links_reclaims_init_and_each_mapped_folder_relatively(tmp_path: Path) -> None:
    make_project(tmp_path, '"reclaim" = "reclaim"\n"reclaim.things" = "things"\n')
    (tmp_path / ".package" / "reclaim").mkdir(parents=True)
    (tmp_path / ".package" / "reclaim" / "gone").symlink_to(tmp_path / "other")  # stale: no longer mapped

    top = package_links.link_package(tmp_path) / "reclaim"
    again = package_links.link_package(tmp_path) / "reclaim"  # idempotent

    assert again == top
    assert sorted(entry.name for entry in top.iterdir()) == ["__init__.py", "things"]
    assert os.readlink(top / "things") == os.path.join("..", "..", "things")
    assert (top / "things").resolve() == (tmp_path / "things").resolve()
    assert (top / "__init__.py").resolve() == (tmp_path / "reclaim" / "__init__.py").resolve()


def test_a_mapping_below_a_sub_package_is_refused(tmp_path: Path) -> None:
    make_project(tmp_path, '"reclaim" = "reclaim"\n"reclaim.things.deep" = "other"\n')
    with pytest.raises(ValueError, match="reclaim.things.deep"):
        package_links.link_package(tmp_path)


def test_the_jedi_project_file_is_written_once_and_read_by_jedi(tmp_path: Path) -> None:
    written = package_links.write_jedi_project(tmp_path)
    assert written == tmp_path / ".jedi" / "project.json"
    assert package_links.write_jedi_project(tmp_path) is None  # a project file there is left as it is

    project = jedi.get_default_project(tmp_path)

    assert project.path == tmp_path
    assert project.added_sys_path == [str(tmp_path / ".package")]


@pytest.mark.parametrize("package", sorted(package_links.mapped_folders()))
def test_jedi_resolves_each_mapped_folder(package: str) -> None:
    """As an editor on jedi does (jedi-language-server, pylsp) with ``.package`` as its extra path."""
    tree = package_links.link_package()
    project = jedi.Project(REPO, added_sys_path=[str(tree)])
    script = jedi.Script(f"import reclaim.{package}\nreclaim.{package}\n", path=REPO / "tests" / "probe.py",
                         project=project)

    [module] = script.infer(2, len(f"reclaim.{package}") - 1)

    assert module.full_name == f"reclaim.{package}"
    folder = package_links.mapped_folders()[package]
    assert module.module_path is not None and module.module_path.resolve() == REPO / folder / "__init__.py"


def test_jedi_goes_from_a_name_to_its_module_and_reclaims_own_modules_still_resolve() -> None:
    tree = package_links.link_package()
    project = jedi.Project(REPO, added_sys_path=[str(tree)])
    code = "from reclaim.deletion.verify import judge\nfrom reclaim.cli import main\n"
    script = jedi.Script(code, path=REPO / "tests" / "probe.py", project=project)

    [verify] = script.goto(1, len("from reclaim.deletion.verify import j"), follow_imports=True)
    [cli_main] = script.goto(2, len("from reclaim.cli import m"), follow_imports=True)

    assert verify.module_path is not None and verify.module_path.resolve() == REPO / "deletion" / "verify.py"
    assert verify.type == "function"
    assert cli_main.module_path == REPO / "reclaim" / "cli" / "main.py"


def test_at_run_time_the_import_hook_alone_maps_the_folders(tmp_path: Path) -> None:
    """The tree is on no ``sys.path`` and the hint for jedi never runs: reclaim has its one folder, and a
    mapped package's files are the repository's, from any working directory."""
    package_links.link_package()
    program = "import reclaim, reclaim.deletion; print(reclaim.__path__); print(reclaim.deletion.__file__)"
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=tmp_path,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [repr([str(REPO / "reclaim")]), str(REPO / "deletion" / "__init__.py")]


def test_the_import_check_gathers_every_reclaim_import_of_a_file(tmp_path: Path) -> None:
    source = tmp_path / "user.py"
    source.write_text(textwrap.dedent("""\
        import os, reclaim.storage.base
        from reclaim.deletion import verify, mark as marking
        from . import sibling
        from reclaimer import nothing
        from reclaim.cli.main import *

        def later():
            import reclaim
        """))

    assert list(importcheck.reclaim_imports(source)) == [
        (1, "import reclaim.storage.base"),
        (2, "from reclaim.deletion import verify"),
        (2, "from reclaim.deletion import mark"),
        (5, "from reclaim.cli.main import *"),
        (8, "import reclaim"),
    ]

"""reclaim laid out as it installs, for editors and static tools: ``.package/reclaim``, of symbolic links.

pyproject's package-dir table maps the repository's design folders into one package (``deletion/`` is
``reclaim.deletion``). The editable install resolves them with setuptools' import hook, which tools that
read files instead of running Python never see: pyright (and Pylance, built on it) and jedi look for a
``reclaim/deletion/`` folder on their search path. ``make venv`` builds one for them here:

- ``.package/reclaim/__init__.py`` links to ``reclaim/__init__.py``, and ``.package/reclaim/<folder>`` to
  each mapped folder. Folders are linked whole, so a module added to one is found without a rebuild;
  ``reclaim/``'s own modules are found in ``reclaim/`` itself.
- pyproject's ``[tool.pyright]`` names the tree in ``extraPaths``, so pyright and Pylance need no setting.
- ``.jedi/project.json`` (jedi's project file, when there is none) adds it to jedi's path.

Nothing puts the tree on the interpreter's ``sys.path``: at run time the import hook alone maps the
folders, and ``reclaim.deletion.__file__`` stays ``deletion/__init__.py``.

    python -m devtools.package_links
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE_NAME = ".package"


def mapped_folders(root: Path = ROOT) -> dict[str, str]:
    """Each folder pyproject's package-dir maps under ``reclaim`` (not ``reclaim/`` itself), by its name in
    the package: ``{"deletion": "deletion", ...}``."""
    table: dict[str, str] = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    folders = {}
    for name, folder in table.items():
        if name == "reclaim":
            continue
        child = name.removeprefix("reclaim.")
        if "." in child:  # a link inside a linked folder would write into the repository
            raise ValueError(f"package-dir maps {name}, below a sub-package; only reclaim.<name> is linked")
        folders[child] = folder
    return folders


def link_package(root: Path = ROOT) -> Path:
    """``root/.package``, its links made or corrected and stale ones removed; returns it.

    Links are relative (``.package/reclaim/deletion`` is ``../../deletion``), so a moved checkout keeps
    them; each is replaced in one rename, so a tool reading the tree meanwhile never finds it missing.
    """
    top = root / TREE_NAME / "reclaim"
    top.mkdir(parents=True, exist_ok=True)
    wanted = {"__init__.py": Path("..", "..", "reclaim", "__init__.py")}
    wanted |= {child: Path("..", "..", folder) for child, folder in mapped_folders(root).items()}
    for entry in top.iterdir():
        if entry.name not in wanted and entry.is_symlink():
            entry.unlink()
    for name, target in wanted.items():
        link = top / name
        if link.is_symlink() and Path(os.readlink(link)) == target:
            continue
        partial = top / f".{name}.{os.getpid()}"
        partial.unlink(missing_ok=True)
        partial.symlink_to(target, target_is_directory=not name.endswith(".py"))
        partial.replace(link)
    return root / TREE_NAME


def write_jedi_project(root: Path = ROOT) -> Path | None:
    """``root/.jedi/project.json`` adding the tree to jedi's path, when the checkout has no such file;
    returns it, or None where a project file of the developer's own is left as it is."""
    path = root / ".jedi" / "project.json"
    if path.exists():
        return None
    path.parent.mkdir(exist_ok=True)
    # jedi's own format (jedi.Project.save): version 1, then the Project's arguments.
    project = {"path": str(root), "sys_path": None, "added_sys_path": [str(root / TREE_NAME)],
               "smart_sys_path": True}
    path.write_text(json.dumps([1, project]) + "\n")
    return path


def main() -> int:
    tree = link_package()
    jedi_project = write_jedi_project()
    print(f"{tree.relative_to(ROOT)}/reclaim: links for pyright, Pylance and jedi"
          + (f"; {jedi_project.relative_to(ROOT)} written" if jedi_project else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

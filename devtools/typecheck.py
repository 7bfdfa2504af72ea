"""Type-checks the ``reclaim`` package as it is installed: mypy over a tree of links laid out like the wheel.

The repository keeps reclaim's design folders at its top level (``storage/``) and pyproject maps them into
the package (``reclaim.storage``). mypy names a module by its folders, so it is given a tree that has that
layout: ``.typecheck/reclaim/<name>`` holds the files of each folder the package-dir table maps, and
``reclaim/``'s own. Errors are printed with the repository's own paths.

    python -m devtools.typecheck [mypy arguments]
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".typecheck"


def link_tree() -> Path:
    """``.typecheck/reclaim``, rebuilt from pyproject's package-dir table; returns it.

    Files are hard links (a copy where the file system has none): mypy resolves a symbolic link to its
    target and would name the module by the target's folders again.
    """
    package_dir: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-dir"]
    shutil.rmtree(TREE, ignore_errors=True)
    top = TREE / "reclaim"
    for name, folder in package_dir.items():
        source = ROOT / folder
        target = top / name.removeprefix("reclaim").lstrip(".").replace(".", os.sep)
        for path in source.rglob("*"):
            if path.suffix not in (".py", ".typed") or "__pycache__" in path.parts:
                continue
            if name == "reclaim" and path.relative_to(source).parts[0] in _mapped_elsewhere(package_dir):
                continue
            copy = target / path.relative_to(source)
            copy.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, copy)
            except OSError:
                shutil.copy2(path, copy)
    return top


def _mapped_elsewhere(package_dir: dict[str, str]) -> set[str]:
    return {name.removeprefix("reclaim.") for name in package_dir if name != "reclaim"}


def main(argv: list[str]) -> int:
    top = link_tree()
    done = subprocess.run([sys.executable, "-m", "mypy", *argv, str(top.relative_to(ROOT))], cwd=ROOT,
                          capture_output=True, text=True)
    own = {entry.name for entry in (ROOT / "reclaim").iterdir()}
    for line in (done.stdout + done.stderr).splitlines():
        print(_repository_path(line, own))
    return done.returncode


def _repository_path(line: str, own: set[str]) -> str:
    """``.typecheck/reclaim/storage/base.py:3: error`` as ``storage/base.py:3: error``; the entries of
    ``reclaim/`` itself keep their ``reclaim/`` prefix."""
    prefix = f"{TREE.name}{os.sep}reclaim{os.sep}"
    if not line.startswith(prefix):
        return line
    rest = line.removeprefix(prefix)
    head = rest.split(os.sep, 1)[0].split(":", 1)[0]
    return f"reclaim{os.sep}{rest}" if head in own else rest


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

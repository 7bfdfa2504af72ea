"""Every ``reclaim`` import in the repository, resolved by pyright as Pylance resolves it in an editor.

The folders pyproject's package-dir maps into ``reclaim`` reach pyright through ``.package/``
(:mod:`devtools.package_links`, named by ``extraPaths`` in pyproject's ``[tool.pyright]``). This check
gathers each distinct ``import reclaim…`` and ``from reclaim… import name`` of the repository's Python
files into one file, has pyright check that file with the project's configuration, and prints each
failure at the lines that import it: a module pyright cannot find, or a name the module does not have.
Checking the statements rather than every file keeps it to seconds: pyright reads the modules they
import but checks none of them.

    python -m devtools.importcheck
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from devtools.package_links import ROOT, TREE_NAME, link_package

#: Folders no import is gathered from: build output, and hidden ones (virtual environments, caches, the tree).
SKIPPED = {"build", "dist", "node_modules", "__pycache__"}
#: What the file of statements asks of pyright, whatever pyproject's table says of other rules.
HEADER = "# pyright: basic, reportMissingImports=error, reportAttributeAccessIssue=error\n"


def python_files(root: Path = ROOT) -> Iterator[Path]:
    for folder, subfolders, files in os.walk(root):
        subfolders[:] = sorted(name for name in subfolders if name not in SKIPPED and not name.startswith("."))
        yield from (Path(folder, name) for name in sorted(files) if name.endswith(".py"))


def reclaim_imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, statement) for each reclaim module or name ``path`` imports, one statement each, anywhere in
    the file (also in functions and ``if TYPE_CHECKING:`` blocks)."""
    for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _is_reclaim(alias.name):
                    yield node.lineno, f"import {alias.name}"
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_reclaim(node.module or ""):
            for alias in node.names:
                yield node.lineno, f"from {node.module} import {alias.name}"


def _is_reclaim(module: str) -> bool:
    return module == "reclaim" or module.startswith("reclaim.")


def gather(root: Path = ROOT) -> dict[str, list[str]]:
    """Each distinct statement, with the ``path:line`` places that hold it."""
    places: dict[str, list[str]] = {}
    for path in python_files(root):
        for line, statement in reclaim_imports(path):
            places.setdefault(statement, []).append(f"{path.relative_to(root)}:{line}")
    return places


def check(root: Path = ROOT, python: str = sys.executable) -> list[str]:
    """One line for each statement pyright cannot resolve, with the places that hold it; none when all do.

    Raises :class:`RuntimeError` when pyright itself fails (no Node.js, a broken configuration).
    """
    link_package(root)
    places = gather(root)
    statements = sorted(places)
    # Each import binds a name of its own, so that no two statements shadow each other.
    lines = [_aliased(statement, number) for number, statement in enumerate(statements)]
    with tempfile.TemporaryDirectory(prefix="reclaim-importcheck-") as scratch:
        probe = Path(scratch, "reclaim_imports.py")
        probe.write_text(HEADER + "".join(f"{line}\n" for line in lines))
        done = subprocess.run(
            [python, "-m", "pyright", "--outputjson", "--pythonpath", python, "--project", str(root), str(probe)],
            capture_output=True, text=True, cwd=root, env={**os.environ, "PYRIGHT_PYTHON_IGNORE_WARNINGS": "1"})
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"pyright failed (exit {done.returncode}): {(done.stderr or done.stdout)[-2000:]}") from None
    failures = []
    for diagnostic in report["generalDiagnostics"]:
        if diagnostic["severity"] != "error":
            continue
        index = diagnostic["range"]["start"]["line"] - HEADER.count("\n")
        statement = statements[index] if 0 <= index < len(statements) else "?"
        where = ", ".join(places.get(statement, ["?"]))
        failures.append(f"{where}: {statement}: {diagnostic['message'].splitlines()[0]}")
    return failures


def _aliased(statement: str, number: int) -> str:
    return f"{statement} as _{number}" if not statement.endswith(" import *") else statement


def main() -> int:
    try:
        failures = check()
    except (RuntimeError, OSError) as exc:
        print(f"importcheck: {exc}", file=sys.stderr)
        return 2
    for failure in failures:
        print(failure)
    if failures:
        print(f"{len(failures)} reclaim import(s) pyright cannot resolve; is {TREE_NAME}/ built and named in "
              "pyproject's [tool.pyright] extraPaths?", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

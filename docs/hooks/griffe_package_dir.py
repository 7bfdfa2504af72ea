"""griffe extension: finds the packages that setuptools' ``package-dir`` maps into ``reclaim`` from other folders.

pyproject.toml maps the repository's design folders into the one import namespace (``storage/`` is
``reclaim.storage``). Static analysis from the repository finds ``reclaim/`` alone, so without this the
API page could not name anything in ``reclaim.storage``, ``reclaim.deletion`` and the rest. When a
package is loaded, this reads ``[tool.setuptools.package-dir]`` from the pyproject.toml beside it and
loads each folder mapped under the package as its sub-package, by reading the source (nothing is
imported). Then every name in the package's ``__all__`` must lead to an object: mkdocstrings leaves out
an export it cannot resolve without a word, so this warns (and ``--strict`` fails) instead.

reclaim's docstrings are numpydoc with Sphinx roles (``:class:`ReclaimError```), which Markdown shows
as they are written; the extension turns each role into inline code of the name.
"""

from __future__ import annotations

import logging
import re
import tomllib
from pathlib import Path
from typing import Any

import griffe

# Under mkdocs' logger, so that `mkdocs build --strict` fails on a warning of this extension.
logger = logging.getLogger("mkdocs.plugins.reclaim.package_dir")

# :class:`Name`, :py:func:`~pkg.mod.name` and the like; "~" shows only the last part, as Sphinx does.
_SPHINX_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj|const):`(~?)([^`]+)`")


def plain_roles(text: str) -> str:
    """``text`` with each Sphinx cross-reference role written as inline code of its target."""
    return _SPHINX_ROLE.sub(lambda m: f"`{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}`", text)


def package_dirs(pyproject: Path) -> dict[str, Path]:
    """``[tool.setuptools.package-dir]`` of a pyproject.toml, as module name -> absolute folder."""
    with pyproject.open("rb") as file:
        table = tomllib.load(file).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {name: (pyproject.parent / folder).resolve() for name, folder in table.items() if name}


def _pyproject_of(pkg: griffe.Module) -> Path | None:
    filepath = pkg.filepath
    if not isinstance(filepath, Path):
        return None
    for folder in filepath.parents:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


class PackageDirExtension(griffe.Extension):
    """Loads ``reclaim.<name>`` from the folder pyproject's ``package-dir`` gives it."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = plain_roles(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        # griffe fires on_object for a package's members, not for the package itself.
        self.on_object(obj=pkg, loader=loader)
        pyproject = _pyproject_of(pkg)
        if pyproject is None:
            return
        prefix = pkg.path + "."
        mapped = {name: path for name, path in package_dirs(pyproject).items() if name.startswith(prefix)}
        # Parents before children, so that "reclaim.a.b" finds "reclaim.a" already in place.
        for name in sorted(mapped, key=lambda n: n.count(".")):
            parent_path, _, short = name.rpartition(".")
            parent = loader.modules_collection.get_member(parent_path)
            if short in parent.members and parent.members[short].is_module:
                continue
            # The module is loaded under its parent, so its relative imports resolve to reclaim.<name>.
            # griffe has no public call that loads a folder under a given parent module.
            module = loader._load_module(short, mapped[name], parent=parent)
            parent.set_member(short, module)
        if mapped:
            self._check_exports(pkg)

    @staticmethod
    def _check_exports(pkg: griffe.Module) -> None:
        for name in pkg.exports or ():
            if not isinstance(name, str):  # `__all__ = [*other.__all__]`: griffe expands those itself
                continue
            member = pkg.members.get(name)
            if member is None:
                logger.warning("%s.__all__ names %r, which %s does not define or import", pkg.path, name, pkg.path)
                continue
            if member.is_alias:
                try:
                    member.final_target  # noqa: B018 - resolving is the check
                except griffe.AliasResolutionError:
                    logger.warning("%s.__all__ names %r, whose import %s cannot be found",
                                   pkg.path, name, member.target_path)

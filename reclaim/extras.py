"""The optional parts of reclaim and the extra that installs each: a missing one is one line naming it.

The worker and the operator commands need none of them. ``reclaim[spark]`` brings the retention job
(PySpark with pandas and Arrow), ``reclaim[postgres]`` the PostgreSQL metadata store, ``reclaim[local]``
the local stack's S3 endpoint; ``reclaim[all]`` all three.
"""

from __future__ import annotations

import importlib.util

from reclaim.errors import ReclaimError

#: The top-level module of each optional dependency, and the extra that installs it.
EXTRA_OF = {
    "pyspark": "spark", "pandas": "spark", "numpy": "spark", "pyarrow": "spark",
    "psycopg": "postgres", "psycopg_pool": "postgres",
    "moto": "local", "flask": "local", "werkzeug": "local",
}


class MissingExtraError(ReclaimError):
    """A part of reclaim was asked for whose optional dependencies are not installed."""


def extra_of(exc: ModuleNotFoundError) -> str | None:
    """The extra that installs the module ``exc`` could not find, or None when it is not an optional one."""
    top = (exc.name or "").split(".", 1)[0]
    return EXTRA_OF.get(top)


def missing_extra(exc: ModuleNotFoundError, what: str) -> MissingExtraError | None:
    """``exc`` as one line naming the extra to install, or None when the module is not an optional one."""
    extra = extra_of(exc)
    if extra is None:
        return None
    return MissingExtraError(f"{what} needs the {extra} extra ({exc.name} is not installed): "
                             f"pip install 'reclaim[{extra}]'")


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` unless every module of ``extra`` can be imported."""
    for module, needed_by in EXTRA_OF.items():
        if needed_by == extra and importlib.util.find_spec(module) is None:
            raise MissingExtraError(f"{what} needs the {extra} extra ({module} is not installed): "
                                    f"pip install 'reclaim[{extra}]'")

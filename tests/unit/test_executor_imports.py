"""The modules Spark executors import do not need orjson, which their Python is not asked to have.

The executors' Python holds the retention job's and the audit's requirements (``EXECUTOR_REQUIREMENTS``,
``AUDIT_REQUIREMENTS``), not reclaim's whole install; orjson (the SQLite store's row parsing) is imported
where it is used, so the storage and segments modules the audit's code reaches import without it.
Checked in a fresh interpreter in which ``import orjson`` fails.
"""

from __future__ import annotations

import subprocess
import sys

from reclaim.retention.spark_session import EXECUTOR_REQUIREMENTS
from reclaim.tools.audit_spark import AUDIT_REQUIREMENTS

PROGRAM = """
import importlib, pkgutil, sys
sys.modules["orjson"] = None  # "import orjson" now raises ImportError
import reclaim.tools.audit_spark
import reclaim.retention
for module in pkgutil.iter_modules(reclaim.retention.__path__, "reclaim.retention."):
    importlib.import_module(module.name)
"""


def test_the_executors_modules_import_without_orjson() -> None:
    assert not any(requirement.startswith("orjson") for requirement in (*EXECUTOR_REQUIREMENTS, *AUDIT_REQUIREMENTS))
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]

"""Where things are: the repository root, for tests that read its files (Makefile, deploy/, Dockerfile)."""

from __future__ import annotations

from pathlib import Path

#: The repository root (this file is ``tests/support/paths.py``).
REPO = Path(__file__).resolve().parents[2]

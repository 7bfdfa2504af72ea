"""Benchmark figures as data: what each run prints, also appended to ``benchmarks/results/<date>-<commit>.json``.

A benchmark's ``main()`` collects its figures in a :class:`Figures` while it prints them (each printed
median, rate, ratio and peak under a name that says its unit) and ends with :func:`record`, which appends
one run to the file of today's date (UTC) and the checked-out commit::

    {"date": "2026-11-26", "commit": "25fbaa9-dirty", "machine": "Linux 6.8.0 x86_64, 2 cores, Python 3.11.9",
     "runs": [{"benchmark": "audit_memory", "args": {"sizes": [10000]}, "figures": {...},
               "started": "2026-11-26T07:40:12+00:00", "seconds": 41.2}, ...]}

Every benchmark run on the same day at the same commit lands in the same file, so one ``make bench`` is
one file. ``RECLAIM_BENCH_RESULTS`` names another directory; ``RECLAIM_BENCH_RESULTS_FILE`` names the
file itself (``make bench`` pins it before its first benchmark, so a run that crosses midnight, or a
checkout edited meanwhile, still writes one file). ``python -m benchmarks.results path`` prints the file
a run would write now.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

__all__ = ["Figure", "Figures", "machine", "record", "results_file"]

Figure = int | float | str
"""One figure: a number (its unit in its name) or a string (a list of rounds, a verdict)."""

ROOT = Path(__file__).resolve().parent.parent
DIR_ENV = "RECLAIM_BENCH_RESULTS"
FILE_ENV = "RECLAIM_BENCH_RESULTS_FILE"


# --- collecting and printing ----------------------------------------------------------------------------------


def rounds_text(values: Sequence[float], digits: int) -> str:
    """Every round's value, for a line that prints the median: empty for a single round."""
    return f"  (rounds: {', '.join(f'{v:.{digits}f}' for v in values)})" if len(values) > 1 else ""


def verdict(met: bool) -> str:
    return "met" if met else "not met"


class Figures:
    """The figures of one benchmark run, by name, in the order they were printed.

    A name says what was measured and its unit: ``s3_moto_5000_pipeline_median_s``,
    ``s3_moto_5000_pipeline_over_raw_ratio``, ``worker_peak_rss_100000_mb``.
    """

    def __init__(self) -> None:
        self.values: dict[str, Figure] = {}

    def add(self, name: str, value: Figure) -> Figure:
        """Record ``value`` under ``name`` (a float rounded to 6 significant digits); returns it."""
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise TypeError(f"figure {name!r} must be a number or a string, got {value!r}")
        if isinstance(value, float):
            if not math.isfinite(value):
                raise ValueError(f"figure {name!r} is {value}, not a number JSON can hold")
            value = float(f"{value:.6g}")
        if name in self.values:
            raise ValueError(f"figure {name!r} recorded twice")
        self.values[name] = value
        return value

    def rate(self, name: str, label: str, count: int, seconds: float | Sequence[float], *,
             unit: str = "objects", width: int = 48) -> float:
        """Print ``count`` items in ``seconds`` (the median of the rounds, listed too) and record the
        median as ``<name>_median_s``, the rate as ``<name>_<unit>_per_s`` and the rounds as
        ``<name>_rounds_s``; returns the rate."""
        runs = [seconds] if isinstance(seconds, int | float) else list(seconds)
        middle = statistics.median(runs)
        print(f"  {label:{width}} {middle:8.3f} s  {count / middle:10.0f} {unit}/s{rounds_text(runs, 3)}")
        self.add(f"{name}_median_s", middle)
        self.add(f"{name}_{unit}_per_s", count / middle)
        if len(runs) > 1:
            self.add(f"{name}_rounds_s", ", ".join(f"{s:.3f}" for s in runs))
        return count / middle

    def ratio(self, name: str, label: str, ours: Sequence[float], theirs: Sequence[float],
              target: float | None = None, note: str = "") -> float:
        """Print the median of the rounds' ratios of rates, ``theirs`` seconds over ``ours`` seconds, and
        record it as ``<name>_ratio`` (with ``<name>_rounds`` and ``<name>_target`` when there are);
        returns it."""
        per_round = [b / a for a, b in zip(ours, theirs, strict=True)]
        middle = statistics.median(per_round)
        goal = f"   (target >= {target:g}x: {verdict(middle >= target)})" if target is not None else note
        print(f"  ratio {label:32} {middle:6.2f}x{goal}{rounds_text(per_round, 2)}")
        self.add(f"{name}_ratio", middle)
        if len(per_round) > 1:
            self.add(f"{name}_rounds", ", ".join(f"{r:.2f}" for r in per_round))
        if target is not None:
            self.add(f"{name}_target", target)
        return middle

    def spread(self, name: str, values: Sequence[float], unit: str) -> tuple[float, float, float]:
        """Record the lowest, the highest and the growth from the first to the highest of ``values``
        (peaks over growing sizes) as ``<name>_min_<unit>``, ``_max_<unit>``, ``_growth_<unit>``."""
        low, high, growth = min(values), max(values), max(values) - values[0]
        self.add(f"{name}_min_{unit}", low)
        self.add(f"{name}_max_{unit}", high)
        self.add(f"{name}_growth_{unit}", growth)
        return low, high, growth


# --- the results file -----------------------------------------------------------------------------------------


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def commit() -> str:
    """The checked-out commit, short, with ``-dirty`` when the work tree has changes; outside git, the one a
    ``REVISION`` file at the tree's root names (a tree unpacked by :mod:`benchmarks.offline_bundle`), else
    ``unknown``."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        # Untracked files do not count: the results file itself is one until it is committed.
        return f"{head}-dirty" if _git("status", "--porcelain", "--untracked-files=no") else head
    except (OSError, subprocess.CalledProcessError):
        revision = ROOT / "REVISION"
        if revision.is_file():
            return revision.read_text(encoding="utf-8").strip() or "unknown"
        return "unknown"


def machine() -> str:
    """Where the figures were measured: the OS, the CPU count and model, the Python version."""
    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    cpus = f"{os.cpu_count()} cores" + (f" ({model})" if model else "")
    return f"{platform.system()} {platform.release()} {platform.machine()}, {cpus}, Python {platform.python_version()}"


def results_file(now: datetime | None = None) -> Path:
    """The file this run appends to: ``$RECLAIM_BENCH_RESULTS_FILE``, else ``<date>-<commit>.json`` in
    ``$RECLAIM_BENCH_RESULTS`` or ``benchmarks/results/``."""
    pinned = os.environ.get(FILE_ENV)
    if pinned:
        return Path(pinned)
    directory = Path(os.environ.get(DIR_ENV) or ROOT / "benchmarks" / "results")
    day = (now or datetime.now(UTC)).strftime("%Y-%m-%d")
    return directory / f"{day}-{commit()}.json"


def _jsonable(value: object) -> object:
    """An argument as JSON holds it: lists and plain values as they are, anything else (a path) as text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(item) for item in value]
    return str(value)


def _header(path: Path) -> dict[str, Any]:
    """A new file's fields, its date and commit read back from its name when it follows the pattern."""
    stem = path.stem
    if len(stem) > 11 and stem[10] == "-" and stem[:4].isdigit():
        day, head = stem[:10], stem[11:]
    else:
        day, head = datetime.now(UTC).strftime("%Y-%m-%d"), commit()
    return {"date": day, "commit": head, "machine": machine(), "runs": []}


def record(benchmark: str, args: Mapping[str, object], figures: Figures | Mapping[str, Figure],
           started: float) -> Path:
    """Append one run of ``benchmark`` (``args`` it ran with, its ``figures``, ``started`` = ``time.time()``
    when it began) to the results file, atomically; returns the file's path."""
    values = figures.values if isinstance(figures, Figures) else dict(figures)
    path = results_file(datetime.fromtimestamp(started, UTC))
    path.parent.mkdir(parents=True, exist_ok=True)
    document = json.loads(path.read_text(encoding="utf-8")) if path.exists() else _header(path)
    runs = document.get("runs")
    if not isinstance(runs, list):
        raise ValueError(f"{path} is not a results file: it has no list of runs")
    runs.append({
        "benchmark": benchmark,
        "args": {name: _jsonable(value) for name, value in args.items()},
        "figures": values,
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "seconds": round(time.time() - started, 1),
    })
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                     delete=False) as temp:
        json.dump(document, temp, indent=2, allow_nan=False)
        temp.write("\n")
    os.chmod(temp.name, 0o644)  # a temporary file is the owner's alone; a results file is not
    os.replace(temp.name, path)
    print(f"figures recorded in {path}")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.results path``: the results file a run would write now."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["path"], help="print the results file a run would write now")
    parser.parse_args(argv)
    print(results_file())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

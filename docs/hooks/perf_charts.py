"""mkdocs hook: draws the performance page's charts from the recorded benchmark runs at build time.

A page asks for a chart with a marker, ``<!-- chart: NAME -->``; the hook replaces it with a mermaid
``xychart-beta`` diagram, one line naming what its bars and its line show, and a table of the same
figures with the results file each one comes from. Every figure is read from ``benchmarks/results/*.json``
when the site is built (the files ``benchmarks/results.py`` writes), so a new ``make bench`` redraws the
charts. A chart whose figures no file holds yet says so in place of the diagram; a marker that names no
chart stops the build.

The charts, by name (:data:`CHARTS`):

``throughput``
    the deletion pipeline's rate as a ratio of raw deletes, per binding, from the latest
    ``deletion_throughput`` run that has each binding (``s3_<server>_<n>_pipeline_over_raw_ratio``,
    ``fs_<n>_pipeline_over_raw_unlink_ratio``, and their ``_target``);
``worker-cpu``
    one worker's marginal CPU per record on moto, 2,000→10,000 records, in every ``worker_cpu`` run that
    measured the most often measured earlier worker beside it (``[before_]moto_2000_10000_marginal_us_per_record``);
``mark-cpu``
    phase 1's marginal CPU per record, 5,000→20,000 chunks, in every ``mark_cpu`` run
    (``mark_<unsigned|signed>_total_5000_20000_marginal_cpu_us_per_record``);
``processes``
    the steady drain rate by number of worker processes on one host, from the latest ``worker_scaling`` run
    (``scaling_<binding>_<n>_supervisor_<k>p_steady_median_objects_per_s`` and ``..._raw_objects_per_s``);
``memory``
    the worker's peak RSS by backlog, from the latest ``worker_memory`` run (``worker_<n>_peak_rss_mb`` and
    ``worker_peak_rss_ceiling_mb``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = re.compile(r"<!-- chart: ([a-z0-9-]+) -->")
RESULTS = Path("benchmarks") / "results"
BINDING_NAMES = {"moto": "moto", "minio": "MinIO", "fs": "filesystem"}
# The bars in the theme's indigo, the line in a contrasting orange: the theme's own palette draws pale bars
# that a line over them barely stands out from.
PALETTE = "#5c6bc0, #f57c00"
HEIGHT = 360

Figure = int | float | str


@dataclass(frozen=True)
class Recorded:
    """One benchmark run as its results file holds it."""

    file: str
    date: str
    commit: str
    machine: str
    benchmark: str
    args: Mapping[str, Any]
    figures: Mapping[str, Figure]
    started: str

    @property
    def label(self) -> str:
        """The run on a chart's axis: month-day and commit, ``11-26 0cd34ce``."""
        return f"{self.date[5:]} {self.commit.removesuffix('-dirty')}"

    def number(self, name: str) -> float | None:
        value = self.figures.get(name)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Series:
    kind: Literal["bar", "line"]
    name: str
    values: tuple[float, ...]


@dataclass(frozen=True)
class Chart:
    """A chart and its table: one category a row, one series a column, and the file each row comes from."""

    title: str
    axis: str
    y_label: str
    categories: tuple[str, ...]
    series: tuple[Series, ...]
    sources: tuple[str, ...]
    floor_one: bool = False  # a ratio's axis reaches 1.0, where reclaim would match its reference
    horizontal: bool = False  # a history: one row a run, its label in full


# --- reading the files ----------------------------------------------------------------------------------------


def parse(file: str, document: object) -> list[Recorded]:
    """The runs of one results file, its shape checked."""
    if not isinstance(document, dict) or not isinstance(document.get("runs"), list):
        raise PluginError(f"perf_charts: {file}: expected an object with a list of runs")
    header = [document.get(key) for key in ("date", "commit", "machine")]
    if not all(isinstance(value, str) and value for value in header):
        raise PluginError(f"perf_charts: {file}: 'date', 'commit' and 'machine' must be non-empty strings")
    date, commit, machine = (str(value) for value in header)
    runs = []
    for run in document["runs"]:
        if not isinstance(run, dict) or not isinstance(run.get("benchmark"), str) \
                or not isinstance(run.get("figures"), dict):
            raise PluginError(f"perf_charts: {file}: every run needs a 'benchmark' and an object of 'figures'")
        args = run.get("args")
        args = args if isinstance(args, dict) else {}
        runs.append(Recorded(file, date, commit, machine, run["benchmark"], args, run["figures"],
                             str(run.get("started") or date)))
    return runs


def load(results: Path) -> list[Recorded]:
    """Every run of every file in ``results``, oldest first (by when each run started)."""
    runs: list[Recorded] = []
    for path in sorted(results.glob("*.json")):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise PluginError(f"perf_charts: cannot read {path}: {exc}") from exc
        runs += parse(path.name, document)
    return sorted(runs, key=lambda run: (run.started, run.file))


def _of(runs: Sequence[Recorded], benchmark: str) -> list[Recorded]:
    return [run for run in runs if run.benchmark == benchmark]


def _cores(machine: str) -> str:
    found = re.search(r"(\d+) cores", machine)
    return found.group(1) if found else "?"


def _labels(runs: Sequence[Recorded]) -> tuple[str, ...]:
    """Each run on a history's axis: its date and commit, the machine's cores where they are not the most
    common ones, and a count where one file holds several runs."""
    usual = Counter(_cores(run.machine) for run in runs).most_common(1)[0][0] if runs else ""
    seen: Counter[str] = Counter()
    labels = []
    for run in runs:
        label = run.label + ("" if _cores(run.machine) == usual else f", {_cores(run.machine)} cores")
        seen[label] += 1
        labels.append(label if seen[label] == 1 else f"{label} #{seen[label]}")
    return tuple(labels)


# --- the charts -----------------------------------------------------------------------------------------------


def throughput(runs: Sequence[Recorded]) -> Chart | None:
    """Per binding, the latest run's pipeline / raw ratio at its largest object count, with its target."""
    patterns = {"moto": r"s3_moto_(\d+)_pipeline_over_raw", "minio": r"s3_minio_(\d+)_pipeline_over_raw",
                "fs": r"fs_(\d+)_pipeline_over_raw_unlink"}
    categories, ratios, targets, sources = [], [], [], []
    for binding, pattern in patterns.items():
        for run in reversed(_of(runs, "deletion_throughput")):
            sizes = [int(m.group(1)) for name in run.figures if (m := re.fullmatch(pattern + "_ratio", name))]
            if not sizes:
                continue
            stem = pattern.replace(r"(\d+)", str(max(sizes)))
            ratio, target = run.number(f"{stem}_ratio"), run.number(f"{stem}_target")
            if ratio is None:
                continue
            categories.append(f"{BINDING_NAMES[binding]}, {max(sizes):,} objects")
            ratios.append(ratio)
            targets.append(target)
            sources.append(run.file)
            break
    if not categories:
        return None
    series = [Series("bar", "reclaim / raw", tuple(ratios))]
    if all(target is not None for target in targets):
        series.append(Series("line", "target", tuple(t for t in targets if t is not None)))
    return Chart("Deletion rate against raw deletes, per binding", "binding", "reclaim / raw (×)",
                 tuple(categories), tuple(series), tuple(sources), floor_one=True)


def _before_commit(run: Recorded) -> str | None:
    """The earlier worker a ``worker_cpu`` run measured beside this tree, by commit."""
    named = run.args.get("before_commit")
    if isinstance(named, str) and named:
        return named
    tree = run.args.get("before_tree")
    found = re.search(r"before-([0-9a-f]{7,40})$", tree.rstrip("/")) if isinstance(tree, str) else None
    return found.group(1) if found else None


def worker_cpu(runs: Sequence[Recorded], binding: str = "moto", pair: tuple[int, int] = (2000, 10000)) -> Chart | None:
    """This tree's marginal CPU per record beside the earlier worker measured most often, run by run."""
    name = f"{binding}_{pair[0]}_{pair[1]}_marginal_us_per_record"
    paired = [run for run in _of(runs, "worker_cpu")
              if run.number(name) is not None and run.number(f"before_{name}") is not None and _before_commit(run)]
    if not paired:
        return None
    reference = Counter(_before_commit(run) for run in paired).most_common(1)[0][0]
    chosen = [run for run in paired if _before_commit(run) == reference]
    return Chart(
        f"One worker's CPU per record, {BINDING_NAMES.get(binding, binding)}, {pair[0]:,}→{pair[1]:,} records",
        "run (date, commit)", "µs a record", _labels(chosen),
        (Series("bar", f"the worker of {reference}, same run", tuple(run.number(f"before_{name}") or 0.0
                                                                         for run in chosen)),
         Series("line", "the worker of the run's commit", tuple(run.number(name) or 0.0 for run in chosen))),
        tuple(run.file for run in chosen), horizontal=True)


def mark_cpu(runs: Sequence[Recorded], pair: tuple[int, int] = (5000, 20000)) -> Chart | None:
    """Phase 1's marginal CPU per record, signed and unsigned, run by run."""
    names = {kind: f"mark_{kind}_total_{pair[0]}_{pair[1]}_marginal_cpu_us_per_record"
             for kind in ("signed", "unsigned")}
    chosen = [run for run in _of(runs, "mark_cpu") if all(run.number(name) is not None for name in names.values())]
    if not chosen:
        return None
    return Chart(f"Phase 1's CPU per record, {pair[0]:,}→{pair[1]:,} chunks", "run (date, commit)",
                 "µs a record", _labels(chosen),
                 (Series("bar", "signed", tuple(run.number(names["signed"]) or 0.0 for run in chosen)),
                  Series("line", "unsigned", tuple(run.number(names["unsigned"]) or 0.0 for run in chosen))),
                 tuple(run.file for run in chosen), horizontal=True)


def processes(runs: Sequence[Recorded]) -> Chart | None:
    """The latest worker_scaling run: steady objects/s by number of processes, beside raw deletes."""
    for run in reversed(_of(runs, "worker_scaling")):
        steady = sorted((int(m.group(3)), m.group(1), m.group(2), value) for name in run.figures
                        if (m := re.fullmatch(r"scaling_(\w+?)_(\d+)_supervisor_(\d+)p_steady_median_objects_per_s",
                                              name)) and (value := run.number(name)) is not None)
        if not steady:
            continue
        binding, objects = steady[0][1], steady[0][2]
        steady = [row for row in steady if (row[1], row[2]) == (binding, objects)]
        raw = run.number(f"scaling_{binding}_{objects}_raw_objects_per_s")
        series = [Series("bar", "reclaim, steady rate", tuple(row[3] for row in steady))]
        if raw is not None:
            series.append(Series("line", "raw deletes, same rounds", tuple(raw for _ in steady)))
        return Chart(f"Drain rate by worker processes on one host, {BINDING_NAMES.get(binding, binding)}, "
                     f"{int(objects):,} objects, {_cores(run.machine)} cores", "processes", "objects/s",
                     tuple(f"{row[0]} process{'es' if row[0] > 1 else ''}" for row in steady), tuple(series),
                     tuple(run.file for _ in steady))
    return None


def memory(runs: Sequence[Recorded]) -> Chart | None:
    """The latest worker_memory run: peak RSS by backlog, beside the ceiling it is held to."""
    for run in reversed(_of(runs, "worker_memory")):
        peaks = sorted((int(m.group(1)), value) for name in run.figures
                       if (m := re.fullmatch(r"worker_(\d+)_peak_rss_mb", name))
                       and (value := run.number(name)) is not None)
        if not peaks:
            continue
        ceiling = run.number("worker_peak_rss_ceiling_mb")
        series = [Series("bar", "worker's peak RSS", tuple(peak for _, peak in peaks))]
        if ceiling is not None:
            series.append(Series("line", "ceiling", tuple(ceiling for _ in peaks)))
        return Chart("Worker memory by backlog", "backlog", "peak RSS (MB)",
                     tuple(f"{size:,} records" for size, _ in peaks), tuple(series), tuple(run.file for _ in peaks))
    return None


CHARTS: dict[str, Callable[[Sequence[Recorded]], Chart | None]] = {
    "throughput": throughput, "worker-cpu": worker_cpu, "mark-cpu": mark_cpu, "processes": processes,
    "memory": memory,
}


# --- drawing --------------------------------------------------------------------------------------------------


def _number(value: float) -> str:
    """Three significant digits below 100 (0.451, 62.5), one decimal below 1000 (132.5), whole above."""
    if abs(value) < 100:
        return f"{value:.3g}"
    return f"{value:.1f}".removesuffix(".0") if abs(value) < 1000 else f"{value:.0f}"


def _cell(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else _number(value)


def _text(label: str) -> str:
    return label.replace('"', "'")


def mermaid(chart: Chart) -> str:
    """The chart as a fenced mermaid ``xychart-beta`` block."""
    top = max(value for series in chart.series for value in series.values)
    top = max(top, 1.0) if chart.floor_one else top
    height = max(HEIGHT, 120 + 36 * len(chart.categories)) if chart.horizontal else HEIGHT
    lines = ["```mermaid", "---", "config:", "  xyChart:", f"    height: {height}", "  themeVariables:",
             "    xyChart:", f'      plotColorPalette: "{PALETTE}"', "---",
             "xychart-beta horizontal" if chart.horizontal else "xychart-beta", f'    title "{_text(chart.title)}"',
             "    x-axis [" + ", ".join(f'"{_text(c)}"' for c in chart.categories) + "]",
             f'    y-axis "{_text(chart.y_label)}" 0 --> {_number(top * 1.15)}']
    lines += [f"    {series.kind} [" + ", ".join(_number(v) for v in series.values) + "]" for series in chart.series]
    return "\n".join([*lines, "```"])


def legend(chart: Chart) -> str:
    """What the bars and the line show: mermaid's xychart draws no legend of its own."""
    text = "; ".join(f"{'bars' if s.kind == 'bar' else 'line'}: {s.name}" for s in chart.series) + "."
    return text[:1].upper() + text[1:]


def table(chart: Chart) -> str:
    rows = [f"| {chart.axis} | " + " | ".join(s.name for s in chart.series) + " | recorded in |",
            "|---|" + "---|" * len(chart.series) + "---|"]
    for index, category in enumerate(chart.categories):
        cells = " | ".join(_cell(s.values[index]) for s in chart.series)
        rows.append(f"| {category} | {cells} | `{RESULTS / chart.sources[index]}` |")
    return "\n".join(rows)


def render(name: str, runs: Sequence[Recorded]) -> str:
    """The markdown a marker becomes: the diagram, its legend and its table, or why there is none."""
    if name not in CHARTS:
        raise PluginError(f"perf_charts: no chart is named {name!r}; the charts are {', '.join(CHARTS)}")
    chart = CHARTS[name](runs)
    if chart is None:
        return f"*No recorded run in `{RESULTS}` holds the figures of this chart yet.*"
    return "\n\n".join([mermaid(chart), legend(chart), table(chart)])


def on_page_markdown(markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    if not MARKER.search(markdown):
        return markdown
    results = Path(config.config_file_path).parent / RESULTS
    runs = load(results) if results.is_dir() else []
    return MARKER.sub(lambda match: render(match.group(1), runs), markdown)

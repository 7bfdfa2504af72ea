"""mkdocs hook: renders the recorded benchmark runs (``benchmarks/results/*.json``) into the page that holds the marker.

Each file is one ``make bench`` (``benchmarks/results.py`` writes it): a JSON object with ``date``,
``commit``, ``machine`` (a description) and ``runs``, each run an object with ``benchmark`` (its name),
``args`` (what it ran with) and ``figures`` (a flat object of name -> number or string). Runs are grouped
by benchmark, newest first. A file that does not have that shape stops the build with its name, rather
than showing a table that leaves figures out.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.livereload import LiveReloadServer
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = "<!-- benchmark-results -->"
RESULTS = Path("benchmarks") / "results"
NO_RUNS = "No recorded run is present yet: `make bench` records one in `benchmarks/results/`."


@dataclass(frozen=True)
class Run:
    path: Path
    date: str
    commit: str
    benchmark: str
    machine: str
    figures: dict[str, int | float | str]


def _results_dir(config: MkDocsConfig) -> Path:
    return Path(config.config_file_path).parent / RESULTS


def _text(document: dict[str, Any], key: str, path: Path) -> str:
    value = document.get(key)
    if not isinstance(value, str) or not value:
        raise PluginError(f"benchmarks: {path}: '{key}' must be a non-empty string, got {value!r}")
    return value


def load_runs(path: Path) -> list[Run]:
    """The runs of one file, its shape checked."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginError(f"benchmarks: cannot read {path}: {exc}") from exc
    if not isinstance(document, dict):
        raise PluginError(f"benchmarks: {path}: expected a JSON object")
    runs = document.get("runs")
    if not isinstance(runs, list) or not all(isinstance(run, dict) for run in runs):
        raise PluginError(f"benchmarks: {path}: 'runs' must be a list of objects")
    date, commit, machine = (_text(document, key, path) for key in ("date", "commit", "machine"))
    return [Run(path, date, commit, _text(run, "benchmark", path), machine, _figures(run, path)) for run in runs]


def _figures(run: dict[str, Any], path: Path) -> dict[str, int | float | str]:
    figures = run.get("figures")
    if not isinstance(figures, dict):
        raise PluginError(f"benchmarks: {path}: 'figures' must be an object of name -> number or string")
    for name, value in figures.items():
        # bool is an int in Python, but true/false is not a figure.
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise PluginError(f"benchmarks: {path}: figure '{name}' must be a number or a string, got {value!r}")
    return figures


def _cell(value: int | float | str) -> str:
    # repr gives a float's shortest exact form (0.33, not 0.33000000000000002).
    text = repr(value) if isinstance(value, float) else str(value)
    return html.escape(" ".join(text.split())).replace("|", "&#124;")


def render(runs: list[Run]) -> str:
    """Markdown for the runs: a section per benchmark, a table per run, newest first."""
    if not runs:
        return NO_RUNS
    by_benchmark: dict[str, list[Run]] = {}
    for run in runs:
        by_benchmark.setdefault(run.benchmark, []).append(run)
    parts = []
    for benchmark in sorted(by_benchmark):
        parts.append(f"### {_cell(benchmark)}")
        for run in sorted(by_benchmark[benchmark], key=lambda r: (r.date, r.path.name), reverse=True):
            parts.append(f"#### {_cell(run.date)}, commit {_cell(run.commit)}")
            parts.append(f"Machine: {_cell(run.machine)}. File: `{RESULTS / run.path.name}`.")
            rows = ["| figure | value |", "|---|---|"]
            rows += [f"| {_cell(name)} | {_cell(value)} |" for name, value in run.figures.items()]
            if not run.figures:
                rows.append("| (no figures) | |")
            parts.append("\n".join(rows))
    return "\n\n".join(parts)


def on_page_markdown(markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    if MARKER not in markdown:
        return markdown
    results = _results_dir(config)
    runs = [run for path in sorted(results.glob("*.json")) for run in load_runs(path)] if results.is_dir() else []
    return markdown.replace(MARKER, render(runs))


def on_serve(server: LiveReloadServer, /, *, config: MkDocsConfig, builder: Any) -> LiveReloadServer:
    results = _results_dir(config)
    if results.is_dir():
        server.watch(str(results))
    return server

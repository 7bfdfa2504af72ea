"""The performance page's charts: which recorded figures each chart draws, in which order, from which file."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from mkdocs.exceptions import PluginError

from tests.support.paths import REPO


def _load_hook() -> ModuleType:
    # mkdocs loads a hook by its path, not as a package; the test does the same.
    spec = importlib.util.spec_from_file_location("perf_charts", REPO / "docs" / "hooks" / "perf_charts.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


charts = _load_hook()


def results_file(stem: str, *runs: dict[str, Any], cores: int = 2) -> tuple[str, dict[str, Any]]:
    """A file's name and its document, its date and commit read off the name as the benchmarks write it."""
    return f"{stem}.json", {"date": stem[:10], "commit": stem[11:], "runs": list(runs),
                            "machine": f"Linux 6.8 x86_64, {cores} cores (AMD EPYC), Python 3.11"}


def run(benchmark: str, started: str, figures: dict[str, Any], **args: Any) -> dict[str, Any]:
    return {"benchmark": benchmark, "args": args, "figures": figures, "started": started, "seconds": 1.0}


def recorded(files: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    runs = [r for name, document in files for r in charts.parse(name, document)]
    return sorted(runs, key=lambda r: (r.started, r.file))


def throughput_files() -> list[tuple[str, dict[str, Any]]]:
    return [
        results_file("2026-11-26-aaaaaaa", run("deletion_throughput", "2026-11-26T08:00:00", {
            "s3_moto_5000_pipeline_over_raw_ratio": 0.33, "s3_moto_5000_pipeline_over_raw_target": 0.8,
            "fs_5000_pipeline_over_raw_unlink_ratio": 0.63, "fs_5000_pipeline_over_raw_unlink_target": 0.6})),
        results_file("2026-12-06-bbbbbbb-dirty", run(
            "deletion_throughput", "2026-12-06T08:00:00", {
                "s3_moto_5000_pipeline_over_raw_ratio": 0.45, "s3_moto_5000_pipeline_over_raw_target": 0.8,
                "s3_moto_5000_read_again_over_raw_ratio": 0.2})),
        results_file("2026-12-06-ccccccc", run("deletion_throughput", "2026-12-06T09:00:00", {
            "s3_minio_1000_pipeline_over_raw_ratio": 0.5, "s3_minio_1000_pipeline_over_raw_target": 0.9,
            "s3_minio_50000_pipeline_over_raw_ratio": 1.01, "s3_minio_50000_pipeline_over_raw_target": 0.9})),
    ]


def test_throughput_draws_each_bindings_latest_ratio_at_its_largest_size_against_its_target() -> None:
    text = charts.render("throughput", recorded(throughput_files()))

    assert 'x-axis ["moto, 5,000 objects", "MinIO, 50,000 objects", "filesystem, 5,000 objects"]' in text
    assert "bar [0.45, 1.01, 0.63]" in text
    assert "line [0.8, 0.9, 0.6]" in text
    assert "y-axis \"reclaim / raw (×)\" 0 --> 1.16" in text
    assert "| moto, 5,000 objects | 0.45 | 0.8 | `benchmarks/results/2026-12-06-bbbbbbb-dirty.json` |" in text
    assert "| filesystem, 5,000 objects | 0.63 | 0.6 | `benchmarks/results/2026-11-26-aaaaaaa.json` |" in text
    assert text.startswith("```mermaid\n") and "xychart-beta\n" in text


def test_throughput_leaves_the_target_line_out_when_a_binding_has_none() -> None:
    files = [results_file("2026-11-26-aaaaaaa", run(
        "deletion_throughput", "2026-11-26T08:00:00", {"fs_5000_pipeline_over_raw_unlink_ratio": 0.63}))]

    chart = charts.throughput(recorded(files))

    assert [(s.kind, s.values) for s in chart.series] == [("bar", (0.63,))]


def cpu_run(started: str, ours: float, before: float, **args: Any) -> dict[str, Any]:
    return run("worker_cpu", started, {"before_moto_2000_10000_marginal_us_per_record": before,
                                       "moto_2000_10000_marginal_us_per_record": ours}, **args)


def test_worker_cpu_history_keeps_the_runs_beside_the_most_measured_worker_in_the_order_they_ran() -> None:
    files = [
        # The file names sort the other way round from the runs' start times: the start times decide.
        results_file("2026-11-26-0000001", cpu_run("2026-11-26T12:00:00", 62.5, 116.2, before_commit="172269f")),
        results_file("2026-11-26-0000002", cpu_run("2026-11-26T08:00:00", 70.0, 132.5, before_commit="172269f"),
                     cpu_run("2026-11-26T09:00:00", 68.7, 72.5, before_commit="670ae3c")),
        results_file("2026-11-27-0000003",
                     cpu_run("2026-11-27T08:00:00", 72.5, 298.8, before_tree="/tmp/x/before-172269f"), cores=16),
        # No earlier worker beside it: not on this chart.
        results_file("2026-11-28-0000004",
                     run("worker_cpu", "2026-11-28T08:00:00", {"moto_2000_10000_marginal_us_per_record": 86.2})),
    ]

    text = charts.render("worker-cpu", recorded(files))

    assert 'x-axis ["11-26 0000002", "11-26 0000001", "11-27 0000003, 16 cores"]' in text
    assert "bar [132.5, 116.2, 298.8]" in text
    assert "line [70, 62.5, 72.5]" in text
    assert "Bars: the worker of 172269f, same run; line: the worker of the run's commit." in text
    assert "xychart-beta horizontal" in text


def test_mark_cpu_history_numbers_the_runs_of_one_file() -> None:
    figures = {"mark_signed_total_5000_20000_marginal_cpu_us_per_record": 22.6,
               "mark_unsigned_total_5000_20000_marginal_cpu_us_per_record": 20.2}
    files = [results_file("2026-11-28-a74d323", run("mark_cpu", "2026-11-28T08:00:00", figures),
                          run("mark_cpu", "2026-11-28T09:00:00", figures))]

    text = charts.render("mark-cpu", recorded(files))

    assert 'x-axis ["11-28 a74d323", "11-28 a74d323 #2"]' in text
    assert "bar [22.6, 22.6]" in text and "line [20.2, 20.2]" in text


def test_processes_draws_the_steady_rate_by_process_count_beside_raw() -> None:
    figures = {"scaling_moto_20000_raw_objects_per_s": 19661.5,
               "scaling_moto_20000_supervisor_4p_steady_median_objects_per_s": 22569.3,
               "scaling_moto_20000_supervisor_1p_steady_median_objects_per_s": 15958.0,
               "scaling_moto_20000_supervisor_2p_steady_median_objects_per_s": 18759.2,
               "scaling_moto_20000_supervisor_2p_steady_spread": 0.09}
    files = [results_file("2026-11-26-5f43ca0", run("worker_scaling", "2026-11-26T08:00:00", figures))]

    text = charts.render("processes", recorded(files))

    assert 'x-axis ["1 process", "2 processes", "4 processes"]' in text
    assert "bar [15958, 18759, 22569]" in text
    assert "line [19662, 19662, 19662]" in text
    assert "| 4 processes | 22,569 | 19,662 | `benchmarks/results/2026-11-26-5f43ca0.json` |" in text


def test_memory_draws_the_latest_runs_peaks_by_backlog_under_the_ceiling() -> None:
    older = {"worker_10000_peak_rss_mb": 93.6, "worker_100000_peak_rss_mb": 137.9, "worker_peak_rss_ceiling_mb": 200}
    newer = {"worker_100000_peak_rss_mb": 112.0, "worker_10000_peak_rss_mb": 97.06, "worker_peak_rss_ceiling_mb": 200}
    files = [results_file("2026-11-26-5d53dea", run("worker_memory", "2026-11-26T08:00", older)),
             results_file("2026-11-27-6ed5aac", run("worker_memory", "2026-11-27T08:00", newer))]

    text = charts.render("memory", recorded(files))

    assert 'x-axis ["10,000 records", "100,000 records"]' in text
    assert "bar [97.1, 112]" in text and "line [200, 200]" in text
    assert "2026-11-26-5d53dea.json" not in text


def test_a_chart_without_figures_says_so_and_an_unknown_chart_stops_the_build() -> None:
    assert "No recorded run" in charts.render("memory", [])
    with pytest.raises(PluginError, match="no chart is named 'speed'"):
        charts.render("speed", [])


def test_a_file_without_runs_stops_the_build() -> None:
    with pytest.raises(PluginError, match="broken.json"):
        charts.parse("broken.json", {"date": "2026-11-26", "commit": "abc", "machine": "m"})


def test_the_page_hook_replaces_every_marker_from_the_results_folder(tmp_path: Path) -> None:
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    for name, document in throughput_files():
        (results / name).write_text(json.dumps(document), encoding="utf-8")
    config = SimpleNamespace(config_file_path=str(tmp_path / "mkdocs.yml"))

    page = charts.on_page_markdown("# P\n\n<!-- chart: throughput -->\n\n<!-- chart: memory -->\n",
                                   page=None, config=config, files=None)

    assert "<!-- chart:" not in page
    assert "bar [0.45, 1.01, 0.63]" in page
    assert "No recorded run" in page

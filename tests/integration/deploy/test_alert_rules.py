"""The shipped Prometheus files, checked and unit-tested by promtool itself."""

from __future__ import annotations

from pathlib import Path

from tests.support.prometheus import DEPLOY, run_promtool

PROMETHEUS_DIR = DEPLOY / "prometheus"


def test_alert_rules_are_valid(promtool: Path) -> None:
    done = run_promtool(promtool, "check", "rules", "alerts.yml", cwd=PROMETHEUS_DIR)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 23 rules found" in done.stdout


def test_alert_rules_fire_when_they_should_and_only_then(promtool: Path) -> None:
    done = run_promtool(promtool, "test", "rules", "alerts_test.yml", cwd=PROMETHEUS_DIR)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_the_example_configuration_is_valid(promtool: Path) -> None:
    done = run_promtool(promtool, "check", "config", "prometheus.yml", cwd=PROMETHEUS_DIR)
    assert done.returncode == 0, done.stdout + done.stderr

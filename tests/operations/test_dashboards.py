"""The Grafana dashboard and the Prometheus rules in compose/ query metrics the code really exports, and
Prometheus's own checker accepts them (promtool, from Debian's `prometheus` package: scripts/bootstrap.sh
installs it)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from streamplane.client import metrics as client_metrics
from streamplane.coordinator.rpc import metrics as coordinator_metrics
from tests.helpers import REPO

DASHBOARD = REPO / "compose" / "grafana" / "streamplane.json"
RULES = REPO / "compose" / "prometheus" / "alerts.yml"
PROMETHEUS = REPO / "compose" / "prometheus" / "prometheus.yml"
NAME = re.compile(r"\bstreamplane_[a-z0-9_]+")
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"), "gauge": ("",)}


def _series(registry: CollectorRegistry) -> set[str]:
    """Every series name the registry's metrics are scraped under (a counter `x` is scraped as `x_total`)."""
    names = set()
    for family in registry.collect():
        for suffix in SUFFIXES.get(family.type, ("",)):
            names.add(family.name + suffix)
    return names


def exported() -> set[str]:
    from prometheus_client import REGISTRY

    assert coordinator_metrics.FLEET in REGISTRY._collector_to_names  # registered where the server scrapes
    return _series(REGISTRY) | _series(client_metrics.REGISTRY)


def dashboard_queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]


def rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_the_dashboard_queries_only_exported_metrics_and_covers_the_issues_panels() -> None:
    known = exported()
    queries = dashboard_queries()
    titles = {title for title, _ in queries}
    for wanted in ("Time lag by stream and lane", "Failovers", "Cluster health", "Lease moves and grants"):
        assert wanted in titles
    for wanted in ("Commits and records done", "Decode errors and bombs", "Producer switch time (p50, p99)"):
        assert wanted in titles
    unknown = {(title, name) for title, expr in queries for name in NAME.findall(expr) if name not in known}
    assert unknown == set(), f"the dashboard names metrics nobody exports: {sorted(unknown)}"
    used = {name for _, expr in queries for name in NAME.findall(expr)}
    assert len(used) >= 12, used


def test_the_alert_rules_are_well_formed_and_name_exported_metrics() -> None:
    known = exported()
    found = rules()
    assert {"StreamplaneTimeLagAboveTarget", "StreamplaneClusterUnhealthy"} <= {r["alert"] for r in found}
    for rule in found:
        assert rule["labels"]["severity"] in ("warning", "critical"), rule["alert"]
        assert rule["annotations"]["summary"], rule["alert"]
        names = NAME.findall(rule["expr"])
        assert names and set(names) <= known, (rule["alert"], names)


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.fail("promtool is missing: scripts/bootstrap.sh installs Debian's prometheus package, which has it")
    return found


def test_promtool_accepts_the_rules_and_the_config(promtool: str) -> None:
    done = subprocess.run([promtool, "check", "config", str(PROMETHEUS)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rules found" in done.stdout + done.stderr


def test_every_dashboard_query_is_valid_promql(promtool: str, tmp_path: Path) -> None:
    """promtool parses each query as a recording rule (Grafana's $variables become a regex that matches all)."""
    recording = [
        {"record": f"streamplane:dashboard_{i}", "expr": expr.replace("$group", ".*").replace("$stream", ".*")}
        for i, (_, expr) in enumerate(dashboard_queries())
    ]
    path = tmp_path / "dashboard_rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": recording}]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(recording)} rules found" in done.stdout + done.stderr

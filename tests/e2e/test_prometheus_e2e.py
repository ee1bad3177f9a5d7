"""A real Prometheus (Debian's `prometheus`, installed by scripts/bootstrap.sh) watches a `streamplane dev` stack
through the /metrics endpoint the stack prints, with the shipped alert rules (a test copy whose `for:`
durations are shortened; the shipped file is unchanged): a cluster taken down fires StreamplaneClusterUnhealthy,
bringing it up resolves it, and a running group has a time-lag series."""

from __future__ import annotations

import json
import re
import shutil
import threading
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from streamplane.client import Consumer, Producer
from tests.helpers import Proc, cli, free_port, start_dev, wait_until

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "compose" / "prometheus" / "alerts.yml"


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.load(answer)


def test_a_real_prometheus_fires_and_resolves_cluster_unhealthy_on_a_dev_stack(tmp_path: Path) -> None:
    if shutil.which("prometheus") is None:
        pytest.fail("Debian's prometheus is not installed: scripts/bootstrap.sh installs it")
    data_dir = tmp_path / "dev"
    dev, address, _ = start_dev(data_dir, "--clusters", "2")
    prom: Proc | None = None
    stop = threading.Event()
    try:
        metrics = re.search(r"^metrics=http://(\S+?)/metrics$", "\n".join(dev.seen), re.M)
        assert metrics, dev.seen
        with urllib.request.urlopen(f"http://{metrics.group(1)}/metrics", timeout=5) as answer:
            assert b"streamplane_cluster_health" in answer.read()

        rules = re.sub(r"(?m)^(\s+for:) \S+$", r"\1 1s", RULES.read_text())  # a test copy, shortened
        (tmp_path / "alerts.yml").write_text(rules)
        (tmp_path / "prometheus.yml").write_text(
            "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
            "rule_files: [alerts.yml]\n"
            "scrape_configs:\n"
            f"  - job_name: streamplane-coordinator\n    static_configs: [{{targets: ['{metrics.group(1)}']}}]\n"
        )
        web = f"127.0.0.1:{free_port()}"
        prom = Proc(
            [
                "prometheus",
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address={web}",
            ]
        )

        def ready() -> bool:
            try:
                with urllib.request.urlopen(f"http://{web}/-/ready", timeout=2) as answer:
                    return answer.status == 200
            except OSError:
                return False

        wait_until(ready, timeout=60, what=lambda: "".join(prom.stderr[-10:]) if prom else "")

        def query(expr: str) -> list[Any]:
            return list(_get(f"http://{web}/api/v1/query?query={urllib.parse.quote(expr)}")["data"]["result"])

        def firing(alert: str, cluster: str) -> bool:
            return any(
                a["labels"].get("alertname") == alert
                and a["labels"].get("cluster") == cluster
                and a["state"] == "firing"
                for a in _get(f"http://{web}/api/v1/alerts")["data"]["alerts"]
            )

        # a running group: its time-lag series is scraped
        created = cli("stream", "create", "pm", "--partitions", "2", "--cluster", "local-b", coordinator=address)
        assert created.returncode == 0, created.stderr
        with Producer(address) as producer:
            for i in range(200):
                producer.produce("pm", b"%d" % i)
            assert producer.flush(30) == 0
        with Consumer(address, group="pm-group", stream="pm") as consumer:
            reader = threading.Thread(target=consumer.run, args=(lambda m: None,), kwargs={"stop": stop}, daemon=True)
            reader.start()
            wait_until(lambda: bool(query('streamplane_time_lag_seconds{group="pm-group"}')), timeout=60)
            stop.set()
            reader.join(10)

        down = cli("fault", "cluster", "local-a", "--down", "--data-dir", str(data_dir))
        assert down.returncode == 0, down.stderr
        wait_until(lambda: firing("StreamplaneClusterUnhealthy", "local-a"), timeout=90)
        up = cli("fault", "cluster", "local-a", "--up", "--data-dir", str(data_dir), timeout=90)
        assert up.returncode == 0, up.stderr
        wait_until(lambda: not firing("StreamplaneClusterUnhealthy", "local-a"), timeout=90)
    finally:
        stop.set()
        if prom is not None:
            prom.stop()
        dev.stop()

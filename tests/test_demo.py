"""The README's main job: `streamplane demo` runs the pipeline through a failover and says it worked."""

from __future__ import annotations

import pytest

from tests.helpers import cli

pytestmark = pytest.mark.e2e


def test_demo_runs_the_pipeline_through_a_failover() -> None:
    result = cli("demo", "--records", "400", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "produced 200 records to g1 and read 200 back (native decoder)" in out
    assert "failed over realtime to local-b" in out
    assert "the producer switched by itself: 200 records went to g2, read 200 back" in out
    assert "failed_over demo-logs/realtime g1@local-a (draining) -> g2@local-b" in out
    assert (
        out.strip()
        .splitlines()[-1]
        .endswith("400 produced, 400 consumed across 2 generations on 2 clusters, 0 missing -> OK")
    )

"""The README's main job: `streamplane demo` runs the pipeline through a failover and says it worked."""

from __future__ import annotations

from tests.helpers import cli


def test_demo_runs_the_pipeline_through_a_failover() -> None:
    result = cli("demo", "--records", "400", timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "produced 200 records to g1; group demo-readers processed 200" in out
    assert "failed over realtime to local-b" in out
    assert "demo-readers processed 400 records across g1 and g2; g1 sealed at end offsets" in out
    assert "and drained; 1 malformed record(s) rejected to the dlq lane; offset lag 0" in out
    assert "failed_over demo-logs/realtime g1@local-a (draining) -> g2@local-b" in out
    assert "generation_sealed demo-logs/realtime g1 end_offsets=" in out
    assert "generation_drained demo-logs/realtime g1 groups=demo-readers" in out
    assert (
        out.strip()
        .splitlines()[-1]
        .endswith("400 produced, 400 consumed across 2 generations on 2 clusters, 0 missing -> OK")
    )

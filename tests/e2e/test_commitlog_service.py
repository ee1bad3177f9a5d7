"""The commit log through a real coordinator process: lag from GetLag, the CLI and /metrics agree; retries
run out into rejects; stale epochs are refused and counted; a new holder starts at the low watermark."""

from __future__ import annotations

import re
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from streamplane import model
from streamplane.client import CoordinatorClient, WorkerSession
from streamplane.errors import FencedError, InvalidArgumentError, LimitExceededError
from tests.helpers import Proc, cli, wait_until


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, local_cluster) -> Iterator[tuple[str, int]]:
    proc = Proc(
        [
            sys.executable,
            "-m",
            "streamplane.cli.main",
            "coordinator",
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--data-dir",
            str(tmp_path_factory.mktemp("commitlog") / "store"),
            "--allow-control-endpoint",
            local_cluster[1].endpoint,
        ]
    )
    started = proc.wait_for(r"coordinator=(\S+) .*metrics=\S+:(\d+)")
    address, metrics_port = started.group(1), int(started.group(2))
    bootstrap, control = local_cluster
    with CoordinatorClient(address) as client:
        client.register_cluster(
            model.Cluster(
                name="c", bootstrap_servers=bootstrap, admin=model.ADMIN_LOCAL, control_endpoint=control.endpoint
            )
        )
        client.create_stream("clicks", 2)
    yield address, metrics_port
    proc.stop()


def holder(address: str, group: str, worker: str = "w") -> WorkerSession:
    session = WorkerSession(address, group=group, worker_id=worker, subscriptions={"clicks": []})
    session.join()
    threading.Thread(target=lambda: [None for _ in session.events()], daemon=True).start()
    wait_until(lambda: len(session.leases) >= 2, what=lambda: f"{len(session.leases)} leases granted")
    return session


def metrics_text(port: int) -> str:
    return str(urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode())


def _lag_metric(port: int, labels: dict[str, str]) -> float | None:
    try:
        return metric(port, "streamplane_offset_lag", **labels)
    except AssertionError:
        return None


def metric(port: int, name: str, **labels: str) -> float:
    text = metrics_text(port)
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    m = re.search(rf"^{name}\{{{re.escape(want)}\}} (\S+)$", text, re.M)
    assert m, f"{name}{{{want}}} not in /metrics"
    return float(m.group(1))


def test_time_lag_agrees_in_getlag_cli_and_metrics(service: tuple[str, int]) -> None:
    address, port = service
    session = holder(address, "lagging")
    p0 = session.leases["clicks/realtime/g1/p0"]
    oldest = int(time.time() * 1000) - 30_000  # the oldest unprocessed record was ingested 30 s ago
    with CoordinatorClient(address) as client:
        commit = model.Commit(
            acked=[(0, 40)], oldest_pending_ts_ms=oldest, high_watermark=100, high_watermark_ts_ms=oldest + 25_000
        )
        client.commit("lagging", model.LeaseCommit(p0.lease_id, p0.epoch, commit))
        lag = client.lag("lagging")
    assert lag.offset_lag == 60
    assert 30_000 <= lag.time_lag_ms < 33_000
    (lane,) = lag.lanes
    assert (lane.stream, lane.lane, lane.offset_lag) == ("clicks", "realtime", 60)
    out = cli("lag", "lagging", "--partitions", coordinator=address)
    assert out.returncode == 0, out.stderr
    assert re.search(r"clicks\s+realtime\s+60\s+3[0-2]\.\d s", out.stdout), out.stdout
    assert "clicks/realtime/g1/p0" in out.stdout
    lane_labels = {"group": "lagging", "stream": "clicks", "lane": "realtime"}
    # the scrape shows the lag sweep's last pass, within a second of the commit
    wait_until(lambda: _lag_metric(port, lane_labels) == 60, what=lambda: metrics_text(port)[-2000:])
    seconds = metric(port, "streamplane_time_lag_seconds", **lane_labels)
    assert 30 <= seconds < 34
    assert metric(port, "streamplane_commits_total", group="lagging") == 1
    session.close()


def test_retries_run_out_into_rejects_and_a_new_holder_starts_at_the_low_watermark(service: tuple[str, int]) -> None:
    address, port = service
    session = holder(address, "retrying")
    lease = session.leases["clicks/realtime/g1/p1"]
    with CoordinatorClient(address) as client:
        client.configure_group("retrying", "realtime", 2)

        def commit(**fields: Any) -> model.CommitOutcome:
            body = model.Commit(high_watermark=10, **fields)
            return client.commit("retrying", model.LeaseCommit(lease.lease_id, lease.epoch, body))

        commit(acked=[(0, 5)], retries=[model.Retry(offset=5, attempt=1, error="x")])
        assert [r.offset for r in client.due_retries("retrying", lease.lease_id, lease.epoch)] == [5]
        response = commit(retries=[model.Retry(offset=5, attempt=2, error="again", backoff_ms=60_000)])
        assert list(response.exhausted) == [5], "the second failure uses up the lane's 2 attempts"
        assert response.copies == (model.DlqCopy(5, 1),), "its holder writes dlq copy 1"
        due = client.due_retries("retrying", lease.lease_id, lease.epoch)
        assert due == [], "not due while its dlq copy may still land"
        response = commit(
            rejects=[
                model.Reject(
                    offset=5, reason="max attempts: again", dlq=model.DlqLocation("clicks", "dlq", 0, 0, offset=0)
                )
            ],
            acked=[(6, 8)],
        )
        assert response.low_watermark == 8
        progress = client.progress("retrying", lease.lease_id)
        assert (progress.low_watermark, progress.rejects, progress.retries) == (8, 1, 0)
        assert metric(port, "streamplane_rejects_total", group="retrying") == 1
    session.close()
    successor = holder(address, "retrying", "successor")
    assert successor.leases["clicks/realtime/g1/p1"].start_offset == 8
    assert successor.leases["clicks/realtime/g1/p0"].start_offset == -1, "nothing committed there yet"
    successor.close()


def test_stale_epochs_and_bad_commits_are_refused(service: tuple[str, int]) -> None:
    address, port = service
    session = holder(address, "strict")
    lease = session.leases["clicks/realtime/g1/p0"]
    with CoordinatorClient(address) as client:

        def commit(epoch: int, acked: list[tuple[int, int]]) -> model.CommitOutcome:
            return client.commit("strict", model.LeaseCommit(lease.lease_id, epoch, model.Commit(acked=acked)))

        with pytest.raises(FencedError, match="stale") as fenced:
            commit(lease.epoch + 7, [(0, 1)])
        assert (fenced.value.lease_id, fenced.value.held_epoch, fenced.value.current_epoch) == (
            lease.lease_id,
            lease.epoch + 7,
            lease.epoch,
        )
        assert metric(port, "streamplane_stale_epoch_refusals_total", group="strict") == 1
        with pytest.raises(InvalidArgumentError, match="reversed"):
            commit(lease.epoch, [(9, 2)])
        with pytest.raises(LimitExceededError):
            commit(lease.epoch, [(i, i + 1) for i in range(0, 300_000, 2)])
        with pytest.raises(InvalidArgumentError, match="lease_id"):
            client.progress("strict", "nonsense")
        assert client.progress("strict", lease.lease_id).low_watermark == 0, "nothing was written"
    session.close()


def test_a_batched_commit_refuses_a_stale_lease_alone(service: tuple[str, int]) -> None:
    address, port = service
    session = holder(address, "batched")
    p0, p1 = session.leases["clicks/realtime/g1/p0"], session.leases["clicks/realtime/g1/p1"]
    with CoordinatorClient(address) as client:
        stale, good, bad = client.commit_batch(
            "batched",
            [
                model.LeaseCommit(p0.lease_id, p0.epoch + 3, model.Commit(acked=[(0, 1)])),
                model.LeaseCommit(p1.lease_id, p1.epoch, model.Commit(oldest_pending_ts_ms=1, high_watermark=0)),
                model.LeaseCommit("nonsense", 1, model.Commit()),
            ],
        )
        assert isinstance(stale.error, FencedError)
        assert (stale.error.lease_id, stale.error.held_epoch, stale.error.current_epoch) == (
            p0.lease_id,
            p0.epoch + 3,
            p0.epoch,
        ), "a batched result carries the error's fields too"
        assert good.error is None and good.lease_id == p1.lease_id
        assert isinstance(bad.error, InvalidArgumentError)
        assert client.progress("batched", p0.lease_id).low_watermark == 0, "the stale lease wrote nothing"
        assert client.progress("batched", p1.lease_id).oldest_pending_ts_ms == 1, "the good one was recorded"
        assert metric(port, "streamplane_stale_epoch_refusals_total", group="batched") == 1
        with pytest.raises(LimitExceededError, match="4096"):
            client.commit_batch("batched", [model.LeaseCommit(p1.lease_id, p1.epoch, model.Commit())] * 4097)
    session.close()


def test_lag_cli_bad_input(service: tuple[str, int]) -> None:
    address, _ = service
    out = cli("lag", "Bad Group", coordinator=address)
    assert out.returncode == 2 and "not a valid name" in out.stderr
    out = cli("group", "configure", "g", "--lane", "realtime", "--max-attempts", "0", coordinator=address)
    assert out.returncode == 2 and "max_attempts" in out.stderr

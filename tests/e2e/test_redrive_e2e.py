"""A bug and its fix (issue 38), end to end on both Kafka engines: a handler that rejects every record with one
key sends 1,000 of 20,000 records to the dlq lane; the fixed handler is deployed, and `streamplane dlq redrive`
is killed half way and run again. The fixed handler processes each of the 1,000 exactly once, and nothing
else is processed twice."""

from __future__ import annotations

import json
import sys
import uuid

from streamplane.client import CoordinatorClient, Producer
from tests.helpers import Proc, RunningConsumer, cli, issue_token, wait_until

RECORDS, BAD_EVERY = 20_000, 20


def _lane(address: str, token: str, stream: str) -> tuple[int, int, int]:
    with CoordinatorClient(address, token=token) as client:
        lanes = client.lag("billing", stream, partitions=False).lanes
    return (
        sum(x.offset_lag for x in lanes),
        sum(x.dlq_pending for x in lanes),
        sum(x.dlq_redriven for x in lanes),
    )


def test_a_redrive_killed_half_way_and_run_again_gives_every_rejected_record_to_the_fixed_handler_once(
    secured_engine: str,
) -> None:
    address = secured_engine
    admin = issue_token("admin", "ops")
    stream = f"rd-{uuid.uuid4().hex[:8]}"
    with CoordinatorClient(address, token=admin) as client:
        client.create_stream(stream, 2, cluster="east")
    values = [(b"bad-%d" if i % BAD_EVERY == 0 else b"ok-%d") % i for i in range(RECORDS)]
    bad = {v for v in values if v.startswith(b"bad-")}
    with Producer(address, token=issue_token("producer", "ingest"), **{"linger.ms": 20}) as producer:
        for v in values:
            producer.produce(stream, v, key=b"tenant-x" if v in bad else v)
        assert producer.flush(60) == 0

    # another group reads the same lane all along: the redrive is billing's, so audit never sees its records
    audit = RunningConsumer(address, "audit", stream, token=issue_token("consumer", "audit"))
    buggy = RunningConsumer(address, "billing", stream, reject=b"bad-", token=issue_token("consumer", "v1"))
    try:
        wait_until(
            lambda: _lane(address, admin, stream)[:2] == (0, len(bad)),
            timeout=120,
            what=lambda: f"lag 0 with 1,000 rejects pending: {_lane(address, admin, stream)}",
        )
    finally:
        buggy.stop()
    assert set(buggy.seen) == set(values) and max(buggy.seen.values()) == 1

    fixed = RunningConsumer(address, "billing", stream, token=issue_token("consumer", "v2"))
    try:
        env = {"STREAMPLANE_TOKEN": admin}
        args = ["dlq", "redrive", stream, "--group", "billing", "--rate", "400", "--batch-size", "100"]
        first = Proc([sys.executable, "-m", "streamplane.cli.main", "--coordinator", address, *args], env=env)
        # killed while a batch is on its way: some of it has reached the handler, and it is not completed yet
        wait_until(lambda: len(fixed.seen) >= 330, timeout=60, what=lambda: f"330 redriven: {first.stderr[-3:]}")
        first.kill9()
        marked = _lane(address, admin, stream)[2]
        assert 0 < marked < len(bad), marked

        again = cli("--output", "json", *args, coordinator=address, env=env, timeout=180)
        assert again.returncode == 0, again.stderr
        report = json.loads(again.stdout)
        assert marked + report["produced"] + report["found_landed"] == len(bad), (marked, report)
        print(f"killed with {marked} marked redriven; the second run: {report}")
        wait_until(
            lambda: set(fixed.seen) == bad,
            timeout=60,
            what=lambda: f"{len(set(fixed.seen) & bad)} of {len(bad)} reached the fixed handler",
        )
        wait_until(lambda: _lane(address, admin, stream) == (0, 0, len(bad)), timeout=30)
        assert max(fixed.seen.values()) == 1, [v for v, n in fixed.seen.items() if n > 1][:5]
        assert fixed.raised is None
        with CoordinatorClient(address, token=admin) as client:
            wait_until(lambda: client.lag("audit", stream, partitions=False).offset_lag == 0, timeout=60)
    finally:
        fixed.stop()
        audit.stop()
    assert set(fixed.seen) == bad, "nothing but the rejected records reached the fixed handler"
    assert set(audit.seen) == set(values) and max(audit.seen.values()) == 1, "another group stepped over the redrive"

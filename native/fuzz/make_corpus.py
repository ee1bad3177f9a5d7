"""Write the fuzzing seed corpus: real batches from librdkafka (every codec, through a local cluster,
fetched raw) plus hand-built edge cases. Run once and commit: python native/fuzz/make_corpus.py

Each file is one option byte (see fuzz_decode.c; 0x0C: 64 KiB limit, CRC checked) and a record set.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from confluent_kafka import Producer

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from streamplane.client.kafka import KafkaConnection  # noqa: E402
from streamplane.devstack.cluster_control import LocalClusterControl  # noqa: E402
from tests.recordbatch import CODECS, Rec, build_batch, control_batch  # noqa: E402

OPTIONS = bytes([0x0C])


def main() -> None:
    out = HERE / "corpus"
    out.mkdir(exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamplane.devstack.mockcluster", "--brokers", "1"], stdout=subprocess.PIPE, text=True
    )
    try:
        info = json.loads(proc.stdout.readline())  # type: ignore[union-attr]
        control = LocalClusterControl(info["control_endpoint"])
        for codec in CODECS:
            topic = f"corpus-{codec}"
            control.create_topic(topic, 1)
            producer = Producer(
                {
                    "bootstrap.servers": info["bootstrap_servers"],
                    "compression.type": codec,
                    "linger.ms": 20,
                    "batch.num.messages": 40,
                }
            )
            for i in range(120):
                producer.produce(
                    topic,
                    partition=0,
                    key=None if i % 4 == 0 else b"k%d" % i,
                    value=None if i % 9 == 0 else b'{"i":%d,"msg":"log line"}' % i,
                    headers=[("h", b"v"), ("n", None)] if i % 3 == 0 else None,
                )
            producer.flush(10)
            with KafkaConnection.connect_any(info["bootstrap_servers"]) as conn:
                (part,) = conn.fetch(topic, {0: 0}, partition_max_bytes=1 << 20)
            (out / f"librdkafka-{codec}").write_bytes(OPTIONS + bytes(part.records))
    finally:
        proc.terminate()
    edge = {
        "nulls-headers": build_batch([Rec(key=None, value=None, headers=[(b"k", None)]), Rec(key=b"", value=b"")]),
        "transaction": build_batch([Rec(value=b"t")], producer_id=3, producer_epoch=0, transactional=True)
        + control_batch(1, 3, commit=False),
        "log-append-time": build_batch([Rec(value=b"a"), Rec(value=b"b")], log_append_time=True),
    }
    for name, data in edge.items():
        (out / f"edge-{name}").write_bytes(bytes([0x4C]) + data)  # aborted list on
    print(f"wrote {len(list(out.iterdir()))} files to {out}")


if __name__ == "__main__":
    main()

"""A consumer worker process for the client's end-to-end test: processes records of one stream and writes
each processed id to its own file (one line, written before the ack, so a kill -9 loses none of them):
"<value> <lease id> <epoch> <unix ms>". Records whose value starts with b"poison" always fail; each failure
is written as "failed <value> <lease id> <epoch> <unix ms>".
'stop' on stdin closes the consumer."""

from __future__ import annotations

import json
import os
import sys
import threading
import time

from streamplane.client import Consumer, Message


def main() -> None:
    coordinator, group, stream, worker_id, out_path = sys.argv[1:6]
    extra = json.loads(sys.argv[6]) if len(sys.argv) > 6 else {}
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    consumer = Consumer(coordinator, group=group, stream=stream, worker_id=worker_id, concurrency=4, **extra)

    def handle(msg: Message) -> None:
        where = b" %s %d %d\n" % (msg.lease_id.encode(), msg.epoch, time.time_ns() // 1_000_000)
        if msg.value.startswith(b"poison"):
            os.write(fd, b"failed " + msg.value[:40] + where)
            raise ValueError(f"cannot parse {msg.value[:20]!r}")
        os.write(fd, msg.value[:40] + where)

    stop = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                stop.set()
                return

    threading.Thread(target=commands, daemon=True).start()
    print(json.dumps({"event": "started", "pid": os.getpid()}), flush=True)
    consumer.run(handle, stop=stop)
    consumer.close()
    print(json.dumps({"event": "stopped"}), flush=True)


if __name__ == "__main__":
    main()

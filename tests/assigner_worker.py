"""A worker process for the Assigner's integration tests: joins a group and reports, one JSON line each,
what happens. It releases revoked leases at once; 'leave' on stdin closes its session gracefully."""

from __future__ import annotations

import json
import sys
import threading
import time

from streamplane.client import Grant, Revoke, SessionEndedError, WorkerSession
from streamplane.errors import FencedError


def say(**fields: object) -> None:
    print(json.dumps({"t": time.time(), **fields}), flush=True)


def main() -> None:
    coordinator, group, worker_id, stream = sys.argv[1:5]
    session = WorkerSession(coordinator, group=group, worker_id=worker_id, subscriptions={stream: []})
    session.join()
    say(event="joined", session=session.session_id)
    held: dict[str, int] = {}

    def commands() -> None:
        for line in sys.stdin:
            if line.strip() == "leave":
                session.close()
                say(event="left")

    threading.Thread(target=commands, daemon=True).start()
    try:
        for event in session.events():
            match event:
                case Grant():
                    held[event.lease_id] = event.epoch
                    say(event="grant", lease=event.lease_id, epoch=event.epoch, topic=event.topic)
                case Revoke():
                    held.pop(event.lease_id, None)
                    say(event="revoke", lease=event.lease_id, epoch=event.epoch, deadline=event.deadline_ms)
                    if event.deadline_ms:
                        session.release(event.lease_id, event.epoch)
    except SessionEndedError as err:
        say(event="ended", reason=err.message)
        for lease_id, epoch in held.items():
            try:
                session.check(lease_id, epoch)
                say(event="still_holds", lease=lease_id, epoch=epoch)
            except FencedError as fenced:
                say(event="fenced", lease=lease_id, epoch=epoch, reason=fenced.message)
    say(event="exit")


if __name__ == "__main__":
    main()

"""The client's background threads, started so that none can die silently.

A worker whose commit thread died while its session thread kept heartbeating is the worst outcome: the group
believes the work is being done. So every long-lived thread of the consumer and the producer is started here:
an exception escaping its body is a bug, logged with its traceback and handed to the owner's `on_crash`, which
ends the owner loudly (its session closed, its leases back to the group, `run()` raising the cause).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from streamplane.errors import StreamplaneError, ThreadCrashedError

log = structlog.get_logger(__name__)


def start_thread(name: str, body: Callable[[], None], on_crash: Callable[[StreamplaneError], None]) -> threading.Thread:
    """Run `body` on a daemon thread named `name`; an exception escaping it goes to `on_crash`."""

    def run() -> None:
        try:
            body()
        except Exception as err:
            log.exception("client.thread_crashed", thread=name)
            crashed = err if isinstance(err, StreamplaneError) else ThreadCrashedError(f"{name} failed: {err!r}")
            on_crash(crashed)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread

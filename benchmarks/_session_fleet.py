"""A load generator of worker sessions for `benchmarks/assigner.py --fleet`: many workers speaking the real
session protocol (hello, heartbeats at the interval the coordinator asks for, releases of revoked leases) from
one thread and one asyncio loop over a few channels, not a thread per worker. It notes when each lease is
granted, as a worker with no backlog would start reading it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import grpc

from streamplane.model import Grant, Heartbeat, Hello, Release, Revoke, Subscription
from streamplane.process import usage
from streamplane.v1 import assigner_pb2_grpc as apb_grpc
from streamplane.v1 import convert

SESSIONS_PER_CHANNEL = 100
JOIN_WAVE = 250
"""Sessions opened at once."""


class SessionFleet:
    """`count` worker sessions in group `group`, each subscribed to every stream of `streams`."""

    def __init__(self, address: str, group: str, streams: Sequence[str], count: int) -> None:
        self.address, self.group, self.count = address, group, count
        self.subscriptions = tuple(Subscription(s) for s in streams)
        self.grants: dict[str, float] = {}
        """{lease id: when it was last granted (time.time())}."""
        self._holders: dict[str, int] = {}  # {lease id: how many of these sessions hold it (one, once settled)}
        self.ended: list[str] = []
        """Sessions the coordinator ended (each with its reason): none should end in a steady fleet."""
        self.heartbeat_interval_s = 0.0
        """What the coordinator asked for, in its welcome."""
        self.refused: list[str] = []
        """Sessions that never got their welcome (each with the status it got instead)."""
        self.joined = threading.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="session-fleet", daemon=True)

    def start(self, timeout_s: float = 300) -> None:
        """Open every session and return once all are welcomed."""
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._main(), self._loop)
        if not self.joined.wait(timeout_s):
            raise SystemExit(f"the {self.count} sessions did not all join within {timeout_s:.0f} s")
        if self.refused:
            raise SystemExit(f"{len(self.refused)} of {self.count} sessions were refused, e.g. {self.refused[0]}")

    def held(self) -> int:
        """How many leases these sessions hold, as they were told."""
        return sum(1 for n in list(self._holders.values()) if n > 0)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    async def _main(self) -> None:
        channels = [grpc.aio.insecure_channel(self.address) for _ in range(0, self.count, SESSIONS_PER_CHANNEL)]
        # as a fleet deployed together starts: in waves, each opened at once (thousands of streams opened in the
        # same millisecond over a few connections make gRPC's core fail some with INTERNAL, in any server; a
        # real fleet's workers each have a connection of their own)
        for wave in range(0, self.count, JOIN_WAVE):
            welcomed: list[asyncio.Future[None]] = []
            for i in range(wave, min(self.count, wave + JOIN_WAVE)):
                stub = apb_grpc.AssignerServiceStub(channels[i // SESSIONS_PER_CHANNEL])
                ready = self._loop.create_future()
                welcomed.append(ready)
                self._tasks.append(self._loop.create_task(self._session(stub, f"w{i}", ready)))
            await asyncio.gather(*welcomed)
        self.joined.set()

    async def _session(self, stub: apb_grpc.AssignerServiceStub, worker_id: str, ready: asyncio.Future[None]) -> None:
        call = stub.Session()
        try:
            await call.write(convert.worker_message_to_pb(Hello(self.group, worker_id, self.subscriptions)))
            welcome = convert.welcome_from_pb(await call.read())
        except grpc.aio.AioRpcError as err:  # refused or cut off before its welcome: counted, not waited for
            self.refused.append(f"{worker_id}: {err.code().name} {err.details()}")
            ready.set_result(None)
            return
        assert welcome is not None, f"{worker_id}: no welcome"
        ready.set_result(None)
        writing = asyncio.Lock()  # one write at a time on a call
        self.heartbeat_interval_s = welcome.heartbeat_interval_ms / 1000
        beats = self._loop.create_task(self._heartbeats(call, writing, self.heartbeat_interval_s))
        try:
            while (message := await call.read()) is not grpc.aio.EOF:
                match convert.session_event_from_pb(message):
                    case Grant(lease_id=lid):
                        self.grants[lid] = time.time()
                        self._holders[lid] = self._holders.get(lid, 0) + 1
                    case Revoke(lease_id=lid, epoch=epoch, deadline_ms=deadline) if deadline:  # hand it back
                        async with writing:
                            await call.write(convert.worker_message_to_pb(Release(lid, epoch)))
                    case Revoke(lease_id=lid):  # gone from this worker
                        self._holders[lid] -= 1
        except grpc.aio.AioRpcError as err:
            self.ended.append(f"{worker_id}: {err.details()}")
        finally:
            beats.cancel()

    async def _heartbeats(self, call: grpc.aio.StreamStreamCall, writing: asyncio.Lock, interval_s: float) -> None:
        beat = convert.worker_message_to_pb(Heartbeat())
        while True:
            await asyncio.sleep(interval_s)
            async with writing:
                await call.write(beat)


def bare_streams_cores(address: str, pid: int, count: int, interval_s: float, seconds: float = 10.0) -> float:
    """The peer's cost: `count` streams to a bare gRPC server (`_bare_grpc_server.py`, process `pid`) over
    channels of SESSIONS_PER_CHANNEL, each sending a worker's idle heartbeat every `interval_s`, as the fleet's
    sessions do; returns the server's CPU (cores) over `seconds`, once they all send."""
    beat = convert.worker_message_to_pb(Heartbeat()).SerializeToString()

    async def run() -> float:
        channels = [grpc.aio.insecure_channel(address) for _ in range(0, count, SESSIONS_PER_CHANNEL)]

        async def stream(i: int) -> None:
            call = channels[i // SESSIONS_PER_CHANNEL].stream_stream("/bare.Sink/Drain")()
            await asyncio.sleep(interval_s * i / count)  # spread, as sessions that joined at different times
            while True:
                await call.write(beat)
                await asyncio.sleep(interval_s)

        tasks = [asyncio.create_task(stream(i)) for i in range(count)]
        await asyncio.sleep(interval_s + 2)
        cpu, started = usage(pid).cpu_s, time.monotonic()
        await asyncio.sleep(seconds)
        cores = (usage(pid).cpu_s - cpu) / (time.monotonic() - started)
        for task in tasks:
            task.cancel()
        for channel in channels:
            await channel.close()
        return cores

    return asyncio.run(run())

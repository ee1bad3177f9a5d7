"""The peer of `benchmarks/assigner.py --fleet`'s steady figure: a bare `grpc.aio` server on one event loop, as
the coordinator's, whose one bidirectional method reads every message and does nothing with it. What it costs
to receive the same heartbeats is the floor of what the coordinator can cost. Prints its address; runs until
killed."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc


async def _drain(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    async for _ in requests:
        pass
    yield b""


async def main() -> None:
    server = grpc.aio.server()
    handler = grpc.stream_stream_rpc_method_handler(_drain)  # bytes in, bytes out: no decoding at all
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bare.Sink", {"Drain": handler}),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    print(f"127.0.0.1:{port}", flush=True)
    await server.wait_for_termination()


if __name__ == "__main__":
    asyncio.run(main())

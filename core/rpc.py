"""Translation between streamplane errors and gRPC status codes, in one table, both ways.

Servicers wrap their handlers with `grpc_errors` so that a domain error becomes a status with its
message; clients call `raise_from_rpc_error` to turn a `grpc.RpcError` back into the same exception kind.
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

import grpc
import structlog

from streamplane.errors import (
    AlreadyExistsError,
    CorruptBatchError,
    FailedPreconditionError,
    FencedError,
    InvalidArgumentError,
    LimitExceededError,
    NotFoundError,
    PermissionDeniedError,
    StreamplaneError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
)

log = structlog.get_logger(__name__)

# Most specific first: FencedError is a FailedPreconditionError.
_TABLE: list[tuple[type[StreamplaneError], grpc.StatusCode]] = [
    (FencedError, grpc.StatusCode.FAILED_PRECONDITION),
    (InvalidArgumentError, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFoundError, grpc.StatusCode.NOT_FOUND),
    (AlreadyExistsError, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPreconditionError, grpc.StatusCode.FAILED_PRECONDITION),
    (LimitExceededError, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (CorruptBatchError, grpc.StatusCode.DATA_LOSS),
    (UnavailableError, grpc.StatusCode.UNAVAILABLE),
    (UnauthenticatedError, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDeniedError, grpc.StatusCode.PERMISSION_DENIED),
    (UnimplementedError, grpc.StatusCode.UNIMPLEMENTED),
]

# Trailing metadata keys that carry the exact error class across the wire (FencedError vs FailedPrecondition)
# and its fields (JSON).
_KIND_KEY = "x-streamplane-error"
_DETAILS_KEY = "x-streamplane-error-details"


def status_for(err: StreamplaneError) -> grpc.StatusCode:
    """The gRPC status code for a streamplane error."""
    for kind, code in _TABLE:
        if isinstance(err, kind):
            return code
    return grpc.StatusCode.INTERNAL


def details_json(err: StreamplaneError) -> str:
    """An error's fields as they travel ("" when it has none)."""
    return json.dumps(err.details, sort_keys=True) if err.details else ""


def _details(cls: type[StreamplaneError], text: str) -> dict[str, Any]:
    """The fields of `cls` found in `text` (from a newer or older peer: unknown ones are dropped)."""
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if k in cls.field_names and isinstance(v, str | int)}


def error_from_status(code: grpc.StatusCode, message: str, kind: str = "", details: str = "") -> StreamplaneError:
    """The streamplane error for a gRPC status (inverse of `status_for`), with its fields from `details`."""
    for cls, _ in _TABLE:
        if kind == cls.__name__:
            return cls(message, **_details(cls, details))
    for cls, cls_code in _TABLE:
        if cls_code == code and cls is not FencedError:
            return cls(message)
    if code in (grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED):
        return UnavailableError(message)
    return StreamplaneError(f"{code.name}: {message}")


def error_from_code(code: int, message: str, kind: str = "", details: str = "") -> StreamplaneError:
    """The streamplane error for a status code carried as a number (one result of a batched call)."""
    status = next((s for s in grpc.StatusCode if s.value[0] == code), grpc.StatusCode.UNKNOWN)
    return error_from_status(status, message, kind, details)


def raise_from_rpc_error(err: grpc.RpcError, target: str = "") -> None:
    """Raise the streamplane error that a failed call stands for, chained to the gRPC error."""
    raise error_from_rpc_error(err, target) from err


def error_from_rpc_error(err: grpc.RpcError, target: str = "") -> StreamplaneError:
    """The streamplane error a failed call stands for (the exact kind travels in trailing metadata)."""
    code = err.code() if hasattr(err, "code") else grpc.StatusCode.UNKNOWN
    details = err.details() if hasattr(err, "details") else str(err)
    kind = fields = ""
    trailing = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == _KIND_KEY:
            kind = value
        elif key == _DETAILS_KEY:
            fields = value
    if code == grpc.StatusCode.UNAVAILABLE and target:
        details = f"coordinator at {target} is unreachable ({details})"
    return error_from_status(code, details or code.name, kind, fields)


F = TypeVar("F", bound=Callable[..., Any])


MAX_STATUS_MESSAGE = 1024
"""Characters of a status message: a longer one would not fit gRPC's metadata and turn into another error."""


_STATUS: ContextVar[grpc.StatusCode] = ContextVar("streamplane_rpc_status", default=grpc.StatusCode.OK)


def begin_call() -> None:
    """Mark the start of a unary call in this context (see `call_status`)."""
    _STATUS.set(grpc.StatusCode.OK)


def call_status() -> grpc.StatusCode:
    """The status the unary handler that just ran in this context ended with (for metrics: the asyncio server's
    context for a handler on a thread does not say)."""
    return _STATUS.get()


def _status(context: grpc.ServicerContext, err: StreamplaneError) -> tuple[grpc.StatusCode, str]:
    """Set an error's trailing metadata (its kind and fields) on the call; returns the code and message to
    abort it with."""
    trailing = [(_KIND_KEY, type(err).__name__)]
    details = details_json(err)
    if details and len(details) <= MAX_STATUS_MESSAGE:
        trailing.append((_DETAILS_KEY, details))
    context.set_trailing_metadata(tuple(trailing))
    code = status_for(err)
    _STATUS.set(code)
    return code, err.message[:MAX_STATUS_MESSAGE]


class UndecodableRequest:
    """What the server hands a handler for request bytes that are not a valid message (see `add_servicer`):
    the handler refuses it with INVALID_ARGUMENT instead of gRPC answering UNKNOWN for a DecodeError."""

    def __init__(self, method: str, error: str) -> None:
        self.message = f"the request to {method} is not a valid message: {error}"


def require_decoded(request: Any) -> None:
    """Raise InvalidArgumentError if `request` (or one message of a request stream) could not be decoded."""
    if isinstance(request, UndecodableRequest):
        raise InvalidArgumentError(request.message)


def _tolerant(method: str, parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
    def deserialize(data: bytes) -> Any:
        try:
            return parse(data)
        except Exception as err:  # protobuf's DecodeError, or anything a parser raises on foreign bytes
            return UndecodableRequest(method, str(err) or type(err).__name__)

    return deserialize


class _Collect:
    """Stands in for a server while a generated `add_*Servicer_to_server` registers its method handlers."""

    def __init__(self) -> None:
        self.service = ""
        self.handlers: dict[str, Any] = {}

    def add_generic_rpc_handlers(self, handlers: Any) -> None:
        pass  # the same handlers come again by name below

    def add_registered_method_handlers(self, service: str, handlers: dict[str, Any]) -> None:
        self.service, self.handlers = service, handlers


def add_servicer(add: Callable[[Any, Any], None], servicer: Any, server: Any) -> None:
    """Register `servicer` on `server` as the generated `add` would, with request parsers that hand bad bytes
    to the handler as an `UndecodableRequest` (refused with INVALID_ARGUMENT by `grpc_errors`, and by
    `require_decoded` for the messages of a request stream) instead of failing in gRPC with UNKNOWN."""
    collected = _Collect()
    add(servicer, collected)
    handlers = {
        name: h._replace(request_deserializer=_tolerant(name, h.request_deserializer))
        for name, h in collected.handlers.items()
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(collected.service, handlers),))
    server.add_registered_method_handlers(collected.service, handlers)


def grpc_errors(handler: F) -> F:
    """Decorate a unary servicer method: streamplane errors become statuses, anything else INTERNAL."""

    @functools.wraps(handler)
    def wrapper(self: Any, request: Any, context: grpc.ServicerContext) -> Any:
        try:
            require_decoded(request)
            return handler(self, request, context)
        except StreamplaneError as err:
            context.abort(*_status(context, err))
        except Exception:
            log.exception("rpc.internal_error", method=handler.__name__)
            _STATUS.set(grpc.StatusCode.INTERNAL)
            context.abort(grpc.StatusCode.INTERNAL, f"internal error in {handler.__name__}; see coordinator log")

    return wrapper  # type: ignore[return-value]


def grpc_stream_errors(handler: F) -> F:
    """Like `grpc_errors`, for streaming methods served on the event loop (async generators)."""

    @functools.wraps(handler)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> AsyncIterator[Any]:
        try:
            require_decoded(request)
            async for item in handler(self, request, context):
                yield item
        except grpc.aio.AbortError:
            raise  # the handler ended the call itself
        except StreamplaneError as err:
            await context.abort(*_status(context, err))
        except Exception:
            log.exception("rpc.internal_error", method=handler.__name__)
            await context.abort(grpc.StatusCode.INTERNAL, f"internal error in {handler.__name__}; see coordinator log")

    return wrapper  # type: ignore[return-value]

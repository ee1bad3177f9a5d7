"""The model's vocabulary: the states records pass through (StrEnums the client, console and doctor use
instead of literals), the JSON round trip topology records share, and `to_jsonable` for output."""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import asdict, fields
from enum import Enum, StrEnum
from typing import Any, ClassVar

from streamplane.errors import StreamplaneError


class GenerationState(StrEnum):
    """The states a generation passes through, in order."""

    ACTIVE = "active"
    DRAINING = "draining"
    SEALED = "sealed"
    DRAINED = "drained"
    ABANDONED = "abandoned"
    """Given up by an operator (its cluster is gone for good): what was unread is recorded as lost."""


ACTIVE, DRAINING, SEALED, DRAINED, ABANDONED = GenerationState
SETTLED = (DRAINED, ABANDONED)
"""States after which nobody reads a generation again."""
GENERATION_STATES = tuple(GenerationState)


class AdminKind(StrEnum):
    """How topics are created on a cluster: Kafka's admin API, or a local engine's control endpoint."""

    KAFKA = "kafka"
    LOCAL = "local"


ADMIN_KAFKA, ADMIN_LOCAL = AdminKind


class ClusterHealth(StrEnum):
    """A cluster's health as the autopilot's monitor judges it (the client, console and doctor read it too)."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"
    UNHEALTHY = "unhealthy"
    UNKNOWN = "unknown"


class LeaseState(StrEnum):
    """A lease's state: held, being handed back after a revoke, or free to grant."""

    GRANTED = "granted"
    REVOKING = "revoking"
    FREE = "free"


class RecordOutcome(StrEnum):
    """What became of a record handed to the application."""

    PENDING = "pending"
    ACKED = "acked"
    RETRIED = "retried"
    REJECTED = "rejected"


DEFAULT_LANES: dict[str, int] = {"realtime": 100, "dlq": 10}
"""Lanes every stream gets at creation, with their priorities (higher is served first)."""


@functools.cache
def _field_names(cls: Any) -> frozenset[str]:
    """A record class's field names, looked up once (a page of streams decodes thousands of records)."""
    return frozenset(f.name for f in fields(cls))


class _Record:
    """JSON round trip shared by the topology records; unknown keys from newer coordinators are ignored."""

    _nested: ClassVar[dict[str, Any]] = {}

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        names = _field_names(cls)  # type: ignore[arg-type]  # a class is hashable; mypy sees a dataclass without __hash__
        kwargs = {k: v for k, v in data.items() if k in names}
        for name, kind in cls._nested.items():
            if isinstance(kwargs.get(name), dict):
                kwargs[name] = kind.from_dict(kwargs[name])
            elif name in kwargs:
                kwargs[name] = [kind.from_dict(item) for item in kwargs[name]]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, raw: bytes) -> Any:
        return cls.from_dict(json.loads(raw))


def to_jsonable(value: Any) -> Any:
    """Model objects (also inside lists and dicts) as plain JSON values; an event says its kind."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out = {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        kind = getattr(value, "kind", None)
        if isinstance(kind, str) and kind:
            out["kind"] = kind
        return out
    if isinstance(value, StreamplaneError):
        return {"error": type(value).__name__, "message": value.message}
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a named tuple (PartitionRef): by field
        return {k: to_jsonable(v) for k, v in value._asdict().items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {(k.lease_id if hasattr(k, "lease_id") else str(k)): to_jsonable(v) for k, v in value.items()}
    return value

"""The topology's domain objects: clusters, streams, lanes and generations, and their JSON form in the store."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

# Generation states, in the order a generation passes through them.
ACTIVE = "active"
DRAINING = "draining"
SEALED = "sealed"
DRAINED = "drained"
GENERATION_STATES = (ACTIVE, DRAINING, SEALED, DRAINED)

# How topics are created on a cluster.
ADMIN_KAFKA = "kafka"
ADMIN_LOCAL = "local"

DEFAULT_LANES: dict[str, int] = {"realtime": 100, "dlq": 10}
"""Lanes every stream gets at creation, with their priorities (higher is served first)."""


class _Record:
    """JSON round trip shared by the domain records; unknown keys from newer coordinators are ignored."""

    _nested: ClassVar[dict[str, Any]] = {}

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True).encode()  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        kwargs = {k: v for k, v in data.items() if k in names}
        for name, kind in cls._nested.items():
            if name in kwargs:
                kwargs[name] = [kind.from_dict(item) for item in kwargs[name]]
        return cls(**kwargs)

    @classmethod
    def from_json(cls, raw: bytes) -> Any:
        return cls.from_dict(json.loads(raw))


@dataclass(frozen=True)
class Cluster(_Record):
    """A registered Kafka cluster."""

    name: str
    bootstrap_servers: str
    zone: str = ""
    capacity_weight: float = 1.0
    health: str = "healthy"
    config_ref: str = ""
    admin: str = ADMIN_KAFKA
    control_endpoint: str = ""


@dataclass(frozen=True)
class Generation(_Record):
    """The physical placement of one lane at one time."""

    number: int
    cluster: str
    topic: str
    partitions: int
    state: str = ACTIVE
    end_offsets: list[int] = field(default_factory=list)
    """Fixed when sealed: per partition, the offset after its last record."""


@dataclass(frozen=True)
class Lane(_Record):
    """A quality-of-service class of a stream, with its generations oldest first."""

    name: str
    priority: int
    generations: list[Generation] = field(default_factory=list)
    _nested: ClassVar[dict[str, Any]] = {"generations": Generation}

    @property
    def active(self) -> Generation:
        """The generation producers write to (always the newest)."""
        return self.generations[-1]


@dataclass(frozen=True)
class Stream(_Record):
    """A named logical topic: its lanes and their generations."""

    name: str
    lanes: list[Lane] = field(default_factory=list)
    _nested: ClassVar[dict[str, Any]] = {"lanes": Lane}

    def lane(self, name: str) -> Lane | None:
        return next((lane for lane in self.lanes if lane.name == name), None)


@dataclass(frozen=True)
class Event:
    """One committed change, as read back from the event log."""

    version: str
    """24 hex digits; string order is commit order."""
    type: str
    time_ms: int
    actor: str
    data: dict[str, Any]

"""How the coordinator connects to clusters that need TLS or SASL: librdkafka-named settings by reference.

A cluster names its settings by reference (`config_ref`, set at registration); the settings themselves, with
their passwords and key files, stay in a JSON file given to each coordinator replica (`--kafka-settings`),
never in the store:

    {"prod-sasl": {"security.protocol": "sasl_ssl", "sasl.mechanism": "SCRAM-SHA-512",
                   "sasl.username": "streamplane", "sasl.password": "...", "ssl.ca.location": "/etc/ca.pem"}}

Every connection the coordinator makes to such a cluster uses them: topic creation and deletion (Kafka's
admin API), end offsets and time lookups (our wire client), and the health monitor's probes and canaries. A
cluster with no reference is reached in plaintext, as before.

A replica reads the file again on SIGHUP (`take`): a rotated password or certificate takes effect without a
restart. The connections kept with a changed reference's old settings are made again at their next use (each
keeps the `stamp` it was made with); a file that does not load is refused, and the settings in use stay.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from streamplane.client.kafka.config import ConnectionConfig
from streamplane.errors import InvalidArgumentError, UnavailableError
from streamplane.model import Cluster

_STAMPS = itertools.count(1)
"""Stamps of settings, never reused in a process: a reference removed and added again gets a new one."""


class KafkaSettings:
    """The settings of each reference a cluster may name (none: every cluster is reached in plaintext)."""

    def __init__(self, by_ref: Mapping[str, Mapping[str, Any]] | None = None, *, source: str = "") -> None:
        """InvalidArgumentError, naming the reference and `source` (where they came from), for settings that
        make no connection (an unknown protocol or mechanism, SASL without a user, a CA file that cannot be
        read): checked once, at start, not at a cluster's first probe."""
        self._by_ref: dict[str, dict[str, Any]] = {}
        self._connections: dict[str, ConnectionConfig] = {}
        where = f" in {source}" if source else ""
        for ref, settings in (by_ref or {}).items():
            if not ref or not isinstance(settings, Mapping):
                raise InvalidArgumentError(
                    f"Kafka settings{where}: each reference names an object of librdkafka settings, not {ref!r}"
                )
            try:
                self._connections[ref] = ConnectionConfig.from_settings(settings)
            except InvalidArgumentError as err:
                raise InvalidArgumentError(f"Kafka settings {ref!r}{where}: {err.message}") from err
            self._by_ref[ref] = {str(k): v for k, v in settings.items()}
        self._stamps = {ref: next(_STAMPS) for ref in self._by_ref}
        self._lock = threading.Lock()

    @classmethod
    def load(cls, path: str | Path) -> KafkaSettings:
        """The settings of a JSON file: {reference: {setting: value}}. InvalidArgumentError in one sentence for
        a file that cannot be read, is not JSON, or is not an object of objects."""
        try:
            text = Path(path).read_text()
        except OSError as err:
            raise InvalidArgumentError(f"cannot read the Kafka settings file {path}: {err.strerror}") from err
        try:
            parsed = json.loads(text)
        except ValueError as err:
            raise InvalidArgumentError(f"the Kafka settings file {path} is not JSON: {err}") from err
        if not isinstance(parsed, dict):
            raise InvalidArgumentError(
                f"the Kafka settings file {path} must hold an object: {{reference: {{setting: value}}}}"
            )
        return cls(parsed, source=str(path))

    def take(self, newer: KafkaSettings) -> list[str]:
        """Use `newer`'s settings from now on, in place (every part holding this object sees them): a reload.
        Returns the references added, changed or removed; a changed one gets a new `stamp`."""
        with self._lock:
            refs = set(self._by_ref) | set(newer._by_ref)
            changed = sorted(ref for ref in refs if self._by_ref.get(ref) != newer._by_ref.get(ref))
            stamps = {ref: next(_STAMPS) if ref in changed else self._stamps[ref] for ref in newer._by_ref}
            self._by_ref, self._connections, self._stamps = dict(newer._by_ref), dict(newer._connections), stamps
        return changed

    def stamp(self, cluster: Cluster) -> int:
        """Which settings reach `cluster` now (0: plaintext, or none known): a connection kept with another stamp
        was made with settings a reload changed, and is made again."""
        ref = cluster.config_ref
        return self._stamps.get(ref, 0) if isinstance(ref, str) and ref else 0

    @property
    def refs(self) -> tuple[str, ...]:
        return tuple(sorted(self._by_ref))

    def knows(self, ref: str) -> bool:
        """Whether a cluster naming `ref` can be reached by this coordinator ("" is plaintext: always; a stored
        reference that is not text, bad data, never: it is reported, never raised in a pass over the fleet)."""
        return ref == "" or (isinstance(ref, str) and ref in self._by_ref)

    def check(self, ref: str) -> None:
        """InvalidArgumentError for a reference a cluster cannot be registered with: one this coordinator has no
        settings for ("" is none: plaintext)."""
        if not self.knows(ref):
            known = f"it knows {', '.join(self.refs)}" if self._by_ref else "it was started without --kafka-settings"
            raise InvalidArgumentError(f"config_ref {ref!r} names no Kafka settings of this coordinator ({known})")

    def librdkafka(self, cluster: Cluster) -> dict[str, Any]:
        """The cluster's settings for a librdkafka client ({} for none)."""
        return dict(self._by_ref[self._ref(cluster)]) if cluster.config_ref else {}

    def connection(self, cluster: Cluster, timeout_s: float) -> ConnectionConfig:
        """The cluster's settings for our wire client, with `timeout_s`."""
        base = self._connections[self._ref(cluster)] if cluster.config_ref else ConnectionConfig()
        return replace(base, timeout_s=timeout_s)

    def _ref(self, cluster: Cluster) -> str:
        """The cluster's reference; UnavailableError (the cluster cannot be reached, and is reported so) when this
        replica has no settings for it: registered through a replica started with other settings."""
        if not self.knows(cluster.config_ref):
            raise UnavailableError(
                f"cluster {cluster.name} needs Kafka settings {cluster.config_ref!r}, which this coordinator replica "
                "was not given (--kafka-settings)"
            )
        return cluster.config_ref


PLAINTEXT = KafkaSettings()
"""No settings: every cluster is reached in plaintext."""

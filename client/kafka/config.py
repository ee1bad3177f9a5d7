"""How to connect to a Kafka cluster, from librdkafka's setting names, so one dict configures our fetch path
and the producer alike: `security.protocol`, `ssl.*`, `sasl.mechanism`, `sasl.username`, `sasl.password`,
`client.rack`, `client.id`."""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from streamplane.client.kafka.sasl import MECHANISMS
from streamplane.client.tls import tls_context
from streamplane.errors import InvalidArgumentError

PROTOCOLS = ("plaintext", "ssl", "sasl_plaintext", "sasl_ssl")


@dataclass(frozen=True)
class ConnectionConfig:
    """Settings of every connection to one cluster's brokers."""

    ssl_context: ssl.SSLContext | None = None
    """TLS for the connection; None is plaintext."""
    sasl_mechanism: str = ""
    """PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty for no SASL."""
    sasl_username: str = ""
    """SASL user name."""
    sasl_password: str = ""
    """SASL password."""
    client_id: str = "streamplane"
    """Sent with every request; brokers log and quota by it."""
    rack: str = ""
    """This client's rack (`client.rack`): Fetch v11+ lets the broker name the nearest replica to read from."""
    timeout_s: float = 30.0
    """Connect, authenticate and per-request timeout."""

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any] | None) -> ConnectionConfig:
        """Build from librdkafka-named settings; InvalidArgumentError names a bad or missing one."""
        settings = dict(settings or {})
        protocol = str(settings.get("security.protocol", "plaintext")).lower()
        if protocol not in PROTOCOLS:
            raise InvalidArgumentError(f"security.protocol must be one of {', '.join(PROTOCOLS)}, not {protocol!r}")
        context = tls_context({**settings, "security.protocol": "ssl" if protocol.endswith("ssl") else "plaintext"})
        mechanism = ""
        username = password = ""
        if protocol.startswith("sasl"):
            mechanism = str(settings.get("sasl.mechanism", settings.get("sasl.mechanisms", "GSSAPI"))).upper()
            if mechanism not in MECHANISMS:
                raise InvalidArgumentError(
                    f"sasl.mechanism must be one of {', '.join(MECHANISMS)} with security.protocol={protocol}, "
                    f"not {mechanism!r}"
                )
            username, password = str(settings.get("sasl.username", "")), str(settings.get("sasl.password", ""))
            if not username:
                raise InvalidArgumentError(f"sasl.username is required with sasl.mechanism={mechanism}")
        return cls(
            ssl_context=context,
            sasl_mechanism=mechanism,
            sasl_username=username,
            sasl_password=password,
            client_id=str(settings.get("client.id", "streamplane")),
            rack=str(settings.get("client.rack", "")),
        )

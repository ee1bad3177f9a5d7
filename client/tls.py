"""TLS for our own Kafka connections, configured with librdkafka's setting names (security.protocol, ssl.*),
so one configuration serves both our fetcher and librdkafka."""

from __future__ import annotations

import ssl
from typing import Any

from streamplane.errors import InvalidArgumentError


def _flag(config: dict[str, Any], key: str, default: bool) -> bool:
    value = config.get(key, default)
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "false"):
        return str(value).lower() == "true"
    raise InvalidArgumentError(f"{key} must be true or false, not {value!r}")


def tls_context(config: dict[str, Any]) -> ssl.SSLContext | None:
    """The SSL context `config` asks for; None for plaintext. InvalidArgumentError names a bad setting."""
    protocol = str(config.get("security.protocol", "plaintext")).lower()
    if protocol == "plaintext":
        return None
    if protocol != "ssl":
        raise InvalidArgumentError(f"security.protocol must be plaintext or ssl, not {protocol!r}")
    try:
        context = ssl.create_default_context(cafile=config.get("ssl.ca.location"))
    except (OSError, ssl.SSLError) as err:
        raise InvalidArgumentError(
            f"ssl.ca.location {config.get('ssl.ca.location')!r} cannot be loaded: {err}"
        ) from err
    cert = config.get("ssl.certificate.location")
    if cert:
        try:
            context.load_cert_chain(cert, config.get("ssl.key.location"), config.get("ssl.key.password"))
        except (OSError, ssl.SSLError) as err:
            raise InvalidArgumentError(
                f"ssl.certificate.location {cert!r} / ssl.key.location cannot be loaded: {err}"
            ) from err
    if str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        context.check_hostname = False
    if not _flag(config, "enable.ssl.certificate.verification", True):
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context

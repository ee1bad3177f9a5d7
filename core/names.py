"""Names of clusters, streams and lanes, the Kafka topic names derived from them, and broker addresses.

Names are lowercase so that topic names (`sp.<stream>.<lane>.g<generation>`) stay unique and parseable on
every Kafka cluster; dots are reserved as the topic name separator.
"""

from __future__ import annotations

import ipaddress
import re

from streamplane.errors import InvalidArgumentError, quoted

_OBJECT_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_LANE_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")

OBJECT_NAME_RULE = "1 to 63 characters: lowercase letters, digits, '-' or '_', starting with a letter or digit"
LANE_NAME_RULE = "1 to 32 characters: lowercase letters, digits, '-' or '_', starting with a letter"

TOPIC_PREFIX = "sp"


def check_object_name(field: str, value: str) -> str:
    """Return `value` if it is a valid cluster or stream name, else raise InvalidArgumentError naming `field`."""
    if not isinstance(value, str) or not _OBJECT_NAME.fullmatch(value):
        raise InvalidArgumentError(f"{field} {quoted(value)} is not a valid name: {OBJECT_NAME_RULE}")
    return value


def check_lane_name(field: str, value: str) -> str:
    """Return `value` if it is a valid lane name, else raise InvalidArgumentError naming `field`."""
    if not isinstance(value, str) or not _LANE_NAME.fullmatch(value):
        raise InvalidArgumentError(f"{field} {quoted(value)} is not a valid lane name: {LANE_NAME_RULE}")
    return value


_HOST_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")
_PORT = re.compile(r"[0-9]{1,5}")
ADDRESS_RULE = "host:port, the host a DNS name, an IPv4 address or an [IPv6] address, the port 1 to 65535"


def parse_address(field: str, value: str) -> tuple[str, int]:
    """(host, port) of one `host:port` (an IPv6 host in brackets), or InvalidArgumentError naming `field`.

    Strict on purpose: an address stored here is later handed to sockets by every probe and client, so what is
    not an address (an empty host, a NUL or a space, full-width digits, a port of 10^20) is refused at the edge
    rather than crash a loop that serves the whole fleet."""
    bad = InvalidArgumentError(f"{field} {quoted(value)} is not an address: {ADDRESS_RULE}")
    host, sep, port = value.rpartition(":")
    if not sep or not _PORT.fullmatch(port) or not 1 <= int(port) <= 65535:
        raise bad
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            raise bad from None
        return host[1:-1], int(port)
    labels = host.split(".")
    if not host or len(host) > 253 or not all(_HOST_LABEL.fullmatch(label) for label in labels):
        raise bad
    if labels[-1].isdigit():  # all-numeric: it must be a dotted IPv4 address
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise bad from None
    return host, int(port)


def check_addresses(field: str, value: str) -> str:
    """A comma-separated list of host:port (bootstrap servers), each checked by `parse_address`; returned as
    given, without spaces around the commas."""
    parts = [p.strip() for p in value.split(",")]
    if not value.strip() or len(parts) > 100:
        raise InvalidArgumentError(f"{field} must list 1 to 100 addresses ({ADDRESS_RULE}), comma-separated")
    for part in parts:
        parse_address(field, part)
    return ",".join(parts)


def topic_name(stream: str, lane: str, generation: int) -> str:
    """The Kafka topic that holds one generation of a lane."""
    return f"{TOPIC_PREFIX}.{stream}.{lane}.g{generation}"

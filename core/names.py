"""Names of clusters, streams and lanes, and the Kafka topic names derived from them.

Names are lowercase so that topic names (`sp.<stream>.<lane>.g<generation>`) stay unique and parseable on
every Kafka cluster; dots are reserved as the topic name separator.
"""

from __future__ import annotations

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


def topic_name(stream: str, lane: str, generation: int) -> str:
    """The Kafka topic that holds one generation of a lane."""
    return f"{TOPIC_PREFIX}.{stream}.{lane}.g{generation}"

"""SASL over Kafka: SaslHandshake (key 17) and SaslAuthenticate (key 36), with PLAIN and SCRAM-SHA-256/512.

SCRAM follows RFC 5802 (client-first, server-first, client-final with proof, server signature checked),
the same exchange librdkafka and the Java client make.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os

from streamplane.client.kafka import codec
from streamplane.client.kafka.codec import KafkaAuthenticationError, Reader

HANDSHAKE_KEY = 17
HANDSHAKE_VERSIONS = (1, 1)
AUTHENTICATE_KEY = 36
AUTHENTICATE_VERSIONS = (0, 1)
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


def encode_handshake(mechanism: str) -> bytes:
    return codec.string(mechanism)


def decode_handshake(r: Reader) -> tuple[int, list[str]]:
    code = r.i16()
    return code, [m or "" for m in r.array(r.string)]


def encode_authenticate(payload: bytes) -> bytes:
    return codec.bytes_(payload)


def decode_authenticate(version: int, r: Reader) -> tuple[int, str, bytes]:
    code, message = r.i16(), r.string() or ""
    payload = bytes(r.bytes_() or b"")
    if version >= 1:
        r.i64()  # session lifetime
    return code, message, payload


class Plain:
    """PLAIN: one message with the user name and password (use it over TLS only)."""

    def __init__(self, username: str, password: str) -> None:
        self._message = b"\0" + username.encode() + b"\0" + password.encode()
        self.done = False

    def step(self, challenge: bytes | None) -> bytes | None:
        if self.done:
            return None
        self.done = True
        return self._message


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class Scram:
    """SCRAM-SHA-256 or SCRAM-SHA-512 (RFC 5802), client side."""

    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None) -> None:
        self._hash = hashlib.sha256 if mechanism == "SCRAM-SHA-256" else hashlib.sha512
        self._hash_name = "sha256" if mechanism == "SCRAM-SHA-256" else "sha512"
        self._password = password.encode()
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode()
        self._first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature = b""
        self._state = 0
        self.done = False

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def step(self, challenge: bytes | None) -> bytes | None:
        if self._state == 0:
            self._state = 1
            return ("n,," + self._first_bare).encode()
        if self._state == 1:
            assert challenge is not None
            server_first = challenge.decode()
            attrs = dict(item.split("=", 1) for item in server_first.split(",") if "=" in item)
            nonce, salt, iterations = attrs.get("r", ""), attrs.get("s", ""), int(attrs.get("i", "0") or 0)
            if not nonce.startswith(self._nonce) or not salt or iterations < 1:
                raise KafkaAuthenticationError(
                    f"SCRAM: the broker's first message is invalid: {server_first!r}", code=58
                )
            salted = hashlib.pbkdf2_hmac(self._hash_name, self._password, base64.b64decode(salt), iterations)
            client_key = self._hmac(salted, b"Client Key")
            stored_key = self._hash(client_key).digest()
            final_bare = f"c=biws,r={nonce}"
            auth_message = f"{self._first_bare},{server_first},{final_bare}".encode()
            signature = self._hmac(stored_key, auth_message)
            proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
            self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
            self._state = 2
            return f"{final_bare},p={base64.b64encode(proof).decode()}".encode()
        if self._state == 2:
            assert challenge is not None
            attrs = dict(item.split("=", 1) for item in challenge.decode().split(",") if "=" in item)
            if "e" in attrs:
                raise KafkaAuthenticationError(f"SCRAM: the broker refused: {attrs['e']}", code=58)
            if base64.b64decode(attrs.get("v", "")) != self._server_signature:
                raise KafkaAuthenticationError(
                    "SCRAM: the broker's signature does not match (not the real broker?)", code=58
                )
            self._state = 3
            self.done = True
            return None
        return None


def mechanism_for(name: str, username: str, password: str) -> Plain | Scram:
    if name == "PLAIN":
        return Plain(username, password)
    return Scram(name, username, password)

"""How a client proves who it is to the coordinator, and over what: a bearer token and TLS settings.

Found the same way by the CLI, the Python client and the Spark source, first match wins:
- token: the explicit argument; STREAMPLANE_TOKEN; the file STREAMPLANE_TOKEN_FILE names; the file that
  `streamplane dev` writes for its own coordinator address (under `credentials_dir()`);
- TLS: explicit settings; STREAMPLANE_TLS_CA (the CA that signed the coordinator's certificate), with
  STREAMPLANE_TLS_CERT and STREAMPLANE_TLS_KEY for a client certificate (mutual TLS).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from streamplane.errors import InvalidArgumentError


def credentials_dir() -> Path:
    """Where `streamplane dev` leaves a token per coordinator address (STREAMPLANE_CREDENTIALS_DIR)."""
    configured = os.environ.get("STREAMPLANE_CREDENTIALS_DIR")
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "streamplane" / "credentials"


def _token_path(target: str) -> Path:
    return credentials_dir() / (re.sub(r"[^A-Za-z0-9._-]", "_", target) + ".token")


def save_token(target: str, token: str) -> Path:
    """Leave `token` where clients of `target` find it (mode 0600); return the file."""
    path = _token_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    temporary.touch(mode=0o600)
    temporary.write_text(token + "\n")
    temporary.replace(path)
    return path


def forget_token(target: str, token: str) -> None:
    """Remove the token file of `target` if it still holds `token` (another stack may have replaced it)."""
    path = _token_path(target)
    try:
        if path.read_text().strip() == token:
            path.unlink()
    except OSError:
        pass


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text().strip()
    except OSError as err:
        raise InvalidArgumentError(f"{what} {path} cannot be read: {err.strerror}") from err


def find_token(target: str, token: str | None = None) -> str:
    """The token to send to `target` ("" for none)."""
    if token:
        return token
    if os.environ.get("STREAMPLANE_TOKEN"):
        return os.environ["STREAMPLANE_TOKEN"].strip()
    if os.environ.get("STREAMPLANE_TOKEN_FILE"):
        return _read(Path(os.environ["STREAMPLANE_TOKEN_FILE"]), "STREAMPLANE_TOKEN_FILE")
    path = _token_path(target)
    return path.read_text().strip() if path.is_file() else ""


@dataclass(frozen=True)
class ClientTls:
    """TLS to the coordinator: the CA that signed its certificate (None: the system's), and for mutual TLS
    a client certificate chain and key (PEM files)."""

    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    @classmethod
    def find(
        cls, ca_file: str | None = None, cert_file: str | None = None, key_file: str | None = None
    ) -> ClientTls | None:
        """The explicit settings, else the environment's; None for plaintext."""
        ca = ca_file or os.environ.get("STREAMPLANE_TLS_CA")
        cert = cert_file or os.environ.get("STREAMPLANE_TLS_CERT")
        key = key_file or os.environ.get("STREAMPLANE_TLS_KEY")
        if not (ca or cert or key):
            return None
        if bool(cert) != bool(key):
            raise InvalidArgumentError("a client certificate needs both its chain and its key (tls cert and tls key)")
        return cls(ca, cert, key)

    def files(self) -> tuple[bytes | None, bytes | None, bytes | None]:
        """(CA, key, chain) contents, as gRPC's channel credentials take them."""
        return (
            _read(Path(self.ca_file), "the TLS CA file").encode() if self.ca_file else None,
            _read(Path(self.key_file), "the TLS key file").encode() if self.key_file else None,
            _read(Path(self.cert_file), "the TLS certificate file").encode() if self.cert_file else None,
        )

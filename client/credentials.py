"""How a client proves who it is to the coordinator, and over what: a bearer token and TLS settings.

Found the same way by the CLI, the Python client and the Spark source, first match wins:
- token: the explicit argument (a string, or a callable returning one, called again before the token it gave
  expires, as confluent-kafka's `oauth_cb`); STREAMPLANE_TOKEN; the file STREAMPLANE_TOKEN_FILE names (read
  again whenever it changes, as Kubernetes' projected service-account tokens expect); the file that
  `streamplane dev` writes for its own coordinator address (under `credentials_dir()`);
- TLS: explicit settings; STREAMPLANE_TLS_CA (the CA that signed the coordinator's certificate), with
  STREAMPLANE_TLS_CERT and STREAMPLANE_TLS_KEY for a client certificate (mutual TLS).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from streamplane.clock import SYSTEM, Clock
from streamplane.errors import InvalidArgumentError, PermissionDeniedError, StreamplaneError, UnauthenticatedError

log = structlog.get_logger(__name__)


REFUSED_GRACE_S = 15.0
"""How long a renewable credential may keep being refused (its file or callback has that long to give a new
token) before a client ends for it."""
FILE_CHECK_S = 1.0
"""How often a token file is looked at (one stat) for a change."""
RENEW_AT = 2 / 3
"""A callback's token is asked for again after this share of its lifetime (from its iat to its exp claim)."""


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


def token_claims(token: str) -> dict[str, object]:
    """The claims of a JWT, unverified (the coordinator verifies; a client only reads when it expires); {} for
    a token that is not a JWT."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (IndexError, ValueError, binascii.Error):
        return {}
    return claims if isinstance(claims, dict) else {}


class Credentials:
    """The bearer token a client sends, kept current: a token file is read again when it changes (at most one
    stat every FILE_CHECK_S), and a callback is asked again once RENEW_AT of its token's lifetime has passed.
    A static token (the argument, or STREAMPLANE_TOKEN) never changes. Thread-safe; every call of a client
    asks `metadata()`, which costs a clock read when nothing is due."""

    def __init__(self, target: str, token: str | Callable[[], str] | None = None, *, clock: Clock = SYSTEM) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._callback: Callable[[], str] | None = token if callable(token) else None
        self._file: Path | None = None
        self._required = False  # a file the user named must be readable at the start
        self._token = ""
        if isinstance(token, str) and token:
            self._token = token
        elif self._callback is None and os.environ.get("STREAMPLANE_TOKEN"):
            self._token = os.environ["STREAMPLANE_TOKEN"].strip()
        elif self._callback is None:
            named = os.environ.get("STREAMPLANE_TOKEN_FILE")
            self._file = Path(named) if named else _token_path(target)
            self._required = bool(named)
        self._stamp: tuple[int, int, int] | None = None
        self._due = 0.0  # monotonic time of the next look at the source
        self._refused: tuple[str, float] | None = None  # (token, since when) the coordinator refuses it
        self._refresh(force=True)

    @property
    def renewable(self) -> bool:
        """Whether the token can change (a file or a callback): long-lived streams then renew on the stream."""
        return self._callback is not None or self._file is not None

    def token(self) -> str:
        if self.renewable and self._clock.monotonic() >= self._due:
            self._refresh()
        return self._token

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata carrying the current token (none without one)."""
        token = self.token()
        return (("authorization", f"Bearer {token}"),) if token else ()

    def refused(self, error: StreamplaneError) -> bool:
        """Note a call refused with `error`; True when it cannot heal, so the client must end: a permission
        the credential lacks, or a credential refused for longer than REFUSED_GRACE_S (at once for a static
        one: nothing will replace it). Any other error: False."""
        if isinstance(error, PermissionDeniedError):
            return True
        if not isinstance(error, UnauthenticatedError):
            return False
        if not self.renewable:
            return True
        token, now = self.token(), self._clock.monotonic()
        if self._refused is None or self._refused[0] != token:
            self._refused = (token, now)
        return now - self._refused[1] >= REFUSED_GRACE_S

    def expires_ms(self) -> int | None:
        """When the current token expires (its exp claim, in unix ms); None if it says nothing."""
        exp = token_claims(self._token).get("exp")
        return int(exp * 1000) if isinstance(exp, int | float) else None

    def _refresh(self, *, force: bool = False) -> None:
        with self._lock:
            now = self._clock.monotonic()
            if not force and now < self._due:
                return
            if self._file is not None:
                self._due = now + FILE_CHECK_S
                self._read_file(force)
            elif self._callback is not None:
                self._due = now + FILE_CHECK_S
                if force or self._renew_due():
                    self._call_back()

    def _read_file(self, force: bool) -> None:
        assert self._file is not None
        try:
            st = self._file.stat()
        except OSError as err:
            if force and self._required:
                what = f"STREAMPLANE_TOKEN_FILE {self._file}"
                raise InvalidArgumentError(f"{what} cannot be read: {err.strerror}") from err
            return  # the file is being replaced (or was never written): keep the token we have
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        try:
            token = self._file.read_text().strip()
        except OSError:
            return
        if token or force:
            self._stamp, self._token = stamp, token

    def _renew_due(self) -> bool:
        claims = token_claims(self._token)
        exp, iat = claims.get("exp"), claims.get("iat")
        if not isinstance(exp, int | float):
            return not self._token
        start = iat if isinstance(iat, int | float) else exp
        return self._clock.now_ms() / 1000 >= start + (exp - start) * RENEW_AT

    def _call_back(self) -> None:
        assert self._callback is not None
        try:
            token = self._callback()
        except Exception as err:  # the application's code: keep the token we have, ask again shortly
            if not self._token:
                raise InvalidArgumentError(f"the credentials callback failed: {err}") from err
            log.warning("credentials.renew_failed", error=str(err))
            return
        if not isinstance(token, str) or not token:
            raise InvalidArgumentError(f"the credentials callback must return a token string, not {token!r}")
        self._token = token.strip()


TokenSource = str | Callable[[], str] | Credentials | None
"""A token, a callable that returns the current one, credentials to share, or None (found as this module says)."""


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

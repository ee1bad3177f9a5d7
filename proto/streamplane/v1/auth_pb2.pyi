from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable
from typing import ClassVar as _ClassVar, Optional as _Optional

DESCRIPTOR: _descriptor.FileDescriptor

class CreateTokenRequest(_message.Message):
    __slots__ = ("subject", "role", "streams", "groups", "ttl_s")
    SUBJECT_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    TTL_S_FIELD_NUMBER: _ClassVar[int]
    subject: str
    role: str
    streams: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedScalarFieldContainer[str]
    ttl_s: int
    def __init__(self, subject: _Optional[str] = ..., role: _Optional[str] = ..., streams: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[str]] = ..., ttl_s: _Optional[int] = ...) -> None: ...

class CreateTokenResponse(_message.Message):
    __slots__ = ("token", "expires_unix_s", "token_id")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    token: str
    expires_unix_s: int
    token_id: str
    def __init__(self, token: _Optional[str] = ..., expires_unix_s: _Optional[int] = ..., token_id: _Optional[str] = ...) -> None: ...

class RevokeTokenRequest(_message.Message):
    __slots__ = ("token_id", "reason")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    token_id: str
    reason: str
    def __init__(self, token_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RevokeTokenResponse(_message.Message):
    __slots__ = ("revoked",)
    REVOKED_FIELD_NUMBER: _ClassVar[int]
    revoked: bool
    def __init__(self, revoked: _Optional[bool] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class PrincipalInfo(_message.Message):
    __slots__ = ("name", "role", "streams", "groups", "via", "token_id", "expires_unix_s")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    STREAMS_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    VIA_FIELD_NUMBER: _ClassVar[int]
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_UNIX_S_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: str
    streams: _containers.RepeatedScalarFieldContainer[str]
    groups: _containers.RepeatedScalarFieldContainer[str]
    via: str
    token_id: str
    expires_unix_s: int
    def __init__(self, name: _Optional[str] = ..., role: _Optional[str] = ..., streams: _Optional[_Iterable[str]] = ..., groups: _Optional[_Iterable[str]] = ..., via: _Optional[str] = ..., token_id: _Optional[str] = ..., expires_unix_s: _Optional[int] = ...) -> None: ...

"""The AuthService servicer: tokens for admins to hand out, and who the caller is."""

from __future__ import annotations

import grpc

from streamplane.clock import SYSTEM, Clock
from streamplane.coordinator.groups import revocations
from streamplane.coordinator.rpc import auth
from streamplane.coordinator.rpc.guard import Guard
from streamplane.errors import FailedPreconditionError
from streamplane.rpc import grpc_errors
from streamplane.v1 import auth_pb2 as pb
from streamplane.v1 import auth_pb2_grpc as pb_grpc

DEFAULT_TTL_S = 24 * 3600


class AuthServicer(pb_grpc.AuthServiceServicer):
    def __init__(self, guard: Guard, *, clock: Clock = SYSTEM) -> None:
        self._guard = guard
        self._clock = clock

    @grpc_errors
    def CreateToken(self, request: pb.CreateTokenRequest, context: grpc.ServicerContext) -> pb.CreateTokenResponse:
        self._guard.require(context, auth.ISSUE_TOKENS)
        if self._guard.issuer is None:
            raise FailedPreconditionError("this coordinator has no token key (--token-key-file): it issues no tokens")
        now_s = self._clock.now_ms() / 1000
        ttl_s = request.ttl_s or DEFAULT_TTL_S
        token = self._guard.issuer.create(
            request.subject,
            request.role,
            now_s=now_s,
            ttl_s=ttl_s,
            streams=tuple(request.streams),
            groups=tuple(request.groups),
        )
        token_id = self._guard.issuer.token_id(token)
        return pb.CreateTokenResponse(token=token, expires_unix_s=int(now_s + ttl_s), token_id=token_id)

    @grpc_errors
    def WhoAmI(self, request: pb.WhoAmIRequest, context: grpc.ServicerContext) -> pb.PrincipalInfo:
        p = self._guard.principal(context)
        return pb.PrincipalInfo(
            name=p.name,
            role=p.role,
            streams=list(p.streams),
            groups=list(p.groups),
            via=p.via,
            token_id=p.token_id,
            expires_unix_s=p.expires_ms // 1000,
        )

    @grpc_errors
    def RevokeToken(self, request: pb.RevokeTokenRequest, context: grpc.ServicerContext) -> pb.RevokeTokenResponse:
        principal = self._guard.require(context, auth.ISSUE_TOKENS)
        if self._guard.revocations is None:
            raise FailedPreconditionError("this coordinator keeps no revocations (it has no store attached)")
        done = revocations.revoke(
            self._guard.revocations.db,
            request.token_id,
            by=principal.name,
            reason=request.reason,
            now_ms=self._clock.now_ms(),
        )
        return pb.RevokeTokenResponse(revoked=done)

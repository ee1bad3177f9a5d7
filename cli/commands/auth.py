"""Who you are, and bearer tokens: create, revoke, rotate the key."""

from __future__ import annotations

import argparse
import secrets
from pathlib import Path

from streamplane.cli.common import Add, Subparsers, connect, duration
from streamplane.cli.output import json_shown, print_json


def cmd_token_create(args: argparse.Namespace) -> None:
    subject = args.subject or f"{args.role}-{secrets.token_hex(4)}"
    with connect(args) as client:
        token, expires = client.create_token(
            subject, args.role, streams=tuple(args.stream), groups=tuple(args.group), ttl_s=args.ttl
        )
    if args.output == "json":
        from streamplane.client.credentials import token_claims

        print_json({"token": token, "expires_unix_s": expires, "token_id": token_claims(token).get("jti", "")})
    else:
        print(token)


def cmd_whoami(args: argparse.Namespace) -> None:
    with connect(args) as client:
        me = client.whoami()
    if not json_shown(args, me):
        scope = f" streams={','.join(me['streams']) or '*'} groups={','.join(me['groups']) or '*'}"
        print(
            f"{me['name']} role={me['role']} via={me['via']}"
            + (scope if me["role"] in ("producer", "consumer") else "")
            + (f" token={me['token_id']} expires_unix_s={me['expires_unix_s']}" if me["token_id"] else "")
        )


def cmd_token_revoke(args: argparse.Namespace) -> None:
    with connect(args) as client:
        done = client.revoke_token(args.token_id, args.reason)
    print(
        f"token {args.token_id} "
        + ("revoked: every replica refuses it within a second" if done else "was revoked already")
    )


def cmd_token_rotate_key(args: argparse.Namespace) -> None:
    from streamplane.coordinator.rpc import auth

    before, _ = auth.rotate_keys(Path(args.token_key_file), retire=args.retire)
    if args.retire:
        print(f"{args.token_key_file}: kept the newest key of {before}; tokens signed with the others are refused")
    else:
        print(
            f"{args.token_key_file}: a new signing key, and {before} older key(s) still verifying; coordinators "
            "using this file read it within a second. Issue new tokens, then run this again with --retire"
        )


def register(sub: Subparsers, add: Add) -> None:
    """The auth commands' sub-parsers, beside the commands."""
    p = add(sub, "whoami", cmd_whoami, "who the coordinator takes you for: name, role, scope")

    token = sub.add_parser("token", help="bearer tokens").add_subparsers(
        dest="subcommand", required=True, metavar="SUBCOMMAND"
    )
    p = add(token, "create", cmd_token_create, "print a new signed token (admins only)")
    p.add_argument("--subject", default="", help="who the token stands for (default: the role and a random suffix)")
    p.add_argument("--role", required=True, choices=["admin", "operator", "producer", "consumer", "viewer"])
    p.add_argument("--stream", action="append", default=[], help="limit a producer or consumer to this stream")
    p.add_argument("--group", action="append", default=[], help="limit a consumer to this group")
    p.add_argument("--ttl", type=duration, default=24 * 3600, help="validity, e.g. 3600, 90m, 12h, 30d (default 1d)")
    p = add(token, "revoke", cmd_token_revoke, "take a token back: every replica refuses it within a second")
    p.add_argument("token_id", help="the token's id (streamplane whoami, or token create -o json, shows it)")
    p.add_argument("--reason", default="")
    p = add(
        token,
        "rotate-key",
        cmd_token_rotate_key,
        "rotate the token key file: a new signing key, the old ones still verifying (--retire drops them)",
    )
    p.add_argument("--token-key-file", required=True, help="the coordinators' --token-key-file")
    p.add_argument("--retire", action="store_true", help="keep only the newest key (after reissuing tokens)")

"""Errors carry fields a program can act on, and keep them across the wire (status trailers, batch results)."""

from __future__ import annotations

import grpc
import pytest

from streamplane.errors import FencedError, NotFoundError, StreamplaneError, UnimplementedError
from streamplane.rpc import details_json, error_from_code, error_from_status, status_for


def test_fields_read_as_properties_and_unset_ones_as_empty() -> None:
    err = FencedError("stale", lease_id="s/realtime/g1/p0", held_epoch=3, current_epoch=5)
    assert (err.lease_id, err.held_epoch, err.current_epoch) == ("s/realtime/g1/p0", 3, 5)
    bare = NotFoundError("gone")
    assert (bare.kind, bare.name, bare.details) == ("", "", {})


def test_a_field_the_kind_does_not_have_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="lease_id"):
        NotFoundError("x", lease_id="nope")


@pytest.mark.parametrize(
    "err",
    [
        FencedError("stale", lease_id="s/l/g1/p2", held_epoch=1, current_epoch=2),
        NotFoundError("no such stream", kind="stream", name="ghost"),
    ],
)
def test_an_error_survives_the_trip_through_a_status_and_a_batch_result(err: StreamplaneError) -> None:
    back = error_from_status(status_for(err), err.message, type(err).__name__, details_json(err))
    assert type(back) is type(err) and back.message == err.message and back.details == err.details
    again = error_from_code(status_for(err).value[0], err.message, type(err).__name__, details_json(err))
    assert again.details == err.details


def test_fields_from_a_different_peer_are_dropped_when_unknown_or_mistyped() -> None:
    text = '{"lease_id": "a/b/g1/p0", "held_epoch": [1], "newer_field": 7}'
    err = error_from_status(grpc.StatusCode.FAILED_PRECONDITION, "stale", "FencedError", text)
    assert isinstance(err, FencedError) and err.details == {"lease_id": "a/b/g1/p0"}
    assert error_from_status(grpc.StatusCode.NOT_FOUND, "gone", "NotFoundError", "not json").details == {}


def test_kafka_error_codes_are_named_in_messages() -> None:
    from streamplane.client.kafka.codec import ErrorCode, KafkaProtocolError

    err = KafkaProtocolError("Fetch logs/0 failed", code=6)
    assert err.message == "Fetch logs/0 failed (NOT_LEADER_OR_FOLLOWER)" and err.retryable
    assert err.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    unknown = KafkaProtocolError("Fetch logs/0 failed", code=999)
    assert unknown.message.endswith("(Kafka error code 999)") and not unknown.retryable


def test_a_call_the_coordinator_does_not_serve_is_unimplemented_for_the_client_to_do_without() -> None:
    err = error_from_status(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
    assert isinstance(err, UnimplementedError) and err.message == "Method not found!"

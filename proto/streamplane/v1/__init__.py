"""Generated gRPC code for the streamplane.v1 contract (proto/streamplane/v1/*.proto).

Never edit the *_pb2* files by hand: run `python scripts/genproto.py`. tests/core/test_proto.py fails when they
are stale.
"""

"""The coordinator's gRPC edge: protobuf stops here.

The servicers (`topology_servicer`, `assigner_servicer`, `commitlog_servicer`, `auth_servicer`) turn requests
into the domain's typed calls and errors into statuses; `guard`, `auth` and `limits` check who calls and how
much before any store is touched; `metrics` and `call_metrics` are the Prometheus side; `event_loop` and
`server` start and stop it all.
"""

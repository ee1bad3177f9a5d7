"""The coordinator (the Assigner): topology, leases and the commit log over a transactional store, served over gRPC.

By area, each a sub-package that says what it owns:

- `topology/`: clusters, streams, lanes and generations, their event log, sealing and draining, and the
  autopilot (health probes and automatic failover);
- `groups/`: consumer groups: the assignment loop and its Balancer, leases and their epochs, group state and
  settings, replica leadership, and `sessions/` (the session host, its readers and writers);
- `commitlog/`: per-record progress, retries and rejects, lag, and the lag sweep;
- `rpc/`: the gRPC edge: the four servicers, authentication and roles, request limits, metrics and the server;
- `store/`: the transactional store and its drivers; `console/`: the web console.

`keys` is the store's key layout (every area's subspaces), `loop` the background-loop schedule every area
runs on, and `planted` the bugs the simulator (`streamplane.sim`) must catch.
"""

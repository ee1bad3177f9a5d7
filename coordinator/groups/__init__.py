"""Consumer groups: who holds which partition, at which epoch, and the loop that decides it.

Two kinds of functions live here. Transaction bodies (`leases`, `state`, `config`, `leadership`, `lifecycle`)
read and write a group's members, leases and settings in one transaction and append to the group's own log;
they log nothing. The assignment loop (`assigner`, with the pure `assignment` and its Balancer) runs them
for the groups this replica owns (`leadership`) at the pace `timing` sets, and `sessions/` hosts the workers'
session streams: one writer batching their heartbeats and releases, one reader batching their looks at their
leases.
"""

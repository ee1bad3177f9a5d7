"""A deterministic simulation of the control plane: the real domain code, simulated time, workers, producers
and clusters, FoundationDB's worst on the store, faults by seed, invariants checked as it runs.

One process, one thread, no sockets or sleeps: the Assigner's pass, the sealer's pass, lease and commit-log
transactions are the production functions, driven by a ManualClock in 100 ms steps over the embedded store
(in memory) wrapped in ChaosDatabase. Workers join, heartbeat, read their leases from the store (what their session
would tell them), process records, commit with their epoch, release on revoke; they crash and pause
(coming back as zombies with old epochs). A poison record is retried, then its dlq copy is asked for (the
commit log numbers it) and written, then it is rejected; a new holder starts where the commit log says, as
the client does. Producers append records to in-memory clusters and learn of failovers from the event log
late. Clusters go down; lanes fail over; the clock jumps; a coordinator replica, or both, restart, and each
worker resumes its session at a replica that runs; an operator splits a partition into key slices, splits it
again into another count, or merges it, and the slices' holders handle only their own records. The network
delivers commits, releases and heartbeats a second time, up to 8 s later, after what was sent since (a killed
worker's too).

Checked: no commit is accepted unless its sender holds the lease at that epoch; the commit log holds
exactly what was committed (a reference model of done offsets, retries and rejects); a late message changes
nothing (a release leaves the lease granted since, a heartbeat of an ended session leaves the next one);
each dlq copy number of a record is granted to one holder; every offset has one live holder at most (a
partition is held whole or in the slices of one split, never both, never two slices by one worker); no change
fails unexpectedly; and once the faults stop, every record a producer wrote is processed, every rejected
record has a dlq copy, and every old generation is sealed at the right end offsets and drained. A time lag is
never less than the age of the oldest record not processed (on a split partition, once each slice's holder
has said how far it is).

    python -m streamplane.sim --seeds 100           # a range of seeds; prints failures
    python -m streamplane.sim --seed 7 --plant stale_epoch   # one seed, with a planted bug
"""

from streamplane.sim.runner import main, quiet, replay_command, run_seed, run_seeds, shrink
from streamplane.sim.world import Fault, InvariantError, World, schedule

__all__ = [
    "Fault",
    "InvariantError",
    "World",
    "main",
    "quiet",
    "replay_command",
    "run_seed",
    "run_seeds",
    "schedule",
    "shrink",
]

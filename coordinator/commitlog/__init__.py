"""The commit log: per-record progress of every group on every partition, retries, rejects and lag.

Two kinds of functions live here: transaction bodies (`log`: commit, read progress, lag, pages of lag) and
the service over them (`service`, which checks epochs and sessions and counts metrics after a commit), with
the lag sweep (`lag_sweep`) reading every group's lag a bounded number of pages at a time.
"""

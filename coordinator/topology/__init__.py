"""Topology: the registered clusters, the streams with their lanes and generations, and what changes them.

Two kinds of functions live here. Transaction bodies (`@transactional`, and `Topology`'s changes) read and
write the store in one transaction and append one event each to the topology log (`events`); they log
nothing and call no cluster, because a body may run more than once. The loops around them do the I/O: the
sealer (`sealing`) seals and drains generations as producers switch and groups finish, and the autopilot
(`autopilot`, with `probes` and the pure decisions of `health`) probes clusters and fails lanes over.
`records` reads and writes the stored records, `cluster_index` keeps the index by cluster, `pages` lists them
a page at a time; `cluster_admin` creates and deletes topics on the clusters; `lifecycle` deletes streams.
"""

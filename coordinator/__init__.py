"""The coordinator (the Assigner): topology, leases and the commit log over a transactional store, served over gRPC."""

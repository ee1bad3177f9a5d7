"""The `streamplane` command line: operators' entry point to the coordinator, the store and the local stack."""

"""The CLI's commands, one module per family; each module's `register` adds its sub-parsers beside them."""

from streamplane.cli.commands import auth, cluster, dlq, events, group, local, stream

FAMILIES = (cluster, stream, group, dlq, auth, events, local)
"""In the order `streamplane --help` lists them."""

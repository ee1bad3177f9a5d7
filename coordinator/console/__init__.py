"""The operator console: a web UI served by the coordinator on its own port (off unless asked for)."""

from streamplane.coordinator.console.server import Console

__all__ = ["Console"]

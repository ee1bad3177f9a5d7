"""Which decoder code is loaded: the C extension when built, unless STREAMPLANE_PURE_PYTHON=1 asks for the
pure-Python paths (the extension stays importable for the tests' comparisons)."""

from __future__ import annotations

import os

try:
    from streamplane import _native  # type: ignore[attr-defined]
except ImportError:  # not built: the pure-Python code keeps everything working, slowly
    _native = None

__all__ = ["FORCE_PURE_PYTHON", "USE_NATIVE", "_native"]

FORCE_PURE_PYTHON = os.environ.get("STREAMPLANE_PURE_PYTHON", "") not in ("", "0")
USE_NATIVE = _native is not None and not FORCE_PURE_PYTHON

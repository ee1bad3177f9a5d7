"""streamplane for Spark Structured Streaming: a source and a sink on PySpark's Python Data Source API.

    from streamplane.spark import register
    register(spark)
    df = (spark.readStream.format("streamplane")
          .option("coordinator", "127.0.0.1:7400").option("stream", "logs").load())

`register` adds the data source and the listener that records each query's progress in the commit log.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from typing import Any

import structlog

from streamplane.errors import InvalidArgumentError
from streamplane.spark.progress import ProgressListener
from streamplane.spark.source import StreamplaneDataSource

log = structlog.get_logger(__name__)

_listening: dict[int, ProgressListener] = {}
_checked: dict[str, str | None] = {}


def executor_python_problem(python: str) -> str | None:
    """Why `python` cannot run this source's tasks (it cannot import streamplane), or None when it can."""
    if python not in _checked:
        try:
            done = subprocess.run(
                [python, "-c", "import streamplane.spark"], capture_output=True, text=True, timeout=60
            )
            _checked[python] = None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]
        except (OSError, subprocess.TimeoutExpired) as err:
            _checked[python] = str(err)
    return _checked[python]


def _check_executor_python(spark: Any) -> None:
    """PySpark starts its Python workers with `python3` from PATH unless PYSPARK_PYTHON says otherwise (its
    driver does not read spark.pyspark.python): with streamplane in a virtualenv that was not activated, every
    task would fail with ModuleNotFoundError. Say so at once, in one sentence. On this machine's masters (local,
    or a standalone one on loopback) it is an error; elsewhere the executors' machines may differ from the
    driver's, so a warning."""
    context = getattr(spark, "sparkContext", None)
    python = getattr(context, "pythonExec", None) if context is not None else None
    if not python:
        return  # Spark Connect: the executors' Python is the server's business
    problem = executor_python_problem(python)
    if problem is None:
        return
    master = str(getattr(context, "master", ""))
    message = (
        f"Spark's executors will run {python!r}, which cannot import streamplane ({problem}); set the environment "
        "variable PYSPARK_PYTHON to a Python that has it (sys.executable, for this process's) before the "
        "session starts"
    )
    if master.startswith("local") or "127.0.0.1" in master or "localhost" in master:
        raise InvalidArgumentError(message)
    log.warning("spark.executor_python", message=message)


def register(spark: Any, kafka: Mapping[str, Any] | None = None) -> None:
    """Make format("streamplane") available in this session and record queries' progress (idempotent).
    `kafka`: librdkafka-named settings (TLS, SASL) with which the progress listener, in this driver process,
    reads Kafka (the sources and sinks take theirs as options `kafka.<setting>`); given again, they replace
    the ones before.

    Raises InvalidArgumentError when the executors' Python, on this machine, cannot import streamplane, or when
    the settings make no connection."""
    _check_executor_python(spark)
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")  # the batch reader's pushFilters
    spark.dataSource.register(StreamplaneDataSource)
    listener = _listening.get(id(spark))
    if listener is None:
        listener = _listening[id(spark)] = ProgressListener(kafka)
        spark.streams.addListener(listener)
    elif kafka is not None:
        listener.use(kafka)


__all__ = ["ProgressListener", "StreamplaneDataSource", "register"]

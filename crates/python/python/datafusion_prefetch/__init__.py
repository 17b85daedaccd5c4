"""Prefetching Parquet tables over object stores for datafusion-python 55.

    from datafusion import SessionContext
    from datafusion_prefetch import ParquetTable

    ctx = SessionContext()
    ctx.register_table("trips", ParquetTable("s3://bucket/trips/", policy="auto"))
    ctx.sql("SELECT count(*) FROM trips").show()

Each scan of a ``ParquetTable`` keeps the next row groups and files in flight
while the current ones decode, within a read-ahead window, a per-scan memory
budget and one limit for the whole process (``set_memory_limit``), and returns
exactly what ``ctx.register_parquet`` returns. A session built with
``SessionConfig().with_extension(PrefetchConfig())`` takes ``SET prefetch.*``.
"""

from importlib import metadata as _metadata

_DATAFUSION_MAJOR = 55


def _check_datafusion() -> None:
    try:
        version = _metadata.version("datafusion")
    except _metadata.PackageNotFoundError:
        raise ImportError(
            f"datafusion_prefetch needs datafusion {_DATAFUSION_MAJOR}.x: "
            f"pip install 'datafusion>={_DATAFUSION_MAJOR},<{_DATAFUSION_MAJOR + 1}'"
        ) from None
    major = version.split(".")[0]
    if major != str(_DATAFUSION_MAJOR):
        raise ImportError(
            f"datafusion_prefetch is built for datafusion {_DATAFUSION_MAJOR}.x but "
            f"datafusion {version} is installed; a table from another major would crash "
            f"the process. pip install 'datafusion>={_DATAFUSION_MAJOR},<{_DATAFUSION_MAJOR + 1}'"
        )


_check_datafusion()

from ._internal import (  # noqa: E402
    DATAFUSION_MAJOR,
    ParquetTable,
    PrefetchConfig,
    __version__,
    governor_stats,
    memory_limit,
    set_memory_limit,
)

assert DATAFUSION_MAJOR == _DATAFUSION_MAJOR

__all__ = [
    "ParquetTable",
    "PrefetchConfig",
    "governor_stats",
    "memory_limit",
    "set_memory_limit",
    "__version__",
]

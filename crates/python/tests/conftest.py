"""Shared fixtures: generated Parquet data, and the in-repo S3 server when the
tests run under `.ci/with-s3` (which exports DFPREFETCH_S3_FOLDER and the
AWS_* variables)."""

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

FILES = 6
ROWS_PER_FILE = 20_000


def write_dataset(folder: Path) -> Path:
    """Six files of several row groups: ints, floats, strings with nulls, dates."""
    folder.mkdir(parents=True, exist_ok=True)
    for file in range(FILES):
        start = file * ROWS_PER_FILE
        ids = list(range(start, start + ROWS_PER_FILE))
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "amount": pa.array([(i * 37 % 1000) / 7 for i in ids], pa.float64()),
                "category": pa.array(
                    [None if i % 11 == 0 else f"c{i % 13}" for i in ids], pa.string()
                ),
                "day": pa.array([i % 365 for i in ids], pa.int32()).cast(pa.date32()),
            }
        )
        pq.write_table(table, folder / f"part-{file}.parquet", row_group_size=4_000)
    return folder


@pytest.fixture(scope="session")
def local_dataset(tmp_path_factory) -> Path:
    return write_dataset(tmp_path_factory.mktemp("data") / "events")


@pytest.fixture(scope="session")
def s3_dataset(local_dataset) -> str:
    """The dataset in bucket `data` of the in-repo S3 server, as an s3:// URL."""
    folder = os.environ.get("DFPREFETCH_S3_FOLDER")
    if not folder:
        if os.environ.get("DFPREFETCH_REQUIRE_S3"):
            pytest.fail("DFPREFETCH_REQUIRE_S3 is set but not running under .ci/with-s3")
        pytest.skip("no S3 server: run under .ci/with-s3")
    # s3s-fs serves each folder of its root as a bucket, each file as an object.
    shutil.copytree(local_dataset, Path(folder) / "data" / "events", dirs_exist_ok=True)
    return "s3://data/events/"

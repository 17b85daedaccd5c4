"""ParquetTable in datafusion-python: every policy returns what
datafusion-python's own register_parquet returns, locally and over S3; bad
settings, URLs and credentials are Python exceptions; stats and the
process-wide limit are readable."""

import importlib.metadata

import pytest
from datafusion import SessionContext

import datafusion_prefetch as dp

POLICIES = ["off", "batched", "pipelined", "streaming", "auto"]

QUERIES = [
    # Float sums rounded: their last bits depend on the order partial sums meet.
    "SELECT count(*) AS n, round(sum(amount), 6) AS total, min(day) AS first, max(day) AS last FROM {t}",
    "SELECT category, count(*) AS n, round(avg(amount), 9) AS mean FROM {t} GROUP BY category ORDER BY category NULLS FIRST",
    "SELECT id, amount, category FROM {t} WHERE id % 997 = 3 ORDER BY id",
    "SELECT * FROM {t} WHERE category = 'c7' AND amount > 100 ORDER BY id LIMIT 25",
    "SELECT day, count(DISTINCT category) AS kinds FROM {t} GROUP BY day ORDER BY day",
    "SELECT a.category, count(*) AS n FROM {t} a JOIN {t} b ON a.id = b.id + 1 "
    "WHERE a.amount < 50 GROUP BY a.category ORDER BY a.category NULLS FIRST",
]


def answers(ctx: SessionContext, table: str) -> list:
    return [ctx.sql(query.format(t=table)).to_pylist() for query in QUERIES]


def reference(location: str) -> list:
    ctx = SessionContext()
    ctx.register_parquet("reference", location)
    return answers(ctx, "reference")


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_matches_register_parquet_locally(local_dataset, policy):
    expected = reference(str(local_dataset))
    ctx = SessionContext()
    table = dp.ParquetTable(str(local_dataset), policy=policy)
    ctx.register_table("t", table)
    assert answers(ctx, "t") == expected
    scans = table.scan_stats()
    assert len(scans) >= len(QUERIES)
    assert all(scan["live_tasks"] == 0 for scan in scans)
    assert all(scan["staged_bytes"] == 0 for scan in scans)
    assert all(scan["staged_over_held_violations"] == 0 for scan in scans)


@pytest.mark.parametrize("policy", POLICIES)
def test_every_policy_matches_register_parquet_over_s3(local_dataset, s3_dataset, policy):
    expected = reference(str(local_dataset))
    ctx = SessionContext()
    # Credentials and endpoint from the AWS_* environment .ci/with-s3 sets.
    table = dp.ParquetTable(
        s3_dataset, policy=policy, read_ahead_window="1MiB", price_per_1000_requests="$0.005"
    )
    ctx.register_table("t", table)
    assert answers(ctx, "t") == expected
    scans = table.scan_stats()
    assert all(scan["live_tasks"] == 0 for scan in scans)
    if policy != "off":
        # Under `off` the scan is stock DataFusion's, which counts nothing.
        assert sum(scan["bytes_fetched"] for scan in scans) > 0
        # The S3 client counted what it sent: footers and every request at
        # least, each at the price given.
        attempts = sum(scan["attempts"] for scan in scans)
        assert attempts >= sum(scan["requests"] for scan in scans) > 0
        cost = sum(scan["request_cost"] for scan in scans)
        assert cost == pytest.approx(attempts * 0.005 / 1000)
    if policy not in ("off", "auto"):
        # A 1 MiB window over 6 files of 5 row groups each: read-ahead served
        # bytes. Not under `auto`, which reads a loopback server as it reads a
        # local store (no read-ahead) when its round trips measure local, as
        # they may or may not on a loaded machine.
        assert sum(scan["bytes_served_from_prefetch"] for scan in scans) > 0
    stats = dp.governor_stats()
    assert stats["peak_staged_bytes"] <= stats["limit_bytes"]
    assert stats["staged_over_held_violations"] == 0


def test_stats_of_a_scan(local_dataset):
    ctx = SessionContext()
    table = dp.ParquetTable(str(local_dataset), policy="pipelined")
    ctx.register_table("t", table)
    assert table.scan_stats() == []
    ctx.sql("SELECT sum(amount) FROM t").collect()
    [scan] = table.scan_stats()
    assert scan["requests"] > 0
    assert scan["bytes_fetched"] > 0
    assert scan["bytes_served_from_prefetch"] <= scan["bytes_fetched"]
    # A whole-column scan uses every byte it read ahead.
    assert scan["bytes_wasted"] == 0
    assert scan["peak_staged_bytes"] > 0
    assert repr(table) == f"ParquetTable({str(local_dataset)!r})"


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"policy": "fast"}, "prefetch.policy"),
        ({"read_ahead_window": "lots"}, "read_ahead_window"),
        ({"memory_budget": "-1MiB"}, "memory_budget"),
        ({"file_open_depth": "100000"}, "file_open_depth"),
        ({"read_ahead_window": "1GiB", "memory_budget": "64MiB"}, "must not exceed"),
        ({"hedge_after": "soon"}, "hedge_after"),
        ({"hedge_share": "0%"}, "hedge_share"),
        ({"price_per_1000_requests": "free"}, "price_per_1000_requests"),
        ({"request_timeout": "soon"}, "request_timeout"),
    ],
)
def test_bad_settings_are_value_errors(local_dataset, settings, message):
    with pytest.raises(ValueError, match=message):
        dp.ParquetTable(str(local_dataset), **settings)


@pytest.mark.parametrize(
    "url, options, message",
    [
        ("ftp://host/data/", None, "unsupported URL scheme 'ftp'"),
        ("/nonexistent/folder/", None, "No files found"),
        ("s3://bucket/data/", {"no_such_key": "1"}, "no_such_key"),
        ("LOCAL", {"aws_region": "us-east-1"}, "local files, which take none"),
    ],
)
def test_bad_urls_and_options_are_value_errors(local_dataset, url, options, message):
    url = str(local_dataset) if url == "LOCAL" else url
    with pytest.raises(ValueError, match=message):
        dp.ParquetTable(url, storage_options=options)


def test_bad_credentials_are_os_errors_and_each_table_has_its_own(s3_dataset):
    good = dp.ParquetTable(s3_dataset)
    with pytest.raises(OSError, match="SignatureDoesNotMatch|403"):
        dp.ParquetTable(s3_dataset, storage_options={"aws_secret_access_key": "not-the-secret"})
    # The refused table's store did not replace the good table's.
    ctx = SessionContext()
    ctx.register_table("t", good)
    assert ctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 120_000}]


def test_the_process_wide_limit():
    before = dp.memory_limit()
    try:
        dp.set_memory_limit("256MiB")
        assert dp.memory_limit() == "256MiB"
        assert dp.governor_stats()["limit_bytes"] == 256 * 1024 * 1024
        with pytest.raises(ValueError, match="memory limit"):
            dp.set_memory_limit("0")
        with pytest.raises(ValueError, match="memory limit"):
            dp.set_memory_limit("a lot")
    finally:
        dp.set_memory_limit(before)


def test_another_datafusion_major_is_refused(local_dataset, monkeypatch):
    table = dp.ParquetTable(str(local_dataset))
    real = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata,
        "version",
        lambda name: "54.1.0" if name == "datafusion" else real(name),
    )
    with pytest.raises(ImportError, match="datafusion 55.x"):
        dp._check_datafusion()
    with pytest.raises(Exception, match="built for datafusion 55.x but datafusion 54.1.0"):
        SessionContext().register_table("t", table)


def test_a_table_keeps_its_last_256_scans(local_dataset):
    ctx = SessionContext()
    table = dp.ParquetTable(str(local_dataset), policy="pipelined")
    ctx.register_table("t", table)
    for _ in range(260):
        ctx.sql("SELECT max(id) FROM t WHERE id < 10").collect()
    assert len(table.scan_stats()) == 256

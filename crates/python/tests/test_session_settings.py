"""SET prefetch.* through PrefetchConfig, a table's own settings over the
session's, simulated latency, a query interrupted midway, and streams let go
partly read."""

import _thread
import gc
import signal
import threading
import time

import pytest
from datafusion import SessionConfig, SessionContext

import datafusion_prefetch as dp
from conftest import FILES, ROWS_PER_FILE


def prefetching_session(**settings) -> SessionContext:
    config = SessionConfig().with_information_schema(True)
    return SessionContext(config.with_extension(dp.PrefetchConfig(**settings)))


def fetched(table) -> int:
    return sum(scan["bytes_fetched"] for scan in table.scan_stats())


def test_set_and_show_through_the_session(local_dataset):
    ctx = prefetching_session(policy="pipelined")
    assert ctx.sql("SHOW prefetch.policy").to_pylist()[0]["value"] == "pipelined"
    table = dp.ParquetTable(str(local_dataset))
    ctx.register_table("t", table)

    ctx.sql("SELECT sum(amount) FROM t").collect()
    assert fetched(table) > 0  # pipelined counts what it reads

    ctx.sql("SET prefetch.policy = 'off'").collect()
    assert ctx.sql("SHOW prefetch.policy").to_pylist()[0]["value"] == "off"
    before = fetched(table)
    ctx.sql("SELECT sum(amount) FROM t").collect()
    assert fetched(table) == before  # off is stock DataFusion, which counts nothing


def test_a_tables_own_settings_win(local_dataset):
    ctx = prefetching_session(policy="off")
    table = dp.ParquetTable(str(local_dataset), policy="streaming")
    ctx.register_table("t", table)
    ctx.sql("SELECT sum(amount) FROM t").collect()
    assert fetched(table) > 0


def test_bad_set_values_fail_the_next_query_by_name(local_dataset):
    ctx = prefetching_session()
    ctx.register_table("t", dp.ParquetTable(str(local_dataset)))
    ctx.sql("SET prefetch.policy = 'fast'").collect()
    with pytest.raises(Exception, match="prefetch.policy"):
        ctx.sql("SELECT count(*) FROM t WHERE amount > 1").collect()
    ctx.sql("SET prefetch.policy = 'auto'").collect()
    ctx.sql("SET prefetch.polcy = 'off'").collect()  # the host takes any key
    with pytest.raises(Exception, match="unknown setting 'prefetch.polcy'"):
        ctx.sql("SELECT count(*) FROM t WHERE amount > 1").collect()


def test_budget_and_window_set_in_any_order(local_dataset):
    ctx = prefetching_session()
    ctx.register_table("t", dp.ParquetTable(str(local_dataset), policy="pipelined"))
    # A window above the default budget, valid with the new budget.
    ctx.sql("SET prefetch.read_ahead_window = '512MiB'").collect()
    ctx.sql("SET prefetch.memory_budget = '1GiB'").collect()
    assert ctx.sql("SELECT count(*) AS n FROM t").to_pylist() == [{"n": 120_000}]


def test_memory_limit_is_set_on_the_module(local_dataset):
    ctx = prefetching_session()
    ctx.register_table("t", dp.ParquetTable(str(local_dataset)))
    ctx.sql("SET prefetch.memory_limit = '1GiB'").collect()
    with pytest.raises(Exception, match="set_memory_limit"):
        ctx.sql("SELECT sum(amount) FROM t").collect()


def test_bad_config_values_are_value_errors():
    with pytest.raises(ValueError, match="prefetch.policy"):
        dp.PrefetchConfig(policy="fast")
    assert repr(dp.PrefetchConfig(policy="streaming")) == 'PrefetchConfig(policy="streaming")'


def test_simulated_latency_keeps_the_answers(local_dataset):
    query = "SELECT category, count(*) AS n FROM {t} GROUP BY category ORDER BY category NULLS FIRST"
    reference = SessionContext()
    reference.register_parquet("r", str(local_dataset))
    ctx = SessionContext()
    table = dp.ParquetTable(str(local_dataset), simulate_latency="20ms", policy="auto")
    ctx.register_table("t", table)
    assert ctx.sql(query.format(t="t")).to_pylist() == reference.sql(query.format(t="r")).to_pylist()
    with pytest.raises(ValueError, match="simulate_latency"):
        dp.ParquetTable(str(local_dataset), simulate_latency="slow")


def test_an_interrupted_query_leaves_nothing_running(local_dataset):
    # 2 s per request: the scan is mid-flight when the interrupt lands and
    # still is when datafusion-python looks for it (once a second; at 1 s per
    # request its one round of reads ends some 70 ms after that look).
    table = dp.ParquetTable(str(local_dataset), simulate_latency="2s", policy="pipelined")
    ctx = SessionContext()
    ctx.register_table("t", table)
    # Python's own SIGINT handler, even where pytest was started with SIGINT
    # ignored (a background job of a non-interactive shell is): there
    # interrupt_main does nothing.
    previous_handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.5, _thread.interrupt_main)
    started = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            ctx.sql("SELECT * FROM t WHERE amount > 1 ORDER BY id").collect()
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous_handler)
    assert time.monotonic() - started < 5, "the query ran to the end instead of stopping"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        stats = dp.governor_stats()
        live = [scan["live_tasks"] for scan in table.scan_stats()]
        if stats["live_scans"] == 0 and stats["held_bytes"] == 0 and not any(live):
            break
        time.sleep(0.05)
    assert dp.governor_stats()["live_scans"] == 0
    assert dp.governor_stats()["held_bytes"] == 0
    assert all(scan["live_tasks"] == 0 for scan in table.scan_stats())
    assert all(scan["staged_bytes"] == 0 for scan in table.scan_stats())


@pytest.mark.parametrize("policy", ["off", "pipelined", "streaming", "auto"])
def test_partly_read_streams_let_go_then_the_session_answers_again(local_dataset, policy):
    # datafusion-ffi releases a stream on the thread that lets it go, where
    # no tokio runtime is current: the scan's work must not start there.
    table = dp.ParquetTable(str(local_dataset), simulate_latency="30ms", policy=policy)
    ctx = SessionContext(SessionConfig().with_target_partitions(2))
    ctx.register_table("t", table)
    query = "SELECT * FROM t WHERE amount > 1"
    for _ in range(2):
        stream = ctx.sql(query).execute_stream()
        assert next(stream) is not None
        del stream
        streams = ctx.sql(query).execute_stream_partitioned()
        assert any(next(s, None) is not None for s in streams)
        del streams
        gc.collect()
    total = ctx.sql("SELECT count(*) AS n FROM t").to_pylist()[0]["n"]
    assert total == FILES * ROWS_PER_FILE
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        live = [scan["live_tasks"] for scan in table.scan_stats()]
        if dp.governor_stats()["held_bytes"] == 0 and not any(live):
            break
        time.sleep(0.05)
    assert dp.governor_stats()["held_bytes"] == 0
    assert all(scan["live_tasks"] == 0 for scan in table.scan_stats())
    assert all(scan["staged_bytes"] == 0 for scan in table.scan_stats())

//! Over the S3 wire with the proxy answering a share of the GETs `503
//! SlowDown`, as a throttling S3 does: object_store's S3 client retries
//! them, every policy returns what `off` returns, and a prefetching scan
//! counts each attempt the proxy received for it, retries included.

use std::time::Duration;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::physical_plan::collect;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{PrefetchPolicy, prefetch_stats, prefetching_context};
use datafusion_prefetch_simstore::LatencyModel;
use url::Url;

use super::BUCKET;
use super::stores::{Server, Store, counted_s3_client};
use crate::datagen::write_id_payload;
use crate::proxy::{LatencyProxy, ProxyConfig};

const SQL: &str = "SELECT count(*), sum(id), min(payload), max(payload) FROM t \
    WHERE id % 3 = 0";

/// What one query read through the proxy: attempts and `503`s.
#[derive(Debug, PartialEq, Eq)]
struct Attempts {
    sent: u64,
    throttled: u64,
}

/// The answer under `policy`, with the attempts its scans counted and the
/// requests the proxy received while it executed (after planning).
async fn answer(policy: PrefetchPolicy, proxy: &LatencyProxy) -> (String, Attempts, Attempts) {
    let ctx: SessionContext = prefetching_context(SessionConfig::new().with_target_partitions(2));
    let (store, totals) = counted_s3_client(&proxy.endpoint()).unwrap();
    ctx.register_object_store(&Url::parse(&format!("s3://{BUCKET}")).unwrap(), store);
    for sql in [
        format!("SET prefetch.policy = '{}'", policy.name()),
        format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://{BUCKET}/t/'"),
    ] {
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    }
    let plan = ctx
        .sql(SQL)
        .await
        .unwrap()
        .create_physical_plan()
        .await
        .unwrap();
    let scans = prefetch_stats(&plan);
    let before = (proxy.stats().counts(), totals.attempts());
    let batches = collect(plan, ctx.task_ctx()).await.unwrap();
    // Reads ahead the query did not wait for end (or are stopped) too.
    for _ in 0..200 {
        if scans.iter().all(|s| s.live_tasks() == 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let after = proxy.stats().counts();
    let counted = Attempts {
        sent: scans.iter().map(|s| s.attempts()).sum(),
        throttled: scans.iter().map(|s| s.attempts_throttled()).sum(),
    };
    let received = Attempts {
        sent: after.requests - before.0.requests,
        throttled: after.slowed_down - before.0.slowed_down,
    };
    // The connector saw what the proxy saw.
    assert_eq!(
        totals.attempts() - before.1,
        received.sent,
        "{}",
        policy.name()
    );
    let answer = pretty_format_batches(&batches).unwrap().to_string();
    (answer, counted, received)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_policy_answers_as_off_when_s3_answers_slow_down() {
    let root = tempfile::tempdir().unwrap();
    let files = tempfile::tempdir().unwrap();
    write_id_payload(files.path(), 6, 20_000, 5_000, 1).unwrap();
    let server = Server::start(Store::S3, root.path()).unwrap();
    for i in 0..6 {
        let name = format!("part-{i:05}.parquet");
        server
            .upload(&files.path().join(&name), &format!("t/{name}"))
            .await
            .unwrap();
    }
    let proxy = LatencyProxy::start(
        server.addr(),
        ProxyConfig {
            latency: LatencyModel::Fixed(Duration::from_millis(2)),
            list_latency: LatencyModel::Fixed(Duration::from_millis(2)),
            bandwidth_bytes_per_sec: None,
            seed: 5,
            slow_down: 0.4,
        },
        server.wire(),
    )
    .await
    .unwrap();
    let (expected, off_counted, _) = answer(PrefetchPolicy::Off, &proxy).await;
    assert!(expected.contains("| 40000 "), "{expected}");
    // Stock DataFusion's scans are not ours to count.
    assert_eq!(
        off_counted,
        Attempts {
            sent: 0,
            throttled: 0
        }
    );
    for policy in PrefetchPolicy::ALL {
        let (got, counted, received) = answer(policy, &proxy).await;
        assert_eq!(got, expected, "{}", policy.name());
        eprintln!(
            "{}: counted {counted:?}, received {received:?}",
            policy.name()
        );
        // Each policy sends a dozen GETs or more: none answered 503 would
        // happen one time in a thousand.
        assert!(
            received.throttled > 0,
            "{}: no GET was answered 503",
            policy.name()
        );
        if policy != PrefetchPolicy::Off {
            assert_eq!(counted, received, "{}", policy.name());
        }
    }
}

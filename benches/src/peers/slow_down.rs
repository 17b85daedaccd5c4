//! Over the S3 wire with the proxy answering a share of the GETs `503
//! SlowDown`, as a throttling S3 does: object_store's S3 client retries
//! them, and every policy returns what `off` returns.

use std::time::Duration;

use datafusion::arrow::util::pretty::pretty_format_batches;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_prefetch::{PrefetchPolicy, prefetching_context};
use datafusion_prefetch_simstore::LatencyModel;
use url::Url;

use super::BUCKET;
use super::stores::{Server, Store, client};
use crate::datagen::write_id_payload;
use crate::proxy::{LatencyProxy, ProxyConfig};

const SQL: &str = "SELECT count(*), sum(id), min(payload), max(payload) FROM t \
    WHERE id % 3 = 0";

async fn answer(policy: PrefetchPolicy, endpoint: &str) -> String {
    let ctx: SessionContext = prefetching_context(SessionConfig::new().with_target_partitions(2));
    let store = client(Store::S3, endpoint).unwrap();
    ctx.register_object_store(&Url::parse(&format!("s3://{BUCKET}")).unwrap(), store);
    for sql in [
        format!("SET prefetch.policy = '{}'", policy.name()),
        format!("CREATE EXTERNAL TABLE t STORED AS PARQUET LOCATION 's3://{BUCKET}/t/'"),
    ] {
        ctx.sql(&sql).await.unwrap().collect().await.unwrap();
    }
    let batches = ctx.sql(SQL).await.unwrap().collect().await.unwrap();
    pretty_format_batches(&batches).unwrap().to_string()
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
    let expected = answer(PrefetchPolicy::Off, &proxy.endpoint()).await;
    assert!(expected.contains("| 40000 "), "{expected}");
    for policy in PrefetchPolicy::ALL {
        let before = proxy.stats().counts();
        let got = answer(policy, &proxy.endpoint()).await;
        let after = proxy.stats().counts();
        assert_eq!(got, expected, "{}", policy.name());
        eprintln!(
            "{}: {} requests, {} answered 503",
            policy.name(),
            after.requests - before.requests,
            after.slowed_down - before.slowed_down
        );
        // Each policy sends a dozen GETs or more: none answered 503 would
        // happen one time in a thousand.
        assert!(
            after.slowed_down > before.slowed_down,
            "{}: no GET was answered 503",
            policy.name()
        );
    }
}

use super::*;
use crate::suites::{ClickbenchCopy, SuiteOptions, prepare};

#[test]
fn each_client_runs_every_query_once_in_its_own_fixed_order() {
    let queries: Vec<Query> = (0..22)
        .map(|i| Query {
            name: format!("q{i}"),
            sql: String::new(),
            ties: false,
        })
        .collect();
    let names = |c| -> Vec<String> {
        client_order(&queries, 7, c)
            .into_iter()
            .map(|q| q.name)
            .collect()
    };
    let mut sorted = names(0);
    sorted.sort();
    let mut all: Vec<String> = queries.iter().map(|q| q.name.clone()).collect();
    all.sort();
    assert_eq!(sorted, all);
    assert_eq!(names(0), names(0), "fixed by the seed");
    assert_ne!(names(0), names(1), "shuffled per client");
}

#[test]
fn percentiles_are_nearest_rank() {
    let values: Vec<f64> = (1..=20).map(f64::from).collect();
    assert_eq!(percentile(&values, 50.0), 10.0);
    assert_eq!(percentile(&values, 95.0), 19.0);
    assert_eq!(percentile(&values, 100.0), 20.0);
}

/// Four clients on a tiny TPC-H, with a bounded pool and a governor
/// limit, in two rounds: every result matches `off`'s, the staged peak
/// stays within the limit, and each policy's figures cover both rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_share_one_runtime_and_match_off() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let options = SuiteOptions {
        scale: 0.001,
        clickbench_copy: ClickbenchCopy::Published,
    };
    let mut suite = prepare("tpch", dir.path(), &options).expect("data generated");
    suite.queries.truncate(6);
    let config = ConcurrentConfig {
        clients: vec![1, 4],
        policies: vec!["pipelined".into(), "auto".into()],
        store: SimulatedStoreConfig::fixed(Duration::from_millis(6)),
        latency_label: "fixed:6".into(),
        ceiling: true,
        busy_loops: 1,
        rounds: 2,
        partitions: 2,
        settings: vec![],
        pool_limit: Some(ByteSize::mib(512)),
        memory_limit: Some(ByteSize::new(64 << 10)),
        seed: 1,
        json: Some(dir.path().join("concurrent.json")),
        markdown: Some(dir.path().join("concurrent.md")),
    };
    assert!(run(&suite, &config).await.expect("runs"));
    let markdown = std::fs::read_to_string(dir.path().join("concurrent.md")).unwrap();
    assert!(markdown.contains("### 4 clients"), "{markdown}");
    assert!(markdown.contains("| auto at none |"), "{markdown}");
    assert!(
        markdown.contains("### queries/min by clients"),
        "{markdown}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("concurrent.json")).unwrap())
            .unwrap();
    let summaries = json["summaries"].as_array().unwrap();
    // Per count of clients: off, pipelined, auto, and auto at no latency.
    assert_eq!(summaries.len(), 8);
    let runs: Vec<(u64, &str, &str)> = summaries
        .iter()
        .map(|s| {
            let field = |key: &str| s[key].as_str().unwrap();
            (
                s["clients"].as_u64().unwrap(),
                field("policy"),
                field("latency"),
            )
        })
        .collect();
    assert_eq!(runs[3], (1, "auto", "none"));
    assert_eq!(runs[7], (4, "auto", "none"));
    let query_runs = json["runs"].as_array().unwrap();
    for round in 0..2 {
        assert!(
            query_runs.iter().any(|r| r["round"] == round),
            "round {round} in the runs"
        );
    }
    for s in summaries {
        let rounds = s["rounds_queries_per_min"].as_array().unwrap();
        assert_eq!(rounds.len(), 2, "each round's figure in {s}");
        // Every query of every client, in both rounds.
        assert_eq!(
            s["queries"].as_u64().unwrap(),
            2 * 6 * s["clients"].as_u64().unwrap()
        );
        assert!(s["requests"].as_u64().unwrap() > 0, "{s}");
        assert!(s["attempts"].as_u64().unwrap() >= s["requests"].as_u64().unwrap());
        assert!(s["cpu_ms_per_query"].as_f64().unwrap() > 0.0, "{s}");
        if s["policy"] != "off" {
            let fetched = s["scans"]["prefetch_bytes_fetched"].as_u64().unwrap_or(0);
            assert!(fetched > 0, "the scans' counters in {s}");
        }
        if s["policy"] != "auto" {
            assert!(s["window"].is_null(), "only auto is paced: {s}");
        } else if s["latency"] != "none" {
            assert!(!s["window"].is_null(), "auto's window in {s}");
        }
        for key in [
            "suite",
            "policy",
            "clients",
            "queries_per_min",
            "p50_ms",
            "p95_ms",
            "max_ms",
            "peak_total_staged_bytes",
            "governor_limit_bytes",
            "staged_over_held_violations",
            "peak_rss_bytes",
            "failed_queries",
            "matches_off",
        ] {
            assert!(!s[key].is_null(), "{key} in {s}");
        }
        assert_eq!(s["governor_limit_bytes"], 64 << 10);
        assert_eq!(s["failed_queries"], 0);
        assert_eq!(s["staged_over_held_violations"], 0);
        assert_eq!(s["matches_off"], true);
    }
}

//! Medians, ratios against `off`, the physical floor, and the JSON / markdown
//! renderings of one benchmark run.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use datafusion_prefetch::{ByteSize, PrefetchOptions};
use serde::Serialize;

use crate::run::{Measurement, RunConfig};
use crate::suites::Suite;

/// All measurements of one run, and what is needed to judge them.
pub struct Report {
    suite: Suite,
    config: RunConfig,
    typical_latency: Duration,
    measurements: Vec<Measurement>,
    no_latency_ms: BTreeMap<String, f64>,
    budget: u64,
}

#[derive(Serialize)]
struct PolicySummary {
    suite: String,
    policy: String,
    latency: String,
    partitions: usize,
    total_wall_ms: f64,
    speedup_vs_off: f64,
    floor_ms: f64,
    wall_over_floor: f64,
    peak_staged_bytes: u64,
    memory_budget: u64,
}

#[derive(Serialize)]
struct Output<'a> {
    measurements: &'a [Measurement],
    summaries: Vec<PolicySummary>,
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

impl Report {
    pub fn new(suite: Suite, config: RunConfig, typical_latency: Duration) -> Self {
        let budget = config
            .settings
            .iter()
            .find(|(k, _)| k == "memory_budget")
            .and_then(|(_, v)| v.parse::<ByteSize>().ok())
            .unwrap_or_else(|| PrefetchOptions::default().memory_budget())
            .as_u64();
        Self {
            suite,
            config,
            typical_latency,
            measurements: vec![],
            no_latency_ms: BTreeMap::new(),
            budget,
        }
    }

    pub fn add(&mut self, measurement: Measurement) {
        self.measurements.push(measurement);
    }

    pub fn no_latency_wall_ms(&mut self, query: &str, ms: f64) {
        self.no_latency_ms.insert(query.to_string(), ms);
    }

    /// Mark every measurement against the first `off` run of its query, and
    /// check the budget; print and return whether everything held.
    pub fn check_results(&mut self) -> bool {
        let mut reference: BTreeMap<String, (usize, String)> = BTreeMap::new();
        for m in self.measurements.iter().filter(|m| m.policy == "off") {
            reference
                .entry(m.query.clone())
                .or_insert((m.rows, m.checksum.clone()));
        }
        let mut ok = true;
        for m in &mut self.measurements {
            let expected = &reference[&m.query];
            m.matches_off = (m.rows, &m.checksum) == (expected.0, &expected.1);
            if !m.matches_off {
                ok = false;
                eprintln!(
                    "MISMATCH {} {} {} iteration {}: {} rows / {} vs off {} rows / {}",
                    m.suite,
                    m.query,
                    m.policy,
                    m.iteration,
                    m.rows,
                    m.checksum,
                    expected.0,
                    expected.1
                );
            }
            if m.peak_staged_bytes > self.budget {
                ok = false;
                eprintln!(
                    "OVER BUDGET {} {} {}: peak staged {} > budget {}",
                    m.suite, m.query, m.policy, m.peak_staged_bytes, self.budget
                );
            }
        }
        ok
    }

    fn policies(&self) -> Vec<String> {
        let mut seen = vec![];
        for m in &self.measurements {
            if !seen.contains(&m.policy) {
                seen.push(m.policy.clone());
            }
        }
        seen
    }

    fn median_of(&self, query: &str, policy: &str, f: impl Fn(&Measurement) -> f64) -> f64 {
        median(
            self.measurements
                .iter()
                .filter(|m| m.query == query && m.policy == policy)
                .map(f)
                .collect(),
        )
    }

    /// The floor no policy can beat for `query`: dependent round trips × the
    /// typical latency + bytes over the aggregate bandwidth, and never less
    /// than the fastest policy takes without latency.
    fn floor_ms(&self, query: &str) -> f64 {
        let bytes = self.median_of(query, "off", |m| m.bytes_fetched as f64);
        let store = &self.config.store;
        let transfer_ms = match store.bandwidth_bytes_per_sec {
            Some(bw) => {
                let connections = store.max_connections.unwrap_or(128) as f64;
                bytes / (bw as f64 * connections) * 1e3
            }
            None => 0.0,
        };
        let latency_ms = self.typical_latency.as_secs_f64() * 1e3;
        let physical = self.suite.dependent_round_trips as f64 * latency_ms + transfer_ms;
        // Without latency the run itself is the floor: its fastest policy.
        let no_latency = self.no_latency_ms.get(query).copied().unwrap_or_else(|| {
            self.policies()
                .iter()
                .map(|p| self.median_of(query, p, |m| m.wall_ms))
                .fold(f64::INFINITY, f64::min)
        });
        physical.max(no_latency)
    }

    fn summaries(&self) -> Vec<PolicySummary> {
        let queries: Vec<String> = self.suite.queries.iter().map(|q| q.name.clone()).collect();
        let total = |policy: &str| -> f64 {
            queries
                .iter()
                .map(|q| self.median_of(q, policy, |m| m.wall_ms))
                .sum()
        };
        let off_total = total("off");
        let floor: f64 = queries.iter().map(|q| self.floor_ms(q)).sum();
        self.policies()
            .into_iter()
            .map(|policy| {
                let total_wall_ms = total(&policy);
                PolicySummary {
                    suite: self.suite.name.to_string(),
                    latency: self.config.latency_label.clone(),
                    partitions: self.config.partitions,
                    speedup_vs_off: off_total / total_wall_ms,
                    floor_ms: floor,
                    wall_over_floor: total_wall_ms / floor,
                    peak_staged_bytes: self
                        .measurements
                        .iter()
                        .filter(|m| m.policy == policy)
                        .map(|m| m.peak_staged_bytes)
                        .max()
                        .unwrap_or(0),
                    memory_budget: self.budget,
                    total_wall_ms,
                    policy,
                }
            })
            .collect()
    }

    pub fn json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&Output {
            measurements: &self.measurements,
            summaries: self.summaries(),
        })
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "### {} — latency {}, {} partition(s), budget {}\n",
            self.suite.name,
            self.config.latency_label,
            self.config.partitions,
            ByteSize::new(self.budget)
        );
        let _ = writeln!(
            out,
            "| query | policy | wall ms (median) | vs off | ttfb ms | requests | MiB fetched | MiB wasted | peak staged MiB | wall / floor | matches off |"
        );
        let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for query in &self.suite.queries {
            let off = self.median_of(&query.name, "off", |m| m.wall_ms);
            let floor = self.floor_ms(&query.name);
            for policy in self.policies() {
                let q = &query.name;
                let wall = self.median_of(q, &policy, |m| m.wall_ms);
                let matches = self
                    .measurements
                    .iter()
                    .filter(|m| &m.query == q && m.policy == policy)
                    .all(|m| m.matches_off);
                let _ = writeln!(
                    out,
                    "| {q} | {policy} | {wall:.1} | {:.2}x | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} | {} |",
                    off / wall,
                    self.median_of(q, &policy, |m| m.ttfb_ms),
                    self.median_of(q, &policy, |m| m.requests as f64),
                    mib(self.median_of(q, &policy, |m| m.bytes_fetched as f64) as u64),
                    mib(self.median_of(q, &policy, |m| m.bytes_wasted as f64) as u64),
                    mib(self.median_of(q, &policy, |m| m.peak_staged_bytes as f64) as u64),
                    wall / floor,
                    if matches { "yes" } else { "NO" }
                );
            }
        }
        let _ = writeln!(
            out,
            "\n| policy | total wall ms | speedup vs off | floor ms | wall / floor |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|");
        for s in self.summaries() {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.2}x | {:.1} | {:.2} |",
                s.policy, s.total_wall_ms, s.speedup_vs_off, s.floor_ms, s.wall_over_floor
            );
        }
        out
    }
}

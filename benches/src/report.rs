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
    /// The least round trip the store's latency model draws.
    least_latency: Duration,
    measurements: Vec<Measurement>,
    no_latency_ms: BTreeMap<String, f64>,
    /// Queries that cannot run on this data under stock DataFusion, and why.
    skipped: BTreeMap<String, String>,
    budget: u64,
    /// The result every run of a query must match, when it comes from outside
    /// the measured runs (local DataFusion `off` for a Ballista run); else the
    /// first measured `off` run.
    reference: BTreeMap<String, (usize, String)>,
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
    /// Summed over the policy's measurements: must be 0.
    staged_over_held_violations: u64,
    /// Over one pass of the queries (each query's median, averaged over
    /// latency seeds, added up), beside the data bytes its scans fetched:
    /// what keeping ranges costs in copies.
    bytes_copied: u64,
    /// Over one pass of the queries, as `bytes_copied`.
    scan_bytes_fetched: u64,
    /// Over one pass of the queries, as `bytes_copied`: what the store
    /// received (retries included), the `503`s among them, the hedges of
    /// `auto` and those that won, and what the attempts cost in dollars.
    attempts: u64,
    throttled: u64,
    hedges: u64,
    hedges_won: u64,
    cost_usd: f64,
    memory_budget: u64,
}

#[derive(Serialize)]
struct Output<'a> {
    measurements: &'a [Measurement],
    summaries: Vec<PolicySummary>,
    skipped: &'a BTreeMap<String, String>,
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

/// A figure over runs at several latency seeds: the median over each seed's
/// runs (its iterations), then the mean over the seeds. One seed: the median.
fn seed_averaged(values: impl IntoIterator<Item = (u64, f64)>) -> f64 {
    let mut by_seed: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
    for (seed, value) in values {
        by_seed.entry(seed).or_default().push(value);
    }
    if by_seed.is_empty() {
        return f64::NAN;
    }
    let seeds = by_seed.len() as f64;
    by_seed.into_values().map(median).sum::<f64>() / seeds
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

impl Report {
    pub fn new(suite: Suite, config: RunConfig, least_latency: Duration) -> Self {
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
            least_latency,
            measurements: vec![],
            no_latency_ms: BTreeMap::new(),
            skipped: BTreeMap::new(),
            budget,
            reference: BTreeMap::new(),
        }
    }

    /// Check every run of `query` against this result instead of its first
    /// `off` run.
    pub fn reference(&mut self, query: &str, rows: usize, checksum: String) {
        self.reference.insert(query.to_string(), (rows, checksum));
    }

    pub fn add(&mut self, measurement: Measurement) {
        self.measurements.push(measurement);
    }

    pub fn no_latency_wall_ms(&mut self, query: &str, ms: f64) {
        self.no_latency_ms.insert(query.to_string(), ms);
    }

    /// Leave `query` out of every table: it does not run under `off`.
    pub fn skip(&mut self, query: &str, reason: String) {
        self.measurements.retain(|m| m.query != query);
        self.no_latency_ms.remove(query);
        self.skipped.insert(query.to_string(), reason);
    }

    /// Whether `query` read any data (not answered from statistics alone).
    pub fn fetched_data(&self, query: &str) -> bool {
        self.measurements
            .iter()
            .any(|m| m.query == query && m.bytes_fetched > 0)
    }

    pub fn is_skipped(&self, query: &str) -> bool {
        self.skipped.contains_key(query)
    }

    /// The queries measured, in suite order.
    pub fn queries(&self) -> Vec<String> {
        self.suite
            .queries
            .iter()
            .map(|q| q.name.clone())
            .filter(|q| !self.is_skipped(q))
            .collect()
    }

    /// The median wall time of every measured query under every policy.
    pub fn median_wall_ms(&self) -> Vec<(String, Vec<(String, f64)>)> {
        let policies = self.policies();
        self.queries()
            .into_iter()
            .map(|q| {
                let per_policy = policies
                    .iter()
                    .map(|p| (p.clone(), self.median_of(&q, p, |m| m.wall_ms)))
                    .collect();
                (q, per_policy)
            })
            .collect()
    }

    /// `suite — latency …` for titles.
    pub fn title(&self) -> String {
        let engine = match &self.config.ballista {
            Some(_) => " on Ballista",
            None => "",
        };
        let seeds: std::collections::BTreeSet<u64> =
            self.measurements.iter().map(|m| m.latency_seed).collect();
        let seeds = match seeds.len() {
            0 | 1 => String::new(),
            n => format!(" ({n} latency seeds: medians over iterations, averaged over seeds)"),
        };
        format!(
            "{}{engine} — latency {}{seeds}, {} partition(s), budget {}",
            self.suite.name,
            self.config.latency_label,
            self.config.partitions,
            ByteSize::new(self.budget)
        )
    }

    /// Whether `query`'s runs are compared by row count only: its result
    /// depends on tie-breaking, which varies with more than one partition.
    fn rows_only(&self, query: &str) -> bool {
        self.config.partitions > 1 && self.suite.queries.iter().any(|q| q.name == query && q.ties)
    }

    /// Mark every measurement against the reference of its query, by default
    /// the first `off` run of its query (by row count alone where
    /// [`Self::rows_only`]); check the budget, and that every byte the scans
    /// fetched was used or wasted; print and return whether everything held.
    pub fn check_results(&mut self) -> bool {
        let mut reference = self.reference.clone();
        for m in self.measurements.iter().filter(|m| m.policy == "off") {
            reference
                .entry(m.query.clone())
                .or_insert((m.rows, m.checksum.clone()));
        }
        let rows_only: Vec<bool> = self
            .measurements
            .iter()
            .map(|m| self.rows_only(&m.query))
            .collect();
        let mut ok = true;
        for (m, rows_only) in self.measurements.iter_mut().zip(rows_only) {
            let expected = &reference[&m.query];
            m.matches_off = m.rows == expected.0 && (rows_only || m.checksum == expected.1);
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
            if m.bytes_wasted > m.scan_bytes_fetched
                || m.scan_bytes_fetched - m.bytes_wasted != m.bytes_used
            {
                ok = false;
                eprintln!(
                    "WASTE DOES NOT BALANCE {} {} {}: fetched {} - wasted {} != used {}",
                    m.suite, m.query, m.policy, m.scan_bytes_fetched, m.bytes_wasted, m.bytes_used
                );
            }
            if m.staged_over_held_violations > 0 {
                ok = false;
                eprintln!(
                    "STAGED OVER HELD {} {} {}: {} changes left staged bytes without a hold",
                    m.suite, m.query, m.policy, m.staged_over_held_violations
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

    pub fn policies(&self) -> Vec<String> {
        let mut seen = vec![];
        for m in &self.measurements {
            if !seen.contains(&m.policy) {
                seen.push(m.policy.clone());
            }
        }
        seen
    }

    /// `f` of `query` under `policy`: the median over iterations, averaged
    /// over the latency seeds ([`seed_averaged`]).
    fn median_of(&self, query: &str, policy: &str, f: impl Fn(&Measurement) -> f64) -> f64 {
        seed_averaged(
            self.measurements
                .iter()
                .filter(|m| m.query == query && m.policy == policy)
                .map(|m| (m.latency_seed, f(m))),
        )
    }

    /// The floor no policy can beat for `query`, a lower bound on its wall
    /// time: the largest of the time to decode it with every file already in
    /// memory (the best policy of the run's decode-only runs) plus the one
    /// round trip before its first byte lands, its chain of dependent round
    /// trips (per scan, × the scans in its plan), and its bytes over the
    /// aggregate bandwidth; round trips at the least latency the store's
    /// model draws.
    fn floor_ms(&self, query: &str) -> f64 {
        let bytes = self.median_of(query, "off", |m| m.bytes_fetched as f64);
        // A query answered from statistics alone scans nothing: no round trip.
        let scans = self.median_of(query, "off", |m| m.scans as f64);
        let store = &self.config.store;
        let transfer_ms = match store.bandwidth_bytes_per_sec {
            Some(bw) => {
                let connections = store.max_connections.unwrap_or(128) as f64;
                bytes / (bw as f64 * connections) * 1e3
            }
            None => 0.0,
        };
        let round_trip_ms = self.least_latency.as_secs_f64() * 1e3;
        let chain_ms = scans * self.suite.dependent_round_trips as f64 * round_trip_ms;
        // Decoding starts when the first bytes have landed.
        let first_byte_ms = if bytes > 0.0 && scans > 0.0 {
            round_trip_ms
        } else {
            0.0
        };
        // Without latency the run itself is the floor: its fastest policy.
        let decode_ms = self.no_latency_ms.get(query).copied().unwrap_or_else(|| {
            self.policies()
                .iter()
                .map(|p| self.median_of(query, p, |m| m.wall_ms))
                .fold(f64::INFINITY, f64::min)
        });
        (first_byte_ms + decode_ms).max(chain_ms).max(transfer_ms)
    }

    /// Every query and policy whose median wall time is below its floor:
    /// `(query, policy, wall / floor)`. A floor is a lower bound, so any of
    /// these is a bug in the floor.
    pub fn below_floor(&self) -> Vec<(String, String, f64)> {
        let mut below = vec![];
        for query in self.queries() {
            let floor = self.floor_ms(&query);
            for policy in self.policies() {
                let ratio = self.median_of(&query, &policy, |m| m.wall_ms) / floor;
                if ratio < 1.0 {
                    below.push((query.clone(), policy, ratio));
                }
            }
        }
        below
    }

    fn summaries(&self) -> Vec<PolicySummary> {
        let queries = self.queries();
        // One pass over the queries: each query's figure (median over
        // iterations, averaged over seeds), added up.
        let per_pass = |policy: &str, f: fn(&Measurement) -> f64| -> f64 {
            queries.iter().map(|q| self.median_of(q, policy, f)).sum()
        };
        let total = |policy: &str| per_pass(policy, |m| m.wall_ms);
        let off_total = total("off");
        let floor: f64 = queries.iter().map(|q| self.floor_ms(q)).sum();
        self.policies()
            .into_iter()
            .map(|policy| {
                let total_wall_ms = total(&policy);
                let of_policy = || self.measurements.iter().filter(|m| m.policy == policy);
                let sum = |field: fn(&Measurement) -> u64| of_policy().map(field).sum();
                PolicySummary {
                    suite: self.suite.name.to_string(),
                    latency: self.config.latency_label.clone(),
                    partitions: self.config.partitions,
                    speedup_vs_off: off_total / total_wall_ms,
                    floor_ms: floor,
                    wall_over_floor: total_wall_ms / floor,
                    peak_staged_bytes: of_policy().map(|m| m.peak_staged_bytes).max().unwrap_or(0),
                    staged_over_held_violations: sum(|m| m.staged_over_held_violations),
                    bytes_copied: per_pass(&policy, |m| m.bytes_copied as f64).round() as u64,
                    scan_bytes_fetched: per_pass(&policy, |m| m.scan_bytes_fetched as f64).round()
                        as u64,
                    attempts: per_pass(&policy, |m| m.attempts as f64).round() as u64,
                    throttled: per_pass(&policy, |m| m.throttled as f64).round() as u64,
                    hedges: per_pass(&policy, |m| m.hedges as f64).round() as u64,
                    hedges_won: per_pass(&policy, |m| m.hedges_won as f64).round() as u64,
                    cost_usd: per_pass(&policy, |m| m.cost_usd),
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
            skipped: &self.skipped,
        })
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "### {}\n", self.title());
        let _ = writeln!(
            out,
            "| query | policy | wall ms (median) | vs off | ttfb ms | scan ttfb ms | requests | attempts | 503s | MiB fetched | MiB wasted | peak staged MiB | wall / floor | matches off |"
        );
        let _ = writeln!(
            out,
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
        );
        for q in &self.queries() {
            let off = self.median_of(q, "off", |m| m.wall_ms);
            let floor = self.floor_ms(q);
            for policy in self.policies() {
                let wall = self.median_of(q, &policy, |m| m.wall_ms);
                let matches = self
                    .measurements
                    .iter()
                    .filter(|m| &m.query == q && m.policy == policy)
                    .all(|m| m.matches_off);
                let _ = writeln!(
                    out,
                    "| {q} | {policy} | {wall:.1} | {:.2}x | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.2} | {} |",
                    off / wall,
                    self.median_of(q, &policy, |m| m.ttfb_ms),
                    self.median_of(q, &policy, |m| m.scan_ttfb_ms),
                    self.median_of(q, &policy, |m| m.requests as f64),
                    self.median_of(q, &policy, |m| m.attempts as f64),
                    self.median_of(q, &policy, |m| m.throttled as f64),
                    mib(self.median_of(q, &policy, |m| m.bytes_fetched as f64) as u64),
                    mib(self.median_of(q, &policy, |m| m.bytes_wasted as f64) as u64),
                    mib(self.median_of(q, &policy, |m| m.peak_staged_bytes as f64) as u64),
                    wall / floor,
                    match (matches, self.rows_only(q)) {
                        (false, _) => "NO",
                        (true, false) => "yes",
                        (true, true) => "rows",
                    }
                );
            }
        }
        let _ = writeln!(
            out,
            "\n| policy | total wall ms | speedup vs off | floor ms | wall / floor | \
             MiB fetched by scans | MiB copied to be kept | attempts | 503s | hedges (won) | \
             request cost | staged > held |"
        );
        let _ = writeln!(
            out,
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        );
        for s in self.summaries() {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.2}x | {:.1} | {:.2} | {:.1} | {:.1} | {} | {} | {} ({}) | ${:.6} | {} |",
                s.policy,
                s.total_wall_ms,
                s.speedup_vs_off,
                s.floor_ms,
                s.wall_over_floor,
                mib(s.scan_bytes_fetched),
                mib(s.bytes_copied),
                s.attempts,
                s.throttled,
                s.hedges,
                s.hedges_won,
                s.cost_usd,
                s.staged_over_held_violations
            );
        }
        let _ = writeln!(
            out,
            "\nAttempts: every request the store received while the query ran, each \
             retry after a `503` one of its own; request cost: the attempts at S3 \
             Standard's $0.0004 per 1,000 GETs."
        );
        if self.queries().iter().any(|q| self.rows_only(q)) {
            let _ = writeln!(
                out,
                "\n`rows`: the result depends on how ties at its LIMIT are broken, which \
                 varies between runs with more than one partition (under `off` too); only \
                 the row count is compared."
            );
        }
        if self.config.ballista.is_some() {
            let _ = writeln!(
                out,
                "\nOn Ballista the scans run in the executor processes: requests, MiB, peak \
                 staged and the floor are not measured here (they show the client's share), \
                 and `matches off` compares every run with local DataFusion `off`."
            );
        }
        if !self.skipped.is_empty() {
            let _ = writeln!(out, "\nSkipped (they fail under `off` on this data):\n");
            for (query, reason) in &self.skipped {
                let reason = reason.replace('\n', " ");
                let _ = writeln!(out, "- {query}: {reason}");
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_is_the_mean_over_seeds_of_each_seeds_median() {
        // Seed 7: iterations 100, 300, 110 (median 110); seed 8: 200, 220
        // (median 210). Mean 160, where the median of all five would be 200.
        let runs = [(7, 100.0), (8, 200.0), (7, 300.0), (8, 220.0), (7, 110.0)];
        assert_eq!(seed_averaged(runs), 160.0);
        // One seed: the plain median.
        assert_eq!(seed_averaged([(1, 5.0), (1, 1.0), (1, 3.0)]), 3.0);
        assert!(seed_averaged([]).is_nan());
    }
}

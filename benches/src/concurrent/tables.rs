//! The markdown the suite prints: per count of clients, what each policy
//! did and what it waited on, and a sweep table across counts.

use super::ConcurrentConfig;
use super::summary::PolicySummary;
use crate::suites::Suite;

pub(super) fn markdown(
    suite: &Suite,
    config: &ConcurrentConfig,
    summaries: &[PolicySummary],
) -> String {
    let pool = config
        .pool_limit
        .map_or("unbounded".to_string(), |l| format!("FairSpillPool {l}"));
    let mut out = format!(
        "concurrent: {} clients, {} ({} queries each), latency {}, {} partitions, memory pool {pool}, {} busy loops\n\n",
        config
            .clients
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        suite.name,
        suite.queries.len(),
        config.latency_label,
        config.partitions,
        config.busy_loops
    );
    for &clients in &config.clients {
        let runs: Vec<&PolicySummary> = summaries.iter().filter(|s| s.clients == clients).collect();
        out.push_str(&format!("### {clients} clients\n\n"));
        out.push_str(&results_table(&runs));
        out.push('\n');
        out.push_str(&causes_table(&runs));
        out.push('\n');
        out.push_str(&scans_table(&runs));
        out.push('\n');
    }
    if config.clients.len() > 1 || config.ceiling {
        out.push_str(&sweep_table(config, summaries));
    }
    out
}

/// A run's name in the tables: the policy, and the latency if it is the
/// ceiling's.
fn label(s: &PolicySummary, latency: &str) -> String {
    if s.latency == latency {
        s.policy.clone()
    } else {
        format!("{} at {}", s.policy, s.latency)
    }
}

fn results_table(runs: &[&PolicySummary]) -> String {
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let mut out = String::from(
        "| policy | queries/min | by round | vs off | p50 ms | p95 ms | max ms | peak staged MiB (sampled / exact) | held MiB | limit MiB | peak RSS MiB | failed | matches off |\n",
    );
    out.push_str("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n");
    let off = runs
        .iter()
        .find(|s| s.policy == "off")
        .map_or(f64::NAN, |s| s.queries_per_min);
    let latency = runs.first().map_or("", |s| s.latency.as_str());
    for s in runs {
        out.push_str(&format!(
            "| {} | {:.1} | {} | {:.2}x | {:.0} | {:.0} | {:.0} | {:.1} / {:.1} | {:.1} | {:.1} | {:.0} | {} | {} |\n",
            label(s, latency),
            s.queries_per_min,
            s.rounds_queries_per_min
                .iter()
                .map(|qpm| format!("{qpm:.1}"))
                .collect::<Vec<_>>()
                .join(" / "),
            s.queries_per_min / off,
            s.p50_ms,
            s.p95_ms,
            s.max_ms,
            mib(s.peak_total_staged_bytes),
            mib(s.peak_total_staged_bytes_exact),
            mib(s.peak_total_held_bytes),
            mib(s.governor_limit_bytes),
            mib(s.peak_rss_bytes),
            s.failed_queries,
            if s.matches_off { "yes" } else { "NO" }
        ));
    }
    out
}

/// The scans' own counters (`prefetch_*`, as `EXPLAIN ANALYZE` names
/// them), per query: what each policy fetched, split, wasted, shed, copied
/// and sliced, and how often its scans waited on the governor.
fn scans_table(runs: &[&PolicySummary]) -> String {
    const COLUMNS: [(&str, &str, bool); 11] = [
        ("requests", "prefetch_requests", false),
        ("split", "prefetch_requests_split", false),
        ("merged", "prefetch_requests_merged", false),
        ("fetched MiB", "prefetch_bytes_fetched", true),
        ("wasted MiB", "prefetch_bytes_wasted", true),
        ("shed MiB", "prefetch_bytes_shed", true),
        ("copied MiB", "prefetch_bytes_copied", true),
        ("files in slices", "prefetch_files_page_granular", false),
        ("slices", "prefetch_slices", false),
        ("governor waits", "prefetch_governor_waits", false),
        ("stalled reads ahead", "prefetch_stalled_read_ahead", false),
    ];
    let mut out = String::from("| policy, per query |");
    for (heading, _, _) in COLUMNS {
        out.push_str(&format!(" {heading} |"));
    }
    out.push_str("\n|---|");
    out.push_str(&"---:|".repeat(COLUMNS.len()));
    out.push('\n');
    let latency = runs.first().map_or("", |s| s.latency.as_str());
    for s in runs {
        out.push_str(&format!("| {} |", label(s, latency)));
        let queries = s.queries.max(1) as f64;
        for (_, name, bytes) in COLUMNS {
            let count = s.scans.get(name).copied().unwrap_or(0) as f64 / queries;
            if bytes {
                out.push_str(&format!(" {:.1} |", count / (1 << 20) as f64));
            } else {
                out.push_str(&format!(" {count:.1} |"));
            }
        }
        out.push('\n');
    }
    out
}

fn causes_table(runs: &[&PolicySummary]) -> String {
    let mut out = String::from(
        "| policy | requests | attempts | 503s | CPU ms / query | window now / peak | cuts (slow / 503 / gave up) | withdrawn | hedges | reads ahead queued | queued s | decoders waiting s | hurried |\n",
    );
    out.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    let latency = runs.first().map_or("", |s| s.latency.as_str());
    for s in runs {
        let window = s.window.as_ref().map_or_else(
            || "| - | - | - | - | - | - | - | - |".to_string(),
            |w| {
                format!(
                    "| {} / {} | {} / {} / {} | {} | {} | {} | {:.1} | {:.1} | {} |",
                    w.limit_at_end,
                    w.peak_limit,
                    w.cuts_on_slow_answers,
                    w.cuts_on_refusals,
                    w.cuts_on_give_ups,
                    w.withdrawn,
                    w.hedges,
                    w.reads_ahead_queued,
                    w.queued_ms / 1e3,
                    w.queued_while_wanted_ms / 1e3,
                    w.hurried
                )
            },
        );
        out.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} {window}\n",
            label(s, latency),
            s.requests,
            s.attempts,
            s.throttled,
            s.cpu_ms_per_query
        ));
    }
    out
}

/// Queries per minute by count of clients: each policy, the ceiling
/// (`auto` with no latency, measured in the same run), and `auto`'s share
/// of it and ratio to the best fixed policy.
fn sweep_table(config: &ConcurrentConfig, summaries: &[PolicySummary]) -> String {
    let mut policies: Vec<&str> = vec![];
    for s in summaries
        .iter()
        .filter(|s| s.latency == config.latency_label)
    {
        if !policies.contains(&s.policy.as_str()) {
            policies.push(&s.policy);
        }
    }
    let mut out = String::from("### queries/min by clients\n\n| clients |");
    for policy in &policies {
        out.push_str(&format!(" {policy} |"));
    }
    out.push_str(" ceiling (auto at none) | auto / ceiling | auto / best fixed | auto p95 / off p95 |\n|---:|");
    out.push_str(&"---:|".repeat(policies.len() + 4));
    out.push('\n');
    for &clients in &config.clients {
        let find = |policy: &str, latency: &str| {
            summaries
                .iter()
                .find(|s| s.clients == clients && s.policy == policy && s.latency == latency)
        };
        let measured = |policy: &str| find(policy, &config.latency_label);
        out.push_str(&format!("| {clients} |"));
        for policy in &policies {
            let qpm = measured(policy).map_or(f64::NAN, |s| s.queries_per_min);
            out.push_str(&format!(" {qpm:.1} |"));
        }
        let auto = measured("auto");
        let ceiling = find("auto", "none").filter(|_| config.latency_label != "none");
        let best_fixed = summaries
            .iter()
            .filter(|s| s.clients == clients && s.latency == config.latency_label)
            .filter(|s| !["off", "auto"].contains(&s.policy.as_str()))
            .map(|s| s.queries_per_min)
            .fold(f64::NAN, f64::max);
        let qpm = |s: Option<&PolicySummary>| s.map_or(f64::NAN, |s| s.queries_per_min);
        let p95 = |s: Option<&PolicySummary>| s.map_or(f64::NAN, |s| s.p95_ms);
        out.push_str(&format!(
            " {:.1} | {:.2} | {:.2}x | {:.2} |\n",
            qpm(ceiling),
            qpm(auto) / qpm(ceiling),
            qpm(auto) / best_fixed,
            p95(auto) / p95(measured("off"))
        ));
    }
    out
}

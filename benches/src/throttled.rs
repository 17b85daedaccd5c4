//! The `throttled` suite: a store that answers `503 SlowDown` over its
//! request rate, in the two shapes where throttling decides the outcome —
//! many tiny files (`many_files`, 10,000 files) and TPC-H SF1 — each run as
//! its own suite with a rate limit that binds on this machine, `off` beside
//! `pipelined` (at file-open depths 8, 64 and 256 for the tiny files) and
//! `auto`. Each part reports wall time, attempts, `503`s, hedges and what
//! the attempts cost; the suite writes both parts' tables to `--markdown`
//! and both JSON reports, under `many_files` and `tpch`, to `--json`.

use std::path::{Path, PathBuf};

use crate::Args;

/// The tiny files: 10,000 of them at 20 ms round trips, 500 requests a
/// second per prefix (the table is one prefix): planning and execution
/// each send some 10,000 requests, so the limit binds throughout.
const MANY_FILES: usize = 10_000;
const MANY_FILES_LATENCY: &str = "fixed:20";
const MANY_FILES_RATE: &str = "500";
const MANY_FILES_POLICIES: [&str; 4] = ["pipelined@8", "pipelined@64", "pipelined@256", "auto"];

/// TPC-H SF1 at S3's latency, 20 requests a second per prefix (each table
/// is one): `auto`'s first waves and `pipelined`'s read-ahead exceed it.
const TPCH_LATENCY: &str = "s3";
const TPCH_RATE: &str = "20";
const TPCH_POLICIES: [&str; 2] = ["pipelined", "auto"];

/// The two parts of the suite as the arguments of their own suites. Of
/// `args`, `--partitions`, `--data-dir` and the `prefetch.*` settings apply
/// to both, `--iterations` to the tiny files and `--scale` to TPC-H, which
/// runs once per latency seed (three, as the tpch suite does at `s3`).
fn parts(args: &Args) -> [(&'static str, Args); 2] {
    let policies = |names: &[&str]| names.iter().map(|p| p.to_string()).collect();
    let many_files = Args {
        suite: "many_files".into(),
        files: vec![MANY_FILES],
        latency: MANY_FILES_LATENCY.into(),
        rate_limit: Some(MANY_FILES_RATE.into()),
        policies: policies(&MANY_FILES_POLICIES),
        json: args.json.as_deref().map(|p| part_path(p, "many_files")),
        markdown: args.markdown.as_deref().map(|p| part_path(p, "many_files")),
        ..args.clone()
    };
    let tpch = Args {
        suite: "tpch".into(),
        latency: TPCH_LATENCY.into(),
        rate_limit: Some(TPCH_RATE.into()),
        policies: policies(&TPCH_POLICIES),
        iterations: 1,
        json: args.json.as_deref().map(|p| part_path(p, "tpch")),
        markdown: args.markdown.as_deref().map(|p| part_path(p, "tpch")),
        ..args.clone()
    };
    [("many_files", many_files), ("tpch", tpch)]
}

/// Where a part writes what the suite then merges: beside `path`.
fn part_path(path: &Path, part: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{part}.part"));
    path.with_file_name(name)
}

/// Run both parts; `false` if either found an answer that differs from
/// `off`'s.
pub async fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let mut all_match = true;
    let mut markdown = String::new();
    let mut json = serde_json::Map::new();
    for (name, part) in parts(args) {
        eprintln!(
            "throttled: {name} at {} with {} requests/s per prefix",
            part.latency,
            part.rate_limit.as_deref().unwrap_or("?")
        );
        all_match &= Box::pin(crate::bench(part.clone())).await?;
        if let Some(path) = &part.markdown {
            markdown.push_str(&std::fs::read_to_string(path)?);
            markdown.push('\n');
            std::fs::remove_file(path)?;
        }
        if let Some(path) = &part.json {
            let value: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
            json.insert(name.into(), value);
            std::fs::remove_file(path)?;
        }
    }
    if let Some(path) = &args.markdown {
        std::fs::write(path, markdown)?;
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&json)?)?;
    }
    Ok(all_match)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[test]
    fn the_parts_are_their_suites_at_a_limit_that_binds() {
        let args = Args::parse_from([
            "prefetch-bench",
            "--suite",
            "throttled",
            "--iterations",
            "3",
            "--json",
            "/tmp/out.json",
        ]);
        let [(_, many), (_, tpch)] = parts(&args);
        assert_eq!(
            (many.suite.as_str(), many.files.as_slice(), many.iterations),
            ("many_files", &[10_000][..], 3)
        );
        assert_eq!(many.rate_limit.as_deref(), Some("500"));
        assert_eq!(many.policies, MANY_FILES_POLICIES);
        assert_eq!(
            many.json,
            Some(PathBuf::from("/tmp/out.json.many_files.part"))
        );
        assert_eq!((tpch.suite.as_str(), tpch.latency.as_str()), ("tpch", "s3"));
        assert_eq!(tpch.rate_limit.as_deref(), Some("20"));
        assert_eq!(tpch.iterations, 1);
        assert_eq!(tpch.markdown, None);
    }
}

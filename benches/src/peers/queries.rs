//! The queries of the race: a quick set of seven, and the full set — all 22
//! TPC-H and all 43 ClickBench queries — with the SQL each engine is given
//! and how their results are compared.

use crate::{clickbench, tpch};

/// Which queries `--suite peers` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Race {
    /// Seven queries every engine (PyArrow included, by hand) runs: one
    /// cross-file sum, TPC-H q1 and q6 on `lineitem`, ClickBench q1, q2, q7
    /// and q20.
    #[default]
    Quick,
    /// All 22 TPC-H queries and all 43 ClickBench queries, in each engine's
    /// SQL; PyArrow (no SQL) runs the ones written by hand in `peers.py`.
    Full,
}

/// How an engine's result is compared with DataFusion `off`'s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// Row count and the engine-independent checksum of every row.
    Checksum,
    /// Row count only: the query's `LIMIT` cuts through ties (or has no
    /// `ORDER BY`), so which rows come back is each engine's choice.
    RowCount,
}

/// A query every engine runs, on tables of one data suite.
#[derive(Debug, Clone)]
pub struct PeerQuery {
    pub name: String,
    /// The data suite its tables come from (a benchmark of the race).
    pub suite: &'static str,
    pub tables: Vec<&'static str>,
    /// DataFusion's SQL.
    pub sql: String,
    /// The same query for DuckDB and Polars; PyArrow runs a hand-written
    /// equivalent (`peers.py`) where there is one.
    pub portable_sql: String,
    pub compare: Compare,
}

impl PeerQuery {
    fn same_sql(name: String, suite: &'static str, tables: Vec<&'static str>, sql: String) -> Self {
        Self {
            name,
            suite,
            tables,
            portable_sql: sql.clone(),
            sql,
            compare: Compare::Checksum,
        }
    }
}

/// TPC-H Q1 with its date computed (`date '1998-12-01' - interval '90' day`,
/// which not every engine's SQL accepts) and its averages over DOUBLE:
/// DataFusion truncates an average of DECIMAL(15,2) to six places, where
/// DuckDB and Polars return a float, so the results would differ in the
/// fifth digit.
const TPCH_Q1: &str = "SELECT l_returnflag, l_linestatus, sum(l_quantity) AS sum_qty, \
    sum(l_extendedprice) AS sum_base_price, \
    sum(l_extendedprice * (1 - l_discount)) AS sum_disc_price, \
    sum(l_extendedprice * (1 - l_discount) * (1 + l_tax)) AS sum_charge, \
    avg(CAST(l_quantity AS DOUBLE)) AS avg_qty, avg(CAST(l_extendedprice AS DOUBLE)) AS avg_price, \
    avg(CAST(l_discount AS DOUBLE)) AS avg_disc, \
    count(*) AS count_order \
    FROM lineitem WHERE l_shipdate <= DATE '1998-09-02' \
    GROUP BY l_returnflag, l_linestatus ORDER BY l_returnflag, l_linestatus";

/// TPC-H Q6 with its bounds computed.
const TPCH_Q6: &str = "SELECT sum(l_extendedprice * l_discount) AS revenue FROM lineitem \
    WHERE l_shipdate >= DATE '1994-01-01' AND l_shipdate < DATE '1995-01-01' \
    AND l_discount BETWEEN 0.05 AND 0.07 AND l_quantity < 24";

/// ClickBench queries of the quick race: a filter, whole-column aggregates, a
/// group-by and a string match.
const QUICK_HITS: [usize; 4] = [1, 2, 7, 20];

/// The queries of `race`, in the order they run.
pub fn peer_queries(race: Race) -> Vec<PeerQuery> {
    match race {
        Race::Quick => {
            let mut queries = vec![
                // Over DOUBLE: the payloads are random 62-bit integers whose
                // Int64 sum overflows, which DataFusion, Polars and PyArrow
                // wrap around and DuckDB (128-bit sums) does not.
                PeerQuery::same_sql(
                    "cross_file_sum".into(),
                    "cross_file",
                    vec!["t"],
                    "SELECT sum(CAST(payload AS DOUBLE)) FROM t".into(),
                ),
                tpch_query(1),
                tpch_query(6),
            ];
            queries.extend(QUICK_HITS.map(hits_query));
            queries
        }
        Race::Full => (1..=tpch::QUERIES.len())
            .map(tpch_query)
            .chain((0..clickbench::QUERIES.len()).map(hits_query))
            .collect(),
    }
}

/// TPC-H query `n` (1-based) as `tpch_q{n}`, on the tables it names.
fn tpch_query(n: usize) -> PeerQuery {
    let sql = match n {
        1 => TPCH_Q1.to_string(),
        6 => TPCH_Q6.to_string(),
        _ => statement(tpch::QUERIES[n - 1].1),
    };
    let tables = tables_named(&sql, &tpch::TABLES);
    PeerQuery::same_sql(format!("tpch_q{n}"), "tpch", tables, sql)
}

/// ClickBench query `n` (0-based, as ClickBench numbers them) as `hits_q{n}`.
fn hits_query(n: usize) -> PeerQuery {
    let sql = statement(clickbench::QUERIES[n]);
    // Our copy's EventTime is already a timestamp (see clickbench.rs), which
    // DataFusion's `to_timestamp_seconds` passes through and the other engines
    // do not know.
    let portable_sql = sql.replace(r#"to_timestamp_seconds("EventTime")"#, r#""EventTime""#);
    PeerQuery {
        name: format!("hits_q{n}"),
        suite: "clickbench",
        tables: vec![clickbench::PUBLISHED],
        sql,
        portable_sql,
        compare: if clickbench::TIES.contains(&n) {
            Compare::RowCount
        } else {
            Compare::Checksum
        },
    }
}

/// One statement from a query file: its comment lines and the final `;`
/// dropped.
fn statement(text: &str) -> String {
    text.lines()
        .filter(|line| !line.trim_start().starts_with("--"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .trim_end_matches(';')
        .to_string()
}

/// The tables of `known` that `sql` names as whole words.
fn tables_named(sql: &str, known: &[&'static str]) -> Vec<&'static str> {
    let words: Vec<&str> = sql
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .collect();
    known
        .iter()
        .copied()
        .filter(|table| words.contains(table))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_race_is_every_tpch_and_clickbench_query_on_the_tables_each_names() {
        let full = peer_queries(Race::Full);
        assert_eq!(full.len(), 22 + 43);
        let q = |name: &str| full.iter().find(|q| q.name == name).unwrap();
        assert_eq!(q("tpch_q6").tables, vec!["lineitem"]);
        assert_eq!(
            q("tpch_q5").tables.len(),
            6,
            "customer, orders, lineitem, supplier, nation, region: {:?}",
            q("tpch_q5").tables
        );
        assert!(!q("tpch_q15").sql.contains(';') && !q("tpch_q15").sql.contains("--"));
        assert_eq!(q("hits_q8").compare, Compare::RowCount);
        assert_eq!(q("hits_q0").compare, Compare::Checksum);
        let q42 = q("hits_q42");
        assert!(q42.sql.contains("to_timestamp_seconds"));
        assert!(!q42.portable_sql.contains("to_timestamp_seconds"));
    }

    #[test]
    fn the_quick_race_keeps_its_seven_queries() {
        let names: Vec<String> = peer_queries(Race::Quick)
            .into_iter()
            .map(|q| q.name)
            .collect();
        assert_eq!(
            names,
            [
                "cross_file_sum",
                "tpch_q1",
                "tpch_q6",
                "hits_q1",
                "hits_q2",
                "hits_q7",
                "hits_q20"
            ]
        );
    }
}

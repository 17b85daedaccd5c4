//! The `clickbench` suite: a synthetic table shaped like ClickBench's `hits`
//! (all 105 columns, with their names and types) and the 43 ClickBench
//! queries in DataFusion's dialect.
//!
//! # The data
//!
//! Deterministic: every value is a SplitMix64 hash of the global row number
//! (and a per-column salt), so a given `--scale` always writes the same bytes.
//! Like ClickBench's `hits_partitioned/hits_N.parquet`, the rows are in
//! primary-key order (`CounterID`, then `EventDate`/`EventTime` within a
//! counter) and each file has two row groups, the first of 450,560 rows. At
//! scale 1 there are 4 files of 1,000,000 rows (scale 25 is the published
//! size, 100 files); below scale 0.25, one file of `4M × scale` rows whose
//! first row group keeps the same share (45.056%).
//!
//! Cardinalities are chosen to resemble the real table: a few hundred
//! `CounterID`s with a skewed share (62, the counter the last 7 queries ask
//! about, is the largest), ~300 `RegionID`s, high-cardinality `UserID`,
//! `WatchID` and `ClientIP`, 85% empty `SearchPhrase`, 35% empty `Referer`,
//! URLs and titles that repeat with a skew, and a few percent of URLs on
//! Google. The `URLHash`/`RefererHash` of the most frequent URL/referer are the
//! constants queries 40 and 41 filter on.
//!
//! # Types
//!
//! `BIGINT`/`INTEGER`/`SMALLINT`/`TEXT` are Int64/Int32/Int16/Utf8 and the
//! `TIMESTAMP` columns are `Timestamp(Millisecond)` of whole seconds (Parquet
//! has no seconds unit: arrow-rs would write `Timestamp(Second)` as a bare
//! INT64): DataFusion's queries wrap `EventTime` in `to_timestamp_seconds(…)`,
//! which accepts a timestamp as well as the published file's Int64 seconds. `EventDate` is Date32 rather
//! than the published file's UInt16 days: DataFusion compares
//! `"EventDate" >= '2013-07-01'` on a UInt16 as *strings* (`'15887' >=
//! '2013-07-01'`), so queries 36–42 would filter nothing meaningful; on a
//! Date32 they are the date-range filters they are meant to be, and
//! `MIN`/`MAX("EventDate")` (query 6) print dates.
//!
//! # Two copies
//!
//! The same rows are written twice: `hits/` like the published files, with
//! row-group statistics but no page index (neither column nor offset index),
//! and `hits_page_index/` with both indexes and page-level statistics.

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{
    ArrayRef, Date32Array, Int16Array, Int32Array, Int64Array, RecordBatch, StringBuilder,
    TimestampMillisecondArray,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::common::{DataFusionError, Result};
use datafusion_prefetch_testdata::mix;
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use crate::datagen::parallel;

/// The folder of the copy without a page index, and of the one with.
pub const PUBLISHED: &str = "hits";
pub const PAGE_INDEX: &str = "hits_page_index";

/// The 43 queries, `q0` … `q42`, as in DataFusion's
/// `benchmarks/queries/clickbench/queries/`.
pub const QUERIES: [&str; 43] = [
    include_str!("../queries/clickbench/q0.sql"),
    include_str!("../queries/clickbench/q1.sql"),
    include_str!("../queries/clickbench/q2.sql"),
    include_str!("../queries/clickbench/q3.sql"),
    include_str!("../queries/clickbench/q4.sql"),
    include_str!("../queries/clickbench/q5.sql"),
    include_str!("../queries/clickbench/q6.sql"),
    include_str!("../queries/clickbench/q7.sql"),
    include_str!("../queries/clickbench/q8.sql"),
    include_str!("../queries/clickbench/q9.sql"),
    include_str!("../queries/clickbench/q10.sql"),
    include_str!("../queries/clickbench/q11.sql"),
    include_str!("../queries/clickbench/q12.sql"),
    include_str!("../queries/clickbench/q13.sql"),
    include_str!("../queries/clickbench/q14.sql"),
    include_str!("../queries/clickbench/q15.sql"),
    include_str!("../queries/clickbench/q16.sql"),
    include_str!("../queries/clickbench/q17.sql"),
    include_str!("../queries/clickbench/q18.sql"),
    include_str!("../queries/clickbench/q19.sql"),
    include_str!("../queries/clickbench/q20.sql"),
    include_str!("../queries/clickbench/q21.sql"),
    include_str!("../queries/clickbench/q22.sql"),
    include_str!("../queries/clickbench/q23.sql"),
    include_str!("../queries/clickbench/q24.sql"),
    include_str!("../queries/clickbench/q25.sql"),
    include_str!("../queries/clickbench/q26.sql"),
    include_str!("../queries/clickbench/q27.sql"),
    include_str!("../queries/clickbench/q28.sql"),
    include_str!("../queries/clickbench/q29.sql"),
    include_str!("../queries/clickbench/q30.sql"),
    include_str!("../queries/clickbench/q31.sql"),
    include_str!("../queries/clickbench/q32.sql"),
    include_str!("../queries/clickbench/q33.sql"),
    include_str!("../queries/clickbench/q34.sql"),
    include_str!("../queries/clickbench/q35.sql"),
    include_str!("../queries/clickbench/q36.sql"),
    include_str!("../queries/clickbench/q37.sql"),
    include_str!("../queries/clickbench/q38.sql"),
    include_str!("../queries/clickbench/q39.sql"),
    include_str!("../queries/clickbench/q40.sql"),
    include_str!("../queries/clickbench/q41.sql"),
    include_str!("../queries/clickbench/q42.sql"),
];

/// The queries whose result depends on how ties are broken: a `LIMIT` after
/// an `ORDER BY` of counts (or of `EventTime`, not unique across counters),
/// and q17's `LIMIT` without `ORDER BY`. Not q7 (no `LIMIT`), q25 and q26 (tied
/// rows print the same), q27 and q28 (few groups, ordered by an average), q42
/// (ordered by its group key).
pub const TIES: [usize; 27] = [
    8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 21, 22, 23, 24, 30, 31, 32, 33, 34, 35, 36, 37, 38,
    39, 40, 41,
];

/// The query against the copy `table` (`hits` or `hits_page_index`).
pub fn query_on(sql: &str, table: &str) -> String {
    sql.replacen(" FROM hits", &format!(" FROM {table}"), 1)
}

/// Rows of a full-size file, and of its first row group (as the published
/// `hits_N.parquet`).
const FILE_ROWS: u64 = 1_000_000;
const FIRST_ROW_GROUP_ROWS: u64 = 450_560;
/// Rows per generated batch (450,560 = 55 × 8,192).
const BATCH_ROWS: u64 = 8_192;
/// Rows per data page.
const PAGE_ROWS: usize = 20_000;

/// 2013-07-01, in days since the epoch: all events are in July 2013.
const DAY0: i32 = 15_887;
const DAYS: u64 = 31;

#[derive(Clone, Copy)]
enum Kind {
    I16,
    I32,
    I64,
    Text,
    Time,
    Date,
}

/// ClickBench's `create.sql`, in order.
const COLUMNS: [(&str, Kind); 105] = {
    use Kind::*;
    [
        ("WatchID", I64),
        ("JavaEnable", I16),
        ("Title", Text),
        ("GoodEvent", I16),
        ("EventTime", Time),
        ("EventDate", Date),
        ("CounterID", I32),
        ("ClientIP", I32),
        ("RegionID", I32),
        ("UserID", I64),
        ("CounterClass", I16),
        ("OS", I16),
        ("UserAgent", I16),
        ("URL", Text),
        ("Referer", Text),
        ("IsRefresh", I16),
        ("RefererCategoryID", I16),
        ("RefererRegionID", I32),
        ("URLCategoryID", I16),
        ("URLRegionID", I32),
        ("ResolutionWidth", I16),
        ("ResolutionHeight", I16),
        ("ResolutionDepth", I16),
        ("FlashMajor", I16),
        ("FlashMinor", I16),
        ("FlashMinor2", Text),
        ("NetMajor", I16),
        ("NetMinor", I16),
        ("UserAgentMajor", I16),
        ("UserAgentMinor", Text),
        ("CookieEnable", I16),
        ("JavascriptEnable", I16),
        ("IsMobile", I16),
        ("MobilePhone", I16),
        ("MobilePhoneModel", Text),
        ("Params", Text),
        ("IPNetworkID", I32),
        ("TraficSourceID", I16),
        ("SearchEngineID", I16),
        ("SearchPhrase", Text),
        ("AdvEngineID", I16),
        ("IsArtifical", I16),
        ("WindowClientWidth", I16),
        ("WindowClientHeight", I16),
        ("ClientTimeZone", I16),
        ("ClientEventTime", Time),
        ("SilverlightVersion1", I16),
        ("SilverlightVersion2", I16),
        ("SilverlightVersion3", I32),
        ("SilverlightVersion4", I16),
        ("PageCharset", Text),
        ("CodeVersion", I32),
        ("IsLink", I16),
        ("IsDownload", I16),
        ("IsNotBounce", I16),
        ("FUniqID", I64),
        ("OriginalURL", Text),
        ("HID", I32),
        ("IsOldCounter", I16),
        ("IsEvent", I16),
        ("IsParameter", I16),
        ("DontCountHits", I16),
        ("WithHash", I16),
        ("HitColor", Text),
        ("LocalEventTime", Time),
        ("Age", I16),
        ("Sex", I16),
        ("Income", I16),
        ("Interests", I16),
        ("Robotness", I16),
        ("RemoteIP", I32),
        ("WindowName", I32),
        ("OpenerName", I32),
        ("HistoryLength", I16),
        ("BrowserLanguage", Text),
        ("BrowserCountry", Text),
        ("SocialNetwork", Text),
        ("SocialAction", Text),
        ("HTTPError", I16),
        ("SendTiming", I32),
        ("DNSTiming", I32),
        ("ConnectTiming", I32),
        ("ResponseStartTiming", I32),
        ("ResponseEndTiming", I32),
        ("FetchTiming", I32),
        ("SocialSourceNetworkID", I16),
        ("SocialSourcePage", Text),
        ("ParamPrice", I64),
        ("ParamOrderID", Text),
        ("ParamCurrency", Text),
        ("ParamCurrencyID", I16),
        ("OpenstatServiceName", Text),
        ("OpenstatCampaignID", Text),
        ("OpenstatAdID", Text),
        ("OpenstatSourceID", Text),
        ("UTMSource", Text),
        ("UTMMedium", Text),
        ("UTMCampaign", Text),
        ("UTMContent", Text),
        ("UTMTerm", Text),
        ("FromTag", Text),
        ("HasGCLID", I16),
        ("RefererHash", I64),
        ("URLHash", I64),
        ("CLID", I32),
    ]
};

pub fn schema() -> SchemaRef {
    Arc::new(Schema::new(
        COLUMNS
            .iter()
            .map(|(name, kind)| {
                let data_type = match kind {
                    Kind::I16 => DataType::Int16,
                    Kind::I32 => DataType::Int32,
                    Kind::I64 => DataType::Int64,
                    Kind::Text => DataType::Utf8,
                    Kind::Time => DataType::Timestamp(TimeUnit::Millisecond, None),
                    Kind::Date => DataType::Date32,
                };
                Field::new(*name, data_type, false)
            })
            .collect::<Vec<_>>(),
    ))
}

/// The value of hash stream `salt` at row `r`.
fn h(r: u64, salt: u64) -> u64 {
    mix(r ^ mix(salt.wrapping_mul(0xD6E8_FEB8_6659_FD93)))
}

/// A skewed index in `0..n`, drawn by `hash` (re-mixed, so a shifted or
/// reused hash still draws independently): index 0 is the most frequent;
/// `skew` 1 is uniform, larger is more skewed.
fn skewed(hash: u64, n: u64, skew: f64) -> u64 {
    let u = (mix(hash ^ 0x5CE3) >> 11) as f64 / (1u64 << 53) as f64;
    ((n as f64 * u.powf(skew)) as u64).min(n.saturating_sub(1))
}

/// `percent` % of rows, chosen by `hash`.
fn chance(hash: u64, percent: u64) -> bool {
    hash % 1000 < percent * 10
}

const WORDS: [&str; 64] = [
    "купить",
    "скачать",
    "бесплатно",
    "онлайн",
    "смотреть",
    "фильм",
    "погода",
    "москва",
    "отзывы",
    "цена",
    "новости",
    "игры",
    "авто",
    "работа",
    "квартира",
    "карта",
    "рецепт",
    "музыка",
    "сериал",
    "ремонт",
    "билеты",
    "школа",
    "телефон",
    "ноутбук",
    "диван",
    "шины",
    "туры",
    "отель",
    "банк",
    "кредит",
    "такси",
    "доставка",
    "vk",
    "mail",
    "google",
    "youtube",
    "windows",
    "android",
    "iphone",
    "samsung",
    "nokia",
    "lada",
    "bmw",
    "toyota",
    "2013",
    "hd",
    "torrent",
    "drama",
    "comedy",
    "sport",
    "football",
    "hockey",
    "weather",
    "map",
    "translate",
    "download",
    "free",
    "online",
    "video",
    "photo",
    "price",
    "review",
    "how",
    "to",
];

const TLDS: [&str; 8] = ["ru", "com", "net", "org", "ua", "by", "kz", "com.tr"];

const SYLLABLES: [&str; 32] = [
    "ya", "ma", "ko", "ri", "ne", "to", "av", "li", "so", "ka", "mi", "ro", "da", "vi", "po", "le",
    "sa", "ni", "go", "tu", "be", "ze", "fo", "ru", "st", "ok", "pa", "zo", "lu", "ti", "xa", "me",
];

/// 3,000 domains; the most frequent first, a few of Google's among them.
static DOMAINS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let fixed = [
        (0, "yandex.ru"),
        (1, "mail.ru"),
        (2, "vk.com"),
        (3, "www.google.ru"),
        (4, "avito.ru"),
        (5, "odnoklassniki.ru"),
        (7, "www.google.com"),
        (11, "news.yandex.ru"),
        (25, "images.google.ru"),
        (40, "maps.google.com.tr"),
    ];
    (0..3000u64)
        .map(|i| {
            if let Some((_, name)) = fixed.iter().find(|(k, _)| *k == i) {
                return name.to_string();
            }
            let x = mix(i ^ 0x00D0_4A14);
            let mut name = String::new();
            if x.is_multiple_of(4) {
                name.push_str("www.");
            }
            for j in 0..(2 + (x >> 8) % 3) {
                name.push_str(SYLLABLES[((x >> (16 + 5 * j)) % 32) as usize]);
            }
            let _ = write!(name, "{}.{}", i, TLDS[((x >> 60) % 8) as usize]);
            name
        })
        .collect()
});

const SECTIONS: [&str; 12] = [
    "news", "catalog", "search", "item", "forum", "video", "photo", "user", "page", "cars",
    "realty", "jobs",
];

const PHONES: [&str; 24] = [
    "iPad",
    "iPhone",
    "GT-I9300",
    "GT-I9100",
    "GT-N7100",
    "Lumia 920",
    "HTC One",
    "Nexus 4",
    "Xperia Z",
    "GT-S5830",
    "MI 2",
    "Optimus G",
    "GT-P5100",
    "Kindle Fire",
    "Galaxy Tab",
    "One X",
    "Desire",
    "Ascend",
    "Razr",
    "Blade",
    "Lenovo A820",
    "Explay",
    "Highscreen",
    "Fly IQ",
];

const RESOLUTIONS: [(i16, i16); 12] = [
    (1366, 768),
    (1920, 1080),
    (1280, 1024),
    (1280, 800),
    (1024, 768),
    (1600, 900),
    (1440, 900),
    (1680, 1050),
    (1280, 720),
    (768, 1024),
    (320, 480),
    (2560, 1440),
];

/// The `URLHash` (and `RefererHash`) of the most frequent URL (referer):
/// the constants of queries 41 and 40.
const TOP_URL_HASH: i64 = 2_868_770_270_353_813_622;
const TOP_REFERER_HASH: i64 = 3_594_120_000_172_545_465;

/// The sorted counters: rows `starts[k] .. starts[k + 1]` belong to `ids[k]`.
struct Counters {
    ids: Vec<i32>,
    starts: Vec<u64>,
    time_offsets: Vec<i64>,
}

impl Counters {
    /// About 400 counters with a Zipf-like share of `total` rows (s = 1.1);
    /// counter 62 has the largest.
    fn new(total: u64) -> Self {
        let mut ids: Vec<i32> = (1..400u64)
            .map(|k| (mix(k ^ 0xC0_FFEE) % 200_000) as i32 + 100)
            .collect();
        ids.push(62);
        ids.sort_unstable();
        ids.dedup();
        let mut by_rank = ids.clone();
        by_rank.sort_by_key(|id| {
            if *id == 62 {
                0
            } else {
                1 + mix(*id as u64) % 1_000_000
            }
        });
        let weight = |id: &i32| {
            let rank = by_rank.iter().position(|x| x == id).expect("an id");
            1.0 / ((rank + 1) as f64).powf(1.1)
        };
        let sum: f64 = ids.iter().map(weight).sum();
        let mut starts = Vec::with_capacity(ids.len() + 1);
        let mut at = 0.0;
        for id in &ids {
            starts.push((at * total as f64 / sum).round() as u64);
            at += weight(id);
        }
        starts.push(total);
        let time_offsets = ids
            .iter()
            .map(|id| (mix(*id as u64) % 86_400) as i64)
            .collect();
        Self {
            ids,
            starts,
            time_offsets,
        }
    }
}

/// What several columns of one row share.
struct Row {
    r: u64,
    counter: i32,
    date: i32,
    time: i64,
    user: u64,
    has_phrase: bool,
    url: Option<(u64, u64)>,
    referer: Option<(u64, u64)>,
    resolution: (i16, i16),
    mobile: u64,
}

impl Row {
    fn new(r: u64, total: u64, counters: &Counters) -> Self {
        let k = counters.starts.partition_point(|s| *s <= r) - 1;
        let (start, end) = (counters.starts[k], counters.starts[k + 1]);
        // Position within the counter's rows, as days of July.
        let days = (r - start) as f64 / (end - start).max(1) as f64 * DAYS as f64;
        let day = days.floor();
        let second = ((days - day) * 86_400.0) as i64;
        let date = DAY0 + day as i32;
        let time = date as i64 * 86_400 + (second + counters.time_offsets[k]).rem_euclid(86_400);
        // A link is one of `total / 5` (skewed: popular pages repeat), on
        // a domain that is itself skewed (a few domains have most pages).
        let links = (total / 5).max(100);
        let link = |empty: u64, salt: u64| {
            (!chance(h(r, salt), empty)).then(|| {
                let page = skewed(h(r, salt + 1), links, 2.5);
                let domain = skewed(page ^ (salt << 48), DOMAINS.len() as u64, 3.0);
                (domain, page)
            })
        };
        Self {
            r,
            counter: counters.ids[k],
            date,
            time,
            user: skewed(h(r, 1), (total / 6).max(100), 2.0),
            has_phrase: chance(h(r, 4), 15),
            url: link(2, 10),
            referer: link(35, 20),
            resolution: RESOLUTIONS[skewed(h(r, 5), RESOLUTIONS.len() as u64, 2.0) as usize],
            mobile: if chance(h(r, 6), 8) {
                1 + skewed(h(r, 7), PHONES.len() as u64, 2.0)
            } else {
                0
            },
        }
    }
}

fn write_link(out: &mut StringBuilder, (domain, page): (u64, u64)) {
    let x = mix(page ^ 0x11F);
    let _ = write!(
        out,
        "http://{}/{}/{}.html",
        DOMAINS[domain as usize],
        SECTIONS[(x % SECTIONS.len() as u64) as usize],
        page
    );
    if x.is_multiple_of(5) {
        let _ = write!(
            out,
            "?id={}&from={}",
            x >> 40,
            WORDS[((x >> 8) % 64) as usize]
        );
    }
}

fn link_hash(link: Option<(u64, u64)>, top: i64, salt: u64) -> i64 {
    match link {
        None => 0,
        Some((_, 0)) => top,
        Some((domain, page)) => mix((domain << 40) ^ page ^ salt) as i64,
    }
}

fn write_phrase(out: &mut StringBuilder, phrase: u64) {
    let x = mix(phrase ^ 0x5EA7C4);
    for j in 0..1 + x % 3 {
        if j > 0 {
            let _ = out.write_str(" ");
        }
        let _ = out.write_str(WORDS[((x >> (8 + 6 * j)) % 64) as usize]);
    }
}

/// Integers other than the special columns: `zero` % of rows are 0, the
/// rest `offset + skewed(0..max)`.
fn int_spec(name: &str) -> (u64, u64, f64, i64) {
    match name {
        // flags: (percent zero, max, skew, offset)
        "JavaEnable" => (30, 1, 1.0, 1),
        "GoodEvent" => (1, 1, 1.0, 1),
        "CookieEnable" | "JavascriptEnable" => (5, 1, 1.0, 1),
        "IsMobile" => (92, 1, 1.0, 1),
        "IsArtifical" | "IsParameter" | "HasGCLID" => (99, 1, 1.0, 1),
        "IsNotBounce" => (80, 1, 1.0, 1),
        "IsOldCounter" => (100, 1, 1.0, 1),
        "IsEvent" => (98, 1, 1.0, 1),
        "WithHash" => (95, 1, 1.0, 1),
        "CounterClass" => (60, 3, 1.5, 1),
        "OS" => (0, 90, 3.0, 1),
        "UserAgent" => (0, 60, 3.0, 1),
        "RefererCategoryID" | "URLCategoryID" => (40, 30, 2.0, 1),
        "RefererRegionID" | "URLRegionID" => (20, 400, 3.0, 1),
        "ResolutionDepth" => (0, 3, 2.0, 24),
        "FlashMajor" => (30, 20, 1.5, 1),
        "FlashMinor" => (50, 10, 1.5, 1),
        "NetMajor" => (70, 5, 1.5, 1),
        "NetMinor" => (70, 10, 1.5, 1),
        "UserAgentMajor" => (5, 40, 2.0, 1),
        "IPNetworkID" => (0, 50_000, 2.0, 1),
        "ClientTimeZone" => (10, 24, 3.0, -12),
        "SilverlightVersion1" => (60, 5, 1.5, 1),
        "SilverlightVersion2" => (80, 2, 1.0, 1),
        "SilverlightVersion3" => (60, 1_000_000, 2.0, 1),
        "SilverlightVersion4" => (70, 10, 1.5, 1),
        "CodeVersion" => (10, 1_000, 2.0, 1),
        "FUniqID" => (60, u32::MAX as u64, 1.0, 1),
        "HID" | "RemoteIP" => (0, u32::MAX as u64, 1.0, 0),
        "Age" => (40, 6, 1.0, 1),
        "Sex" => (40, 2, 1.0, 1),
        "Income" => (40, 4, 1.0, 1),
        "Interests" => (30, 1_000, 2.0, 1),
        "Robotness" => (95, 2, 1.0, 1),
        "WindowName" | "OpenerName" => (50, 100_000, 2.0, -1),
        "HistoryLength" => (20, 20, 2.0, 1),
        "HTTPError" => (99, 500, 1.0, 1),
        "SendTiming" | "DNSTiming" | "ConnectTiming" => (40, 1_000, 3.0, 1),
        "ResponseStartTiming" | "ResponseEndTiming" | "FetchTiming" => (30, 10_000, 3.0, 1),
        "SocialSourceNetworkID" | "ParamCurrencyID" => (98, 10, 1.5, 1),
        "ParamPrice" => (98, 1_000_000, 2.0, 1),
        "CLID" => (95, 1_000_000, 1.0, 1),
        other => unreachable!("no spec for integer column {other}"),
    }
}

/// Text columns other than the special ones: `empty` % of rows are '', the
/// rest one of `choices` (skewed), with a number appended if `numbered`.
fn text_spec(name: &str) -> (u64, &'static [&'static str], bool) {
    match name {
        "FlashMinor2" => (40, &["0", "125", "104", "2", "41"], false),
        "UserAgentMinor" => (5, &["0", "1", "5", "2", "3", "D0", "10", "9", "15"], false),
        "Params" => (97, &["param", "utm", "ref", "id"], true),
        "PageCharset" => (5, &["utf-8", "windows-1251", "koi8-r"], false),
        "OriginalURL" => (
            90,
            &["http://m.vk.com/", "http://yandex.ru/yandsearch?text="],
            true,
        ),
        "HitColor" => (0, &["5", "E", "F", "D"], false),
        "BrowserLanguage" => (5, &["ru", "en", "uk", "be", "kk", "tr", "de", "pl"], false),
        "BrowserCountry" => (5, &["ru", "ua", "by", "kz", "tr", "de", "us", "fr"], false),
        "SocialNetwork" => (
            98,
            &["vkontakte", "facebook", "twitter", "odnoklassniki"],
            false,
        ),
        "SocialAction" => (99, &["share", "like", "comment"], false),
        "SocialSourcePage" => (99, &["http://vk.com/id", "http://twitter.com/"], true),
        "ParamOrderID" => (99, &["order-"], true),
        "ParamCurrency" => (98, &["RUB", "USD", "EUR", "UAH"], false),
        "OpenstatServiceName" => (
            99,
            &["direct.yandex.ru", "begun.ru", "market.yandex.ru"],
            false,
        ),
        "OpenstatCampaignID" | "OpenstatAdID" | "OpenstatSourceID" => (99, &["c", "a", "s"], true),
        "UTMSource" => (97, &["yandex", "google", "vk", "email", "direct"], false),
        "UTMMedium" => (97, &["cpc", "banner", "email", "social"], false),
        "UTMCampaign" | "UTMContent" | "UTMTerm" => (97, &["spring", "sale", "brand", "t"], true),
        "FromTag" => (98, &["from", "yamarket", "partner"], true),
        other => unreachable!("no spec for text column {other}"),
    }
}

fn column(name: &str, kind: Kind, salt: u64, rows: &[Row], total: u64) -> ArrayRef {
    let hash = |row: &Row| h(row.r, 1_000 + salt);
    match name {
        "WatchID" => i64s(rows, |row| (mix(row.r ^ 0x3A7C) >> 1) as i64),
        "EventTime" => Arc::new(TimestampMillisecondArray::from_iter_values(
            rows.iter().map(|row| row.time * 1_000),
        )),
        "ClientEventTime" => Arc::new(TimestampMillisecondArray::from_iter_values(
            rows.iter()
                .map(|row| (row.time - 30 + (hash(row) % 120) as i64) * 1_000),
        )),
        "LocalEventTime" => Arc::new(TimestampMillisecondArray::from_iter_values(
            rows.iter()
                .map(|row| (row.time + 3_600 * (hash(row) % 4) as i64) * 1_000),
        )),
        "EventDate" => Arc::new(Date32Array::from_iter_values(
            rows.iter().map(|row| row.date),
        )),
        "CounterID" => Arc::new(Int32Array::from_iter_values(
            rows.iter().map(|row| row.counter),
        )),
        "UserID" => i64s(rows, |row| (mix(row.user ^ 0x05E7) >> 1) as i64),
        "ClientIP" => Arc::new(Int32Array::from_iter_values(rows.iter().map(|row| {
            mix(skewed(hash(row), (total / 4).max(100), 1.5) ^ 0x1B) as u32 as i32
        }))),
        "RegionID" => Arc::new(Int32Array::from_iter_values(rows.iter().map(
            |row| match skewed(hash(row), 300, 3.0) {
                0 => 229,
                k => (mix(k ^ 0x4E61) % 20_000) as i32 + 1,
            },
        ))),
        "IsRefresh" => i16s(rows, |row| chance(hash(row), 8) as i16),
        "DontCountHits" => i16s(rows, |row| chance(hash(row), 5) as i16),
        "IsLink" => i16s(rows, |row| chance(hash(row), 3) as i16),
        "IsDownload" => i16s(rows, |row| chance(hash(row), 1) as i16),
        "TraficSourceID" => i16s(rows, |row| match hash(row) % 100 {
            0..35 => 0,
            35..60 => 1,
            60..72 => 2,
            72..80 => 3,
            80..85 => -1,
            85..90 => 6,
            90..94 => 4,
            94..97 => 5,
            97..99 => 7,
            _ => 8,
        }),
        "SearchEngineID" => i16s(rows, |row| {
            if row.has_phrase {
                1 + skewed(hash(row), 30, 3.0) as i16
            } else {
                0
            }
        }),
        "AdvEngineID" => i16s(rows, |row| {
            if chance(hash(row), 2) {
                1 + skewed(hash(row) >> 16, 30, 2.0) as i16
            } else {
                0
            }
        }),
        "ResolutionWidth" => i16s(rows, |row| row.resolution.0),
        "ResolutionHeight" => i16s(rows, |row| row.resolution.1),
        "WindowClientWidth" => i16s(rows, |row| row.resolution.0 - (hash(row) % 4) as i16 * 20),
        "WindowClientHeight" => i16s(rows, |row| {
            row.resolution.1 - 100 - (hash(row) % 4) as i16 * 25
        }),
        "MobilePhone" => i16s(rows, |row| row.mobile as i16),
        "MobilePhoneModel" => strings(rows, |out, row| {
            if row.mobile > 0 {
                let _ = out.write_str(PHONES[row.mobile as usize - 1]);
            }
        }),
        "URL" => strings(rows, |out, row| {
            if let Some(link) = row.url {
                write_link(out, link);
            }
        }),
        "Referer" => strings(rows, |out, row| {
            if let Some(link) = row.referer {
                write_link(out, link);
            }
        }),
        "URLHash" => i64s(rows, |row| link_hash(row.url, TOP_URL_HASH, 1)),
        "RefererHash" => i64s(rows, |row| link_hash(row.referer, TOP_REFERER_HASH, 2)),
        "SearchPhrase" => strings(rows, |out, row| {
            if row.has_phrase {
                write_phrase(out, skewed(hash(row), (total / 25).max(50), 2.5));
            }
        }),
        "Title" => strings(rows, |out, row| {
            if chance(hash(row), 3) {
                return;
            }
            let title = skewed(hash(row) >> 8, (total / 10).max(100), 2.0);
            let x = mix(title ^ 0x717E);
            if x.is_multiple_of(50) {
                let _ = out.write_str("Google: ");
            }
            write_phrase(out, title);
            let _ = write!(out, " - {}", DOMAINS[(x >> 20) as usize % 200]);
        }),
        _ => match kind {
            Kind::Text => {
                let (empty, choices, numbered) = text_spec(name);
                strings(rows, |out, row| {
                    let x = hash(row);
                    if chance(x, empty) {
                        return;
                    }
                    let _ =
                        out.write_str(choices[skewed(x >> 10, choices.len() as u64, 2.0) as usize]);
                    if numbered {
                        let _ = write!(out, "{}", (x >> 24) % 100_000);
                    }
                })
            }
            Kind::I16 | Kind::I32 | Kind::I64 => {
                let (zero, max, skew, offset) = int_spec(name);
                let value = |row: &Row| {
                    let x = hash(row);
                    if chance(x, zero) {
                        0
                    } else {
                        offset + skewed(x >> 10, max, skew) as i64
                    }
                };
                match kind {
                    Kind::I16 => i16s(rows, |row| value(row) as i16),
                    Kind::I32 => Arc::new(Int32Array::from_iter_values(
                        rows.iter().map(|row| value(row) as i32),
                    )),
                    _ => i64s(rows, value),
                }
            }
            Kind::Time | Kind::Date => unreachable!("{name} is generated above"),
        },
    }
}

fn i16s(rows: &[Row], f: impl Fn(&Row) -> i16) -> ArrayRef {
    Arc::new(Int16Array::from_iter_values(rows.iter().map(f)))
}

fn i64s(rows: &[Row], f: impl Fn(&Row) -> i64) -> ArrayRef {
    Arc::new(Int64Array::from_iter_values(rows.iter().map(f)))
}

fn strings(rows: &[Row], f: impl Fn(&mut StringBuilder, &Row)) -> ArrayRef {
    let mut out = StringBuilder::with_capacity(rows.len(), rows.len() * 16);
    for row in rows {
        f(&mut out, row);
        out.append_value("");
    }
    Arc::new(out.finish())
}

fn batch(schema: &SchemaRef, rows: &[Row], total: u64) -> Result<RecordBatch> {
    let columns = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, (name, kind))| column(name, *kind, i as u64, rows, total))
        .collect();
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

/// The published files' layout: row-group statistics, no page index.
fn published_props() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(None)
        .set_max_row_group_bytes(None)
        .set_data_page_row_count_limit(PAGE_ROWS)
        // Chunk statistics: no column index (it needs page statistics) …
        .set_statistics_enabled(EnabledStatistics::Chunk)
        // … and no offset index.
        .set_offset_index_disabled(true)
        .build()
}

fn page_index_props() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(None)
        .set_max_row_group_bytes(None)
        .set_data_page_row_count_limit(PAGE_ROWS)
        .set_statistics_enabled(EnabledStatistics::Page)
        .build()
}

/// Rows in all, files, and rows per file at `scale` (at least one batch).
pub fn layout(scale: f64) -> (u64, u64, u64) {
    let total = ((4.0 * FILE_ROWS as f64 * scale).round() as u64).max(BATCH_ROWS);
    let files = (total as f64 / FILE_ROWS as f64).round().max(1.0) as u64;
    (total, files, total.div_ceil(files))
}

fn write_file(dir: &Path, file: u64, rows_per_file: u64, total: u64, c: &Counters) -> Result<()> {
    let schema = schema();
    let first = file * rows_per_file;
    let end = (first + rows_per_file).min(total);
    let n = end - first;
    // The first row group keeps the published share: 450,560 of 1,000,000.
    let split = first + (n * FIRST_ROW_GROUP_ROWS).div_ceil(FILE_ROWS);
    let mut writers = vec![];
    for (table, props) in [
        (PUBLISHED, published_props()),
        (PAGE_INDEX, page_index_props()),
    ] {
        let path = dir.join(table).join(format!("hits_{file}.parquet"));
        let tmp = path.with_extension("parquet.tmp");
        let writer = ArrowWriter::try_new(fs::File::create(&tmp)?, schema.clone(), Some(props))?;
        writers.push((writer, tmp, path));
    }
    for (from, to) in [(first, split), (split, end)] {
        let mut at = from;
        while at < to {
            let next = (at + BATCH_ROWS).min(to);
            let rows: Vec<Row> = (at..next).map(|r| Row::new(r, total, c)).collect();
            let batch = batch(&schema, &rows, total)?;
            for (writer, _, _) in &mut writers {
                writer.write(&batch)?;
            }
            at = next;
        }
        for (writer, _, _) in &mut writers {
            writer.flush()?;
        }
    }
    for (writer, tmp, path) in writers {
        writer.close()?;
        fs::rename(&tmp, &path)?;
    }
    Ok(())
}

/// Whether `path`'s footer has an offset index and a column index.
fn page_index(path: &Path) -> Result<(bool, bool)> {
    let file = fs::File::open(path)?;
    let metadata = ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Optional)
        .parse_and_finish(&file)?;
    Ok((
        metadata.offset_index().is_some(),
        metadata.column_index().is_some(),
    ))
}

/// Generate both copies at `scale` into `dir/hits/` and `dir/hits_page_index/`.
pub fn generate(dir: &Path, scale: f64) -> Result<()> {
    let (total, files, rows_per_file) = layout(scale);
    for table in [PUBLISHED, PAGE_INDEX] {
        fs::create_dir_all(dir.join(table))?;
    }
    let counters = Counters::new(total);
    let jobs: Vec<u64> = (0..files).collect();
    parallel(&jobs, |file| {
        write_file(dir, *file, rows_per_file, total, &counters)
    })?;
    for (table, want) in [(PUBLISHED, false), (PAGE_INDEX, true)] {
        for file in 0..files {
            let path = dir.join(table).join(format!("hits_{file}.parquet"));
            let (offset, column) = page_index(&path)?;
            if (offset, column) != (want, want) {
                return Err(DataFusionError::Internal(format!(
                    "{}: offset index {offset}, column index {column}, want {want}",
                    path.display()
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clickbench_copies_have_every_query_once() {
        for sql in QUERIES {
            let on = query_on(sql, PAGE_INDEX);
            assert_eq!(on.matches(" FROM hits_page_index").count(), 1, "{sql}");
            assert_eq!(on.matches("hits").count(), 1, "{sql}");
        }
        assert_eq!(schema().fields().len(), 105);
    }
}

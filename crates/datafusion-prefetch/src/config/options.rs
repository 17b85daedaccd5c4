//! `PrefetchOptions`: the `prefetch.*` session settings.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use datafusion::common::config::{ConfigEntry, ConfigExtension, ConfigOptions, ExtensionOptions};
use datafusion::common::{DataFusionError, Result};

use super::byte_size::ByteSize;
use super::hedge::HedgeAfter;
use super::policy::PrefetchPolicy;
use super::price::RequestPrice;
use super::timeout::RequestTimeout;

/// The `prefetch.*` settings: a DataFusion [`ConfigExtension`] with prefix `prefetch`.
///
/// Register it on a [`SessionConfig`](datafusion::prelude::SessionConfig) (the
/// one-call setups [`enable_prefetch`](crate::enable_prefetch) and
/// [`prefetching_context`](crate::prefetching_context) do) and every key can be changed with SQL
/// `SET prefetch.<key> = <value>` and read with `SHOW prefetch.<key>`. Every value
/// is validated when it is set, so a bad setting fails the `SET`, not a later query.
///
/// ```
/// use datafusion::prelude::SessionConfig;
/// use datafusion_prefetch::{ByteSize, PrefetchOptions, PrefetchPolicy};
///
/// let mut config = SessionConfig::new().with_option_extension(PrefetchOptions::default());
/// config.options_mut().set("prefetch.policy", "batched").unwrap();
/// config.options_mut().set("prefetch.read_ahead_window", "8MiB").unwrap();
/// let options = config.options().extensions.get::<PrefetchOptions>().unwrap();
/// assert_eq!(options.policy(), PrefetchPolicy::Batched);
/// assert_eq!(options.read_ahead_window(), Some(ByteSize::mib(8)));
///
/// let err = config.options_mut().set("prefetch.policy", "bogus").unwrap_err();
/// assert!(err.to_string().contains("off, batched, pipelined, streaming, auto"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefetchOptions {
    policy: PrefetchPolicy,
    /// `None`: `auto` (see [`PrefetchOptions::read_ahead_window`]).
    read_ahead_window: Option<ByteSize>,
    memory_budget: ByteSize,
    /// `None`: `auto` (see [`PrefetchOptions::file_open_depth`]).
    file_open_depth: Option<usize>,
    /// `None`: `auto` (see [`PrefetchOptions::eager_first_read_cap`]).
    eager_first_read_cap: Option<ByteSize>,
    request_timeout: RequestTimeout,
    hedge_after: HedgeAfter,
    /// Percent (see [`PrefetchOptions::hedge_share`]).
    hedge_share: u8,
    /// `None`: `auto` (see [`PrefetchOptions::memory_limit`]).
    memory_limit: Option<ByteSize>,
    price_per_1000_requests: RequestPrice,
    /// The runtime's limit, once the session is built on one: what `SHOW`
    /// reports, and why `SET` refuses to change it.
    attached: Option<AttachedLimit>,
}

/// The process-wide limit a session's options report, read live (the
/// runtime's governor implements it).
pub(crate) trait LimitSource: fmt::Debug + Send + Sync {
    /// The limit now.
    fn limit(&self) -> ByteSize;
}

/// A [`LimitSource`] the options hold; options compare equal whatever they
/// are attached to.
#[derive(Debug, Clone)]
struct AttachedLimit(Arc<dyn LimitSource>);

impl PartialEq for AttachedLimit {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for AttachedLimit {}

/// Largest accepted `file_open_depth`: each open-ahead file holds its footer in
/// memory, and no store benefits from thousands of speculative opens.
pub const MAX_FILE_OPEN_DEPTH: usize = 256;

/// The read-ahead window of `batched`, `pipelined` and `streaming` when
/// `prefetch.read_ahead_window` is `auto`: measured on the `cross_file`
/// workload (see
/// [the configuration reference](https://github.com/datafusion-prefetch/datafusion-prefetch/blob/main/docs/configuration.md)).
pub const FIXED_POLICY_WINDOW: ByteSize = ByteSize::mib(64);

/// The file-open depth of `pipelined` and `streaming` when
/// `prefetch.file_open_depth` is `auto`, and the least the `auto` policy opens.
pub const FIXED_POLICY_FILE_OPEN_DEPTH: usize = 8;

/// The eager first-read cap of `pipelined` and `streaming` when
/// `prefetch.eager_first_read_cap` is `auto`.
pub const FIXED_POLICY_EAGER_FIRST_READ_CAP: ByteSize = ByteSize::mib(16);

/// The most files the `auto` policy opens ahead when `prefetch.file_open_depth`
/// is `auto`: it opens as many as its measured lead covers, up to this.
pub const AUTO_MAX_FILE_OPEN_DEPTH: usize = 64;

/// The default `prefetch.hedge_share`, in percent.
pub const DEFAULT_HEDGE_SHARE_PERCENT: u8 = 25;

/// The value that leaves the window or the file-open depth to the policy.
const AUTO: &str = "auto";

impl Default for PrefetchOptions {
    /// Defaults measured on the `cross_file` workload (see
    /// [the configuration reference](https://github.com/datafusion-prefetch/datafusion-prefetch/blob/main/docs/configuration.md)).
    fn default() -> Self {
        Self {
            policy: PrefetchPolicy::default(),
            read_ahead_window: None,
            memory_budget: ByteSize::mib(256),
            file_open_depth: None,
            eager_first_read_cap: None,
            request_timeout: RequestTimeout::OFF,
            hedge_after: HedgeAfter::Auto,
            hedge_share: DEFAULT_HEDGE_SHARE_PERCENT,
            memory_limit: None,
            price_per_1000_requests: RequestPrice::default(),
            attached: None,
        }
    }
}

/// One documented key of [`PrefetchOptions`].
struct Key {
    name: &'static str,
    description: &'static str,
}

const KEYS: [Key; 10] = [
    Key {
        name: "policy",
        description: "Scan policy: auto (adapts to the measured store and decoder), off (stock DataFusion), batched, pipelined or streaming",
    },
    Key {
        name: "read_ahead_window",
        description: "Bytes one scan stream may hold fetched ahead of its decoder (e.g. 64MiB), or auto: 64MiB under batched, pipelined and streaming; under the auto policy its measured lead, up to the stream's share of the budget",
    },
    Key {
        name: "memory_budget",
        description: "Bytes staged by prefetching, shared by all partitions of one scan; also reserved from the runtime memory pool",
    },
    Key {
        name: "file_open_depth",
        description: "How many upcoming files get their footer fetched ahead (0 disables cross-file read-ahead), or auto: 8 under pipelined and streaming; under the auto policy as many as its measured lead covers (8 to 64)",
    },
    Key {
        name: "eager_first_read_cap",
        description: "Bytes of an upcoming file's leading row groups fetched before the decoder asks (0 disables), or auto: 16MiB under pipelined and streaming; under the auto policy as much as its lead",
    },
    Key {
        name: "request_timeout",
        description: "Longest a demand read may take before the query fails naming the file and ranges (off, or e.g. 30s)",
    },
    Key {
        name: "hedge_after",
        description: "How long a planned GET may wait for its first byte before an identical one is sent beside it (the first answer is read), or auto: under the auto policy two measured median round trips (at least 50ms), never under the others; or off",
    },
    Key {
        name: "hedge_share",
        description: "Under the auto policy, the most hedges in flight to a store, as a percentage of its other requests in flight (at least one hedge is always allowed): 1% to 100%, default 25%",
    },
    Key {
        name: "memory_limit",
        description: "Bytes all prefetching scans of every session on this runtime may hold together (staged pieces, requests in flight, buffers still in use), or auto: a quarter of the memory pool's limit when it has one, else 1GiB. Set when the context is built; SHOW gives the runtime's limit",
    },
    Key {
        name: "price_per_1000_requests",
        description: "What the store charges per 1,000 requests, in dollars (default $0.0004, S3 Standard's GETs): the price a scan's prefetch_request_cost_nanodollars is estimated at, each attempt, retry and hedge counted",
    },
];

impl PrefetchOptions {
    /// The `prefetch.*` settings of a session's `config`: the defaults where
    /// none were set.
    pub(crate) fn of(config: &ConfigOptions) -> Self {
        config
            .extensions
            .get::<PrefetchOptions>()
            .cloned()
            .unwrap_or_default()
    }

    /// The scan policy.
    pub fn policy(&self) -> PrefetchPolicy {
        self.policy
    }

    /// Bytes one scan stream may hold fetched ahead of its decoder; `None`
    /// (`auto`, the default) leaves it to the policy: [`FIXED_POLICY_WINDOW`]
    /// (at most the budget) under `batched`, `pipelined` and `streaming`; under
    /// `auto`, whatever its measured lead asks, up to the stream's share of the
    /// budget (and never less than the fixed policies get).
    pub fn read_ahead_window(&self) -> Option<ByteSize> {
        self.read_ahead_window
    }

    /// Bytes staged by prefetching across all partitions of one scan.
    pub fn memory_budget(&self) -> ByteSize {
        self.memory_budget
    }

    /// How many upcoming files are opened ahead; `None` (`auto`, the default)
    /// leaves it to the policy: [`FIXED_POLICY_FILE_OPEN_DEPTH`] under
    /// `pipelined` and `streaming`; under `auto`, as many as its measured lead
    /// covers, from [`FIXED_POLICY_FILE_OPEN_DEPTH`] to
    /// [`AUTO_MAX_FILE_OPEN_DEPTH`]. When set, `auto` opens at most this many.
    pub fn file_open_depth(&self) -> Option<usize> {
        self.file_open_depth
    }

    /// Bytes of an upcoming file's leading row groups fetched before the
    /// decoder asks; `None` (`auto`, the default) leaves it to the policy:
    /// [`FIXED_POLICY_EAGER_FIRST_READ_CAP`] under `pipelined` and
    /// `streaming`; under `auto`, as much as its lead (all the stream may
    /// stage until its decoder has been timed, so the first wave reaches as
    /// far as the budget allows). When set, it bounds `auto` too.
    pub fn eager_first_read_cap(&self) -> Option<ByteSize> {
        self.eager_first_read_cap
    }

    /// How long a demand read may take (`off`: as long as the store takes).
    pub fn request_timeout(&self) -> RequestTimeout {
        self.request_timeout
    }

    /// When a planned GET that has not answered is sent again beside itself
    /// (see [`HedgeAfter`]).
    pub fn hedge_after(&self) -> HedgeAfter {
        self.hedge_after
    }

    /// Under `auto`, the most hedges in flight to a store as a percentage of
    /// its other requests in flight (at least one is always allowed), from
    /// 1 to 100; [`DEFAULT_HEDGE_SHARE_PERCENT`] unless set. Hedges are
    /// also not sent while the store throttles (see the configuration
    /// reference).
    pub fn hedge_share(&self) -> u8 {
        self.hedge_share
    }

    /// The process-wide limit the context is built with; `None` (`auto`, the
    /// default) keeps the runtime's (see [`crate::PrefetchGovernor`]).
    pub fn memory_limit(&self) -> Option<ByteSize> {
        self.memory_limit
    }

    /// What the store charges per 1,000 requests: the price a scan's
    /// `prefetch_request_cost_nanodollars` (and [`PrefetchStats::request_cost`](crate::PrefetchStats::request_cost))
    /// is estimated at; [`RequestPrice::S3_STANDARD_GET`] unless set.
    pub fn price_per_1000_requests(&self) -> RequestPrice {
        self.price_per_1000_requests
    }

    /// Builder-style setter for the price per 1,000 requests.
    pub fn with_price_per_1000_requests(mut self, price: RequestPrice) -> Self {
        self.price_per_1000_requests = price;
        self
    }

    /// Report `source`'s limit from now on, and refuse to change it with
    /// `SET`: the options belong to a session on a runtime.
    pub(crate) fn attach(&mut self, source: Arc<dyn LimitSource>) {
        self.attached = Some(AttachedLimit(source));
    }

    /// Builder-style setter for the demand-read timeout.
    pub fn with_request_timeout(mut self, timeout: RequestTimeout) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Set one key by name (without the `prefetch.` prefix), validating the value
    /// against the key's rules and the other settings.
    ///
    /// On error the options are unchanged and the message names the key and what
    /// it accepts.
    pub fn set_key(&mut self, key: &str, value: &str) -> Result<()> {
        let value = value.trim();
        let mut next = self.clone();
        match key {
            "policy" => next.policy = value.parse()?,
            "read_ahead_window" => {
                next.read_ahead_window = if value.eq_ignore_ascii_case(AUTO) {
                    None
                } else {
                    Some(parse_nonzero_size(key, value)?)
                };
            }
            "memory_budget" => next.memory_budget = parse_nonzero_size(key, value)?,
            "file_open_depth" if value.eq_ignore_ascii_case(AUTO) => next.file_open_depth = None,
            "file_open_depth" => {
                let depth = value
                    .parse::<usize>()
                    .ok()
                    .filter(|d| *d <= MAX_FILE_OPEN_DEPTH)
                    .ok_or_else(|| {
                        config_error(format!(
                            "invalid value '{value}' for prefetch.file_open_depth: expected auto or a whole number from 0 to {MAX_FILE_OPEN_DEPTH}"
                        ))
                    })?;
                next.file_open_depth = Some(depth);
            }
            "eager_first_read_cap" if value.eq_ignore_ascii_case(AUTO) => {
                next.eager_first_read_cap = None;
            }
            "eager_first_read_cap" => {
                next.eager_first_read_cap = Some(parse_size(key, value)?);
            }
            "request_timeout" => {
                next.request_timeout = value.parse().map_err(|e| {
                    config_error(format!("invalid value for prefetch.request_timeout: {e}"))
                })?;
            }
            "hedge_after" => {
                next.hedge_after = value.parse().map_err(|e| {
                    config_error(format!("invalid value for prefetch.hedge_after: {e}"))
                })?;
            }
            "hedge_share" => {
                let percent = value.strip_suffix('%').unwrap_or(value).trim();
                next.hedge_share = percent
                    .parse::<u8>()
                    .ok()
                    .filter(|p| (1..=100).contains(p))
                    .ok_or_else(|| {
                        config_error(format!(
                            "invalid value '{value}' for prefetch.hedge_share: expected a \
                             percentage from 1% to 100% (set prefetch.hedge_after = 'off' to \
                             send no hedges)"
                        ))
                    })?;
            }
            "memory_limit" if self.attached.is_some() => {
                return Err(config_error(format!(
                    "prefetch.memory_limit cannot be changed with SET: it is shared by every \
                     session on this runtime ({} now). Set it when the runtime or context is \
                     built: prefetch.memory_limit in the SessionConfig, or \
                     PrefetchGovernor::of(&runtime).set_limit(..)",
                    self.value_of(key)
                )));
            }
            "price_per_1000_requests" => {
                next.price_per_1000_requests = value.parse().map_err(|e| {
                    config_error(format!(
                        "invalid value for prefetch.price_per_1000_requests: {e}"
                    ))
                })?;
            }
            "memory_limit" if value.eq_ignore_ascii_case(AUTO) => next.memory_limit = None,
            "memory_limit" => next.memory_limit = Some(parse_nonzero_size(key, value)?),
            _ => {
                let known = KEYS.map(|k| k.name).join(", ");
                return Err(config_error(format!(
                    "unknown setting 'prefetch.{key}'; known settings: {known}"
                )));
            }
        }
        next.validate()?;
        *self = next;
        Ok(())
    }

    /// Check the rules that relate settings to each other.
    pub fn validate(&self) -> Result<()> {
        if let Some(window) = self.read_ahead_window
            && window > self.memory_budget
        {
            return Err(config_error(format!(
                "prefetch.read_ahead_window ({window}) must not exceed prefetch.memory_budget ({}); \
                 raise the budget first or choose a smaller window",
                self.memory_budget
            )));
        }
        Ok(())
    }

    /// Builder-style setter for the policy.
    pub fn with_policy(mut self, policy: PrefetchPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Builder-style setter for the window and budget together, validated.
    pub fn with_window_and_budget(
        mut self,
        read_ahead_window: ByteSize,
        memory_budget: ByteSize,
    ) -> Result<Self> {
        self.read_ahead_window = Some(read_ahead_window);
        self.memory_budget = memory_budget;
        for (key, size) in [
            ("read_ahead_window", read_ahead_window),
            ("memory_budget", memory_budget),
        ] {
            if size.as_u64() == 0 {
                return Err(zero_error(key));
            }
        }
        self.validate()?;
        Ok(self)
    }

    /// Builder-style setter for the file-open depth, validated.
    pub fn with_file_open_depth(mut self, depth: usize) -> Result<Self> {
        self.set_key("file_open_depth", &depth.to_string())?;
        Ok(self)
    }

    /// Builder-style setter for when a GET is hedged.
    pub fn with_hedge_after(mut self, hedge_after: HedgeAfter) -> Self {
        self.hedge_after = hedge_after;
        self
    }

    /// Builder-style setter for the eager first-read cap.
    pub fn with_eager_first_read_cap(mut self, cap: ByteSize) -> Self {
        self.eager_first_read_cap = Some(cap);
        self
    }

    /// The settings a scan runs with, as its `EXPLAIN` line shows them:
    /// `auto(read_ahead_window=auto, memory_budget=256MiB, …)` (every key
    /// but the process-wide `memory_limit` and the price, which changes
    /// what is reported, not what is read).
    pub(crate) fn scan_settings(&self) -> String {
        let settings: Vec<String> = KEYS
            .iter()
            .map(|key| key.name)
            .filter(|name| !matches!(*name, "policy" | "memory_limit" | "price_per_1000_requests"))
            .map(|name| format!("{name}={}", self.value_of(name)))
            .collect();
        format!("{}({})", self.policy, settings.join(", "))
    }

    fn value_of(&self, key: &str) -> String {
        match key {
            "policy" => self.policy.to_string(),
            "read_ahead_window" => self
                .read_ahead_window
                .map_or_else(|| AUTO.to_string(), |w| w.to_string()),
            "memory_budget" => self.memory_budget.to_string(),
            "file_open_depth" => self
                .file_open_depth
                .map_or_else(|| AUTO.to_string(), |d| d.to_string()),
            "eager_first_read_cap" => self
                .eager_first_read_cap
                .map_or_else(|| AUTO.to_string(), |c| c.to_string()),
            "request_timeout" => self.request_timeout.to_string(),
            "hedge_after" => self.hedge_after.to_string(),
            "hedge_share" => format!("{}%", self.hedge_share),
            "price_per_1000_requests" => self.price_per_1000_requests.to_string(),
            "memory_limit" => match (&self.attached, self.memory_limit) {
                (Some(AttachedLimit(source)), _) => source.limit().to_string(),
                (None, Some(limit)) => limit.to_string(),
                (None, None) => AUTO.to_string(),
            },
            _ => unreachable!("every key in KEYS has a value"),
        }
    }
}

fn config_error(message: String) -> DataFusionError {
    DataFusionError::Configuration(message)
}

fn zero_error(key: &str) -> DataFusionError {
    config_error(format!(
        "invalid value '0' for prefetch.{key}: expected a size of at least 1 byte \
         (set prefetch.policy = 'off' to disable prefetching)"
    ))
}

fn parse_size(key: &str, value: &str) -> Result<ByteSize> {
    value
        .parse::<ByteSize>()
        .map_err(|e| config_error(format!("invalid value for prefetch.{key}: {e}")))
}

fn parse_nonzero_size(key: &str, value: &str) -> Result<ByteSize> {
    let size = parse_size(key, value)?;
    if size.as_u64() == 0 {
        return Err(zero_error(key));
    }
    Ok(size)
}

impl ExtensionOptions for PrefetchOptions {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> Result<()> {
        self.set_key(key, value)
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        KEYS.iter()
            .map(|key| ConfigEntry {
                key: format!("{}.{}", Self::PREFIX, key.name),
                value: Some(self.value_of(key.name)),
                description: key.description,
            })
            .collect()
    }
}

impl ConfigExtension for PrefetchOptions {
    const PREFIX: &'static str = "prefetch";
}

#[cfg(test)]
mod tests;

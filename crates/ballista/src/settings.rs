//! The `prefetch.*` settings as Ballista ships them: key by key.

use std::any::Any;
use std::collections::BTreeMap;

use datafusion::common::Result;
use datafusion::common::config::{ConfigEntry, ConfigExtension, ExtensionOptions};
use datafusion::prelude::SessionConfig;
use datafusion_prefetch::PrefetchOptions;

/// `prefetch.*` as the scheduler and the executors receive it.
///
/// Ballista sends a session's settings as key–value pairs and applies them one
/// at a time to a fresh config, dropping (with a debug log) every key whose set
/// fails. [`PrefetchOptions`] checks `read_ahead_window <= memory_budget` on
/// every set, so a client with `memory_budget = '2GiB'` and
/// `read_ahead_window = '1GiB'` would lose its window on the way: the window
/// arrives first and is refused against the default budget. This extension
/// validates every value alone as it arrives and the window against the
/// budget only once both are in, so the received settings are the client's
/// whatever order they arrive in.
///
/// It registers under the same `prefetch` prefix; [`into_prefetch_options`]
/// swaps it for the [`PrefetchOptions`] the scan rule reads.
#[derive(Debug, Clone, Default)]
pub struct ReceivedPrefetchOptions {
    values: BTreeMap<String, String>,
    options: PrefetchOptions,
}

impl ReceivedPrefetchOptions {
    /// The settings received so far.
    pub fn options(&self) -> &PrefetchOptions {
        &self.options
    }
}

impl ExtensionOptions for ReceivedPrefetchOptions {
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
        // A client's process-wide limit is its own: each scheduler and
        // executor process keeps its runtime's (set when it is built).
        if key == PROCESS_WIDE {
            return Ok(());
        }
        // The value alone must be one `SET` accepts (the window and the budget
        // checked against an equal partner)...
        let partner = match key {
            _ if value.trim().eq_ignore_ascii_case("auto") => None,
            "read_ahead_window" => Some(("memory_budget", value)),
            "memory_budget" => Some(("read_ahead_window", value)),
            _ => None,
        };
        options_from_pairs([(key, value)].into_iter().chain(partner))?;
        self.values.insert(key.to_string(), value.to_string());
        // ...while the window and the budget need to agree only once both are
        // in: until then the last settings that agree stay in force.
        if let Ok(options) =
            options_from_pairs(self.values.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        {
            self.options = options;
        }
        Ok(())
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        self.options.entries()
    }
}

impl ConfigExtension for ReceivedPrefetchOptions {
    const PREFIX: &'static str = PrefetchOptions::PREFIX;
}

/// Settings from `(key, value)` pairs (keys without the `prefetch.` prefix), in
/// any order; keys not given keep their defaults.
///
/// Each value is validated as `SET` would; the window and the budget are
/// validated against each other once both are in.
pub fn options_from_pairs<'a>(
    pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<PrefetchOptions> {
    let mut options = PrefetchOptions::default();
    let mut window = None;
    let mut budget = None;
    for (key, value) in pairs {
        match key {
            "read_ahead_window" => window = Some(("read_ahead_window", value)),
            "memory_budget" => budget = Some(("memory_budget", value)),
            _ => options.set_key(key, value)?,
        }
    }
    // Growing both needs the budget first, shrinking both the window first.
    let apply = |order: [Option<(&str, &str)>; 2]| {
        let mut options = options.clone();
        for (key, value) in order.into_iter().flatten() {
            options.set_key(key, value)?;
        }
        Ok::<_, datafusion::common::DataFusionError>(options)
    };
    apply([window, budget]).or_else(|_| apply([budget, window]))
}

/// The setting that does not travel: `prefetch.memory_limit` bounds one
/// process's prefetching, so each keeps its own.
const PROCESS_WIDE: &str = "memory_limit";

/// `(key, value)` pairs of `options`, keys without the `prefetch.` prefix
/// (the process-wide `memory_limit` left out).
pub fn options_to_pairs(options: &PrefetchOptions) -> Vec<(String, String)> {
    let prefix = format!("{}.", PrefetchOptions::PREFIX);
    options
        .entries()
        .into_iter()
        .filter_map(|entry| {
            let key = entry.key.strip_prefix(&prefix)?.to_string();
            (key != PROCESS_WIDE).then_some(())?;
            Some((key, entry.value?))
        })
        .collect()
}

/// Register [`ReceivedPrefetchOptions`] on `config` (a scheduler's or an
/// executor's), unless it already has `prefetch.*` settings.
pub fn with_received_prefetch_options(config: SessionConfig) -> SessionConfig {
    let extensions = &config.options().extensions;
    if extensions.get::<ReceivedPrefetchOptions>().is_some()
        || extensions.get::<PrefetchOptions>().is_some()
    {
        return config;
    }
    config.with_option_extension(ReceivedPrefetchOptions::default())
}

/// Swap the received settings for the [`PrefetchOptions`] the scan rule reads.
pub fn into_prefetch_options(config: SessionConfig) -> SessionConfig {
    let received = config
        .options()
        .extensions
        .get::<ReceivedPrefetchOptions>()
        .map(|r| r.options().clone());
    match received {
        Some(options) => config.with_option_extension(options),
        None if config
            .options()
            .extensions
            .get::<PrefetchOptions>()
            .is_none() =>
        {
            config.with_option_extension(PrefetchOptions::default())
        }
        None => config,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion_prefetch::PrefetchPolicy;

    #[test]
    fn window_and_budget_arrive_in_either_order() {
        for pairs in [
            [("read_ahead_window", "1GiB"), ("memory_budget", "2GiB")],
            [("memory_budget", "2GiB"), ("read_ahead_window", "1GiB")],
            [("read_ahead_window", "1MiB"), ("memory_budget", "2MiB")],
            [("memory_budget", "2MiB"), ("read_ahead_window", "1MiB")],
        ] {
            let mut received = ReceivedPrefetchOptions::default();
            for (key, value) in pairs {
                received.set(key, value).unwrap();
            }
            let options = received.options();
            let expected = options_from_pairs(pairs).unwrap();
            assert_eq!(options, &expected);
            let window = pairs.iter().find(|p| p.0 == "read_ahead_window").unwrap();
            assert_eq!(options.read_ahead_window().unwrap().to_string(), window.1);
        }
    }

    #[test]
    fn a_bad_value_is_refused_and_leaves_the_rest() {
        let mut received = ReceivedPrefetchOptions::default();
        received.set("policy", "batched").unwrap();
        let err = received.set("policy", "bogus").unwrap_err().to_string();
        assert!(err.contains("prefetch.policy"), "{err}");
        assert_eq!(received.options().policy(), PrefetchPolicy::Batched);
        assert!(received.set("read_ahead_window", "0").is_err());
        // A window above the budget is not taken, whatever the order.
        received.set("memory_budget", "8MiB").unwrap();
        received.set("read_ahead_window", "16MiB").unwrap();
        assert_eq!(received.options().read_ahead_window(), None);
        assert_eq!(received.options().policy(), PrefetchPolicy::Batched);
        // A client's process-wide limit does not reach other processes.
        received.set("memory_limit", "64MiB").unwrap();
        assert_eq!(received.options().memory_limit(), None);
    }

    #[test]
    fn pairs_round_trip_every_key() {
        let mut options = PrefetchOptions::default();
        for (key, value) in [
            ("policy", "streaming"),
            ("memory_budget", "1GiB"),
            ("read_ahead_window", "512MiB"),
            ("file_open_depth", "3"),
            ("eager_first_read_cap", "0"),
            ("request_timeout", "30s"),
        ] {
            options.set_key(key, value).unwrap();
        }
        let pairs = options_to_pairs(&options);
        // Every key but the process-wide limit, which each process keeps.
        assert_eq!(pairs.len(), options.entries().len() - 1);
        assert!(pairs.iter().all(|(k, _)| k != "memory_limit"), "{pairs:?}");
        let back = options_from_pairs(pairs.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        assert_eq!(back.unwrap(), options);
    }

    #[test]
    fn a_config_gets_the_received_options_as_prefetch_options() {
        let mut config = with_received_prefetch_options(SessionConfig::new());
        config
            .options_mut()
            .set("prefetch.read_ahead_window", "300MiB")
            .unwrap();
        config
            .options_mut()
            .set("prefetch.memory_budget", "600MiB")
            .unwrap();
        let config = into_prefetch_options(config);
        let options = config
            .options()
            .extensions
            .get::<PrefetchOptions>()
            .unwrap();
        assert_eq!(options.read_ahead_window().unwrap().to_string(), "300MiB");
    }
}

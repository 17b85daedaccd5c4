//! [`StoreProfiles`]: what `auto` measured of each object store, kept for a
//! session (or a Ballista executor) so later scans start informed.

use std::collections::HashMap;

use parking_lot::Mutex;

use crate::scheduler::AutoTuner;

/// What `auto` measured of each object store, kept for a session so that its
/// later scans start from the store's measured round trip and bandwidth
/// rather than from the defaults (and need no probe). Keyed by the scan's
/// object store URL (`s3://bucket`).
///
/// [`crate::enable_prefetch`] gives every scan of a session one; share one
/// across sources built by hand with
/// [`PrefetchingParquetSource::with_store_profiles`](crate::PrefetchingParquetSource::with_store_profiles).
#[derive(Debug, Default)]
pub struct StoreProfiles {
    by_store: Mutex<HashMap<String, AutoTuner>>,
}

impl StoreProfiles {
    /// No store measured yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A tuner for a new scan of `store`: its measurements so far, if any.
    pub(crate) fn tuner_for(&self, store: &str) -> AutoTuner {
        self.by_store
            .lock()
            .get(store)
            .map(AutoTuner::store_measurements)
            .unwrap_or_default()
    }

    /// Keep what a scan `measured` of `store` for the session's next scans
    /// (they take its store measurements only, see [`Self::tuner_for`]).
    pub(crate) fn record(&self, store: &str, measured: AutoTuner) {
        self.by_store.lock().insert(store.to_string(), measured);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn a_session_keeps_store_measurements_not_decoder_ones() {
        let profiles = StoreProfiles::new();
        assert!(!profiles.tuner_for("s3://bucket").has_measured());
        let mut tuner = AutoTuner::default();
        // A store of 40 ms and 100 MiB/s; a decoder of 5 MiB/s.
        for bytes in [4096, 8 * MIB, 512 << 10, 16 * MIB, 2 * MIB, 4096] {
            let transfer = Duration::from_secs_f64(bytes as f64 / (100.0 * MIB as f64));
            tuner.observe_request(bytes, Duration::from_millis(40) + transfer);
        }
        for _ in 0..4 {
            tuner.observe_decode(8 * MIB, Duration::from_secs_f64(8.0 / 5.0));
        }
        profiles.record("s3://bucket", tuner.clone());
        let next = profiles.tuner_for("s3://bucket");
        assert_eq!(next.rtt(), tuner.rtt());
        assert_eq!(next.decode_rate(), None);
        assert!(!profiles.tuner_for("s3://other").has_measured());
    }
}

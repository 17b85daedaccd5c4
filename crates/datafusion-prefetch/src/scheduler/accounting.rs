//! Where every requested byte goes: handed to a decoder (`bytes_used`) or
//! not (`bytes_wasted`), once — deferred for a background fetch until its
//! requests have gone out ([`Event::FetchSent`](super::Event::FetchSent)),
//! since a fetch stopped before that requested nothing.

use super::protocol::FetchId;
use super::scan::ScanCore;

impl ScanCore {
    /// A range planned from fetch `id` was read on demand instead: `bytes`
    /// more were requested, and the fetch's bytes for it never reached the
    /// decoder (the range's bytes count as used once, from the read).
    pub(super) fn on_fallback_read(&mut self, id: FetchId, bytes: u64) {
        self.stats.bytes_requested += bytes;
        match self.unsent.get_mut(&id) {
            // Not sent yet: the range was counted as taken from it; the
            // read, not the fetch, brought those bytes.
            Some(unsent) => {
                let moved = bytes.min(unsent.taken);
                unsent.taken -= moved;
                unsent.wasted += moved;
                self.stats.bytes_used += moved;
                self.stats.bytes_wasted += bytes - moved;
            }
            None => self.stats.bytes_wasted += bytes,
        }
    }

    /// Fetch `id`'s requests went out: count what it requested, and what of
    /// it was handed to a decoder or wasted meanwhile.
    pub(super) fn on_fetch_sent(&mut self, id: FetchId) {
        if let Some(unsent) = self.unsent.remove(&id) {
            self.stats.bytes_requested += unsent.requested;
            self.stats.bytes_used += unsent.taken;
            self.stats.bytes_wasted += unsent.gap + unsent.wasted;
        }
    }

    /// `bytes` of fetch `id` were handed to a decoder: used, once the fetch
    /// was sent.
    pub(super) fn use_bytes(&mut self, id: FetchId, bytes: u64) {
        match self.unsent.get_mut(&id) {
            Some(unsent) => unsent.taken += bytes,
            None => self.stats.bytes_used += bytes,
        }
    }

    /// `bytes` of fetch `id` never reach a decoder: waste once the fetch
    /// was sent (nothing, if it never is).
    pub(super) fn waste(&mut self, id: FetchId, bytes: u64) {
        match self.unsent.get_mut(&id) {
            Some(unsent) => unsent.wasted += bytes,
            None => self.stats.bytes_wasted += bytes,
        }
    }
}

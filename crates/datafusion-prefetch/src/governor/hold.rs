//! A reservation in the governor, held for as long as any buffer made from
//! it is alive: a fetch's bytes count against the limit from before its
//! request goes out until the decoder drops the last slice of its bodies.

use std::sync::Arc;

use bytes::Bytes;

use super::PrefetchGovernor;
use super::ledger::ScanKey;

/// Bytes reserved in a governor for one scan; released when dropped.
pub(crate) struct Hold {
    governor: Arc<PrefetchGovernor>,
    key: ScanKey,
    bytes: u64,
}

impl std::fmt::Debug for Hold {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hold").field("bytes", &self.bytes).finish()
    }
}

impl Hold {
    pub(super) fn new(governor: Arc<PrefetchGovernor>, key: ScanKey, bytes: u64) -> Self {
        Self {
            governor,
            key,
            bytes,
        }
    }

    /// Let go of this hold while its scan ends (its driver is being dropped,
    /// so no longer hears of the failed fetch that held it): the scan's staged
    /// gauge falls to zero first, as the driver's drop is about to make it,
    /// so the hold never goes while the gauge still counts its bytes.
    pub(crate) fn release_as_scan_ends(self) {
        self.governor.set_staged(self.key, 0);
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.governor.release(self.key, self.bytes);
    }
}

/// A buffer that keeps its fetch's hold alive.
struct Held {
    bytes: Bytes,
    _hold: Arc<Hold>,
}

impl AsRef<[u8]> for Held {
    fn as_ref(&self) -> &[u8] {
        self.bytes.as_ref()
    }
}

/// `buffers`, each keeping `hold` alive: the hold is released when the last
/// of them (and the last slice of any of them) is dropped, whatever order
/// the decoder drops them in — so bytes a decoder still holds after the
/// scheduler released their piece, and the gap bytes of a merged request
/// (alive as long as any slice of its body), stay counted.
pub(crate) fn hold_buffers(buffers: Vec<Bytes>, hold: Hold) -> Vec<Bytes> {
    let hold = Arc::new(hold);
    buffers
        .into_iter()
        .map(|bytes| {
            Bytes::from_owner(Held {
                bytes,
                _hold: Arc::clone(&hold),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hold_goes_with_the_last_slice_of_the_last_buffer() {
        let governor = PrefetchGovernor::new(1000);
        let share = governor.join(std::sync::Weak::<NoTenant>::new());
        let hold = share.try_reserve(300, 0).expect("room");
        assert_eq!(governor.held_bytes(), 300);
        let buffers = hold_buffers(
            vec![Bytes::from(vec![1u8; 100]), Bytes::from(vec![2u8; 200])],
            hold,
        );
        assert_eq!(&buffers[1][..2], &[2, 2]);
        let slice = buffers[0].slice(10..20);
        drop(buffers);
        assert_eq!(governor.held_bytes(), 300, "a slice still holds it");
        assert_eq!(&slice[..], &[1u8; 10]);
        drop(slice);
        assert_eq!(governor.held_bytes(), 0);
        drop(share);
        assert_eq!(governor.live_scans(), 0);
    }

    struct NoTenant;
    impl super::super::Tenant for NoTenant {
        fn notify(&self, _: super::super::Notice) {}
    }
}

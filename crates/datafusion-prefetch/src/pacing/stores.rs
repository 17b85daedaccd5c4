//! One [`RequestGate`] per store: the planning-time footer read-ahead and
//! the scans of a runtime find the same gate for the store they read.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use object_store::ObjectStore;
use parking_lot::Mutex;

use super::gate::RequestGate;

/// The gates of one runtime's stores, keyed by the store itself.
///
/// A store is known by its identity — the `Arc` the runtime's object store
/// registry hands out — not by its URL: schema inference is given the store
/// but not the URL it was registered under, and DataFusion's registry hands
/// planning and the scans the same `Arc`. (A registry that wraps its store
/// anew on each lookup, as `register_parquet_tables`' does while it
/// registers, gives each lookup a gate of its own; its schema inference is
/// DataFusion's, which reads no footers ahead.) The entry keeps a [`Weak`] to its store, so
/// the address it is keyed by cannot be reused by another store while the
/// entry stands; a store dropped and registered anew gets a fresh gate.
#[derive(Debug, Default)]
pub(crate) struct GatesByStore {
    gates: Mutex<HashMap<usize, Entry>>,
}

#[derive(Debug)]
struct Entry {
    store: Weak<dyn ObjectStore>,
    gate: Arc<RequestGate>,
}

impl GatesByStore {
    /// The gate of `store`, made the first time it is asked for.
    pub(crate) fn gate(&self, store: &Arc<dyn ObjectStore>) -> Arc<RequestGate> {
        let key = Arc::as_ptr(store).cast::<()>() as usize;
        let mut gates = self.gates.lock();
        // Stores dropped since are forgotten, so the map holds live stores only.
        gates.retain(|_, entry| entry.store.strong_count() > 0);
        let entry = gates.entry(key).or_insert_with(|| Entry {
            store: Arc::downgrade(store),
            gate: Arc::default(),
        });
        Arc::clone(&entry.gate)
    }

    /// The gates of the stores still alive.
    pub(crate) fn all(&self) -> Vec<Arc<RequestGate>> {
        let gates = self.gates.lock();
        gates
            .values()
            .filter(|entry| entry.store.strong_count() > 0)
            .map(|entry| Arc::clone(&entry.gate))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use object_store::memory::InMemory;

    use super::*;

    #[test]
    fn one_gate_per_store_and_a_fresh_one_for_a_new_store() {
        let gates = GatesByStore::default();
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let other: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let gate = gates.gate(&store);
        assert!(Arc::ptr_eq(&gate, &gates.gate(&Arc::clone(&store))));
        assert!(!Arc::ptr_eq(&gate, &gates.gate(&other)));

        let _permit = gate.send_anyway();
        drop(store);
        let replacement: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let fresh = gates.gate(&replacement);
        assert_eq!(
            fresh.state().in_flight,
            0,
            "a new store starts with an empty window"
        );
        assert_eq!(
            gates.gates.lock().len(),
            2,
            "the dropped store's entry is gone"
        );
    }
}

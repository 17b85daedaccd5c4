//! The shared rule list of a [`FaultyStore`](crate::FaultyStore): rules
//! with their run-time state (counters, RNGs, ranges already hit), and the
//! decision for each GET.

use std::collections::HashSet;

use object_store::GetRange;
use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::faults::{Fault, FaultRule};

/// A hashable copy of a requested range, for [`FaultRule::once_per_range`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum RangeKey {
    Whole,
    Bounded(u64, u64),
    Offset(u64),
    Suffix(u64),
}

impl From<Option<&GetRange>> for RangeKey {
    fn from(range: Option<&GetRange>) -> Self {
        match range {
            None => Self::Whole,
            Some(GetRange::Bounded(r)) => Self::Bounded(r.start, r.end),
            Some(GetRange::Offset(o)) => Self::Offset(*o),
            Some(GetRange::Suffix(n)) => Self::Suffix(*n),
        }
    }
}

/// A rule together with its run-time state.
#[derive(Debug)]
struct InstalledRule {
    rule: FaultRule,
    rng: Option<StdRng>,
    matches: u64,
    fired: u64,
    hit: HashSet<(String, RangeKey)>,
}

impl InstalledRule {
    fn new(rule: FaultRule) -> Self {
        Self {
            rng: rule
                .probability
                .map(|(_, seed)| StdRng::seed_from_u64(seed)),
            rule,
            matches: 0,
            fired: 0,
            hit: HashSet::new(),
        }
    }

    /// Decides whether this rule fires on the request, updating its state.
    fn fires(&mut self, request: u64, path: &str, range: Option<&GetRange>) -> bool {
        let rule = &self.rule;
        if !rule.selects(request, path, range) {
            return false;
        }
        if let (Some((p, _)), Some(rng)) = (rule.probability, self.rng.as_mut())
            && !rng.random_bool(p)
        {
            return false;
        }
        let key = rule
            .once_per_range
            .then(|| (path.to_string(), RangeKey::from(range)));
        if key.as_ref().is_some_and(|key| self.hit.contains(key)) {
            return false;
        }
        self.matches += 1;
        if self.matches <= rule.skip || rule.times.is_some_and(|k| self.fired >= k) {
            return false;
        }
        self.fired += 1;
        if let Some(key) = key {
            self.hit.insert(key);
        }
        true
    }
}

#[derive(Debug, Default)]
struct RulesState {
    rules: Vec<InstalledRule>,
    next_request: u64,
}

/// The fault rules of a [`FaultyStore`](crate::FaultyStore), shared through
/// an `Arc` (see [`FaultyStore::faults`](crate::FaultyStore::faults)) so a
/// test can change them while the store is in use — for instance let
/// planning read footers cleanly and only then install faults for the scan.
///
/// Rules are checked in order and the **first rule that fires wins**; rules
/// after it are not consulted for that request, so their match counters
/// and RNGs do not advance. A rule that matches but does not fire (skipped,
/// exhausted, or already hit for that range) lets the search continue.
///
/// Installing a rule (with [`push`](Self::push), [`insert`](Self::insert)
/// or [`set`](Self::set)) starts it with fresh counters and RNG.
#[derive(Debug, Default)]
pub struct FaultRules {
    state: Mutex<RulesState>,
}

/// The outcome of consulting the rules for one GET.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    pub(crate) request: u64,
    /// The rule that fired: its index, label and fault.
    pub(crate) injection: Option<(usize, Option<String>, Fault)>,
}

impl FaultRules {
    /// An empty rule list: no faults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `rule` (it has the lowest priority).
    pub fn push(&self, rule: FaultRule) {
        self.state.lock().rules.push(InstalledRule::new(rule));
    }

    /// Inserts `rule` at `index` (0 = highest priority).
    ///
    /// # Panics
    ///
    /// If `index > len()`.
    pub fn insert(&self, index: usize, rule: FaultRule) {
        self.state
            .lock()
            .rules
            .insert(index, InstalledRule::new(rule));
    }

    /// Removes and returns the rule at `index`, or `None` if there is none.
    pub fn remove(&self, index: usize) -> Option<FaultRule> {
        let mut state = self.state.lock();
        (index < state.rules.len()).then(|| state.rules.remove(index).rule)
    }

    /// Replaces all rules.
    pub fn set(&self, rules: impl IntoIterator<Item = FaultRule>) {
        let rules = rules.into_iter().map(InstalledRule::new).collect();
        self.state.lock().rules = rules;
    }

    /// Removes all rules: from now on, no faults.
    pub fn clear(&self) {
        self.state.lock().rules.clear();
    }

    /// Number of installed rules (exhausted ones included).
    pub fn len(&self) -> usize {
        self.state.lock().rules.len()
    }

    /// Returns `true` if no rule is installed.
    pub fn is_empty(&self) -> bool {
        self.state.lock().rules.is_empty()
    }

    /// A copy of the installed rules, in priority order.
    pub fn rules(&self) -> Vec<FaultRule> {
        self.state
            .lock()
            .rules
            .iter()
            .map(|r| r.rule.clone())
            .collect()
    }

    /// How many times the rule at `index` has fired since it was installed
    /// (`None` if there is no such rule).
    pub fn fired(&self, index: usize) -> Option<u64> {
        self.state.lock().rules.get(index).map(|r| r.fired)
    }

    /// The number the next GET will get, i.e. how many GETs have been
    /// numbered so far. `FaultRule::new(f).requests(rules.next_request()..)`
    /// affects only GETs issued from now on.
    pub fn next_request(&self) -> u64 {
        self.state.lock().next_request
    }

    /// Numbers a GET and picks the fault to inject, if any.
    pub(crate) fn decide(&self, path: &str, range: Option<&GetRange>) -> Decision {
        let mut state = self.state.lock();
        let request = state.next_request;
        state.next_request += 1;
        let injection = state
            .rules
            .iter_mut()
            .enumerate()
            .find_map(|(index, installed)| {
                installed
                    .fires(request, path, range)
                    .then(|| (index, installed.rule.label.clone(), installed.rule.fault))
            });
        Decision { request, injection }
    }
}

//! The governor's decisions, pure: what every prefetching scan of a process
//! holds, whether one more reservation fits the limit, whose turn it is when
//! several scans want room, and which idle scan should give its share back.
//! No locks, no clock (time is passed in), no I/O — `super` does those.

use std::collections::BTreeMap;
use std::time::Duration;

/// Identifies one scan in the ledger.
pub(crate) type ScanKey = u64;

/// How long a scan's decoders may go without asking for bytes before its
/// consumer counts as idle: a decoder busy on one row group asks again
/// within tens of milliseconds, a hash join's probe side waiting for its
/// build side, or a client that stopped reading, does not for seconds.
pub(crate) const IDLE_AFTER: Duration = Duration::from_millis(250);

/// Whether a reservation fits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Reserved: the bytes count against the limit until released.
    Granted,
    /// Not now: the scan is told when room is freed.
    Refused,
}

/// What the governor must tell scans after a decision: it delivers these
/// outside its lock.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Notices {
    /// Scans that were refused and may find room now.
    pub wake: Vec<ScanKey>,
    /// Idle scans asked to give back this many staged bytes, so that scans
    /// that are reading get room.
    pub shed: Vec<(ScanKey, u64)>,
}

impl Notices {
    /// Nothing to tell anyone.
    pub(crate) fn is_empty(&self) -> bool {
        self.wake.is_empty() && self.shed.is_empty()
    }

    /// These notices and `later`'s: a scan the ledger marked woken in either
    /// is told once, a scan asked to shed twice is asked for the sum.
    pub(crate) fn merge(mut self, later: Notices) -> Notices {
        for key in later.wake {
            if !self.wake.contains(&key) {
                self.wake.push(key);
            }
        }
        for (key, bytes) in later.shed {
            match self.shed.iter_mut().find(|(k, _)| *k == key) {
                Some((_, asked)) => *asked += bytes,
                None => self.shed.push((key, bytes)),
            }
        }
        self
    }
}

/// Where a scan stands in asking for room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// Its last reservation was granted (or it has asked for nothing).
    Satisfied,
    /// Refused at `since`; `woken` once it has been told of freed room.
    Waiting { since: Duration, woken: bool },
}

/// One scan's account.
#[derive(Debug, Clone)]
struct Account {
    /// Bytes reserved and not yet released: staged pieces, requests in
    /// flight, and landed buffers still referenced.
    held: u64,
    /// Bytes its scheduler reports staged: a part of `held`, raised with
    /// the hold that covers them and lowered before that hold is let go.
    staged: u64,
    /// Changes after which `staged` exceeded `held`.
    violations: u64,
    /// When its decoders last asked for bytes (or it joined).
    last_read: Duration,
    want: Want,
    /// Asked to shed since its last read.
    shed_asked: bool,
    /// The scan is over; the account goes once its buffers are released.
    ended: bool,
    /// Not a scan: what planning keeps for scans to come
    /// ([`Ledger::join_keeper`]).
    keeper: bool,
}

/// The accounts of every prefetching scan under one limit.
#[derive(Debug, Clone)]
pub(crate) struct Ledger {
    limit: u64,
    idle_after: Duration,
    accounts: BTreeMap<ScanKey, Account>,
    next_key: ScanKey,
    held: u64,
    staged: u64,
    peak_held: u64,
    peak_staged: u64,
    refusals: u64,
    violations: u64,
}

impl Ledger {
    /// An empty ledger under `limit` bytes.
    pub(crate) fn new(limit: u64, idle_after: Duration) -> Self {
        Self {
            limit,
            idle_after,
            accounts: BTreeMap::new(),
            next_key: 0,
            held: 0,
            staged: 0,
            peak_held: 0,
            peak_staged: 0,
            refusals: 0,
            violations: 0,
        }
    }

    /// The limit.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held by all scans now.
    pub(crate) fn held(&self) -> u64 {
        self.held
    }

    /// Bytes staged by all scans now.
    pub(crate) fn staged(&self) -> u64 {
        self.staged
    }

    /// The most bytes ever held at once.
    pub(crate) fn peak_held(&self) -> u64 {
        self.peak_held
    }

    /// The most bytes ever staged at once, across all scans.
    pub(crate) fn peak_staged(&self) -> u64 {
        self.peak_staged
    }

    /// Reservations refused so far.
    pub(crate) fn refusals(&self) -> u64 {
        self.refusals
    }

    /// Changes after which some scan staged more than it held: each is a
    /// staged byte that no reservation covered at that instant. Zero when
    /// the scans keep their order (raise staged with the hold, lower it
    /// before letting the hold go).
    pub(crate) fn violations(&self) -> u64 {
        self.violations
    }

    /// [`Self::violations`] of one scan (zero once its account is gone).
    pub(crate) fn violations_of(&self, key: ScanKey) -> u64 {
        self.accounts.get(&key).map_or(0, |a| a.violations)
    }

    /// Count a violation if `key` stages more than it holds now.
    fn check(&mut self, key: ScanKey) {
        if let Some(account) = self.accounts.get_mut(&key)
            && account.staged > account.held
        {
            account.violations += 1;
            self.violations += 1;
        }
    }

    /// Scans not yet ended.
    pub(crate) fn live_scans(&self) -> usize {
        self.accounts
            .values()
            .filter(|a| !a.ended && !a.keeper)
            .count()
    }

    /// A new scan joins at `now`.
    pub(crate) fn join(&mut self, now: Duration) -> ScanKey {
        self.open(now, false)
    }

    /// The account of what is staged for scans not yet running (bodies
    /// planning keeps for them): it never reads, so it is always idle —
    /// asked to shed first, and no share of the limit is set aside for it —
    /// it yields to any scan waiting for room, is never told of freed room
    /// when refused, and asks nobody to shed. Not a live scan.
    pub(crate) fn join_keeper(&mut self, now: Duration) -> ScanKey {
        self.open(now, true)
    }

    fn open(&mut self, now: Duration, keeper: bool) -> ScanKey {
        let key = self.next_key;
        self.next_key += 1;
        self.accounts.insert(
            key,
            Account {
                held: 0,
                staged: 0,
                last_read: now,
                violations: 0,
                want: Want::Satisfied,
                shed_asked: false,
                ended: false,
                keeper,
            },
        );
        key
    }

    /// The scan ended: it asks for nothing more. Its account stays until
    /// what it holds is released (a decoder may still hold its buffers).
    pub(crate) fn leave(&mut self, key: ScanKey) -> Notices {
        self.set_staged(key, 0);
        let Some(account) = self.accounts.get_mut(&key) else {
            return Notices::default();
        };
        account.ended = true;
        account.want = Want::Satisfied;
        if account.held == 0 {
            self.accounts.remove(&key);
        }
        // Its turn goes to the others.
        self.wake_waiting()
    }

    /// The scan's decoders asked for bytes at `now`: its consumer is reading.
    pub(crate) fn read_asked(&mut self, key: ScanKey, now: Duration) {
        if let Some(account) = self.accounts.get_mut(&key) {
            account.last_read = now;
            account.shed_asked = false;
        }
    }

    /// The scan's scheduler now stages `staged` bytes. Never clamped to
    /// what it holds: a figure above it is counted as a violation.
    pub(crate) fn set_staged(&mut self, key: ScanKey, staged: u64) {
        if let Some(account) = self.accounts.get_mut(&key) {
            self.staged = self.staged - account.staged + staged;
            account.staged = staged;
            self.peak_staged = self.peak_staged.max(self.staged);
        }
        self.check(key);
    }

    /// Notices that could not be delivered (no runtime to run them on): the
    /// scans are told again at the next change, as if never told.
    pub(crate) fn rearm(&mut self, undelivered: &Notices) {
        for key in &undelivered.wake {
            if let Some(account) = self.accounts.get_mut(key)
                && let Want::Waiting { since, .. } = account.want
            {
                account.want = Want::Waiting {
                    since,
                    woken: false,
                };
            }
        }
        for (key, _) in &undelivered.shed {
            if let Some(account) = self.accounts.get_mut(key) {
                account.shed_asked = false;
            }
        }
    }

    /// A new limit (existing reservations stay; new ones wait until they fit).
    pub(crate) fn set_limit(&mut self, limit: u64) -> Notices {
        self.limit = limit;
        self.wake_waiting()
    }

    /// May `key` reserve `bytes` more at `now`, `staged` of them staged
    /// from the moment they are granted?
    ///
    /// Granted when the bytes fit under the limit, unless a scan that holds
    /// less than its fair share (the limit divided among the scans whose
    /// decoders are reading) is waiting and this one would go over its own
    /// share: then it yields, so bytes released flow to the waiting scan.
    /// A scan that holds nothing never yields (its first bytes come as soon
    /// as they fit), and scans that are all over their shares do not hold
    /// each other up. A refusal asks idle scans to shed what stands in the
    /// way of a scan within its share.
    pub(crate) fn try_reserve(
        &mut self,
        key: ScanKey,
        bytes: u64,
        staged: u64,
        now: Duration,
    ) -> (Verdict, Notices) {
        let Some(account) = self.accounts.get(&key) else {
            return (Verdict::Refused, Notices::default());
        };
        let share = self.fair_share(now, key);
        let held = account.held;
        let keeper = account.keeper;
        let fits = self.held.saturating_add(bytes) <= self.limit;
        let yields = (keeper || (held > 0 && held + bytes > share))
            && self.deserving_waiter(key, now, share);
        if fits && !yields {
            let account = self.accounts.get_mut(&key).expect("checked");
            account.held += bytes;
            account.staged += staged;
            account.want = Want::Satisfied;
            self.held += bytes;
            self.staged += staged;
            self.peak_held = self.peak_held.max(self.held);
            self.peak_staged = self.peak_staged.max(self.staged);
            self.check(key);
            return (Verdict::Granted, Notices::default());
        }
        if keeper {
            return (Verdict::Refused, Notices::default());
        }
        self.refusals += 1;
        let account = self.accounts.get_mut(&key).expect("checked");
        account.want = Want::Waiting {
            since: now,
            woken: false,
        };
        let mut notices = Notices::default();
        if !fits && held + bytes <= share {
            let deficit = self.held + bytes - self.limit;
            notices.shed = self.ask_idle_to_shed(key, now, deficit);
        }
        (Verdict::Refused, notices)
    }

    /// `key` released `bytes` it held: waiting scans are told.
    pub(crate) fn release(&mut self, key: ScanKey, bytes: u64) -> Notices {
        let Some(account) = self.accounts.get_mut(&key) else {
            return Notices::default();
        };
        let bytes = bytes.min(account.held);
        account.held -= bytes;
        self.held -= bytes;
        if account.ended && account.held == 0 {
            self.accounts.remove(&key);
        }
        self.check(key);
        self.wake_waiting()
    }

    /// The limit divided among the scans whose decoders read within the
    /// idle time, `asking` among them.
    fn fair_share(&self, now: Duration, asking: ScanKey) -> u64 {
        let reading = self
            .accounts
            .iter()
            .filter(|(k, a)| !a.ended && (**k == asking || !self.is_idle(a, now)))
            .count() as u64;
        self.limit / reading.max(1)
    }

    fn is_idle(&self, account: &Account, now: Duration) -> bool {
        account.keeper || now.saturating_sub(account.last_read) > self.idle_after
    }

    /// Whether a scan other than `key`, holding less than `share`, was
    /// refused within the idle time and has not been granted since.
    fn deserving_waiter(&self, key: ScanKey, now: Duration, share: u64) -> bool {
        self.accounts.iter().any(|(k, a)| {
            *k != key
                && !a.ended
                && a.held < share
                && matches!(a.want, Want::Waiting { since, .. }
                    if now.saturating_sub(since) <= self.idle_after)
        })
    }

    /// Ask idle scans other than `key` to give back up to `deficit` staged
    /// bytes, those staging most first; each is asked once per idle spell.
    fn ask_idle_to_shed(
        &mut self,
        key: ScanKey,
        now: Duration,
        mut deficit: u64,
    ) -> Vec<(ScanKey, u64)> {
        let mut idle: Vec<(ScanKey, u64)> = self
            .accounts
            .iter()
            .filter(|(k, a)| {
                **k != key && !a.ended && !a.shed_asked && a.staged > 0 && self.is_idle(a, now)
            })
            .map(|(k, a)| (*k, a.staged))
            .collect();
        idle.sort_by_key(|(k, staged)| (std::cmp::Reverse(*staged), *k));
        let mut asked = vec![];
        for (k, staged) in idle {
            if deficit == 0 {
                break;
            }
            let bytes = staged.min(deficit);
            deficit -= bytes;
            // The keeper gives back what it is asked for at once: it may be
            // asked again.
            let account = self.accounts.get_mut(&k).expect("listed");
            account.shed_asked = !account.keeper;
            asked.push((k, bytes));
        }
        asked
    }

    /// Tell every scan refused since it was last told that room was freed.
    fn wake_waiting(&mut self) -> Notices {
        let mut wake = vec![];
        for (key, account) in &mut self.accounts {
            if let Want::Waiting {
                since,
                woken: false,
            } = account.want
            {
                account.want = Want::Waiting { since, woken: true };
                wake.push(*key);
            }
        }
        Notices { wake, shed: vec![] }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ledger(limit: u64) -> Ledger {
        Ledger::new(limit, IDLE_AFTER)
    }

    #[test]
    fn reservations_never_take_the_total_over_the_limit() {
        let mut l = ledger(100);
        let a = l.join(MS);
        assert_eq!(l.try_reserve(a, 60, 0, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(a, 40, 0, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(a, 1, 0, MS).0, Verdict::Refused);
        assert_eq!((l.held(), l.peak_held()), (100, 100));
        l.release(a, 30);
        assert_eq!(l.try_reserve(a, 30, 0, MS).0, Verdict::Granted);
        assert_eq!(l.held(), 100);
    }

    #[test]
    fn a_refused_scan_is_woken_once_by_the_next_release() {
        let mut l = ledger(100);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 100, 0, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(b, 10, 0, MS).0, Verdict::Refused);
        assert_eq!(l.release(a, 10).wake, vec![b]);
        // Told once until refused again.
        assert!(l.release(a, 10).wake.is_empty());
        assert_eq!(l.try_reserve(b, 10, 0, 2 * MS).0, Verdict::Granted);
    }

    #[test]
    fn a_new_scan_gets_its_first_bytes_as_soon_as_they_fit() {
        let mut l = ledger(100);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 100, 0, MS).0, Verdict::Granted);
        // b waits; a, over its share of 50, may not take back what it frees.
        assert_eq!(l.try_reserve(b, 20, 0, MS).0, Verdict::Refused);
        l.release(a, 20);
        assert_eq!(l.try_reserve(a, 20, 0, 2 * MS).0, Verdict::Refused);
        assert_eq!(l.try_reserve(b, 20, 0, 2 * MS).0, Verdict::Granted);
    }

    #[test]
    fn shares_flow_to_the_scan_below_its_share_until_it_has_it() {
        let mut l = ledger(100);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 100, 0, MS).0, Verdict::Granted);
        for step in 0..5 {
            let now = (2 + step) * MS;
            assert_eq!(l.try_reserve(b, 10, 0, now).0, Verdict::Refused, "{step}");
            l.release(a, 10);
            assert_eq!(
                l.try_reserve(a, 10, 0, now).0,
                Verdict::Refused,
                "a yields at {step}"
            );
            assert_eq!(
                l.try_reserve(b, 10, 0, now).0,
                Verdict::Granted,
                "b at {step}"
            );
        }
        // Both at their share of 50: b asks for more than its share and
        // waits; a is no longer held back by a scan below its share.
        assert_eq!(l.try_reserve(b, 10, 0, 8 * MS).0, Verdict::Refused);
        l.release(a, 10);
        assert_eq!(l.try_reserve(a, 10, 0, 8 * MS).0, Verdict::Granted);
    }

    #[test]
    fn scans_over_their_shares_do_not_hold_each_other_up() {
        let mut l = ledger(100);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 60, 0, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(b, 40, 0, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(a, 10, 0, MS).0, Verdict::Refused);
        assert_eq!(l.try_reserve(b, 20, 0, MS).0, Verdict::Refused);
        l.release(b, 30);
        // b (10, below its share) still waits for its 20: a yields.
        assert_eq!(l.try_reserve(a, 10, 0, MS).0, Verdict::Refused);
        assert_eq!(l.try_reserve(b, 20, 0, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(a, 10, 0, MS).0, Verdict::Granted);
    }

    #[test]
    fn a_waiter_that_stopped_asking_holds_nobody_up() {
        let mut l = ledger(100);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 90, 0, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(b, 20, 0, MS).0, Verdict::Refused);
        l.release(a, 40);
        // b never came back: after the idle time, a may take the room.
        let later = MS + IDLE_AFTER + MS;
        l.read_asked(a, later);
        assert_eq!(l.try_reserve(a, 40, 0, later).0, Verdict::Granted);
    }

    #[test]
    fn idle_scans_are_asked_to_give_their_staged_bytes_back() {
        let mut l = ledger(100);
        let (idle, reading) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(idle, 100, 0, MS).0, Verdict::Granted);
        l.set_staged(idle, 80);
        let later = MS + IDLE_AFTER + MS;
        l.read_asked(reading, later);
        let (verdict, notices) = l.try_reserve(reading, 30, 0, later);
        assert_eq!(verdict, Verdict::Refused);
        assert_eq!(notices.shed, vec![(idle, 30)]);
        // Asked once per idle spell.
        let (_, notices) = l.try_reserve(reading, 30, 0, later);
        assert!(notices.shed.is_empty());
        // A read ends the spell.
        l.read_asked(idle, later);
        l.read_asked(idle, later + IDLE_AFTER + 2 * MS);
        let (_, notices) = l.try_reserve(reading, 30, 0, later + 2 * IDLE_AFTER + 4 * MS);
        assert_eq!(notices.shed, vec![(idle, 30)]);
    }

    #[test]
    fn the_keeper_sets_no_share_aside_yields_to_waiters_and_sheds_first() {
        let mut l = ledger(100);
        let keeper = l.join_keeper(MS);
        let scan = l.join(MS);
        assert_eq!(l.live_scans(), 1, "the keeper is no scan");
        assert_eq!(l.try_reserve(keeper, 30, 30, MS).0, Verdict::Granted);
        // The scan's share is the whole limit: the keeper never reads.
        assert_eq!(l.try_reserve(scan, 70, 0, MS).0, Verdict::Granted);
        l.read_asked(scan, 2 * MS);
        let (verdict, notices) = l.try_reserve(scan, 20, 0, 2 * MS);
        assert_eq!(verdict, Verdict::Refused);
        assert_eq!(notices.shed, vec![(keeper, 20)], "idle from the start");
        // Refused itself, the keeper waits for nothing and asks nothing.
        let (verdict, notices) = l.try_reserve(keeper, 1, 1, 2 * MS);
        assert_eq!(verdict, Verdict::Refused);
        assert!(notices.is_empty());
        l.set_staged(keeper, 0);
        assert!(l.release(keeper, 30).wake.contains(&scan));
        assert!(!l.release(scan, 40).wake.contains(&keeper));
        // With the scan waiting for room, the keeper yields even holding
        // nothing.
        assert_eq!(l.try_reserve(keeper, 10, 10, 2 * MS).0, Verdict::Refused);
        assert_eq!(l.try_reserve(scan, 30, 0, 2 * MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(keeper, 10, 10, 2 * MS).0, Verdict::Granted);
        assert_eq!(l.violations(), 0);
    }

    #[test]
    fn a_scan_reading_is_never_asked_to_shed() {
        let mut l = ledger(100);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 100, 0, MS).0, Verdict::Granted);
        l.set_staged(a, 100);
        let (verdict, notices) = l.try_reserve(b, 30, 0, 2 * MS);
        assert_eq!(verdict, Verdict::Refused);
        assert!(notices.shed.is_empty());
    }

    #[test]
    fn an_ended_scan_stays_until_its_buffers_are_released() {
        let mut l = ledger(100);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 70, 0, MS).0, Verdict::Granted);
        l.set_staged(a, 70);
        assert_eq!(l.try_reserve(b, 40, 0, MS).0, Verdict::Refused);
        assert_eq!(l.leave(a).wake, vec![b]);
        assert_eq!((l.live_scans(), l.held(), l.staged()), (1, 70, 0));
        l.release(a, 70);
        assert_eq!(l.held(), 0);
        assert_eq!(l.try_reserve(b, 40, 0, 2 * MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(a, 1, 0, 2 * MS).0, Verdict::Refused, "gone");
    }

    #[test]
    fn the_staged_total_and_its_peak_follow_every_scan() {
        let mut l = ledger(1000);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 40, 30, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(b, 50, 50, MS).0, Verdict::Granted);
        l.set_staged(a, 10);
        assert_eq!((l.staged(), l.peak_staged()), (60, 80));
        assert_eq!(l.violations(), 0);
    }

    #[test]
    fn staged_above_held_is_counted_at_the_change_that_makes_it() {
        let mut l = ledger(1000);
        let a = l.join(MS);
        // Raised with the hold, lowered before it goes: never a violation.
        assert_eq!(l.try_reserve(a, 100, 80, MS).0, Verdict::Granted);
        l.set_staged(a, 20);
        l.release(a, 80);
        assert_eq!(l.violations(), 0);
        // The wrong order: the hold goes first, then staged is lowered.
        l.release(a, 20);
        assert_eq!((l.violations(), l.violations_of(a)), (1, 1));
        l.set_staged(a, 0);
        // Staged reported with nothing held.
        l.set_staged(a, 5);
        assert_eq!(l.violations(), 2);
    }

    #[test]
    fn an_undelivered_wake_up_is_delivered_at_the_next_release() {
        let mut l = ledger(100);
        let (a, b) = (l.join(MS), l.join(MS));
        assert_eq!(l.try_reserve(a, 100, 0, MS).0, Verdict::Granted);
        assert_eq!(l.try_reserve(b, 10, 0, MS).0, Verdict::Refused);
        let told = l.release(a, 10);
        assert_eq!(told.wake, vec![b]);
        // Nobody could run the notice: b is told again next time.
        l.rearm(&told);
        assert_eq!(l.release(a, 10).wake, vec![b]);
    }

    #[test]
    fn a_lower_limit_holds_new_reservations_until_they_fit() {
        let mut l = ledger(100);
        let a = l.join(MS);
        assert_eq!(l.try_reserve(a, 80, 0, MS).0, Verdict::Granted);
        l.set_limit(50);
        assert_eq!(l.try_reserve(a, 1, 0, MS).0, Verdict::Refused);
        l.release(a, 40);
        assert_eq!(l.try_reserve(a, 10, 0, MS).0, Verdict::Granted);
        assert_eq!(l.held(), 50);
    }
}

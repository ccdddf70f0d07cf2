//! What a guard, its [`Lease`](crate::Lease) clones and the renewal loop share about one held
//! lease: how long it is certainly valid, and whether it has ended.
//!
//! Every change of a lease's expiry (a renewal, or an `extend` to a new ttl) is a request
//! whose reply may be lost, and requests sent on different connections (one timed out, the
//! next on a fresh connection) can reach Redis in another order than they were sent. So the
//! order of expiry changes is made explicit: each `extend` opens a new **epoch** with its own
//! ttl, every request carries the epoch it belongs to, and the extend script refuses a
//! request of an older epoch than the newest one it applied (`extend.lua`).
//!
//! Invariants:
//! 1. The deadline never claims more than Redis grants. It is the smaller of (a) the deadline
//!    set by the newest confirmed request of the newest confirmed epoch, and (b) the deadline
//!    each request of a NEWER epoch whose outcome is unknown (in flight, timed out, its
//!    future dropped) would set if it applied. Each deadline counts from before its request
//!    was sent, minus the drift allowance.
//! 2. Requests of one epoch all ask for the same ttl, so whichever of them Redis applies last
//!    leaves an expiry at least as late as any of them promised: their order does not matter.
//! 3. A confirmed request of epoch E settles every request of epoch E or older: Redis refuses
//!    the older ones from then on, and the ones of E cannot shorten the lease (2).
//! 4. A lease ends exactly once, when its guard releases it or is dropped, or when it is lost.
//!    From then on every clone says so: `check` fails, `remaining` is zero, `lost` resolves.
//! 5. A lost lease has one cause, named by whoever declares the loss first (the renewal loop, or
//!    a clone that finds the deadline passed), before its lost signal fires.
//! 6. Redis keeps a lease for its ttl and the lock delay (`Holds::lock_delay`); the holder
//!    counts on the ttl alone. Every grant and expiry change asks for both (`server_ms`),
//!    but a release before a minimum hold ends, which asks for what is left of the minimum.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, LostCause, Result};
use crate::kind::ExpiryReply;
use crate::options::{drift_allowance, ttl_millis};

/// The renewal loop's side of a tracked lease, as the lease sees it: why the lease, past its
/// deadline, is lost by `now` (a loop that ran late names it). A trait, so that the lease
/// needs nothing of the loop's module, which builds on this one.
pub(crate) trait LateWatch: Send + Sync + std::fmt::Debug {
    /// The cause of a loss found at `now`; `None` once the loop no longer tracks the lease.
    fn cause_at_deadline(&self, now: Instant) -> Option<LostCause>;
}

/// What a guard, its lease clones and the renewal loop share about one lease.
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// Cancelled when the lease ends: lost, released, or its guard dropped.
    pub(crate) lost: CancellationToken,
    /// Set when the guard gave the lease back (release or drop), as opposed to losing it.
    released: AtomicBool,
    /// Why it was lost: set before `lost` is cancelled (invariant 5).
    cause: OnceLock<LostCause>,
    /// The renewal loop tracking it: asked whether it ran late, when a clone finds the
    /// deadline passed before the loop declared the loss.
    watch: OnceLock<Box<dyn LateWatch>>,
    /// When the request that took the lease was sent: what beats count from.
    born: Instant,
    /// The holder's last beat, in ms since `born` (the grant counts as one).
    last_beat: AtomicU64,
    /// The longest the holder may go without a beat and still be renewed (a heartbeat).
    max_silence: Option<Duration>,
    /// How much longer than its ttl Redis keeps the lease (invariant 6).
    lock_delay: Duration,
    timing: Mutex<Timing>,
}

#[derive(Debug)]
struct Timing {
    /// The ttl of the newest epoch: what renewals ask for.
    ttl: Duration,
    /// The newest epoch opened (0: the acquire's ttl; each `extend` opens the next).
    epoch: u64,
    /// The newest confirmed epoch, and the deadline its newest confirmed request set.
    confirmed: (u64, Instant),
    /// For each newer epoch with a request of unknown outcome: the earliest deadline one of
    /// them would set if it applied. Small: one entry per unsettled `extend`.
    unknown: Vec<(u64, Instant)>,
    /// When the lease ended by release or drop.
    ended_at: Option<Instant>,
    /// The most it may be held until (a maximum hold): never valid past it.
    end_by: Option<Instant>,
}

/// One request that changes a lease's expiry: what to send, and what it would mean.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ExpiryChange {
    /// The epoch the request belongs to (sent to the script).
    pub(crate) epoch: u64,
    /// The ttl it asks for.
    pub(crate) ttl: Duration,
    /// What it asks Redis for, in ms: the ttl and the lock delay (invariant 6).
    pub(crate) server_ms: u64,
    /// The deadline it sets if Redis applies it.
    deadline: Instant,
}

impl LeaseState {
    /// A lease granted by a request sent at `requested_at` for `ttl`.
    pub(crate) fn new(requested_at: Instant, ttl: Duration) -> Self {
        LeaseState {
            lost: CancellationToken::new(),
            released: AtomicBool::new(false),
            cause: OnceLock::new(),
            watch: OnceLock::new(),
            born: requested_at,
            last_beat: AtomicU64::new(0),
            max_silence: None,
            lock_delay: Duration::ZERO,
            timing: Mutex::new(Timing {
                ttl,
                epoch: 0,
                confirmed: (0, deadline_of(requested_at, ttl)),
                unknown: Vec::new(),
                ended_at: None,
                end_by: None,
            }),
        }
    }

    /// This lease held on `holds`, counted from its request: a maximum hold caps it, a
    /// heartbeat makes its renewals wait on beats, a lock delay lengthens what Redis keeps.
    pub(crate) fn held_on(mut self, holds: &Holds) -> Self {
        if let Some(max) = holds.max {
            self.end_by(self.born + max);
        }
        self.max_silence = holds.silence;
        self.lock_delay = holds.lock_delay;
        self
    }

    /// A lease taken over from another process (a ticket), confirmed by an expiry change of
    /// `epoch` sent at `requested_at` for `ttl`: its own renewals continue in that epoch.
    pub(crate) fn resumed(requested_at: Instant, ttl: Duration, epoch: u64) -> Self {
        let state = LeaseState::new(requested_at, ttl);
        {
            let mut t = state.timing();
            t.epoch = epoch;
            t.confirmed = (epoch, deadline_of(requested_at, ttl));
        }
        state
    }

    /// `ttl`, shortened so that a lease extended by it now ends no later than its maximum hold
    /// (at least a millisecond).
    pub(crate) fn capped(&self, ttl: Duration) -> Duration {
        match self.timing().end_by {
            Some(end) => ttl
                .min(end.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1)),
            None => ttl,
        }
    }

    /// The newest epoch opened: a ticket carries it, so its next holder orders after it.
    pub(crate) fn epoch(&self) -> u64 {
        self.timing().epoch
    }

    /// Caps the lease at `end`: it is never valid past it, so its lost signal fires then and
    /// the renewal loop stops renewing it (a maximum hold).
    pub(crate) fn end_by(&self, end: Instant) {
        self.timing().end_by = Some(end);
    }

    fn timing(&self) -> MutexGuard<'_, Timing> {
        // Every change leaves the fields consistent before the next line can panic, so a
        // poisoned lock still holds a valid state.
        crate::util::lock_unpoisoned(&self.timing)
    }

    /// The moment (monotonic clock) until which the lease is certainly ours (invariant 1),
    /// or when it ended, whichever is earlier.
    pub(crate) fn valid_until(&self) -> Instant {
        self.timing().valid_until()
    }

    /// The ttl renewals ask for: the newest epoch's.
    pub(crate) fn ttl(&self) -> Duration {
        self.timing().ttl
    }

    /// When the next renewal is due: two thirds of the newest ttl before the deadline, so a
    /// stall of a third of the ttl (less the drift allowance) loses nothing.
    pub(crate) fn renew_at(&self) -> Instant {
        let t = self.timing();
        // From the validity Redis granted, not the maximum hold's cap: a lease near its cap
        // is renewed on the usual schedule, not over and over.
        let until = t.granted_until();
        if let Some(end) = t.end_by
            && t.reaches_max_hold()
        {
            // A confirmed request already reaches the cap: no renewal can move the lease
            // further. Never due again; the deadline ends it first, and the renewal loop's
            // early window (a sixth of a ttl) stays shut.
            return end + t.ttl;
        }
        // Before the clock's start (a long extend of unknown outcome on a fresh host): now.
        until
            .checked_sub(t.ttl * 2 / 3)
            .unwrap_or_else(Instant::now)
    }

    /// Starts a request sent now: a renewal (`None`, same epoch and ttl) or an extend to a new
    /// ttl (a new epoch). Until it is settled, its outcome counts as unknown.
    pub(crate) fn begin(&self, extend_to: Option<Duration>) -> ExpiryChange {
        let now = Instant::now();
        let mut t = self.timing();
        if let Some(ttl) = extend_to {
            t.epoch += 1;
            t.ttl = ttl;
        }
        // Under a maximum hold a request asks no further than its end. Requests of one epoch
        // then ask for less and less, each reaching exactly the end (or less than the ttl),
        // so whichever Redis applies last still leaves an expiry at least as late as any of
        // them promised (invariant 2): a later request arrives later, an earlier one asks
        // for at least as much.
        let ttl = match t.end_by {
            Some(end) => t
                .ttl
                .min(end.saturating_duration_since(now))
                .max(Duration::from_millis(1)),
            None => t.ttl,
        };
        let change = ExpiryChange {
            epoch: t.epoch,
            ttl,
            server_ms: server_ms(ttl, self.lock_delay),
            deadline: deadline_of(now, ttl),
        };
        // A request of the confirmed epoch cannot shorten the lease (invariant 2).
        if change.epoch > t.confirmed.0 {
            match t.unknown.iter_mut().find(|(e, _)| *e == change.epoch) {
                Some((_, d)) => *d = (*d).min(change.deadline),
                None => t.unknown.push((change.epoch, change.deadline)),
            }
        }
        change
    }

    /// Records what Redis answered to `change`. A request whose outcome stays unknown (a
    /// transport error, a dropped future) is simply never settled.
    pub(crate) fn settle(&self, change: &ExpiryChange, reply: ExpiryReply) {
        let mut t = self.timing();
        match reply {
            ExpiryReply::Applied => {
                let (epoch, deadline) = t.confirmed;
                if change.epoch > epoch || (change.epoch == epoch && change.deadline > deadline) {
                    t.confirmed = (change.epoch, change.deadline);
                }
                let newest = t.confirmed.0;
                t.unknown.retain(|(e, _)| *e > newest);
            }
            // A newer epoch was applied: this one and older ones can no longer apply.
            ExpiryReply::Superseded => t.unknown.retain(|(e, _)| *e > change.epoch),
            ExpiryReply::NotHeld => {
                drop(t);
                self.lose(LostCause::Refused);
            }
        }
    }

    /// Ends the lease because its guard gave it back: every clone sees it from now on.
    pub(crate) fn end(&self) {
        {
            let mut t = self.timing();
            t.ended_at.get_or_insert_with(Instant::now);
        }
        self.released.store(true, Ordering::Release);
        self.lost.cancel();
    }

    /// Ends the lease as lost for `cause`, unless it already ended; returns the cause that
    /// stands (the first one named), `None` if the guard gave it back.
    pub(crate) fn lose(&self, cause: LostCause) -> Option<LostCause> {
        if !self.lost.is_cancelled() {
            let _ = self.cause.set(cause);
        }
        self.lost.cancel();
        self.cause.get().copied()
    }

    /// Hands the lease to the renewal loop tracking it.
    pub(crate) fn watched_by(&self, watch: impl LateWatch + 'static) {
        let _ = self.watch.set(Box::new(watch));
    }

    /// Why the lease was lost; `None` while it is not, or when its guard gave it back. A lease
    /// past its deadline that is not declared lost yet is declared now, as the renewal loop
    /// would: [`LostCause::MaxHold`] if its maximum hold ended it,
    /// [`LostCause::RenewalLate`] if the loop should have renewed it in time and had not run,
    /// [`LostCause::Expired`] otherwise.
    ///
    /// Takes the renewal loop's lock: never call it under that lock.
    pub(crate) fn lost_cause(&self) -> Option<LostCause> {
        if self.is_released() {
            return None;
        }
        if !self.lost.is_cancelled() {
            let now = Instant::now();
            if now < self.valid_until() {
                return None;
            }
            let cause = self.watch.get().and_then(|w| w.cause_at_deadline(now));
            return self.lose(cause.unwrap_or_else(|| self.deadline_cause()));
        }
        self.cause.get().copied()
    }

    /// Why the lease is lost once its deadline passed, the renewal loop aside:
    /// [`LostCause::MaxHold`] when its maximum hold ends it, [`LostCause::Expired`] otherwise.
    pub(crate) fn deadline_cause(&self) -> LostCause {
        if self.ends_at_max_hold() {
            LostCause::MaxHold
        } else {
            LostCause::Expired
        }
    }

    /// True when the maximum hold's end is the deadline: a confirmed request already reaches
    /// it, so no renewal could move it (as `renew_at` reckons).
    pub(crate) fn ends_at_max_hold(&self) -> bool {
        self.timing().reaches_max_hold()
    }

    /// True once the guard released the lease (or was dropped).
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// True when the lease has ended (lost, released) or its deadline has passed.
    pub(crate) fn is_over(&self) -> bool {
        self.lost.is_cancelled() || Instant::now() >= self.valid_until()
    }

    /// True while only its guard can end the lease: not over, under no maximum hold, and
    /// renewed whether or not its holder beats.
    pub(crate) fn lasts_until_given_back(&self) -> bool {
        !self.is_over() && self.timing().end_by.is_none() && self.max_silence.is_none()
    }

    /// Records a sign of life of the holder seen at `at` (no later than now). An earlier
    /// moment than the last beat changes nothing.
    pub(crate) fn beat_at(&self, at: Instant) {
        let since = at.min(Instant::now()).saturating_duration_since(self.born);
        self.last_beat
            .fetch_max(ttl_millis(since), Ordering::Relaxed);
    }

    /// How long the holder has not beaten at `now`, when that is longer than its heartbeat
    /// allows; `None` without a heartbeat.
    pub(crate) fn silent_for(&self, now: Instant) -> Option<Duration> {
        let max = self.max_silence?;
        let last = self.born + Duration::from_millis(self.last_beat.load(Ordering::Relaxed));
        let quiet = now.saturating_duration_since(last);
        (quiet > max).then_some(quiet)
    }

    /// True when a lease given back now is to be left to run out in Redis rather than
    /// deleted: given up for silence (its holder, hung, may still be writing), or lost under
    /// a lock delay (the delay is what keeps the name from the next holder meanwhile).
    pub(crate) fn left_to_run_out(&self) -> bool {
        if self.is_released() {
            return false;
        }
        let silent = matches!(self.cause.get(), Some(LostCause::Silent { .. }));
        silent || (!self.lock_delay.is_zero() && self.is_over())
    }
}

impl Timing {
    fn valid_until(&self) -> Instant {
        match self.end_by {
            Some(end) => self.granted_until().min(end),
            None => self.granted_until(),
        }
    }

    /// True when a confirmed request already reaches the maximum hold: it asked for exactly
    /// what was left of the hold, so its deadline is the end less a capped request's drift
    /// (or the ttl went past the end). No renewal can move the lease further.
    fn reaches_max_hold(&self) -> bool {
        self.end_by
            .is_some_and(|end| self.granted_until() + drift_allowance(self.ttl) >= end)
    }

    /// [`valid_until`](Self::valid_until) without the maximum hold's cap.
    fn granted_until(&self) -> Instant {
        let newest = self.confirmed.0;
        let mut until = self.confirmed.1;
        for (_, d) in self.unknown.iter().filter(|(e, _)| *e > newest) {
            until = until.min(*d);
        }
        match self.ended_at {
            Some(end) => until.min(end),
            None => until,
        }
    }
}

/// The deadline a request sent at `sent_at` for `ttl` sets: invariant 1's "minus drift".
fn deadline_of(sent_at: Instant, ttl: Duration) -> Instant {
    sent_at + ttl - drift_allowance(ttl)
}

/// What a grant or an expiry change for `ttl` asks Redis for, in ms (invariant 6).
fn server_ms(ttl: Duration, lock_delay: Duration) -> u64 {
    ttl_millis(ttl.saturating_add(lock_delay))
}

/// How a lease is held whatever its holder does: at least `min` and at most `max` from its
/// grant, only while its holder beats (`silence`), and kept in Redis `lock_delay` past its
/// ttl. A release before `min` leaves the lease to expire at `min` (nothing waits for it);
/// at `max`, or when a renewal falls due more than `silence` after the last beat, the lease
/// ends (its lost signal fires, it is no longer renewed, and Redis frees it within a ttl and
/// the lock delay even if the holder never gives it back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Holds {
    /// The least time held.
    pub(crate) min: Option<Duration>,
    /// The most time held.
    pub(crate) max: Option<Duration>,
    /// The longest the holder may go without a beat and still be renewed.
    pub(crate) silence: Option<Duration>,
    /// How much longer than its ttl Redis keeps the lease after each grant and renewal.
    pub(crate) lock_delay: Duration,
}

impl Holds {
    /// What a grant for `ttl` asks Redis for, in ms: the ttl and the lock delay.
    pub(crate) fn server_ms(&self, ttl: Duration) -> u64 {
        server_ms(ttl, self.lock_delay)
    }

    /// Checked before anything is sent: each at most [`MAX_TTL`](crate::limits::MAX_TTL),
    /// and the least no more than the most.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.lock_delay > crate::options::MAX_TTL {
            return Err(Error::invalid(format!(
                "lock_delay {:?} is above the maximum of {:?}",
                self.lock_delay,
                crate::options::MAX_TTL
            )));
        }
        let holds = [
            ("min_hold", self.min),
            ("max_hold", self.max),
            ("heartbeat", self.silence),
        ];
        for (what, d) in holds {
            if let Some(d) = d
                && (d.is_zero() || d > crate::options::MAX_TTL)
            {
                return Err(Error::invalid(format!(
                    "{what} {d:?} is out of range: more than zero, at most {:?}",
                    crate::options::MAX_TTL
                )));
            }
        }
        if let (Some(min), Some(max)) = (self.min, self.max)
            && min > max
        {
            return Err(Error::invalid(format!(
                "min_hold {min:?} is longer than max_hold {max:?}"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    //! The ordering rules, with the clock paused: no server, no sleeps.

    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    fn drift(ttl: Duration) -> Duration {
        drift_allowance(ttl)
    }

    #[tokio::test(start_paused = true)]
    async fn a_shorter_extend_of_unknown_outcome_caps_the_deadline_at_once() {
        let start = Instant::now();
        let lease = LeaseState::new(start, 30 * SEC);
        let short = Duration::from_millis(100);
        let _never_settled = lease.begin(Some(short));
        // Sent, never answered (reply cut, future dropped): Redis may have applied it.
        assert_eq!(lease.valid_until(), start + short - drift(short));
        tokio::time::advance(short).await;
        assert!(lease.is_over());
        // Renewals from now on ask for the new ttl, and fall due from the capped deadline.
        assert_eq!(lease.ttl(), short);
        assert!(lease.renew_at() <= start + short / 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_reply_of_an_older_epoch_never_overrides_a_newer_one() {
        let start = Instant::now();
        let lease = LeaseState::new(start, 3 * SEC);
        let renewal = lease.begin(None); // epoch 0, 3s, in flight
        tokio::time::advance(Duration::from_millis(10)).await;
        let short = Duration::from_millis(300);
        let extend = lease.begin(Some(short)); // epoch 1
        lease.settle(&extend, ExpiryReply::Applied);
        let after_extend = lease.valid_until();
        assert_eq!(
            after_extend,
            start + Duration::from_millis(10) + short - drift(short)
        );
        // The older renewal's reply comes last. Had Redis run it after the extend, the
        // script would have answered Superseded; Applied means it ran before the extend.
        // Either way the extend's ttl is what Redis applied last.
        lease.settle(&renewal, ExpiryReply::Applied);
        assert_eq!(lease.valid_until(), after_extend);
        lease.settle(&renewal, ExpiryReply::Superseded);
        assert_eq!(lease.valid_until(), after_extend);
    }

    #[tokio::test(start_paused = true)]
    async fn a_longer_extend_counts_only_once_confirmed() {
        let start = Instant::now();
        let lease = LeaseState::new(start, SEC);
        let extend = lease.begin(Some(60 * SEC));
        assert_eq!(lease.valid_until(), start + SEC - drift(SEC));
        lease.settle(&extend, ExpiryReply::Applied);
        assert_eq!(lease.valid_until(), start + 60 * SEC - drift(60 * SEC));
        // A renewal of the old epoch that Redis refused changes nothing.
        let old = ExpiryChange {
            epoch: 0,
            ttl: SEC,
            server_ms: 1_000,
            deadline: start + SEC,
        };
        lease.settle(&old, ExpiryReply::Superseded);
        assert_eq!(lease.valid_until(), start + 60 * SEC - drift(60 * SEC));
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_of_the_confirmed_epoch_only_move_the_deadline_forward() {
        let start = Instant::now();
        let lease = LeaseState::new(start, 3 * SEC);
        tokio::time::advance(SEC).await;
        let late = lease.begin(None);
        tokio::time::advance(SEC).await;
        let later = lease.begin(None);
        lease.settle(&later, ExpiryReply::Applied);
        let best = lease.valid_until();
        lease.settle(&late, ExpiryReply::Applied);
        assert_eq!(
            lease.valid_until(),
            best,
            "an earlier-sent reply arriving last"
        );
        assert_eq!(best, start + 2 * SEC + 3 * SEC - drift(3 * SEC));
    }

    #[tokio::test(start_paused = true)]
    async fn an_unsettled_extend_is_settled_by_a_later_confirmed_renewal() {
        let start = Instant::now();
        let lease = LeaseState::new(start, 30 * SEC);
        let short = Duration::from_millis(600);
        let _lost_reply = lease.begin(Some(short));
        tokio::time::advance(Duration::from_millis(100)).await;
        let renewal = lease.begin(None); // epoch 1, the new ttl
        assert_eq!(renewal.epoch, 1);
        lease.settle(&renewal, ExpiryReply::Applied);
        assert_eq!(
            lease.valid_until(),
            start + Duration::from_millis(100) + short - drift(short)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_keep_their_cadence_up_to_a_maximum_hold() {
        for (ttl_ms, max_ms) in [
            (3_000, 4_000),
            (3_000, 3_500),
            (300, 10_000),
            (1_000, 1_001),
        ] {
            let (ttl, max) = (Duration::from_millis(ttl_ms), Duration::from_millis(max_ms));
            let start = Instant::now();
            let lease = LeaseState::new(start, ttl);
            lease.end_by(start + max);
            let mut renewals = 0;
            // Renew whenever due, each reply applied at once, until the lease is over.
            while !lease.is_over() {
                let due = lease.renew_at().min(lease.valid_until());
                tokio::time::advance(due.saturating_duration_since(Instant::now())).await;
                if lease.is_over() {
                    break;
                }
                let r = lease.begin(None);
                lease.settle(&r, ExpiryReply::Applied);
                renewals += 1;
                assert!(
                    renewals < 1_000,
                    "ttl {ttl:?}, max {max:?}: renewing in a spin"
                );
            }
            // One renewal per third of a ttl (less the drift allowance), and one more that
            // reaches the cap.
            let every = ttl_ms / 3 - u64::try_from(drift(ttl).as_millis()).unwrap();
            let due = max_ms / every + 2;
            assert!(
                renewals <= due,
                "ttl {ttl:?}, max {max:?}: {renewals} renewals, {due} due"
            );
            // The lease stays valid to its cap, less a request's drift.
            let lasted = Instant::now() - start;
            assert!(
                lasted + drift(ttl) >= max && lasted <= max,
                "ttl {ttl:?}, max {max:?}: over after {lasted:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn ending_the_lease_shows_in_every_view() {
        let lease = LeaseState::new(Instant::now(), 30 * SEC);
        assert!(!lease.is_over());
        lease.end();
        assert!(lease.is_over());
        assert!(lease.is_released());
        assert!(lease.lost.is_cancelled());
        assert!(lease.valid_until() <= Instant::now());
    }

    #[tokio::test(start_paused = true)]
    async fn a_heartbeat_counts_from_the_grant_and_from_each_later_beat() {
        let start = Instant::now();
        let holds = Holds {
            silence: Some(SEC),
            ..Holds::default()
        };
        let lease = LeaseState::new(start, 3 * SEC).held_on(&holds);
        let ms = Duration::from_millis(1);
        assert_eq!(lease.silent_for(start + SEC), None, "the grant is a beat");
        assert_eq!(lease.silent_for(start + SEC + ms), Some(SEC + ms));
        tokio::time::advance(SEC / 2).await;
        lease.beat_at(Instant::now());
        lease.beat_at(start); // an older sign of life changes nothing
        assert_eq!(lease.silent_for(start + SEC + ms), None);
        assert_eq!(lease.silent_for(start + SEC * 3 / 2 + ms), Some(SEC + ms));
        // A moment ahead of now counts as now.
        lease.beat_at(Instant::now() + 10 * SEC);
        assert!(lease.silent_for(Instant::now() + SEC + ms).is_some());
        // A task waiting for its own lease is not waiting forever: silence ends it.
        assert!(!lease.lasts_until_given_back());
        let without = LeaseState::new(start, 3 * SEC);
        assert_eq!(without.silent_for(start + 60 * SEC), None);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_ask_redis_for_the_lock_delay_too_and_count_on_the_ttl_alone() {
        let start = Instant::now();
        let holds = Holds {
            lock_delay: 2 * SEC,
            ..Holds::default()
        };
        assert_eq!(holds.server_ms(3 * SEC), 5_000);
        assert_eq!(Holds::default().server_ms(3 * SEC), 3_000);
        let lease = LeaseState::new(start, 3 * SEC).held_on(&holds);
        let renewal = lease.begin(None);
        assert_eq!((renewal.ttl, renewal.server_ms), (3 * SEC, 5_000));
        lease.settle(&renewal, ExpiryReply::Applied);
        assert_eq!(lease.valid_until(), start + 3 * SEC - drift(3 * SEC));
        let extend = lease.begin(Some(SEC));
        assert_eq!((extend.ttl, extend.server_ms), (SEC, 3_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lost_lease_says_why_and_keeps_its_first_cause() {
        let lease = LeaseState::new(Instant::now(), SEC);
        assert_eq!(lease.lost_cause(), None);
        tokio::time::advance(SEC).await;
        assert_eq!(lease.lost_cause(), Some(LostCause::Expired));

        let refused = LeaseState::new(Instant::now(), SEC);
        let r = refused.begin(None);
        refused.settle(&r, ExpiryReply::NotHeld);
        refused.lose(LostCause::Silent { silent_for: SEC });
        assert_eq!(refused.lost_cause(), Some(LostCause::Refused));

        let capped = LeaseState::new(Instant::now(), SEC).held_on(&Holds {
            max: Some(SEC / 2),
            ..Holds::default()
        });
        tokio::time::advance(SEC / 2).await;
        assert!(capped.is_over());
        assert_eq!(capped.lost_cause(), Some(LostCause::MaxHold));

        let given_back = LeaseState::new(Instant::now(), SEC);
        given_back.end();
        assert_eq!(given_back.lost_cause(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_lost_for_silence_or_under_a_lock_delay_is_left_to_run_out() {
        let plain = LeaseState::new(Instant::now(), SEC);
        tokio::time::advance(SEC).await;
        assert!(plain.is_over());
        assert!(
            !plain.left_to_run_out(),
            "no lock delay: given back as usual"
        );

        let delayed = LeaseState::new(Instant::now(), SEC).held_on(&Holds {
            lock_delay: SEC,
            ..Holds::default()
        });
        assert!(!delayed.left_to_run_out(), "still held: released at once");
        tokio::time::advance(SEC).await;
        assert!(delayed.left_to_run_out());

        let silent = LeaseState::new(Instant::now(), SEC);
        silent.lose(LostCause::Silent { silent_for: SEC });
        assert!(silent.left_to_run_out());
    }

    #[tokio::test(start_paused = true)]
    async fn not_held_ends_the_lease_as_lost() {
        let lease = LeaseState::new(Instant::now(), 30 * SEC);
        let r = lease.begin(None);
        lease.settle(&r, ExpiryReply::NotHeld);
        assert!(lease.is_over());
        assert!(!lease.is_released());
    }
}

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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, LostCause, Result};
use crate::kind::ExpiryReply;
use crate::options::drift_allowance;

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
        if let Some(end) = t.end_by {
            // A confirmed request already reaches the cap (it asked for exactly what was left
            // of the hold, so its deadline is the cap less a capped request's drift): no
            // renewal can move the lease further. Never due again; the deadline ends it
            // first, and the renewal loop's early window (a sixth of a ttl) stays shut.
            if until + drift_allowance(t.ttl) >= end {
                return end + t.ttl;
            }
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
    /// would: [`LostCause::RenewalLate`] if the loop should have renewed it in time and had not
    /// run, [`LostCause::Expired`] otherwise.
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
            return self.lose(cause.unwrap_or(LostCause::Expired));
        }
        self.cause.get().copied()
    }

    /// True when the maximum hold's end is the deadline: no renewal could move it.
    pub(crate) fn ends_at_max_hold(&self) -> bool {
        let t = self.timing();
        t.end_by.is_some_and(|end| end <= t.granted_until())
    }

    /// True once the guard released the lease (or was dropped).
    pub(crate) fn is_released(&self) -> bool {
        self.released.load(Ordering::Acquire)
    }

    /// True when the lease has ended (lost, released) or its deadline has passed.
    pub(crate) fn is_over(&self) -> bool {
        self.lost.is_cancelled() || Instant::now() >= self.valid_until()
    }

    /// True while only its guard can end the lease: not over, and under no maximum hold.
    pub(crate) fn lasts_until_given_back(&self) -> bool {
        !self.is_over() && self.timing().end_by.is_none()
    }
}

impl Timing {
    fn valid_until(&self) -> Instant {
        match self.end_by {
            Some(end) => self.granted_until().min(end),
            None => self.granted_until(),
        }
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

/// How long a lease is held at least and at most, from its grant, whatever its holder does:
/// a release before `min` leaves the lease to expire at `min` (nothing waits for it), and at
/// `max` the lease ends (its lost signal fires, it is no longer renewed, and Redis frees it
/// within a ttl even if the holder never gives it back).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Holds {
    /// The least time held.
    pub(crate) min: Option<Duration>,
    /// The most time held.
    pub(crate) max: Option<Duration>,
}

impl Holds {
    /// Checked before anything is sent: each at most [`MAX_TTL`](crate::limits::MAX_TTL),
    /// and the least no more than the most.
    pub(crate) fn validate(&self) -> Result<()> {
        for (what, d) in [("min_hold", self.min), ("max_hold", self.max)] {
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
    async fn not_held_ends_the_lease_as_lost() {
        let lease = LeaseState::new(Instant::now(), 30 * SEC);
        let r = lease.begin(None);
        lease.settle(&r, ExpiryReply::NotHeld);
        assert!(lease.is_over());
        assert!(!lease.is_released());
    }
}

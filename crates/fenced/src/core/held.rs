//! [`Held`]: a held lease of any kind, given back on drop; and [`Lease`], the cheap view of it
//! that the protected work gets. Primitives wrap `Held` in their own guard.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use crate::core::Core;
use crate::core::cleanup::release_with_retry;
use crate::core::handover::{Grant, Handed};
use crate::core::lease::LeaseState;
use crate::core::metrics::{self, Outcome};
use crate::error::{Error, LostCause, Result};
use crate::kind::ExpiryReply;
use crate::kind::{HandOverReply, LeaseKind, ReleaseReply, hand_over_reply};
use crate::options::{ttl_millis, validate_ttl};
use crate::token::{FencingToken, OwnerToken};

/// How a release's handover went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Handing {
    /// Handed to a local waiter: released, as far as the holder is concerned.
    Done,
    /// Not handed over; release as usual.
    No,
    /// Not handed over, but released as usual in the same step (a fair lock).
    Released,
    /// Its reply was lost: the lease may be gone already (release as a retry).
    Unknown,
}

/// A lease the renewal loop tracks, of any kind. Dropping it gives it back in the background.
pub(crate) struct Held {
    core: Arc<Core>,
    kind: Arc<dyn LeaseKind>,
    owner: OwnerToken,
    /// False once given back (released, handed to the background, or given up in Redis by
    /// a call of its primitive: [`given_up`](Self::given_up)). Atomic for that last one,
    /// which a shared reference makes; every other change has the guard to itself.
    live: AtomicBool,
    id: u64,
    lease: Lease,
    /// A minimum hold's end: a release before it leaves the lease to expire then.
    min_until: Option<Instant>,
    /// When the grant was known here (`fenced.lock.held.duration`).
    granted_at: Instant,
}

impl Held {
    pub(crate) fn new(
        core: Arc<Core>,
        kind: Arc<dyn LeaseKind>,
        owner: OwnerToken,
        id: u64,
        lease: Lease,
        min_until: Option<Instant>,
    ) -> Self {
        metrics::held_from(kind.primitive());
        Held {
            core,
            kind,
            owner,
            live: AtomicBool::new(true),
            id,
            lease,
            min_until,
            granted_at: Instant::now(),
        }
    }

    /// Hands the lease to another process (a ticket): no longer renewed or released here,
    /// and over for every clone of its `Lease` in this process. What the ticket needs: the
    /// kind, the owner, the ttl and the newest epoch.
    pub(crate) fn hand_off(mut self) -> (Arc<dyn LeaseKind>, OwnerToken, Duration, u64) {
        self.core.renewer.untrack(self.id);
        let (ttl, epoch) = (self.lease.state.ttl(), self.lease.state.epoch());
        self.lease.state.end();
        *self.live.get_mut() = false;
        (self.kind.clone(), self.owner.clone(), ttl, epoch)
    }

    /// The namespace of the client that holds this lease.
    pub(crate) fn core_namespace(&self) -> String {
        self.core.options().namespace.clone()
    }

    /// When a minimum hold ends, if it has not ended yet.
    fn min_hold_until(&self) -> Option<Instant> {
        self.min_until.filter(|until| *until > Instant::now())
    }

    /// What kind of primitive holds this lease (the metrics' label).
    pub(crate) fn primitive(&self) -> crate::kind::Primitive {
        self.kind.primitive()
    }

    /// The view of this lease the work gets.
    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The owner token.
    pub(crate) fn owner(&self) -> &OwnerToken {
        &self.owner
    }

    /// Sets the lease to `ttl` from now and uses `ttl` for later renewals; see
    /// [`LockGuard::extend`](crate::LockGuard::extend) for the promises.
    pub(crate) async fn extend(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl)?;
        let owner = &self.owner;
        // Known lost (or past its deadline, no longer certainly ours): extending now would
        // revive a lease whose work was told to stop. Acquire again instead.
        if let Some(e) = self.known_over() {
            return Err(e);
        }
        // Never past a maximum hold: the lease must end there whatever its holder asks.
        let ttl = self.lease.state.capped(ttl);
        let renewer = &self.core.renewer;
        let change = self.lease.state.begin(Some(ttl));
        renewer.reschedule(self.id);
        let call = self.kind.extend(owner, change.server_ms, change.epoch);
        let reply = self
            .core
            .backend()
            .extend("extend", &call, &*self.kind)
            .await?;
        self.lease.state.settle(&change, reply);
        match reply {
            // Superseded: a newer extend (from another task) was applied after this one.
            ExpiryReply::Applied | ExpiryReply::Superseded => {
                renewer.reschedule(self.id);
                Ok(())
            }
            ExpiryReply::NotHeld => Err(self.not_held()),
        }
    }

    /// Ends the lease here after a call of its primitive gave it up in Redis in a step of
    /// its own (an election's yield, `election/leadership.rs`), as a release ends it: no
    /// longer renewed, over for every clone (its lost signal fires, and it reads as given
    /// back), and nothing left to give back when the guard is dropped. The caller wakes whom
    /// that step woke.
    pub(crate) fn given_up(&self) {
        self.core.renewer.untrack(self.id);
        self.lease.state.end();
        self.live.store(false, Ordering::Release);
        metrics::released(self.kind.primitive(), Outcome::Released);
    }

    /// Gives the lease back, retrying a lost reply; wakes whom the kind's release wakes.
    ///
    /// Returns [`ReleaseReply::Retained`] when only this hold was given back (an inner
    /// re-entrant hold). Dropped before it finishes, the guard's `Drop` releases in the
    /// background: the lease is never left to run out its ttl.
    pub(crate) async fn release(self) -> Result<ReleaseReply> {
        use tracing::Instrument;
        let span = tracing::debug_span!(
            "fenced.release",
            fenced.name = %self.lease.name,
            fenced.primitive = self.kind.primitive().as_str(),
            fenced.token = self.lease.fencing_token().get(),
        );
        self.release_in_span().instrument(span).await
    }

    async fn release_in_span(mut self) -> Result<ReleaseReply> {
        // Given up in Redis already (`given_up`): released, with nothing left to send.
        if !*self.live.get_mut() {
            return Ok(ReleaseReply::Released);
        }
        // Known lost: the answer needs no round trip. Dropping `self` still gives back
        // whatever Redis may hold for it, in the background.
        if let Some(e) = self.known_over() {
            metrics::released(self.kind.primitive(), Outcome::NotHeld);
            // Dropped here: the background step keeps a minimum hold, or releases.
            return Err(e);
        }
        if let Some(until) = self.min_hold_until() {
            return self.expire_after_min_hold(until).await;
        }
        let owner = self.owner.clone();
        let core = self.core.clone();
        // Stop renewing first, so the renewal of a lease being released is not mistaken for
        // loss; and end the lease for every clone before it is given back.
        core.renewer.untrack(self.id);
        // A lease already known lost gets no benefit of the doubt from its retries
        // (`cleanup.rs`, invariant 2): its deadline is over.
        let valid_until = if self.lease.state.lost.is_cancelled() {
            Instant::now()
        } else {
            self.lease.state.valid_until()
        };
        self.lease.state.end();
        let handing = self.hand_over(&core).await;
        if handing == Handing::Done {
            metrics::released(self.kind.primitive(), Outcome::HandedOver);
            *self.live.get_mut() = false;
            tracing::debug!(name = %self.lease.name, "fenced: handed over to a local waiter");
            return Ok(ReleaseReply::Released);
        }
        if handing == Handing::Released {
            metrics::released(self.kind.primitive(), Outcome::Released);
            *self.live.get_mut() = false;
            self.wake_local(&core);
            tracing::debug!(name = %self.lease.name, "fenced: released");
            return Ok(ReleaseReply::Released);
        }
        let message = core.announcement(&*self.kind);
        let after_unknown = handing == Handing::Unknown;
        let release = release_with_retry(
            (core.backend(), core.timeout()),
            &*self.kind,
            (&owner, &message),
            valid_until,
            after_unknown,
            self.lease.state.ttl(),
        );
        let outcome = release.await;
        *self.live.get_mut() = false;
        let reply = match outcome {
            Ok(reply) => reply,
            Err(e) => {
                metrics::released(self.kind.primitive(), Outcome::Failed);
                if e.is_transient() {
                    // Keep trying in the background, so the lease is freed once Redis answers;
                    // and wake the local waiters now: the first attempt may have freed it
                    // (our own release message is skipped as an echo).
                    let ttl = self.lease.state.ttl();
                    core.renewer
                        .release_in_background(self.id, self.kind.clone(), owner, ttl);
                    self.wake_local(&core);
                }
                return Err(e);
            }
        };
        tracing::debug!(name = %self.lease.name, ?reply, "fenced: released");
        if reply.freed() {
            self.wake_local(&core);
        }
        if reply == ReleaseReply::NotHeld {
            metrics::released(self.kind.primitive(), Outcome::NotHeld);
            self.lease.state.lost.cancel();
            return Err(self.not_held());
        }
        metrics::released(self.kind.primitive(), Outcome::Released);
        Ok(reply)
    }

    /// A release before the minimum hold ends: the lease is left to expire when it ends (an
    /// expiry change of a new epoch), not deleted, and nobody is woken. The guard is done
    /// with it either way; should Redis not answer, the change is retried in the background,
    /// each retry aiming at the same end (`cleanup.rs`, invariant 4).
    async fn expire_after_min_hold(mut self, until: Instant) -> Result<ReleaseReply> {
        let core = self.core.clone();
        core.renewer.untrack(self.id);
        let ttl = self.lease.state.ttl();
        let left = until.saturating_duration_since(Instant::now());
        let change = self.lease.state.begin(Some(left));
        let call = self
            .kind
            .extend(&self.owner, ttl_millis(left).max(1), change.epoch);
        self.lease.state.end();
        // Still `live` while the change is in flight: should this future be dropped, `Drop`
        // sends it again in the background, in a newer epoch aiming at the same end.
        let patience = ttl_millis(ttl.max(core.timeout() * 10));
        let void = || self.kind.abandon(&self.owner, "", patience);
        let outcome = core.backend().expire(&call, &*self.kind, &void).await;
        *self.live.get_mut() = false;
        match outcome {
            Ok(ExpiryReply::Applied | ExpiryReply::Superseded) => {
                metrics::released(self.kind.primitive(), Outcome::Released);
                tracing::debug!(name = %self.lease.name, ?left, "fenced: released; held until the minimum hold ends");
                Ok(ReleaseReply::Released)
            }
            Ok(ExpiryReply::NotHeld) => {
                metrics::released(self.kind.primitive(), Outcome::NotHeld);
                Err(self.not_held())
            }
            Err(e) => {
                metrics::released(self.kind.primitive(), Outcome::Failed);
                // Not replicated: the master applied it, so it is not sent again.
                if e.is_transient() && !matches!(e, Error::NotReplicated { .. }) {
                    core.renewer.expire_in_background(
                        self.id,
                        self.kind.clone(),
                        self.owner.clone(),
                        (until, change.epoch + 1),
                        ttl,
                    );
                }
                Err(e)
            }
        }
    }

    /// Wakes this process's waiters for the lease's channels, and ends any run of handovers.
    fn wake_local(&self, core: &Core) {
        for channel in self.kind.channels() {
            core.waiters.end_streak(channel);
            core.waiters.released(channel, self.kind.wakes());
        }
    }

    /// Gives the lease straight to this client's next local waiter, if one offered to take it
    /// (`handover.rs`).
    async fn hand_over(&self, core: &Arc<Core>) -> Handing {
        if !core.backend().hands_over() {
            return Handing::No;
        }
        let Some(handed) = self.kind.handed_over() else {
            return Handing::No;
        };
        let to = handed.hand_over_to();
        let Some(offer) = core.waiters.take_offer(to) else {
            return Handing::No;
        };
        let Some(call) = handed.hand_over(
            &self.owner,
            &offer.owner,
            offer.holds.server_ms(offer.ttl),
            offer.waiter.as_deref(),
        ) else {
            return Handing::No;
        };
        // Until the outcome is known, the successor's owner is abandoned should this future
        // end (handover.rs, invariant 5).
        let mut successor = Successor {
            core,
            kind: self.kind.clone(),
            owner: Some(offer.owner.clone()),
            patience: offer.ttl.max(core.timeout() * 10),
        };
        let requested_at = Instant::now();
        let outcome = match core.node() {
            Ok(node) => node.run(&call).await.and_then(hand_over_reply),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(HandOverReply::Handed(token)) => {
                successor.owner = None;
                core.waiters.handed_over(to);
                let grant = Grant {
                    kind: self.kind.clone(),
                    owner: offer.owner,
                    name: offer.name,
                    token,
                    requested_at,
                    ttl: offer.ttl,
                    auto_renew: offer.auto_renew,
                    holds: offer.holds,
                };
                let back = core.clone();
                let handed = Handed::new(grant, move |g| {
                    back.release_unowned(g.kind.clone(), g.owner.clone(), g.ttl);
                });
                // A waiter gone meanwhile: the lease comes back and is released in the
                // background when dropped here.
                let _ = offer.to.send(handed);
                Handing::Done
            }
            // The offer is dropped: its waiter wakes and tries on its own.
            Ok(HandOverReply::NotHeld | HandOverReply::OthersWait) => {
                successor.owner = None;
                Handing::No
            }
            Ok(HandOverReply::Released) => {
                successor.owner = None;
                Handing::Released
            }
            // Refused before it changed anything (a script error, `NOPERM`): release as usual.
            Err(e) if !e.is_transient() => {
                tracing::debug!(error = %e, "fenced: handover refused; releasing as usual");
                successor.owner = None;
                Handing::No
            }
            Err(e) => {
                tracing::debug!(error = %e, "fenced: handover of unknown outcome; abandoning it");
                Handing::Unknown
            }
        }
    }

    /// [`Error::LeaseLost`] when the lease is known to be over: lost, or past its validity
    /// deadline (then it is declared lost now, with its cause, as the renewal loop would).
    /// Calls on such a guard answer with it at once, without a round trip.
    fn known_over(&self) -> Option<Error> {
        if !self.lease.state.is_over() {
            return None;
        }
        let error = self.lease.lost_error();
        self.lease.state.lost.cancel();
        Some(error)
    }

    fn not_held(&self) -> Error {
        Error::NotHeld {
            name: self.lease.name.to_string(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        metrics::held_for(self.kind.primitive(), self.granted_at.elapsed());
        if *self.live.get_mut() {
            *self.live.get_mut() = false;
            // Given up for silence, or lost under a lock delay: Redis frees it when it runs
            // out, not before (a hung holder may still be writing; the delay keeps the name).
            if self.lease.state.left_to_run_out() {
                self.core.renewer.untrack(self.id);
                self.lease.state.end();
                return;
            }
            // Even past its deadline: the expiry change applies only while the owner still
            // holds the lease, and deleting it would end the minimum hold early.
            if let Some(until) = self.min_hold_until() {
                // A newer epoch than any request this guard sent: whichever of them Redis
                // saw, the background change is applied after it (or refused as stale).
                let epoch = self.lease.state.epoch() + 1;
                let ttl = self.lease.state.ttl();
                self.lease.state.end();
                self.core.renewer.expire_in_background(
                    self.id,
                    self.kind.clone(),
                    self.owner.clone(),
                    (until, epoch),
                    ttl,
                );
                return;
            }
            self.lease.state.end();
            self.core.renewer.release_in_background(
                self.id,
                self.kind.clone(),
                self.owner.clone(),
                self.lease.state.ttl(),
            );
        }
    }
}

/// What the protected work needs to know about its lease: a cheap, cloneable, `Send + 'static`
/// view of a held lock, permit or hold.
///
/// Use it cooperatively: check it between steps and stop as soon as it fails.
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// let guard = client.lock("nightly-report").acquire().await?;
/// let lease = guard.lease();
/// for step in 0..3 {
///     lease.check()?; // stop as soon as the lease is gone
///     println!("step {step} with token {}", lease.fencing_token());
/// }
/// guard.release().await?;
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct Lease {
    name: Arc<str>,
    fencing_token: FencingToken,
    pub(crate) state: Arc<LeaseState>,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("fencing_token", &self.fencing_token)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl Lease {
    pub(crate) fn new(name: Arc<str>, fencing_token: FencingToken, state: Arc<LeaseState>) -> Self {
        Lease {
            name,
            fencing_token,
            state,
        }
    }

    /// The name of the lock (or semaphore) this lease is on.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This grant's fencing token.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing_token
    }

    /// True once the lease is over: lost, past its validity deadline, or given back by its
    /// guard (released or dropped).
    pub fn is_lost(&self) -> bool {
        self.state.is_over()
    }

    /// True once the guard gave the lease back ([`LockGuard::release`](crate::LockGuard::release)
    /// or drop), as opposed to losing it.
    pub fn is_released(&self) -> bool {
        self.state.is_released()
    }

    /// `Err` once the lease is over: a checkpoint for long work.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseEnded`] when the guard released the lease (or was dropped) while this
    /// clone was still in use; [`Error::LeaseLost`] when the lease was lost or its deadline
    /// passed (then it is declared lost now), naming the [cause](Self::lost_cause).
    pub fn check(&self) -> Result<()> {
        if self.state.is_released() {
            return Err(Error::LeaseEnded {
                name: self.name.to_string(),
                fencing_token: self.fencing_token,
            });
        }
        if self.is_lost() {
            return Err(self.lost_error());
        }
        Ok(())
    }

    /// [`Error::LeaseLost`] for this lease, with its cause (declaring a lease past its deadline
    /// lost).
    pub(crate) fn lost_error(&self) -> Error {
        Error::LeaseLost {
            name: self.name.to_string(),
            fencing_token: self.fencing_token,
            cause: self.state.lost_cause(),
        }
    }

    /// Why the lease was lost ([`LostCause`]): `None` while it is held, once its guard gave it
    /// back, or when the cause is unknown. A lease found past its validity deadline is declared
    /// lost by this call (its lost signal fires).
    pub fn lost_cause(&self) -> Option<LostCause> {
        self.state.lost_cause()
    }

    /// Completes when the lease is over: a renewal was refused, the validity deadline passed
    /// without a successful renewal (also when Redis is unreachable), its holder went silent
    /// under a [heartbeat](Self::beat), or the guard released the lease or was dropped.
    /// Completes at once if that already happened, so work holding a clone never runs on past
    /// its guard.
    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        self.state.lost.clone().cancelled_owned()
    }

    /// A token cancelled when the lease is over (see [`lost`](Self::lost)), to hand to code
    /// that takes a `CancellationToken`. Cancelling it yourself does not affect the lease.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.state.lost.child_token()
    }

    /// The moment (monotonic clock) until which the lease is certainly ours: as of the last
    /// grant or renewal Redis confirmed, never later than a shorter `extend` of unknown
    /// outcome, and never later than the moment the guard gave it back.
    pub fn valid_until(&self) -> Instant {
        self.state.valid_until()
    }

    /// How much of the lease is certainly left (zero once past the deadline or given back).
    pub fn remaining(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// Says the holder is alive and making progress, for a lease taken
    /// [`with_heartbeat`](crate::Lock::with_heartbeat): it is renewed only while a beat
    /// came within its maximum silence. One atomic store: call it at every step of the work,
    /// from any task or thread. Changes nothing without a heartbeat, nor once the lease is
    /// over (a lease given up for silence is not taken back).
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// use std::time::Duration;
    ///
    /// let client = fenced::Client::connect(&url).await?;
    /// let guard = client
    ///     .lock("nightly-import")
    ///     .with_ttl(Duration::from_secs(10))
    ///     // A step that hangs for a minute gives the lock up: the next importer takes it
    ///     // within a minute and a ttl, even while this process lives on.
    ///     .with_heartbeat(Duration::from_secs(60))
    ///     .acquire()
    ///     .await?;
    /// let lease = guard.lease();
    /// for batch in 0..3 {
    ///     lease.check()?; // stop once the lease is gone, for whatever cause
    ///     println!("importing batch {batch} with token {}", lease.fencing_token());
    ///     lease.beat(); // progress: keep the lease
    /// }
    /// assert_eq!(lease.lost_cause(), None);
    /// guard.release().await?;
    /// # Ok(()) });
    /// ```
    pub fn beat(&self) {
        self.state.beat_at(Instant::now());
    }

    /// [`beat`](Self::beat) for a sign of life seen at `at` (no later than now) rather than
    /// now: a file's modification time, a message's timestamp. A moment earlier than the
    /// last beat changes nothing.
    pub fn beat_at(&self, at: Instant) {
        self.state.beat_at(at);
    }
}

/// The setters of a primitive handle's [`LeaseOptions`](crate::core::LeaseOptions), for a
/// struct with an `opts` field: one definition for every handle.
macro_rules! lease_option_setters {
    () => {
        /// Lease length (default: the client's, 30s unless configured). At least
        /// [`MIN_TTL`](crate::limits::MIN_TTL), at most [`MAX_TTL`](crate::limits::MAX_TTL).
        pub fn with_ttl(mut self, ttl: std::time::Duration) -> Self {
            self.opts.ttl = Some(ttl);
            self
        }

        /// Whether held leases are renewed automatically (default `true`). Without renewal a
        /// lease ends after its ttl, and its lost signal fires at its validity deadline.
        pub fn with_auto_renew(mut self, on: bool) -> Self {
            self.opts.auto_renew = on;
            self
        }

        /// How long an acquire waits (default: no limit).
        pub fn with_wait(mut self, policy: $crate::WaitPolicy) -> Self {
            self.opts.wait = policy;
            self
        }

        /// The least time a lease is held, from its grant (default: none). A release (or a
        /// drop) before it gives the lease back as an expiry at that moment instead: the
        /// name stays taken until then, and nothing waits for it. For scheduled jobs that
        /// run on several machines whose clocks differ: a job that ends at once still keeps
        /// the others out for `min`. At most [`MAX_TTL`](crate::limits::MAX_TTL).
        ///
        /// With Redis unreachable at the release, the expiry is set in the background once it
        /// answers; until then the lease's last renewal bounds it. A re-entrant hold never
        /// shortens its lock: there the name stays taken until the later of `min` and the
        /// lease's current end.
        pub fn with_min_hold(mut self, min: std::time::Duration) -> Self {
            self.opts.holds.min = Some(min);
            self
        }

        /// The most time a lease is held, from the request that took it (default: none).
        /// Then the lease ends whatever its holder does: its lost signal fires (stop the
        /// work), it is no longer renewed, and Redis frees it within a ttl (and the
        /// [lock delay](Self::with_lock_delay)) even if the guard is never given back. At
        /// most [`MAX_TTL`](crate::limits::MAX_TTL), and no less than
        /// [`with_min_hold`](Self::with_min_hold).
        pub fn with_max_hold(mut self, max: std::time::Duration) -> Self {
            self.opts.holds.max = Some(max);
            self
        }

        /// Renews a lease only while its holder shows signs of life (default: whenever it
        /// falls due, while the guard lives). The work calls [`Lease::beat`](crate::Lease::beat)
        /// (or the guard's `beat`) as it makes progress, and the grant counts as the first
        /// beat. When a renewal falls due more than `max_silence` after the last beat, it is
        /// not sent: the lost signal fires, with
        /// [`LostCause::Silent`](crate::LostCause::Silent), and Redis frees the name when the
        /// lease runs out, within a ttl (and the [lock delay](Self::with_lock_delay)). The key
        /// is not deleted, not even when the guard is given back later: a holder that hung
        /// may still be writing. So a holder that hangs with its guard alive, in a process
        /// that otherwise runs on, keeps the name at most `max_silence` and a ttl after its
        /// last beat; its lost signal fires within `max_silence` and a third of a ttl (silence
        /// is read when a renewal falls due).
        ///
        /// No timer per lease: the renewal loop reads the last beat as it renews, and a beat
        /// is one atomic store. Without automatic renewal there is nothing to stop. At most
        /// [`MAX_TTL`](crate::limits::MAX_TTL).
        pub fn with_heartbeat(mut self, max_silence: std::time::Duration) -> Self {
            self.opts.holds.silence = Some(max_silence);
            self
        }

        /// Keeps the name taken `delay` past the end of a lease its holder did not give back
        /// (default: none), as Chubby's and Consul's lock-delay: each grant and renewal has
        /// Redis keep the lease for its ttl and `delay`, while the holder counts on its ttl
        /// alone (its deadline and lost signal are unchanged). A holder that crashes, hangs or
        /// is cut off from Redis thus leaves the name taken until `delay` after its lease ran
        /// out, so that its writes still on their way land before the next holder starts.
        ///
        /// A release, or the drop of a guard whose lease is still held, frees the name at once
        /// (before a [minimum hold](Self::with_min_hold) ends, at its end); a lost lease's
        /// guard given back frees nothing. Waiters wait the delay out like the rest of the
        /// lease. At most [`MAX_TTL`](crate::limits::MAX_TTL).
        pub fn with_lock_delay(mut self, delay: std::time::Duration) -> Self {
            self.opts.holds.lock_delay = delay;
            self
        }

        /// The lease length each grant asks for.
        pub fn ttl(&self) -> std::time::Duration {
            self.opts.ttl(&self.core)
        }
    };
}
pub(crate) use lease_option_setters;

/// The successor's owner during a handover call: abandoned in the background unless the
/// outcome became known (`handover.rs`, invariant 5).
struct Successor<'a> {
    core: &'a Core,
    kind: Arc<dyn LeaseKind>,
    owner: Option<OwnerToken>,
    patience: Duration,
}

impl Drop for Successor<'_> {
    fn drop(&mut self) {
        if let Some(owner) = self.owner.take() {
            self.core
                .abandon_in_background(self.kind.clone(), owner, self.patience);
        }
    }
}

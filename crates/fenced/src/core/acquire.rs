//! The one acquire engine. Every primitive calls [`Core::acquire_with`] (or
//! [`Core::try_once`]) with its own lease kind; the engine owns waiting, the local queue, the
//! deadline and the clean-up of attempts whose outcome is unknown.
//!
//! Invariants:
//! 1. A waiter registers for a wake-up BEFORE each attempt (notify.rs, 1), so a release
//!    between the attempt and the wait is never missed.
//! 2. With no notification, a waiter polls with jittered backoff, but never sleeps past the
//!    moment the blocking lease runs out: a holder that dies without releasing costs its
//!    waiters at most its remaining ttl.
//! 3. Until Redis answers an attempt, its outcome is unknown: if the call fails or the future
//!    is dropped, the attempt is abandoned in the background (released if it took the lease,
//!    voided by a tombstone if it is still on its way). A lease is never left without a
//!    guard or a clean-up.
//! 4. Transient failures (reset, timeout, `LOADING`, failover) are retried within the wait;
//!    they end it only at the deadline or the attempt limit. Permanent ones end it at once.
//! 5. Newcomers queue behind this process's waiters instead of barging in; only the queue's
//!    heads (1 for exclusive leases, up to the permits for shared ones) send commands.
//! 6. A wait keeps its word: an attempt still on its way a round trip's grace past the
//!    deadline is cut there (a subscription at the deadline), and a wait that ends on a
//!    timeout names its own deadline. A try (one attempt, no wait) is cut at the call
//!    timeout, however many round trips it needed.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tokio::sync::oneshot;

use crate::core::Core;
use crate::core::handover::{Handed, Offer};
use crate::core::held::{Held, Lease};
use crate::core::lease::{Holds, LeaseState};
use crate::core::metrics::{self, Via};
use crate::core::notify::LocalWaiters;
use crate::core::renew::{Caller, Tracked};
use crate::error::{Awaited, Error, Result};
use crate::kind::{AcquireReply, ExpiryReply, HandOverTo, LeaseKind};
use crate::options::ttl_millis;
use crate::token::{FencingToken, OwnerToken};
use crate::util::{Backoff, sleep_until_opt};
use crate::wait::WaitPolicy;
use tracing::Instrument;

/// What a primitive asks the engine for.
pub(crate) struct AcquireRequest<'a> {
    /// The primitive's name, for errors and the lease.
    pub(crate) name: &'a Arc<str>,
    /// Where releases are announced (and the key of the local queue).
    pub(crate) channel: &'a str,
    /// The lease length.
    pub(crate) ttl: Duration,
    /// Whether the held lease is renewed in the background.
    pub(crate) auto_renew: bool,
    /// How long to wait.
    pub(crate) wait: WaitPolicy,
    /// How many of this process's waiters may try at once.
    pub(crate) heads: usize,
    /// Channels whose releases wake the waiter besides `channel` (then only a queue key):
    /// a multi-lock waits on every name's releases.
    pub(crate) also: &'a [String],
    /// Whether a local holder may hand the lease straight to this waiter (`handover.rs`),
    /// and how it offers to take it.
    pub(crate) hand_over: Option<OfferFrom<'a>>,
    /// How the lease is held whatever its holder does ([`Holds`]): at least, at most, while
    /// its holder beats, and how long Redis keeps it past its ttl.
    pub(crate) holds: Holds,
}

/// How a waiter offers to take a lease straight from a local holder (`handover.rs`).
pub(crate) struct OfferFrom<'a> {
    /// Where its offers stand.
    pub(crate) to: HandOverTo<'a>,
    /// A fair waiter's id in the queue, and the secret first half (16 hex digits) of the
    /// owner of every offer of its wait (each offer has a fresh second half, so a clean-up of
    /// one never touches another). Its acquire attempts send that half, so that an attempt
    /// that finds the lock already handed to it neither queues again nor takes it for a
    /// foreign holder's (`fair_acquire.lua`).
    pub(crate) fair: Option<(Arc<str>, Arc<str>)>,
}

/// A primitive handle's lease settings, with the checks every acquire makes before it sends
/// anything.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LeaseOptions {
    /// Lease length; `None`: the client's default.
    pub(crate) ttl: Option<Duration>,
    /// Whether held leases are renewed in the background.
    pub(crate) auto_renew: bool,
    /// How long an acquire waits.
    pub(crate) wait: WaitPolicy,
    /// How a lease is held whatever its holder does: at least, at most, while its holder
    /// beats, and how long Redis keeps it past its ttl.
    pub(crate) holds: Holds,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions {
            ttl: None,
            auto_renew: true,
            wait: WaitPolicy::FOREVER,
            holds: Holds::default(),
        }
    }
}

impl LeaseOptions {
    /// The lease length asked for.
    pub(crate) fn ttl(&self, core: &Core) -> Duration {
        self.ttl.unwrap_or(core.options().default_ttl)
    }

    /// The name (of a `what`), the ttl and the wait policy, checked before anything is sent.
    pub(crate) fn checked_ttl(&self, core: &Core, what: &str, name: &str) -> Result<Duration> {
        crate::keys::validate_name(what, name)?;
        self.wait.validate()?;
        self.holds.validate()?;
        let ttl = self.ttl(core);
        crate::options::validate_ttl(ttl)?;
        Ok(ttl)
    }

    /// The request for the engine.
    pub(crate) fn request<'a>(
        &self,
        name: &'a Arc<str>,
        channel: &'a str,
        ttl: Duration,
        heads: usize,
    ) -> AcquireRequest<'a> {
        AcquireRequest {
            name,
            channel,
            ttl,
            auto_renew: self.auto_renew,
            wait: self.wait,
            heads,
            also: &[],
            hand_over: None,
            holds: self.holds,
        }
    }
}

/// One attempt's outcome: the lease, or how long the blocking lease has left (`None`: unknown).
pub(crate) type Attempt<G> = Result<G, Option<Duration>>;

impl Core {
    /// Takes a lease, waiting by the request's policy. `next` gives the lease kind and owner of
    /// each attempt.
    pub(crate) async fn acquire_with<K, F>(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        mut next: F,
    ) -> Result<Held>
    where
        K: LeaseKind,
        F: FnMut() -> Result<(K, OwnerToken)>,
    {
        let wait = WaitSpec {
            name: req.name,
            channel: req.channel,
            also: req.also,
            heads: req.heads,
            policy: req.wait,
            poll: self.options.poll_for(req.wait),
            timeout: self.options.timeout,
            replica_wait: self
                .options
                .replica_acks
                .map_or(Duration::ZERO, |(_, wait)| wait),
        };
        // A waiter of a plain or fair lock offers to take the lease straight from a local holder.
        let offer = |front: bool| {
            let from = req.hand_over.as_ref()?;
            let fresh = OwnerToken::fresh().ok()?;
            let (waiter, owner) = match &from.fair {
                Some((waiter, half)) => (
                    Some(waiter.clone()),
                    OwnerToken::parse(&format!("{half}{}", fresh.as_str().get(16..)?))?,
                ),
                None => (None, fresh),
            };
            let (sender, handed) = oneshot::channel();
            let offer = Offer {
                owner,
                name: req.name.clone(),
                ttl: req.ttl,
                auto_renew: req.auto_renew,
                holds: req.holds,
                waiter,
                to: sender,
            };
            self.waiters.post_offer(from.to, offer, front);
            Some(handed)
        };
        // What is handed over is this core's to adopt (`handover.rs`, invariant 4).
        let acquirer = Caller::current().await;
        let adopt = |handed: Handed| {
            let g = handed.take();
            self.adopt(
                g.name,
                g.kind,
                g.owner,
                g.token,
                g.requested_at,
                g.ttl,
                g.auto_renew,
                g.holds,
                Via::Handover,
                acquirer.clone(),
            )
        };
        let offers: Option<&OfferFn<'_, Handed>> =
            if req.hand_over.is_some() && self.backend().hands_over() {
                Some(&offer)
            } else {
                None
            };
        // The primitive, for the metrics of a wait that ends without a lease.
        let primitive = std::sync::OnceLock::new();
        let waiting = metrics::Waiting::default();
        let by_name = self.options.metrics_by_name.then_some(req.name);
        let started = Instant::now();
        let outcome = wait_with_offers(
            &self.waiters,
            &wait,
            || {
                let next = next();
                if let Ok((kind, _)) = &next {
                    primitive.get_or_init(|| kind.primitive());
                }
                let waiting = &waiting;
                async move {
                    let (kind, owner) = next?;
                    let p = kind.primitive();
                    let attempt = self.try_once(req, kind, owner).await;
                    if matches!(attempt, Ok(Err(_))) {
                        waiting.busy(p, by_name);
                    }
                    attempt
                }
            },
            offers.map(|post| (post, &adopt as &(dyn Fn(Handed) -> Held + Send + Sync))),
        )
        .await;
        match &outcome {
            Ok(held) => {
                metrics::waited(held.primitive(), started.elapsed());
                // A lease handed over is adopted inside the wait's span: the acquiring
                // call's span learns its token here.
                let token = held.lease().fencing_token().get();
                tracing::Span::current().record("fenced.token", token);
            }
            Err(Error::NotAcquired { .. }) => {
                metrics::not_acquired(primitive.get().copied());
                if let Some(&p) = primitive.get() {
                    metrics::waited(p, started.elapsed());
                }
            }
            Err(_) => {}
        }
        match primitive.get() {
            Some(p) => outcome.map_err(|e| e.waited_for(p.awaited())),
            None => outcome,
        }
    }

    /// Refuses, before anything is sent, a wait for `want` of `key` (a lock key, or a
    /// semaphore's permits, of which `limit` may be held at once) that only the caller's own
    /// leases stand in the way of for good: those it took and still holds, renewed until given
    /// back, leave less than `want`. The caller would wait for itself (with a deadline, only to
    /// run out).
    ///
    /// The caller is the Tokio task, or outside any task the thread ([`Caller`]). A lease
    /// counts as its acquirer's while its guard lives, wherever the guard went since: nothing
    /// tells a guard the task keeps from one it handed to another task, nor a future of the
    /// task that holds from one that waits (two arms of one `join!`).
    pub(crate) async fn refuse_waiting_for_itself(
        &self,
        what: &str,
        name: &str,
        key: &str,
        want: u32,
        limit: u32,
    ) -> Result<()> {
        let held = self.renewer.held_by(&Caller::current().await, key);
        if held.saturating_add(want) <= limit {
            return Ok(());
        }
        Err(Error::WouldDeadlock(if limit == 1 {
            format!(
                "{what} {name:?} is held by a guard this task acquired, so it would wait for itself: release that guard first, or acquire from another task"
            )
        } else {
            format!(
                "{what} {name:?}: guards this task acquired hold {held} of its {limit} permits, and {want} more would wait for itself: release some first, or acquire from another task"
            )
        }))
    }

    /// Makes a granted lease a [`Held`]: tracked for renewal (if asked), with its validity
    /// counted from `requested_at`, before the request that took it was sent.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn adopt(
        self: &Arc<Self>,
        name: Arc<str>,
        kind: Arc<dyn LeaseKind>,
        owner: OwnerToken,
        fencing_token: FencingToken,
        requested_at: Instant,
        ttl: Duration,
        auto_renew: bool,
        holds: Holds,
        via: Via,
        acquirer: Caller,
    ) -> Held {
        tracing::debug!(name = %name, %fencing_token, via = via.as_str(), "fenced: acquired");
        // The acquiring call's span (`fenced.acquire`, `fenced.try_acquire`, ...) declares it.
        tracing::Span::current().record("fenced.token", fencing_token.get());
        metrics::acquired(kind.primitive(), via);
        tracing::trace!(owner = owner.as_str(), "fenced: owner token");
        // The holds count from now, when the grant is known: at least `min` after the grant,
        // and never beyond `max` after the request was sent (nor `silence` after it without
        // a beat).
        let granted_at = Instant::now();
        let state = Arc::new(LeaseState::new(requested_at, ttl).held_on(&holds));
        let id = self.renewer.track(Tracked {
            kind: kind.clone(),
            owner: owner.clone(),
            fencing_token,
            renew: auto_renew,
            state: state.clone(),
            acquirer,
        });
        let lease = Lease::new(name, fencing_token, state);
        let min_until = holds.min.map(|min| granted_at + min);
        Held::new(self.clone(), kind, owner, id, lease, min_until)
    }

    /// Takes over a lease handed from another process (a ticket): one expiry change of the
    /// epoch after the ticket's confirms the owner still holds it and starts its validity;
    /// from then on it is renewed and guarded like any other.
    ///
    /// A take-over whose outcome stays unknown (an error, or this future dropped) is repeated
    /// as itself by the next `resume` of the same ticket on this client, or by the retry
    /// ticket [`retry_take_over`](Self::retry_take_over) hands out (`takeover.rs`).
    pub(crate) async fn resume(
        self: &Arc<Self>,
        kind: Arc<dyn LeaseKind>,
        (owner, fencing_token): (OwnerToken, FencingToken),
        ttl: Duration,
        epoch: u64,
        carried: Vec<OwnerToken>,
    ) -> Result<Held> {
        self.backend().supports(&*kind)?;
        let epoch = epoch.saturating_add(1);
        let requested_at = Instant::now();
        let attempt = self.takeovers.begin(&owner, epoch, carried, ttl)?;
        let take_over = (attempt.mark(), attempt.proofs());
        let Some(ticketed) = kind.ticketed() else {
            attempt.answered();
            return Err(Error::unsupported(format!(
                "{} cannot be resumed from a ticket: only plain, fair and unfenced locks can",
                kind.primitive().with_article()
            )));
        };
        let call = ticketed.resume(&owner, ttl_millis(ttl), epoch, take_over);
        let reply = self.backend().extend("take over", &call, &*kind).await?;
        attempt.answered();
        match reply {
            ExpiryReply::Applied => {}
            // Not this owner's any more (re-granted since, or never), or this ticket (or a
            // newer one) was taken over already: either way not ours to hold.
            ExpiryReply::NotHeld | ExpiryReply::Superseded => {
                return Err(Error::NotHeld {
                    name: kind.name().to_string(),
                });
            }
        }
        let name = kind.name().clone();
        metrics::acquired(kind.primitive(), Via::Attempt);
        let state = Arc::new(LeaseState::resumed(requested_at, ttl, epoch));
        let id = self.renewer.track(Tracked {
            kind: kind.clone(),
            owner: owner.clone(),
            fencing_token,
            renew: true,
            state: state.clone(),
            acquirer: Caller::current().await,
        });
        let lease = Lease::new(name, fencing_token, state);
        Ok(Held::new(self.clone(), kind, owner, id, lease, None))
    }

    /// The nonce of this client's take-over of `owner`'s lease from a ticket of `epoch` whose
    /// outcome is unknown, taken out for a retry ticket: from then on only that text repeats
    /// it (`takeover.rs`, invariant 2).
    pub(crate) fn retry_take_over(
        &self,
        owner: &OwnerToken,
        epoch: u64,
    ) -> Option<Vec<OwnerToken>> {
        self.takeovers.hand_out(owner, epoch.saturating_add(1))
    }

    /// Waits, by `wait`, for a condition that is not a lease (a latch opening): `check` is
    /// the attempt, run at once, on every wake-up from `channel`, and by the fallback poll.
    /// Every waiter of the process may check at once (a condition frees them all). A wait
    /// that runs out names a lock: the caller names what it waited for
    /// ([`Error::waited_for`]).
    pub(crate) async fn wait_until<G, F, Fut>(
        &self,
        name: &str,
        channel: &str,
        wait: WaitPolicy,
        check: F,
    ) -> Result<G>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Attempt<G>>>,
    {
        let spec = WaitSpec {
            name,
            channel,
            also: &[],
            heads: usize::MAX,
            policy: wait,
            poll: self.options.poll_for(wait),
            timeout: self.options.timeout,
            replica_wait: self
                .options
                .replica_acks
                .map_or(Duration::ZERO, |(_, wait)| wait),
        };
        wait_for(&self.waiters, &spec, check).await
    }

    /// One attempt, never waits.
    /// One attempt of a kind and owner from `next`, never waiting: `None` when the lease is
    /// taken. What every primitive's `try_acquire` sends.
    pub(crate) async fn try_with<K: LeaseKind>(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        next: impl FnOnce() -> Result<(K, OwnerToken)>,
    ) -> Result<Option<Held>> {
        let (kind, owner) = next()?;
        let span = tracing::debug_span!(
            "fenced.try_acquire",
            fenced.name = %kind.name(),
            fenced.primitive = kind.primitive().as_str(),
            fenced.token = tracing::field::Empty,
        );
        // Cut at the call timeout (invariant 6): a first grant that learns the server's ways
        // first is still one call, whose writes may wait for replicas (a grant, then the
        // give-back of one that falls short).
        let timeout = self.options.timeout;
        let replicas = self
            .options
            .replica_acks
            .map_or(Duration::ZERO, |(_, wait)| wait);
        match tokio::time::timeout(
            timeout + replicas * 2,
            self.try_once(req, kind, owner).instrument(span),
        )
        .await
        {
            Ok(attempt) => Ok(attempt?.ok()),
            Err(_) => Err(Error::Timeout {
                operation: "acquire",
                after: timeout,
            }),
        }
    }

    pub(crate) async fn try_once<K: LeaseKind>(
        self: &Arc<Self>,
        req: &AcquireRequest<'_>,
        kind: K,
        owner: OwnerToken,
    ) -> Result<Attempt<Held>> {
        let kind: Arc<dyn LeaseKind> = Arc::new(kind);
        // Refused before anything is sent (a primitive the backend does not run).
        self.backend().supports(&*kind)?;
        // Until Redis answers, the outcome is unknown: if this future is dropped or the call
        // fails, the lease may exist without a guard, so abandon it in the background.
        let mut pending = PendingAcquire {
            core: self,
            armed: Some((kind.clone(), owner.clone())),
            // Long enough to outlast a typical outage; should the attempt run later still,
            // it holds the lease for one ttl at most, like a crashed holder.
            patience: req.ttl.max(self.options.timeout * 10),
        };
        let requested_at = Instant::now();
        // Redis keeps the lease for its ttl and the lock delay; the holder counts on the ttl.
        let call = kind.acquire(&owner, req.holds.server_ms(req.ttl));
        // For the replies a quorum backend reads after it decided (see `Backend::acquire`);
        // built only there.
        let patience_ms = ttl_millis(pending.patience);
        let abandon = || kind.abandon(&owner, &self.release_message(kind.wakes()), patience_ms);
        let (reply, clean) = self
            .backend()
            .acquire(&*kind, &owner, &call, &abandon, req.ttl, requested_at)
            .await?;
        if clean {
            pending.armed = None;
        }
        match reply {
            AcquireReply::Acquired(fencing_token) => Ok(Ok(self.adopt(
                req.name.clone(),
                kind,
                owner,
                fencing_token,
                requested_at,
                req.ttl,
                req.auto_renew,
                req.holds,
                Via::Attempt,
                Caller::current().await,
            ))),
            AcquireReply::Busy { remaining } => {
                metrics::busy(kind.primitive());
                Ok(Err(remaining))
            }
            // Only an attempt this client gave up on is answered so, and its reply is never
            // awaited; should one arrive anyway, nothing was taken.
            AcquireReply::Abandoned => Ok(Err(None)),
            AcquireReply::NotHeld => Err(Error::NotHeld {
                name: req.name.to_string(),
            }),
            // Nothing was taken, and no release will ever free it: end the wait at once.
            AcquireReply::WrongType { key } => Err(crate::kind::wrong_type(&call, key)),
        }
    }
}

/// Abandons an attempt whose outcome is unknown when dropped still armed.
struct PendingAcquire<'a> {
    core: &'a Core,
    armed: Option<(Arc<dyn LeaseKind>, OwnerToken)>,
    patience: Duration,
}

impl Drop for PendingAcquire<'_> {
    fn drop(&mut self) {
        if let Some((kind, owner)) = self.armed.take() {
            self.core
                .renewer
                .abandon_in_background(kind, owner, self.patience);
        }
    }
}

/// How one acquisition waits.
pub(crate) struct WaitSpec<'a> {
    pub(crate) name: &'a str,
    pub(crate) channel: &'a str,
    /// Other channels whose releases wake this wait (see `AcquireRequest::also`).
    pub(crate) also: &'a [String],
    pub(crate) heads: usize,
    pub(crate) policy: WaitPolicy,
    /// Bounds of the fallback poll.
    pub(crate) poll: (Duration, Duration),
    /// Bound on the pub/sub subscription.
    pub(crate) timeout: Duration,
    /// How long an attempt's writes wait for replicas (`WAIT`; zero without replica
    /// acknowledgements): part of its round trip.
    pub(crate) replica_wait: Duration,
}

impl WaitSpec<'_> {
    /// How long past its deadline a wait lets an attempt already on its way answer: a round
    /// trip of a server that answers (an attempt sent just before the deadline gets its
    /// "busy", its grant or its replica shortfall, whose give-back waits for replicas too),
    /// never a whole call timeout of one that does not.
    fn grace(&self) -> Duration {
        (self.timeout / 4).min(Duration::from_millis(100)) + self.replica_wait * 2
    }
}

/// Posts a head's offer of a handover, and gives where the lease arrives (`None`: no offer).
/// `true`: the head renews its offer (it goes first); `false`: a waiter joining the queue.
pub(crate) type OfferFn<'a, H> = dyn Fn(bool) -> Option<oneshot::Receiver<H>> + Send + Sync + 'a;

/// How a head offers a handover, and how it takes what is handed to it.
type Offers<'a, H, G> = (&'a OfferFn<'a, H>, &'a (dyn Fn(H) -> G + Send + Sync + 'a));

/// What a wait may still spend: its deadline and its attempts, and the cause it ends with.
struct Budget<'a> {
    spec: &'a WaitSpec<'a>,
    started: Instant,
    deadline: Option<Instant>,
    attempts: u32,
    /// The error of the first attempt, if it failed: a wait that runs out before the next
    /// attempt (queued, subscribing) ends with that cause, not "not acquired". Later attempts
    /// end the wait with their own error or with "not acquired" themselves.
    failed: Option<Error>,
    /// The error of the last attempt that answered, if it failed: an attempt cut at the
    /// deadline ends the wait with that cause (a replica shortfall, no quorum), which says
    /// more than that time ran out.
    recent: Option<Error>,
}

impl<'a> Budget<'a> {
    /// Checks the policy before anything is sent: a deadline the clock can hold, an attempt.
    fn new(spec: &'a WaitSpec<'a>) -> Result<Self> {
        let started = Instant::now();
        let deadline = match spec.policy.deadline() {
            Some(d) => Some(started.checked_add(d).ok_or_else(|| {
                Error::invalid(format!("wait deadline {d:?} overflows the clock; use WaitPolicy::FOREVER to wait without limit"))
            })?),
            None => None,
        };
        if spec.policy.max_attempts() == Some(0) {
            return Err(Error::invalid(
                "max_attempts is 0; at least one attempt is needed",
            ));
        }
        Ok(Budget {
            spec,
            started,
            deadline,
            attempts: 0,
            failed: None,
            recent: None,
        })
    }

    /// No attempt or no time left.
    fn spent(&self) -> bool {
        let out_of_attempts = self
            .spec
            .policy
            .max_attempts()
            .is_some_and(|max| self.attempts >= max);
        out_of_attempts || self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn give_up(&self) -> Error {
        Error::NotAcquired {
            // A lock's, unless the caller names what it waited for (`Error::waited_for`).
            what: Awaited::Lock,
            name: self.spec.name.to_owned(),
            waited: self.started.elapsed(),
            attempts: self.attempts,
        }
    }

    /// The wait's end before an attempt of its own answered: the first attempt's failure, or
    /// "not acquired".
    fn end(&self) -> Error {
        self.failed
            .clone()
            .map_or_else(|| self.give_up(), |e| self.named(e))
    }

    /// A failed attempt: retried within the budget when transient, the wait's end otherwise.
    fn retry_or_fail(&self, e: Error) -> Result<()> {
        if e.is_transient() && !self.spent() {
            tracing::debug!(error = %e, "fenced: acquire attempt failed; retrying within the wait");
            Ok(())
        } else {
            Err(self.named(e))
        }
    }

    /// One attempt, cut one round trip's grace past the wait's deadline (invariant 6): one
    /// still on its way then is dropped, and so abandoned in the background (invariant 3).
    async fn run<G>(
        &mut self,
        attempt: impl Future<Output = Result<Attempt<G>>>,
    ) -> Result<Attempt<G>> {
        self.attempts = self.attempts.saturating_add(1);
        let answer = match self.deadline {
            Some(deadline) => {
                match tokio::time::timeout_at(deadline + self.spec.grace(), attempt).await {
                    Ok(answer) => answer,
                    Err(_) => {
                        return Err(self
                            .recent
                            .clone()
                            .map_or_else(|| self.overdue("acquire"), |e| self.named(e)));
                    }
                }
            }
            None => attempt.await,
        };
        self.recent = answer.as_ref().err().cloned();
        answer
    }

    /// `bound` (a subscription's), cut to the time left before the deadline.
    fn within(&self, bound: Duration) -> Duration {
        self.deadline.map_or(bound, |d| {
            bound.min(d.saturating_duration_since(Instant::now()))
        })
    }

    /// A wait whose deadline came while Redis had not answered: a timeout, of the wait.
    fn overdue(&self, operation: &'static str) -> Error {
        Error::Timeout {
            operation,
            after: self.spec.policy.deadline().unwrap_or_default(),
        }
    }

    /// A timeout that ends a wait with a deadline is the wait's: it names the deadline, not
    /// the one call's timeout that was running into it.
    fn named(&self, e: Error) -> Error {
        match e {
            Error::Timeout { operation, .. } if self.deadline.is_some() => self.overdue(operation),
            e => e,
        }
    }
}

/// The wait loop, generic over the attempt so it can be tested without a server.
pub(crate) async fn wait_for<G, F, Fut>(
    waiters: &Arc<LocalWaiters>,
    spec: &WaitSpec<'_>,
    attempt: F,
) -> Result<G>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
{
    wait_with_offers::<G, G, F, Fut>(waiters, spec, attempt, None).await
}

/// The wait loop; with `offers`, a head whose attempt found the lock busy also offers to take
/// it straight from a local holder (`handover.rs`), and returns what is handed to it.
async fn wait_with_offers<G, H, F, Fut>(
    waiters: &Arc<LocalWaiters>,
    spec: &WaitSpec<'_>,
    mut attempt: F,
    offers: Option<Offers<'_, H, G>>,
) -> Result<G>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<G>>>,
{
    let mut budget = Budget::new(spec)?;
    let (poll_min, poll_max) = spec.poll;
    let mut failures = Backoff::new(poll_min, poll_max);

    // Fast path: nobody in this process is queued, so try straight away.
    if !waiters.has_waiters(spec.channel) {
        match budget.run(attempt()).await {
            Ok(Ok(granted)) => return Ok(granted),
            Ok(Err(_)) => {
                if budget.spent() {
                    return Err(budget.give_up());
                }
            }
            Err(e) => {
                budget.failed = Some(e.clone());
                budget.retry_or_fail(e)?;
            }
        }
    }

    // Past a busy attempt: the rest of the call is its wait, a span of its own.
    let span = tracing::debug_span!(
        "fenced.wait",
        fenced.name = %spec.name,
    );
    let waited = async {
        // Queue behind this process's other waiters; only the heads talk to Redis. A waiter
        // offers to take the lock straight from a local holder as it joins, so that a release
        // hands it over even before this waiter's turn as head comes (`handover.rs`).
        let ticket = waiters.join_watching(spec.channel, spec.heads, spec.also);
        // Subscribed (and confirmed) before anything else: a release published after this
        // waiter's first attempt reaches it, and while it offers a handover, the script counts
        // this client among the channel's subscribers (`handover.rs`, invariant 3).
        let subscribed = if spec.also.is_empty() {
            waiters
                .subscribe(spec.channel, budget.within(spec.timeout))
                .await
        } else {
            let mut all = true;
            for channel in spec.also {
                all &= waiters
                    .subscribe(channel, budget.within(spec.timeout))
                    .await;
            }
            all
        };
        tracing::debug!(subscribed, "fenced: waiting");
        // Offers only while subscribed: otherwise another client's waiter would be the one
        // subscriber the script sees, and taken for this client.
        let offers = offers.filter(|_| subscribed);
        let mut offered: Option<oneshot::Receiver<H>> = offers.and_then(|(post, _)| post(false));
        let take = |handed: H| offers.map(|(_, take)| take(handed));
        // A lease handed over just as the wait ends is taken, not dropped.
        let collect = |offered: &mut Option<oneshot::Receiver<H>>| {
            offered
                .as_mut()
                .and_then(|handed| handed.try_recv().ok())
                .and_then(take)
        };
        // One future for the whole wait: a new one would queue again at the back.
        let turn = ticket.head();
        tokio::pin!(turn);
        let head = loop {
            tokio::select! {
                head = &mut turn => break head,
                handed = handed_over(&mut offered) => match handed.and_then(take) {
                    Some(lease) => return Ok(lease),
                    // The holder could not hand it over; this waiter's turn comes as usual.
                    None => offered = None,
                },
                _ = sleep_until_opt(budget.deadline) => {
                    return collect(&mut offered).ok_or_else(|| budget.end());
                }
            }
        };
        let _head = head.ok_or_else(|| budget.end())?;
        let mut backoff = Backoff::new(poll_min, poll_max);
        let mut first_turn = true;
        loop {
            let notified = ticket.wake().notified();
            tokio::pin!(notified);
            notified.as_mut().enable(); // register before the attempt: no release is missed
            // The head's offer stands before its attempt, so a local holder that releases while the
            // attempt is on its way (or before this task is polled again) hands it over. One
            // standing offer at a time (`handover.rs`, invariant 1): renewed only once used up.
            if offered.is_none() {
                offered = offers.and_then(|(post, _)| post(true));
            }
            // Handed to this process's previous head: a new head waits on its offer rather than
            // try a lock known to be taken (its next poll tries, should the holder never give it
            // back).
            let skip = first_turn && offered.is_some() && waiters.is_held_here(spec.channel);
            first_turn = false;
            let pause = if skip {
                backoff.next_wait()
            } else {
                match budget.run(attempt()).await {
                    Ok(Ok(granted)) => {
                        tracing::debug!(attempts = budget.attempts, waited = ?budget.started.elapsed(), "fenced: acquired after waiting");
                        return Ok(granted);
                    }
                    Ok(Err(remaining)) => {
                        if budget.spent() {
                            return collect(&mut offered).ok_or_else(|| budget.give_up());
                        }
                        failures.reset();
                        let pause = backoff.next_wait();
                        // Retry right when the blocking lease runs out, in case it never releases.
                        remaining.map_or(pause, |left| pause.min(left + Duration::from_millis(1)))
                    }
                    Err(e) => {
                        if let Err(e) = budget.retry_or_fail(e) {
                            return collect(&mut offered).ok_or(e);
                        }
                        failures.next_wait()
                    }
                }
            };
            let mut wake_at = Instant::now() + pause;
            if let Some(d) = budget.deadline {
                wake_at = wake_at.min(d);
            }
            tokio::select! {
                _ = &mut notified => backoff.reset(),
                _ = tokio::time::sleep_until(wake_at) => {}
                handed = handed_over(&mut offered) => match handed.and_then(take) {
                    Some(lease) => {
                        tracing::debug!(attempts = budget.attempts, waited = ?budget.started.elapsed(), "fenced: handed over");
                        return Ok(lease);
                    }
                    // The holder could not hand it over (it released as usual): try now.
                    None => offered = None,
                },
            }
        }
    };
    waited.instrument(span).await
}

/// What is handed over on the standing offer; never resolves without one.
async fn handed_over<G>(offered: &mut Option<oneshot::Receiver<G>>) -> Option<G> {
    match offered.as_mut() {
        Some(handed) => handed.await.ok(),
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    //! The wait loop under paused time, with scripted attempts: no server, exact instants.

    use std::sync::Mutex;

    use super::*;
    use crate::kind::Wake;
    use crate::util::lock_unpoisoned;

    fn spec(policy: WaitPolicy, poll: Duration) -> WaitSpec<'static> {
        WaitSpec {
            name: "job",
            channel: "ch",
            also: &[],
            heads: 1,
            policy,
            poll: (poll, poll),
            timeout: Duration::from_millis(50),
            replica_wait: Duration::ZERO,
        }
    }

    /// Attempts that answer from a script, recording when each was made.
    struct Script {
        replies: Mutex<Vec<Result<Attempt<u32>>>>,
        at: Mutex<Vec<Duration>>,
        start: Instant,
    }

    impl Script {
        fn new(mut replies: Vec<Result<Attempt<u32>>>) -> Arc<Self> {
            replies.reverse();
            Arc::new(Script {
                replies: Mutex::new(replies),
                at: Mutex::new(Vec::new()),
                start: Instant::now(),
            })
        }

        fn attempt(self: &Arc<Self>) -> impl Future<Output = Result<Attempt<u32>>> + use<> {
            let me = self.clone();
            async move {
                lock_unpoisoned(&me.at).push(me.start.elapsed());
                lock_unpoisoned(&me.replies).pop().unwrap_or(Ok(Err(None)))
            }
        }

        fn times(&self) -> Vec<u128> {
            lock_unpoisoned(&self.at)
                .iter()
                .map(|d| d.as_millis())
                .collect()
        }
    }

    fn timeout_error() -> Error {
        Error::Timeout {
            operation: "acquire",
            after: Duration::from_millis(1),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_retries_when_the_blocking_lease_runs_out_not_at_its_poll() {
        let waiters = LocalWaiters::detached("me");
        let busy = || Ok(Err(Some(Duration::from_millis(300))));
        let script = Script::new(vec![busy(), busy(), Ok(Ok(7))]);
        let got = wait_for(
            &waiters,
            &spec(WaitPolicy::FOREVER, Duration::from_secs(10)),
            || script.attempt(),
        )
        .await;
        assert_eq!(got.ok(), Some(7));
        assert_eq!(
            script.times(),
            vec![0, 0, 301],
            "fast path, first try as head, then at the lease's end"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_local_release_wakes_the_head_before_its_poll() {
        let waiters = LocalWaiters::detached("me");
        let script = Script::new(vec![Ok(Err(None)), Ok(Err(None)), Ok(Ok(1))]);
        let releaser = {
            let waiters = waiters.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(40)).await;
                waiters.released("ch", Wake::One);
            })
        };
        let got = wait_for(
            &waiters,
            &spec(WaitPolicy::FOREVER, Duration::from_secs(10)),
            || script.attempt(),
        )
        .await;
        assert_eq!(got.ok(), Some(1));
        let times = script.times();
        assert_eq!(
            times[..2],
            [0, 0],
            "the fast path, then the head's first try"
        );
        assert_eq!(times[2], 40, "woken by the release, not by the 10s poll");
        releaser.await.ok();
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_and_the_attempt_limit_end_the_wait_with_not_acquired() {
        let waiters = LocalWaiters::detached("me");
        let script = Script::new(vec![]);
        let policy = WaitPolicy::up_to(Duration::from_secs(2));
        let err = wait_for(&waiters, &spec(policy, Duration::from_millis(500)), || {
            script.attempt()
        })
        .await
        .err();
        match err {
            Some(Error::NotAcquired {
                waited, attempts, ..
            }) => {
                assert_eq!(waited, Duration::from_secs(2));
                assert!(attempts >= 4, "{attempts}");
            }
            other => panic!("{other:?}"),
        }
        let script = Script::new(vec![]);
        let policy = WaitPolicy::FOREVER.with_max_attempts(3);
        let err = wait_for(&waiters, &spec(policy, Duration::from_millis(5)), || {
            script.attempt()
        })
        .await
        .err();
        assert!(
            matches!(err, Some(Error::NotAcquired { attempts: 3, .. })),
            "{err:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_that_never_answers_is_cut_at_the_deadline_which_the_error_names() {
        let waiters = LocalWaiters::detached("me");
        let wait = Duration::from_millis(1200);
        let started = Instant::now();
        // Redis gone silent: no attempt ever answers.
        let err = wait_for::<u32, _, _>(
            &waiters,
            &spec(WaitPolicy::up_to(wait), Duration::from_millis(20)),
            std::future::pending,
        )
        .await
        .err();
        // Cut at the deadline and a round trip's grace (a quarter of the 20 ms timeout), to
        // the timer's resolution.
        let took = started.elapsed();
        assert!(
            took >= wait && took <= wait + Duration::from_millis(20),
            "{took:?}"
        );
        assert!(
            matches!(err, Some(Error::Timeout { after, .. }) if after == wait),
            "{err:?}"
        );
        // Timeouts of their own until the deadline: the wait's error names the deadline.
        let script = Script::new((0..100).map(|_| Err(timeout_error())).collect());
        let err = wait_for(
            &waiters,
            &spec(WaitPolicy::up_to(wait), Duration::from_millis(20)),
            || script.attempt(),
        )
        .await
        .err();
        assert!(
            matches!(err, Some(Error::Timeout { after, .. }) if after == wait),
            "{err:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_are_retried_and_permanent_ones_end_the_wait() {
        let waiters = LocalWaiters::detached("me");
        let script = Script::new(vec![Err(timeout_error()), Err(timeout_error()), Ok(Ok(3))]);
        let got = wait_for(
            &waiters,
            &spec(
                WaitPolicy::up_to(Duration::from_secs(5)),
                Duration::from_millis(20),
            ),
            || script.attempt(),
        )
        .await;
        assert_eq!(got.ok(), Some(3));
        let script = Script::new(vec![Err(Error::invalid("permanent"))]);
        let got = wait_for(
            &waiters,
            &spec(WaitPolicy::FOREVER, Duration::from_millis(20)),
            || script.attempt(),
        )
        .await;
        assert!(matches!(got, Err(Error::InvalidArgument(_))));
        assert_eq!(script.times().len(), 1);
    }
}

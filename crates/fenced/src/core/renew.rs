//! The renewal loop: ONE task per client keeps every held lease alive, and tells a holder the
//! moment its lease is gone.
//!
//! Invariants:
//! 1. All leases due for renewal are renewed together, in one batch per tick (one `extend`
//!    per lease), at about a third of each lease's ttl. The backend sends a batch in parts
//!    (one pipeline per node; without scripts, one transaction per dedicated connection), and
//!    each part's leases are settled as that part answers: a part held up holds up no other.
//! 2. A lease's validity deadline is measured on the monotonic clock from BEFORE the request
//!    that granted or renewed it was sent, minus the drift allowance; the server's own expiry
//!    can only come later. Renewals and `extend`s are ordered by epoch (`lease.rs`), so a
//!    reply that arrives late never makes the deadline claim more than Redis applied.
//! 3. A lease is declared lost (its `CancellationToken` cancelled) when a renewal is refused
//!    (the key is gone or belongs to somebody else), or when its validity deadline passes
//!    without a successful renewal, even while Redis does not answer at all. Transport errors
//!    alone do not declare it lost: the loop retries until the deadline.
//! 4. At most one renewal batch is in flight; the deadline timer keeps running meanwhile.
//!    Guards add and remove leases in a shared registry; the loop is woken only when a new
//!    lease falls due before its current alarm, not on every acquire and release. So that a
//!    lease taken while the registry is empty finds an alarm too, the loop keeps ticking every
//!    `IDLE_TICK` for `IDLE_LINGER` after the last lease was tracked, and only then sleeps
//!    until told: a process that takes and gives back leases in a loop has the loop tick 25
//!    times a second instead of waking it once per lease (each such wake was a hop to the
//!    other worker thread). A lease of any ttl falls due after the tick, so none has to wake
//!    it; the price is those ticks while leases come and go.
//! 5. Guards dropped without `release` hand their lease to this task, which releases it in the
//!    background, so `Drop` never blocks. Acquire attempts of unknown outcome (timed out or
//!    cancelled mid-flight) are abandoned here too: released if they took the lease, voided
//!    by a tombstone if they are still on their way.
//! 6. The task ends when the client and every guard are gone and pending releases are done.
//! 7. A lease lost because this task ran late names it (`LostCause::RenewalLate`): the task was
//!    due to run (its alarm fell, or it was woken) while no round trip was in flight, so it
//!    would have sent the lease's renewal by then or by the renewal's due time, whichever is
//!    later, at least a sixth of a ttl before the deadline; and it had not run by the deadline.
//!    A task on time always sends a renewal by its due time, so only threads kept from it
//!    (busy or blocked) make it late. Waiting on Redis never counts: a lease whose renewal was
//!    held back by a round trip in flight is lost as `Expired`. A lease whose maximum hold
//!    ends it is lost as `MaxHold`.
//! 8. A lease with a heartbeat is renewed only while its holder beats: when it falls due
//!    more than its maximum silence after the last beat, it is not renewed but given up
//!    (`LostCause::Silent`, its lost signal fires), and left to run out in Redis, never
//!    deleted here. The beat is read as the lease falls due (one atomic load): no timer per
//!    lease.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Poll, Waker};
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::backend::{Backend, RenewPart};
use crate::core::cleanup::{self, CleanUp, Job};
use crate::core::lease::{ExpiryChange, LateWatch, LeaseState};
use crate::core::metrics;
use crate::core::notify::LocalWaiters;
use crate::error::{Error, LostCause, Result};
use crate::kind::ExpiryReply;
use crate::kind::LeaseKind;
use crate::scripts::ScriptCall;
use crate::token::{FencingToken, OwnerToken};
use crate::util::{lock_unpoisoned, sleep_until_opt};

/// A lease handed to the loop, of any kind: the kind builds its renewal request.
pub(crate) struct Tracked {
    pub(crate) kind: Arc<dyn LeaseKind>,
    pub(crate) owner: OwnerToken,
    pub(crate) fencing_token: FencingToken,
    pub(crate) renew: bool,
    pub(crate) state: Arc<LeaseState>,
    /// Who took it ([`Caller::current`] at the grant).
    pub(crate) acquirer: Caller,
}

/// Who waits for a lease, or took one: the future that polls the acquire, known by its waker.
/// That is a Tokio task (or `block_on`, the body of `#[tokio::main]` or `#[tokio::test]`), or
/// one of the futures a `FuturesUnordered` runs (`buffer_unordered`, `for_each_concurrent`),
/// each woken apart and able to wait for a sibling; the arms of one `join!` or `select!` are
/// polled with their task's waker and are that task. An acquire that could only be granted
/// once leases its own caller holds are given back would wait for itself
/// (`Core::refuse_waiting_for_itself`).
#[derive(Clone, Debug)]
pub(crate) struct Caller(Waker);

impl Caller {
    /// The future polling now.
    pub(crate) async fn current() -> Self {
        Caller(std::future::poll_fn(|cx| Poll::Ready(cx.waker().clone())).await)
    }

    /// Whether `other` is this same caller.
    pub(crate) fn is(&self, other: &Caller) -> bool {
        self.0.will_wake(&other.0)
    }
}

enum Command {
    /// Answer once no clean-up is pending.
    Flush(oneshot::Sender<()>),
    CleanUp(Job),
}

/// The leases the loop watches, shared with the guards. Adding or removing a lease is a map
/// operation under a short lock; the loop is woken only when a new lease needs attention
/// before the loop's current alarm, so a busy acquire/release cycle costs no task wake-up.
struct Shared {
    registry: Mutex<Registry>,
    changed: Notify,
    stats: Counters,
}

/// Running totals of the renewal loop, for [`Client::stats`](crate::Client::stats).
#[derive(Default)]
struct Counters {
    batches: AtomicU64,
    renewed: AtomicU64,
    lost: AtomicU64,
    woken: AtomicU64,
}

/// What a client's renewal loop has done so far: for dashboards, and to check that renewal
/// batches (one round trip per tick) and loses nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewalStats {
    /// Leases held and watched right now.
    pub leases: u64,
    /// Renewal round trips sent (one pipeline each, however many leases it carried).
    pub batches: u64,
    /// Leases renewed successfully, summed over all batches.
    pub renewed: u64,
    /// Leases declared lost (renewal refused, or deadline passed without a renewal).
    pub lost: u64,
    /// Times a lease taken or re-timed had to wake the loop, because it fell due before the
    /// loop's alarm. A process that takes and gives back leases in a loop wakes it once, not
    /// once per lease.
    pub woken: u64,
}

#[derive(Default)]
struct Registry {
    entries: HashMap<u64, Entry>,
    /// When the loop will next wake by itself (`None`: it sleeps until told).
    alarm: Option<Instant>,
    /// When a lease was last tracked (invariant 4: the loop lingers after it).
    tracked_at: Option<Instant>,
    /// Since when the loop owes a run that may send renewals: its alarm fell or it was woken,
    /// and it has not ticked since (invariant 7). `None` while a round trip is in flight.
    due: Option<Instant>,
    /// A renewal round trip is in flight.
    in_flight: bool,
}

impl Registry {
    /// The loop is woken now: it owes a run from now on, unless it waits on a round trip.
    fn woken(&mut self, now: Instant) {
        if !self.in_flight {
            self.due = Some(self.due.map_or(now, |due| due.min(now)));
        }
    }
}

/// A tracked lease's view of its renewal loop: whether the loop ran late (invariant 7).
#[derive(Debug)]
pub(crate) struct Watch {
    shared: Weak<Shared>,
    id: u64,
}

impl LateWatch for Watch {
    /// Why the lease, past its deadline, is lost by `now` ([`cause_at_deadline`]); `None` once
    /// the loop no longer tracks it.
    fn cause_at_deadline(&self, now: Instant) -> Option<LostCause> {
        let shared = self.shared.upgrade()?;
        let registry = shared.registry();
        let entry = registry.entries.get(&self.id)?;
        Some(cause_at_deadline(registry.due, entry, now))
    }
}

/// How often the loop wakes while it lingers with no lease (invariant 4): less than a lease
/// of the shortest ttl waits for its first renewal (about 45 ms), so a lease taken meanwhile
/// is never due before the tick.
const IDLE_TICK: Duration = Duration::from_millis(40);

/// How long the loop lingers after the last lease was tracked, before it sleeps until told.
const IDLE_LINGER: Duration = Duration::from_secs(1);

impl Shared {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        lock_unpoisoned(&self.registry)
    }
}

/// The client's handle on its renewal task.
pub(crate) struct Renewer {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    next_id: AtomicU64,
}

impl Renewer {
    pub(crate) fn start(backend: Backend, local: Arc<LocalWaiters>) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry::default()),
            changed: Notify::new(),
            stats: Counters::default(),
        });
        tokio::spawn(run(backend, local, shared.clone(), rx));
        Renewer {
            shared,
            commands,
            next_id: AtomicU64::new(1),
        }
    }

    /// Starts watching (and, if asked, renewing) a lease; returns its id.
    pub(crate) fn track(&self, lease: Tracked) -> u64 {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        if self.commands.is_closed() {
            // Only possible while the runtime shuts down: nobody will renew, so say so now.
            lease.state.lose(LostCause::Expired);
            return id;
        }
        let renew_at = lease.state.renew_at();
        let deadline = lease.state.valid_until();
        let due = if lease.renew {
            renew_at.min(deadline)
        } else {
            deadline
        };
        lease.state.watched_by(Watch {
            shared: Arc::downgrade(&self.shared),
            id,
        });
        let wake = {
            let mut registry = self.shared.registry();
            let now = Instant::now();
            registry.tracked_at = Some(now);
            registry.entries.insert(
                id,
                Entry {
                    lease,
                    renew_at,
                    in_flight: false,
                },
            );
            let wake = registry.alarm.is_none_or(|alarm| due < alarm);
            if wake {
                registry.woken(now);
            }
            wake
        };
        if wake {
            self.wake_loop();
        }
        id
    }

    /// Wakes the loop to look at a lease due before its alarm.
    fn wake_loop(&self) {
        self.shared.stats.woken.fetch_add(1, Ordering::Relaxed);
        self.shared.changed.notify_one();
    }

    /// Reschedules a lease's next renewal from its deadline, after an `extend` started or
    /// finished: a shorter ttl (applied, or of unknown outcome) must be renewed sooner.
    pub(crate) fn reschedule(&self, id: u64) {
        let wake = {
            let mut registry = self.shared.registry();
            let Some(entry) = registry.entries.get_mut(&id) else {
                return;
            };
            let renew_at = entry.lease.state.renew_at();
            entry.renew_at = renew_at;
            let wake = registry.alarm.is_none_or(|alarm| renew_at < alarm);
            if wake {
                registry.woken(Instant::now());
            }
            wake
        };
        if wake {
            self.wake_loop();
        }
    }

    /// The loop's running totals.
    pub(crate) fn stats(&self) -> RenewalStats {
        let leases = self.shared.registry().entries.len() as u64;
        let c = &self.shared.stats;
        RenewalStats {
            leases,
            batches: c.batches.load(Ordering::Relaxed),
            renewed: c.renewed.load(Ordering::Relaxed),
            lost: c.lost.load(Ordering::Relaxed),
            woken: c.woken.load(Ordering::Relaxed),
        }
    }

    /// How much of `key` (a lock key, or a semaphore's permits) the leases `caller` took hold
    /// for as long as their guards keep them: renewed, under no maximum hold, and not over.
    /// Nothing but their guards frees those while `caller` waits.
    pub(crate) fn held_by(&self, caller: &Caller, key: &str) -> u32 {
        self.shared
            .registry()
            .entries
            .values()
            .map(|entry| &entry.lease)
            .filter(|lease| lease.acquirer.is(caller) && lease.renew)
            .filter(|lease| lease.state.lasts_until_given_back())
            .map(|lease| lease.kind.holds(key))
            .fold(0, u32::saturating_add)
    }

    /// Stops watching a lease (it is being released by its guard).
    pub(crate) fn untrack(&self, id: u64) {
        self.shared.registry().entries.remove(&id);
    }

    /// Releases a lease without waiting: for a guard dropped without `release`, or whose
    /// `release` could not reach Redis. Keeps trying through an outage for up to `ttl`, after
    /// which the lease has expired anyway.
    pub(crate) fn release_in_background(
        &self,
        id: u64,
        kind: Arc<dyn LeaseKind>,
        owner: OwnerToken,
        ttl: Duration,
    ) {
        self.untrack(id);
        self.clean_up(Job {
            kind,
            owner,
            how: CleanUp::Release,
            patience: ttl,
        });
    }

    /// Sets a lease given back before its minimum hold ended to expire at `until` (expiry
    /// changes of epoch `epoch` and newer), without waiting: for a dropped guard, or a
    /// release that could not reach Redis. Past `until` it releases the lease instead, and
    /// keeps trying for a `ttl` more, after which the lease has expired anyway.
    pub(crate) fn expire_in_background(
        &self,
        id: u64,
        kind: Arc<dyn LeaseKind>,
        owner: OwnerToken,
        (until, epoch): (Instant, u64),
        ttl: Duration,
    ) {
        self.untrack(id);
        self.clean_up(Job {
            kind,
            owner,
            how: CleanUp::ExpireAt { until, epoch },
            patience: until.saturating_duration_since(Instant::now()) + ttl,
        });
    }

    /// Abandons, without waiting, an acquire attempt whose outcome is unknown (it timed out,
    /// or its future was dropped mid-flight). The attempt may still reach Redis after an
    /// outage, so this keeps trying for `patience`.
    pub(crate) fn abandon_in_background(
        &self,
        kind: Arc<dyn LeaseKind>,
        owner: OwnerToken,
        patience: Duration,
    ) {
        self.clean_up(Job {
            kind,
            owner,
            how: CleanUp::Abandon,
            patience,
        });
    }

    /// Completes once every background clean-up handed over so far has finished (or given
    /// up): for short-lived processes that must not exit with a lock still held.
    pub(crate) async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(Command::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    fn clean_up(&self, job: Job) {
        // If the task is gone the runtime is shutting down; the lease then simply expires.
        let _ = self.commands.send(Command::CleanUp(job));
    }
}

struct Entry {
    lease: Tracked,
    renew_at: Instant,
    in_flight: bool,
}

/// A renewal batch in flight: which leases it renews with which request, and its parts
/// still to answer (`Backend::renew`), each settled as it does.
struct Batch {
    ids: Vec<(u64, ExpiryChange)>,
    parts: FuturesUnordered<RenewPart>,
}

/// The leases of one answered part, with their replies.
type RenewOutcome = (Vec<(u64, ExpiryChange)>, Result<Vec<Result<ExpiryReply>>>);

async fn run(
    backend: Backend,
    local: Arc<LocalWaiters>,
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut in_flight: Option<Batch> = None;
    let mut releases = FuturesUnordered::new();
    let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
    let mut closed = false;

    loop {
        let wake = {
            let mut registry = shared.registry();
            let now = Instant::now();
            registry.alarm = next_wake(&registry.entries, in_flight.is_some())
                .or_else(|| linger(registry.tracked_at, now));
            // A run owed since before now stays owed until the loop ticks; none is owed while
            // a round trip is in flight (invariant 7).
            let idle = in_flight.is_none();
            registry.in_flight = !idle;
            let owed = registry.due.filter(|owed| *owed <= now);
            let next = registry.alarm.map(|at| at.max(now));
            registry.due = owed.or(next).filter(|_| idle);
            registry.alarm
        };
        tokio::select! {
            biased;
            command = commands.recv(), if !closed => match command {
                Some(Command::CleanUp(job)) => {
                    releases.push(cleanup::run(backend.clone(), local.clone(), job));
                }
                Some(Command::Flush(done)) => flushes.push(done),
                None => closed = true,
            },
            part = next_part(&mut in_flight) => match part {
                Some(outcome) => apply(&mut shared.registry().entries, outcome, &shared.stats),
                None => in_flight = None,
            },
            _ = releases.next(), if !releases.is_empty() => {}
            _ = shared.changed.notified() => {}
            _ = sleep_until_opt(wake), if wake.is_some() => {
                let mut registry = shared.registry();
                let due = registry.due.take();
                expire(&mut registry.entries, due, &shared.stats);
                if in_flight.is_none() {
                    in_flight = start_batch(&backend, &mut registry.entries);
                    if in_flight.is_some() {
                        shared.stats.batches.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        if releases.is_empty() {
            for done in flushes.drain(..) {
                let _ = done.send(());
            }
        }
        if closed
            && shared.registry().entries.is_empty()
            && releases.is_empty()
            && in_flight.is_none()
        {
            break;
        }
    }
}

/// The loop's next tick while no lease is registered: soon after a lease was tracked within
/// `IDLE_LINGER`, never otherwise (invariant 4).
fn linger(tracked_at: Option<Instant>, now: Instant) -> Option<Instant> {
    tracked_at
        .filter(|at| now.saturating_duration_since(*at) < IDLE_LINGER)
        .map(|_| now + IDLE_TICK)
}

/// The next moment the loop has work: a renewal falls due or a deadline passes. While a batch
/// is in flight no other can start, so only deadlines count then (its reply wakes the loop).
fn next_wake(entries: &HashMap<u64, Entry>, batch_in_flight: bool) -> Option<Instant> {
    entries
        .values()
        .map(|e| {
            let deadline = e.lease.state.valid_until();
            if e.lease.renew && !e.in_flight && !batch_in_flight {
                deadline.min(e.renew_at)
            } else {
                deadline
            }
        })
        .min()
}

/// Declares lost every lease whose validity deadline has passed, the loop due to run since
/// `due` (invariant 7), and gives up every lease due for renewal whose holder went silent
/// (invariant 8).
fn expire(entries: &mut HashMap<u64, Entry>, due: Option<Instant>, stats: &Counters) {
    let now = Instant::now();
    entries.retain(|_, e| {
        let cause = if now >= e.lease.state.valid_until() {
            cause_at_deadline(due, e, now)
        } else if falls_due(e, now)
            && let Some(silent_for) = e.lease.state.silent_for(now)
        {
            // Not renewed, and not deleted: it runs out in Redis (invariant 8).
            LostCause::Silent { silent_for }
        } else {
            return true;
        };
        // A clone may have declared it first: its cause stands.
        let cause = e.lease.state.lose(cause).unwrap_or(cause);
        tracing::warn!(name = %e.lease.kind.name(), fencing_token = %e.lease.fencing_token,
            "fenced: lease lost: {cause}");
        stats.lost.fetch_add(1, Ordering::Relaxed);
        metrics::lease_lost(e.lease.kind.primitive());
        false
    });
}

/// Why `e`, past its deadline, is lost by `now` (invariant 7). [`LostCause::MaxHold`] when its
/// maximum hold ends it. [`LostCause::RenewalLate`] when the loop ran late: it owed a run
/// since `due`, so it would have sent the renewal by then or by `e.renew_at`, whichever is
/// later, at least a sixth of a ttl before the deadline. Never for a lease that is not
/// renewed, or whose renewal is in flight: [`LostCause::Expired`].
fn cause_at_deadline(due: Option<Instant>, e: &Entry, now: Instant) -> LostCause {
    let state = &e.lease.state;
    if state.ends_at_max_hold() {
        return LostCause::MaxHold;
    }
    let deadline = state.valid_until();
    if let Some(due) = due
        && e.lease.renew
        && !e.in_flight
    {
        let renew_by = due.max(e.renew_at);
        if renew_by + state.ttl() / 6 <= deadline && deadline <= now {
            return LostCause::RenewalLate {
                late_by: now - renew_by,
            };
        }
    }
    LostCause::Expired
}

/// Sends the renewal of every lease that is due (or nearly due): one pipeline per node, or
/// without scripts one transaction per dedicated connection (`Backend::renew`).
fn start_batch(backend: &Backend, entries: &mut HashMap<u64, Entry>) -> Option<Batch> {
    let (ids, batch, quorums) = take_due(entries, Instant::now(), |k| backend.quorum(k));
    if ids.is_empty() {
        return None;
    }
    tracing::trace!(leases = batch.len(), "fenced: renewing");
    let parts = backend.renew(batch, quorums).into_iter().collect();
    Some(Batch { ids, parts })
}

/// The next part of the batch in flight to answer, with its leases; `None` once every part
/// has. Pending while no batch is in flight.
async fn next_part(batch: &mut Option<Batch>) -> Option<RenewOutcome> {
    let Some(batch) = batch else {
        return std::future::pending().await;
    };
    let (range, replies) = batch.parts.next().await?;
    let ids = batch.ids.get(range).unwrap_or_default().to_vec();
    Some((ids, replies))
}

/// Marks in flight, and builds the requests of, every lease due by `now` (or nearly due:
/// renewing a little early lets leases that fall due close together share a round trip).
/// `quorum` gives a lease's quorum on a backend of several nodes (nothing on one server).
fn take_due(
    entries: &mut HashMap<u64, Entry>,
    now: Instant,
    quorum: impl Fn(&dyn LeaseKind) -> Option<usize>,
) -> (Vec<(u64, ExpiryChange)>, Vec<ScriptCall>, Vec<usize>) {
    let mut ids = Vec::new();
    let mut batch = Vec::new();
    let mut quorums = Vec::new();
    for (id, e) in entries.iter_mut() {
        // A silent holder's lease is never renewed: `expire` gives it up at the next tick.
        if falls_due(e, now) && e.lease.state.silent_for(now).is_none() {
            e.in_flight = true;
            let change = e.lease.state.begin(None);
            ids.push((*id, change));
            batch.push(
                e.lease
                    .kind
                    .extend(&e.lease.owner, change.server_ms, change.epoch),
            );
            if let Some(q) = quorum(&*e.lease.kind) {
                quorums.push(q);
            }
        }
    }
    (ids, batch, quorums)
}

/// Whether a lease is to be renewed by `now` (or nearly: renewing a little early lets leases
/// that fall due close together share a round trip).
fn falls_due(e: &Entry, now: Instant) -> bool {
    e.lease.renew && !e.in_flight && e.renew_at <= now + e.lease.state.ttl() / 6
}

/// Applies the replies of one renewal round trip.
fn apply(entries: &mut HashMap<u64, Entry>, (ids, result): RenewOutcome, stats: &Counters) {
    let now = Instant::now();
    let per_lease: Vec<Option<Result<ExpiryReply>>> = match result {
        Ok(replies) => replies.into_iter().map(Some).collect(),
        Err(e) => {
            tracing::warn!(error = %e, leases = ids.len(), "fenced: renewal round trip failed; retrying until the leases' deadlines");
            ids.iter().map(|_| None).collect()
        }
    };
    let (mut applied, mut failed) = (0, 0);
    for ((id, change), reply) in ids.into_iter().zip(per_lease) {
        // Released meanwhile: nothing to update.
        let Some(e) = entries.get_mut(&id) else {
            continue;
        };
        e.in_flight = false;
        match reply {
            Some(Ok(reply @ (ExpiryReply::Applied | ExpiryReply::Superseded))) => {
                if reply == ExpiryReply::Applied {
                    stats.renewed.fetch_add(1, Ordering::Relaxed);
                    applied += 1;
                }
                e.lease.state.settle(&change, reply);
                e.renew_at = e.lease.state.renew_at();
            }
            Some(Ok(ExpiryReply::NotHeld)) => {
                tracing::warn!(name = %e.lease.kind.name(), fencing_token = %e.lease.fencing_token,
                    "fenced: lease lost: {}", LostCause::Refused);
                e.lease.state.settle(&change, ExpiryReply::NotHeld);
                stats.lost.fetch_add(1, Ordering::Relaxed);
                metrics::lease_lost(e.lease.kind.primitive());
                failed += 1;
                entries.remove(&id);
            }
            Some(Err(err @ Error::Permission { .. })) => {
                // A configuration error: said every time, since it will end the lease.
                tracing::warn!(name = %e.lease.kind.name(), error = %err,
                    "fenced: renewal refused by the server's ACL; the lease will run out");
                e.renew_at = now + (change.ttl / 10).max(Duration::from_millis(5));
                failed += 1;
            }
            Some(Err(_)) | None => {
                // Outcome unknown: the request stays unsettled (its deadline counts if it could
                // shorten the lease). Try again soon; `expire` decides when to give up.
                e.renew_at = now + (change.ttl / 10).max(Duration::from_millis(5));
                failed += 1;
            }
        }
    }
    metrics::renewals(applied, failed);
}

#[cfg(test)]
mod tests {
    //! The loop's decisions under paused time, without a server: which leases a tick renews,
    //! when the loop wakes, and what a reply or a passed deadline does to a lease.

    use std::sync::Arc;

    use super::*;
    use crate::core::lease::Holds;
    use crate::keys::LockKeys;
    use crate::kind::exclusive::Exclusive;

    fn lease(name: &str, ttl_ms: u64, renew: bool) -> Entry {
        lease_on(name, ttl_ms, renew, &Holds::default())
    }

    fn lease_on(name: &str, ttl_ms: u64, renew: bool, holds: &Holds) -> Entry {
        let state =
            Arc::new(LeaseState::new(Instant::now(), Duration::from_millis(ttl_ms)).held_on(holds));
        let renew_at = state.renew_at();
        Entry {
            lease: Tracked {
                kind: Arc::new(Exclusive {
                    name: name.into(),
                    keys: Arc::new(LockKeys::new("t:", name)),
                    fence_retention_ms: 1_000,
                    counted: true,
                }),
                owner: OwnerToken::generate().expect("OS random source"),
                fencing_token: FencingToken::new(1),
                renew,
                state,
                acquirer: Caller(Waker::noop().clone()),
            },
            renew_at,
            in_flight: false,
        }
    }

    fn registry(leases: Vec<Entry>) -> HashMap<u64, Entry> {
        leases
            .into_iter()
            .enumerate()
            .map(|(i, e)| (i as u64, e))
            .collect()
    }

    fn ids(due: &[(u64, ExpiryChange)]) -> Vec<u64> {
        let mut ids: Vec<u64> = due.iter().map(|(id, _)| *id).collect();
        ids.sort();
        ids
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_loop_ticks_for_a_second_after_the_last_lease_then_sleeps_until_told() {
        let now = Instant::now();
        assert_eq!(linger(None, now), None, "never a lease: sleep until told");
        assert_eq!(linger(Some(now), now), Some(now + IDLE_TICK));
        let later = now + IDLE_LINGER - Duration::from_millis(1);
        assert_eq!(linger(Some(now), later), Some(later + IDLE_TICK));
        assert_eq!(linger(Some(now), now + IDLE_LINGER), None);
        // A lease of the shortest ttl falls due after a tick from its grant.
        let shortest = LeaseState::new(now, crate::options::MIN_TTL);
        assert!(shortest.renew_at().min(shortest.valid_until()) > now + IDLE_TICK);
    }

    #[tokio::test(start_paused = true)]
    async fn a_tick_renews_what_is_due_and_what_falls_due_soon_in_one_batch() {
        // ttl 3s: renew at 1s (deadline minus two thirds, less drift). ttl 3.3s: renew at
        // 1.1s, within a sixth of its ttl of the first, so it rides along. ttl 30s: not yet.
        let mut entries = registry(vec![
            lease("a", 3_000, true),
            lease("b", 3_300, true),
            lease("c", 30_000, true),
            lease("d", 3_000, false),
        ]);
        assert_eq!(
            next_wake(&entries, false),
            entries.get(&0).map(|e| e.renew_at)
        );
        tokio::time::advance(Duration::from_millis(1_000)).await;
        let (due, calls, _) = take_due(&mut entries, Instant::now(), |_| None);
        assert_eq!(
            ids(&due),
            vec![0, 1],
            "a is due, b nearly; c is not, d never renews"
        );
        assert_eq!(calls.len(), 2);
        // While they are in flight, only deadlines wake the loop.
        let wake = next_wake(&entries, true);
        assert_eq!(
            wake,
            entries.values().map(|e| e.lease.state.valid_until()).min()
        );
        // A confirmed renewal moves the next renewal a third of the ttl on.
        let stats = Counters::default();
        let replies = due.iter().map(|_| Ok(ExpiryReply::Applied)).collect();
        apply(&mut entries, (due, Ok(replies)), &stats);
        let a = &entries[&0];
        assert!(!a.in_flight);
        assert_eq!(
            a.renew_at,
            Instant::now() + Duration::from_millis(1_000)
                - crate::options::drift_allowance(Duration::from_millis(3_000))
        );
        assert_eq!(stats.renewed.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn each_part_of_a_batch_settles_its_leases_as_it_answers() {
        let mut entries = registry(vec![lease("a", 3_000, true), lease("b", 3_000, true)]);
        tokio::time::advance(Duration::from_millis(1_000)).await;
        let (mut due, _, _) = take_due(&mut entries, Instant::now(), |_| None);
        due.sort_by_key(|(id, _)| *id);
        let (answer_b, b_answered) = oneshot::channel::<()>();
        let parts: FuturesUnordered<RenewPart> = FuturesUnordered::new();
        parts.push(Box::pin(async {
            (0..1, Ok(vec![Ok(ExpiryReply::Applied)]))
        }));
        parts.push(Box::pin(async move {
            let _ = b_answered.await;
            (1..2, Ok(vec![Ok(ExpiryReply::Applied)]))
        }));
        let mut batch = Some(Batch { ids: due, parts });
        let stats = Counters::default();
        let first = next_part(&mut batch).await.expect("a's part");
        apply(&mut entries, first, &stats);
        assert!(!entries[&0].in_flight, "a is settled while b's part is out");
        assert!(entries[&0].renew_at > Instant::now());
        assert!(entries[&1].in_flight);
        let _ = answer_b.send(());
        let second = next_part(&mut batch).await.expect("b's part");
        apply(&mut entries, second, &stats);
        assert!(!entries[&1].in_flight);
        assert_eq!(stats.renewed.load(Ordering::Relaxed), 2);
        assert!(next_part(&mut batch).await.is_none(), "every part answered");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refused_renewal_loses_the_lease_and_a_failed_one_retries_until_the_deadline() {
        let mut entries = registry(vec![lease("a", 3_000, true), lease("b", 3_000, true)]);
        let stats = Counters::default();
        tokio::time::advance(Duration::from_millis(1_000)).await;
        let (due, _, _) = take_due(&mut entries, Instant::now(), |_| None);
        let a = entries[&0].lease.state.clone();
        let lost_a = a.lost.clone();
        let timeout = crate::error::Error::Timeout {
            operation: "renew",
            after: Duration::from_millis(1),
        };
        let replies = vec![Ok(ExpiryReply::NotHeld), Err(timeout)];
        let mut ordered = due;
        ordered.sort_by_key(|(id, _)| *id);
        apply(&mut entries, (ordered, Ok(replies)), &stats);
        assert!(lost_a.is_cancelled(), "refused: lost at once");
        assert_eq!(a.lost_cause(), Some(LostCause::Refused));
        assert!(!entries.contains_key(&0));
        // b's outcome is unknown: retried soon, and lost only when its deadline passes.
        let b = &entries[&1];
        assert_eq!(b.renew_at, Instant::now() + Duration::from_millis(300));
        let lost_b = b.lease.state.lost.clone();
        let state_b = b.lease.state.clone();
        let deadline = b.lease.state.valid_until();
        tokio::time::advance(deadline - Instant::now() - Duration::from_millis(1)).await;
        expire(&mut entries, None, &stats);
        assert!(!lost_b.is_cancelled());
        tokio::time::advance(Duration::from_millis(1)).await;
        expire(&mut entries, None, &stats);
        assert!(
            lost_b.is_cancelled(),
            "past its deadline without a renewal: lost"
        );
        assert_eq!(state_b.lost_cause(), Some(LostCause::Expired));
        assert_eq!(stats.lost.load(Ordering::Relaxed), 2);
    }

    const MS: Duration = Duration::from_millis(1);

    /// The cause `expire` names for a lease of a 300ms ttl (renewal due at 95ms, deadline at
    /// 295ms) when the loop runs `at` after the grant, having owed a run since `due`, with the
    /// renewal due at `renew_at` instead of 95ms if given. Times from the grant.
    async fn cause_of_loss(
        due: Option<Duration>,
        renew_at: Option<Duration>,
        at: Duration,
    ) -> Option<LostCause> {
        let granted = Instant::now();
        let mut entries = registry(vec![lease("a", 300, true)]);
        let state = entries[&0].lease.state.clone();
        assert_eq!(entries[&0].renew_at, granted + 95 * MS);
        assert_eq!(state.valid_until(), granted + 295 * MS);
        if let Some(r) = renew_at {
            entries.get_mut(&0).expect("tracked").renew_at = granted + r;
        }
        tokio::time::advance(at).await;
        expire(&mut entries, due.map(|d| granted + d), &Counters::default());
        assert!(state.lost.is_cancelled());
        state.lost_cause()
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_lost_while_the_loop_could_not_run_names_the_late_renewal() {
        // Due to run at the grant (told of the new lease), kept from it until 900ms: the
        // renewal due at 95ms ran 805ms late.
        assert_eq!(
            cause_of_loss(Some(Duration::ZERO), None, 900 * MS).await,
            Some(LostCause::RenewalLate { late_by: 805 * MS })
        );
        // Its alarm set for the renewal, the same.
        assert_eq!(
            cause_of_loss(Some(95 * MS), None, 900 * MS).await,
            Some(LostCause::RenewalLate { late_by: 805 * MS })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_loss_the_loop_could_not_have_prevented_is_not_called_late() {
        // A round trip in flight: the loop waits on Redis, and owes no run.
        assert_eq!(
            cause_of_loss(None, None, 900 * MS).await,
            Some(LostCause::Expired)
        );
        // On time at its alarm, the deadline: the retry after a failed renewal fell after it.
        assert_eq!(
            cause_of_loss(Some(295 * MS), Some(320 * MS), 295 * MS).await,
            Some(LostCause::Expired)
        );
        // A retry due too close to the deadline to be confirmed in time.
        assert_eq!(
            cause_of_loss(Some(Duration::ZERO), Some(280 * MS), 900 * MS).await,
            Some(LostCause::Expired)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_clone_that_finds_the_deadline_passed_first_names_the_late_renewal_too() {
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry::default()),
            changed: Notify::new(),
            stats: Counters::default(),
        });
        let entry = lease("a", 300, true);
        let (state, renew_at) = (entry.lease.state.clone(), entry.renew_at);
        state.watched_by(Watch {
            shared: Arc::downgrade(&shared),
            id: 0,
        });
        {
            let mut registry = shared.registry();
            registry.entries.insert(0, entry);
            registry.woken(Instant::now()); // as `track` does for a lease due before the alarm
        }
        tokio::time::advance(900 * MS).await;
        let late = Some(LostCause::RenewalLate {
            late_by: Instant::now() - renew_at,
        });
        assert_eq!(state.lost_cause(), late, "declared by the clone");
        assert!(state.lost.is_cancelled());
        // The loop, running at last, keeps that cause.
        tokio::time::advance(MS).await;
        let due = shared.registry().due.take();
        expire(&mut shared.registry().entries, due, &shared.stats);
        assert_eq!(state.lost_cause(), late);
        assert_eq!(shared.stats.lost.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_holder_that_stopped_beating_is_given_up_when_its_renewal_falls_due() {
        let holds = Holds {
            silence: Some(Duration::from_millis(1_500)),
            ..Holds::default()
        };
        let mut entries = registry(vec![
            lease_on("a", 3_000, true, &holds),
            lease_on("b", 3_000, true, &holds),
        ]);
        let a = entries[&0].lease.state.clone();
        let stats = Counters::default();
        // The first renewal (about 1s): both within their silence, the grant counting as a
        // beat. Only b beats from then on.
        tokio::time::advance(Duration::from_millis(1_000)).await;
        entries[&1].lease.state.beat_at(Instant::now());
        expire(&mut entries, None, &stats);
        let (due, _, _) = take_due(&mut entries, Instant::now(), |_| None);
        assert_eq!(ids(&due), vec![0, 1]);
        let replies = due.iter().map(|_| Ok(ExpiryReply::Applied)).collect();
        apply(&mut entries, (due, Ok(replies)), &stats);
        // The next (about 2s): a has been silent for longer than 1.5s, and is given up
        // rather than renewed; b beat a second ago, and is renewed.
        let next = entries[&0].renew_at;
        tokio::time::advance(next - Instant::now()).await;
        expire(&mut entries, None, &stats);
        assert!(a.lost.is_cancelled(), "silent: given up");
        assert!(
            matches!(a.lost_cause(), Some(LostCause::Silent { silent_for }) if silent_for > Duration::from_millis(1_500)),
            "{:?}",
            a.lost_cause()
        );
        assert!(!entries.contains_key(&0));
        let (due, _, _) = take_due(&mut entries, Instant::now(), |_| None);
        assert_eq!(ids(&due), vec![1]);
        assert_eq!(stats.lost.load(Ordering::Relaxed), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_its_maximum_hold_ended_names_it_even_when_the_loop_ran_late() {
        let holds = Holds {
            max: Some(200 * MS),
            ..Holds::default()
        };
        let granted = Instant::now();
        let mut entries = registry(vec![lease_on("a", 300, true, &holds)]);
        let state = entries[&0].lease.state.clone();
        assert_eq!(state.valid_until(), granted + 200 * MS);
        // Owed a run since the grant, kept from it until well past the deadline: the hold's
        // end, not the late loop, ended the lease.
        tokio::time::advance(900 * MS).await;
        expire(&mut entries, Some(granted), &Counters::default());
        assert!(state.lost.is_cancelled());
        assert_eq!(state.lost_cause(), Some(LostCause::MaxHold));
    }
}

//! The renewal loop: ONE task per client keeps every held lease alive, and tells a holder the
//! moment its lease is gone.
//!
//! Invariants:
//! 1. All leases due for renewal are renewed together, in one pipelined round trip per tick
//!    (one `extend` script per lease), at about a third of each lease's ttl.
//! 2. A lease's validity deadline is measured on the monotonic clock from BEFORE the request
//!    that granted or renewed it was sent, minus the drift allowance; the server's own expiry
//!    can only come later. Renewals and `extend`s are ordered by epoch (`lease.rs`), so a
//!    reply that arrives late never makes the deadline claim more than Redis applied.
//! 3. A lease is declared lost (its `CancellationToken` cancelled) when a renewal is refused
//!    (the key is gone or belongs to somebody else), or when its validity deadline passes
//!    without a successful renewal, even while Redis does not answer at all. Transport errors
//!    alone do not declare it lost: the loop retries until the deadline.
//! 4. At most one renewal round trip is in flight; the deadline timer keeps running meanwhile.
//!    Guards add and remove leases in a shared registry; the loop is woken only when a new
//!    lease falls due before its current alarm, not on every acquire and release.
//! 5. Guards dropped without `release` hand their lease to this task, which releases it in the
//!    background, so `Drop` never blocks. Acquire attempts of unknown outcome (timed out or
//!    cancelled mid-flight) are abandoned here too: released if they took the lease, voided
//!    by a tombstone if they are still on their way.
//! 6. The task ends when the client and every guard are gone and pending releases are done.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::time::Instant;

use crate::error::Result;
use crate::keys::LockKeys;
use crate::lease::{ExpiryChange, ExpiryReply, LeaseState};
use crate::notify::LocalWaiters;
use crate::options::ttl_millis;
use crate::protocol::{Protocol, ReleaseReply, RenewItem};
use crate::token::{FencingToken, OwnerToken};

/// A lease handed to the loop.
pub(crate) struct Tracked {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: OwnerToken,
    pub(crate) fencing_token: FencingToken,
    pub(crate) renew: bool,
    pub(crate) state: Arc<LeaseState>,
}

enum Command {
    /// Answer once no clean-up is pending.
    Flush(oneshot::Sender<()>),
    CleanUp {
        keys: Arc<LockKeys>,
        owner: OwnerToken,
        how: CleanUp,
        patience: Duration,
    },
}

/// What to do with a lease nobody waits for any more.
#[derive(Clone, Copy)]
enum CleanUp {
    /// A guard was dropped: release its lease.
    Release,
    /// An acquire attempt of unknown outcome: release it if it took the lease, void it if not.
    Abandon,
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
}

#[derive(Default)]
struct Registry {
    entries: HashMap<u64, Entry>,
    /// When the loop will next wake by itself (`None`: it sleeps until told).
    alarm: Option<Instant>,
}

impl Shared {
    fn registry(&self) -> MutexGuard<'_, Registry> {
        // Every change is a single insert, remove or field update: a poisoned lock still
        // guards a consistent map.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The client's handle on its renewal task.
pub(crate) struct Renewer {
    shared: Arc<Shared>,
    commands: mpsc::UnboundedSender<Command>,
    next_id: AtomicU64,
}

impl Renewer {
    pub(crate) fn start(protocol: Protocol, local: Arc<LocalWaiters>) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            registry: Mutex::new(Registry::default()),
            changed: Notify::new(),
            stats: Counters::default(),
        });
        tokio::spawn(run(protocol, local, shared.clone(), rx));
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
            lease.state.lost.cancel();
            return id;
        }
        let renew_at = lease.state.renew_at();
        let deadline = lease.state.valid_until();
        let due = if lease.renew {
            renew_at.min(deadline)
        } else {
            deadline
        };
        let wake = {
            let mut registry = self.shared.registry();
            registry.entries.insert(
                id,
                Entry {
                    lease,
                    renew_at,
                    in_flight: false,
                },
            );
            registry.alarm.is_none_or(|alarm| due < alarm)
        };
        if wake {
            self.shared.changed.notify_one();
        }
        id
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
            registry.alarm.is_none_or(|alarm| renew_at < alarm)
        };
        if wake {
            self.shared.changed.notify_one();
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
        }
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
        keys: Arc<LockKeys>,
        owner: OwnerToken,
        ttl: Duration,
    ) {
        self.untrack(id);
        self.clean_up(keys, owner, CleanUp::Release, ttl);
    }

    /// Abandons, without waiting, an acquire attempt whose outcome is unknown (it timed out,
    /// or its future was dropped mid-flight). The attempt may still reach Redis after an
    /// outage, so this keeps trying for `patience`.
    pub(crate) fn abandon_in_background(
        &self,
        keys: Arc<LockKeys>,
        owner: OwnerToken,
        patience: Duration,
    ) {
        self.clean_up(keys, owner, CleanUp::Abandon, patience);
    }

    /// Completes once every background clean-up handed over so far has finished (or given
    /// up): for short-lived processes that must not exit with a lock still held.
    pub(crate) async fn flush(&self) {
        let (done, wait) = oneshot::channel();
        if self.commands.send(Command::Flush(done)).is_ok() {
            let _ = wait.await;
        }
    }

    fn clean_up(&self, keys: Arc<LockKeys>, owner: OwnerToken, how: CleanUp, patience: Duration) {
        // If the task is gone the runtime is shutting down; the lease then simply expires.
        let _ = self.commands.send(Command::CleanUp {
            keys,
            owner,
            how,
            patience,
        });
    }
}

struct Entry {
    lease: Tracked,
    renew_at: Instant,
    in_flight: bool,
}

/// Which leases a batch renewed with which request, and the replies.
type RenewOutcome = (Vec<(u64, ExpiryChange)>, Result<Vec<Result<ExpiryReply>>>);

async fn run(
    protocol: Protocol,
    local: Arc<LocalWaiters>,
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut in_flight: Option<BoxFuture<'static, RenewOutcome>> = None;
    let mut releases = FuturesUnordered::new();
    let mut flushes: Vec<oneshot::Sender<()>> = Vec::new();
    let mut closed = false;

    loop {
        let wake = {
            let mut registry = shared.registry();
            registry.alarm = next_wake(&registry.entries, in_flight.is_some());
            registry.alarm
        };
        tokio::select! {
            biased;
            command = commands.recv(), if !closed => match command {
                Some(Command::CleanUp { keys, owner, how, patience }) => {
                    releases.push(clean_up(protocol.clone(), local.clone(), keys, owner, how, patience));
                }
                Some(Command::Flush(done)) => flushes.push(done),
                None => closed = true,
            },
            outcome = poll_opt(&mut in_flight) => {
                in_flight = None;
                apply(&mut shared.registry().entries, outcome, &shared.stats);
            }
            _ = releases.next(), if !releases.is_empty() => {}
            _ = shared.changed.notified() => {}
            _ = sleep_until_opt(wake), if wake.is_some() => {
                let mut registry = shared.registry();
                expire(&mut registry.entries, &shared.stats);
                if in_flight.is_none() {
                    in_flight = start_batch(&protocol, &mut registry.entries);
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

/// Declares lost every lease whose validity deadline has passed.
fn expire(entries: &mut HashMap<u64, Entry>, stats: &Counters) {
    let now = Instant::now();
    entries.retain(|_, e| {
        if now < e.lease.state.valid_until() {
            return true;
        }
        tracing::warn!(lock = %e.lease.name, fencing_token = %e.lease.fencing_token,
            "fenced: lease lost: its validity deadline passed without a successful renewal");
        e.lease.state.lost.cancel();
        stats.lost.fetch_add(1, Ordering::Relaxed);
        false
    });
}

/// Sends one pipelined renewal for every lease that is due (or nearly due).
fn start_batch(
    protocol: &Protocol,
    entries: &mut HashMap<u64, Entry>,
) -> Option<BoxFuture<'static, RenewOutcome>> {
    let now = Instant::now();
    let mut ids = Vec::new();
    let mut batch = Vec::new();
    for (id, e) in entries.iter_mut() {
        // Renewing a little early lets leases that fall due close together share a round trip.
        let ttl = e.lease.state.ttl();
        if e.lease.renew && !e.in_flight && e.renew_at <= now + ttl / 6 {
            e.in_flight = true;
            let change = e.lease.state.begin(None);
            ids.push((*id, change));
            batch.push((e.lease.keys.clone(), e.lease.owner.clone(), change));
        }
    }
    if ids.is_empty() {
        return None;
    }
    let protocol = protocol.clone();
    Some(
        async move {
            let items: Vec<RenewItem<'_>> = batch
                .iter()
                .map(|(keys, owner, change)| RenewItem {
                    keys,
                    owner,
                    ttl_ms: ttl_millis(change.ttl),
                    epoch: change.epoch,
                })
                .collect();
            tracing::trace!(leases = items.len(), "fenced: renewing");
            let result = protocol.extend_many(&items).await;
            (ids, result)
        }
        .boxed(),
    )
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
                }
                e.lease.state.settle(&change, reply);
                e.renew_at = e.lease.state.renew_at();
            }
            Some(Ok(ExpiryReply::NotHeld)) => {
                tracing::warn!(lock = %e.lease.name, fencing_token = %e.lease.fencing_token,
                    "fenced: lease lost: renewal refused (the key expired, was deleted, or belongs to another holder)");
                e.lease.state.settle(&change, ExpiryReply::NotHeld);
                stats.lost.fetch_add(1, Ordering::Relaxed);
                entries.remove(&id);
            }
            Some(Err(_)) | None => {
                // Outcome unknown: the request stays unsettled (its deadline counts if it could
                // shorten the lease). Try again soon; `expire` decides when to give up.
                e.renew_at = now + (change.ttl / 10).max(Duration::from_millis(5));
            }
        }
    }
}

async fn clean_up(
    protocol: Protocol,
    local: Arc<LocalWaiters>,
    keys: Arc<LockKeys>,
    owner: OwnerToken,
    how: CleanUp,
    patience: Duration,
) {
    let give_up_at = Instant::now() + patience;
    let freed = match how {
        CleanUp::Release => retry_transient(give_up_at, || protocol.release(&keys, &owner))
            .await
            .map(|reply| reply != ReleaseReply::NotHeld),
        CleanUp::Abandon => {
            retry_transient(give_up_at, || protocol.abandon(&keys, &owner, patience)).await
        }
    };
    if wakes_local_waiters(&freed) {
        local.released(&keys.channel);
    }
    if let Err(e) = freed {
        tracing::debug!(error = %e, "fenced: background clean-up failed; the lease will expire by its ttl");
    }
}

/// Whether a background clean-up's outcome wakes this process's waiters. A failed one does
/// too: its first attempt may have freed the lease although every retry errored, and a wake is
/// only a hint (the woken head retries, and finds the lock held if it still is).
fn wakes_local_waiters(freed: &Result<bool>) -> bool {
    !matches!(freed, Ok(false))
}

/// Releases, retrying transient failures a few times. A retry whose first attempt did take
/// effect is answered `AlreadyReleased` by the script, never a false "not held".
pub(crate) async fn release_with_retry(
    protocol: &Protocol,
    keys: &LockKeys,
    owner: &OwnerToken,
) -> Result<ReleaseReply> {
    // A short burst: the caller is waiting. What is left after it goes to the background.
    let give_up_at = Instant::now() + protocol.timeout() * 2;
    retry_transient(give_up_at, || protocol.release(keys, owner)).await
}

/// Runs an idempotent call again, with backoff, while it fails with a transient error and
/// `give_up_at` has not passed.
async fn retry_transient<T, F, Fut>(give_up_at: Instant, mut call: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let mut pause = Duration::from_millis(10);
    loop {
        match call().await {
            Err(e) if e.is_transient() && Instant::now() + pause < give_up_at => {
                tracing::debug!(error = %e, "fenced: call failed; retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            other => return other,
        }
    }
}

async fn poll_opt<T>(fut: &mut Option<BoxFuture<'static, T>>) -> T {
    match fut {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn a_clean_up_that_failed_still_wakes_local_waiters() {
        // Its first attempt may have freed the lease although its reply and every retry were
        // lost: a waiter that is not woken would sleep until its next poll.
        let timeout = Error::Timeout {
            operation: "release",
            after: Duration::from_millis(1),
        };
        assert!(wakes_local_waiters(&Err(timeout)));
        assert!(wakes_local_waiters(&Ok(true)));
        assert!(!wakes_local_waiters(&Ok(false)));
    }
}

//! Giving leases back in the background: guards dropped without `release`, releases that
//! could not reach Redis, and acquire attempts whose outcome is unknown. The renewal task runs
//! these futures, so `Drop` never blocks and a short-lived process can `flush` them.
//!
//! Invariants:
//! 1. A clean-up retries transient failures until its patience runs out: a release for up to
//!    the lease's ttl (after which it has expired anyway), an abandon for as long as the
//!    attempt could still reach Redis.
//! 2. Every retried step is exact. An abandon leaves a tombstone the late attempt refuses
//!    itself on. A release keeps no record in Redis: a retry that finds the lease gone, with
//!    its reply back before the lease's validity deadline, can only have found it freed by an
//!    earlier attempt of the same release, since the key could not have expired yet (the
//!    deadline never claims more than Redis granted, `lease.rs` invariant 1). After the
//!    deadline the retry cannot tell, and says "not held": the lease was not proven ours to the
//!    end. A lease already known lost (a renewal found it gone) gets no such reading. What a
//!    retry cannot see is a key removed by someone else while the lease was still valid (an
//!    operator's `force_release`, eviction under a `volatile-*` policy, a failover to a replica
//!    that missed the acquire): that is read as "released".
//! 3. A clean-up that may have freed the lease wakes this process's waiters; a failed one too,
//!    because a wake is only a hint.
//! 4. A minimum hold ends at one moment, measured from the grant on the monotonic clock,
//!    whatever retries happen. Each attempt asks for what is left of the hold when it is sent,
//!    in an epoch newer than every earlier attempt's, so an earlier attempt that reaches Redis
//!    late is refused (`extend.lua`) and cannot push the end back. Once the moment has passed
//!    the lease is released instead. A shortfall of replica acknowledgements means the master
//!    applied the change: it is not sent again.
//! 5. On Redlock, a release voids the lease's grant where it found nothing (`abandon`'s
//!    tombstone), and so does the expiry change that ends a minimum hold: the grant was handed
//!    out once a majority granted, and its attempt on a slower master may run there after
//!    either, where it would hold the name for a ttl.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use std::sync::atomic::{AtomicU32, Ordering};

use crate::backend::Backend;
use crate::core::notify::LocalWaiters;
use crate::error::{Error, Result};
use crate::kind::{LeaseKind, ReleaseReply};
use crate::options::ttl_millis;
use crate::token::OwnerToken;
use crate::util::{Backoff, retry_transient};

/// What to do with a lease nobody waits for any more.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CleanUp {
    /// A guard was dropped: release its lease.
    Release,
    /// An acquire attempt of unknown outcome: release it if it took the lease, void it if not.
    Abandon,
    /// A guard given back before its minimum hold ended: set the lease to expire at `until`
    /// (expiry changes of epoch `epoch` and newer, invariant 4), deleting nothing and waking
    /// nobody; or release it, once `until` has passed.
    ExpireAt { until: Instant, epoch: u64 },
}

/// One clean-up, as handed to the renewal task.
pub(crate) struct Job {
    pub(crate) kind: Arc<dyn LeaseKind>,
    pub(crate) owner: OwnerToken,
    pub(crate) how: CleanUp,
    pub(crate) patience: Duration,
}

/// Runs one clean-up to its end.
pub(crate) async fn run(backend: Backend, local: Arc<LocalWaiters>, job: Job) {
    let Job {
        kind,
        owner,
        how,
        patience,
    } = job;
    let give_up_at = Instant::now() + patience;
    let message = local.announcement(&*kind);
    // Nobody hears a background release's outcome but the local waiters, and for a wake (a
    // hint) a retry that finds the lease gone counts as freed: its first attempt may have
    // been the one.
    let release = || async {
        release_until(
            &backend,
            &*kind,
            (&owner, &message),
            give_up_at,
            None,
            false,
            patience,
        )
        .await
        .map(ReleaseReply::freed)
    };
    let freed = match how {
        CleanUp::Release => release().await,
        CleanUp::ExpireAt { until, epoch } => {
            match expire_at(&backend, &*kind, &owner, until, epoch, give_up_at).await {
                Ok(true) => Ok(false),
                // The hold is over: released as a dropped guard's lease is.
                Ok(false) => release().await,
                Err(e) => Err(e),
            }
        }
        CleanUp::Abandon => {
            retry_transient(give_up_at, || async {
                backend
                    .abandon(&kind.abandon(&owner, &message, ttl_millis(patience)))
                    .await
            })
            .await
        }
    };
    if wakes_local_waiters(&freed) {
        for channel in kind.channels() {
            local.released(channel, kind.wakes());
        }
    }
    if let Err(e) = freed {
        tracing::debug!(name = %kind.name(), error = %e, "fenced: background clean-up failed; the lease will expire by its ttl");
    }
}

/// Sets a lease to expire at `until` (invariant 4): `Ok(true)` once Redis applied it (or
/// found the lease gone), `Ok(false)` when `until` passed first.
async fn expire_at(
    backend: &Backend,
    kind: &dyn LeaseKind,
    owner: &OwnerToken,
    until: Instant,
    first_epoch: u64,
    give_up_at: Instant,
) -> Result<bool> {
    let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
    for epoch in first_epoch.. {
        let Some(left) = until.checked_duration_since(Instant::now()) else {
            return Ok(false);
        };
        let call = kind.extend(owner, ttl_millis(left).max(1), epoch);
        let patience = ttl_millis(give_up_at.saturating_duration_since(Instant::now()));
        let patience = patience.max(ttl_millis(backend.timeout() * 10));
        let void = || kind.abandon(owner, "", patience);
        match backend.expire(&call, kind, &void).await {
            Ok(_) | Err(Error::NotReplicated { .. }) => return Ok(true),
            Err(e) if e.is_transient() => {
                let pause = backoff.next_wait();
                if Instant::now() + pause >= give_up_at {
                    return Err(e);
                }
                tokio::time::sleep(pause.min(left)).await;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// Whether a background clean-up's outcome wakes this process's waiters. A failed one does
/// too: its first attempt may have freed the lease although every retry errored, and a wake is
/// only a hint (the woken head retries, and finds the lease held if it still is).
fn wakes_local_waiters(freed: &Result<bool>) -> bool {
    !matches!(freed, Ok(false))
}

/// Releases, retrying transient failures for a short burst (the caller is waiting; what is
/// left after it goes to the background). `valid_until` is the lease's validity deadline as it
/// was before the release began: a retry answered "not held" before it is "already released"
/// (invariant 2), never a false "not held". `after_unknown`: a step that may have freed the
/// lease already ran (a handover of unknown outcome), so even the first attempt is a retry.
/// `ttl`: the lease's, at least how long a late attempt of its grant is voided (invariant 5).
pub(crate) async fn release_with_retry(
    (backend, timeout): (&Backend, Duration),
    kind: &dyn LeaseKind,
    (owner, message): (&OwnerToken, &str),
    valid_until: Instant,
    after_unknown: bool,
    ttl: Duration,
) -> Result<ReleaseReply> {
    let give_up_at = Instant::now() + timeout * 2;
    release_until(
        backend,
        kind,
        (owner, message),
        give_up_at,
        Some(valid_until),
        after_unknown,
        ttl,
    )
    .await
}

/// Releases until it answers or `give_up_at`, and reads a retry's "not held" by invariant 2;
/// with no deadline known, such a retry counts as "already released". A late attempt of the
/// lease's grant is voided where the release found nothing (invariant 5) for as long as an
/// abandoned attempt is: `patience`, at least ten timeouts.
async fn release_until(
    backend: &Backend,
    kind: &dyn LeaseKind,
    (owner, message): (&OwnerToken, &str),
    give_up_at: Instant,
    valid_until: Option<Instant>,
    after_unknown: bool,
    patience: Duration,
) -> Result<ReleaseReply> {
    let call = kind.release(owner, message);
    let announce = (kind.channels().first().map_or("", String::as_str), message);
    let patience = ttl_millis(patience.max(backend.timeout() * 10));
    let void = || kind.abandon(owner, message, patience);
    let attempts = AtomicU32::new(u32::from(after_unknown));
    retry_transient(give_up_at, || async {
        let retry = attempts.fetch_add(1, Ordering::Relaxed) > 0;
        let reply = backend.release(&call, announce, kind, &void).await?;
        let answered = Instant::now();
        Ok(read_release(
            reply,
            retry,
            valid_until.is_none_or(|v| answered < v),
        ))
    })
    .await
}

/// A release's reply, read by invariant 2: `retry` when an earlier attempt of the same release
/// may have run (its reply was lost), `in_validity` when this reply came back before the
/// lease's validity deadline.
fn read_release(reply: ReleaseReply, retry: bool, in_validity: bool) -> ReleaseReply {
    match reply {
        ReleaseReply::NotHeld if retry && in_validity => ReleaseReply::AlreadyReleased,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retry_that_finds_the_lease_gone_is_a_release_only_within_the_validity() {
        use ReleaseReply::*;
        // The first attempt: its own reply, as it is.
        assert_eq!(read_release(NotHeld, false, true), NotHeld);
        assert_eq!(read_release(Released, false, true), Released);
        // A retry, while the key could not have expired: only the first attempt freed it.
        assert_eq!(read_release(NotHeld, true, true), AlreadyReleased);
        // A retry after the deadline: it may have expired first; not proven ours to the end.
        assert_eq!(read_release(NotHeld, true, false), NotHeld);
        // A retry that found the lease still held released it itself, whatever the clock.
        assert_eq!(read_release(Released, true, false), Released);
        assert_eq!(read_release(Retained, true, true), Retained);
    }

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

//! Giving leases back in the background: guards dropped without `release`, releases that
//! could not reach Redis, and acquire attempts whose outcome is unknown. The renewal task runs
//! these futures, so `Drop` never blocks and a short-lived process can `flush` them.
//!
//! Invariants:
//! 1. A clean-up retries transient failures until its patience runs out: a release for up to
//!    the lease's ttl (after which it has expired anyway), an abandon for as long as the
//!    attempt could still reach Redis.
//! 2. Every retried step is exact: a release recognises its own earlier effect (its record),
//!    and an abandon leaves a tombstone the late attempt refuses itself on.
//! 3. A clean-up that may have freed the lease wakes this process's waiters; a failed one too,
//!    because a wake is only a hint.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::core::Core;
use crate::core::notify::LocalWaiters;
use crate::error::Result;
use crate::kind::{LeaseKind, ReleaseReply, abandon_reply, release_reply};
use crate::options::ttl_millis;
use crate::token::OwnerToken;
use crate::util::retry_transient;

/// What to do with a lease nobody waits for any more.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CleanUp {
    /// A guard was dropped: release its lease.
    Release,
    /// An acquire attempt of unknown outcome: release it if it took the lease, void it if not.
    Abandon,
}

/// One clean-up, as handed to the renewal task.
pub(crate) struct Job {
    pub(crate) kind: Arc<dyn LeaseKind>,
    pub(crate) owner: OwnerToken,
    pub(crate) how: CleanUp,
    pub(crate) patience: Duration,
}

/// Runs one clean-up to its end.
pub(crate) async fn run(backend: Backend, local: Arc<LocalWaiters>, record_ms: u64, job: Job) {
    let Job {
        kind,
        owner,
        how,
        patience,
    } = job;
    let give_up_at = Instant::now() + patience;
    let node = backend.node();
    let message = kind.wakes().message(local.client_id());
    let freed = match how {
        CleanUp::Release => retry_transient(give_up_at, || async {
            release_reply(node.run(&kind.release(&owner, &message, record_ms)).await?)
        })
        .await
        .map(ReleaseReply::freed),
        CleanUp::Abandon => {
            retry_transient(give_up_at, || async {
                abandon_reply(
                    node.run(&kind.abandon(&owner, &message, ttl_millis(patience)))
                        .await?,
                )
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

/// Whether a background clean-up's outcome wakes this process's waiters. A failed one does
/// too: its first attempt may have freed the lease although every retry errored, and a wake is
/// only a hint (the woken head retries, and finds the lease held if it still is).
fn wakes_local_waiters(freed: &Result<bool>) -> bool {
    !matches!(freed, Ok(false))
}

/// Releases, retrying transient failures for a short burst (the caller is waiting; what is
/// left after it goes to the background). A retry whose first attempt did take effect is
/// answered "already released" by the script, never a false "not held".
pub(crate) async fn release_with_retry(
    core: &Core,
    kind: &dyn LeaseKind,
    owner: &OwnerToken,
    message: &str,
) -> Result<ReleaseReply> {
    let give_up_at = Instant::now() + core.timeout() * 2;
    let call = kind.release(owner, message, core.release_record_ms());
    retry_transient(give_up_at, || async {
        release_reply(core.node().run(&call).await?)
    })
    .await
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

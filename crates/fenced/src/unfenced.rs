//! [`UnfencedLock`]: an exclusive lease without a fencing token, for work that needs mutual
//! exclusion but writes nothing a token could fence (deduplication, scheduled jobs, cache
//! fills), at the cost of a bare `SET NX PX`.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tracing::Instrument;

use crate::core::acquire::AcquireRequest;
use crate::core::{Core, Held, LeaseOptions};
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::guard::Lease;
use crate::keys::LockKeys;
use crate::kind::unfenced::Unfenced;
use crate::lock::Lock;
use crate::token::OwnerToken;

/// An exclusive lease on one name without a fencing token: what Martin Kleppmann calls a
/// lock *for efficiency*. Made by [`Lock::unfenced`].
///
/// It is taken with a bare `SET NX PX` and given back by compare-and-delete (`DELIFEQ` on a
/// server that has it, a script elsewhere): no fence key, no `TIME`, so a cycle costs the
/// server what a hand-written lock costs. It keeps everything else of a [`Lock`]: renewal,
/// the lost signal, waiting woken by releases, the same key (a fenced and an unfenced holder
/// of one name exclude each other).
///
/// Use it when a second holder after a pause would only waste work (two machines running
/// one report, two computing one cache entry), not corrupt it. Its guard has no
/// `fencing_token`, so code that needs one does not compile with it; for writes that must
/// never come from a stale holder, use a [`Lock`] and fence them.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// use fenced::LeaseGuard;
///
/// let client = fenced::Client::connect(&url).await?;
/// let report = client.lock("nightly-report").unfenced();
/// if let Some(guard) = report.try_acquire().await? {
///     // ... build the report; another machine's try_acquire gets None meanwhile ...
///     guard.release().await?;
/// }
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct UnfencedLock {
    core: Arc<Core>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    opts: LeaseOptions,
}

impl fmt::Debug for UnfencedLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnfencedLock")
            .field("name", &self.name)
            .field("ttl", &self.ttl())
            .field("auto_renew", &self.opts.auto_renew)
            .field("wait", &self.opts.wait)
            .finish()
    }
}

impl Lock {
    /// This lock without fencing tokens, with the same name and settings: see
    /// [`UnfencedLock`].
    pub fn unfenced(self) -> UnfencedLock {
        let (core, name, keys, opts) = self.into_parts();
        UnfencedLock {
            core,
            name,
            keys,
            opts,
        }
    }
}

impl UnfencedLock {
    crate::core::held::lease_option_setters!();

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// One attempt, never waits: `Some(guard)` when the lease is ours, `None` when somebody
    /// else holds it.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`].
    pub async fn try_acquire(&self) -> Result<Option<UnfencedGuard>> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        let req = self.opts.request(&self.name, &self.keys.channel, ttl, 1);
        let granted = self
            .core
            .try_with(&req, || self.next_attempt(&self.unchecked()));
        Ok(granted.await?.map(|held| UnfencedGuard { held }))
    }

    /// Takes the lease, waiting for it by the lock's [`WaitPolicy`](crate::WaitPolicy),
    /// woken by releases as a [`Lock`]'s waiters are.
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`].
    pub async fn acquire(&self) -> Result<UnfencedGuard> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        self.core
            .refuse_waiting_for_itself("lock", &self.name, &self.keys.lock, 1, 1)
            .await?;
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name, fenced.primitive = "unfenced_lock", fenced.token = tracing::field::Empty);
        // No handover: a fenced holder's would mint a token for it, an unfenced holder has
        // no script to do it in.
        let request: AcquireRequest<'_> = self.opts.request(&self.name, &self.keys.channel, ttl, 1);
        // Shared by the attempts: only the first refusal asks the key's type.
        let unchecked = self.unchecked();
        self.core
            .acquire_with(&request, || self.next_attempt(&unchecked))
            .instrument(span)
            .await
            .map(|held| UnfencedGuard { held })
    }

    /// Runs `work` while holding the lock: acquires (waiting by the policy), runs the work,
    /// cancels it if the lease is lost, and releases at the end.
    ///
    /// `work` receives the [`Lease`], to check between steps; its
    /// [`fencing_token`](Lease::fencing_token) is [`FencingToken::UNFENCED`](crate::FencingToken::UNFENCED),
    /// which every fenced write refuses.
    ///
    /// # Errors
    ///
    /// As [`Lock::with_lock`].
    pub async fn with_lock<F, Fut, T>(&self, work: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        crate::guard::scoped(self.acquire().await?, work).await
    }

    /// The lease kind and a fresh owner for one attempt.
    fn next_attempt(&self, unchecked: &Arc<AtomicBool>) -> Result<(Unfenced, OwnerToken)> {
        let mut kind = self.kind();
        kind.unchecked = unchecked.clone();
        Ok((kind, OwnerToken::fresh()?))
    }

    /// A fresh flag for one acquire: its first refusal asks the lock key's type.
    fn unchecked(&self) -> Arc<AtomicBool> {
        Arc::new(AtomicBool::new(true))
    }

    /// The lease kind of this name.
    pub(crate) fn kind(&self) -> Unfenced {
        Unfenced {
            name: self.name.clone(),
            keys: self.keys.clone(),
            unchecked: Arc::new(AtomicBool::new(false)),
        }
    }
}

/// A held [`UnfencedLock`]: the surface of every guard ([`LeaseGuard`](crate::LeaseGuard)),
/// without a fencing token. Released on drop, renewed while it lives.
///
/// It has no `fencing_token` and is not a [`FencedGuard`](crate::FencedGuard), so code that
/// fences writes cannot be handed one:
///
/// ```compile_fail
/// fn fence_with<G: fenced::FencedGuard>(guard: &G) -> fenced::FencingToken {
///     guard.fencing_token()
/// }
/// fn misuse(guard: &fenced::UnfencedGuard) {
///     fence_with(guard);
/// }
/// ```
///
/// ```compile_fail
/// fn misuse(guard: &fenced::UnfencedGuard) -> fenced::FencingToken {
///     guard.fencing_token()
/// }
/// ```
#[must_use = "dropping the guard releases the lock at once"]
pub struct UnfencedGuard {
    held: Held,
}

impl fmt::Debug for UnfencedGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UnfencedGuard")
            .field("name", &self.name())
            .field("owner", &"<redacted>")
            .finish()
    }
}

crate::guard::lease_surface!(UnfencedGuard);

impl UnfencedGuard {
    pub(crate) fn new(held: Held) -> Self {
        UnfencedGuard { held }
    }

    pub(crate) fn held(&self) -> &Held {
        &self.held
    }

    pub(crate) fn into_held(self) -> Held {
        self.held
    }

    /// Gives the lease back and wakes the next waiter; see [`LockGuard::release`](crate::LockGuard::release).
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`](crate::LockGuard::release): [`Error::LeaseLost`] at once when
    /// the lease was known lost, [`Error::NotHeld`] when the lease
    /// had already expired or been taken over.
    pub async fn release(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}

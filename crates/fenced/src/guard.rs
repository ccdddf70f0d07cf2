//! [`LockGuard`]: a held [`Lock`](crate::Lock), released on drop. [`Lease`] is the view of it
//! the work gets (shared by every primitive, defined in the core).

use std::fmt;
use std::time::Duration;

use crate::core::Held;
pub use crate::core::Lease;
use crate::error::Result;
use crate::token::FencingToken;

/// What every guard of a held lease offers, whatever the primitive: [`LockGuard`] (plain and
/// fair locks), [`ReentrantGuard`](crate::ReentrantGuard), [`ReadGuard`](crate::ReadGuard),
/// [`WriteGuard`](crate::WriteGuard), [`SemaphorePermit`](crate::SemaphorePermit) and
/// [`MultiGuard`](crate::MultiGuard). Each guard has the same methods inherently too; the
/// trait is for code that works with any of them, in the manner of `lock_api`'s traits.
///
/// The methods mean the same on every guard and fail with the same errors: see
/// [`LockGuard::extend`] and [`LockGuard::release`]. The trait is sealed: only this crate's
/// guards implement it.
///
/// The fencing token is in a trait of its own, [`FencedGuard`], which every guard of this
/// crate implements too but [`UnfencedGuard`](crate::UnfencedGuard): a lease without a token
/// (for work that needs exclusion but fences nothing) offers the rest of this surface, and
/// code that needs the token says so.
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// use fenced::FencedGuard;
///
/// /// Writes under any kind of lease, and gives it back.
/// async fn log_under<G: FencedGuard>(guard: G) -> fenced::Result<()> {
///     println!("{} held with token {}", guard.name(), guard.fencing_token());
///     guard.extend(std::time::Duration::from_secs(10)).await?;
///     guard.release().await
/// }
///
/// let client = fenced::Client::connect(&url).await?;
/// log_under(client.lock("a").acquire().await?).await?;
/// log_under(client.semaphore("b", 2).acquire().await?).await?;
/// log_under(client.rw_lock("c").read().await?).await?;
/// # Ok(()) });
/// ```
pub trait LeaseGuard: sealed::Sealed + Send + Sync + 'static {
    /// The name the lease is on (a multi-lock's names, sorted and joined by `, `).
    fn name(&self) -> &str;
    /// A cheap handle on the lease to pass to the work.
    fn lease(&self) -> Lease;
    /// True once the lease is lost, or its validity deadline has passed.
    fn is_lost(&self) -> bool;
    /// Completes when the lease is lost.
    fn lost(&self) -> tokio_util::sync::WaitForCancellationFutureOwned;
    /// The moment (monotonic clock) until which the lease is certainly held.
    fn valid_until(&self) -> tokio::time::Instant;
    /// How much of the lease is certainly left: zero once past its deadline or given back.
    fn remaining(&self) -> Duration;
    /// Sets the lease to `ttl` from now; see [`LockGuard::extend`].
    fn extend(&self, ttl: Duration) -> impl Future<Output = Result<()>> + Send + '_;
    /// Gives the lease back and wakes whom the primitive's release wakes; see
    /// [`LockGuard::release`].
    fn release(self) -> impl Future<Output = Result<()>> + Send;
}

/// A guard whose grant carries a fencing token: every guard of this crate but
/// [`UnfencedGuard`](crate::UnfencedGuard). Send the token with every write to the protected
/// resource.
pub trait FencedGuard: LeaseGuard {
    /// This grant's fencing token.
    fn fencing_token(&self) -> FencingToken;
}

pub(crate) mod sealed {
    /// Keeps [`LeaseGuard`](super::LeaseGuard) to this crate's guards.
    pub trait Sealed {}
}

/// A held lock. Owned, `Send + 'static`: move it into a task, keep it in a struct.
///
/// While the guard lives, its lease is renewed in the background (unless renewal was turned
/// off). Call [`release`](Self::release) to give it back and learn whether it was still held;
/// dropping the guard releases it in the background instead.
///
/// Watch [`lost`](Self::lost) (or check [`is_lost`](Self::is_lost)): it fires when a renewal
/// is refused or the validity deadline passes without one. From then on somebody else may
/// hold the lock, and only writes fenced with [`fencing_token`](Self::fencing_token) stay safe.
#[must_use = "dropping the guard releases the lock at once"]
pub struct LockGuard {
    held: Held,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("fencing_token", &self.fencing_token())
            .field("owner", &"<redacted>")
            .finish()
    }
}

/// The surface every guard of a held lease has (name, lease, lost signal, deadline, extend),
/// for a struct with a `held: Held` field, and its [`LeaseGuard`](crate::LeaseGuard)
/// implementation: one definition for every guard, so none can lack a method. Each guard
/// writes its own `release`, whose documentation says whom it wakes.
macro_rules! lease_surface {
    ($guard:ty) => {
        impl $guard {
            /// The name this lease is on (a multi-lock's names, sorted and joined by `, `).
            pub fn name(&self) -> &str {
                self.held.lease().name()
            }

            /// A cheap handle on this lease (deadline, lost signal, token) to pass to the work.
            pub fn lease(&self) -> $crate::Lease {
                self.held.lease().clone()
            }

            /// True once the lease is over: lost, past its validity deadline, or given back.
            pub fn is_lost(&self) -> bool {
                self.held.lease().is_lost()
            }

            /// Completes when the lease is lost. See [`Lease::lost`](crate::Lease::lost).
            pub fn lost(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
                self.held.lease().lost()
            }

            /// Says the holder is alive and making progress, for a lease taken with a
            /// heartbeat. See [`Lease::beat`](crate::Lease::beat).
            pub fn beat(&self) {
                self.held.lease().beat()
            }

            /// The moment (monotonic clock) until which this lease is certainly ours, as of
            /// the last successful grant or renewal.
            pub fn valid_until(&self) -> tokio::time::Instant {
                self.held.lease().valid_until()
            }

            /// How much of this lease is certainly left: zero once past its deadline or
            /// given back. A work step that needs longer should [`extend`](Self::extend) first.
            pub fn remaining(&self) -> std::time::Duration {
                self.held.lease().remaining()
            }

            /// Sets the lease to `ttl` from now (longer or shorter), and uses `ttl` for later
            /// renewals.
            ///
            /// The guard never claims more than Redis grants: from the moment the request is
            /// sent, a shorter ttl counts (Redis may apply it even if the reply is lost), and a
            /// longer one counts only once Redis confirms it. Renewals and extends reach Redis
            /// in epoch order, so a late renewal for the old ttl can never undo this one. (A
            /// re-entrant hold never shortens the lock below its other holds' leases; a
            /// multi-lock extends every name or none.)
            ///
            /// # Errors
            ///
            /// [`Error::LeaseLost`](crate::Error::LeaseLost) at once, without a round trip,
            /// if the lease was known lost or past its deadline before;
            /// [`Error::NotHeld`](crate::Error::NotHeld) if Redis finds it gone (it is not
            /// re-created); [`Error::InvalidArgument`](crate::Error::InvalidArgument)
            /// for a bad ttl; transport errors as usual (the outcome is then unknown, and the
            /// deadline stays at the earlier of the old and the new one).
            ///
            /// # Cancel safety
            ///
            /// If cancelled after the request was sent, the outcome is unknown and is treated
            /// as the error case above.
            pub async fn extend(&self, ttl: std::time::Duration) -> $crate::Result<()> {
                self.held.extend(ttl).await
            }
        }

        impl $crate::guard::sealed::Sealed for $guard {}

        impl $crate::LeaseGuard for $guard {
            fn name(&self) -> &str {
                <$guard>::name(self)
            }

            fn lease(&self) -> $crate::Lease {
                <$guard>::lease(self)
            }

            fn is_lost(&self) -> bool {
                <$guard>::is_lost(self)
            }

            fn lost(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
                <$guard>::lost(self)
            }

            fn valid_until(&self) -> tokio::time::Instant {
                <$guard>::valid_until(self)
            }

            fn remaining(&self) -> std::time::Duration {
                <$guard>::remaining(self)
            }

            fn extend(
                &self,
                ttl: std::time::Duration,
            ) -> impl std::future::Future<Output = $crate::Result<()>> + Send + '_ {
                <$guard>::extend(self, ttl)
            }

            fn release(self) -> impl std::future::Future<Output = $crate::Result<()>> + Send {
                <$guard>::release(self)
            }
        }
    };
}
pub(crate) use lease_surface;

/// [`lease_surface`] and the fencing token: every guard whose grant carries one.
macro_rules! lease_accessors {
    ($guard:ty) => {
        $crate::guard::lease_surface!($guard);

        impl $guard {
            /// This grant's fencing token: send it with every write to the protected resource.
            pub fn fencing_token(&self) -> $crate::FencingToken {
                self.held.lease().fencing_token()
            }
        }

        impl $crate::FencedGuard for $guard {
            fn fencing_token(&self) -> $crate::FencingToken {
                <$guard>::fencing_token(self)
            }
        }
    };
}
pub(crate) use lease_accessors;

crate::guard::lease_accessors!(LockGuard);

impl LockGuard {
    pub(crate) fn new(held: Held) -> Self {
        LockGuard { held }
    }

    pub(crate) fn held(&self) -> &Held {
        &self.held
    }

    pub(crate) fn into_held(self) -> Held {
        self.held
    }

    /// Gives the lease back and wakes the next waiter.
    ///
    /// A release whose reply was lost is retried; the retry recognises the first attempt's
    /// effect and does not report a false "not held".
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) at once, without a round trip, when the
    /// lease was already known lost (its lost signal fired, or its validity deadline passed):
    /// whatever Redis may still hold for it is given back in the background.
    /// [`Error::NotHeld`](crate::Error::NotHeld) when Redis found the lease already expired or
    /// taken over: nothing was deleted (another holder's lock is never touched), and your
    /// exclusive access had ended before this call. Transport errors when Redis cannot be
    /// reached; the lease then expires by its ttl.
    ///
    /// # Cancel safety
    ///
    /// If cancelled, the release may or may not have happened; the lease is no longer renewed
    /// and expires by its ttl at the latest.
    pub async fn release(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}

/// The scoped run of every primitive (`with_lock`, `with_read`, `with_write`, `with_permit`):
/// runs `work` under `guard`, cancels it if the lease is lost, and releases at the end. A
/// release that fails only because Redis is unreachable does not hide the work's result: it is
/// logged, and the lease expires by its ttl.
pub(crate) async fn scoped<G, F, Fut, T>(guard: G, work: F) -> Result<T>
where
    G: LeaseGuard,
    F: FnOnce(Lease) -> Fut,
    Fut: Future<Output = T>,
{
    let lease = guard.lease();
    let outcome = tokio::select! {
        biased;
        _ = lease.lost() => None,
        out = work(lease.clone()) => Some(out),
    };
    let Some(out) = outcome else {
        // Its cause is named before the drop gives the lease back.
        let lost = lease.lost_error();
        drop(guard);
        return Err(lost);
    };
    match guard.release().await {
        Ok(()) => Ok(out),
        Err(lost @ crate::Error::LeaseLost { .. }) => Err(lost),
        Err(crate::Error::NotHeld { .. }) => Err(lease.lost_error()),
        Err(e) => {
            tracing::warn!(lock = %lease.name(), error = %e, "fenced: release after the work failed; the lease will expire by its ttl");
            Ok(out)
        }
    }
}

/// A primitive's scoped run: `$name(work)` takes a lease with `$acquire` and runs `work` under
/// it ([`scoped`]), for a handle with that acquire method.
macro_rules! scoped_run {
    ($what:literal, $name:ident => $acquire:ident) => {
        #[doc = concat!("Runs `work` while holding ", $what, ": takes it with [`", stringify!($acquire), "`](Self::", stringify!($acquire), "), runs the work, cancels it if the lease is lost, and releases at the end.")]
        ///
        /// `work` receives the [`Lease`](crate::Lease), whose fencing token should go with
        /// every write it makes.
        ///
        /// # Errors
        ///
        /// As [`Lock::with_lock`](crate::Lock::with_lock): the errors of the acquire, and
        /// [`Error::LeaseLost`](crate::Error::LeaseLost) when the lease ended before the work
        /// finished.
        pub async fn $name<F, Fut, T>(&self, work: F) -> $crate::Result<T>
        where
            F: FnOnce($crate::Lease) -> Fut,
            Fut: std::future::Future<Output = T>,
        {
            $crate::guard::scoped(self.$acquire().await?, work).await
        }
    };
}
pub(crate) use scoped_run;

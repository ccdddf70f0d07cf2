//! [`Semaphore`]: N permits shared across processes, each one leased.
//!
//! Redisson's `RSemaphore` leaks a permit for good when its holder crashes, and its
//! `RPermitExpirableSemaphore` decides expiry by comparing client wall clocks. Here every
//! holder's permits are a lease: renewed in the background while its [`SemaphorePermit`]
//! lives, and back in the pool when the lease ends, measured by the Redis server's own clock
//! (`TIME`) alone.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::backend::reads;
use crate::core::{Core, Held, LeaseOptions};
use crate::error::{Error, Result};
use crate::keys::validate_name;
use crate::kind::permits::{Permits, SemaphoreKeys};
use crate::kind::unexpected;
use crate::token::OwnerToken;

/// The most permits a semaphore may have.
pub const MAX_PERMITS: u32 = 1_000_000;

/// A counting semaphore whose permits are leased: at most `permits` are held at once, across
/// every process, and a crashed holder's permits come back when its lease ends.
///
/// Made by [`Client::semaphore`](crate::Client::semaphore). A waiter is woken by the release that frees enough permits
/// (a release of k permits wakes up to k waiters) and polls, capped by the earliest holder's
/// remaining lease, when no notification comes.
///
/// The number of permits belongs to the handle and travels with each acquire: a request is
/// admitted when the permits held now plus its own fit under its handle's number. Handles
/// with different numbers for one name may coexist (say, during a configuration change):
/// lowering the number never takes a held permit back; it stops admitting until enough
/// come back. Raising it admits at once.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// let downloads = client.semaphore("downloads", 2);
///
/// let a = downloads.acquire().await?;
/// let b = downloads.acquire().await?;
/// assert!(downloads.try_acquire().await?.is_none(), "both permits are out");
/// assert_eq!(downloads.available().await?, 0);
/// assert!(b.fencing_token() > a.fencing_token());
///
/// a.release().await?;                   // wakes one waiter
/// let c = downloads.acquire().await?;
/// # drop((b, c));
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct Semaphore {
    core: Arc<Core>,
    name: Arc<str>,
    keys: Arc<SemaphoreKeys>,
    permits: u32,
    opts: LeaseOptions,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .field("ttl", &self.ttl())
            .field("wait", &self.opts.wait)
            .finish()
    }
}

/// A snapshot of a semaphore, read in one round trip.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreStatus {
    /// The semaphore's name.
    pub name: String,
    /// Permits held by live holders.
    pub held: u64,
    /// Live holders.
    pub holders: u64,
    /// Time left of the lease that ends first, if any is held.
    pub next_expiry: Option<Duration>,
}

impl Semaphore {
    pub(crate) fn new(core: &Arc<Core>, name: String, permits: u32) -> Self {
        let core = core.clone();
        let keys = Arc::new(SemaphoreKeys::new(&core.options().namespace, &name));
        Semaphore {
            core,
            name: name.into(),
            keys,
            permits,
            opts: LeaseOptions::default(),
        }
    }

    crate::core::held::lease_option_setters!();

    /// The same semaphore with `permits` in all for this handle's requests (see the type's
    /// documentation for handles that disagree).
    pub fn with_permits(mut self, permits: u32) -> Self {
        self.permits = permits;
        self
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Permits in all, as this handle counts them.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    fn check(&self, n: u32) -> Result<Duration> {
        let ttl = self.opts.checked_ttl(&self.core, "semaphore", &self.name)?;
        if !(1..=MAX_PERMITS).contains(&self.permits) {
            return Err(Error::invalid(format!(
                "a semaphore has 1 to {MAX_PERMITS} permits, not {}",
                self.permits
            )));
        }
        if n == 0 || n > self.permits {
            return Err(Error::invalid(format!(
                "asked for {n} permits of semaphore {:?}, which has {}; ask for 1 to {}",
                self.name, self.permits, self.permits
            )));
        }
        Ok(ttl)
    }

    fn next_attempt(&self, n: u32) -> Result<(Permits, OwnerToken)> {
        let kind = Permits {
            name: self.name.clone(),
            keys: self.keys.clone(),
            permits: n,
            limit: self.permits,
            fence_retention_ms: self.core.fence_retention_ms(),
        };
        Ok((kind, OwnerToken::fresh()?))
    }

    /// Takes one permit, waiting by the [`WaitPolicy`](crate::WaitPolicy).
    ///
    /// # Errors
    ///
    /// As [`acquire_many`](Self::acquire_many).
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire): permits an attempt in flight may have taken
    /// are given back in the background.
    pub async fn acquire(&self) -> Result<SemaphorePermit> {
        self.acquire_many(1).await
    }

    /// Takes `n` permits at once (all or nothing), waiting by the [`WaitPolicy`](crate::WaitPolicy).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `n` is 0 or more than the semaphore has;
    /// [`Error::WouldDeadlock`], before anything is sent, when the permits that guards this
    /// task acquired hold (renewed until given back) and `n` add up to more than the
    /// semaphore has: the task would wait for itself (see [`Error::WouldDeadlock`] for the
    /// rule). Otherwise as [`Lock::acquire`](crate::Lock::acquire).
    pub async fn acquire_many(&self, n: u32) -> Result<SemaphorePermit> {
        let ttl = self.check(n)?;
        self.core
            .refuse_waiting_for_itself("semaphore", &self.name, &self.keys.holders, n, self.permits)
            .await?;
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name, fenced.primitive = "semaphore", fenced.token = tracing::field::Empty, n);
        let held = self
            .core
            .acquire_with(
                &self
                    .opts
                    .request(&self.name, &self.keys.channel, ttl, self.permits as usize),
                || self.next_attempt(n),
            )
            .instrument(span)
            .await?;
        Ok(SemaphorePermit { held, permits: n })
    }

    /// One attempt at one permit, never waits: `None` when none is free.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`](crate::Lock::try_acquire).
    pub async fn try_acquire(&self) -> Result<Option<SemaphorePermit>> {
        self.try_acquire_many(1).await
    }

    /// One attempt at `n` permits, never waits: `None` when fewer than `n` are free.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad `n`; otherwise as
    /// [`Lock::try_acquire`](crate::Lock::try_acquire).
    pub async fn try_acquire_many(&self, n: u32) -> Result<Option<SemaphorePermit>> {
        let ttl = self.check(n)?;
        let req = self
            .opts
            .request(&self.name, &self.keys.channel, ttl, self.permits as usize);
        let granted = self.core.try_with(&req, || self.next_attempt(n)).await?;
        Ok(granted.map(|held| SemaphorePermit { held, permits: n }))
    }

    /// Permits free now, as this handle counts them (0 when more are held than it allows).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors.
    pub async fn available(&self) -> Result<u32> {
        let status = self.status().await?;
        Ok(u64::from(self.permits)
            .saturating_sub(status.held)
            .try_into()
            .unwrap_or(0))
    }

    /// Who holds permits now, read in one round trip as one `MULTI`/`EXEC` (leases past
    /// their end by the server's clock are not counted).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; [`Error::WrongType`] naming a key of
    /// another type; transport errors.
    pub async fn status(&self) -> Result<SemaphoreStatus> {
        validate_name("semaphore", &self.name)?;
        let reads = [
            redis::cmd("TIME"),
            reads::zrange_all(&self.keys.holders),
            redis::cmd("HGETALL").arg(&self.keys.counts).take(),
        ];
        let reply: Vec<i64> = self
            .core
            .node()?
            .read("semaphore status", &reads, reads::semaphore_status)
            .await?;
        match reply[..] {
            [held, holders, first] if held >= 0 && holders >= 0 => Ok(SemaphoreStatus {
                name: self.name.to_string(),
                held: held.unsigned_abs(),
                holders: holders.unsigned_abs(),
                next_expiry: u64::try_from(first).ok().map(Duration::from_millis),
            }),
            _ => Err(unexpected("semaphore status", format!("{reply:?}"))),
        }
    }
}

/// Permits held from a [`Semaphore`]. Owned, `Send + 'static`; given back on
/// [`release`](Self::release) or drop, and renewed while it lives.
#[must_use = "dropping the permit gives it back at once"]
pub struct SemaphorePermit {
    held: Held,
    permits: u32,
}

impl fmt::Debug for SemaphorePermit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("name", &self.held.lease().name())
            .field("permits", &self.permits)
            .field("fencing_token", &self.fencing_token())
            .finish()
    }
}

crate::guard::lease_accessors!(SemaphorePermit);

impl SemaphorePermit {
    /// How many permits this holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Gives the permits back and wakes up to that many waiters.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] at once, without a round trip, when the lease was already known
    /// lost; [`Error::NotHeld`] when the lease had already ended (the permits were counted free
    /// already); transport errors (the permits then come back in the background, or when the
    /// lease ends).
    pub async fn release(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}

/// Scoped runs.
impl Semaphore {
    crate::guard::scoped_run!("one permit", with_permit => acquire);
}

//! [`MultiLock`]: several names locked together, all or nothing.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::core::{Core, Held, LeaseOptions};
use crate::error::{Error, Result};
use crate::keys::{LockKeys, validate_name};
use crate::kind::multi::MultiExclusive;
use crate::token::OwnerToken;

/// The most names one multi-lock may hold.
pub const MAX_MULTI_NAMES: usize = 64;

/// Several names locked as one: taken all together or not at all, by one script, so two
/// callers locking `{a, b}` and `{b, a}` can never deadlock. One guard renews every name,
/// and its lost signal fires when any one of them is lost.
///
/// The grant has ONE fencing token, greater than every token handed out before for any of
/// the names: use it to fence writes to each name's resource. The names' keys are the
/// plain lock keys, so a `MultiLock` excludes plain [`Lock`](crate::Lock)s of each name. A
/// waiter is woken by the release of any of the names (and retries; the others may still be
/// held).
///
/// On a single server (or Sentinel's master) every name is reachable by one script. On a
/// Redis Cluster the names may live in different slots, which one script cannot reach: a
/// multi-lock there answers [`Error::Unsupported`](crate::Error::Unsupported).
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// // A transfer locks both accounts, in whichever order the caller names them.
/// let both = client.multi_lock(["account:7", "account:3"])?;
/// let guard = both.acquire().await?;
/// assert!(client.lock("account:3").try_acquire().await?.is_none());
/// assert_eq!(guard.names(), ["account:3", "account:7"]);
/// guard.release().await?;
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct MultiLock {
    core: Arc<Core>,
    name: Arc<str>,
    names: Arc<Vec<String>>,
    keys: Arc<Vec<LockKeys>>,
    /// The local wait queue's key; the names' channels wake it.
    queue: Arc<str>,
    channels: Arc<Vec<String>>,
    opts: LeaseOptions,
}

impl fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLock")
            .field("names", &self.names)
            .field("ttl", &self.opts.ttl(&self.core))
            .field("wait", &self.opts.wait)
            .finish()
    }
}

impl MultiLock {
    pub(crate) fn new(core: &Arc<Core>, names: Vec<String>) -> Result<Self> {
        let mut names = names;
        names.sort();
        names.dedup();
        if names.is_empty() || names.len() > MAX_MULTI_NAMES {
            return Err(Error::invalid(format!(
                "a multi-lock holds 1 to {MAX_MULTI_NAMES} names, not {}",
                names.len()
            )));
        }
        for name in &names {
            validate_name("lock", name)?;
        }
        let core = core.clone();
        let ns = &core.options().namespace;
        let keys: Vec<LockKeys> = names.iter().map(|n| LockKeys::new(ns, n)).collect();
        let channels = keys.iter().map(|k| k.channel.clone()).collect();
        let queue = format!(
            "{ns}multi:{}",
            keys.iter()
                .map(|k| k.lock.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
        Ok(MultiLock {
            name: names.join(", ").into(),
            core,
            names: Arc::new(names),
            keys: Arc::new(keys),
            queue: queue.into(),
            channels: Arc::new(channels),
            opts: LeaseOptions::default(),
        })
    }

    crate::core::held::lease_option_setters!();

    /// The names, sorted.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    fn next_attempt(&self) -> Result<(MultiExclusive, OwnerToken)> {
        let kind = MultiExclusive {
            name: self.name.clone(),
            keys: self.keys.clone(),
            channels: self.channels.clone(),
            fence_retention_ms: self.core.fence_retention_ms(),
        };
        Ok((kind, OwnerToken::fresh()?))
    }

    fn checked_ttl(&self) -> Result<Duration> {
        // The names were checked when the handle was made; the ttl is checked here.
        self.opts.checked_ttl(&self.core, "lock", &self.names[0])
    }

    /// Takes every name, waiting by the [`WaitPolicy`](crate::WaitPolicy) while any of them is held.
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire): [`Error::WouldDeadlock`], before anything
    /// is sent, when a guard this task acquired holds any of the names (any lock of it,
    /// another multi-lock's included).
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire).
    pub async fn acquire(&self) -> Result<MultiGuard> {
        let ttl = self.checked_ttl()?;
        for (name, keys) in self.names.iter().zip(self.keys.iter()) {
            self.core
                .refuse_waiting_for_itself("lock", name, &keys.lock, 1, 1)
                .await?;
        }
        let mut req = self.opts.request(&self.name, &self.queue, ttl, 1);
        req.also = &self.channels;
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name, fenced.primitive = "multi_lock", fenced.token = tracing::field::Empty);
        let held = self
            .core
            .acquire_with(&req, || self.next_attempt())
            .instrument(span)
            .await?;
        Ok(self.guard(held))
    }

    /// One attempt, never waits: `None` when any of the names is held.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`](crate::Lock::try_acquire).
    pub async fn try_acquire(&self) -> Result<Option<MultiGuard>> {
        let ttl = self.checked_ttl()?;
        let req = self.opts.request(&self.name, &self.queue, ttl, 1);
        let granted = self.core.try_with(&req, || self.next_attempt()).await?;
        Ok(granted.map(|held| self.guard(held)))
    }

    fn guard(&self, held: Held) -> MultiGuard {
        MultiGuard {
            held,
            names: self.names.clone(),
        }
    }
}

/// Several names held together. Owned, `Send + 'static`; given back on
/// [`release`](Self::release) or drop, renewed while it lives.
#[must_use = "dropping the guard releases every name at once"]
pub struct MultiGuard {
    held: Held,
    names: Arc<Vec<String>>,
}

impl fmt::Debug for MultiGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("names", &self.names)
            .field("fencing_token", &self.fencing_token())
            .finish()
    }
}

crate::guard::lease_accessors!(MultiGuard);

impl MultiGuard {
    /// The names held, sorted.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Gives every name back (those still ours) and wakes their waiters.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] at once, without a round trip, when the lease was already known
    /// lost; [`Error::NotHeld`] when none of the names was held any more; transport errors.
    pub async fn release(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}

/// Scoped runs.
impl MultiLock {
    /// Where it lives: its client's core and its names' keys (the listings read them).
    pub(crate) fn parts(&self) -> (&Arc<Core>, &[LockKeys]) {
        (&self.core, &self.keys)
    }
}

impl MultiLock {
    crate::guard::scoped_run!("every name", with_lock => acquire);
}

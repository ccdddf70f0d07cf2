//! [`ReentrantLock`]: an exclusive lock its holder may take again without waiting for itself
//! (a lock that is "reusable" by its holder).
//!
//! Who the holder is, is explicit. Redisson keys re-entry by JVM thread id; in async Rust a
//! task moves between threads at every `.await`, and one piece of work spans many tasks (and,
//! with `fenced run`, processes), so a thread id says nothing about who holds a lock. Here a
//! re-entry goes through the holder's [`ReentrantGuard`], or through a [`HolderHandle`] the
//! holder hands out on purpose: to another task, or to a child process.
//!
//! In Redis the lock key is the same plain string a [`Lock`](crate::Lock) uses, so plain and
//! reentrant locks on one name exclude each other. Next to it a hash keeps the hold's fencing
//! token and one field per hold; the key is deleted when the last hold is given back.

use std::fmt;
use std::sync::Arc;

use tracing::Instrument;

use crate::core::{Core, Held, LeaseOptions};
use crate::error::{Error, Result};
use crate::keys::{LockKeys, validate_name};
use crate::kind::reentrant::ReentrantHold;
use crate::token::OwnerToken;

/// An exclusive lease whose holder can enter it again; the lock is free once every hold is
/// given back.
///
/// Made by [`Client::reentrant_lock`](crate::Client::reentrant_lock). Each hold is a [`ReentrantGuard`] with its own lease:
/// renewed while it lives, given back on release or drop. Every hold of one acquisition
/// carries the same fencing token.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// let lock = client.reentrant_lock("account:42");
///
/// let outer = lock.acquire().await?;
/// let inner = outer.reenter().await?;          // the holder itself: no waiting
/// assert_eq!(inner.fencing_token(), outer.fencing_token());
/// assert!(client.lock("account:42").try_acquire().await?.is_none());
///
/// // A handle lets another task (or a child process) enter the same hold.
/// let handle = outer.holder();
/// let other_task = tokio::spawn({
///     let lock = lock.clone();
///     async move { lock.reenter(&handle).await?.release().await }
/// });
/// other_task.await.expect("task")?;
///
/// inner.release().await?;                      // still held by `outer`
/// assert!(client.lock("account:42").try_acquire().await?.is_none());
/// outer.release().await?;                      // the last hold: free now
/// assert!(client.lock("account:42").try_acquire().await?.is_some());
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct ReentrantLock {
    core: Arc<Core>,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    opts: LeaseOptions,
}

impl fmt::Debug for ReentrantLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantLock")
            .field("name", &self.name)
            .field("ttl", &self.ttl())
            .field("wait", &self.opts.wait)
            .finish()
    }
}

impl ReentrantLock {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        let core = core.clone();
        let keys = Arc::new(LockKeys::new(&core.options().namespace, &name));
        ReentrantLock {
            core,
            name: name.into(),
            keys,
            opts: LeaseOptions::default(),
        }
    }

    crate::core::held::lease_option_setters!();

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn hold(&self, owner: OwnerToken, reenter_only: bool) -> Result<(ReentrantHold, OwnerToken)> {
        let id = OwnerToken::fresh()?;
        let kind = ReentrantHold {
            name: self.name.clone(),
            keys: self.keys.clone(),
            hold: id.as_str()[..16].to_owned(),
            reenter_only,
            fence_retention_ms: self.core.fence_retention_ms(),
        };
        Ok((kind, owner))
    }

    /// Takes the lock as a new holder, waiting by the lock's [`WaitPolicy`](crate::WaitPolicy) while somebody
    /// else holds it. Waiting works as for [`Lock::acquire`](crate::Lock::acquire).
    ///
    /// # Errors
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`Lock::acquire`](crate::Lock::acquire).
    pub async fn acquire(&self) -> Result<ReentrantGuard> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        // A new holder, so a hold of this task's own is waited for in vain: enter it again
        // through its guard (`reenter`) instead.
        self.core
            .refuse_waiting_for_itself("re-entrant lock", &self.name, &self.keys.lock, 1, 1)
            .await?;
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name, fenced.primitive = "reentrant_lock", fenced.token = tracing::field::Empty);
        let held = self
            .core
            .acquire_with(
                &self.opts.request(&self.name, &self.keys.channel, ttl, 1),
                || self.hold(OwnerToken::fresh()?, false),
            )
            .instrument(span)
            .await?;
        Ok(self.guard(held))
    }

    /// One attempt as a new holder, never waits: `None` when somebody else holds the lock.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`](crate::Lock::try_acquire).
    pub async fn try_acquire(&self) -> Result<Option<ReentrantGuard>> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        let req = self.opts.request(&self.name, &self.keys.channel, ttl, 1);
        let next = || self.hold(OwnerToken::fresh()?, false);
        let granted = self.core.try_with(&req, next).await?;
        Ok(granted.map(|held| self.guard(held)))
    }

    /// Enters the lock once more as the holder `holder` names. Never waits: the holder has
    /// it, or the re-entry is refused.
    ///
    /// # Errors
    ///
    /// [`Error::NotHeld`] when that holder no longer holds the lock (every hold was given
    /// back, or the lease was lost): a re-entry never takes a free lock. Transport errors as
    /// usual; a re-entry of unknown outcome is given back in the background.
    pub async fn reenter(&self, holder: &HolderHandle) -> Result<ReentrantGuard> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        if holder.name != self.name || holder.namespace != self.core.options().namespace {
            return Err(Error::invalid(format!(
                "the holder handle is for lock {:?}, not {:?}",
                holder.name, self.name
            )));
        }
        let (kind, owner) = self.hold(holder.owner.clone(), true)?;
        let span = tracing::debug_span!("fenced.reenter", fenced.name = %self.name, fenced.primitive = "reentrant_lock", fenced.token = tracing::field::Empty);
        match self
            .core
            .try_once(
                &self.opts.request(&self.name, &self.keys.channel, ttl, 1),
                kind,
                owner,
            )
            .instrument(span)
            .await?
        {
            Ok(held) => Ok(self.guard(held)),
            Err(_) => Err(Error::NotHeld {
                name: self.name.to_string(),
            }),
        }
    }

    fn guard(&self, held: Held) -> ReentrantGuard {
        ReentrantGuard {
            held,
            lock: self.clone(),
        }
    }
}

/// One hold of a [`ReentrantLock`]. Owned, `Send + 'static`; given back on
/// [`release`](Self::release) or drop. The lock is free once every hold is given back.
#[must_use = "dropping the guard gives this hold back at once"]
pub struct ReentrantGuard {
    held: Held,
    lock: ReentrantLock,
}

impl fmt::Debug for ReentrantGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantGuard")
            .field("name", &self.lock.name)
            .field("fencing_token", &self.fencing_token())
            .field("owner", &"<redacted>")
            .finish()
    }
}

crate::guard::lease_accessors!(ReentrantGuard);

impl ReentrantGuard {
    /// A handle that lets another task or process enter this hold
    /// ([`ReentrantLock::reenter`]). Whoever has it can take and give back holds of this
    /// lock while it is held: hand it out as you would the lock itself.
    pub fn holder(&self) -> HolderHandle {
        HolderHandle {
            namespace: self.lock.core.options().namespace.clone(),
            name: self.lock.name.clone(),
            owner: self.held.owner().clone(),
        }
    }

    /// Enters the lock once more as this guard's holder. Never waits.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when this hold's lease is already over (lost, or past its
    /// deadline); [`Error::NotHeld`] when Redis says the holder no longer holds the lock.
    pub async fn reenter(&self) -> Result<ReentrantGuard> {
        if self.held.lease().is_lost() {
            return Err(self.held.lease().lost_error());
        }
        self.lock.reenter(&self.holder()).await
    }

    /// Gives this hold back. The last hold frees the lock and wakes the next waiter.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] at once, without a round trip, when the lease was already known
    /// lost; [`Error::NotHeld`] when the lease had already expired or been taken over; transport
    /// errors (the hold is then given back in the background, or expires by its ttl).
    pub async fn release(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}

/// Who holds a [`ReentrantLock`]: lets another task, or a child process, enter the same hold.
///
/// Its [`secret`](Self::secret) form crosses process boundaries (`fenced run` passes it to
/// its command in an environment variable, so a nested `fenced run` on the same name
/// re-enters instead of waiting for itself). Whoever has it can act as the holder: `Debug`
/// never shows it.
#[derive(Clone)]
pub struct HolderHandle {
    namespace: String,
    name: Arc<str>,
    owner: OwnerToken,
}

impl fmt::Debug for HolderHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HolderHandle")
            .field("name", &self.name)
            .field("owner", &"<redacted>")
            .finish()
    }
}

impl HolderHandle {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner token (32 hex digits), to hand to a process you trust with this lock.
    pub fn secret(&self) -> &str {
        self.owner.as_str()
    }
}

/// Scoped runs.
impl ReentrantLock {
    /// Where it lives: its client's core and its keys (the listings read them).
    pub(crate) fn parts(&self) -> (&Arc<Core>, &LockKeys) {
        (&self.core, &self.keys)
    }

    /// Rebuilds a holder's handle on this lock from its [`secret`](HolderHandle::secret),
    /// as handed to another process (a child's environment, say); [`reenter`](Self::reenter)
    /// then enters the hold it names, if that hold still holds the lock.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `secret` is not 32 hex digits, or this lock's name is
    /// invalid.
    pub fn holder_from_secret(&self, secret: &str) -> Result<HolderHandle> {
        validate_name("lock", &self.name)?;
        let owner = OwnerToken::parse(secret)
            .ok_or_else(|| Error::invalid("a holder secret is 32 hex digits"))?;
        Ok(HolderHandle {
            namespace: self.core.options().namespace.clone(),
            name: self.name.clone(),
            owner,
        })
    }

    crate::guard::scoped_run!("a hold of this lock", with_lock => acquire);
}

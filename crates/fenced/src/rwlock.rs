//! [`RwLock`]: many readers or one writer, across processes; writer-preferring.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tracing::Instrument;

use crate::backend::reads;
use crate::core::{Core, Held, LeaseOptions};
use crate::error::{Error, Result};
use crate::kind::exclusive::Exclusive;
use crate::kind::rw::{ReadLease, RwKeys, WriteLease};
use crate::options::ttl_millis;
use crate::token::OwnerToken;

/// A read-write lock: many readers at once, or one writer.
///
/// - **Writer-preferring.** A writer that waits is registered in Redis, and new readers wait
///   behind it, so a stream of readers cannot starve writers. A writer that gives up (its
///   wait runs out, or its future is dropped) leaves at once and wakes the readers it held
///   back; one whose process died is forgotten after a few poll intervals.
/// - **Each reader has its own lease**, renewed while its guard lives: a dead reader blocks
///   writers for at most its ttl.
/// - **A writer's release wakes every waiting reader at once**; a reader's release wakes
///   one waiter (a writer may be waiting for the last reader).
/// - **Fencing tokens** come from one counter: a writer's token is greater than every
///   reader's and writer's before it, and a reader's token is greater than the last writer's,
///   which proves it read after that writer.
/// - **No upgrade deadlock.** A read lease cannot be turned into a write lease: release it
///   and take the write lease. A `write` through a handle (or a clone of it) that still holds
///   a read guard fails at once instead of waiting for itself.
///
/// The writer holds the plain lock key of the name, so an `RwLock` writer and a plain
/// [`Lock`](crate::Lock) of the same name exclude each other.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// let catalogue = client.rw_lock("catalogue");
///
/// let r1 = catalogue.read().await?;
/// let r2 = catalogue.read().await?;           // readers share it
/// assert!(catalogue.try_write().await.is_err(), "this handle still reads: refused, not deadlocked");
/// drop((r1, r2));
/// let w = catalogue.write().await?;
/// assert!(catalogue.try_read().await?.is_none());
/// w.release().await?;                        // wakes every waiting reader
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct RwLock {
    core: Arc<Core>,
    name: Arc<str>,
    keys: Arc<RwKeys>,
    opts: LeaseOptions,
    /// Read guards alive from this handle and its clones.
    reading: Arc<AtomicUsize>,
}

impl fmt::Debug for RwLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .field("ttl", &self.opts.ttl(&self.core))
            .field("wait", &self.opts.wait)
            .finish()
    }
}

impl RwLock {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        let core = core.clone();
        let keys = Arc::new(RwKeys::new(&core.options().namespace, &name));
        RwLock {
            core,
            name: name.into(),
            keys,
            opts: LeaseOptions::default(),
            reading: Arc::new(AtomicUsize::new(0)),
        }
    }

    crate::core::held::lease_option_setters!();

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Live readers and waiting writers, read in one round trip (for display: who holds
    /// the write lease is the plain lock's [`status`](crate::Lock::status)), as one
    /// `MULTI`/`EXEC`: the members whose lease or registration ends after the server's now.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; [`Error::WrongType`] naming a key of
    /// another type; transport errors.
    pub async fn status(&self) -> Result<RwStatus> {
        crate::keys::validate_name("lock", &self.name)?;
        let reads = [
            redis::cmd("TIME"),
            reads::zrange_all(&self.keys.readers),
            reads::zrange_all(&self.keys.waiting_writers),
        ];
        let reply: Vec<u64> = self
            .core
            .node()?
            .read("rw status", &reads, reads::rw_status)
            .await?;
        match reply[..] {
            [readers, waiting_writers] => Ok(RwStatus {
                readers,
                waiting_writers,
            }),
            _ => Err(crate::kind::unexpected("rw status", format!("{reply:?}"))),
        }
    }

    fn read_attempt(&self) -> Result<(ReadLease, OwnerToken)> {
        let kind = ReadLease {
            name: self.name.clone(),
            keys: self.keys.clone(),
            fence_retention_ms: self.core.fence_retention_ms(),
        };
        Ok((kind, OwnerToken::fresh()?))
    }

    fn write_attempt(&self, waiter: &Arc<str>, waits: bool) -> Result<(WriteLease, OwnerToken)> {
        let options = self.core.options();
        let kind = WriteLease {
            exclusive: Exclusive {
                name: self.name.clone(),
                keys: self.keys.lock.clone(),
                fence_retention_ms: self.core.fence_retention_ms(),
                counted: true,
            },
            keys: self.keys.clone(),
            waiter: waiter.clone(),
            // A waiting writer retries at least every poll_max; a few of those, and the
            // registration of one whose process died lapses (one that gives up leaves at once).
            registration_ms: if waits {
                ttl_millis(options.poll_max * 3 + options.timeout * 2)
            } else {
                0
            },
        };
        Ok((kind, OwnerToken::fresh()?))
    }

    fn refuse_upgrade(&self) -> Result<()> {
        if self.reading.load(Ordering::SeqCst) > 0 {
            return Err(Error::WouldDeadlock(format!(
                "rw lock {:?}: this handle (or a clone) still holds a read guard, and a write now would wait for itself; release the read guard first",
                self.name
            )));
        }
        Ok(())
    }

    /// Takes a read lease, waiting by the [`WaitPolicy`](crate::WaitPolicy) while a writer holds or waits.
    ///
    /// # Errors
    ///
    /// [`Error::WouldDeadlock`] when this task holds the write lease; otherwise as
    /// [`Lock::acquire`](crate::Lock::acquire).
    pub async fn read(&self) -> Result<ReadGuard> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        // A write lease of this task's own keeps every reader out, this one too.
        self.core
            .refuse_waiting_for_itself("rw lock", &self.name, &self.keys.lock.lock, 1, 1)
            .await?;
        let req = self
            .opts
            .request(&self.name, &self.keys.lock.channel, ttl, usize::MAX);
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name, fenced.primitive = "rw_read", fenced.token = tracing::field::Empty);
        let held = self
            .core
            .acquire_with(&req, || self.read_attempt())
            .instrument(span)
            .await?;
        Ok(self.read_guard(held))
    }

    /// One read attempt, never waits: `None` while a writer holds or waits.
    ///
    /// # Errors
    ///
    /// As [`Lock::try_acquire`](crate::Lock::try_acquire).
    pub async fn try_read(&self) -> Result<Option<ReadGuard>> {
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        let req = self
            .opts
            .request(&self.name, &self.keys.lock.channel, ttl, usize::MAX);
        let granted = self.core.try_with(&req, || self.read_attempt()).await?;
        Ok(granted.map(|held| self.read_guard(held)))
    }

    /// Takes the write lease, waiting by the [`WaitPolicy`](crate::WaitPolicy) for the writer and every reader
    /// to leave; while it waits, new readers wait behind it.
    ///
    /// # Errors
    ///
    /// [`Error::WouldDeadlock`] when this handle (or a clone) holds a read guard, or this
    /// task holds the write lease already; otherwise as [`Lock::acquire`](crate::Lock::acquire).
    pub async fn write(&self) -> Result<WriteGuard> {
        self.refuse_upgrade()?;
        self.core
            .refuse_waiting_for_itself("rw lock", &self.name, &self.keys.lock.lock, 1, 1)
            .await?;
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        let req = self
            .opts
            .request(&self.name, &self.keys.lock.channel, ttl, 1);
        let waiter = waiter_id()?;
        // Until granted, this writer may be registered as waiting: it leaves at once if the
        // wait ends without the lease (its deadline, an error, or its future dropped).
        let mut registered = Registered {
            lock: self,
            waiter: Some(waiter.clone()),
        };
        let span = tracing::debug_span!("fenced.acquire", fenced.name = %self.name, fenced.primitive = "rw_write", fenced.token = tracing::field::Empty);
        let held = self
            .core
            .acquire_with(&req, || self.write_attempt(&waiter, true))
            .instrument(span)
            .await?;
        registered.waiter = None;
        Ok(WriteGuard { held })
    }

    /// One write attempt, never waits: `None` while anybody holds it. A refused attempt does
    /// not register as a waiting writer, so it never holds readers back.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write), without the waiting.
    pub async fn try_write(&self) -> Result<Option<WriteGuard>> {
        self.refuse_upgrade()?;
        let ttl = self.opts.checked_ttl(&self.core, "lock", &self.name)?;
        let req = self
            .opts
            .request(&self.name, &self.keys.lock.channel, ttl, 1);
        let waiter = waiter_id()?;
        let granted = self
            .core
            .try_with(&req, || self.write_attempt(&waiter, false))
            .await?;
        Ok(granted.map(|held| WriteGuard { held }))
    }

    fn read_guard(&self, held: Held) -> ReadGuard {
        self.reading.fetch_add(1, Ordering::SeqCst);
        ReadGuard {
            held,
            _reading: Reading(self.reading.clone()),
        }
    }
}

/// What [`RwLock::status`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwStatus {
    /// Readers holding a live lease.
    pub readers: u64,
    /// Writers registered as waiting (new readers wait behind them).
    pub waiting_writers: u64,
}

/// The id a waiting writer registers under: the same for every attempt of one `write()`.
fn waiter_id() -> Result<Arc<str>> {
    Ok(OwnerToken::fresh()?.as_str()[..16].into())
}

/// A waiting writer's registration, given up (in the background) when dropped still armed.
struct Registered<'a> {
    lock: &'a RwLock,
    waiter: Option<Arc<str>>,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        let Some(waiter) = self.waiter.take() else {
            return;
        };
        // The writer's abandon under a fresh owner nobody holds: it only leaves the waiting
        // writers (its tombstone for that owner expires unused).
        if let Ok((kind, nobody)) = self.lock.write_attempt(&waiter, true) {
            let patience = self.lock.core.timeout() * 2;
            self.lock
                .core
                .abandon_in_background(Arc::new(kind), nobody, patience);
        }
    }
}

/// Counts a live read guard of a handle family.
struct Reading(Arc<AtomicUsize>);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A read lease of an [`RwLock`]. Owned, `Send + 'static`; given back on
/// [`release`](Self::release) or drop, renewed while it lives.
#[must_use = "dropping the guard gives the read lease back at once"]
pub struct ReadGuard {
    held: Held,
    _reading: Reading,
}

impl fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard")
            .field("name", &self.held.lease().name())
            .field("fencing_token", &self.fencing_token())
            .finish()
    }
}

crate::guard::lease_accessors!(ReadGuard);

impl ReadGuard {
    /// Gives the read lease back; the last reader's release lets a waiting writer in.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] at once, without a round trip, when the lease was already known
    /// lost; [`Error::NotHeld`] when the lease had already ended; transport errors.
    pub async fn release(self) -> Result<()> {
        let ReadGuard { held, _reading } = self;
        held.release().await.map(|_| ())
    }
}

/// The write lease of an [`RwLock`]. Owned, `Send + 'static`; given back on
/// [`release`](Self::release) or drop, renewed while it lives.
#[must_use = "dropping the guard gives the write lease back at once"]
pub struct WriteGuard {
    held: Held,
}

impl fmt::Debug for WriteGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteGuard")
            .field("name", &self.held.lease().name())
            .field("fencing_token", &self.fencing_token())
            .finish()
    }
}

crate::guard::lease_accessors!(WriteGuard);

impl WriteGuard {
    /// Gives the write lease back and wakes every waiting reader (and writer).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] at once, without a round trip, when the lease was already known
    /// lost; [`Error::NotHeld`] when the lease had already ended; transport errors.
    pub async fn release(self) -> Result<()> {
        self.held.release().await.map(|_| ())
    }
}

/// Scoped runs.
impl RwLock {
    crate::guard::scoped_run!("a read lease", with_read => read);
    crate::guard::scoped_run!("the write lease", with_write => write);
}

//! Every lock under test behind one small interface: `fenced`, the raw floor, and rslock, all
//! async. redlock is synchronous and runs in its own loops (see `locks.rs`).

use std::sync::Arc;
use std::time::Duration;

use crate::raw::RawLock;
use crate::scenario::{BoxError, Env, Library};

/// The lease every library asks for.
pub(crate) const TTL: Duration = Duration::from_secs(30);

/// One lock name, as one library takes it.
pub(crate) enum Locker {
    Fenced(fenced::Lock),
    Unfenced(fenced::UnfencedLock),
    Raw(RawLock),
    Rslock(Arc<rslock::LockManager>, String),
}

/// A held lock.
pub(crate) enum Held {
    Fenced(fenced::LockGuard),
    Unfenced(fenced::UnfencedGuard),
    Raw(String),
    Rslock(rslock::Lock),
}

impl Locker {
    /// A locker for `name`; `rslock` shares one manager per scenario, as its docs advise.
    pub(crate) fn new(
        library: Library,
        name: &str,
        env: &Env,
        rslock: &Arc<rslock::LockManager>,
    ) -> Result<Self, BoxError> {
        Ok(match library {
            Library::Fenced => Locker::Fenced(env.fenced.lock(name).with_ttl(TTL)),
            Library::FencedScripted => Locker::Fenced(env.scripted.lock(name).with_ttl(TTL)),
            Library::FencedNoScripts => Locker::Fenced(env.no_scripts.lock(name).with_ttl(TTL)),
            Library::FencedUnfenced => {
                Locker::Unfenced(env.fenced.lock(name).with_ttl(TTL).unfenced())
            }
            Library::Raw => Locker::Raw(RawLock::new(env.raw.clone(), name)),
            Library::Rslock => Locker::Rslock(rslock.clone(), name.to_owned()),
            other => return Err(format!("{} is not an async lock", other.name()).into()),
        })
    }

    /// One attempt that must succeed (the name is not contended).
    pub(crate) async fn take(&mut self) -> Result<Held, BoxError> {
        Ok(match self {
            Locker::Fenced(lock) => Held::Fenced(
                lock.try_acquire()
                    .await?
                    .ok_or("fenced lock unexpectedly held")?,
            ),
            Locker::Unfenced(lock) => Held::Unfenced(
                lock.try_acquire()
                    .await?
                    .ok_or("unfenced lock unexpectedly held")?,
            ),
            Locker::Raw(raw) => Held::Raw(
                raw.try_acquire()
                    .await?
                    .ok_or("raw lock unexpectedly held")?,
            ),
            Locker::Rslock(manager, name) => {
                Held::Rslock(manager.lock(name.as_bytes(), TTL).await?)
            }
        })
    }

    /// Waits for the lock the library's own way: `fenced` by notification, raw by polling
    /// every 1ms, rslock by its endless retry loop (3 tries 0–200ms apart, then again).
    pub(crate) async fn wait(&mut self) -> Result<Held, BoxError> {
        Ok(match self {
            Locker::Fenced(lock) => Held::Fenced(lock.acquire().await?),
            Locker::Unfenced(lock) => Held::Unfenced(lock.acquire().await?),
            Locker::Raw(raw) => Held::Raw(raw.acquire_polling().await?),
            Locker::Rslock(manager, name) => {
                Held::Rslock(manager.acquire_no_guard(name.as_bytes(), TTL).await?)
            }
        })
    }

    pub(crate) async fn release(&mut self, held: Held) -> Result<(), BoxError> {
        match (self, held) {
            (_, Held::Fenced(guard)) => guard.release().await?,
            (_, Held::Unfenced(guard)) => guard.release().await?,
            (Locker::Raw(raw), Held::Raw(token)) => {
                raw.release(&token).await?;
            }
            (_, Held::Rslock(lock)) => lock.release().await,
            _ => return Err("released with the wrong locker".into()),
        }
        Ok(())
    }
}

/// The shared rslock manager of a scenario.
pub(crate) fn rslock_manager(url: &str) -> Arc<rslock::LockManager> {
    Arc::new(rslock::LockManager::new(vec![url.to_owned()]))
}

/// The shared redlock instance of a scenario (it opens a connection per command anyway).
pub(crate) fn redlock(url: &str) -> Arc<redlock::RedLock> {
    Arc::new(redlock::RedLock::new(vec![url.to_owned()]))
}

/// redlock takes its ttl as a `usize` of milliseconds.
pub(crate) fn redlock_ttl() -> usize {
    usize::try_from(TTL.as_millis()).unwrap_or(usize::MAX)
}

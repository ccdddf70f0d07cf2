//! [`Latch`]: a countdown latch across processes. Waiters are woken by the count down that
//! opens it (one message wakes them all), with the usual polling fallback.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tracing::Instrument;

use crate::core::{Core, Wake};
use crate::error::{Awaited, Error, Result};
use crate::keys::validate_name;
use crate::kind::unexpected;
use crate::options::{MAX_TTL, ttl_millis};
use crate::scripts::{LATCH_ARM, LATCH_COUNT_DOWN, ScriptCall};
use crate::wait::WaitPolicy;

/// A countdown latch: armed with a count, counted down by anyone, open at 0. Waiters wait
/// until it opens.
///
/// The latch is one Redis key that expires by itself after its lifetime (default 24h), open
/// or not, so nothing is left behind. A latch that does not exist (never armed, or expired)
/// counts as open: arm it before its waiters start, as you would construct a
/// `std::sync::Barrier` before sharing it. Re-arming is allowed once it is open (or gone);
/// arming a latch that is still counting is refused, so two coordinators cannot reset each
/// other's count.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// let ready = client.latch("deploy:2026-11-23:shards-ready");
/// assert!(ready.arm(2).await?);
///
/// let waiter = tokio::spawn({
///     let ready = ready.clone();
///     async move { ready.wait().await }
/// });
/// assert_eq!(ready.count_down().await?, Some(1));
/// assert_eq!(ready.count_down().await?, Some(0));   // open: every waiter wakes
/// waiter.await.expect("task")?;
/// assert_eq!(ready.count().await?, Some(0));
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct Latch {
    core: Arc<Core>,
    name: Arc<str>,
    key: Arc<str>,
    channel: Arc<str>,
    lifetime: Duration,
    wait: WaitPolicy,
}

impl fmt::Debug for Latch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Latch")
            .field("name", &self.name)
            .field("lifetime", &self.lifetime)
            .field("wait", &self.wait)
            .finish()
    }
}

impl Latch {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        let core = core.clone();
        let key = format!("{}{{{name}}}:latch", core.options().namespace);
        Latch {
            core,
            name: name.into(),
            channel: format!("{key}:opened").into(),
            key: key.into(),
            lifetime: Duration::from_secs(24 * 3600),
            wait: WaitPolicy::FOREVER,
        }
    }

    /// How long the latch's key lives after [`arm`](Self::arm), open or not (default 24h).
    pub fn with_lifetime(mut self, lifetime: Duration) -> Self {
        self.lifetime = lifetime;
        self
    }

    /// How long [`wait`](Self::wait) waits (default: no limit).
    pub fn with_wait(mut self, policy: WaitPolicy) -> Self {
        self.wait = policy;
        self
    }

    /// The latch's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Arms the latch with `count`. Returns `false` (and changes nothing) when it is armed
    /// and still counting.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a count of 0 or a lifetime out of range (1ms to one
    /// year); transport errors. With replica acknowledgements,
    /// [`Error::NotReplicated`](crate::Error::NotReplicated) means the latch WAS armed on the
    /// master (a second `arm` would answer `false`).
    pub async fn arm(&self, count: u64) -> Result<bool> {
        validate_name("latch", &self.name)?;
        if count == 0 || count > crate::limits::MAX_STOCK {
            return Err(Error::invalid(format!(
                "a latch counts from 1 to {}, not {count}",
                crate::limits::MAX_STOCK
            )));
        }
        if self.lifetime < Duration::from_millis(1) || self.lifetime > MAX_TTL {
            return Err(Error::invalid(format!(
                "latch lifetime {:?} is out of range (1ms to one year)",
                self.lifetime
            )));
        }
        let call = ScriptCall::new(&LATCH_ARM)
            .key(&*self.key)
            .arg(count)
            .arg(ttl_millis(self.lifetime));
        let armed: i64 = self
            .core
            .backend()
            .node_for("a latch")?
            .run_replicated(&call)
            .await?;
        Ok(armed == 1)
    }

    /// Counts down by one. Returns the count left (`Some(0)`: open), or `None` when the latch
    /// does not exist. The count down that opens it wakes every waiter, in every process.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors (after a timeout, the count
    /// down may or may not have happened). With replica acknowledgements,
    /// [`Error::NotReplicated`](crate::Error::NotReplicated) means the count down WAS applied
    /// on the master: do not count down again (read [`count`](Self::count) instead).
    pub async fn count_down(&self) -> Result<Option<u64>> {
        validate_name("latch", &self.name)?;
        let call = ScriptCall::new(&LATCH_COUNT_DOWN)
            .key(&*self.key)
            .arg(&*self.channel)
            .arg(&*self.core.release_message(Wake::All));
        let (reply, short) = self
            .core
            .backend()
            .node_for("a latch")?
            .run_acked(&call)
            .await?;
        let left: i64 = redis::from_redis_value(reply)
            .map_err(|e| unexpected("latch count down", e.to_string()))?;
        if left == 0 {
            // Our own message is skipped by our pub/sub task: wake this process directly,
            // replicated or not (the master's latch is open either way).
            self.core.wake_local(&self.channel, Wake::All);
        }
        if let Some(short) = short {
            return Err(short.error("latch count down"));
        }
        Ok(u64::try_from(left).ok())
    }

    /// The count left (`Some(0)`: open), or `None` when the latch does not exist.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors.
    pub async fn count(&self) -> Result<Option<u64>> {
        validate_name("latch", &self.name)?;
        let raw: Option<String> = self
            .core
            .backend()
            .node_for("a latch")?
            .query("latch count", redis::cmd("GET").arg(&*self.key))
            .await?;
        raw.map(|v| {
            v.parse::<u64>()
                .map_err(|_| unexpected("latch count", format!("{v:?} is not a count")))
        })
        .transpose()
    }

    /// Waits until the latch is open (or does not exist), by the latch's [`WaitPolicy`].
    ///
    /// # Errors
    ///
    /// [`Error::NotAcquired`] when the wait's deadline or attempt limit is reached first;
    /// transport errors that outlast the wait.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: waiting changes nothing in Redis.
    pub async fn wait(&self) -> Result<()> {
        validate_name("latch", &self.name)?;
        let span = tracing::debug_span!("fenced.latch.wait", latch = %self.name);
        self.core
            .wait_until(&self.name, &self.channel, self.wait, || async {
                Ok(match self.count().await? {
                    None | Some(0) => Ok(()),
                    Some(_) => Err(None),
                })
            })
            .instrument(span)
            .await
            .map_err(|e| e.waited_for(Awaited::Latch))
    }
}

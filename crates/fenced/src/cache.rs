//! [`Cache`]: read-through caching that protects the source from stampedes.
//!
//! Invariants:
//! 1. One computer per missing entry across every process: the compute runs under the entry's
//!    lock, and whoever takes the lock for a missing or expired entry reads it again before
//!    computing, so a value stored between a caller's read and its grant is served, not
//!    computed twice. (An early refresh does not read again: at worst two refreshes of a
//!    fresh entry follow each other.)
//! 2. One Redis reader per entry per handle in a process: callers that find a flight already
//!    under way for their entry wait for its result instead of reading (the local single
//!    flight). They get the cached value as soon as it is read, before any refresh runs; a
//!    flight that fails or is cancelled wakes them, and one of them flies next.
//! 3. A follower takes only a value that Redis vouched for after its call started: a flight
//!    lands its value with the moment the read (or the store) that produced it was sent, and
//!    a caller that started later flies again. So a call that starts after an
//!    [`invalidate`](Cache::invalidate) returned, in any process, never gets what was read
//!    before it. The callers one flight turned away all started before the next flight's
//!    read, so they share that one: a burst on a fresh entry costs two reads, not one each.
//! 4. A store is fenced: it carries the computer's fencing token and is refused once the
//!    entry's fence has passed it (a newer grant, or an [`invalidate`](Cache::invalidate)),
//!    so a computer that was paused, or that read the source before a change, never
//!    overwrites what is known now. A refused value goes to its computer only, never to the
//!    followers, who may have seen the invalidation.
//! 5. Freshness is decided by Redis alone: the entry's remaining `PTTL` on the server, never a
//!    client clock.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

use crate::core::{Core, metrics};
use crate::error::{Awaited, Error, Result};
use crate::guard::{Lease, LockGuard};
use crate::keys::validate_name;
use crate::kind::unexpected;
use crate::lock::Lock;
use crate::options::{MAX_TTL, ttl_millis};
use crate::scripts::{CACHE_INVALIDATE, CACHE_STORE, ScriptCall};
use crate::token::FencingToken;
use crate::util::{lock_unpoisoned, random_fraction};
use crate::wait::WaitPolicy;

/// What a caller of one local flight receives: `None` while it flies, then what it landed.
type Flight = watch::Receiver<Option<Landed>>;

/// A flight's result: the entry's value (`None`: the source has no value), and when the Redis
/// call that vouched for it (a read, or the store of a computed value) was sent.
#[derive(Clone)]
struct Landed {
    value: Option<Vec<u8>>,
    vouched_at: Instant,
}

/// A read-through cache in Redis whose misses are computed once, across every process.
///
/// [`get_or_compute`](Self::get_or_compute) serves a cached value, or, on a miss, lets
/// exactly one caller run the computation (under a [`Lock`] of the entry) while the others
/// wait for its value: they are woken by the store itself, not by polling. It also covers the
/// other classic cache failures:
///
/// - **breakdown** (a hot key expires and a thousand requests rebuild it at once): one
///   computer per entry across all processes, and one Redis read per entry per process;
/// - **penetration** (requests for keys that do not exist reach the source every time): a
///   compute that returns `Ok(None)` is cached as "no value" for
///   [`with_negative_ttl`](Self::with_negative_ttl);
/// - **avalanche** (many keys expiring at once): each entry's ttl is stretched by a random
///   fraction up to [`with_jitter`](Self::with_jitter);
/// - **early refresh**: with [`with_early_refresh`](Self::with_early_refresh), a caller may
///   recompute a little before expiry, more likely the closer the expiry and the slower the
///   compute (XFetch, Vattani et al., VLDB 2015), so a hot key never expires in front of its
///   readers;
/// - **stale reads**: with [`with_stale_for`](Self::with_stale_for), an expired value is kept
///   a while longer and served while one caller recomputes it.
///
/// The compute receives the [`Lease`] of the entry's lock (for its fencing token and lost
/// signal); it is cancelled if the lease is lost. Its store is fenced: a computer whose lease
/// was lost (it was paused, say) or whose entry was invalidated while it ran cannot store its
/// value (see [`invalidate`](Self::invalidate)).
///
/// An entry `key` of cache `name` is the lock named `"{name}:{key}"`, with the hash
/// `<ns>{<name>:<key>}:cached` next to the lock's keys: field `v` the value (absent for "no
/// value"), `d` how long the compute took (µs), `s` the stale grace the writer kept (ms).
/// Entry names are `"{name}:{key}"`: cache `a` with key `b:c` and cache `a:b` with key `c`
/// are the same entry, so keep cache names free of `:` or distinct as prefixes.
///
/// Clones share their local flights; separate handles from [`Client::cache`](crate::Client::cache) do not (each
/// reads Redis once per flight).
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// use std::time::Duration;
///
/// let client = fenced::Client::connect(&url).await?;
/// let products = client.cache("product");
///
/// let load = |id: u64| async move {
///     // ... the expensive query; `Ok(None)` when the product does not exist ...
///     Ok::<_, fenced::Error>(Some(format!("product {id}").into_bytes()))
/// };
/// let value = products
///     .get_or_compute("42", Duration::from_secs(60), |_lease| load(42))
///     .await?;
/// assert_eq!(value.as_deref(), Some(&b"product 42"[..]));
///
/// // A hit: the compute does not run again.
/// let again = products
///     .get_or_compute("42", Duration::from_secs(60), |_lease| async {
///         Ok::<_, fenced::Error>(Some(b"not asked".to_vec()))
///     })
///     .await?;
/// assert_eq!(again, value);
///
/// // The product changed: drop the entry, and fence off any compute still running.
/// assert!(products.invalidate("42").await?);
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct Cache {
    core: Arc<Core>,
    name: Arc<str>,
    jitter: f64,
    negative_ttl: Duration,
    stale_for: Duration,
    early_refresh: f64,
    wait: WaitPolicy,
    lease_ttl: Option<Duration>,
    flights: Arc<Mutex<HashMap<String, Flight>>>,
}

impl fmt::Debug for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cache")
            .field("name", &self.name)
            .field("jitter", &self.jitter)
            .field("negative_ttl", &self.negative_ttl)
            .field("stale_for", &self.stale_for)
            .field("early_refresh", &self.early_refresh)
            .field("wait", &self.wait)
            .finish()
    }
}

/// What one read of an entry found.
#[derive(Debug, PartialEq)]
enum Found {
    /// Within its ttl: `remaining_us` of freshness left (`u64::MAX`: the key does not expire),
    /// and how long its compute took.
    Fresh {
        value: Option<Vec<u8>>,
        remaining_us: u64,
        compute_us: u64,
    },
    /// Past its ttl, within its stale grace.
    Stale { value: Option<Vec<u8>> },
    /// No entry (or a stale one this handle does not serve).
    Missing,
}

/// What a caller does after a read (and perhaps a lock attempt).
enum Next {
    /// Serve this value.
    Serve { value: Option<Vec<u8>>, stale: bool },
    /// Compute under this guard. `cached`: the value read (a refresh or a stale entry), for
    /// the followers and as the fallback of a failed refresh. `recheck`: the entry was missing
    /// or stale when read, so read it again under the lock first (invariant 1).
    Compute {
        guard: LockGuard,
        cached: Option<Option<Vec<u8>>>,
        recheck: bool,
    },
}

/// The Redis names of one entry.
struct Entry {
    lock: Lock,
    cached: String,
}

impl Cache {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        Cache {
            core: core.clone(),
            name: name.into(),
            jitter: 0.1,
            negative_ttl: Duration::from_secs(5),
            stale_for: Duration::ZERO,
            early_refresh: 0.0,
            wait: WaitPolicy::up_to(Duration::from_secs(30)),
            lease_ttl: None,
            flights: Arc::default(),
        }
    }

    /// The cache's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Stretches every entry's ttl by a random fraction in `[0, jitter]` of it (default 0.1),
    /// so entries stored together do not all expire together. `0` turns it off; at most 1.
    pub fn with_jitter(mut self, jitter: f64) -> Self {
        self.jitter = jitter;
        self
    }

    /// How long a "no value" result (`Ok(None)` from the compute) is cached (default 5s).
    pub fn with_negative_ttl(mut self, ttl: Duration) -> Self {
        self.negative_ttl = ttl;
        self
    }

    /// Keeps entries `grace` past their ttl and serves them, stale, while one caller computes
    /// the new value (default: zero, never serve stale). Callers that cannot take the entry's
    /// lock get the stale value at once instead of waiting, and a failed recompute serves it
    /// too. A reader serves an entry at most its own `grace` past the ttl, whatever grace the
    /// writer kept it for.
    pub fn with_stale_for(mut self, grace: Duration) -> Self {
        self.stale_for = grace;
        self
    }

    /// Early refresh with XFetch's `beta` (default 0: off; 1.0 is the usual choice, more
    /// refreshes earlier). A caller reading a fresh entry recomputes it when
    /// `compute time × beta × −ln(random) ≥ time left`; at most one at a time does (it must
    /// take the entry's lock without waiting), and the others are served the cached value. A
    /// refresh that fails serves the cached value to its caller too.
    pub fn with_early_refresh(mut self, beta: f64) -> Self {
        self.early_refresh = beta;
        self
    }

    /// How long a caller waits for another caller's compute (default: 30s). Past it,
    /// [`Error::NotAcquired`].
    pub fn with_wait(mut self, policy: WaitPolicy) -> Self {
        self.wait = policy;
        self
    }

    /// The lease of the entry's lock while a compute runs (default: the client's ttl). It is
    /// renewed while the compute runs; it only bounds how long a crashed computer blocks the
    /// entry.
    pub fn with_lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = Some(ttl);
        self
    }

    /// Returns the entry's value, computing it on a miss: exactly one caller across every
    /// process runs `compute` while the others wait for its value (by the cache's
    /// [`WaitPolicy`]). `Ok(None)` from `compute` means "no such value" and is cached for the
    /// negative ttl; `ttl` is how long a value stays fresh (before jitter).
    ///
    /// `compute` runs under the entry's lock and receives its [`Lease`]; it is dropped at its
    /// next await if the lease is lost. A value that cannot be stored (Redis failed, or the
    /// store was fenced off by a newer grant or an invalidation) is still returned to the
    /// caller that computed it.
    ///
    /// # Errors
    ///
    /// The compute's own error, for the caller that ran it (callers waiting for it are woken
    /// and one of them computes next). [`Error::InvalidArgument`] for a bad key or settings;
    /// [`Error::NotAcquired`] when the wait ran out; [`Error::LeaseLost`] when the lease ended
    /// before the compute did; transport errors of the read, converted with `From`.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future gives the entry's lock back (in the background) and wakes the
    /// callers waiting on this one.
    pub async fn get_or_compute<F, Fut, E>(
        &self,
        key: &str,
        ttl: Duration,
        compute: F,
    ) -> Result<Option<Vec<u8>>, E>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = Result<Option<Vec<u8>>, E>>,
        E: From<Error>,
    {
        let span = tracing::debug_span!("fenced.cache.get_or_compute", cache = %self.name, key);
        async move {
            let entry = self.entry(key)?;
            self.check_settings(ttl)?;
            let started = Instant::now();
            let deadline = match self.wait.deadline() {
                Some(d) => Some(started.checked_add(d).ok_or_else(|| {
                    Error::invalid(format!("wait deadline {d:?} overflows the clock"))
                })?),
                None => None,
            };
            loop {
                match self.join_flight(entry.lock.name()) {
                    Err(mut flight) => {
                        let done = async {
                            flight
                                .wait_for(Option::is_some)
                                .await
                                .map(|landed| landed.clone())
                        };
                        let outcome = match deadline {
                            Some(at) => tokio::time::timeout_at(at, done).await.map_err(|_| {
                                Error::NotAcquired {
                                    what: Awaited::CacheEntry,
                                    name: entry.lock.name().to_owned(),
                                    waited: started.elapsed(),
                                    attempts: 0,
                                }
                            })?,
                            None => done.await,
                        };
                        // Err: the flight failed or was cancelled; and a value vouched for
                        // before this call started may predate an invalidation it must see
                        // (invariant 3). Either way, fly (or follow) the next one. Against
                        // the call's start, not this turn's: the callers one flight turned
                        // away then all share the next, instead of reading one by one.
                        if let Ok(Some(landed)) = outcome
                            && landed.vouched_at >= started
                        {
                            metrics::cache_lookup("shared");
                            return Ok(landed.value);
                        }
                    }
                    Ok(flight) => {
                        let wait = match deadline {
                            Some(at) => {
                                WaitPolicy::up_to(at.saturating_duration_since(Instant::now()))
                            }
                            None => WaitPolicy::FOREVER,
                        };
                        let wait = match self.wait.max_attempts() {
                            Some(n) => wait.with_max_attempts(n),
                            None => wait,
                        };
                        return self.fetch(&entry, ttl, wait, compute, flight).await;
                    }
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Drops the entry and raises its fence, so that a compute already running cannot store
    /// a value it may have read before the change that made you invalidate. The next
    /// [`get_or_compute`](Self::get_or_compute) computes afresh. Returns whether an entry
    /// was there.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; transport errors (after a timeout the entry
    /// may or may not be gone).
    pub async fn invalidate(&self, key: &str) -> Result<bool> {
        let entry = self.entry(key)?;
        let call = ScriptCall::new(&CACHE_INVALIDATE)
            .key(&entry.cached)
            .key(&entry.lock.keys().fence)
            .arg(self.core.fence_retention_ms());
        let dropped: i64 = self
            .core
            .backend()
            .node_for("a cache")?
            .run_replicated(&call)
            .await?;
        Ok(dropped == 1)
    }

    /// Reads the entry without computing: `None` when there is none (or only a stale one this
    /// handle does not serve), `Some(None)` for a cached "no value", `Some(Some(v))` for a
    /// value, fresh or (with [`with_stale_for`](Self::with_stale_for)) stale.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; transport errors.
    pub async fn get(&self, key: &str) -> Result<Option<Option<Vec<u8>>>> {
        let entry = self.entry(key)?;
        Ok(match self.read(&entry).await? {
            Found::Fresh { value, .. } | Found::Stale { value } => Some(value),
            Found::Missing => None,
        })
    }

    fn entry(&self, key: &str) -> Result<Entry> {
        validate_name("cache", &self.name)?;
        if key.is_empty() {
            return Err(Error::invalid("cache key is empty"));
        }
        let name = format!("{}:{key}", self.name);
        validate_name("cache entry", &name)?;
        // The store compares the computer's token with the fence: grants by script, so that
        // refused attempts do not count past it.
        let mut lock = crate::Lock::new(&self.core, name).granted_by_script();
        if let Some(ttl) = self.lease_ttl {
            lock = lock.with_ttl(ttl);
        }
        let cached = format!("{}:cached", lock.keys().lock);
        Ok(Entry { lock, cached })
    }

    fn check_settings(&self, ttl: Duration) -> Result<()> {
        for (what, d) in [("cache ttl", ttl), ("negative ttl", self.negative_ttl)] {
            if d < Duration::from_millis(1) || d > MAX_TTL {
                return Err(Error::invalid(format!(
                    "{what} {d:?} is out of range (1ms to one year)"
                )));
            }
        }
        if self.stale_for > MAX_TTL {
            return Err(Error::invalid(format!(
                "stale grace {:?} is above one year",
                self.stale_for
            )));
        }
        if !(0.0..=1.0).contains(&self.jitter) {
            return Err(Error::invalid(format!(
                "cache jitter {} is not a fraction from 0 to 1",
                self.jitter
            )));
        }
        if !(self.early_refresh.is_finite() && self.early_refresh >= 0.0) {
            return Err(Error::invalid(format!(
                "early refresh beta {} is not a finite number ≥ 0",
                self.early_refresh
            )));
        }
        Ok(())
    }

    /// Joins the local flight of `name`: `Ok` to fly it (nobody else in this handle is), `Err`
    /// with the flight to wait for.
    fn join_flight(&self, name: &str) -> std::result::Result<Pilot, Flight> {
        let mut flights = lock_unpoisoned(&self.flights);
        if let Some(flight) = flights.get(name) {
            return Err(flight.clone());
        }
        let (tx, rx) = watch::channel(None);
        flights.insert(name.to_owned(), rx.clone());
        Ok(Pilot {
            flights: self.flights.clone(),
            name: name.to_owned(),
            rx,
            tx,
        })
    }

    /// The Redis side of one flight: read, and on a miss take the entry's lock or wait for
    /// whoever has it. Lands the flight for the local followers as soon as a value they may
    /// have is known: a cached one before a refresh, a computed one once it is stored.
    async fn fetch<F, Fut, E>(
        &self,
        entry: &Entry,
        ttl: Duration,
        wait: WaitPolicy,
        compute: F,
        pilot: Pilot,
    ) -> Result<Option<Vec<u8>>, E>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = Result<Option<Vec<u8>>, E>>,
        E: From<Error>,
    {
        let mut reads = 0u32;
        let mut read_at = Instant::now();
        let core = &self.core;
        let next = core
            .wait_until(entry.lock.name(), &entry.lock.keys().channel, wait, || {
                reads += 1;
                // Taken before the read is sent: no later than Redis answered it.
                read_at = Instant::now();
                async move {
                    Ok(match self.read(entry).await? {
                        Found::Fresh {
                            value,
                            remaining_us,
                            compute_us,
                        } if self.refresh_now(remaining_us, compute_us) => {
                            match entry.lock.try_acquire().await? {
                                Some(guard) => Ok(Next::Compute {
                                    guard,
                                    cached: Some(value),
                                    recheck: false,
                                }),
                                None => Ok(Next::Serve {
                                    value,
                                    stale: false,
                                }),
                            }
                        }
                        Found::Fresh { value, .. } => Ok(Next::Serve {
                            value,
                            stale: false,
                        }),
                        Found::Stale { value } => match entry.lock.try_acquire().await? {
                            Some(guard) => Ok(Next::Compute {
                                guard,
                                cached: Some(value),
                                recheck: true,
                            }),
                            None => Ok(Next::Serve { value, stale: true }),
                        },
                        Found::Missing => match entry.lock.try_acquire().await? {
                            Some(guard) => Ok(Next::Compute {
                                guard,
                                cached: None,
                                recheck: true,
                            }),
                            None => Err(None),
                        },
                    })
                }
            })
            .await
            .map_err(|e| e.waited_for(Awaited::CacheEntry))?;
        // A value found after waiting was computed by somebody else.
        let waited = reads > 1;
        let (guard, cached, recheck) = match next {
            Next::Serve { value, stale } => {
                metrics::cache_lookup(match (stale, waited) {
                    (true, _) => "stale",
                    (false, true) => "shared",
                    (false, false) => "hit",
                });
                pilot.land(&value, read_at);
                return Ok(value);
            }
            Next::Compute {
                guard,
                cached,
                recheck,
            } => (guard, cached, recheck),
        };
        let recheck_at = Instant::now();
        if recheck && let Found::Fresh { value, .. } = self.read(entry).await? {
            // Stored between our read and our grant (invariant 1).
            metrics::cache_lookup("shared");
            release_quietly(guard).await;
            pilot.land(&value, recheck_at);
            return Ok(value);
        }
        metrics::cache_lookup("computed");
        // Followers need not wait for a refresh: they get what is cached (invariant 2).
        let pilot = match &cached {
            Some(value) => {
                pilot.land(value, read_at);
                None
            }
            None => Some(pilot),
        };
        let (value, stored) = match self.compute_and_store(entry, ttl, guard, compute).await {
            Ok(done) => done,
            Err(e) => {
                return match cached {
                    // A failed refresh leaves the cached value in place: serve it.
                    Some(value) => {
                        tracing::debug!(entry = %entry.lock.name(), "fenced: cache refresh failed; serving the cached value");
                        Ok(value)
                    }
                    None => Err(e),
                };
            }
        };
        // A refused value may predate an invalidation that callers after it have seen, and a
        // value whose store failed was vouched for by nobody: only its computer gets it;
        // followers read again (invariant 4).
        if let Some(pilot) = pilot
            && let Some(stored_at) = stored
        {
            pilot.land(&value, stored_at);
        }
        Ok(value)
    }

    /// Runs the compute under `guard` and stores its value. `Ok((value, stored))`: `stored`
    /// is when the store that Redis accepted was sent; `None` when it was refused (fenced
    /// off) or failed on the way (the value then goes to its computer only).
    async fn compute_and_store<F, Fut, E>(
        &self,
        entry: &Entry,
        ttl: Duration,
        guard: LockGuard,
        compute: F,
    ) -> Result<(Option<Vec<u8>>, Option<Instant>), E>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = Result<Option<Vec<u8>>, E>>,
        E: From<Error>,
    {
        let lease = guard.lease();
        let started = Instant::now();
        let computed = tokio::select! {
            biased;
            _ = lease.lost() => None,
            out = compute(lease.clone()) => Some(out),
        };
        let value = match computed {
            None => {
                metrics::cache_computed("failed");
                // Its cause is named before the drop gives the lease back.
                let cause = lease.lost_cause();
                drop(guard);
                return Err(Error::LeaseLost {
                    name: entry.lock.name().to_owned(),
                    fencing_token: lease.fencing_token(),
                    cause,
                }
                .into());
            }
            Some(Err(e)) => {
                metrics::cache_computed("failed");
                release_quietly(guard).await;
                return Err(e);
            }
            Some(Ok(value)) => value,
        };
        let compute_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let store_at = Instant::now();
        let stored = match self
            .store(
                entry,
                lease.fencing_token(),
                ttl,
                compute_us,
                value.as_deref(),
            )
            .await
        {
            Ok(true) => {
                metrics::cache_computed("stored");
                Some(store_at)
            }
            Ok(false) => {
                metrics::cache_computed("refused");
                tracing::debug!(entry = %entry.lock.name(), "fenced: cache store refused; a newer grant or an invalidation came first");
                None
            }
            // A missing permission is a configuration error: said loudly, not logged away.
            Err(e @ Error::Permission { .. }) => {
                metrics::cache_computed("failed");
                release_quietly(guard).await;
                return Err(e.into());
            }
            Err(e) => {
                metrics::cache_computed("failed");
                tracing::warn!(entry = %entry.lock.name(), error = %e, "fenced: cache store failed; the value is returned but not cached");
                None
            }
        };
        release_quietly(guard).await;
        Ok((value, stored))
    }

    /// XFetch: recompute early with probability rising as expiry nears.
    fn refresh_now(&self, remaining_us: u64, compute_us: u64) -> bool {
        if self.early_refresh <= 0.0 || remaining_us == u64::MAX {
            return false;
        }
        let gap = compute_us as f64 * self.early_refresh * -random_fraction().ln();
        gap >= remaining_us as f64
    }

    /// One round trip: the entry's fields and its remaining life, as one snapshot (one
    /// `MULTI`/`EXEC`).
    async fn read(&self, entry: &Entry) -> Result<Found> {
        let reads = [
            redis::cmd("HMGET")
                .arg(&entry.cached)
                .arg(&["v", "d", "s"])
                .take(),
            redis::cmd("PTTL").arg(&entry.cached).take(),
        ];
        let (fields, pttl): (Vec<Field>, i64) = self
            .core
            .backend()
            .node_for("a cache")?
            .read("cache read", &reads, |replies| {
                let [fields, pttl] = replies else {
                    return None;
                };
                Some((
                    redis::from_redis_value_ref(fields).ok()?,
                    redis::from_redis_value_ref(pttl).ok()?,
                ))
            })
            .await?;
        parse_entry(fields, pttl, ttl_millis(self.stale_for))
    }

    async fn store(
        &self,
        entry: &Entry,
        token: FencingToken,
        ttl: Duration,
        compute_us: u64,
        value: Option<&[u8]>,
    ) -> Result<bool> {
        let fresh = if value.is_some() {
            ttl
        } else {
            self.negative_ttl
        };
        let fresh_ms = ttl_millis(fresh);
        let stretch = (fresh_ms as f64 * self.jitter * random_fraction()) as u64;
        let stale_ms = ttl_millis(self.stale_for);
        let life = fresh_ms.saturating_add(stretch).saturating_add(stale_ms);
        let core = &self.core;
        let mut call = ScriptCall::new(&CACHE_STORE)
            .key(&entry.cached)
            .key(&entry.lock.keys().fence)
            .arg(token.get())
            .arg(life)
            .arg(compute_us)
            .arg(stale_ms)
            .arg(&entry.lock.keys().channel)
            .arg(&*core.release_message(crate::core::Wake::All));
        if let Some(value) = value {
            call = call.arg(value);
        }
        let stored: i64 = core
            .backend()
            .node_for("a cache")?
            .run_replicated(&call)
            .await?;
        if stored == 1 {
            // Our own message is skipped by our pub/sub task: wake this process directly (the
            // waiters of other handles on this client).
            core.wake_local(&entry.lock.keys().channel, crate::core::Wake::All);
        }
        Ok(stored == 1)
    }
}

/// Reads an `HMGET v d s` + `PTTL` reply. `serve_stale_ms`: how far past its ttl this reader
/// takes an entry (its own `with_stale_for`, whatever grace the writer kept it for).
/// One field of a cache entry as read (nil: absent).
type Field = Option<Vec<u8>>;

fn parse_entry(fields: Vec<Option<Vec<u8>>>, pttl: i64, serve_stale_ms: u64) -> Result<Found> {
    let number = |raw: &Option<Vec<u8>>| -> Result<u64> {
        match raw {
            None => Ok(0),
            Some(b) => std::str::from_utf8(b)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| unexpected("cache read", format!("{b:?} is not a number"))),
        }
    };
    let [value, compute, stale] = <[Option<Vec<u8>>; 3]>::try_from(fields)
        .map_err(|f| unexpected("cache read", format!("{} fields, not 3", f.len())))?;
    if compute.is_none() || pttl == -2 {
        return Ok(Found::Missing);
    }
    let compute_us = number(&compute)?;
    let stale_ms = number(&stale)?;
    let Ok(left_ms) = u64::try_from(pttl) else {
        // -1: no expiry; somebody persisted the entry.
        return Ok(Found::Fresh {
            value,
            remaining_us: u64::MAX,
            compute_us,
        });
    };
    Ok(if left_ms > stale_ms {
        Found::Fresh {
            value,
            remaining_us: (left_ms - stale_ms).saturating_mul(1000),
            compute_us,
        }
    } else if serve_stale_ms > 0 && stale_ms - left_ms <= serve_stale_ms {
        Found::Stale { value }
    } else {
        Found::Missing
    })
}

/// Gives the entry's lock back; a failure only delays the next computer by the lease.
async fn release_quietly(guard: LockGuard) {
    let name = guard.name().to_owned();
    if let Err(e) = guard.release().await {
        tracing::debug!(entry = %name, error = %e, "fenced: cache lock release failed; it expires by its ttl");
    }
}

/// The caller flying a local flight. Dropping it without [`land`](Pilot::land) (an error, a
/// cancel) wakes the waiting callers with nothing, so one of them flies next.
struct Pilot {
    flights: Arc<Mutex<HashMap<String, Flight>>>,
    name: String,
    rx: Flight,
    tx: watch::Sender<Option<Landed>>,
}

impl Pilot {
    /// Hands `value`, vouched for by a Redis call sent at `vouched_at`, to the followers. The
    /// flight leaves the registry first, so a follower that cannot take the value (it joined
    /// later) finds no landed flight to join again.
    fn land(self, value: &Option<Vec<u8>>, vouched_at: Instant) {
        self.leave();
        self.tx.send_replace(Some(Landed {
            value: value.clone(),
            vouched_at,
        }));
    }

    /// Takes this flight out of the registry, if it is still there.
    fn leave(&self) {
        let mut flights = lock_unpoisoned(&self.flights);
        if flights
            .get(&self.name)
            .is_some_and(|f| f.same_channel(&self.rx))
        {
            flights.remove(&self.name);
        }
    }
}

impl Drop for Pilot {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &str) -> Option<Vec<u8>> {
        Some(s.as_bytes().to_vec())
    }

    #[test]
    fn entries_are_read_by_their_server_ttl() {
        assert_eq!(
            parse_entry(vec![b("x"), b("12"), b("0")], 500, 0).ok(),
            Some(Found::Fresh {
                value: b("x"),
                remaining_us: 500_000,
                compute_us: 12
            })
        );
        // 600 ms past its ttl, in a grace of 1 s: stale for a reader that takes 600 ms or
        // more, missing for one that takes less (or none).
        assert_eq!(
            parse_entry(vec![b("x"), b("1"), b("1000")], 400, 600).ok(),
            Some(Found::Stale { value: b("x") })
        );
        assert_eq!(
            parse_entry(vec![b("x"), b("1"), b("1000")], 400, 500).ok(),
            Some(Found::Missing)
        );
        assert_eq!(
            parse_entry(vec![b("x"), b("1"), b("1000")], 400, 0).ok(),
            Some(Found::Missing)
        );
        // A negative entry has no value field.
        assert_eq!(
            parse_entry(vec![None, b("3"), b("0")], 10, 0).ok(),
            Some(Found::Fresh {
                value: None,
                remaining_us: 10_000,
                compute_us: 3
            })
        );
        assert_eq!(
            parse_entry(vec![b("x"), b("3"), b("0")], -1, 0).ok(),
            Some(Found::Fresh {
                value: b("x"),
                remaining_us: u64::MAX,
                compute_us: 3
            })
        );
        assert_eq!(
            parse_entry(vec![None, None, None], -2, 0).ok(),
            Some(Found::Missing)
        );
        assert!(parse_entry(vec![b("x"), b("soon"), None], 10, 0).is_err());
        assert!(parse_entry(vec![b("x")], 10, 0).is_err());
    }
}

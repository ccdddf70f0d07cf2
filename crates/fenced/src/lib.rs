//! Distributed locks on Redis that tell you when you lost them, and fencing tokens that make a
//! lost lock harmless.
//!
//! ```
//! # fenced_testkit::doctest(|test_url| async move {
//! let url = "redis://127.0.0.1:6379"; // your server
//! # let url = test_url;
//! use std::time::Duration;
//! use fenced::Client;
//! use fenced::resource::FencedWrite;
//!
//! let client = Client::connect(&url).await?;
//! let lock = client.lock("product:10100101:shopping").with_ttl(Duration::from_secs(10));
//! let stock = client.resource("stock:10100101");
//!
//! let guard = lock.acquire().await?;            // waits for a release notification, not a sleep loop
//! let token = guard.fencing_token();           // strictly greater than every earlier grant
//! tokio::select! {
//!     _ = guard.lost() => println!("lease lost: stop writing"),
//!     written = stock.set(token, "count", "19") => assert_eq!(written?, FencedWrite::Applied),
//! }
//! guard.release().await?;                      // compare-and-delete, wakes the next waiter
//! # Ok(()) });
//! ```
//!
//! # What you get
//!
//! - [`Lock`]: an exclusive lease (`SET key owner NX PX ttl`) with a random 128-bit owner
//!   token, a [`FencingToken`] per grant, release by compare-and-delete, renewal in the
//!   background while the [`LockGuard`] lives, a lost-lease signal ([`LockGuard::lost`]),
//!   and waiters woken by the release itself instead of polling.
//! - [`ReentrantLock`]: an exclusive lease its holder may enter again, through its
//!   [`ReentrantGuard`] or a [`HolderHandle`] handed to another task or process; free once
//!   every hold is given back. Re-entry is explicit, never keyed by thread (see its docs).
//! - [`Semaphore`]: N permits across processes, each holder's permits leased and renewed
//!   like a lock, so a crashed holder's permits come back when its lease ends (Redis `TIME`
//!   decides, never a client clock); a release of k permits wakes up to k waiters.
//! - [`Latch`]: a countdown latch across processes; the count down that opens it wakes every
//!   waiter with one message.
//! - [`FairLock`]: an exclusive lock granted in FIFO order across processes; a release wakes
//!   only the head of the queue, and a waiter that gives up leaves it at once.
//! - [`RwLock`]: many readers or one writer, writer-preferring, a lease per reader, a
//!   writer's release waking every reader; no upgrade deadlock.
//! - [`MultiLock`]: several names locked all or nothing, by one script (no deadlock between
//!   `{a, b}` and `{b, a}`), one guard and one fencing token for all of them.
//! - [`StripedLock`]: lock segments; K locks over a large key space, by a stable hash.
//! - [`Cache`]: read-through caching computed once per miss across every process (stampede
//!   protection), with cached "no value" results, ttl jitter, early refresh, stale reads and
//!   fenced stores.
//! - [`FencedResource`]: data in Redis that refuses writes with an older fencing token.
//! - [`Election`]: leader election with terms (fencing tokens), FIFO candidates and observers.
//! - Several independent masters: `Client::redlock_builder` (the `redlock` feature) runs locks on Redlock, with
//!   fencing tokens that keep increasing across holders (written back to a majority before
//!   use), decisions at the majority, and the delayed-restart rule.
//! - [`Lock::with_lock`]: run a piece of work under the lock; it is cancelled if the lease is
//!   lost.
//! - No lock at all: [`Client::transaction`] (optimistic `WATCH`/`MULTI`/`EXEC` with retry)
//!   and one-step atomic scripts ([`Client::compare_and_set`], [`Client::set_if_version`],
//!   [`Client::set_max`], [`Client::decrement_if_at_least`]). For short read-modify-writes of
//!   Redis data they are faster than a lock and need no fencing.
//! - Inspection for operators: [`Lock::status`], [`Semaphore::status`], [`Client::list`]
//!   (every kind in one `SCAN` pass), [`Lock::force_release`].
//! - A server that may evict a held lock's key (a `maxmemory` with an `allkeys-*` or
//!   `volatile-*` policy) is named when the client connects: one `tracing` warning, and
//!   [`Client::server_notes`] with what to change.
//!
//! # What a lease guarantees, and what needs fencing
//!
//! A Redis lock is a **lease**: it is yours until its ttl runs out, and renewal keeps
//! extending it while your process is healthy. On its own it gives mutual exclusion only as
//! long as your process keeps running on time. A holder that is paused (a GC pause, swapping,
//! `SIGSTOP`, a VM migration) or whose messages are delayed for longer than the lease can wake
//! up still believing it holds the lock while somebody else does (Kleppmann, 2016). No client
//! library can prevent that by itself, because the paused process cannot run any check.
//!
//! What this crate does about it:
//! - the guard knows a **validity deadline**, measured on the monotonic clock from *before*
//!   the acquire request was sent, minus a drift allowance, and fires its lost signal when the
//!   deadline passes without a successful renewal, even if Redis cannot be reached;
//! - every grant carries a **fencing token**, and the resource can refuse a write whose token
//!   is older than one it has already accepted ([`FencedResource`], or the SQL pattern shown
//!   there). With that check in place, a late writer is rejected instead of corrupting data;
//!   that is the guarantee to rely on for correctness.
//!
//! Without fencing, use the lock for **efficiency** (avoiding duplicate work), not for
//! correctness. When the work is a short read-modify-write of Redis data, optimistic
//! concurrency (a `WATCH`/`MULTI`/`EXEC` transaction or an atomic script) avoids locking
//! altogether.
//!
//! ## Fencing tokens, precisely
//!
//! A token is strictly greater than every token handed out before for the same name on that
//! server, including after leases expired. Every grant, by script or by transaction, appends
//! one ID to the name's fence, a Redis stream (`XADD fence MAXLEN 0 *`): the server answers
//! an ID strictly above the last one, whose time part is at least the server clock in ms.
//! The token is that ID as one number, `ms × 1000 + seq`, below 2^53 until the year 2255, so
//! JSON and JavaScript carry it exactly. A fence lost whole (deleted, evicted, flushed, a
//! restart without persistence) starts again one ms past the server clock, above every token
//! handed out at or before that ms; one put back older (a restart from a snapshot or an
//! append-only file, `DEBUG LOADAOF`, `RESTORE` of an older dump, a failover to a replica
//! that missed the last grants) counts on from the server clock, which is past every token
//! handed out before. The fence expires after
//! [`fence_retention`](ClientBuilder::fence_retention) (24h by default) without a grant, so
//! keys do not pile up. Tokens stop increasing only if a server's clock steps back by more
//! than the retention period, a failover promotes a server whose clock is behind the old
//! master's by more than the time since the last grant, or a name's fence is lost twice
//! within one millisecond with a grant between. A key of another type at the fence
//! answers [`Error::WrongType`] naming it, and no token. A failover can still lose a grant
//! (replication is asynchronous) and let two holders overlap until the first one hears of
//! it; their tokens still increase, and
//! [`replica_acks`](ClientBuilder::replica_acks) narrows that window.
//!
//! # Redis keys
//!
//! All keys of one lock share the hash tag `{name}`, so they stay in one Redis Cluster slot.
//! The lock key holds the owner token as a plain string with a `PX` expiry, the same layout
//! redis-py's `Lock`, redsync and node-redlock use, so holders using those libraries on the
//! same key and `fenced` exclude each other (they do not publish on release, so a `fenced`
//! waiter sees their releases by polling).
//!
//! | key | holds |
//! |---|---|
//! | `fenced:{name}` | owner token of the holder, `PX` = lease |
//! | `fenced:{name}:fence` | a stream whose last ID is the fence: at least the last fencing token handed out, `PX` = retention |
//! | `fenced:{name}:released` | pub/sub channel: one message per release |
//! | `fenced:{name}:void:<owner>` | tombstone of an abandoned acquire attempt |
//!
//! # Metrics and tracing
//!
//! Every primitive reports through the [`metrics`](https://docs.rs/metrics) facade; nothing is
//! recorded until the application installs a recorder (a Prometheus exporter, say). Names
//! follow OpenTelemetry's rules (durations in seconds; a Prometheus exporter writes `.` as
//! `_`). Labels are bounded: `primitive` is one of `lock`, `reentrant_lock`, `semaphore`,
//! `rw_read`, `rw_write`, `fair_lock`, `multi_lock`, `unfenced_lock`, `election`; a lock's
//! name is a label only of the gauge [`ClientBuilder::metrics_by_name`] turns on.
//!
//! | series | kind | labels |
//! |---|---|---|
//! | `fenced.lock.attempts` | counter | `primitive`, `outcome` = `acquired`, `busy` (contention) |
//! | `fenced.lock.acquired` | counter | `primitive`, `via` = `attempt` or `handover` |
//! | `fenced.lock.not_acquired` | counter | `primitive`: the wait ran out |
//! | `fenced.lock.wait.duration` | histogram, s | `primitive` |
//! | `fenced.lock.held.duration` | histogram, s | `primitive`: grant to release |
//! | `fenced.lock.active` | gauge | `primitive`: leases held by this process |
//! | `fenced.lock.waiting` | gauge | `primitive`: tasks waiting after a busy attempt |
//! | `fenced.lock.waiting.by_name` | gauge | `primitive`, `name` (opt-in) |
//! | `fenced.lock.released` | counter | `primitive`, `outcome` = `released`, `handed_over`, `not_held`, `failed` |
//! | `fenced.lease.renewals` | counter | `outcome` = `applied`, `failed` |
//! | `fenced.lease.lost` | counter | `primitive` |
//! | `fenced.resource.stale_writes` | counter | a stale token refused at a resource |
//! | `fenced.transaction.conflicts` | counter | an optimistic transaction retried |
//! | `fenced.cache.lookups` | counter | `result` = `hit`, `stale`, `shared` (another caller's compute), `computed` (this caller's) |
//! | `fenced.cache.computes` | counter | `outcome` = `stored`, `refused` (fenced off by a newer grant or an invalidation), `failed` |
//!
//! Every acquire is a [`tracing`](https://docs.rs/tracing) span `fenced.acquire`
//! (`fenced.try_acquire`, `fenced.reenter`) with the fields `fenced.name`,
//! `fenced.primitive` and `fenced.token`; its wait after a busy attempt is a child span
//! `fenced.wait`, and every release a span `fenced.release` with the same fields.
//!
//! # Timeouts
//!
//! Every Redis call is bounded by the client's timeout (2s by default). Nothing hangs when
//! Redis is down, slow or paused: calls fail with [`Error::Timeout`] or
//! [`Error::Unavailable`].

// Code that only Redis Cluster or Redlock reach (slot routing, quorum steps) stays compiled
// without their features; the default build, with every feature, still lints it as dead.
#![cfg_attr(
    not(all(feature = "cluster", feature = "redlock", feature = "sentinel")),
    allow(dead_code)
)]
#![cfg_attr(docsrs, feature(doc_cfg))]

// The lease core and what it stands on.
mod backend;
pub(crate) mod core;
mod kind;
mod scripts;
mod util;

// The client, and the primitives on the core.
mod cache;
mod client;
pub mod election;
mod error;
mod fair;
mod guard;
pub mod inspect;
mod keys;
mod latch;
mod lock;
mod multi;
mod notes;
pub mod optimistic;
mod options;
mod reentrant;
pub mod resource;
mod rwlock;
mod semaphore;
mod striped;
#[cfg(feature = "testing")]
pub mod testing;
mod ticket;
mod token;
mod unfenced;
mod wait;

pub use backend::connect::MIN_SERVER_VERSION;
pub use cache::Cache;
pub use client::{Client, ClientBuilder};

pub use core::renew::RenewalStats;
pub use election::{Election, ElectionStatus, Leader, LeaderChanges, Leadership};
pub use error::{Awaited, Error, LostCause, Result};
pub use fair::FairLock;
/// Runs an async function under a distributed lock, as an annotation declares a lock on a
/// method elsewhere.
///
/// `#[fenced::locked(client = EXPR, name = "FORMAT", ttl = "30s", wait = "5s")]`:
/// - `client`: an expression giving the [`Client`] (or a reference to one), evaluated in the
///   function (so `self.client` works);
/// - `name`: the lock's name, a format string over the function's arguments (`"order:{id}"`);
/// - `ttl` and `wait` (optional): the lease length and how long to wait, checked when the code
///   compiles (`"500ms"`, `"30s"`, `"5m"`, `"1h"`); by default the client's ttl and no limit;
/// - `kind` (optional): which primitive, `"lock"` (the default), `"fair"`, `"read"` or
///   `"write"` (a [`RwLock`]'s leases); or `permits = N` for one permit of a [`Semaphore`]
///   of N. (Not `"reentrant"`: each call would take a hold of its own, which a nested call
///   would wait for; a [`ReentrantLock`] re-enters through its guard.) Each runs through
///   the primitive's scoped run (`with_lock`, `with_read`, `with_write`, `with_permit`).
///
/// The function must be `async` and return `Result<T, E>` where `E: From<fenced::Error>`: a
/// lock that cannot be taken, or a lease lost while the body runs (the body is then cancelled
/// at its next await, as with [`Lock::with_lock`]), comes back as `Err`. A parameter marked
/// `#[lease]` (of type [`Lease`]) is left out of the signature and receives the lease, for its
/// fencing token and its lost signal.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// struct Orders {
///     client: fenced::Client,
/// }
///
/// impl Orders {
///     #[fenced::locked(client = self.client, name = "order:{id}", ttl = "10s", wait = "5s")]
///     async fn pay(&self, id: u64, #[lease] lease: fenced::Lease) -> fenced::Result<u64> {
///         // ... one payment per order at a time, across every process ...
///         Ok(lease.fencing_token().get())
///     }
/// }
///
/// let orders = Orders { client: fenced::Client::connect(&url).await? };
/// let token = orders.pay(42).await?;
/// assert!(token > 0);
///
/// // Other primitives: many readers at once, or at most two exports at a time.
/// #[fenced::locked(client = client, name = "catalogue", kind = "read")]
/// async fn browse(client: &fenced::Client) -> fenced::Result<()> {
///     Ok(())
/// }
/// #[fenced::locked(client = client, name = "exports", permits = 2)]
/// async fn export(client: &fenced::Client) -> fenced::Result<()> {
///     Ok(())
/// }
/// browse(&orders.client).await?;
/// export(&orders.client).await?;
/// # Ok(()) });
/// ```
///
/// # Mistakes caught when the code compiles
///
/// The function must be `async`:
///
/// ```compile_fail
/// #[fenced::locked(client = client, name = "x")]
/// fn not_async(client: &fenced::Client) -> fenced::Result<()> { Ok(()) }
/// ```
///
/// `name` is required, and durations must read like `500ms`, `30s`, `5m`, `1h`:
///
/// ```compile_fail
/// #[fenced::locked(client = client)]
/// async fn no_name(client: &fenced::Client) -> fenced::Result<()> { Ok(()) }
/// ```
///
/// ```compile_fail
/// #[fenced::locked(client = client, name = "x", ttl = "10 parsecs")]
/// async fn bad_ttl(client: &fenced::Client) -> fenced::Result<()> { Ok(()) }
/// ```
///
/// The name may only use the function's arguments:
///
/// ```compile_fail,E0425
/// #[fenced::locked(client = client, name = "order:{order_id}")]
/// async fn typo(client: &fenced::Client, id: u64) -> fenced::Result<()> { Ok(()) }
/// ```
///
/// The lock can fail, so the function returns `Result<T, E>` with `E: From<fenced::Error>`:
///
/// ```compile_fail,E0277
/// #[fenced::locked(client = client, name = "x")]
/// async fn plain(client: &fenced::Client) -> u64 { 1 }
/// ```
///
/// ```compile_fail,E0277
/// struct MyError;
/// #[fenced::locked(client = client, name = "x")]
/// async fn mine(client: &fenced::Client) -> Result<(), MyError> { Ok(()) }
/// ```
///
/// (`crates/fenced-macros/tests/forms.rs` checks the exact messages with trybuild, in the slow
/// tier: `scripts/test-slow`.)
#[cfg(feature = "macros")]
pub use fenced_macros::locked;
pub use guard::{FencedGuard, Lease, LeaseGuard, LockGuard};
pub use latch::Latch;
pub use lock::Lock;
pub use multi::{MultiGuard, MultiLock};
pub use notes::{NoteKind, ServerNote};
pub use reentrant::{HolderHandle, ReentrantGuard, ReentrantLock};
pub use resource::FencedResource;
pub use rwlock::{ReadGuard, RwLock, WriteGuard};
pub use semaphore::{Semaphore, SemaphorePermit};
pub use striped::StripedLock;
pub use token::FencingToken;
pub use unfenced::{UnfencedGuard, UnfencedLock};
pub use wait::WaitPolicy;

/// Every limit the crate checks before it sends anything, in one place.
pub mod limits {
    pub use crate::inspect::OWNER_PREFIX_LEN;
    pub use crate::keys::{MAX_NAME_LEN, MAX_NAMESPACE_LEN};
    pub use crate::multi::MAX_MULTI_NAMES;
    pub use crate::optimistic::{MAX_KEY_LEN, MAX_STOCK};
    pub use crate::options::{MAX_TTL, MIN_TTL};
    pub use crate::resource::MAX_FIELDS_PER_WRITE;
    pub use crate::semaphore::MAX_PERMITS;
    pub use crate::striped::MAX_STRIPES;
}

/// What `#[fenced::locked]` expands to; not a public API.
#[cfg(feature = "macros")]
#[doc(hidden)]
pub mod __private {
    /// The output of a `#[fenced::locked]` function: a `Result` whose error takes a lock
    /// failure.
    #[diagnostic::on_unimplemented(
        message = "a `#[fenced::locked]` function must return `Result<T, E>` with `E: From<fenced::Error>`, not `{Self}`",
        label = "the lock can fail, and its error is returned through this type"
    )]
    pub trait LockedOutput {
        /// The function's output for a lock that could not be taken or was lost.
        fn from_lock_error(e: crate::Error) -> Self;
    }

    impl<T, E: From<crate::Error>> LockedOutput for Result<T, E> {
        fn from_lock_error(e: crate::Error) -> Self {
            Err(E::from(e))
        }
    }
}

/// The Redis client library `fenced` is built on, for building commands to queue in a
/// [`Tx`](crate::optimistic::Tx) (`fenced::redis::cmd("HSET")…`).
pub use redis;

/// Checks a lock or resource name as every operation does before it sends anything: not
/// empty, at most [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes, no `{` or `}`. For tools that want to reject bad
/// input before connecting.
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what is wrong.
pub fn check_name(name: &str) -> Result<()> {
    keys::validate_name("lock", name)
}

/// Checks a Redis URL as connecting does, before anything is sent: its scheme (`redis://`,
/// `rediss://`, `unix://` and their `valkey` twins) and that TLS is built in for
/// `rediss://` (the `tls` feature).
///
/// ```
/// assert!(fenced::check_url("redis://127.0.0.1:6379/0").is_ok());
/// assert!(fenced::check_url("http://127.0.0.1:6379").is_err());
/// ```
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what is wrong, without the URL's password.
pub fn check_url(url: &str) -> Result<()> {
    backend::connect::check_url(url)
}

/// Checks a lease length as [`Lock::acquire`] does: from [`MIN_TTL`](crate::limits::MIN_TTL) to [`MAX_TTL`](crate::limits::MAX_TTL).
///
/// # Errors
///
/// [`Error::InvalidArgument`] saying what is wrong.
pub fn check_ttl(ttl: std::time::Duration) -> Result<()> {
    options::validate_ttl(ttl)
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod bounds {
    //! Compile-time checks that the public handles can cross tasks and threads.
    fn send_sync_static<T: Send + Sync + 'static>() {}

    #[test]
    fn public_types_are_send_sync_static() {
        send_sync_static::<crate::Client>();
        send_sync_static::<crate::Lock>();
        send_sync_static::<crate::LockGuard>();
        send_sync_static::<crate::Lease>();
        send_sync_static::<crate::FencedResource>();
        send_sync_static::<crate::ReentrantLock>();
        send_sync_static::<crate::ReentrantGuard>();
        send_sync_static::<crate::HolderHandle>();
        send_sync_static::<crate::Semaphore>();
        send_sync_static::<crate::Latch>();
        send_sync_static::<crate::StripedLock>();
        send_sync_static::<crate::MultiLock>();
        send_sync_static::<crate::MultiGuard>();
        send_sync_static::<crate::RwLock>();
        send_sync_static::<crate::FairLock>();
        send_sync_static::<crate::ReadGuard>();
        send_sync_static::<crate::WriteGuard>();
        send_sync_static::<crate::SemaphorePermit>();
        send_sync_static::<crate::Cache>();
        send_sync_static::<crate::Error>();
    }
}

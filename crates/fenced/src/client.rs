//! [`Client`]: the connection to Redis and the background tasks shared by every lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

#[cfg(any(feature = "cluster", feature = "redlock", feature = "sentinel"))]
use crate::backend::connect::Topology;
use crate::backend::connect::{Connect, Secret};
use crate::backend::pool::{Directory, TxPool};
use crate::cache::Cache;
use crate::core::Core;
use crate::core::renew::RenewalStats;
use crate::election::Election;
use crate::error::{Error, Result};
use crate::fair::FairLock;
use crate::guard::LockGuard;
use crate::inspect::{self, Listing};
use crate::latch::Latch;
use crate::lock::Lock;
use crate::multi::MultiLock;
use crate::notes::ServerNote;
use crate::optimistic::{self, CasOutcome, Stock, Tx, Versioned, VersionedWrite};
use crate::reentrant::ReentrantLock;
use crate::resource::FencedResource;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::striped::StripedLock;
use crate::ticket;
use crate::token::hex;
use crate::unfenced::UnfencedGuard;
use crate::wait::WaitPolicy;

/// A handle on one Redis server: cheap to clone, `Send + Sync`, and meant to be shared by a
/// whole process.
///
/// A client holds:
/// - one reconnecting multiplexed connection for every command;
/// - one pub/sub connection, opened when the first waiter needs it, shared by all waiters;
/// - one renewal task that keeps every held lease alive in one pipelined round trip per tick.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// let client = fenced::Client::connect(&url).await?;
/// let guard = client.lock("product:10100101:shopping").acquire().await?;
/// println!("holding with fencing token {}", guard.fencing_token());
/// guard.release().await?;
/// # Ok(()) });
/// ```
#[derive(Clone)]
pub struct Client {
    core: Arc<Core>,
    tx_pool: Arc<TxPool>,
    /// What connecting learned about the servers' configuration (`notes.rs`).
    notes: Arc<[ServerNote]>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("namespace", &self.core.options().namespace)
            .field("timeout", &self.core.options().timeout)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects with default settings. `url` is `redis://host:port/db`, `rediss://…` for TLS
    /// (with the `tls` feature), and may carry `user:password@` for ACL authentication.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a malformed URL, [`Error::Unavailable`] or
    /// [`Error::Timeout`] when the server does not answer a `PING` within the timeout.
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder(url).connect().await
    }

    /// Starts configuring a client for `url`.
    pub fn builder(url: &str) -> ClientBuilder {
        ClientBuilder {
            connect: Connect::new(url),
        }
    }

    /// Starts configuring a client over several independent Redis masters (Redlock, at least
    /// 3; an odd number tolerates the most failures): every lease step goes to all of them at
    /// once and needs a strict majority.
    ///
    /// What it adds to Redlock as the peers have it:
    /// - **Quorum fencing tokens.** The token is the largest of the granting nodes' tokens,
    ///   held as the fence of a majority before it is handed out (the attempt proposes one
    ///   that the nodes usually agree on; when they do not, the largest is written back), so
    ///   the tokens of successive holders strictly increase even when a holder is paused past
    ///   its lease or the network is slow: the next grant's majority shares a node with that
    ///   one. (Its limit: a majority of nodes losing their data while their clocks step back.)
    /// - **Validity.** A grant counts only if the majority, and any write-back, answered
    ///   before `ttl − drift` had passed since the request was sent; the guard's validity
    ///   deadline starts at that same instant. An attempt that falls short is abandoned on
    ///   every node (released where it took the lease, voided by a tombstone where it may still
    ///   arrive), and waiting goes on within the deadline.
    /// - **Decided as soon as known.** All nodes are asked at once, each call bounded by the
    ///   timeout; the answer comes when a majority has granted (or can no longer grant), not
    ///   when the slowest node replies.
    /// - **Renewal on a majority**, one pipeline per node per tick. A renewal short of a
    ///   majority deletes nothing; it is retried, and the lost signal fires when the validity
    ///   runs out.
    /// - Too few nodes reachable: [`Error::NoQuorum`] with the counts, retried within the
    ///   wait like any transient failure.
    ///
    /// A Redlock client runs locks ([`Lock`]: `acquire`, `try_acquire`, `with_lock`,
    /// `#[fenced::locked]`) and semaphores ([`Semaphore`](crate::Semaphore): `acquire`,
    /// `release`). A semaphore of N permits over n masters needs more than `n·N/(N+1)` of
    /// them per holder (all 3 of 3 for N ≥ 2), or more than N holders could each be admitted
    /// by a majority. The other primitives, fenced resources, inspection and optimistic
    /// helpers need one server and answer [`Error::Unsupported`] on it, before anything is
    /// sent.
    /// Waiters subscribe on the first node that answers (every node hears each release), and
    /// poll while none does. [`Client::flush`] also waits for the calls still running on
    /// slow nodes after a majority decided.
    ///
    /// ```
    /// # fenced_testkit::doctest_redlock(3, |urls| async move {
    /// let client = fenced::Client::redlock_builder(&urls).connect().await?;
    /// let guard = client.lock("nightly-report").acquire().await?; // granted by 2 of 3 or more
    /// println!("fencing token {}", guard.fencing_token());
    /// guard.release().await?;
    /// # Ok(()) });
    /// ```
    #[cfg(feature = "redlock")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
    pub fn redlock_builder<S: AsRef<str>>(urls: &[S]) -> ClientBuilder {
        let mut builder = Client::builder("");
        builder.connect.topology =
            Topology::Redlock(urls.iter().map(|u| u.as_ref().to_owned()).collect());
        builder
    }

    /// Starts configuring a client of a Redis Cluster, from one or more of its nodes (seeds;
    /// the others are discovered).
    ///
    /// Every primitive keeps all its keys under one `{name}` hash tag, so each of its
    /// scripts runs on the master of one slot, and everything works as on one server:
    /// - commands follow `MOVED`, `ASK`, `TRYAGAIN` and `CLUSTERDOWN` by sending again, but
    ///   only those, whose reply says the command did not run: a command whose connection
    ///   broke is reported as unknown ([`Error::Timeout`], [`Error::Unavailable`]), never sent
    ///   a second time, so a write is applied at most once;
    /// - renewal sends one pipeline per slot per tick, all at once;
    /// - waiters subscribe on the master of their name's slot (sharded pub/sub, Redis 7+; a
    ///   release is announced there with `SPUBLISH`) and follow the slot when it moves; on an
    ///   older server, on any node with classic pub/sub;
    /// - a lease survives a slot migration and a failover that promotes an up-to-date
    ///   replica; after a failover to a replica that missed the last grant, the `TIME` floor
    ///   still keeps fencing tokens increasing.
    ///
    /// - optimistic transactions run on the master of their keys' one slot (keys of one
    ///   transaction share a hash tag), and follow it when it moves;
    /// - the listing ([`Client::list`]) scans every master.
    ///
    /// Not on a cluster: a multi-lock over several names (they live in different slots), which
    /// answers [`Error::Unsupported`]. Locks are not handed straight to a local waiter on a
    /// cluster (a node counts only its own subscribers), so a handover costs a round trip
    /// more than on one server.
    ///
    /// ```
    /// # fenced_testkit::doctest_cluster(|seeds| async move {
    /// let client = fenced::Client::cluster_builder(&seeds).connect().await?;
    /// let guard = client.lock("invoice:2026-11").acquire().await?;
    /// println!("fencing token {}", guard.fencing_token());
    /// guard.release().await?;
    /// # Ok(()) });
    /// ```
    #[cfg(feature = "cluster")]
    #[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
    pub fn cluster_builder<S: AsRef<str>>(seeds: &[S]) -> ClientBuilder {
        let mut builder = Client::builder("");
        builder.connect.topology =
            Topology::Cluster(seeds.iter().map(|u| u.as_ref().to_owned()).collect());
        builder
    }

    /// Starts configuring a client of the master that Redis Sentinel names for `service`,
    /// asking the sentinels at `sentinels` (their URLs carry their own credentials, if any;
    /// the master gets the builder's [`password`](ClientBuilder::password), and TLS when the
    /// sentinels' URLs are `rediss://`).
    ///
    /// The master is located at connect, and again whenever it stops acting as the master: a
    /// `READONLY` reply (it was demoted), or a refused or broken connection. The command that
    /// meets the change fails with its error, which may leave its outcome unknown; nothing is
    /// sent twice. Pub/sub and transactions locate the master when they connect. Everything
    /// works as on one server.
    ///
    /// Replication is asynchronous: a failover can lose the last writes of the old master,
    /// a grant among them, and two holders may then overlap until the first one's renewal
    /// reaches the new master and fails. Fencing tokens still increase (the promoted master's
    /// fence is floored by its clock, which is past every token the old master handed out
    /// while the two clocks agree), so a fenced resource refuses the older holder. [`ClientBuilder::replica_acks`] narrows the
    /// window: a grant counts only once replicas have it.
    ///
    /// ```
    /// # fenced_testkit::doctest_sentinel(|sentinels| async move {
    /// let client = fenced::Client::sentinel_builder(&sentinels, "mymaster")
    ///     .replica_acks(1, std::time::Duration::from_millis(100))
    ///     .connect()
    ///     .await?;
    /// let guard = client.lock("payroll").acquire().await?; // on the master, and on a replica
    /// guard.release().await?;
    /// # Ok(()) });
    /// ```
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub fn sentinel_builder<S: AsRef<str>>(sentinels: &[S], service: &str) -> ClientBuilder {
        let mut builder = Client::builder("");
        builder.connect.topology = Topology::Sentinel {
            sentinels: sentinels.iter().map(|u| u.as_ref().to_owned()).collect(),
            service: service.to_owned(),
        };
        builder
    }

    /// A lock named `name` (a handle; nothing is sent to Redis until you acquire it).
    ///
    /// Lock one thing, not a whole collection: `product:10100101:shopping` rather than
    /// `products`. Names are up to [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes and may not
    /// contain `{` or `}`.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(&self.core, name.into())
    }

    /// A reentrant lock named `name`: its holder may take it again (through its guard or an
    /// owner handle) without waiting for itself. Excludes plain [`Lock`]s of the same name.
    pub fn reentrant_lock(&self, name: impl Into<String>) -> ReentrantLock {
        ReentrantLock::new(&self.core, name.into())
    }

    /// A semaphore named `name` with `permits` leased permits in all.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(&self.core, name.into(), permits)
    }

    /// Lock segments: `stripes` locks named `<prefix>:stripe:<n>` covering any number of
    /// keys, each key mapped to one stripe by a stable hash.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or more than [`MAX_STRIPES`](crate::limits::MAX_STRIPES)
    /// stripes, or a prefix that makes an invalid lock name.
    pub fn striped_lock(&self, prefix: impl Into<String>, stripes: u32) -> Result<StripedLock> {
        StripedLock::new(&self.core, prefix.into(), stripes)
    }

    /// Several names locked together, all or nothing (sorted and deduplicated).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for no names, more than
    /// [`MAX_MULTI_NAMES`](crate::limits::MAX_MULTI_NAMES), or an invalid name.
    pub fn multi_lock<I, S>(&self, names: I) -> Result<MultiLock>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLock::new(&self.core, names.into_iter().map(Into::into).collect())
    }

    /// A fair lock named `name`: granted in FIFO order across processes.
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(&self.core, name.into())
    }

    /// An election named `name`: candidates campaign, one leads at a time with a term (a
    /// fencing token), and observers follow the leader.
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(&self.core, name.into())
    }

    /// A read-write lock named `name`: many readers or one writer.
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(&self.core, name.into())
    }

    /// A countdown latch named `name`.
    pub fn latch(&self, name: impl Into<String>) -> Latch {
        Latch::new(&self.core, name.into())
    }

    /// A read-through cache named `name`, whose misses are computed once across every process.
    pub fn cache(&self, name: impl Into<String>) -> Cache {
        Cache::new(&self.core, name.into())
    }

    /// A resource that accepts writes only with a current fencing token.
    pub fn resource(&self, name: impl Into<String>) -> FencedResource {
        FencedResource::new(&self.core, name.into())
    }

    /// Waits until the background clean-ups handed over so far are done: releases of guards
    /// dropped without `release`, and acquire attempts cancelled or timed out mid-flight.
    /// Call it before a short-lived process exits, so it does not leave a lock behind to
    /// expire by its ttl. Bounded by three times the client's timeout.
    pub async fn flush(&self) {
        self.core.flush().await;
    }

    /// What this client's renewal loop has done: leases held, round trips, renewals, losses.
    pub fn stats(&self) -> RenewalStats {
        self.core.stats()
    }

    /// The key prefix of this client.
    pub fn namespace(&self) -> &str {
        &self.core.options().namespace
    }

    /// The bound on every Redis call.
    pub fn timeout(&self) -> Duration {
        self.core.options().timeout
    }

    /// What connecting learned about the servers' configuration that weakens what a lock
    /// promises, each [`ServerNote`] naming its server and what to change there: today, a
    /// server that may evict a held lock's key (a `maxmemory` with an `allkeys-*` or
    /// `volatile-*` policy). Empty when nothing was found, and when a server would not show
    /// its configuration (`CONFIG` refused by an ACL or a managed service): that never fails
    /// the connect. Read once at connect, so a setting changed since is not seen; connecting
    /// also logged the notes as one `tracing` warning.
    ///
    /// One server and Sentinel's master give at most one note, a Redis Cluster one per
    /// master and Redlock one per master that answered at connect.
    ///
    /// ```
    /// # fenced_testkit::doctest(|url| async move {
    /// let client = fenced::Client::connect(&url).await?;
    /// for note in client.server_notes() {
    ///     eprintln!("{}: {} (fix: {})", note.node, note.message, note.fix);
    /// }
    /// assert!(client.server_notes().is_empty()); // the test server never evicts
    /// # Ok(()) });
    /// ```
    pub fn server_notes(&self) -> &[ServerNote] {
        &self.notes
    }
}

/// Settings for a [`Client`], applied by [`ClientBuilder::connect`].
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    connect: Connect,
}

// Listing: what the namespace holds (`inspect.rs`).
impl Client {
    /// Everything of this client's namespace whose name matches the glob `pattern` (`*` for
    /// all): held locks, semaphores, read-write locks, fair queues, latches and recent grants,
    /// found in one `SCAN` pass (never `KEYS`; on a cluster, one walk per master) and then
    /// read in batches.
    ///
    /// A key that holds another type of data than `fenced` keeps there (another program wrote
    /// it) is named in [`Listing::unreadable`], and the listing goes on with the rest.
    ///
    /// Every kind is read with or without scripts
    /// ([`ClientBuilder::without_scripts`](crate::ClientBuilder::without_scripts)): a status
    /// (a semaphore's, a read-write lock's, an election's) is its read commands in one
    /// `MULTI`/`EXEC`, never a script.
    ///
    /// # Errors
    ///
    /// Transport errors. Each `SCAN` step is bounded by the timeout; a namespace with millions
    /// of keys takes many steps. On Redlock, [`Error::Unsupported`](crate::Error::Unsupported).
    pub async fn list(&self, pattern: &str) -> Result<Listing> {
        inspect::list(&self.core, pattern).await
    }
}

// Tickets: a held lease handed to another process (`ticket.rs`).
impl Client {
    /// Takes over a [`Lock`](crate::Lock) or [`FairLock`](crate::FairLock) lease from a
    /// ticket written by [`LockGuard::into_ticket`], in this process or another: the guard
    /// renews, extends, signals loss and releases like the original. A ticket is taken over
    /// once: resuming it again (a queue that delivers a message twice) answers
    /// [`Error::NotHeld`], so two workers never hold one lease. A ticket carries no minimum
    /// or maximum hold: set them again on the resumed lease's work if it needs them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for text that is not a ticket (a truncated or altered one),
    /// a ticket of another kind or another namespace, before anything is sent;
    /// [`Error::NotHeld`] when the lease is no longer held by the ticket's owner: it expired
    /// or was released and granted again since (a stale ticket), the owner is made up, or the
    /// ticket was taken over already. Nothing is changed then. Transport errors as usual.
    ///
    /// After an error whose outcome is unknown (a timeout, a lost reply,
    /// [`Error::NotReplicated`]) the take-over may have happened: resuming the same ticket on
    /// this client again repeats it and succeeds if it did. A process that gives up instead
    /// hands [`retry_ticket`](Self::retry_ticket) on, so the lease never stays held by nobody.
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// let client = fenced::Client::connect(&url).await?;
    /// let ticket = client.lock("order:7").acquire().await?.into_ticket();
    /// // ... queue the work with the ticket; a worker, with a client of its own:
    /// let worker = fenced::Client::connect(&url).await?;
    /// let guard = worker.resume(&ticket).await?;
    /// guard.release().await?;
    /// # Ok(()) });
    /// ```
    pub async fn resume(&self, ticket: &str) -> Result<LockGuard> {
        ticket::resume(&self.core, ticket).await
    }

    /// [`resume`](Self::resume) for a ticket written by [`UnfencedGuard::into_ticket`].
    ///
    /// # Errors
    ///
    /// As [`resume`](Self::resume).
    pub async fn resume_unfenced(&self, ticket: &str) -> Result<UnfencedGuard> {
        ticket::resume_unfenced(&self.core, ticket).await
    }

    /// After [`resume`](Self::resume) (or [`resume_unfenced`](Self::resume_unfenced)) of
    /// `ticket` failed with an outcome that is unknown, the text that repeats that very
    /// take-over from any process: the take-over may have happened, and then the original
    /// ticket is refused from now on. `None` when this client has no such take-over of the
    /// ticket (it was answered, or its ttl has passed). Once handed out, resuming the original
    /// ticket here no longer repeats it: only the retry ticket does, once.
    ///
    /// For a process that cannot retry itself (a command that exits): print or queue the
    /// retry ticket in place of the original.
    pub fn retry_ticket(&self, ticket: &str) -> Option<String> {
        ticket::retry_ticket(&self.core, ticket)
    }
}

// Optimistic concurrency: transactions and atomic updates (`optimistic/`).
impl Client {
    /// Runs `step` as an optimistic transaction over `keys`, with the default policy ([`WaitPolicy::TRANSACTION`]).
    /// See [`transaction_with`](Self::transaction_with).
    ///
    /// # Examples
    ///
    /// The flash-sale purchase: buy one item if any is left.
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// let client = fenced::Client::connect(&url).await?;
    /// # let mut c = fenced::redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
    /// # let _: () = fenced::redis::cmd("SET").arg("stock:42").arg(20).query_async(&mut c).await?;
    /// let bought = client
    ///     .transaction(&["stock:42"], |tx| async move {
    ///         let stock: i64 = tx.get("stock:42").await?.unwrap_or(0);
    ///         if stock <= 0 {
    ///             return Ok::<_, fenced::Error>(false); // sold out: nothing is written
    ///         }
    ///         tx.set("stock:42", stock - 1);
    ///         Ok(true)
    ///     })
    ///     .await?;
    /// assert!(bought);
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// As [`transaction_with`](Self::transaction_with).
    pub async fn transaction<T, E, F, Fut>(&self, keys: &[&str], step: F) -> Result<T, E>
    where
        F: FnMut(Tx) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        self.transaction_with(keys, WaitPolicy::TRANSACTION, step)
            .await
    }

    /// Runs `step` as an optimistic transaction over `keys`.
    ///
    /// Each attempt: `WATCH keys` on a dedicated connection (never the shared multiplexed
    /// one); run `step`, which reads through its [`Tx`](crate::optimistic::Tx) and queues writes; then
    /// - `step` returned `Err(e)`: `UNWATCH`, and `Err(e)` is returned as it is;
    /// - `Ok` with nothing queued: `UNWATCH`, and its value is returned (a decision to write
    ///   nothing, like "sold out");
    /// - `Ok` with writes queued: `MULTI`, the writes, `EXEC`. If a watched key changed since
    ///   the `WATCH`, Redis refuses the whole `EXEC`, and the step runs again after a backoff.
    ///
    /// `step` may therefore run several times: keep side effects other than `Tx` writes out
    /// of it. Keys are used as given (no namespace prefix). With
    /// [`replica_acks`](crate::ClientBuilder::replica_acks) a transaction does not wait for the
    /// replicas (the atomic helpers do): a failover right after `EXEC` may lose its writes.
    ///
    /// On a Redis Cluster the keys must share one hash slot (one hash tag, like
    /// `{order:42}:stock` and `{order:42}:paid`), and the transaction runs on that slot's
    /// master. When the slot moves (`MOVED`), the attempt writes nothing and the next one
    /// runs on the new master; while it is being migrated (`ASK`, `TRYAGAIN`), attempts back
    /// off as after a conflict.
    ///
    /// # Errors
    ///
    /// [`Error::Conflict`] (converted into `E`) with the number of attempts when the policy's
    /// limit or deadline is reached; [`Error::InvalidArgument`] for a bad policy, no keys, or
    /// keys of several slots on a cluster;
    /// transport errors. After a timeout of the `EXEC` itself the outcome is unknown.
    ///
    /// A queued command that fails *inside* `EXEC` (say, `INCRBY` on a key holding text) does
    /// not undo the others: Redis has no rollback. That error is returned as
    /// [`Error::Redis`] and the step is not run again, since the other writes did happen.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future mid-way closes its connection, which makes the server drop the
    /// `WATCH` and any open `MULTI`: nothing is committed that `EXEC` did not already commit,
    /// and no dirty connection goes back to the pool.
    pub async fn transaction_with<T, E, F, Fut>(
        &self,
        keys: &[&str],
        policy: WaitPolicy,
        step: F,
    ) -> Result<T, E>
    where
        F: FnMut(Tx) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: From<Error>,
    {
        optimistic::transaction(&self.core, &self.tx_pool, keys, policy, step).await
    }

    /// Sets `key` to `new` if it holds `expected` (`None`: if it does not exist), in one
    /// step. Any ttl on the key is kept. Keys are used as given (no namespace prefix).
    ///
    /// # Examples
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// use fenced::optimistic::CasOutcome;
    ///
    /// let client = fenced::Client::connect(&url).await?;
    /// assert_eq!(client.compare_and_set("config", None, b"v1").await?, CasOutcome::Swapped);
    /// assert_eq!(
    ///     client.compare_and_set("config", None, b"v2").await?,
    ///     CasOutcome::Mismatch { current: Some(b"v1".to_vec()) }
    /// );
    /// assert_eq!(client.compare_and_set("config", Some(b"v1"), b"v2").await?, CasOutcome::Swapped);
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or too long key; [`Error::Redis`] if the key
    /// holds another type; transport errors.
    pub async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Result<CasOutcome> {
        optimistic::compare_and_set(&self.core, key, expected, new).await
    }

    /// Reads a versioned value (written by [`set_if_version`](Self::set_if_version)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; [`Error::Redis`] if the key holds another
    /// type; transport errors.
    pub async fn get_versioned(&self, key: &str) -> Result<Option<Versioned>> {
        optimistic::get_versioned(&self.core, key).await
    }

    /// Writes `value` if the stored version is still `expected` (0: the key must not exist);
    /// the version then goes up by one. The optimistic read-modify-write: read with
    /// [`get_versioned`](Self::get_versioned), compute, write with the version you read, and
    /// start over on [`VersionedWrite::Stale`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; [`Error::Redis`] if the key holds another
    /// type; transport errors.
    pub async fn set_if_version(
        &self,
        key: &str,
        expected: u64,
        value: &[u8],
    ) -> Result<VersionedWrite> {
        optimistic::set_if_version(&self.core, key, expected, value).await
    }

    /// Stores `value` if it is larger than the stored integer (or the key does not exist),
    /// and returns the value stored afterwards: the maximum of everything ever offered.
    ///
    /// Unlike the `GETSET` retry loop (write yours, read back the old one, write that back if
    /// it was larger), there is no moment at which a smaller value is stored, and no retry
    /// limit to run out of under contention.
    ///
    /// # Examples
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// let client = fenced::Client::connect(&url).await?;
    /// assert_eq!(client.set_max("high-score", 40).await?, 40);
    /// assert_eq!(client.set_max("high-score", 12).await?, 40);
    /// assert_eq!(client.set_max("high-score", 99).await?, 99);
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; [`Error::Redis`] if the key holds something
    /// other than a decimal integer; transport errors.
    pub async fn set_max(&self, key: &str, value: i64) -> Result<i64> {
        optimistic::set_extreme(&self.core, key, value, "max").await
    }

    /// Like [`set_max`](Self::set_max), keeping the minimum.
    ///
    /// # Errors
    ///
    /// As [`set_max`](Self::set_max).
    pub async fn set_min(&self, key: &str, value: i64) -> Result<i64> {
        optimistic::set_extreme(&self.core, key, value, "min").await
    }

    /// Takes `n` from the integer stock at `key` if at least `n` are left, in one step:
    /// [`Stock::Left`] with what remains, or [`Stock::SoldOut`] (nothing taken). A missing
    /// key is a stock of 0. The seckill purchase without a lock or a retry.
    ///
    /// # Examples
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// use fenced::optimistic::Stock;
    ///
    /// let client = fenced::Client::connect(&url).await?;
    /// # let mut c = fenced::redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
    /// # let _: () = fenced::redis::cmd("SET").arg("stock:7").arg(2).query_async(&mut c).await?;
    /// assert_eq!(client.decrement_if_at_least("stock:7", 1).await?, Stock::Left(1));
    /// assert_eq!(client.decrement_if_at_least("stock:7", 1).await?, Stock::Left(0));
    /// assert_eq!(client.decrement_if_at_least("stock:7", 1).await?, Stock::SoldOut { left: 0 });
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key or `n` of 0 or above [`MAX_STOCK`](crate::limits::MAX_STOCK);
    /// [`Error::Redis`] if the key holds something other than a decimal integer within
    /// ±[`MAX_STOCK`](crate::limits::MAX_STOCK); transport errors. With replica
    /// acknowledgements, [`Error::NotReplicated`](crate::Error::NotReplicated) means the
    /// decrement WAS applied on the master if the stock allowed it: do not repeat it blindly.
    pub async fn decrement_if_at_least(&self, key: &str, n: u64) -> Result<Stock> {
        optimistic::decrement_if_at_least(&self.core, key, n).await
    }
}

impl ClientBuilder {
    /// Prefix of every key and channel (default `"fenced:"`). Two clients with different
    /// namespaces never see each other's locks. May not contain `{` or `}`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.connect.options.namespace = namespace.into();
        self
    }

    /// Bound on every Redis call, connecting included (default 2s, at most 1h).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.connect.options.timeout = timeout;
        self
    }

    /// Lease length of locks that do not set their own (default 30s). Renewal keeps a held
    /// lease alive, so this is how long a crashed holder blocks others.
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.connect.options.default_ttl = ttl;
        self
    }

    /// How long a name's fence outlives its last grant (default 24h): every grant sets its
    /// expiry. Clients that grant one name with different retentions keep its fence for at
    /// least the retention of the last grant. Fencing tokens keep increasing after
    /// that too, as long as the server clock has not stepped back by more than this period;
    /// see the crate documentation.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.connect.options.fence_retention = retention;
        self
    }

    /// Bounds of the fallback poll of a waiter that hears no release notification (default
    /// 25ms growing to 1s). Only the first waiter of a name in a process polls.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.connect.options.poll_min = min;
        self.connect.options.poll_max = max;
        self
    }

    /// The password to authenticate with (with the URL's user name, or as `default`),
    /// instead of one written in the URL: read it from a file or the environment, and it
    /// stays out of URLs, command lines and logs. It is never shown by `Debug` or in errors.
    /// On a Redlock client, every master gets it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.connect.password = Some(Secret(password.into()));
        self
    }

    /// Redlock: how long a master that restarted (its `run_id` changed) does not vote, from
    /// when the change is seen (default: the default ttl). Set it to at least the longest ttl
    /// your locks use: a restarted master without persistence forgot the locks it held, and
    /// its vote could otherwise give a lock to a second holder while the first one's lease
    /// still runs on the other masters.
    #[cfg(feature = "redlock")]
    #[cfg_attr(docsrs, doc(cfg(feature = "redlock")))]
    pub fn redlock_restart_grace(mut self, grace: Duration) -> Self {
        self.connect.redlock_restart_grace = Some(grace);
        self
    }

    /// Asks `replicas` replicas to acknowledge every grant, renewal and fenced write, waiting
    /// up to `wait` (`WAIT replicas wait`, sent in the same pipeline as the write). Off by
    /// default. Redisson waits for one replica; asking for a majority of the replicas makes a
    /// failover to any of them keep the write. What falls short:
    /// - a grant is given back and retried within the acquire's wait; at its end the
    ///   acquire fails with [`Error::NotReplicated`];
    /// - a renewal does not extend the lease's validity (the lost signal fires if none is
    ///   confirmed in time);
    /// - a fenced write answers [`Error::NotReplicated`]: the master has it, a failover may
    ///   lose it.
    ///
    /// `WAIT` holds the client's shared connection on the server until the replicas answer,
    /// so keep `wait` short (it may be at most half the timeout). It needs the `wait`
    /// command in the ACL. One server, Sentinel and Redis Cluster (the slot's master and its
    /// replicas); not Redlock, whose masters have no replicas to ask.
    pub fn replica_acks(mut self, replicas: usize, wait: Duration) -> Self {
        self.connect.options.replica_acks = Some((replicas, wait));
        self
    }

    /// Wake the waiters of [`Lock`]s and [`UnfencedLock`](crate::UnfencedLock)s by the server's
    /// keyspace events (the lock key's `del`, `expired` and `evicted`), and release those
    /// locks without a `PUBLISH` (default off). Connecting turns the events on where the
    /// server has them off: it adds `K`, `g` and `x` to `notify-keyspace-events` (which needs
    /// the `config` command in the ACL), and keeps the flags already set.
    ///
    /// A release then costs the server what a compare-and-delete costs, and a waiter hears of
    /// a lease that ran out as soon as the server expires the key. Give every client of a
    /// deployment the same setting: a waiter of a client without it hears only `PUBLISH`ed
    /// releases, and falls back to polling for the others. The server sends the events of
    /// every key of the database, so they cost it a little on every write of any key. One
    /// server only: a cluster's events stay on the node that holds the key, and a Sentinel
    /// failover may land on a master without them.
    pub fn keyspace_events(mut self, on: bool) -> Self {
        self.connect.options.keyspace_events = on;
        self
    }

    /// Also count waiting tasks per name, in the gauge `fenced.lock.waiting.by_name` with a
    /// `name` label (default off; `fenced.lock.waiting` counts them per primitive either way).
    /// A series per name waited on: turn it on where the names are few (jobs, leaders), not
    /// for a cache or a striped lock over a large key space.
    pub fn metrics_by_name(mut self, on: bool) -> Self {
        self.connect.options.metrics_by_name = on;
        self
    }

    /// Grant the plain [`Lock`] by a `MULTI`/`EXEC` transaction (default on) instead of the
    /// acquire script: `SET NX PX` and an `XADD` to the name's fence in one round trip, no
    /// Lua on the way in. On one server and behind Sentinel; a cluster, Redlock, a cache
    /// entry's lock, and a server or ACL without `MULTI`, `EXEC` or `TYPE` grant by script.
    /// A name's first grant (no fence yet, or its fence lost) takes a script more, which
    /// starts the fence one ms past the server clock (two transactions more without scripts),
    /// where the acquire script does it in its one round trip: for names granted once each
    /// (a lock per order id), off is a round trip less a grant.
    ///
    /// The guarantee is the same either way: tokens strictly increase across every grant of
    /// a name, by any client, with this on or off. Both append to the same fence, a stream
    /// whose next ID the server floors by its own clock, so a fence lost or put back older
    /// (a restart from a snapshot, `DEBUG LOADAOF`, `RESTORE`, a failover to a replica that
    /// missed the last grants) never repeats a token. Turn it off to grant by script (where
    /// the server runs scripts): a refused grant then leaves the fence as it is, and the
    /// script also reads an abandoned attempt's tombstone, so an attempt whose reply was lost
    /// and that reaches the server after its abandon is refused there, instead of holding the
    /// name until its lease ends.
    ///
    /// ```
    /// # fenced_testkit::doctest(|url| async move {
    /// let client = fenced::Client::builder(&url).counted_grants(false).connect().await?;
    /// let first = client.lock("invoices").acquire().await?;
    /// let token = first.fencing_token();
    /// first.release().await?;
    /// let counted = fenced::Client::builder(&url).connect().await?;
    /// let second = counted.lock("invoices").acquire().await?;
    /// assert!(second.fencing_token() > token);
    /// # second.release().await?;
    /// # Ok(()) });
    /// ```
    pub fn counted_grants(mut self, on: bool) -> Self {
        self.connect.options.counted_grants = on;
        self
    }

    /// Sends no Lua scripts (default off: the client learns it from the server's first
    /// refusal of one anyway). For a user whose ACL leaves out `@scripting`, a proxy without
    /// scripts, a server built without Lua.
    ///
    /// Without scripts, [`Lock`](crate::Lock) and [`UnfencedLock`](crate::UnfencedLock) work
    /// on one server or behind Sentinel: grants with fencing tokens, renewal, release, the
    /// lost signal, wake-ups. A grant is the transaction of
    /// [`counted_grants`](Self::counted_grants), as with scripts, whatever that setting
    /// says; the other steps are `WATCH`/`MULTI`/`EXEC`
    /// transactions instead of scripts, a round trip more each (none for a release where the
    /// server has `DELIFEQ`), with the same keys and tokens, so clients with and without
    /// scripts share a name. These steps have dedicated connections
    /// of their own, as many as [`transaction_connections`](Self::transaction_connections)
    /// allows. Every other primitive, a ticket's take-over and a local handover need scripts
    /// and answer [`Error::Unsupported`] before sending anything; so does
    /// [`connect`](Self::connect) for a Redis Cluster or Redlock. Reading works for every
    /// kind: [`Client::list`](crate::Client::list) and the status of a semaphore, a
    /// read-write lock or an election read the same commands as their scripts, in one
    /// `MULTI`/`EXEC`, with the same answer.
    ///
    /// ```no_run
    /// # async fn demo() -> fenced::Result<()> {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// let client = fenced::Client::builder(url).without_scripts().connect().await?;
    /// let guard = client.lock("nightly-report").acquire().await?;
    /// println!("token {}", guard.fencing_token());
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub fn without_scripts(mut self) -> Self {
        self.connect.options.without_scripts = true;
        self
    }

    /// How many dedicated connections transactions may use at once (default 16). A
    /// transaction needs a connection of its own for its `WATCH`; when all are busy, the next
    /// one waits its turn. Where scripts are forbidden, the lock's steps have as many again
    /// of their own ([`without_scripts`](Self::without_scripts)); no connection is opened
    /// before it is needed.
    pub fn transaction_connections(mut self, n: usize) -> Self {
        self.connect.options.transaction_connections = n;
        self
    }

    /// For `rediss://` URLs: trust this CA certificate (PEM) instead of the web's root
    /// certificates, as for a server with a certificate from a private CA.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.connect.tls_root_certificate = Some(pem.into());
        self
    }

    /// For `rediss://` URLs to a server that requires client certificates
    /// (`tls-auth-clients yes`): present this certificate and key (PEM). The key is never
    /// shown by `Debug`. A server that does not accept it closes the connection, and connecting
    /// fails with [`Error::Unavailable`].
    #[cfg(feature = "tls")]
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        let key = String::from_utf8_lossy(&key_pem.into()).into_owned();
        self.connect.tls_client = Some((certificate_pem.into(), Secret(key)));
        self
    }

    /// Keeps [`connect`](Self::connect) trying for up to `wait` while the server cannot be
    /// reached (connection refused, a server paused or still loading, a failover under way),
    /// instead of failing at once (default: no wait). A service that starts before its
    /// Redis, or during a restart, then needs no retry loop of its own.
    ///
    /// Attempts are 100ms apart, doubling to 1s; the first failure is logged once as a
    /// `tracing` warning. `connect` ends by the wait's end: the attempt running then is cut
    /// short, and the last attempt's error returned. What waiting cannot mend fails at once: a bad URL or
    /// setting, a wrong password, a server too old, a refused permission.
    ///
    /// ```
    /// # fenced_testkit::doctest(|url| async move {
    /// use std::time::Duration;
    ///
    /// let client = fenced::Client::builder(&url)
    ///     .connect_wait(Duration::from_secs(30)) // rides out a Redis restart at start
    ///     .connect()
    ///     .await?;
    /// # drop(client); Ok(()) });
    /// ```
    pub fn connect_wait(mut self, wait: Duration) -> Self {
        self.connect.options.connect_wait = wait;
        self
    }

    /// Validates the settings, connects and checks the server answers; within the
    /// [`connect_wait`](Self::connect_wait), again while the server cannot be reached.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad URL or setting (nothing is sent then);
    /// [`Error::Unavailable`] or [`Error::Timeout`] when the server cannot be reached (by the
    /// end of the connect wait, if one is set).
    pub async fn connect(self) -> Result<Client> {
        let wait = self.connect.options.connect_wait;
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause = Duration::from_millis(100);
        let mut last = match self.clone().connect_once().await {
            Err(e) if e.is_transient() && !wait.is_zero() => e,
            done => return done,
        };
        tracing::warn!(error = %last, ?wait, "Redis cannot be reached; trying again");
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(last);
            }
            tokio::time::sleep(pause.min(left)).await;
            pause = (pause * 2).min(Duration::from_secs(1));
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match tokio::time::timeout(left, self.clone().connect_once()).await {
                Err(_) => return Err(last),
                Ok(Err(e)) if e.is_transient() => last = e,
                Ok(done) => return done,
            }
        }
    }

    /// One attempt of [`connect`](Self::connect).
    async fn connect_once(self) -> Result<Client> {
        let options = self.connect.options.clone();
        options.validate()?;
        self.connect.check_key_events()?;
        crate::core::metrics::describe();
        let mut id = [0u8; 8];
        getrandom::fill(&mut id)
            .map_err(|e| Error::invalid(format!("the OS random source failed: {e}")))?;
        let client_id: Arc<str> = hex(&id).into();

        let (backend, notes) = self.connect.backend().await?;
        let key_events = self.connect.key_events(&backend).await?;
        // A cluster's transactions go to the master of their slot, reached like the seeds.
        let directory = self
            .connect
            .node_clients()
            .map(|client_at| Directory::new(client_at));
        let tx_pool = Arc::new(TxPool::new(
            backend.dedicated(),
            directory,
            options.transaction_connections,
            options.timeout,
        ));
        // The lock's steps where scripts are forbidden get connections of their own: a user's
        // transactions, which hold theirs while their closure runs, must not starve renewals.
        let lock_steps = Arc::new(TxPool::new(
            backend.dedicated(),
            None,
            options.transaction_connections,
            options.timeout,
        ));
        let backend = backend.with_pool(&lock_steps);
        // Once per connect that succeeds, however many attempts the connect wait took.
        crate::notes::warn(&notes);
        Ok(Client {
            core: Core::start(backend, options, client_id, key_events),
            tx_pool,
            notes: notes.into(),
        })
    }
}

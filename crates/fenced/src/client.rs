//! [`Client`]: the connection to Redis and the background tasks shared by every lock.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use crate::backend::{
    Backend, Conn, Connector, Dedicated, Failover, Node, Redlock, ShardedPubSub, bounded,
};
use crate::cache::Cache;
use crate::core::Core;
use crate::core::renew::RenewalStats;
use crate::error::{Error, Result};
use crate::fair::FairLock;
use crate::latch::Latch;
use crate::lock::Lock;
use crate::multi::MultiLock;
use crate::optimistic::pool::{Directory, NodeClient, TxPool};
use crate::options::ClientOptions;
use crate::reentrant::ReentrantLock;
use crate::resource::FencedResource;
use crate::rwlock::RwLock;
use crate::semaphore::Semaphore;
use crate::striped::StripedLock;
use crate::token::hex;

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
/// # fenced_testkit::doctest(|url| async move {
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
            url: url.to_owned(),
            redlock: None,
            cluster: None,
            sentinel: None,
            redlock_restart_grace: None,
            password: None,
            options: ClientOptions::default(),
            #[cfg(feature = "tls")]
            tls_root_certificate: None,
            #[cfg(feature = "tls")]
            tls_client: None,
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
    /// helpers need one server and answer [`Error::InvalidArgument`] on it.
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
    pub fn redlock_builder<S: AsRef<str>>(urls: &[S]) -> ClientBuilder {
        let mut builder = Client::builder(urls.first().map_or("", |u| u.as_ref()));
        builder.redlock = Some(urls.iter().map(|u| u.as_ref().to_owned()).collect());
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
    /// answers [`Error::InvalidArgument`]. Locks are not handed straight to a local waiter on a
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
    pub fn cluster_builder<S: AsRef<str>>(seeds: &[S]) -> ClientBuilder {
        let mut builder = Client::builder(seeds.first().map_or("", |u| u.as_ref()));
        builder.cluster = Some(seeds.iter().map(|u| u.as_ref().to_owned()).collect());
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
    /// reaches the new master and fails. Fencing tokens still increase (the `TIME` floor), so
    /// a fenced resource refuses the older holder. [`ClientBuilder::replica_acks`] narrows the
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
    pub fn sentinel_builder<S: AsRef<str>>(sentinels: &[S], service: &str) -> ClientBuilder {
        let mut builder = Client::builder(sentinels.first().map_or("", |u| u.as_ref()));
        builder.sentinel = Some((
            sentinels.iter().map(|u| u.as_ref().to_owned()).collect(),
            service.to_owned(),
        ));
        builder
    }

    /// A lock named `name` (a handle; nothing is sent to Redis until you acquire it).
    ///
    /// Lock one thing, not a whole collection: `product:10100101:shopping` rather than
    /// `products`. Names are up to [`MAX_NAME_LEN`](crate::limits::MAX_NAME_LEN) bytes and may not
    /// contain `{` or `}`.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self, name.into())
    }

    /// A reentrant lock named `name`: its holder may take it again (through its guard or an
    /// owner handle) without waiting for itself. Excludes plain [`Lock`]s of the same name.
    pub fn reentrant_lock(&self, name: impl Into<String>) -> ReentrantLock {
        ReentrantLock::new(self, name.into())
    }

    /// A semaphore named `name` with `permits` leased permits in all.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Semaphore {
        Semaphore::new(self, name.into(), permits)
    }

    /// Lock segments: `stripes` locks named `<prefix>:stripe:<n>` covering any number of
    /// keys, each key mapped to one stripe by a stable hash.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for 0 or more than [`MAX_STRIPES`](crate::limits::MAX_STRIPES)
    /// stripes, or a prefix that makes an invalid lock name.
    pub fn striped_lock(&self, prefix: impl Into<String>, stripes: u32) -> Result<StripedLock> {
        StripedLock::new(self, prefix.into(), stripes)
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
        MultiLock::new(self, names.into_iter().map(Into::into).collect())
    }

    /// A fair lock named `name`: granted in FIFO order across processes.
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self, name.into())
    }

    /// A read-write lock named `name`: many readers or one writer.
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(self, name.into())
    }

    /// A countdown latch named `name`.
    pub fn latch(&self, name: impl Into<String>) -> Latch {
        Latch::new(self, name.into())
    }

    /// A read-through cache named `name`, whose misses are computed once across every process.
    pub fn cache(&self, name: impl Into<String>) -> Cache {
        Cache::new(self, name.into())
    }

    /// A resource that accepts writes only with a current fencing token.
    pub fn resource(&self, name: impl Into<String>) -> FencedResource {
        FencedResource::new(self, name.into())
    }

    /// The lease core: the primitives' only way into the client.
    pub(crate) fn core(&self) -> &Arc<Core> {
        &self.core
    }

    /// The transactions' connection pool.
    pub(crate) fn tx_pool(&self) -> &Arc<TxPool> {
        &self.tx_pool
    }

    /// Waits until the background clean-ups handed over so far are done: releases of guards
    /// dropped without `release`, and acquire attempts cancelled or timed out mid-flight.
    /// Call it before a short-lived process exits, so it does not leave a lock behind to
    /// expire by its ttl. Bounded by twice the client's timeout.
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
}

/// Settings for a [`Client`], applied by [`ClientBuilder::connect`].
#[derive(Clone, Debug)]
pub struct ClientBuilder {
    url: String,
    /// Several independent masters (Redlock); `None` for one server.
    redlock: Option<Vec<String>>,
    /// Seed nodes of a Redis Cluster; `None` for one server.
    cluster: Option<Vec<String>>,
    /// Sentinels and the service (master name) they watch; `None` for a fixed server.
    sentinel: Option<(Vec<String>, String)>,
    /// How long a restarted Redlock master does not vote (default: the default ttl).
    redlock_restart_grace: Option<Duration>,
    /// A password given apart from the URL (never shown by `Debug`).
    password: Option<Secret>,
    options: ClientOptions,
    #[cfg(feature = "tls")]
    tls_root_certificate: Option<Vec<u8>>,
    /// A client certificate and key (PEM) for mutual TLS; the key is never shown.
    #[cfg(feature = "tls")]
    tls_client: Option<(Vec<u8>, Secret)>,
}

impl ClientBuilder {
    /// Prefix of every key and channel (default `"fenced:"`). Two clients with different
    /// namespaces never see each other's locks. May not contain `{` or `}`.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.options.namespace = namespace.into();
        self
    }

    /// Bound on every Redis call, connecting included (default 2s, at most 1h).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.options.timeout = timeout;
        self
    }

    /// Lease length of locks that do not set their own (default 30s). Renewal keeps a held
    /// lease alive, so this is how long a crashed holder blocks others.
    pub fn default_ttl(mut self, ttl: Duration) -> Self {
        self.options.default_ttl = ttl;
        self
    }

    /// How long a lock's fencing counter outlives its last grant, at least (default 24h; up to
    /// 1001 s more, since a busy name's grants set the counter's expiry once per 1000 s
    /// window, not every time). Clients that grant one name with different retentions keep
    /// its counter for at least the shortest of them. Fencing tokens keep increasing after
    /// that too, as long as the server clock has not stepped back by more than this period;
    /// see the crate documentation.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.options.fence_retention = retention;
        self
    }

    /// Bounds of the fallback poll of a waiter that hears no release notification (default
    /// 25ms growing to 1s). Only the first waiter of a name in a process polls.
    pub fn poll_interval(mut self, min: Duration, max: Duration) -> Self {
        self.options.poll_min = min;
        self.options.poll_max = max;
        self
    }

    /// The password to authenticate with (with the URL's user name, or as `default`),
    /// instead of one written in the URL: read it from a file or the environment, and it
    /// stays out of URLs, command lines and logs. It is never shown by `Debug` or in errors.
    /// On a Redlock client, every master gets it.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(Secret(password.into()));
        self
    }

    /// Redlock: how long a master that restarted (its `run_id` changed) does not vote, from
    /// when the change is seen (default: the default ttl). Set it to at least the longest ttl
    /// your locks use: a restarted master without persistence forgot the locks it held, and
    /// its vote could otherwise give a lock to a second holder while the first one's lease
    /// still runs on the other masters.
    pub fn redlock_restart_grace(mut self, grace: Duration) -> Self {
        self.redlock_restart_grace = Some(grace);
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
        self.options.replica_acks = Some((replicas, wait));
        self
    }

    /// How many dedicated connections transactions may use at once (default 16). A
    /// transaction needs a connection of its own for its `WATCH`; when all are busy, the next
    /// one waits its turn.
    pub fn transaction_connections(mut self, n: usize) -> Self {
        self.options.transaction_connections = n;
        self
    }

    /// For `rediss://` URLs: trust this CA certificate (PEM) instead of the web's root
    /// certificates, as for a server with a certificate from a private CA.
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
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
        self.tls_client = Some((certificate_pem.into(), Secret(key)));
        self
    }

    /// Validates the settings, connects and checks the server answers.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad URL or setting (nothing is sent then);
    /// [`Error::Unavailable`] or [`Error::Timeout`] when the server cannot be reached.
    pub async fn connect(self) -> Result<Client> {
        let options = self.options.clone();
        options.validate()?;
        let mut id = [0u8; 8];
        getrandom::fill(&mut id)
            .map_err(|e| Error::invalid(format!("the OS random source failed: {e}")))?;
        let client_id: Arc<str> = hex(&id).into();

        let backend = match (&self.redlock, &self.cluster, &self.sentinel) {
            (None, None, None) => {
                let (node, client) = self.node(&self.url)?;
                let node = node.with_acks(options.replica_acks);
                check_server(&node).await?;
                Backend::Single {
                    node,
                    client: Dedicated::Fixed(client),
                }
            }
            (Some(urls), None, None) => {
                if options.replica_acks.is_some() {
                    return Err(Error::invalid(
                        "replica_acks asks replicas of one master; Redlock's masters are independent, with no replicas to ask",
                    ));
                }
                self.redlock_backend(urls).await?
            }
            (None, Some(seeds), None) => self.cluster_backend(seeds).await?,
            (None, None, Some((sentinels, service))) => {
                self.sentinel_backend(sentinels, service).await?
            }
            _ => {
                return Err(Error::invalid(
                    "a client is one of: one server, Redlock over independent masters, a Redis Cluster, or a master behind Sentinel",
                ));
            }
        };
        // A cluster's transactions go to the master of their slot, reached like the seeds.
        let directory = backend.is_cluster().then(|| {
            let me = self.clone();
            let template = self
                .cluster
                .as_ref()
                .and_then(|seeds| seeds.first().cloned())
                .unwrap_or_default();
            let client_at: NodeClient =
                Arc::new(move |host: &str, port: u16| me.client_at(&template, host, port));
            Directory::new(client_at)
        });
        let tx_pool = Arc::new(TxPool::new(
            backend.dedicated(),
            directory,
            options.transaction_connections,
            options.timeout,
        ));
        Ok(Client {
            core: Core::start(backend, options, client_id),
            tx_pool,
        })
    }
}

impl ClientBuilder {
    /// A reconnecting connection to `url`, not connected yet.
    fn node(&self, url: &str) -> Result<(Node, redis::Client)> {
        let timeout = self.options.timeout;
        let (conn, redis_client) = self.manager(url).map_err(|e| {
            Error::invalid(format!("Redis URL {:?} is not usable: {e}", redact(url)))
        })?;
        Ok((Node::new(Conn::Single(conn), timeout), redis_client))
    }

    /// A reconnecting connection manager for `url` (lazy: it connects on first use), and a
    /// client for dedicated connections to the same server.
    fn manager(&self, url: &str) -> redis::RedisResult<(ConnectionManager, redis::Client)> {
        self.manager_of(self.redis_client(url)?)
    }

    /// A reconnecting connection manager for `redis_client`'s server (lazy).
    fn manager_of(
        &self,
        redis_client: redis::Client,
    ) -> redis::RedisResult<(ConnectionManager, redis::Client)> {
        let timeout = self.options.timeout;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(2)
            .set_max_delay(timeout);
        let conn = ConnectionManager::new_lazy_with_config(redis_client.clone(), config)?;
        Ok((conn, redis_client))
    }

    /// The master of `service` behind Sentinel, located now and followed from then on
    /// (`backend/sentinel.rs`).
    async fn sentinel_backend(&self, sentinels: &[String], service: &str) -> Result<Backend> {
        if sentinels.is_empty() || service.is_empty() {
            return Err(Error::invalid(
                "a Sentinel client needs at least one sentinel URL and the service (master) name",
            ));
        }
        let timeout = self.options.timeout;
        let mut clients = Vec::with_capacity(sentinels.len());
        for url in sentinels {
            // The builder's TLS settings (a private CA, a client certificate) apply to the
            // sentinels too; its password does not (sentinels often have none, and an AUTH
            // they do not expect fails the connection): give theirs in their URLs.
            use redis::IntoConnectionInfo;
            let info = url.as_str().into_connection_info();
            clients.push(info.and_then(|info| self.client_of(info)).map_err(|e| {
                Error::invalid(format!("Sentinel URL {:?} is not usable: {e}", redact(url)))
            })?);
        }
        // The master is reached like the first sentinel (TLS or not, the same password and
        // CA), at the address Sentinel names: a hostname or an IPv6 address needs no URL.
        let me = self.clone();
        let template = sentinels[0].clone();
        let connect: Connector = Arc::new(move |host: &str, port: u16| {
            me.manager_of(me.client_at(&template, host, port)?)
        });
        let failover = Failover::start(service.to_owned(), clients, connect, timeout);
        let node = Node::new(Conn::Sentinel(failover.clone()), timeout)
            .with_acks(self.options.replica_acks);
        check_server(&node).await?;
        Ok(Backend::Single {
            node,
            client: Dedicated::Sentinel(failover),
        })
    }

    /// A Redis Cluster from its seed nodes: the slot map is read now, from the first seed
    /// that answers.
    async fn cluster_backend(&self, seeds: &[String]) -> Result<Backend> {
        if seeds.is_empty() {
            return Err(Error::invalid(
                "a Redis Cluster client needs at least one seed node URL",
            ));
        }
        let timeout = self.options.timeout;
        let mut clients = Vec::with_capacity(seeds.len());
        for url in seeds {
            clients.push(self.redis_client(url).map_err(|e| {
                Error::invalid(format!("Redis URL {:?} is not usable: {e}", redact(url)))
            })?);
        }
        let cluster = self
            .cluster_client_builder(seeds)?
            // At most once (backend/node.rs, invariant 4): the node seam resends only what
            // the cluster says did not run.
            .retries(0)
            .build()
            .map_err(|e| Error::invalid(format!("Redis Cluster seeds are not usable: {e}")))?;
        let conn = bounded(timeout, "connect", cluster.get_async_connection()).await?;
        let node = Node::new(Conn::Cluster(conn), timeout).with_acks(self.options.replica_acks);
        // Sharded pub/sub when the nodes run SPUBLISH (Redis 7+) and the user may: releases
        // then travel to the channel's slot master only, not over the whole cluster bus.
        let mut probe = redis::cmd("SPUBLISH");
        probe
            .arg(format!(
                "{}{{fenced-probe}}:released",
                self.options.namespace
            ))
            .arg("probe");
        let sharded = match node.query::<i64>("sharded pub/sub probe", &probe).await {
            Ok(_) => {
                let me = self.clone();
                let seeds = seeds.to_vec();
                let make: ShardedPubSub = Arc::new(move |pushes| {
                    me.cluster_client_builder(&seeds)
                        .map_err(|e| {
                            redis::RedisError::from((
                                redis::ErrorKind::InvalidClientConfig,
                                "cluster seeds",
                                e.to_string(),
                            ))
                        })?
                        .use_protocol(redis::ProtocolVersion::RESP3)
                        .push_sender(pushes)
                        .build()
                });
                Some(make)
            }
            Err(e) => {
                tracing::debug!(error = %e, "fenced: no sharded pub/sub on this cluster; releases use PUBLISH");
                None
            }
        };
        Ok(Backend::Cluster {
            node: node.with_sharded_pubsub(sharded.is_some()),
            clients: clients.into_iter().map(Dedicated::Fixed).collect(),
            sharded,
        })
    }

    /// A cluster client builder over `seeds` with this builder's timeout, password and TLS.
    fn cluster_client_builder(
        &self,
        seeds: &[String],
    ) -> Result<redis::cluster::ClusterClientBuilder> {
        let timeout = self.options.timeout;
        let mut infos = Vec::with_capacity(seeds.len());
        for url in seeds {
            infos.push(self.connection_info(url).map_err(|e| {
                Error::invalid(format!("Redis URL {:?} is not usable: {e}", redact(url)))
            })?);
        }
        let mut builder = redis::cluster::ClusterClientBuilder::new(infos)
            .connection_timeout(timeout)
            .response_timeout(timeout);
        if let Some(Secret(password)) = &self.password {
            builder = builder.password(password);
        }
        #[cfg(feature = "tls")]
        if self.tls_root_certificate.is_some() || self.tls_client.is_some() {
            builder = builder.certs(self.tls_certificates());
        }
        Ok(builder)
    }

    /// Several masters: at least 3 distinct URLs, a majority of which answer now (the others
    /// are reconnected to when they come back).
    async fn redlock_backend(&self, urls: &[String]) -> Result<Backend> {
        if urls.len() < 3 {
            return Err(Error::invalid(format!(
                "Redlock needs at least 3 independent masters, not {}",
                urls.len()
            )));
        }
        for (i, url) in urls.iter().enumerate() {
            if urls[..i].contains(url) {
                return Err(Error::invalid(format!(
                    "Redlock master {:?} is listed twice; its vote would count twice",
                    redact(url)
                )));
            }
        }
        let mut nodes = Vec::with_capacity(urls.len());
        let mut clients = Vec::with_capacity(urls.len());
        for url in urls {
            let (node, client) = self.node(url)?;
            nodes.push(node);
            clients.push(client);
        }
        let grace = self
            .redlock_restart_grace
            .unwrap_or(self.options.default_ttl);
        let redlock = Redlock::new(nodes, clients, grace);
        let answered = redlock.ping().await;
        let needed = urls.len() / 2 + 1;
        if answered < needed {
            return Err(Error::NoQuorum {
                granted: answered,
                needed,
                nodes: urls.len(),
            });
        }
        Ok(Backend::Redlock(Arc::new(redlock)))
    }

    /// Where to connect: the URL, with the separate password in place of the URL's.
    fn connection_info(&self, url: &str) -> redis::RedisResult<redis::ConnectionInfo> {
        use redis::IntoConnectionInfo;
        let info = url.into_connection_info()?;
        Ok(match &self.password {
            Some(Secret(password)) => {
                let settings = info.redis_settings().clone().set_password(password);
                info.set_redis_settings(settings)
            }
            None => info,
        })
    }

    fn redis_client(&self, url: &str) -> redis::RedisResult<redis::Client> {
        self.client_of(self.connection_info(url)?)
    }

    /// A client of the server at `host:port`, with the settings of `template` (its scheme,
    /// user, password and database) and of this builder (TLS certificates): the address of a
    /// master named by Sentinel, or of a cluster node named by a `MOVED` reply.
    pub(crate) fn client_at(
        &self,
        template: &str,
        host: &str,
        port: u16,
    ) -> redis::RedisResult<redis::Client> {
        use redis::ConnectionAddr;
        let info = self.connection_info(template)?;
        let addr = match info.addr() {
            ConnectionAddr::Tcp(..) => ConnectionAddr::Tcp(host.to_owned(), port),
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => {
                return Err(redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "a node named by the server is reached over TCP; the URL given is not a TCP one",
                )));
            }
        };
        self.client_of(info.set_addr(addr))
    }

    #[cfg(feature = "tls")]
    fn client_of(&self, info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
        if self.tls_root_certificate.is_none() && self.tls_client.is_none() {
            return redis::Client::open(info);
        }
        redis::Client::build_with_tls(info, self.tls_certificates())
    }

    #[cfg(feature = "tls")]
    fn tls_certificates(&self) -> redis::TlsCertificates {
        redis::TlsCertificates {
            client_tls: self.tls_client.as_ref().map(|(cert, Secret(key))| {
                redis::ClientTlsConfig {
                    client_cert: cert.clone(),
                    client_key: key.clone().into_bytes(),
                }
            }),
            root_cert: self.tls_root_certificate.clone(),
        }
    }

    #[cfg(not(feature = "tls"))]
    fn client_of(&self, info: redis::ConnectionInfo) -> redis::RedisResult<redis::Client> {
        redis::Client::open(info)
    }
}

/// A password: kept, sent to Redis, never shown.
#[derive(Clone)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.find(':') {
                Some(colon) => format!(
                    "{}{}:***{}",
                    &url[..scheme + 3],
                    &userinfo[..colon],
                    &url[at..]
                ),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn passwords_are_not_echoed() {
        assert_eq!(
            redact("redis://app:s3cret@127.0.0.1:6379"),
            "redis://app:***@127.0.0.1:6379"
        );
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:pw@h/0"), "redis://:***@h/0");
    }

    proptest::proptest! {
        #[test]
        fn no_password_survives_redaction(
            user in "[a-z]{0,8}",
            password in "[A-Za-z0-9!#%&*+=~-]{1,16}",
            host in "[a-z0-9.]{1,12}",
            rest in "(:[0-9]{1,5})?(/[0-9])?",
        ) {
            // A password that is the mask itself cannot be told from its redaction.
            proptest::prop_assume!(password != "***");
            let url = format!("redis://{user}:{password}@{host}{rest}");
            let shown = redact(&url);
            proptest::prop_assert!(!shown.contains(&format!(":{password}@")), "{}", shown);
        }

        #[test]
        fn redaction_answers_for_any_text(text in ".{0,64}") {
            let _ = redact(&text);
        }
    }
}

/// The oldest server fenced supports: Redis 6.2 (`KEEPTTL`, `GETDEL`, `SET … GET`, ACL
/// selectors' predecessors; every Valkey reports 7.2 or later). Older servers are refused at
/// connect, before a script fails on a command they lack.
pub const MIN_SERVER_VERSION: (u32, u32) = (6, 2);

/// Reads the server's version (`INFO server`, which also proves it answers) and refuses one
/// older than [`MIN_SERVER_VERSION`]. A server that refuses `INFO` (an ACL without it, a
/// renamed command, a proxy) is let through after a `PING`: the version cannot be read, and
/// the scripts will say what they lack. (One server and Sentinel; a Redis Cluster and
/// Redlock's masters are not checked.)
async fn check_server(node: &Node) -> Result<()> {
    let info = match node
        .query::<String>("connect", redis::cmd("INFO").arg("server"))
        .await
    {
        Ok(info) => info,
        Err(Error::Permission { .. } | Error::Redis(_) | Error::UnexpectedReply { .. }) => {
            let _: String = node.query("ping", &redis::cmd("PING")).await?;
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    match server_version(&info) {
        Some(v) if (v.0, v.1) < MIN_SERVER_VERSION => Err(Error::unsupported(format!(
            "Redis {}.{}.{} is older than {}.{}, the oldest fenced supports",
            v.0, v.1, v.2, MIN_SERVER_VERSION.0, MIN_SERVER_VERSION.1
        ))),
        _ => Ok(()),
    }
}

/// `redis_version` of an `INFO server` text (Valkey reports the Redis version it is
/// compatible with there, 7.2.4 for every Valkey so far).
fn server_version(info: &str) -> Option<(u32, u32, u32)> {
    let text = info
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))?
        .trim();
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

#[cfg(test)]
mod version_tests {
    use super::server_version;

    #[test]
    fn the_server_version_is_read_from_info() {
        let info = "# Server\r\nredis_version:6.0.16\r\nredis_git_sha1:0\r\n";
        assert_eq!(server_version(info), Some((6, 0, 16)));
        assert_eq!(
            server_version("redis_version:7.2.4\r\nvalkey_version:9.1.2"),
            Some((7, 2, 4))
        );
        assert!(
            server_version("redis_version:6.0.16")
                .is_some_and(|v| (v.0, v.1) < super::MIN_SERVER_VERSION)
        );
        assert_eq!(server_version("nothing"), None);
    }
}

//! [`Node`]: one Redis server as the core sees it. Every command of the crate goes through
//! here: bounded by the timeout, scripts by `EVALSHA` with their reload, errors mapped once.
//!
//! Invariants:
//! 1. Every call is bounded by the per-call timeout; a timed-out write has an unknown outcome
//!    and is reported as [`Error::Timeout`].
//! 2. A `NOSCRIPT` reply loads the script and sends the call once more. In a batch, every
//!    script of the batch is loaded and the whole batch is sent again, so only idempotent
//!    calls (renewals) are batched.
//! 3. On Redis Cluster a pipeline must stay within one hash slot (redis-rs routes it by its
//!    first key), so a batch is split by slot and the parts are sent at once: the cluster
//!    connection writes the parts for one node back to back, one round trip per node.
//! 4. At most once. The cluster connection is built with no retries of its own, because it
//!    would resend a command whose connection broke after the server ran it: a reentrant
//!    hold counted twice, a stock decremented twice. Here a command is sent again only when
//!    the cluster's reply says it did not run (`not_run`: `MOVED`, `ASK`, `TRYAGAIN`,
//!    `CLUSTERDOWN`, and a `NOSCRIPT` that outlived the script's reload: mid-failover the
//!    slot's master changed between the load and the call), after the client has refreshed
//!    its slot map, within the timeout.
//! 5. Replica acknowledgements: with `replica_acks`, a write that must survive a failover
//!    is followed by `WAIT` in the SAME pipeline, on the same connection, so the count covers
//!    that write. `WAIT` holds the connection on the server until the replicas answer or its
//!    wait ends, which is why the wait must be short. Such writes are every one that grants,
//!    renews, raises a fence or stores data: grants and renewals (`run_acked`, judged by the
//!    backend), fenced reads and writes, cache stores and invalidations, latches and the
//!    atomic helpers (`run_replicated`, a shortfall is `NotReplicated`). Only writes whose
//!    loss in a failover is harmless skip it: releases and abandons (the lease then expires
//!    by its ttl), and reads. A handover is a grant that cannot be given back once the
//!    waiter has it, so with acknowledgements there is none (`Backend::hands_over`).
//!    Optimistic transactions (`MULTI`/`EXEC` on a pooled connection) do not wait either:
//!    their writes are the caller's own data, and `Client::transaction` says so.
//! 6. One way to run a step. Every call goes through the executor loop (`exec.rs`): a native
//!    twin where the server has its command, the grant's transaction, the script, or a
//!    `WATCH` transaction, picked by the call's step and the node's record of what its server
//!    allows (`allows.rs`), filled at connect where a probe costs nothing (`COMMAND INFO`
//!    beside `INFO server`), learned on use otherwise, forgotten when the connection is lost.
//! 7. Script hashes come from the server. A script's first call on a node loads it
//!    (`SCRIPT LOAD`) and keeps the hash the server answered; the client computes none. On a
//!    cluster the load goes to the master of the call's slot, where the call runs: one node
//!    that cannot be reached (mid-failover) must not fail a call that never goes there.

mod allows;
mod batch;
mod exec;
mod grant;
pub(crate) mod reads;
mod wait;
mod watched;

#[cfg(test)]
mod differential;
#[cfg(test)]
pub(crate) use differential::{runner, server_and_runtime};

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::cluster_routing::Slot;
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, Value};

#[cfg(feature = "sentinel")]
use super::sentinel::Failover;
use crate::error::{Error, Result};
use crate::kind::{AcquireReply, unexpected};
use crate::scripts::{Body, Hashes, ScriptCall};

/// The connection under a [`Node`]: one server through a reconnecting `ConnectionManager`,
/// or a whole Redis Cluster through redis-rs' cluster connection, which routes each command
/// to the master of its key's slot and follows `MOVED` and `ASK`. Every key of one primitive
/// shares its `{name}` hash tag, so each script runs on one node either way.
#[derive(Clone)]
pub(crate) enum Conn {
    /// One server (or one master of several).
    Single(ConnectionManager),
    /// A Redis Cluster.
    #[cfg(feature = "cluster")]
    Cluster(ClusterConnection),
    /// The master that Redis Sentinel names, followed across failovers (`sentinel.rs`).
    #[cfg(feature = "sentinel")]
    Sentinel(Arc<Failover>),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_command(cmd),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(f) => Box::pin(async move {
                let (mut conn, addr) = f.conn().await?;
                let reply = conn.req_packed_command(cmd).await;
                if let Err(e) = &reply {
                    f.saw(&addr, e);
                }
                reply
            }),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(f) => Box::pin(async move {
                let (mut conn, addr) = f.conn().await?;
                let replies = conn.req_packed_commands(cmd, offset, count).await;
                if let Err(e) = &replies {
                    f.saw(&addr, e);
                }
                replies
            }),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            #[cfg(feature = "cluster")]
            Conn::Cluster(c) => c.get_db(),
            #[cfg(feature = "sentinel")]
            Conn::Sentinel(_) => 0,
        }
    }
}

/// One server, or one whole cluster: where a command, a script or a batch goes.
#[derive(Clone)]
pub(crate) struct Node {
    conn: Conn,
    timeout: Duration,
    /// `WAIT` after writes that must survive a failover: this many replicas, this long.
    acks: Option<(usize, Duration)>,
    /// Scripts announce releases with `SPUBLISH` (sharded pub/sub on a cluster).
    sharded: bool,
    /// What the server lets this client run, as far as it knows (`allows.rs`).
    allows: Arc<allows::Allows>,
    /// Whether the client asked for grants by transaction (`ClientBuilder::counted_grants`).
    counted: bool,
    /// The hashes the server gave for the scripts loaded there (invariant 7).
    hashes: Arc<Hashes>,
    /// The dedicated connections of the lock's steps without scripts (`watched.rs`): one
    /// server or Sentinel only.
    pool: Option<Arc<super::pool::TxPool>>,
}

/// Too few replicas acknowledged a write (`WAIT`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shortfall {
    acked: usize,
    needed: usize,
}

impl Shortfall {
    /// The caller's error for a write of `operation` that fell short.
    pub(crate) fn error(self, operation: &'static str) -> Error {
        Error::NotReplicated {
            operation,
            acked: self.acked,
            needed: self.needed,
        }
    }
}

impl Node {
    pub(crate) fn new(conn: Conn, timeout: Duration) -> Self {
        let allows: Arc<allows::Allows> = Arc::default();
        // Behind Sentinel, a master forgotten (switched, demoted, unreachable) takes what was
        // learned of it along (`allows.rs`, invariant 3).
        #[cfg(feature = "sentinel")]
        if let Conn::Sentinel(failover) = &conn {
            let learned = Arc::downgrade(&allows);
            failover.on_forget(move || {
                if let Some(learned) = learned.upgrade() {
                    learned.forget();
                }
            });
        }
        Node {
            conn,
            timeout,
            acks: None,
            sharded: false,
            allows,
            counted: false,
            hashes: Arc::default(),
            pool: None,
        }
    }

    /// The hash of `body` on this node's server, loading it there first if this node has not
    /// yet (invariant 7). `key` is the call's first key: on a cluster, where the call runs.
    async fn hash_of(
        &self,
        conn: Conn,
        body: &Body,
        key: Option<&[u8]>,
    ) -> Result<Arc<str>, RedisError> {
        match self.hashes.get(body) {
            Some(hash) => Ok(hash),
            None => self.load(conn, body, key).await,
        }
    }

    /// `SCRIPT LOAD` of `body` where a call on `key` runs, and the hash the server answered,
    /// kept for the next calls (invariant 7).
    async fn load(
        &self,
        conn: Conn,
        body: &Body,
        key: Option<&[u8]>,
    ) -> Result<Arc<str>, RedisError> {
        let cmd = body.load_cmd();
        let reply: Value = match (conn, key) {
            #[cfg(feature = "cluster")]
            (Conn::Cluster(mut cluster), Some(key)) => {
                use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
                let route = Route::with_slot(Slot::for_key(key), SlotAddr::Master);
                let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                cluster.route_command(cmd, routing).await?
            }
            (mut conn, _) => cmd.query_async(&mut conn).await?,
        };
        let text = match &reply {
            Value::BulkString(bytes) => std::str::from_utf8(bytes).ok(),
            Value::SimpleString(text) => Some(text.as_str()),
            _ => None,
        };
        text.and_then(|text| self.hashes.learn(body, text))
            .ok_or_else(|| {
                RedisError::from((
                    redis::ErrorKind::Client,
                    "SCRIPT LOAD answered no script hash",
                    format!("{reply:?}"),
                ))
            })
    }

    /// Scripts announce with `SPUBLISH`: on a Redis Cluster whose nodes run it (Redis 7+).
    pub(crate) fn with_sharded_pubsub(mut self, sharded: bool) -> Self {
        self.sharded = sharded;
        self
    }

    /// Whether scripts announce on sharded pub/sub.
    pub(crate) fn sharded_pubsub(&self) -> bool {
        self.sharded
    }

    /// With the plain lock's grant by transaction where the server allows it (`grant.rs`).
    pub(crate) fn with_counted_grants(mut self, on: bool) -> Self {
        self.counted = on;
        self
    }

    /// With `WAIT replicas wait` after acknowledged writes (invariant 5).
    pub(crate) fn with_acks(mut self, acks: Option<(usize, Duration)>) -> Self {
        self.acks = acks;
        self
    }

    /// The per-call timeout.
    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether this node is a whole Redis Cluster (keys of different slots live apart).
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self.conn, Conn::Cluster(_));
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// Bounds `fut` by the per-call timeout and maps its error: the one place where a
    /// timeout becomes [`Error::Timeout`].
    pub(crate) async fn bounded<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T> {
        crate::error::bounded(self.timeout, operation, fut).await
    }

    /// Sends with `send` until the reply is not a cluster redirect (invariant 4). The caller
    /// bounds the whole by the timeout.
    async fn resending<T, F, Fut>(&self, mut send: F) -> Result<T, RedisError>
    where
        F: FnMut(Conn) -> Fut,
        Fut: Future<Output = Result<T, RedisError>>,
    {
        let mut pause = Duration::from_millis(2);
        loop {
            match send(self.conn.clone()).await {
                Err(e) if self.is_cluster() && not_run(&e) => {
                    tracing::debug!(error = %e, "fenced: the cluster redirected a command; sending it again");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                // The connection is lost: the next may reach another server, whose rules
                // are learned again (`allows.rs`, invariant 3).
                Err(e)
                    if e.is_io_error()
                        || e.is_connection_dropped()
                        || e.is_connection_refusal() =>
                {
                    self.allows.forget();
                    return Err(e);
                }
                other => return other,
            }
        }
    }

    /// One command. A `WRONGTYPE` is [`Error::WrongType`] naming the command's first
    /// argument: its key.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        operation: &'static str,
        cmd: &Cmd,
    ) -> Result<T> {
        self.bounded(
            operation,
            self.resending(|mut conn| async move { cmd.query_async(&mut conn).await }),
        )
        .await
        .map_err(|e| match cmd.args_iter().nth(1) {
            Some(redis::Arg::Simple(key)) if e.is_raw_wrong_type() => Error::WrongType {
                key: String::from_utf8_lossy(key).into_owned(),
                operation,
            },
            _ => e,
        })
    }

    /// After a refusal that read no ttl (a native `SET NX PX`'s nil): whether the call's
    /// lock key, KEYS[1], holds another type ([`AcquireReply::WrongType`]) or a lease, held
    /// or just ended (busy). Asked by a release of an owner nobody holds (a fresh random
    /// token): it deletes nothing and announces nothing, and fails with `WRONGTYPE` only
    /// where the key holds another type. Atomic, and run as every release runs (the native
    /// compare-and-delete, its script or its `WATCH` twin), so it needs no permission the
    /// lock does not have already.
    pub(crate) async fn refusal_type(&self, call: &ScriptCall) -> Result<AcquireReply> {
        let busy = AcquireReply::Busy { remaining: None };
        let Some(key) = call.key_at(1) else {
            return Ok(busy);
        };
        let nobody = crate::token::OwnerToken::fresh()?;
        let probe = ScriptCall::new(&crate::scripts::RELEASE)
            .named_as(call.operation())
            .key(&key)
            .arg(nobody.as_str())
            .arg("")
            .arg("");
        match self.run::<Value>(&probe).await {
            Err(Error::WrongType { .. }) => Ok(AcquireReply::WrongType { key: 1 }),
            Err(e) => Err(e),
            Ok(_) => Ok(busy),
        }
    }

    /// A `WRONGTYPE` raised inside `call`'s script, named ([`Error::WrongType`]): by the
    /// script's line (the `KEYS[n]` of the command that failed), or else by one pipelined
    /// `TYPE` of the call's keys, naming the first whose type is not the one `fenced` keeps
    /// there. Only on the error path; any other error is returned as it is.
    async fn named(&self, e: Error, call: &ScriptCall) -> Error {
        if !e.is_raw_wrong_type() {
            return e;
        }
        let operation = call.operation();
        let source = call.lua.body(self.sharded).source();
        if let Some(key) = e.wrong_type_in_script(source, |i| call.key_at(i)) {
            return Error::WrongType { key, operation };
        }
        let keys = call.keys();
        let mut pipe = redis::pipe();
        for key in &keys {
            pipe.cmd("TYPE").arg(key);
        }
        let Ok(types) = self.query_pipe::<Vec<String>>(operation, &pipe).await else {
            return e;
        };
        keys.into_iter()
            .zip(types)
            .find(|(key, found)| {
                found != "none" && crate::keys::expected_type(key).is_some_and(|t| t != found)
            })
            .map_or(e, |(key, _)| Error::WrongType { key, operation })
    }

    /// Runs `cmd` on every master of a cluster at once: (`host:port`, reply) per master. A
    /// master's error reply comes back as its value. For listings (`SCAN`), never for writes.
    #[cfg(feature = "cluster")]
    pub(crate) async fn on_every_master(
        &self,
        operation: &'static str,
        cmd: &Cmd,
    ) -> Result<Vec<(String, Value)>> {
        use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
        let Conn::Cluster(conn) = &self.conn else {
            return Err(Error::unsupported(
                "only a Redis Cluster has several masters",
            ));
        };
        let routing = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
        let reply = self
            .bounded(
                operation,
                self.resending(|_| {
                    let mut conn = conn.clone();
                    let (cmd, routing) = (cmd.clone(), routing.clone());
                    async move { conn.route_command(cmd, routing).await }
                }),
            )
            .await?;
        let Value::Map(pairs) = reply else {
            return Err(unexpected(operation, format!("{reply:?}")));
        };
        pairs
            .into_iter()
            .map(|(addr, value)| match addr {
                Value::BulkString(b) => Ok((String::from_utf8_lossy(&b).into_owned(), value)),
                other => Err(unexpected(operation, format!("{other:?}"))),
            })
            .collect()
    }

    /// On a cluster: `key`'s slot and the address of its master (`CLUSTER KEYSLOT`, then
    /// `CLUSTER SLOTS`), for operators.
    pub(crate) async fn slot_owner(&self, key: &str) -> Result<(u16, String)> {
        let slot: u16 = self
            .query(
                "cluster keyslot",
                redis::cmd("CLUSTER").arg("KEYSLOT").arg(key),
            )
            .await?;
        let ranges: Vec<Value> = self
            .query("cluster slots", redis::cmd("CLUSTER").arg("SLOTS"))
            .await?;
        for range in ranges {
            let Value::Array(parts) = range else { continue };
            let bound = |i: usize| match parts.get(i) {
                Some(Value::Int(n)) => u16::try_from(*n).ok(),
                _ => None,
            };
            let (Some(start), Some(end)) = (bound(0), bound(1)) else {
                continue;
            };
            if (start..=end).contains(&slot)
                && let Some(Value::Array(master)) = parts.get(2)
                && let (Some(Value::BulkString(ip)), Some(Value::Int(port))) =
                    (master.first(), master.get(1))
            {
                return Ok((slot, format!("{}:{port}", String::from_utf8_lossy(ip))));
            }
        }
        Err(unexpected(
            "cluster slots",
            format!("no master serves slot {slot}"),
        ))
    }

    /// Runs `cmd` on the cluster node at `addr` (`host:port`, as
    /// [`on_every_master`](Self::on_every_master) names it).
    #[cfg(feature = "cluster")]
    pub(crate) async fn query_at<T: FromRedisValue>(
        &self,
        operation: &'static str,
        addr: &str,
        cmd: &Cmd,
    ) -> Result<T> {
        use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
        let Conn::Cluster(conn) = &self.conn else {
            return Err(Error::unsupported("only a Redis Cluster has several nodes"));
        };
        let Some((host, port)) = addr
            .rsplit_once(':')
            .and_then(|(h, p)| Some((h.to_owned(), p.parse::<u16>().ok()?)))
        else {
            return Err(unexpected(operation, format!("node address {addr:?}")));
        };
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
        let value = self
            .bounded(operation, async {
                conn.clone().route_command(cmd.clone(), routing).await
            })
            .await?;
        redis::from_redis_value(value).map_err(|e| unexpected(operation, e.to_string()))
    }

    /// A pipeline, answered as a whole.
    pub(crate) async fn query_pipe<T: FromRedisValue>(
        &self,
        operation: &'static str,
        pipe: &Pipeline,
    ) -> Result<T> {
        self.bounded(
            operation,
            self.resending(|mut conn| async move { pipe.query_async(&mut conn).await }),
        )
        .await
    }

    /// Whether writes wait for replica acknowledgements (`WAIT`).
    pub(crate) fn acks_replicas(&self) -> bool {
        self.acks.is_some()
    }

    /// Whether this node sends no scripts, by the client's choice or learned (`allows.rs`).
    pub(crate) fn scripts_forbidden(&self) -> bool {
        self.allows.scripts_refused()
    }

    /// From now on this node sends no scripts: the client's choice.
    pub(crate) fn with_scripts_forbidden(self, forbidden: bool) -> Self {
        if forbidden {
            self.allows.choose_no_scripts();
        }
        self
    }

    /// Fills the record of what the server allows where a probe costs nothing (`allows.rs`,
    /// invariant 2): whether the server has the native twins' command, by `COMMAND INFO`
    /// (an entry for it, or nil). At best, at connect: an error (an ACL without `COMMAND`, a
    /// proxy) leaves it to be learned on use, and fails nothing.
    pub(crate) async fn probe_commands(&self) {
        let mut cmd = redis::cmd("COMMAND");
        cmd.arg("INFO").arg("DELIFEQ");
        if let Ok(Value::Array(entries)) = self.query::<Value>("connect", &cmd).await
            && let [entry] = &entries[..]
        {
            self.allows
                .native
                .learned(matches!(entry, Value::Array(_) | Value::Map(_)));
        }
    }
}

/// The server does not run a native twin's command: it does not know it (an older server),
/// or the user's ACL does not allow it (the script, allowed or not, then speaks for itself).
fn lacks_command(e: &RedisError) -> bool {
    let text = e.to_string();
    text.contains("unknown command") || e.code() == Some("NOPERM")
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// On a cluster, the first reply of a pipeline that says its command did not run (`not_run`),
/// raised as the pipeline's error, so that the pipeline is sent again where the slot is now
/// (invariant 4).
fn raise_not_run(cluster: bool, replies: &[Result<Value, RedisError>]) -> Result<(), RedisError> {
    match replies.iter().find(|r| matches!(r, Err(e) if not_run(e))) {
        Some(Err(e)) if cluster => Err(e.clone()),
        _ => Ok(()),
    }
}

/// Errors by which a cluster says it did NOT run the command (invariant 4), and no connection
/// to the slot's node yet. Only these are sent again; a command whose connection broke may
/// have run, and goes back to the caller as unknown.
fn not_run(e: &RedisError) -> bool {
    use redis::ServerErrorKind as S;
    matches!(
        e.kind(),
        redis::ErrorKind::Server(S::Moved | S::Ask | S::TryAgain | S::ClusterDown | S::NoScript)
            | redis::ErrorKind::ClusterConnectionNotFound
    )
}

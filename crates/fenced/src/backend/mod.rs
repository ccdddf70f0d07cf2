//! Where the core's commands go: one Redis server, a Redis Cluster (one node seam over
//! redis-rs' cluster connection), or Redlock over N independent masters (`redlock.rs`),
//! without touching the core or the primitives.
//!
//! The core sends each lease step (acquire, extend, release, abandon, a renewal batch) through
//! the backend, which answers with the step's reply: one node's, or the verdict of a strict
//! majority ([`Error::NoQuorum`] when it cannot be had). Everything else (resources,
//! inspection, the other primitives' scripts) needs one node ([`Backend::node`]).

pub(crate) mod connect;
mod node;
pub(crate) mod pool;
#[cfg(feature = "redlock")]
mod redlock;
#[cfg(feature = "sentinel")]
mod sentinel;

use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

pub(crate) use node::{Conn, Node, reads};
#[cfg(test)]
pub(crate) use node::{runner, server_and_runtime};
#[cfg(feature = "redlock")]
pub(crate) use redlock::Redlock;
#[cfg(feature = "sentinel")]
pub(crate) use sentinel::{Connector, Failover};

#[cfg(any(feature = "cluster", feature = "redlock"))]
use crate::error::Error;
use crate::error::Result;
use crate::kind::ExpiryReply;
use crate::kind::{
    AcquireReply, LeaseKind, ReleaseReply, abandon_reply, acquire_reply, expiry_reply,
    release_reply,
};
use crate::scripts::ScriptCall;
use crate::token::OwnerToken;

/// Part of a renewal batch ([`Backend::renew`]): the calls it carried (by index into the
/// batch) and their replies, or the error of its round trip.
pub(crate) type RenewPart = futures_util::future::BoxFuture<
    'static,
    (std::ops::Range<usize>, Result<Vec<Result<ExpiryReply>>>),
>;

/// The Redis deployment a client talks to. A closed set, so public types stay non-generic.
// One per client, never moved in a hot path: the size difference costs nothing, and boxing the
// single server would add an indirection to every command.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Backend {
    /// One server (or one Sentinel-managed master).
    Single {
        /// Commands, scripts and batches.
        node: Node,
        /// For connections of their own (pub/sub, transactions' `WATCH`).
        client: Dedicated,
    },
    #[cfg(feature = "cluster")]
    /// A Redis Cluster: every script runs on the master of its keys' slot (all keys of one
    /// primitive share its `{name}` hash tag), and renewal batches go one per node.
    Cluster {
        /// Commands and scripts, routed by slot.
        node: Node,
        /// One client per seed node, for classic pub/sub (a release published on any node of
        /// a cluster reaches subscribers on every node) and dedicated connections.
        clients: Vec<Dedicated>,
        /// With sharded pub/sub (Redis 7+): the client that carries the subscriptions, each
        /// on its slot's master. Scripts then announce with `SPUBLISH`.
        sharded: Option<ShardedPubSub>,
    },
    #[cfg(feature = "redlock")]
    /// Several independent masters; lease steps decided by a majority (`redlock.rs`).
    Redlock(Arc<Redlock>),
}

/// Where a lease step goes: one node (one server, or a cluster's connection that routes by
/// slot), or a majority of independent masters.
enum Route<'a> {
    One(&'a Node),
    #[cfg(feature = "redlock")]
    Quorum(&'a Redlock),
}

#[cfg(feature = "cluster")]
/// Makes the cluster client that carries sharded subscriptions, its pushes (messages,
/// dropped subscriptions) going to the given sender.
pub(crate) type ShardedPubSub = Arc<
    dyn Fn(
            tokio::sync::mpsc::UnboundedSender<redis::PushInfo>,
        ) -> redis::RedisResult<redis::cluster::ClusterClient>
        + Send
        + Sync,
>;

/// Where a client's subscriptions go (`core/feed.rs`).
pub(crate) enum PubSubRoute {
    /// Classic pub/sub on one connection, to the first of these that answers.
    Rotating(Vec<Dedicated>),
    #[cfg(feature = "cluster")]
    /// Sharded pub/sub on a Redis Cluster.
    Sharded(ShardedPubSub),
}

/// Where a dedicated connection (pub/sub, a transaction's `WATCH`) goes: a fixed server, or
/// the master that Sentinel names when the connection is made.
// Cloned per connection made, never in a hot path: boxing the client would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Clone)]
pub(crate) enum Dedicated {
    /// One server.
    Fixed(redis::Client),
    #[cfg(feature = "sentinel")]
    /// The current master of a Sentinel-managed service.
    Sentinel(Arc<Failover>),
}

impl Dedicated {
    /// A client of the server to connect to now.
    pub(crate) async fn client(&self) -> redis::RedisResult<redis::Client> {
        match self {
            Dedicated::Fixed(c) => Ok(c.clone()),
            #[cfg(feature = "sentinel")]
            Dedicated::Sentinel(f) => Ok(f.client().await?.0),
        }
    }
}

// Without Redlock or Cluster, the arguments that only a majority or a slot needs go unused.
#[cfg_attr(
    not(all(feature = "redlock", feature = "cluster")),
    allow(unused_variables)
)]
impl Backend {
    fn route(&self) -> Route<'_> {
        match self {
            Backend::Single { node, .. } => Route::One(node),
            #[cfg(feature = "cluster")]
            Backend::Cluster { node, .. } => Route::One(node),
            #[cfg(feature = "redlock")]
            Backend::Redlock(r) => Route::Quorum(r),
        }
    }

    /// The node that serves the keys of one primitive (all share its `{hash tag}`), for what
    /// is not a lease step: refused on Redlock, where one node alone decides nothing.
    pub(crate) fn node(&self) -> Result<&Node> {
        self.node_for("this")
    }

    /// [`node`](Self::node), refused on Redlock in the words of what needs it (`"a latch"`).
    pub(crate) fn node_for(&self, what: &str) -> Result<&Node> {
        match self.route() {
            Route::One(node) => Ok(node),
            #[cfg(feature = "redlock")]
            Route::Quorum(_) => Err(Error::unsupported(format!(
                "{what} needs one Redis server, Sentinel or a Redis Cluster: on Redlock only locks and semaphores run"
            ))),
        }
    }

    /// A client for dedicated connections: pub/sub, and transactions (`WATCH` state belongs to
    /// a connection). On Redlock, the first node's (every node publishes releases).
    pub(crate) fn dedicated(&self) -> Dedicated {
        match self {
            Backend::Single { client, .. } => client.clone(),
            #[cfg(feature = "cluster")]
            Backend::Cluster { clients, .. } => clients[0].clone(),
            #[cfg(feature = "redlock")]
            Backend::Redlock(r) => Dedicated::Fixed(r.clients()[0].clone()),
        }
    }

    /// Where subscriptions go: the server; on a cluster, each channel's slot master (sharded
    /// pub/sub), or else any node, tried in turn while one is down (`PUBLISH` reaches every
    /// node's subscribers); on Redlock, any master, tried in turn (every release is announced
    /// on every master).
    pub(crate) fn pubsub(&self) -> PubSubRoute {
        match self {
            Backend::Single { client, .. } => PubSubRoute::Rotating(vec![client.clone()]),
            #[cfg(feature = "cluster")]
            Backend::Cluster {
                sharded: Some(make),
                ..
            } => PubSubRoute::Sharded(make.clone()),
            #[cfg(feature = "cluster")]
            Backend::Cluster { clients, .. } => PubSubRoute::Rotating(clients.clone()),
            #[cfg(feature = "redlock")]
            Backend::Redlock(r) => {
                PubSubRoute::Rotating(r.clients().iter().cloned().map(Dedicated::Fixed).collect())
            }
        }
    }

    /// The nodes that keep `key`, each with a label for operators: the server's address; on
    /// a cluster, the master of the key's slot; through Sentinel, the master now; on Redlock,
    /// every master. A node whose address cannot be read is labelled with the error.
    pub(crate) async fn nodes_of(&self, key: &str) -> Vec<(String, Node)> {
        fn addr(client: &redis::Client) -> String {
            client.get_connection_info().addr().to_string()
        }
        match self {
            Backend::Single {
                node,
                client: Dedicated::Fixed(c),
            } => vec![(addr(c), node.clone())],
            #[cfg(feature = "sentinel")]
            Backend::Single {
                node,
                client: Dedicated::Sentinel(f),
            } => {
                let label = match f.conn().await {
                    Ok((_, (host, port))) => format!("{host}:{port} (master of {})", f.service()),
                    Err(e) => format!("master of {} unknown: {e}", f.service()),
                };
                vec![(label, node.clone())]
            }
            #[cfg(feature = "cluster")]
            Backend::Cluster { node, .. } => {
                let label = match node.slot_owner(key).await {
                    Ok((slot, owner)) => format!("{owner} (master of slot {slot})"),
                    Err(e) => format!("the master of its slot is unknown: {e}"),
                };
                vec![(label, node.clone())]
            }
            #[cfg(feature = "redlock")]
            Backend::Redlock(r) => r
                .each_node()
                .map(|(node, client)| (addr(client), node.clone()))
                .collect(),
        }
    }

    /// Waits for the calls still running in the background (Redlock's replies after a
    /// majority decided); nothing to wait for elsewhere.
    pub(crate) async fn settle(&self) {
        #[cfg(feature = "redlock")]
        if let Backend::Redlock(r) = self {
            r.settle().await;
        }
    }

    /// Whether leases run on several independent masters (Redlock).
    pub(crate) fn is_redlock(&self) -> bool {
        #[cfg(feature = "redlock")]
        return matches!(self, Backend::Redlock(_));
        #[cfg(not(feature = "redlock"))]
        false
    }

    /// The per-call timeout, the client's, which every node keeps.
    pub(crate) fn timeout(&self) -> Duration {
        match self.route() {
            Route::One(node) => node.timeout(),
            #[cfg(feature = "redlock")]
            Route::Quorum(r) => r.timeout(),
        }
    }

    /// Whether this is a Redis Cluster (its keys live on several nodes).
    pub(crate) fn is_cluster(&self) -> bool {
        #[cfg(feature = "cluster")]
        return matches!(self, Backend::Cluster { .. });
        #[cfg(not(feature = "cluster"))]
        false
    }

    /// Whether a lease may be handed straight to a local waiter: one server only (a handover
    /// is one script on one node, and it asks `PUBSUB NUMSUB` whether another client waits,
    /// which a cluster node answers for its own subscribers only), and without replica
    /// acknowledgements (a handed grant reaches its waiter at once, and could not be taken
    /// back if `WAIT` then fell short: `node.rs`, invariant 5).
    pub(crate) fn hands_over(&self) -> bool {
        matches!(self, Backend::Single { node, .. } if !node.acks_replicas() && !node.scripts_forbidden())
    }

    /// With the pool whose dedicated connections carry the lock's steps where scripts are
    /// forbidden (one server or Sentinel: `node/watched.rs`).
    pub(crate) fn with_pool(self, pool: &Arc<pool::TxPool>) -> Self {
        match self {
            Backend::Single { node, client } => Backend::Single {
                node: node.with_pool(Arc::clone(pool)),
                client,
            },
            #[allow(unreachable_patterns)]
            other => other,
        }
    }

    /// One acquire attempt. `clean`: false when the lease may exist for this owner without a
    /// grant, so the attempt must be abandoned.
    pub(crate) async fn acquire(
        &self,
        kind: &dyn LeaseKind,
        owner: &OwnerToken,
        call: &ScriptCall,
        abandon: &(dyn Fn() -> ScriptCall + Sync),
        ttl: Duration,
        sent_at: Instant,
    ) -> Result<(AcquireReply, bool)> {
        match self.route() {
            Route::One(node) => {
                let (value, short) = node.run_acked(call).await?;
                let mut reply = acquire_reply(value)?;
                if matches!(reply, AcquireReply::Busy { remaining: None })
                    && kind.checks_type_of_refusal()
                {
                    reply = node.refusal_type(call).await?;
                }
                match (reply, short) {
                    // A grant the replicas did not confirm: give it back now, so the retry
                    // within the wait finds the lock free, and answer the error. Should the
                    // give-back fail, the attempt stays armed and the core abandons it in
                    // the background.
                    (AcquireReply::Acquired(_), Some(short)) => {
                        if let Err(e) = node.run::<Value>(&abandon()).await {
                            tracing::debug!(error = %e, "fenced: giving back an unreplicated grant failed; abandoning it in the background");
                        }
                        Err(short.error("acquire"))
                    }
                    _ => Ok((reply, true)),
                }
            }
            #[cfg(feature = "redlock")]
            Route::Quorum(r) => r.acquire(kind, owner, call, abandon, ttl, sent_at).await,
        }
    }

    /// Whether leases of `kind` run on this backend; checked before anything is sent.
    pub(crate) fn supports(&self, kind: &dyn LeaseKind) -> Result<()> {
        match self {
            Backend::Single { .. } => Ok(()),
            #[cfg(feature = "cluster")]
            Backend::Cluster { .. } if !kind.one_slot() => Err(Error::unsupported(format!(
                "{} needs one server or Sentinel (its names are in different Cluster slots): lock them one by one, in a fixed order",
                kind.primitive().with_article()
            ))),
            #[cfg(feature = "cluster")]
            Backend::Cluster { .. } => Ok(()),
            #[cfg(feature = "redlock")]
            Backend::Redlock(r) => r.supports(kind),
        }
    }

    /// Renews or re-times one lease of `kind`.
    pub(crate) async fn extend(
        &self,
        operation: &'static str,
        call: &ScriptCall,
        kind: &dyn LeaseKind,
    ) -> Result<ExpiryReply> {
        match self.route() {
            Route::One(node) => {
                let (value, short) = node.run_acked(call).await?;
                match (expiry_reply(value)?, short) {
                    // Not replicated: the lease's validity must not count on it.
                    (ExpiryReply::Applied, Some(short)) => Err(short.error(operation)),
                    (reply, _) => Ok(reply),
                }
            }
            #[cfg(feature = "redlock")]
            Route::Quorum(r) => {
                r.extend(call, crate::kind::quorum(kind, r.nodes()), None)
                    .await
            }
        }
    }

    /// Sets a lease given back before its minimum hold to expire when the hold ends (`call`,
    /// an expiry change), as [`extend`](Self::extend) does. On Redlock, `void` (the lease's
    /// abandon, announcing nothing) then goes to every master that did not hold it, as after a
    /// release: a late grant there would outlive the hold by a ttl.
    pub(crate) async fn expire(
        &self,
        call: &ScriptCall,
        kind: &dyn LeaseKind,
        void: &(dyn Fn() -> ScriptCall + Sync),
    ) -> Result<ExpiryReply> {
        match self.route() {
            Route::One(_) => self.extend("release", call, kind).await,
            #[cfg(feature = "redlock")]
            Route::Quorum(r) => {
                let needed = crate::kind::quorum(kind, r.nodes());
                r.extend(call, needed, Some(void())).await
            }
        }
    }

    /// How many nodes must hold a lease of `kind`; `None` on one server (nothing to count).
    pub(crate) fn quorum(&self, kind: &dyn LeaseKind) -> Option<usize> {
        match self.route() {
            Route::One(_) => None,
            #[cfg(feature = "redlock")]
            Route::Quorum(r) => Some(crate::kind::quorum(kind, r.nodes())),
        }
    }

    /// Renews a batch of leases, in parts that each answer for their calls (by index into
    /// `calls`) as soon as their own round trips do: one part on one server with scripts (one
    /// pipelined round trip; on a cluster, one per node at once) and on Redlock; without
    /// scripts, one `WATCH` transaction per dedicated connection (`node/watched.rs`).
    /// `quorums` holds each call's quorum on Redlock (from [`quorum`](Self::quorum)), and
    /// nothing on one server.
    pub(crate) fn renew(&self, calls: Vec<ScriptCall>, quorums: Vec<usize>) -> Vec<RenewPart> {
        let calls = Arc::new(calls);
        let ranges = match self.route() {
            Route::One(node) => node.renewal_parts(calls.len()),
            #[cfg(feature = "redlock")]
            Route::Quorum(_) => std::iter::once(0..calls.len()).collect(),
        };
        let quorums = Arc::new(quorums);
        ranges
            .into_iter()
            .map(|range| {
                let (backend, calls, quorums) = (self.clone(), calls.clone(), quorums.clone());
                let part: RenewPart = Box::pin(async move {
                    let calls = &calls[range.clone()];
                    let replies = match backend.route() {
                        Route::One(node) => node
                            .run_batch_routed("renew", calls)
                            .await
                            .map(|r| r.into_iter().map(|r| r.and_then(expiry_reply)).collect()),
                        #[cfg(feature = "redlock")]
                        Route::Quorum(r) => r.renew(calls, &quorums).await,
                    };
                    (range, replies)
                });
                part
            })
            .collect()
    }

    /// Gives a lease of `kind` back; `announce` (channel, message) is what the release
    /// publishes. On Redlock, `void` (the lease's abandon) goes where the release found
    /// nothing: the grant's attempt may still be on its way there.
    pub(crate) async fn release(
        &self,
        call: &ScriptCall,
        announce: (&str, &str),
        kind: &dyn LeaseKind,
        void: &(dyn Fn() -> ScriptCall + Sync),
    ) -> Result<ReleaseReply> {
        match self.route() {
            Route::One(node) => release_reply(node.run(call).await?),
            #[cfg(feature = "redlock")]
            Route::Quorum(r) => {
                let needed = crate::kind::quorum(kind, r.nodes());
                r.release(call, announce, needed, void()).await
            }
        }
    }

    /// Voids an attempt of unknown outcome; true if it had taken the lease.
    pub(crate) async fn abandon(&self, call: &ScriptCall) -> Result<bool> {
        match self.route() {
            Route::One(node) => abandon_reply(node.run(call).await?),
            #[cfg(feature = "redlock")]
            Route::Quorum(r) => r.abandon(call).await,
        }
    }
}

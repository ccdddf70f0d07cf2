//! A small pool of dedicated connections for `WATCH`/`MULTI`/`EXEC`.
//!
//! `WATCH` state belongs to a TCP connection, so a transaction must never share its
//! connection with anybody else (on the client's multiplexed connection, another task's
//! commands would land inside the transaction). Each transaction checks out a connection of
//! its own and gives it back only when it is clean: no `WATCH` or `MULTI` pending. A
//! connection whose transaction was interrupted (its future dropped, a timeout) is closed
//! instead, and the server forgets its state with it (commands already written to it may
//! still arrive first; the `WATCH` before them still guards their `EXEC`).
//!
//! Behind Sentinel, a connection goes to the master located when it was made, and is used
//! again only while that is still the master the client knows.
//!
//! On a Redis Cluster, a transaction's keys share one hash slot, and its connection goes to
//! that slot's master. The pool learns each slot's master from the `MOVED` replies (a
//! [`Directory`]), and keeps idle connections per node.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::Dedicated;
use crate::error::{Error, Result};
use crate::util::lock_unpoisoned;

/// A Redis Cluster hash slot: a transaction's keys share one.
#[cfg(feature = "cluster")]
pub(crate) use redis::cluster_routing::Slot;

/// Without the `cluster` feature no transaction has a slot: a type without values keeps the
/// signatures of the pool and the retry loop.
#[cfg(not(feature = "cluster"))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Slot {}

/// A node's address, as a `MOVED` reply names it.
pub(crate) type Addr = (String, u16);

/// Makes a client of the node at an address, with the client's settings.
pub(crate) type NodeClient =
    Arc<dyn Fn(&str, u16) -> redis::RedisResult<redis::Client> + Send + Sync>;

/// Where a Redis Cluster's slots are served, as far as transactions have learned.
pub(crate) struct Directory {
    client_at: NodeClient,
    /// Slot -> its master, from the last `MOVED` reply about it. A slot not here goes to the
    /// first seed, which redirects.
    owners: Mutex<HashMap<Slot, Addr>>,
}

impl Directory {
    pub(crate) fn new(client_at: NodeClient) -> Self {
        Directory {
            client_at,
            owners: Mutex::new(HashMap::new()),
        }
    }
}

pub(crate) struct TxPool {
    /// The server (or, on a cluster, the first seed).
    client: Dedicated,
    /// On a Redis Cluster only.
    directory: Option<Directory>,
    /// Idle clean connections, with the node each goes to (`None`: `client`'s).
    idle: Mutex<Vec<(Option<Addr>, MultiplexedConnection)>>,
    permits: Arc<Semaphore>,
    /// The most connections kept idle.
    size: usize,
    timeout: Duration,
}

impl TxPool {
    pub(crate) fn new(
        client: Dedicated,
        directory: Option<Directory>,
        size: usize,
        timeout: Duration,
    ) -> Self {
        TxPool {
            client,
            directory,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size)),
            size,
            timeout,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<(Option<Addr>, MultiplexedConnection)>> {
        // A Vec of connections: a poisoned lock still holds usable ones.
        lock_unpoisoned(&self.idle)
    }

    /// The node serving `slot`, as last learned (`None`: the server, or a cluster's first
    /// seed).
    fn owner(&self, slot: Option<Slot>) -> Option<Addr> {
        let (directory, slot) = (self.directory.as_ref()?, slot?);
        lock_unpoisoned(&directory.owners).get(&slot).cloned()
    }

    /// How many connections the pool lends at once.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Closes every idle connection: after one failed as a whole (a restart, a failover), the
    /// others made at the same time are likely dead too, and each would fail one step.
    pub(crate) fn clear_idle(&self) {
        self.idle().clear();
    }

    /// A `MOVED` reply said `slot` is served at `addr` (`host:port`, or `:port` for the
    /// node that answered). False when the address cannot be used.
    pub(crate) fn moved(&self, slot: Slot, addr: &str, answered_by: Option<&Addr>) -> bool {
        let Some(directory) = &self.directory else {
            return false;
        };
        let Some((host, port)) = addr.rsplit_once(':') else {
            return false;
        };
        let Ok(port) = port.parse::<u16>() else {
            return false;
        };
        let host = match (host, answered_by) {
            ("", Some((known, _))) => known.clone(),
            ("", None) => return false,
            (host, _) => host.to_owned(),
        };
        lock_unpoisoned(&directory.owners).insert(slot, (host, port));
        true
    }

    /// A connection for one transaction on the node serving `slot` (`None` on one server):
    /// an idle one, or a new one. Waits (FIFO) while every connection of the pool is in use.
    pub(crate) async fn checkout(
        self: &Arc<Self>,
        fresh: bool,
        slot: Option<Slot>,
    ) -> Result<Pooled> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::invalid("the transaction pool is closed"))?;
        // On a cluster, the slot's master; behind Sentinel, the master now, so that no
        // connection made for a master that was since replaced is used again (a demoted
        // master that has not been told yet would still take writes).
        let (at, sentinel) = match (self.owner(slot), &self.client) {
            (Some(node), _) => (Some(node), None),
            // Unbounded here: locating the master asks each sentinel within the timeout in
            // turn, and the caller bounds the whole.
            #[cfg(feature = "sentinel")]
            (None, Dedicated::Sentinel(failover)) => {
                let (client, master) = failover
                    .client()
                    .await
                    .map_err(|e| Error::from_redis("connect", self.timeout, e))?;
                // Connections made for a master since replaced are never used again.
                self.idle()
                    .retain(|(node, _)| node.as_ref() == Some(&master));
                (Some(master), Some(client))
            }
            (None, _) => (None, None),
        };
        let reused = if fresh {
            None
        } else {
            let mut idle = self.idle();
            idle.iter()
                .rposition(|(node, _)| *node == at)
                .map(|i| idle.swap_remove(i).1)
        };
        let conn = match reused {
            Some(conn) => conn,
            None => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                let mut conn = crate::error::bounded(self.timeout, "connect", async {
                    let client = match (&at, &self.directory) {
                        (Some((host, port)), Some(directory)) => {
                            (directory.client_at)(host, *port)?
                        }
                        // Through Sentinel, the master located above (a failover moves it).
                        _ => match sentinel {
                            Some(client) => client,
                            None => self.client.client().await?,
                        },
                    };
                    client
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                })
                .await?;
                probe(&mut conn, self.timeout).await?;
                conn
            }
        };
        Ok(Pooled {
            conn,
            at,
            pool: self.clone(),
            clean: true,
            _permit: permit,
        })
    }
}

/// A checked-out connection. Back to the pool on drop if clean, closed otherwise.
pub(crate) struct Pooled {
    conn: MultiplexedConnection,
    /// The node it goes to: a cluster's node, or the master behind Sentinel (`None`: the
    /// server, or a cluster's first seed).
    at: Option<Addr>,
    pool: Arc<TxPool>,
    clean: bool,
    _permit: OwnedSemaphorePermit,
}

impl Pooled {
    /// The connection, for commands of this transaction only.
    pub(crate) fn conn(&self) -> MultiplexedConnection {
        self.conn.clone()
    }

    /// The node it goes to: a cluster's node, or the master behind Sentinel (`None`: the
    /// server, or a cluster's first seed).
    pub(crate) fn at(&self) -> Option<&Addr> {
        self.at.as_ref()
    }

    /// From now on the server holds state for this connection (`WATCH`, `MULTI`).
    pub(crate) fn dirty(&mut self) {
        self.clean = false;
    }

    /// The server confirmed the state is gone (`EXEC`, `UNWATCH` or `DISCARD` answered).
    pub(crate) fn cleaned(&mut self) {
        self.clean = true;
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if self.clean {
            // A clone keeps the connection open in the pool; this one goes with `self`.
            let mut idle = self.pool.idle();
            // On a cluster, idle connections to several nodes: keep the pool's size in all,
            // the oldest closed first (its node may have lost its slots since).
            while !idle.is_empty() && idle.len() >= self.pool.size.max(1) {
                idle.remove(0);
            }
            idle.push((self.at.take(), self.conn.clone()));
        }
        // Dropped dirty: the last clone of the connection goes away, the socket closes, and
        // the server discards its WATCH/MULTI state with it.
    }
}

/// Checks that a new connection may run `MULTI` and `EXEC`, with an empty transaction,
/// before it carries a real one. Without `MULTI`, the writes queued behind it would run at
/// once, unprotected by `WATCH`; this way a missing permission fails the transaction before
/// any write is sent, naming the command.
async fn probe(conn: &mut MultiplexedConnection, timeout: Duration) -> Result<()> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors().cmd("MULTI").cmd("EXEC");
    let replies: Vec<redis::Value> =
        crate::error::bounded(timeout, "transaction probe", pipe.query_async(conn)).await?;
    match replies
        .into_iter()
        .find(|v| matches!(v, redis::Value::ServerError(_)))
    {
        Some(redis::Value::ServerError(e)) => {
            Err(Error::from_redis("transaction probe", timeout, e.into()))
        }
        _ => Ok(()),
    }
}

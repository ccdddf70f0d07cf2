//! A small pool of dedicated connections for `WATCH`/`MULTI`/`EXEC`.
//!
//! `WATCH` state belongs to a TCP connection, so a transaction must never share its
//! connection with anybody else (on the client's multiplexed connection, another task's
//! commands would land inside the transaction). Each transaction checks out a connection of
//! its own and gives it back only when it is clean: no `WATCH` or `MULTI` pending. A
//! connection whose transaction was interrupted (its future dropped, a timeout) is closed
//! instead, which makes the server forget its state.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::AsyncConnectionConfig;
use redis::aio::MultiplexedConnection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::backend::Dedicated;
use crate::error::{Error, Result};

pub(crate) struct TxPool {
    client: Dedicated,
    idle: Mutex<Vec<MultiplexedConnection>>,
    permits: Arc<Semaphore>,
    timeout: Duration,
}

impl TxPool {
    pub(crate) fn new(client: Dedicated, size: usize, timeout: Duration) -> Self {
        TxPool {
            client,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(size)),
            timeout,
        }
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<MultiplexedConnection>> {
        // A Vec of connections: a poisoned lock still holds usable ones.
        crate::util::lock_unpoisoned(&self.idle)
    }

    /// A connection for one transaction: an idle one, or a new one. Waits (FIFO) while every
    /// connection of the pool is in use.
    pub(crate) async fn checkout(self: &Arc<Self>, fresh: bool) -> Result<Pooled> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::invalid("the transaction pool is closed"))?;
        let reused = if fresh { None } else { self.idle().pop() };
        let conn = match reused {
            Some(conn) => conn,
            None => {
                let config = AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(self.timeout))
                    .set_response_timeout(Some(self.timeout));
                let mut conn = crate::backend::bounded(self.timeout, "connect", async {
                    // Through Sentinel, the master is located now (a failover moves it).
                    let client = self.client.client().await?;
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
            pool: self.clone(),
            clean: true,
            _permit: permit,
        })
    }
}

/// A checked-out connection. Back to the pool on drop if clean, closed otherwise.
pub(crate) struct Pooled {
    conn: MultiplexedConnection,
    pool: Arc<TxPool>,
    clean: bool,
    _permit: OwnedSemaphorePermit,
}

impl Pooled {
    /// The connection, for commands of this transaction only.
    pub(crate) fn conn(&self) -> MultiplexedConnection {
        self.conn.clone()
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
            self.pool.idle().push(self.conn.clone());
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
        crate::backend::bounded(timeout, "transaction probe", pipe.query_async(conn)).await?;
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

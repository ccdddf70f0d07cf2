//! [`Failover`]: one master found through Redis Sentinel, and found again after a failover.
//!
//! Invariants:
//! 1. The master is whatever a sentinel names now (`SENTINEL GET-MASTER-ADDR-BY-NAME`), asked
//!    of the sentinels in turn, the first answer wins; a sentinel that does not answer within
//!    the timeout is skipped.
//! 2. The connection to a master is dropped, and the master asked for again, on the errors
//!    that say it is no longer the master or no longer there: `READONLY` (demoted to a
//!    replica), `MASTERDOWN`, a refused or dropped connection. Nothing is sent twice for it:
//!    the command that met the error fails with it (its outcome may be unknown), and the next
//!    command goes to the master the sentinels name then.
//! 3. Dedicated connections (pub/sub, transactions) ask for the master when they connect, so
//!    they follow it too.
//! 4. One task per client listens to the sentinels' `+switch-master` announcements and
//!    forgets the master the moment they switch. Without it, a demoted master that has not
//!    been told yet keeps taking this client's renewals, which the new master never sees:
//!    the lease would expire there while its holder believes it renewed. On (re)subscribing,
//!    the master is forgotten too, since a switch may have been missed meanwhile.
//! 5. A master forgotten takes along what the node learned of its commands (`on_forget`,
//!    `node/allows.rs` invariant 3): the next master may lack one the old one ran.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::ConnectionManager;
use redis::{RedisError, RedisResult};
use tokio_util::sync::CancellationToken;

use crate::util::{Backoff, lock_unpoisoned};

/// Makes a connection manager and a client for a master at (host, port), with the client's
/// settings (password, TLS).
pub(crate) type Connector =
    Arc<dyn Fn(&str, u16) -> RedisResult<(ConnectionManager, redis::Client)> + Send + Sync>;

/// A master behind Redis Sentinel.
pub(crate) struct Failover {
    service: String,
    sentinels: Vec<redis::Client>,
    connect: Connector,
    timeout: Duration,
    current: Mutex<Option<Master>>,
    /// Called whenever the master is forgotten: what the client learned of the old one's
    /// commands may not hold for the next (`node/allows.rs`).
    on_forget: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// Ends the `+switch-master` listener when the client is gone.
    stop: CancellationToken,
}

impl Drop for Failover {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[derive(Clone)]
struct Master {
    addr: (String, u16),
    conn: ConnectionManager,
    client: redis::Client,
}

impl Failover {
    /// A failover-following master, and its `+switch-master` listener (invariant 4).
    pub(crate) fn start(
        service: String,
        sentinels: Vec<redis::Client>,
        connect: Connector,
        timeout: Duration,
    ) -> Arc<Self> {
        let me = Arc::new(Failover {
            service,
            sentinels,
            connect,
            timeout,
            current: Mutex::new(None),
            on_forget: std::sync::OnceLock::new(),
            stop: CancellationToken::new(),
        });
        tokio::spawn(listen(Arc::downgrade(&me), me.stop.clone()));
        me
    }

    /// Forgets the master: the next command locates it again.
    fn forget(&self) {
        *lock_unpoisoned(&self.current) = None;
        self.forgotten();
    }

    /// Calls `f` whenever the master is forgotten (one hook; a second is ignored).
    pub(crate) fn on_forget(&self, f: impl Fn() + Send + Sync + 'static) {
        let _ = self.on_forget.set(Box::new(f));
    }

    fn forgotten(&self) {
        if let Some(f) = self.on_forget.get() {
            f();
        }
    }

    /// Where the master is now, by the first sentinel that answers (invariant 1).
    pub(crate) async fn locate(&self) -> RedisResult<(String, u16)> {
        let mut last = None;
        for sentinel in &self.sentinels {
            let ask = async {
                let mut conn = sentinel.get_multiplexed_async_connection().await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.service)
                    .query_async::<Option<(String, u16)>>(&mut conn)
                    .await
            };
            match tokio::time::timeout(self.timeout, ask).await {
                Ok(Ok(Some(addr))) => return Ok(addr),
                Ok(Ok(None)) => {
                    last = Some(RedisError::from((
                        redis::ErrorKind::Client,
                        "Sentinel does not know this service",
                        self.service.clone(),
                    )));
                }
                Ok(Err(e)) => last = Some(e),
                Err(_) => {
                    last = Some(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "a sentinel did not answer in time",
                    )));
                }
            }
        }
        Err(last
            .unwrap_or_else(|| RedisError::from((redis::ErrorKind::Client, "no sentinel to ask"))))
    }

    async fn master(&self) -> RedisResult<Master> {
        if let Some(m) = lock_unpoisoned(&self.current).clone() {
            return Ok(m);
        }
        let (host, port) = self.locate().await?;
        let (conn, client) = (self.connect)(&host, port)?;
        let master = Master {
            addr: (host, port),
            conn,
            client,
        };
        let mut current = lock_unpoisoned(&self.current);
        // Another task may have located it meanwhile: keep one connection.
        Ok(current.get_or_insert(master).clone())
    }

    /// The connection to the master now, located if need be.
    pub(crate) async fn conn(&self) -> RedisResult<(ConnectionManager, (String, u16))> {
        let m = self.master().await?;
        Ok((m.conn, m.addr))
    }

    /// The service's name, as Sentinel knows it.
    pub(crate) fn service(&self) -> &str {
        &self.service
    }

    /// A client of the master now, for a dedicated connection (invariant 3), and where it is:
    /// a dedicated connection made for a master that is no longer the one must not be used
    /// again (`backend/pool.rs`).
    pub(crate) async fn client(&self) -> RedisResult<(redis::Client, (String, u16))> {
        let m = self.master().await?;
        Ok((m.client, m.addr))
    }

    /// Reads an error of a command sent to the master at `addr` (invariant 2).
    pub(crate) fn saw(&self, addr: &(String, u16), e: &RedisError) {
        use redis::ServerErrorKind as S;
        let moved = matches!(
            e.kind(),
            redis::ErrorKind::Server(S::ReadOnly | S::MasterDown)
        ) || e.is_connection_refusal()
            || e.is_connection_dropped()
            || e.is_io_error();
        if moved {
            let mut current = lock_unpoisoned(&self.current);
            if current.as_ref().is_some_and(|m| &m.addr == addr) {
                tracing::debug!(error = %e, host = %addr.0, port = addr.1, "fenced: the master may have changed; asking Sentinel again");
                *current = None;
                drop(current);
                self.forgotten();
            }
        }
    }
}

/// The `+switch-master` listener (invariant 4): one sentinel at a time, the next one when it
/// fails, until the client is gone.
async fn listen(failover: Weak<Failover>, stop: CancellationToken) {
    let mut next = 0usize;
    let mut backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    loop {
        let Some(f) = failover.upgrade() else { return };
        let (sentinel, timeout, service) = (
            f.sentinels[next % f.sentinels.len().max(1)].clone(),
            f.timeout,
            f.service.clone(),
        );
        drop(f);
        let subscribe = async {
            let mut pubsub = sentinel.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, RedisError>(pubsub)
        };
        let subscribed = tokio::select! {
            () = stop.cancelled() => return,
            s = tokio::time::timeout(timeout, subscribe) => s,
        };
        if let Ok(Ok(pubsub)) = subscribed {
            backoff.reset();
            if let Some(f) = failover.upgrade() {
                f.forget();
            }
            let mut messages = pubsub.into_on_message();
            loop {
                let message = tokio::select! {
                    () = stop.cancelled() => return,
                    m = messages.next() => m,
                };
                let Some(message) = message else { break };
                // "<service> <old ip> <old port> <new ip> <new port>"
                let payload = String::from_utf8_lossy(message.get_payload_bytes()).into_owned();
                if payload.split(' ').next() == Some(service.as_str()) {
                    let Some(f) = failover.upgrade() else { return };
                    tracing::debug!(switch = %payload, "fenced: Sentinel switched the master");
                    f.forget();
                }
            }
        }
        next = next.wrapping_add(1);
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(backoff.next_wait()) => {}
        }
    }
}

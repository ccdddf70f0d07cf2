//! The pub/sub connection under the notify task (`notify.rs`): classic pub/sub on one
//! connection (one server, any node of a cluster, Redlock's first master), or sharded pub/sub
//! (`SSUBSCRIBE`) over a cluster connection, each channel on the master of its slot.
//!
//! Invariants:
//! 1. A subscription counts only once the server confirmed it (notify.rs invariant 2): on a
//!    cluster, the node that serves the channel's slot.
//! 2. Sharded: a channel that the server drops without being asked (its slot moved to
//!    another master, which sends `sunsubscribe`) comes back as [`Event::Dropped`]; the task
//!    subscribes to it again, which redis-rs routes to the slot's new master, and its waiters
//!    retry at once, since a release may have been published in between.
//! 3. Sharded: when a node's connection breaks, redis-rs reconnects and subscribes again by
//!    itself ([`Event::Reconnecting`]); waiters poll meanwhile and retry when told.

use std::collections::HashSet;
use std::time::Duration;

use futures_util::StreamExt;
#[cfg(feature = "cluster")]
use futures_util::future::join_all;
use redis::aio::{PubSubSink, PubSubStream};
#[cfg(feature = "cluster")]
use redis::cluster_async::ClusterConnection;
#[cfg(feature = "cluster")]
use redis::{PushInfo, PushKind};
#[cfg(feature = "cluster")]
use tokio::sync::mpsc;

#[cfg(feature = "cluster")]
use crate::backend::ShardedPubSub;
use crate::backend::{Dedicated, PubSubRoute};

/// Where the pub/sub connection goes, and how it is made.
pub(crate) enum Source {
    /// Classic pub/sub: the first of these that answers, the next one after a failure (a
    /// cluster node that is down must not keep every waiter polling while the others are up).
    Rotating {
        clients: Vec<Dedicated>,
        next: usize,
    },
    /// Sharded pub/sub over a cluster connection of its own.
    #[cfg(feature = "cluster")]
    Sharded(ShardedPubSub),
}

impl From<PubSubRoute> for Source {
    fn from(route: PubSubRoute) -> Self {
        match route {
            PubSubRoute::Rotating(clients) => Source::Rotating { clients, next: 0 },
            #[cfg(feature = "cluster")]
            PubSubRoute::Sharded(make) => Source::Sharded(make),
        }
    }
}

/// A live pub/sub connection.
pub(crate) enum Feed {
    Classic {
        sink: PubSubSink,
        stream: PubSubStream,
    },
    #[cfg(feature = "cluster")]
    Sharded {
        conn: ClusterConnection,
        pushes: mpsc::UnboundedReceiver<PushInfo>,
    },
}

/// What the connection brought.
pub(crate) enum Event {
    /// A release announced on a channel.
    Message(redis::Msg),
    /// The server dropped this channel's subscription unasked (invariant 2).
    Dropped(String),
    /// A node's connection broke; redis-rs is reconnecting it (invariant 3).
    Reconnecting,
    /// The connection is gone: connect again.
    Closed,
}

impl Source {
    /// Connects and subscribes to `wanted`; `None` when that failed (try later).
    pub(crate) async fn connect(
        &mut self,
        wanted: &HashSet<String>,
        timeout: Duration,
    ) -> Option<Feed> {
        let mut feed = match self {
            Source::Rotating { clients, next } => {
                let target = clients.get(*next % clients.len().max(1))?.clone();
                // Through Sentinel, the master is located now: a failover moves the
                // subscriptions too.
                let pubsub = async {
                    let client = target.client().await?;
                    client.get_async_pubsub().await
                };
                match tokio::time::timeout(timeout, pubsub).await {
                    Ok(Ok(p)) => {
                        let (sink, stream) = p.split();
                        Feed::Classic { sink, stream }
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "fenced: pub/sub connect failed");
                        *next = next.wrapping_add(1);
                        return None;
                    }
                    Err(_) => {
                        tracing::debug!("fenced: pub/sub connect timed out");
                        *next = next.wrapping_add(1);
                        return None;
                    }
                }
            }
            #[cfg(feature = "cluster")]
            Source::Sharded(make) => {
                let (tx, pushes) = mpsc::unbounded_channel();
                let client = match make(tx) {
                    Ok(c) => c,
                    Err(e) => {
                        tracing::debug!(error = %e, "fenced: sharded pub/sub client failed");
                        return None;
                    }
                };
                match tokio::time::timeout(timeout, client.get_async_connection()).await {
                    Ok(Ok(conn)) => Feed::Sharded { conn, pushes },
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "fenced: sharded pub/sub connect failed");
                        return None;
                    }
                    Err(_) => {
                        tracing::debug!("fenced: sharded pub/sub connect timed out");
                        return None;
                    }
                }
            }
        };
        let channels: Vec<&String> = wanted.iter().collect();
        if !channels.is_empty() && !feed.subscribe(&channels, timeout).await {
            #[cfg_attr(not(feature = "cluster"), allow(irrefutable_let_patterns))]
            if let Source::Rotating { next, .. } = self {
                *next = next.wrapping_add(1);
            }
            return None;
        }
        Some(feed)
    }
}

impl Feed {
    /// Subscribes to `channels`; true once every one is confirmed (invariant 1).
    pub(crate) async fn subscribe(&mut self, channels: &[&String], timeout: Duration) -> bool {
        match self {
            Feed::Classic { sink, .. } => matches!(
                tokio::time::timeout(timeout, sink.subscribe(channels)).await,
                Ok(Ok(()))
            ),
            #[cfg(feature = "cluster")]
            // One SSUBSCRIBE per channel (channels of different slots live on different
            // nodes), all at once.
            Feed::Sharded { conn, .. } => {
                let each = channels.iter().map(|channel| {
                    let mut conn = conn.clone();
                    async move { conn.ssubscribe(channel.as_str()).await }
                });
                matches!(
                    tokio::time::timeout(timeout, join_all(each)).await,
                    Ok(results) if results.iter().all(Result::is_ok)
                )
            }
        }
    }

    /// Subscribes to one channel the server may refuse (an ACL without its pattern):
    /// `Some(true)` confirmed, `Some(false)` refused with the connection still fine, `None`
    /// the connection did not answer.
    pub(crate) async fn try_subscribe(&mut self, channel: &str, timeout: Duration) -> Option<bool> {
        match self {
            Feed::Classic { sink, .. } => {
                match tokio::time::timeout(timeout, sink.subscribe(channel)).await {
                    Ok(Ok(())) => Some(true),
                    // An error reply (`NOPERM`), as opposed to a broken connection.
                    Ok(Err(e)) if e.code().is_some() => Some(false),
                    _ => None,
                }
            }
            #[cfg(feature = "cluster")]
            Feed::Sharded { .. } => Some(false),
        }
    }

    /// Unsubscribes from `channel`; false if the connection did not answer.
    pub(crate) async fn unsubscribe(&mut self, channel: &str, timeout: Duration) -> bool {
        let done = match self {
            Feed::Classic { sink, .. } => {
                tokio::time::timeout(timeout, sink.unsubscribe(channel)).await
            }
            #[cfg(feature = "cluster")]
            Feed::Sharded { conn, .. } => {
                tokio::time::timeout(timeout, conn.sunsubscribe(channel)).await
            }
        };
        matches!(done, Ok(Ok(())))
    }

    /// The next event worth the task's attention.
    pub(crate) async fn next(&mut self) -> Event {
        match self {
            Feed::Classic { stream, .. } => match stream.next().await {
                Some(msg) => Event::Message(msg),
                None => Event::Closed,
            },
            #[cfg(feature = "cluster")]
            Feed::Sharded { pushes, .. } => loop {
                let Some(push) = pushes.recv().await else {
                    return Event::Closed;
                };
                match push.kind {
                    PushKind::SMessage => {
                        if let Some(msg) = redis::Msg::from_push_info(push) {
                            return Event::Message(msg);
                        }
                    }
                    PushKind::SUnsubscribe => {
                        if let Some(channel) = pushed_channel(&push) {
                            return Event::Dropped(channel);
                        }
                    }
                    PushKind::Disconnection => return Event::Reconnecting,
                    // Confirmations of our own subscribes (and redis-rs' resubscribes).
                    _ => {}
                }
            },
        }
    }
}

#[cfg(feature = "cluster")]
/// The channel named by a subscription push (`[channel, count]`).
fn pushed_channel(push: &PushInfo) -> Option<String> {
    match push.data.first()? {
        redis::Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

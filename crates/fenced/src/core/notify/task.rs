//! The pub/sub task of one client: it owns the one pub/sub connection, subscribes what the
//! waiters need (and the keyspace twins, invariant 7), resubscribes after a reconnect, and
//! hands every message to the registry.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{Command, LocalWaiters, Queues, twin};
use crate::backend::PubSubRoute;
use crate::core::feed::{Event, Feed, Source};
use crate::util::{Backoff, sleep_until_opt};

/// Starts the pub/sub task of one client and returns the registry it serves. `route`:
/// where subscriptions go (`core/feed.rs`).
pub(crate) fn start(
    route: PubSubRoute,
    client_id: Arc<str>,
    timeout: Duration,
    key_events: Option<Arc<str>>,
) -> Arc<LocalWaiters> {
    let (commands, rx) = mpsc::unbounded_channel();
    let local = Arc::new(LocalWaiters {
        queues: Mutex::new(Queues::default()),
        live_queues: 0.into(),
        live_streaks: 0.into(),
        client_id,
        commands,
        key_events: key_events.clone(),
    });
    tokio::spawn(run(
        Source::from(route),
        Arc::downgrade(&local),
        rx,
        timeout,
        key_events,
    ));
    local
}

/// The pub/sub task: owns the one pub/sub connection, (re)subscribes, and routes messages.
/// It ends when the client (the last sender of commands) is gone.
async fn run(
    mut source: Source,
    local: std::sync::Weak<LocalWaiters>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    timeout: Duration,
    key_events: Option<Arc<str>>,
) {
    let mut wanted: HashSet<String> = HashSet::new();
    // Keyspace channels beside wanted release channels (invariant 7), subscribed on their
    // own so that one the server refuses (an ACL without its pattern) costs only itself.
    let mut twins = Twins::default();
    let mut feed: Option<Feed> = None;
    let mut reconnect_at: Option<Instant> = None;
    let mut reconnect = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
    let wake_all = |local: &std::sync::Weak<LocalWaiters>| {
        if let Some(local) = local.upgrade() {
            local.wake_all_heads();
        }
    };

    loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { break };
                match command {
                    Command::Subscribe(channel, ack) => {
                        let fresh = wanted.insert(channel.clone());
                        let ok = match feed.as_mut() {
                            // Connecting subscribes to everything wanted, this channel included.
                            None => {
                                feed = source.connect(&wanted, timeout).await;
                                twins.resubscribe(&mut feed, timeout).await;
                                feed.is_some()
                            }
                            Some(f) if fresh => {
                                let ok = f.subscribe(&[&channel], timeout).await;
                                if !ok {
                                    feed = None;
                                }
                                ok
                            }
                            Some(_) => true,
                        };
                        if !ok {
                            reconnect_at = Some(Instant::now() + reconnect.next_wait());
                        }
                        if let Some(twin) = twin(key_events.as_deref(), &channel) {
                            twins.want(twin, &mut feed, timeout).await;
                        }
                        let _ = ack.send(ok);
                    }
                    Command::Unsubscribe(channel) => {
                        wanted.remove(&channel);
                        if let Some(twin) = twin(key_events.as_deref(), &channel) {
                            twins.drop_one(&twin, &mut feed, timeout).await;
                        }
                        if let Some(f) = feed.as_mut()
                            && !f.unsubscribe(&channel, timeout).await
                        {
                            feed = None;
                            // Other channels still need their subscriptions: reconnect.
                            reconnect_at = Some(Instant::now());
                        }
                    }
                }
            }
            event = next_event(&mut feed) => {
                match event {
                    Event::Message(msg) => {
                        if let Some(local) = local.upgrade() {
                            local.on_message(msg.get_channel_name(), msg.get_payload_bytes());
                        }
                    }
                    // Its slot moved (feed invariant 2): subscribe on the new master, and let
                    // the heads retry, since a release may have gone by meanwhile.
                    // (A channel no longer wanted is our own unsubscribe's confirmation.)
                    Event::Dropped(channel) if wanted.contains(&channel) => {
                        if let Some(f) = feed.as_mut()
                            && !f.subscribe(&[&channel], timeout).await
                        {
                            feed = None;
                            reconnect_at = Some(Instant::now() + reconnect.next_wait());
                        }
                        wake_all(&local);
                    }
                    Event::Dropped(_) => {}
                    Event::Reconnecting => wake_all(&local),
                    Event::Closed => {
                        tracing::debug!("fenced: pub/sub connection closed; waiters poll until it is back");
                        feed = None;
                        reconnect_at = Some(Instant::now());
                    }
                }
            }
            _ = sleep_until_opt(reconnect_at), if reconnect_at.is_some() && feed.is_none() && !wanted.is_empty() => {
                feed = source.connect(&wanted, timeout).await;
                if feed.is_some() {
                    twins.resubscribe(&mut feed, timeout).await;
                    reconnect_at = None;
                    reconnect.reset();
                    // A release may have been published while we were away: let every head
                    // retry now instead of waiting out its poll interval.
                    wake_all(&local);
                } else {
                    reconnect_at = Some(Instant::now() + reconnect.next_wait());
                }
            }
        }
    }
}

/// The keyspace channels the task keeps beside release channels (invariant 7).
#[derive(Default)]
struct Twins {
    /// Wanted, and not refused.
    wanted: HashSet<String>,
    /// Refused by the server: never asked again (the waiters hear the releases' own
    /// messages, or poll).
    refused: HashSet<String>,
}

impl Twins {
    async fn want(&mut self, twin: String, feed: &mut Option<Feed>, timeout: Duration) {
        if self.refused.contains(&twin) || !self.wanted.insert(twin.clone()) {
            return;
        }
        if let Some(f) = feed.as_mut() {
            self.subscribe(f, &twin, timeout).await;
        }
    }

    async fn drop_one(&mut self, twin: &str, feed: &mut Option<Feed>, timeout: Duration) {
        if self.wanted.remove(twin)
            && let Some(f) = feed.as_mut()
        {
            // A connection that does not answer is replaced at the next subscription anyway.
            let _ = f.unsubscribe(twin, timeout).await;
        }
    }

    /// After connecting: every wanted twin again.
    async fn resubscribe(&mut self, feed: &mut Option<Feed>, timeout: Duration) {
        let Some(f) = feed.as_mut() else { return };
        let twins: Vec<String> = self.wanted.iter().cloned().collect();
        for twin in twins {
            self.subscribe(f, &twin, timeout).await;
        }
    }

    async fn subscribe(&mut self, feed: &mut Feed, twin: &str, timeout: Duration) {
        if feed.try_subscribe(twin, timeout).await == Some(false) {
            tracing::warn!(
                channel = twin,
                "fenced: the server refused a keyspace channel; its waiters hear only published releases"
            );
            self.wanted.remove(twin);
            self.refused.insert(twin.to_owned());
        }
    }
}

async fn next_event(feed: &mut Option<Feed>) -> Event {
    match feed {
        Some(f) => f.next().await,
        None => std::future::pending().await,
    }
}

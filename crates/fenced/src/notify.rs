//! Waking waiters when a lock is released, without polling.
//!
//! Two layers:
//! - **In this process**, the waiters for one lock name form a FIFO queue ([`WaitQueue`]). Only
//!   the head of the queue talks to Redis; the others wait for their turn without sending a
//!   single command. A release by this process wakes the head directly.
//! - **Across processes**, the release script publishes on the lock's channel. One pub/sub
//!   connection per [`Client`](crate::Client), owned by one task, carries the subscriptions of
//!   every name this client waits on, and each message wakes one head.
//!
//! Invariants:
//! 1. A head registers for a wake-up (`Notified::enable`) BEFORE each acquire attempt, so a
//!    release between the attempt and the wait is never missed (tokio's "register before you
//!    check" rule).
//! 2. A head subscribes (and waits for the server's confirmation) before its first attempt, so
//!    a release published after that attempt reaches it.
//! 3. Notifications are hints, never proof: a woken head retries the acquire script, and a
//!    head that hears nothing polls with jittered backoff capped by the holder's remaining
//!    lease, so a lost message, a foreign holder that does not publish, or an expired lease
//!    never strands it.
//! 4. A message published by this client is skipped (the release already woke the local head),
//!    so one release costs one wake-up, not two.
//! 5. A queue and its subscription live while at least one waiter holds a [`Ticket`]; the last
//!    ticket dropped removes the queue and unsubscribes.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::{Notify, Semaphore, SemaphorePermit, mpsc, oneshot};
use tokio::time::Instant;

/// The waiters of one lock name in this process.
pub(crate) struct WaitQueue {
    /// One permit: whoever holds it is the head, the only waiter that talks to Redis.
    gate: Semaphore,
    /// Wakes the head: on a release by this process, or on a pub/sub message.
    wake: Notify,
    /// Tickets alive for this queue; changed only under the map's lock.
    users: std::sync::atomic::AtomicUsize,
}

/// Membership in a wait queue; dropping it leaves the queue.
pub(crate) struct Ticket {
    local: Arc<LocalWaiters>,
    channel: String,
    queue: Arc<WaitQueue>,
}

impl Ticket {
    /// Waits to become the head of the queue (FIFO).
    pub(crate) async fn head(&self) -> Option<SemaphorePermit<'_>> {
        self.queue.gate.acquire().await.ok()
    }

    /// The head's wake-up signal.
    pub(crate) fn wake(&self) -> &Notify {
        &self.queue.wake
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.local.leave(&self.channel, &self.queue);
    }
}

/// The registry of wait queues, shared by the client, the pub/sub task and the renewal task.
pub(crate) struct LocalWaiters {
    queues: Mutex<HashMap<String, Arc<WaitQueue>>>,
    client_id: Arc<str>,
    commands: mpsc::UnboundedSender<Command>,
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
}

impl LocalWaiters {
    fn queues(&self) -> MutexGuard<'_, HashMap<String, Arc<WaitQueue>>> {
        // A panic while holding this lock cannot leave the map inconsistent (every change is a
        // single insert or remove), so a poisoned lock is still usable.
        self.queues.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// True when some task of this process already waits for `channel`'s lock; a newcomer then
    /// queues behind it rather than barging in.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.queues().contains_key(channel)
    }

    /// Joins (or creates) the queue for `channel`.
    pub(crate) fn join(self: &Arc<Self>, channel: &str) -> Ticket {
        let mut queues = self.queues();
        let queue = queues
            .entry(channel.to_owned())
            .or_insert_with(|| {
                Arc::new(WaitQueue {
                    gate: Semaphore::new(1),
                    wake: Notify::new(),
                    users: 0.into(),
                })
            })
            .clone();
        queue
            .users
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ticket {
            local: self.clone(),
            channel: channel.to_owned(),
            queue,
        }
    }

    fn leave(&self, channel: &str, queue: &Arc<WaitQueue>) {
        let mut queues = self.queues();
        if queue
            .users
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed)
            == 1
        {
            queues.remove(channel);
            // The task may be gone when the client is shutting down; nothing to unsubscribe then.
            let _ = self.commands.send(Command::Unsubscribe(channel.to_owned()));
        }
    }

    /// Makes sure this client is subscribed to `channel`; true once the server confirmed it.
    /// False means notifications are unavailable for now and the waiter relies on polling.
    pub(crate) async fn subscribe(&self, channel: &str, timeout: Duration) -> bool {
        let (ack, confirmed) = oneshot::channel();
        if self
            .commands
            .send(Command::Subscribe(channel.to_owned(), ack))
            .is_err()
        {
            return false;
        }
        matches!(tokio::time::timeout(timeout, confirmed).await, Ok(Ok(true)))
    }

    /// Wakes the head waiting for `channel`, if any: called after this process released the lock.
    pub(crate) fn released(&self, channel: &str) {
        if let Some(q) = self.queues().get(channel) {
            q.wake.notify_one();
        }
    }

    fn wake_all_heads(&self) {
        for q in self.queues().values() {
            q.wake.notify_one();
        }
    }

    fn on_message(&self, channel: &str, payload: &[u8]) {
        if payload == self.client_id.as_bytes() {
            return; // our own release; the head was woken directly
        }
        self.released(channel);
    }
}

/// Starts the pub/sub task of one client and returns the registry it serves.
pub(crate) fn start(
    client: redis::Client,
    client_id: Arc<str>,
    timeout: Duration,
) -> Arc<LocalWaiters> {
    let (commands, rx) = mpsc::unbounded_channel();
    let local = Arc::new(LocalWaiters {
        queues: Mutex::new(HashMap::new()),
        client_id,
        commands,
    });
    tokio::spawn(run(client, Arc::downgrade(&local), rx, timeout));
    local
}

/// The pub/sub task: owns the one pub/sub connection, (re)subscribes, and routes messages.
/// It ends when the client (the last sender of commands) is gone.
async fn run(
    client: redis::Client,
    local: std::sync::Weak<LocalWaiters>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    timeout: Duration,
) {
    let mut wanted: HashSet<String> = HashSet::new();
    let mut sink: Option<PubSubSink> = None;
    let mut stream: Option<PubSubStream> = None;
    let mut reconnect_at: Option<Instant> = None;
    let mut reconnect_delay = Duration::from_millis(50);

    loop {
        tokio::select! {
            command = commands.recv() => {
                let Some(command) = command else { break };
                match command {
                    Command::Subscribe(channel, ack) => {
                        let fresh = wanted.insert(channel.clone());
                        let ok = if sink.is_none() {
                            // Connecting subscribes to everything wanted, this channel included.
                            connect(&client, &wanted, timeout, &mut sink, &mut stream).await
                        } else if fresh {
                            subscribe_one(&mut sink, &mut stream, &channel, timeout).await
                        } else {
                            true
                        };
                        if !ok {
                            reconnect_at = Some(Instant::now() + reconnect_delay);
                        }
                        let _ = ack.send(ok);
                    }
                    Command::Unsubscribe(channel) => {
                        wanted.remove(&channel);
                        if let Some(s) = sink.as_mut()
                            && !matches!(tokio::time::timeout(timeout, s.unsubscribe(&channel)).await, Ok(Ok(())))
                        {
                            sink = None;
                            stream = None;
                            // Other channels still need their subscriptions: reconnect.
                            reconnect_at = Some(Instant::now());
                        }
                    }
                }
            }
            message = next_message(&mut stream) => {
                match message {
                    Some(msg) => {
                        if let Some(local) = local.upgrade() {
                            local.on_message(msg.get_channel_name(), msg.get_payload_bytes());
                        }
                    }
                    None => {
                        tracing::debug!("fenced: pub/sub connection closed; waiters poll until it is back");
                        sink = None;
                        stream = None;
                        reconnect_at = Some(Instant::now());
                    }
                }
            }
            _ = sleep_until_opt(reconnect_at), if reconnect_at.is_some() && sink.is_none() && !wanted.is_empty() => {
                if connect(&client, &wanted, timeout, &mut sink, &mut stream).await {
                    reconnect_at = None;
                    reconnect_delay = Duration::from_millis(50);
                    // A release may have been published while we were away: let every head
                    // retry now instead of waiting out its poll interval.
                    if let Some(local) = local.upgrade() {
                        local.wake_all_heads();
                    }
                } else {
                    reconnect_delay = (reconnect_delay * 2).min(Duration::from_secs(2));
                    reconnect_at = Some(Instant::now() + reconnect_delay);
                }
            }
        }
    }
}

async fn next_message(stream: &mut Option<PubSubStream>) -> Option<redis::Msg> {
    match stream {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

async fn connect(
    client: &redis::Client,
    wanted: &HashSet<String>,
    timeout: Duration,
    sink: &mut Option<PubSubSink>,
    stream: &mut Option<PubSubStream>,
) -> bool {
    let pubsub = match tokio::time::timeout(timeout, client.get_async_pubsub()).await {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "fenced: pub/sub connect failed");
            return false;
        }
        Err(_) => {
            tracing::debug!("fenced: pub/sub connect timed out");
            return false;
        }
    };
    let (mut s, st) = pubsub.split();
    if !wanted.is_empty() {
        let channels: Vec<&String> = wanted.iter().collect();
        if !matches!(
            tokio::time::timeout(timeout, s.subscribe(channels)).await,
            Ok(Ok(()))
        ) {
            return false;
        }
    }
    *sink = Some(s);
    *stream = Some(st);
    true
}

async fn subscribe_one(
    sink: &mut Option<PubSubSink>,
    stream: &mut Option<PubSubStream>,
    channel: &str,
    timeout: Duration,
) -> bool {
    let Some(s) = sink.as_mut() else { return false };
    if matches!(
        tokio::time::timeout(timeout, s.subscribe(channel)).await,
        Ok(Ok(()))
    ) {
        return true;
    }
    *sink = None;
    *stream = None;
    false
}

//! Waking waiters when a lease is released, without polling.
//!
//! Two layers:
//! - **In this process**, the waiters for one name form a FIFO queue ([`WaitQueue`]). Only the
//!   heads of the queue talk to Redis: one for an exclusive lock, up to the number of permits
//!   for a semaphore (the queue's width); the others wait for their turn without sending a
//!   single command. A release by this process wakes heads directly.
//! - **Across processes**, the release script publishes on the primitive's channel. One
//!   pub/sub connection per [`Client`](crate::Client), owned by one task, carries the
//!   subscriptions of every name this client waits on.
//!
//! A release says whom it wakes ([`Wake`]): one head (a lock), N heads (N permits came back),
//! or all of them. The message is `<client id> <wake>`; a message without a wake part (from
//! an older client) wakes one.
//!
//! Invariants:
//! 1. A head registers for a wake-up (`Notified::enable`) BEFORE each acquire attempt, so a
//!    release between the attempt and the wait is never missed (tokio's "register before you
//!    check" rule).
//! 2. A waiter subscribes (and waits for the server's confirmation) as it joins its queue, so
//!    a release published after that attempt reaches it.
//! 3. Notifications are hints, never proof: a woken head retries the acquire script, and a
//!    head that hears nothing polls with jittered backoff capped by the holder's remaining
//!    lease, so a lost message, a foreign holder that does not publish, or an expired lease
//!    never strands it.
//! 4. A message published by this client is skipped (the release already woke the local
//!    heads), so one release costs one wake-up, not two.
//! 5. A queue and its subscription live while at least one waiter holds a [`Ticket`]; the last
//!    ticket dropped removes the queue and unsubscribes from every channel no other queue
//!    still needs.
//! 6. A queue may watch other channels too (a multi-lock waits on each of its names): a
//!    release on any of them wakes all its heads, besides that channel's own queue, whose
//!    wake-up it never takes.
//! 7. With keyspace events, the task subscribes to `<prefix><key>` beside every release
//!    channel `<key>:released`, and a `del`, `expired` or `evicted` there counts as a release
//!    of one on that channel, whatever primitive waits on it. These subscriptions are hints
//!    too: one the server refuses is dropped for good, and never takes the connection (or
//!    the other subscriptions) down with it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, SemaphorePermit, mpsc, oneshot};

use crate::core::handover::Offer;
use crate::kind::Wake;
use crate::util::lock_unpoisoned;

mod offers;
mod task;

pub(crate) use task::start;

/// The waiters of one name in this process.
pub(crate) struct WaitQueue {
    /// As many permits as heads may talk to Redis at once (the queue's width).
    gate: Semaphore,
    /// The width so far: the widest any waiter asked for (changed only under the map's
    /// lock). Handles of one semaphore with different permit counts share the queue, and a
    /// waiter that asks for more heads must not queue behind heads Redis cannot admit.
    /// Wakes the head: on a release by this process, or on a pub/sub message.
    wake: Notify,
    /// Tickets alive for this queue; changed only under the map's lock.
    users: std::sync::atomic::AtomicUsize,
    width: std::sync::atomic::AtomicUsize,
    /// Other channels whose releases wake this queue too (a multi-lock waits on every name).
    also: Vec<String>,
    /// The waiters' standing offers to take the lock straight from a local holder, in queue
    /// order (`handover.rs`).
    offers: Mutex<std::collections::VecDeque<Offer>>,
    /// Set by a handover, cleared by any release: the lock is held by this process, so the
    /// next head offers at once instead of first trying a lock it knows is taken.
    held_here: std::sync::atomic::AtomicBool,
}

/// Membership in a wait queue; dropping it leaves the queue.
pub(crate) struct Ticket {
    local: Arc<LocalWaiters>,
    channel: String,
    queue: Arc<WaitQueue>,
}

impl Ticket {
    /// Waits to become a head of the queue (FIFO).
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
    queues: Mutex<Queues>,
    /// How many queues exist (changed only under the map's lock): with none, the hot paths
    /// of an uncontended lock (acquire, release) skip the map's lock entirely.
    live_queues: std::sync::atomic::AtomicUsize,
    /// How many channels have a run of handovers going (changed only under the map's lock).
    live_streaks: std::sync::atomic::AtomicUsize,
    client_id: Arc<str>,
    commands: mpsc::UnboundedSender<Command>,
    /// With keyspace events: the prefix of the database's keyspace channels. Every
    /// subscription to a release channel `<key>:released` then comes with one to `<key>`'s
    /// keyspace channel (invariant 7), and the releases of kinds whose waiters hear the key's
    /// `del` event announce nothing.
    key_events: Option<Arc<str>>,
}

#[derive(Default)]
struct Queues {
    /// Each queue under its key (the channel of its releases, or a multi-lock's own key).
    by_key: HashMap<String, Arc<WaitQueue>>,
    /// For a channel, the queues that wake on its releases besides its own.
    watchers: HashMap<String, Vec<Arc<WaitQueue>>>,
    /// Handovers made in a row, per channel, across its queues (`handover.rs`, invariant 3).
    streaks: HashMap<String, u32>,
    /// The standing offers of fair waiters, per fair lock, in the order they were posted.
    /// Each fair waiter queues on a channel of its own, so these stand apart from the queues.
    fair_offers: HashMap<String, std::collections::VecDeque<Offer>>,
}

impl Queues {
    /// True while a waiter needs `channel`'s messages.
    fn wants(&self, channel: &str) -> bool {
        self.watchers.contains_key(channel)
            || self.by_key.get(channel).is_some_and(|q| q.also.is_empty())
    }
}

enum Command {
    Subscribe(String, oneshot::Sender<bool>),
    Unsubscribe(String),
}

impl LocalWaiters {
    fn queues(&self) -> MutexGuard<'_, Queues> {
        lock_unpoisoned(&self.queues)
    }

    /// False when no task of this process waits for anything: the map need not be locked.
    /// (A waiter's queue exists before its first attempt is sent, so a release that follows
    /// that attempt in Redis sees it.)
    fn any_queue(&self) -> bool {
        self.live_queues.load(std::sync::atomic::Ordering::SeqCst) > 0
    }

    /// What a release of `kind` announces (in the background too): nothing (the empty text,
    /// which the release script does not publish) where the waiters hear the lock key's own
    /// `del` event.
    pub(crate) fn announcement(&self, kind: &dyn crate::kind::LeaseKind) -> String {
        if self.key_events.is_some() && kind.announced_by_key_events() {
            return String::new();
        }
        kind.wakes().message(&self.client_id)
    }

    /// Whether releases of kinds announced by key events are quiet (keyspace events on).
    pub(crate) fn quiet(&self) -> bool {
        self.key_events.is_some()
    }

    /// This client's id, the sender part of its release messages.
    pub(crate) fn client_id(&self) -> &str {
        &self.client_id
    }

    /// True when some task of this process already waits for `channel`'s lock; a newcomer then
    /// queues behind it rather than barging in.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        self.any_queue() && self.queues().by_key.contains_key(channel)
    }

    /// Joins (or creates) the queue under `key` (the channel of its releases), widening it
    /// to `width` heads if it is narrower. With `also` non-empty, `key` names a queue of its
    /// own that wakes on the releases of every channel in `also` (a multi-lock's names).
    pub(crate) fn join_watching(
        self: &Arc<Self>,
        key: &str,
        width: usize,
        also: &[String],
    ) -> Ticket {
        use std::sync::atomic::Ordering::Relaxed;
        let channel = key;
        let width = width.clamp(1, MAX_HEADS);
        let mut guard = self.queues();
        let queues = &mut *guard;
        let queue = match queues.by_key.get(channel) {
            Some(q) => q.clone(),
            None => {
                let q = Arc::new(WaitQueue {
                    gate: Semaphore::new(width),
                    wake: Notify::new(),
                    users: 0.into(),
                    width: width.into(),
                    also: also.to_vec(),
                    offers: Mutex::new(std::collections::VecDeque::new()),
                    held_here: false.into(),
                });
                for ch in also {
                    queues
                        .watchers
                        .entry(ch.clone())
                        .or_default()
                        .push(q.clone());
                }
                queues.by_key.insert(channel.to_owned(), q.clone());
                self.live_queues
                    .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                q
            }
        };
        let had = queue.width.load(Relaxed);
        if width > had {
            queue.gate.add_permits(width - had);
            queue.width.store(width, Relaxed);
        }
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
        let mut guard = self.queues();
        let queues = &mut *guard;
        if queue
            .users
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed)
            != 1
        {
            return;
        }
        queues.by_key.remove(channel);
        self.live_queues
            .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        let mut unsubscribe = Vec::new();
        if queue.also.is_empty() {
            unsubscribe.push(channel.to_owned());
        }
        for ch in &queue.also {
            if let Some(list) = queues.watchers.get_mut(ch) {
                list.retain(|q| !Arc::ptr_eq(q, queue));
                if list.is_empty() {
                    queues.watchers.remove(ch);
                }
            }
            unsubscribe.push(ch.clone());
        }
        for ch in unsubscribe {
            if !queues.wants(&ch) {
                // The task may be gone when the client is shutting down; nothing to
                // unsubscribe then.
                let _ = self.commands.send(Command::Unsubscribe(ch));
            }
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

    /// Wakes the heads waiting for `channel` that `wake` names: called after this process
    /// released, and for every release message of another client.
    pub(crate) fn released(&self, channel: &str, wake: Wake) {
        if !self.any_queue() {
            return;
        }
        let (own, watchers) = {
            let queues = self.queues();
            (
                queues.by_key.get(channel).cloned(),
                queues.watchers.get(channel).cloned().unwrap_or_default(),
            )
        };
        // A queue that waits on several channels retries on any of their releases (a hint:
        // the other names may still be held).
        for q in watchers {
            q.wake.notify_waiters();
            q.wake.notify_one();
        }
        let Some(q) = own else {
            return;
        };
        q.held_here
            .store(false, std::sync::atomic::Ordering::Relaxed);
        match wake {
            Wake::One => q.wake.notify_one(),
            // `notify_one` wakes one registered head (or leaves one permit for the next to
            // register); heads beyond the queue's width are not waiting on `wake` anyway.
            Wake::N(n) => {
                for _ in 0..n.min(MAX_HEADS as u32) {
                    q.wake.notify_one();
                }
            }
            Wake::All => {
                q.wake.notify_waiters();
                q.wake.notify_one();
            }
        }
    }

    fn wake_all_heads(&self) {
        for q in self.queues().by_key.values() {
            q.wake.notify_waiters();
            q.wake.notify_one();
        }
    }

    fn on_message(&self, channel: &str, payload: &[u8]) {
        // A key's keyspace event (invariant 7): the key is gone (released, expired or
        // evicted) on these, and still there on the others (a renewal's `expire`, say). It
        // counts as a release of one on the key's release channel.
        if let Some(key) = self
            .key_events
            .as_deref()
            .and_then(|prefix| channel.strip_prefix(prefix))
        {
            if matches!(payload, b"del" | b"expired" | b"evicted") {
                self.released(&format!("{key}{RELEASED}"), Wake::One);
            }
            return;
        }
        let (sender, wake) = Wake::parse(payload);
        if sender == self.client_id.as_bytes() {
            return; // our own release; the heads were woken directly
        }
        self.released(channel, wake);
    }

    /// A registry without a pub/sub task: waiters rely on local wake-ups and polling. For
    /// engine tests without a server.
    #[cfg(test)]
    pub(crate) fn detached(client_id: &str) -> Arc<LocalWaiters> {
        let (commands, _) = mpsc::unbounded_channel();
        Arc::new(LocalWaiters {
            queues: Mutex::new(Queues::default()),
            live_queues: 0.into(),
            live_streaks: 0.into(),
            client_id: client_id.into(),
            commands,
            key_events: None,
        })
    }
}

/// The end of a release channel whose key's keyspace events stand for its releases.
const RELEASED: &str = ":released";

/// With keyspace events, the keyspace channel that stands beside a release channel
/// `<key>:released`: `<prefix><key>` (invariant 7).
fn twin(prefix: Option<&str>, channel: &str) -> Option<String> {
    let key = channel.strip_suffix(RELEASED)?;
    Some(format!("{}{key}", prefix?))
}

/// The most heads one queue lets talk to Redis at once, however many permits a semaphore has.
const MAX_HEADS: usize = 64;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_messages_say_who_sent_them_and_whom_they_wake() {
        for wake in [Wake::One, Wake::N(3), Wake::All] {
            let message = wake.message("c1");
            assert_eq!(Wake::parse(message.as_bytes()), (&b"c1"[..], wake));
        }
        // An older client's message is its id alone: it wakes one.
        assert_eq!(Wake::parse(b"c2"), (&b"c2"[..], Wake::One));
        assert_eq!(Wake::parse(b"c2 junk"), (&b"c2"[..], Wake::One));
    }

    #[tokio::test(start_paused = true)]
    async fn a_release_of_n_permits_wakes_n_heads_and_a_lock_release_one() {
        let local = LocalWaiters::detached("me");
        let tickets: Vec<Ticket> = (0..5).map(|_| local.join_watching("ch", 4, &[])).collect();
        let mut heads = Vec::new();
        for t in &tickets[..4] {
            heads.push(t.head().await.expect("a width-4 gate has 4 heads"));
        }
        assert!(
            tokio::time::timeout(Duration::from_millis(10), tickets[4].head())
                .await
                .is_err(),
            "the fifth waiter queues behind the four heads"
        );
        let woken = |local: Arc<LocalWaiters>, wake: Wake| {
            let tickets = &tickets;
            async move {
                let mut waits: Vec<_> = tickets[..4]
                    .iter()
                    .map(|t| Box::pin(t.wake().notified()))
                    .collect();
                for w in &mut waits {
                    w.as_mut().enable();
                }
                local.released("ch", wake);
                let mut count = 0;
                for w in waits {
                    if tokio::time::timeout(Duration::from_millis(1), w)
                        .await
                        .is_ok()
                    {
                        count += 1;
                    }
                }
                count
            }
        };
        assert_eq!(woken(local.clone(), Wake::N(2)).await, 2);
        assert_eq!(woken(local.clone(), Wake::One).await, 1);
        assert_eq!(woken(local.clone(), Wake::All).await, 4);
        // A waiter that asks for a wider queue (a handle with more permits) gets a head at
        // once instead of queueing behind heads Redis may not admit.
        let wider = local.join_watching("ch", 6, &[]);
        assert!(
            tokio::time::timeout(Duration::from_millis(10), wider.head())
                .await
                .is_ok(),
            "widened: a head for the newcomer"
        );
        drop(heads);
    }

    #[tokio::test(start_paused = true)]
    async fn a_queue_watching_several_channels_wakes_on_any_of_them_beside_their_own_queues() {
        let local = LocalWaiters::detached("me");
        let multi = local.join_watching("multi:a+b", 1, &["a".to_owned(), "b".to_owned()]);
        let plain = local.join_watching("a", 1, &[]);
        let (_m, _p) = (multi.head().await, plain.head().await);
        for (channel, plain_woken) in [("b", false), ("a", true)] {
            let mut m = Box::pin(multi.wake().notified());
            let mut p = Box::pin(plain.wake().notified());
            m.as_mut().enable();
            p.as_mut().enable();
            local.released(channel, Wake::One);
            let ms = Duration::from_millis(1);
            assert!(
                tokio::time::timeout(ms, m).await.is_ok(),
                "{channel} wakes the multi queue"
            );
            assert_eq!(
                tokio::time::timeout(ms, p).await.is_ok(),
                plain_woken,
                "{channel}"
            );
        }
        assert!(local.has_waiters("multi:a+b") && !local.has_waiters("b"));
    }
}

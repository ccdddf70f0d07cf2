//! [`LeaderChanges`]: the leader of an election, followed as a stream.
//!
//! One watcher task per client and election (shared through `Core::shared`) reads the leader
//! and publishes it on a `tokio::sync::watch` channel that every observer of the election in
//! this client reads. The watcher holds no strong reference to the client: it ends when the
//! last observer is dropped or when the client is gone.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use futures_util::stream::BoxStream;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::record::{ElectionReads, Leader, Seat};
use crate::core::Core;
use crate::util::{Backoff, sleep_until_opt};

/// The leader of an election as it changes: `Some(leader)` for each new term or value, `None`
/// when nobody leads any more. Made by [`Election::observe`](crate::Election::observe); read it with
/// `futures_util::StreamExt::next` (or any `Stream` combinator).
///
/// Items never go backwards (invariant 3 of the election); a slow reader sees the latest
/// leader, skipping what it missed. The stream ends when every handle of its client is
/// dropped.
pub struct LeaderChanges {
    inner: BoxStream<'static, Option<Leader>>,
}

impl std::fmt::Debug for LeaderChanges {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderChanges").finish_non_exhaustive()
    }
}

impl LeaderChanges {
    /// The next change: `Some(Some(leader))` for a new term or value, `Some(None)` when
    /// nobody leads any more, `None` once the stream has ended. The same as
    /// `StreamExt::next`, for code that does not use `futures`.
    ///
    /// ```
    /// # fenced_testkit::doctest(|url| async move {
    /// let client = fenced::Client::connect(&url).await?;
    /// let election = client.election("billing-scheduler");
    /// let mut changes = election.observe()?;
    /// let leadership = election.campaign("host-a:8080").await?;
    /// while let Some(change) = changes.next().await {
    ///     if let Some(leader) = change {
    ///         assert_eq!(leader.value, "host-a:8080");
    ///         break;
    ///     }
    /// }
    /// leadership.resign().await?;
    /// # Ok(()) });
    /// ```
    pub async fn next(&mut self) -> Option<Option<Leader>> {
        futures_util::StreamExt::next(&mut self.inner).await
    }
}

impl Stream for LeaderChanges {
    type Item = Option<Leader>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// What the watcher has seen.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seen {
    /// Nothing read yet.
    Unknown,
    /// The last state reported.
    Now(Option<Leader>),
}

/// The watcher of one election in one client: the observers' receivers, and the task's stop.
struct Watcher {
    seen: watch::Receiver<Seen>,
    _stop: DropGuard,
}

impl LeaderChanges {
    pub(super) fn new(election: &Seat) -> Self {
        let core = &election.core;
        let watcher = core.shared(&election.keys.channel, || {
            let (tx, rx) = watch::channel(Seen::Unknown);
            let stop = CancellationToken::new();
            tokio::spawn(watch_leader(
                Arc::downgrade(core),
                Target {
                    name: election.name.to_string(),
                    channel: election.keys.channel.clone(),
                    read: election.reads(false),
                },
                tx,
                stop.clone(),
                core.closing(),
            ));
            Arc::new(Watcher {
                seen: rx,
                _stop: stop.drop_guard(),
            })
        });
        let mut seen = watcher.seen.clone();
        seen.mark_changed();
        let inner =
            futures_util::stream::unfold((seen, watcher), |(mut seen, watcher)| async move {
                loop {
                    seen.changed().await.ok()?;
                    let now = seen.borrow_and_update().clone();
                    if let Seen::Now(leader) = now {
                        return Some((leader, (seen, watcher)));
                    }
                }
            });
        LeaderChanges {
            inner: Box::pin(inner),
        }
    }
}

/// Whether `next` may follow `last` (invariant 3): a later term, a later proclaim in the same
/// term, or nobody after somebody.
fn follows(last: Option<&(u64, u64, bool)>, next: &Option<Leader>) -> bool {
    let Some(&(term, proclaims, leads)) = last else {
        return true;
    };
    match next {
        None => leads,
        Some(l) => {
            // After "nobody leads", only a newer term: the same one cannot come back.
            let order = (l.term.get(), l.proclaims);
            order > (term, proclaims) && (leads || order.0 != term)
        }
    }
}

/// What the watcher reads, with no reference to the client.
struct Target {
    name: String,
    channel: String,
    read: ElectionReads,
}

/// The watcher task: reads the leader on each wake-up and publishes what follows the last.
async fn watch_leader(
    core: Weak<Core>,
    target: Target,
    tx: watch::Sender<Seen>,
    stop: CancellationToken,
    closing: CancellationToken,
) {
    let Some(strong) = core.upgrade() else {
        return;
    };
    let (ticket, _) = tokio::select! {
        t = strong.watch(&target.channel) => t,
        () = stop.cancelled() => return,
        () = closing.cancelled() => return,
    };
    let options = strong.options();
    let mut backoff = Backoff::new(options.poll_min, options.poll_max);
    let timeout = strong.timeout();
    let poll_max = options.poll_max;
    drop(strong);
    // (term, proclaims, leads) of the last report.
    let mut last: Option<(u64, u64, bool)> = None;
    loop {
        let wake = ticket.wake().notified();
        tokio::pin!(wake);
        // Registered before the read, so a change announced during it is not missed.
        wake.as_mut().enable();
        let Some(strong) = core.upgrade() else {
            return;
        };
        // Cancellable: a watcher whose observers are gone lets go of the channel at once, so
        // a new watcher of the same election gets every wake-up.
        let read = tokio::select! {
            read = async {
                match strong.node() {
                    Ok(node) => target.read.run(node).await,
                    Err(e) => Err(e),
                }
            } => read,
            () = stop.cancelled() => return,
            () = closing.cancelled() => return,
        };
        drop(strong);
        let next_read = match read {
            Ok(status) => {
                backoff.reset();
                let leader = status.leader;
                if follows(last.as_ref(), &leader) {
                    last = Some(match &leader {
                        Some(l) => (l.term.get(), l.proclaims, true),
                        None => last.map_or((0, 0, false), |(t, p, _)| (t, p, false)),
                    });
                    tx.send_replace(Seen::Now(leader.clone()));
                }
                // An expiry announces nothing: read again just after the lease is due to end
                // (a key left without expiry by another program: at the slowest poll).
                leader.map(|l| {
                    let left = if l.lease_left.is_zero() {
                        poll_max
                    } else {
                        l.lease_left + Duration::from_millis(2)
                    };
                    Instant::now() + left
                })
            }
            Err(e) => {
                // A refusal (a permission, a key of another type) will not pass by itself:
                // said where an operator looks; a lost connection is tried again quietly.
                if e.is_transient() {
                    tracing::debug!(election = %target.name, error = %e, "fenced: reading the leader failed; trying again");
                } else {
                    tracing::warn!(election = %target.name, error = %e, "fenced: reading the leader failed, and will until this is fixed; trying again");
                }
                Some(Instant::now() + backoff.next_wait().max(timeout / 4))
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = closing.cancelled() => return,
            () = tx.closed() => return,
            () = &mut wake => {}
            () = sleep_until_opt(next_read) => {}
        }
    }
}

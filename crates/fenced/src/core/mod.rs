//! The lease core: what every primitive shares. No Lua and no key layouts here (those are the
//! kinds', `kind/`), no connections (the backend's, `backend/`).
//!
//! - [`acquire`]: the one acquire engine: fast path, local queue, notification wait with a
//!   polling fallback capped by the blocking lease's remaining ttl, deadline, attempt limit,
//!   and the clean-up of attempts whose outcome is unknown.
//! - [`held`]: a held lease of any kind ([`Held`]) and the [`Lease`] view the work gets.
//! - [`lease`]: a lease's validity deadline, in epoch order.
//! - [`renew`]: one renewal loop per client, one pipelined round trip per tick.
//! - [`cleanup`]: releases and abandons in the background, so `Drop` never blocks.
//! - [`handover`]: a release that gives an exclusive lock straight to a local waiter.
//! - [`takeover`]: take-overs from tickets whose outcome is unknown, repeated as themselves.
//! - [`metrics`]: the series every primitive reports through the `metrics` facade.
//! - [`notify`]: local wait queues and the one pub/sub connection; [`Wake`] says whom a
//!   release wakes.
//!
//! A primitive reaches the client only through [`Core`]'s methods.

pub(crate) mod acquire;
pub(crate) mod cleanup;
mod feed;
pub(crate) mod handover;
pub mod held;
pub(crate) mod lease;
pub(crate) mod metrics;
pub(crate) mod notify;
pub(crate) mod renew;
pub(crate) mod takeover;

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use crate::kind::Wake;
pub(crate) use acquire::LeaseOptions;
pub(crate) use held::Held;
pub use held::Lease;

use crate::backend::{Backend, Node};
use crate::options::{ClientOptions, ttl_millis};
use notify::LocalWaiters;
use renew::{RenewalStats, Renewer};

/// What the primitives of one client share: the backend, the settings, the wait queues and
/// the renewal loop.
pub(crate) struct Core {
    backend: Backend,
    options: ClientOptions,
    waiters: Arc<LocalWaiters>,
    renewer: Renewer,
    takeovers: takeover::TakeOvers,
    /// This client's release messages for one head and for all, made once: a release would
    /// otherwise format its message every time.
    release_one: String,
    release_all: String,
    /// Cancelled when the core is dropped (every handle of the client gone): background
    /// work that holds no strong reference (an election's observers) ends then.
    closing: tokio_util::sync::CancellationToken,
    /// Work shared by every handle of this client on one key (an election's one watcher for
    /// all its observers), alive while some handle uses it.
    shared: std::sync::Mutex<
        std::collections::HashMap<String, std::sync::Weak<dyn std::any::Any + Send + Sync>>,
    >,
}

impl Drop for Core {
    fn drop(&mut self) {
        self.closing.cancel();
    }
}

impl Core {
    /// Starts the client's background tasks (pub/sub on first use, renewal) over `backend`.
    pub(crate) fn start(
        backend: Backend,
        options: ClientOptions,
        client_id: Arc<str>,
        key_events: Option<Arc<str>>,
    ) -> Arc<Core> {
        let release_one = Wake::One.message(&client_id);
        let release_all = Wake::All.message(&client_id);
        let waiters = notify::start(backend.pubsub(), client_id, options.timeout, key_events);
        let renewer = Renewer::start(backend.clone(), waiters.clone());
        Arc::new(Core {
            backend,
            options,
            waiters,
            renewer,
            takeovers: takeover::TakeOvers::default(),
            release_one,
            release_all,
            closing: tokio_util::sync::CancellationToken::new(),
            shared: std::sync::Mutex::default(),
        })
    }

    /// The message a release of `kind` announces: none (the empty text, which the release
    /// script does not publish) where the lock key's own `del` event wakes the waiters.
    pub(crate) fn announcement(&self, kind: &dyn crate::kind::LeaseKind) -> Cow<'_, str> {
        if self.waiters.quiet() && kind.announced_by_key_events() {
            return Cow::Borrowed("");
        }
        self.release_message(kind.wakes())
    }

    /// The client's settings.
    pub(crate) fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// The node that serves non-lease commands (resources, inspection, optimistic helpers);
    /// refused on a Redlock client.
    pub(crate) fn node(&self) -> crate::error::Result<&Node> {
        self.backend.node()
    }

    /// Where lease steps go.
    pub(crate) fn backend(&self) -> &Backend {
        &self.backend
    }

    /// Wakes this process's waiters on `channel`, after a release that did not go through a
    /// held lease (a forced release).
    pub(crate) fn wake_local(&self, channel: &str, wake: Wake) {
        self.waiters.released(channel, wake);
    }

    /// Joins the watchers of `channel` and subscribes to it (waiting for the server's
    /// confirmation, within the timeout; false if none came). The ticket is woken by every
    /// release announced there, by this client's own (`wake_local`, and its leases' releases)
    /// and after the pub/sub connection came back (messages may have been missed).
    pub(crate) async fn watch(&self, channel: &str) -> (notify::Ticket, bool) {
        let ticket = self.waiters.join_watching(channel, 1, &[]);
        let subscribed = self.waiters.subscribe(channel, self.options.timeout).await;
        (ticket, subscribed)
    }

    /// Cancelled once this core is dropped.
    pub(crate) fn closing(&self) -> tokio_util::sync::CancellationToken {
        self.closing.clone()
    }

    /// The work shared under `key` by this client's handles, made by `make` when none is alive.
    pub(crate) fn shared<T: Send + Sync + 'static>(
        &self,
        key: &str,
        make: impl FnOnce() -> Arc<T>,
    ) -> Arc<T> {
        let mut map = crate::util::lock_unpoisoned(&self.shared);
        if let Some(alive) = map.get(key).and_then(std::sync::Weak::upgrade)
            && let Ok(work) = alive.downcast::<T>()
        {
            return work;
        }
        map.retain(|_, w| w.strong_count() > 0);
        let work = make();
        let any: Arc<dyn std::any::Any + Send + Sync> = work.clone();
        map.insert(key.to_owned(), Arc::downgrade(&any));
        work
    }

    /// Hands `kind`'s clean-up to the background: for a waiter that gives up a place it holds
    /// in Redis (a fair lock's queue), voiding `owner`'s attempt at the same time.
    pub(crate) fn abandon_in_background(
        &self,
        kind: std::sync::Arc<dyn crate::kind::LeaseKind>,
        owner: crate::token::OwnerToken,
        patience: Duration,
    ) {
        self.renewer.abandon_in_background(kind, owner, patience);
    }

    /// Releases, in the background, a lease no guard holds (one handed over to a waiter that
    /// had gone).
    pub(crate) fn release_unowned(
        &self,
        kind: std::sync::Arc<dyn crate::kind::LeaseKind>,
        owner: crate::token::OwnerToken,
        ttl: Duration,
    ) {
        self.renewer
            .release_in_background(u64::MAX, kind, owner, ttl);
    }

    /// The message a release of this client publishes.
    pub(crate) fn release_message(&self, wake: Wake) -> Cow<'_, str> {
        match wake {
            Wake::One => Cow::Borrowed(&self.release_one),
            Wake::All => Cow::Borrowed(&self.release_all),
            Wake::N(_) => Cow::Owned(wake.message(self.waiters.client_id())),
        }
    }

    /// The expiry every grant gives its fence, in ms (`next_token` in `scripts/fence.lua`):
    /// a fence outlives its last grant by the retention.
    pub(crate) fn fence_retention_ms(&self) -> u64 {
        ttl_millis(self.options.fence_retention)
    }

    /// Waits until the background clean-ups handed over so far are done, bounded by three
    /// times the timeout: on Redlock a release's last step on a slow master comes after two
    /// round trips there (its reply, then the void of a late grant, `redlock.rs` invariant 7).
    pub(crate) async fn flush(&self) {
        let bound = self.options.timeout * 3;
        let flush = async {
            self.renewer.flush().await;
            // Then what the clean-ups and releases left running on other nodes (Redlock).
            self.backend.settle().await;
        };
        if tokio::time::timeout(bound, flush).await.is_err() {
            tracing::debug!(
                "fenced: flush gave up waiting; leases left behind expire by their ttl"
            );
        }
    }

    /// The renewal loop's running totals.
    pub(crate) fn stats(&self) -> RenewalStats {
        self.renewer.stats()
    }

    /// The per-call bound.
    pub(crate) fn timeout(&self) -> Duration {
        self.options.timeout
    }
}

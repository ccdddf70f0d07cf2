//! The raw layer under the primitives (lock_api's `RawMutex`): what a lease of each kind is in
//! Redis, as typed script calls. No waiting, no renewal loop, no connections here: the core
//! runs these calls through the backend and decides when.
//!
//! A new primitive adds one kind: its key layout, its acquire attempt, and how a lease of it
//! is renewed, released and abandoned. The replies follow one convention per step, so the
//! core's renewal batches and background clean-ups work on any kind:
//!
//! | step | script replies |
//! |---|---|
//! | acquire | `{1, token}` or a bare token granted, `{0, ms}` busy (ms until the blocking lease ends, -1 unknown), `{0, -3}` abandoned, `{0, -4}` refused (a re-entry whose lease is gone), `{0, -5, i}` refused: the lock key `KEYS[i]` holds another type than a string (another program wrote it) |
//! | extend | 1 applied, 0 not held, 2 superseded by a newer epoch |
//! | release | 1 released (waiters woken), 0 not held (also: an earlier attempt of this same release did it), 3 this hold released but the lease stays (inner re-entrant hold) |
//! | abandon | 1 the attempt had taken the lease, now released; 0 a tombstone voids it |
//! | hand over | `{1, token}` the successor holds it, `{0, 0}` not held, `{0, 1}` another client waits (exclusive locks only) |

pub(crate) mod election;
pub(crate) mod exclusive;
pub(crate) mod fair;
pub(crate) mod multi;
pub(crate) mod permits;
pub(crate) mod reentrant;
pub(crate) mod reply;
pub(crate) mod rw;
pub(crate) mod unfenced;

use std::sync::Arc;

use crate::scripts::ScriptCall;
use crate::token::{FencingToken, OwnerToken};

pub(crate) use reply::{
    AcquireReply, ExpiryReply, HandOverReply, ReleaseReply, Wake, abandon_reply, acquire_reply,
    expiry_reply, hand_over_reply, parse_token, release_reply, unexpected, wrong_type,
};

/// Which primitive a lease belongs to: the `primitive` label of the metrics, and the word
/// errors use for it. An enum, so that every metric names each one with a literal label
/// (`core/metrics.rs`) and a new primitive cannot be missed there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Primitive {
    Lock,
    ReentrantLock,
    Semaphore,
    RwRead,
    RwWrite,
    FairLock,
    MultiLock,
    UnfencedLock,
    Election,
}

impl Primitive {
    /// The label: `lock`, `reentrant_lock`, `semaphore`, `rw_read`, `rw_write`, `fair_lock`,
    /// `multi_lock`, `unfenced_lock`, `election`.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Primitive::Lock => "lock",
            Primitive::ReentrantLock => "reentrant_lock",
            Primitive::Semaphore => "semaphore",
            Primitive::RwRead => "rw_read",
            Primitive::RwWrite => "rw_write",
            Primitive::FairLock => "fair_lock",
            Primitive::MultiLock => "multi_lock",
            Primitive::UnfencedLock => "unfenced_lock",
            Primitive::Election => "election",
        }
    }

    /// What a wait for a lease of it waits for, as [`Error::NotAcquired`](crate::Error::NotAcquired)
    /// names it.
    pub(crate) fn awaited(self) -> crate::error::Awaited {
        use crate::error::Awaited;
        match self {
            Primitive::Lock => Awaited::Lock,
            Primitive::ReentrantLock => Awaited::ReentrantLock,
            Primitive::Semaphore => Awaited::Semaphore,
            Primitive::RwRead => Awaited::ReadLease,
            Primitive::RwWrite => Awaited::WriteLease,
            Primitive::FairLock => Awaited::FairLock,
            Primitive::MultiLock => Awaited::MultiLock,
            Primitive::UnfencedLock => Awaited::UnfencedLock,
            Primitive::Election => Awaited::Election,
        }
    }

    /// The words a message uses for it, with their article: "a lock", "an election".
    pub(crate) fn with_article(self) -> String {
        let words = self.to_string();
        match words.starts_with(['a', 'e', 'i', 'o', 'u']) {
            true => format!("an {words}"),
            false => format!("a {words}"),
        }
    }
}

/// The words a message uses for it (the label is for metrics and spans).
impl std::fmt::Display for Primitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Primitive::Lock => "lock",
            Primitive::ReentrantLock => "re-entrant lock",
            Primitive::Semaphore => "semaphore",
            Primitive::RwRead => "read lease of a read-write lock",
            Primitive::RwWrite => "write lease of a read-write lock",
            Primitive::FairLock => "fair lock",
            Primitive::MultiLock => "multi-lock",
            Primitive::UnfencedLock => "unfenced lock",
            Primitive::Election => "election",
        })
    }
}

/// What a held lease is: its keys, and how it is taken, renewed, given back and abandoned.
pub(crate) trait LeaseKind: Send + Sync + 'static {
    /// The primitive's name, for logs and errors.
    fn name(&self) -> &Arc<str>;
    /// What kind of primitive this is (`lock`, `semaphore`, ...): the `primitive` label of its
    /// metrics (a fixed set, unlike names).
    fn primitive(&self) -> Primitive;
    /// The pub/sub channels its releases are announced on (one per name it holds).
    fn channels(&self) -> &[String];
    /// Whom a release of this lease wakes.
    fn wakes(&self) -> Wake;
    /// How much of `key` this lease holds while it lives: 1 for each lock key it holds
    /// exclusively, its permits for a semaphore's permits key, 0 for any other key. An acquire
    /// of `key` by the task that holds it may wait for itself
    /// (`Core::refuse_waiting_for_itself`).
    fn holds(&self, _key: &str) -> u32 {
        0
    }
    /// One acquire attempt by `owner` for `ttl_ms`.
    fn acquire(&self, owner: &OwnerToken, ttl_ms: u64) -> ScriptCall;
    /// Renew (or re-time) the lease to `ttl_ms` from now, in epoch order.
    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall;
    /// Give the lease back and publish `message`. Keeps no record: a retry finds the lease
    /// gone, and the core tells that from a lost lease (`core/cleanup.rs`, invariant 2).
    fn release(&self, owner: &OwnerToken, message: &str) -> ScriptCall;
    /// Void an attempt of unknown outcome: release what it took, or leave a tombstone that
    /// lives `patience_ms`.
    fn abandon(&self, owner: &OwnerToken, message: &str, patience_ms: u64) -> ScriptCall;
    /// Whether every key of this lease hashes to one slot, as Redis Cluster needs for one
    /// script (a multi-lock's names live in different slots).
    fn one_slot(&self) -> bool {
        true
    }
    /// Whether this refusal, one that read no ttl (an unfenced lease's native `SET NX PX`
    /// answers nil), is to be followed by one `TYPE` of the lock key, to tell a held lock from
    /// a key of another type. Called once per such refusal; `false` by default (the scripts
    /// tell it themselves: `{0, -5, i}`).
    fn checks_type_of_refusal(&self) -> bool {
        false
    }
    /// Whether the waiters of this kind hear of its release by the lock key's own `del`
    /// event when the client uses keyspace events, so the release need not publish.
    fn announced_by_key_events(&self) -> bool {
        false
    }
    /// Its leases run on Redlock's independent masters ([`OnRedlock`]); `None` for kinds that
    /// do not (the default).
    fn redlock(&self) -> Option<&dyn OnRedlock> {
        None
    }
    /// Its leases are handed between processes by tickets ([`Ticketed`]); `None` for kinds
    /// that are not (the default).
    fn ticketed(&self) -> Option<&dyn Ticketed> {
        None
    }
    /// Its leases are handed straight to a waiter of the same client ([`HandedOver`]); `None`
    /// for kinds that never are (the default).
    fn handed_over(&self) -> Option<&dyn HandedOver> {
        None
    }
}

// The optional abilities of a kind, each a trait of its own that a kind implements or not,
// and reached through its `LeaseKind` accessor (lock_api's extension traits, for a
// `dyn LeaseKind`): a kind without the ability has none of its methods.

/// A kind whose leases run on Redlock's independent masters.
pub(crate) trait OnRedlock {
    /// How many of `nodes` masters must hold a lease of this kind: a strict majority for an
    /// exclusive lease.
    fn quorum(&self, nodes: usize) -> usize {
        nodes / 2 + 1
    }
    /// Raise this lease's fence to at least `token` where `owner` still holds it (the quorum
    /// fencing write-back; the script answers 1 there, 0 elsewhere); `None` for a kind
    /// without a fence.
    fn raise_fence(&self, _owner: &OwnerToken, _token: FencingToken) -> Option<ScriptCall> {
        None
    }
    /// This kind's acquire call with a proposed fencing token (masters that take it hand out
    /// the same token, and need no write-back; `fence.lua`); `None` for a kind without a
    /// fence.
    fn propose_token(&self, _acquire: &ScriptCall, _token: u64) -> Option<ScriptCall> {
        None
    }
}

/// How many of `nodes` masters must hold a lease of `kind`: its own quorum on Redlock, a
/// strict majority otherwise.
pub(crate) fn quorum(kind: &dyn LeaseKind, nodes: usize) -> usize {
    kind.redlock().map_or(nodes / 2 + 1, |r| r.quorum(nodes))
}

/// A kind whose leases are handed between processes by tickets (`ticket.rs`).
pub(crate) trait Ticketed {
    /// The kind's name in a ticket: `lock`, `fair` or `unfenced`.
    fn ticket_kind(&self) -> &'static str;
    /// Take the lease over from a ticket: `extend` at `epoch`, refused when that epoch was
    /// applied already (a ticket is taken over once), unless by this very take-over (one of
    /// `take_over`'s proofs is the mark it left: a retry after its reply was lost).
    fn resume(
        &self,
        owner: &OwnerToken,
        ttl_ms: u64,
        epoch: u64,
        take_over: (&OwnerToken, &[OwnerToken]),
    ) -> ScriptCall;
}

/// A kind whose leases are handed straight to a waiter of the same client
/// (`core/handover.rs`).
pub(crate) trait HandedOver {
    /// Where this client's waiters for a lease of this kind post their offers.
    fn hand_over_to(&self) -> HandOverTo<'_>;
    /// Give the lease straight to `successor` for `ttl_ms`; `waiter` is the successor's id in
    /// a fair queue. `None` when the offer cannot be taken so (a fair waiter without its id).
    fn hand_over(
        &self,
        owner: &OwnerToken,
        successor: &OwnerToken,
        ttl_ms: u64,
        waiter: Option<&str>,
    ) -> Option<ScriptCall>;
}

/// Which local waiter a lease is handed to, and where the offers of such waiters stand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HandOverTo<'a> {
    /// The head of this client's queue for this release channel: a local preference, so a
    /// name is handed over only so many times in a row (`core/handover.rs`, invariant 3).
    LocalQueue(&'a str),
    /// The head of the fair queue in Redis, when it is a waiter of this client; offers stand
    /// under this key. The queue's order decides, so there is no limit in a row.
    FairHead(&'a str),
}

#[cfg(test)]
mod tests;

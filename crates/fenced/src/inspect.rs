//! Looking at locks from the outside: who holds one, which are held, and breaking one by
//! force. For operators and tools (the `fenced` command uses these); a program that wants a
//! lock should simply acquire it. The status types of every primitive live here.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "cluster")]
use redis::cluster_routing::Slot;
use redis::{RedisError, Value};

use crate::backend::Node;
use crate::core::Core;
use crate::election::Election;
use crate::error::{Error, Result};
use crate::fair::FairLock;
use crate::keys::{LockKeys, validate_name};
use crate::kind::Wake;
use crate::kind::permits::SemaphoreKeys;
use crate::kind::unexpected;
use crate::latch::Latch;
use crate::lock::Lock;
use crate::rwlock::RwLock;
use crate::scripts::{FORCE_RELEASE, ScriptCall};
use crate::semaphore::Semaphore;
use crate::token::{FenceId, FencingToken};

pub use crate::rwlock::RwStatus;
pub use crate::semaphore::SemaphoreStatus;

/// How many locks [`Client::list`](crate::Client::list) inspects per round trip.
const INSPECT_BATCH: usize = 256;

/// How many characters of a holder's owner token are shown. Enough to tell holders apart;
/// far too few to release or extend somebody else's lease with.
pub const OWNER_PREFIX_LEN: usize = 8;

/// A snapshot of one lock, read in one round trip (not atomically).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock's name.
    pub name: String,
    /// Who holds it, or `None` when it is free.
    pub holder: Option<Holder>,
    /// The fence, if it still exists: the token of the last ID its stream gave out. Every
    /// fencing token handed out for this name is at or below it, and the next is above it.
    /// It is not the holder's own token: a grant refused by transaction appends an ID too, so
    /// the fence moves past the holder's token while others wait.
    pub fence: Option<FencingToken>,
    /// How many clients (processes, usually) are subscribed to this lock's releases, that is,
    /// have a waiter for it.
    pub waiting_clients: u64,
    /// How many holds a [`ReentrantLock`](crate::ReentrantLock) holder has (0 for a plain
    /// lock).
    pub holds: u64,
    /// Waiters in a [`FairLock`]'s queue (0 for the other locks, whose
    /// waiters are counted by `waiting_clients`).
    pub queued: u64,
}

/// One node's view of a lock, from [`Lock::status_by_node`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct NodeStatus {
    /// The node: its address, and its role where it has one (the master of a slot, of a
    /// Sentinel service).
    pub node: String,
    /// What it keeps for the lock, or why it could not be read.
    pub status: Result<LockStatus>,
}

/// The current holder of a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The first [`OWNER_PREFIX_LEN`] characters of the holder's owner token.
    pub owner_prefix: String,
    /// What is left of its lease; `None` for a key without expiry (set by some other tool).
    pub ttl_left: Option<Duration>,
}

fn status(name: String, seen: Inspection) -> LockStatus {
    let holder = seen.owner.map(|owner| Holder {
        owner_prefix: owner.chars().take(OWNER_PREFIX_LEN).collect(),
        ttl_left: u64::try_from(seen.pttl).ok().map(Duration::from_millis),
    });
    LockStatus {
        name,
        holder,
        fence: seen.last_token,
        waiting_clients: seen.subscribers,
        holds: seen.holds,
        queued: 0,
    }
}

/// The status of the lock under `keys`, named `name`.
async fn lock_status(node: &Node, name: &str, keys: &LockKeys) -> Result<LockStatus> {
    validate_name("lock", name)?;
    let mut seen = inspect(node, std::slice::from_ref(keys), "status").await?;
    let seen = seen
        .pop()
        .ok_or_else(|| unexpected("inspect", "no reply".into()))??;
    Ok(status(name.to_owned(), seen))
}

impl crate::ReentrantLock {
    /// Who holds this lock, with how many holds, for how much longer, and the last fencing
    /// token handed out: what [`Lock::status`] reads (the key is the same).
    ///
    /// # Errors
    ///
    /// As [`Lock::status`].
    pub async fn status(&self) -> Result<LockStatus> {
        let (core, keys) = self.parts();
        lock_status(
            core.backend().node_for("a re-entrant lock's status")?,
            self.name(),
            keys,
        )
        .await
    }
}

impl crate::FairLock {
    /// Who holds this lock, for how much longer, its fence ([`LockStatus::fence`]), and how
    /// many wait in its queue ([`LockStatus::queued`]), read in two round trips.
    ///
    /// # Errors
    ///
    /// As [`Lock::status`].
    pub async fn status(&self) -> Result<LockStatus> {
        let node = self.core().backend().node_for("a fair lock's status")?;
        let mut status = lock_status(node, self.name(), self.keys()).await?;
        status.queued = self.queued().await?;
        Ok(status)
    }
}

impl crate::MultiLock {
    /// Each name's [`LockStatus`], in the order of [`names`](crate::MultiLock::names), read
    /// in one round trip.
    ///
    /// # Errors
    ///
    /// As [`Lock::status`]; [`Error::Unsupported`] on a Redis Cluster, where a multi-lock's
    /// names live in different hash slots (as its acquire answers).
    pub async fn status(&self) -> Result<Vec<LockStatus>> {
        let (core, keys) = self.parts();
        if core.backend().is_cluster() {
            return Err(Error::unsupported(
                "a multi-lock's status needs one server or Sentinel (its names are in different Cluster slots): read each lock's status",
            ));
        }
        for name in self.names() {
            validate_name("lock", name)?;
        }
        let seen = inspect(
            core.backend().node_for("a multi-lock's status")?,
            keys,
            "status",
        )
        .await?;
        self.names()
            .iter()
            .zip(seen)
            .map(|(name, seen)| Ok(status(name.clone(), seen?)))
            .collect()
    }
}

/// A lock's state as read by [`inspect`].
struct Inspection {
    owner: Option<String>,
    pttl: i64,
    last_token: Option<FencingToken>,
    subscribers: u64,
    holds: u64,
}

/// Reads the state of several locks in one round trip (not atomically: for display only).
/// The outer error is the round trip's; each lock has its own answer, so one key of another
/// type ([`Error::WrongType`], `operation` naming it) does not hide the others.
async fn inspect(
    node: &Node,
    locks: &[LockKeys],
    operation: &'static str,
) -> Result<Vec<Result<Inspection>>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for keys in locks {
        pipe.cmd("GET")
            .arg(&keys.lock)
            .cmd("PTTL")
            .arg(&keys.lock)
            // The fence's last ID (an error for a missing fence, or one of another type).
            .cmd("XINFO")
            .arg("STREAM")
            .arg(&keys.fence)
            .cmd("PUBSUB")
            // With sharded pub/sub, the subscribers sit on the channel's slot master: the node
            // this pipeline goes to (its keys share the slot).
            .arg(if node.sharded_pubsub() {
                "SHARDNUMSUB"
            } else {
                "NUMSUB"
            })
            .arg(&keys.channel)
            .cmd("HLEN")
            .arg(&keys.holds);
    }
    type Reply = (Option<String>, i64, Value, (String, u64), u64);
    let replies: Vec<Result<Value, RedisError>> = node.query_pipe("inspect", &pipe).await?;
    if replies.len() != locks.len() * 5 {
        return Err(unexpected(
            "inspect",
            format!("{} replies for {} locks", replies.len(), locks.len()),
        ));
    }
    let timeout = node.timeout();
    Ok(replies
        .chunks(5)
        .zip(locks)
        .map(|(five, keys)| {
            let mut values = Vec::with_capacity(5);
            // The commands in order: GET and PTTL of the lock key, XINFO of the fence, PUBSUB,
            // HLEN of the holds; the key each one reads, should it be of another type.
            let read = [
                &keys.lock,
                &keys.lock,
                &keys.fence,
                &keys.channel,
                &keys.holds,
            ];
            let mut last_token = None;
            for (i, (reply, key)) in five.iter().zip(read).enumerate() {
                if i == 2 {
                    last_token = fence_token(reply);
                    values.push(Value::Nil);
                    continue;
                }
                match reply {
                    Ok(value) => values.push(value.clone()),
                    Err(e) if crate::error::is_wrong_type(e) => {
                        return Err(Error::WrongType {
                            key: key.clone(),
                            operation,
                        });
                    }
                    Err(e) => return Err(Error::from_redis(operation, timeout, e.clone())),
                }
            }
            let (owner, pttl, _, numsub, hlen): Reply =
                redis::from_redis_value(Value::Array(values))
                    .map_err(|e| unexpected("inspect", e.to_string()))?;
            Ok(Inspection {
                owner,
                pttl,
                last_token,
                subscribers: numsub.1,
                // The hash holds `token` and one field per hold.
                holds: hlen.saturating_sub(1),
            })
        })
        .collect())
}

impl Lock {
    /// Who holds this lock, for how much longer, and its fence: every token handed out is at
    /// or below it ([`LockStatus::fence`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name;
    /// [`Error::WrongType`](crate::Error::WrongType) naming the lock's key (or its holds')
    /// when another program wrote another type of data there; transport errors.
    pub async fn status(&self) -> Result<LockStatus> {
        lock_status(
            self.core().backend().node_for("a lock's status")?,
            self.name(),
            self.keys(),
        )
        .await
    }

    /// The lock as each node that keeps it sees it: the server (its address); on a cluster,
    /// the master of its slot; through Sentinel, the master now; on Redlock, every master,
    /// read at once. A node that cannot be read has its error in place of a status, so one
    /// master down does not hide the others.
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// let client = fenced::Client::connect(&url).await?;
    /// let _held = client.lock("report").acquire().await?;
    /// for node in client.lock("report").status_by_node().await? {
    ///     let held = node.status.as_ref().is_ok_and(|s| s.holder.is_some());
    ///     println!("{}: {}", node.node, if held { "held" } else { "free or unknown" });
    ///     assert!(held);
    /// }
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name.
    pub async fn status_by_node(&self) -> Result<Vec<NodeStatus>> {
        validate_name("lock", self.name())?;
        let nodes = self.core().backend().nodes_of(&self.keys().lock).await;
        let reads = nodes.into_iter().map(|(label, node)| async move {
            let seen = inspect(&node, std::slice::from_ref(self.keys()), "status")
                .await
                .and_then(|mut seen| {
                    seen.pop()
                        .ok_or_else(|| unexpected("inspect", "no reply".into()))?
                });
            NodeStatus {
                node: label,
                status: seen.map(|seen| status(self.name().to_owned(), seen)),
            }
        });
        Ok(futures_util::future::join_all(reads).await)
    }

    /// Deletes the lock whoever holds it and wakes its waiters: break-glass for operators,
    /// when a holder is known to be dead and its lease too long to wait out. Returns the
    /// prefix of the owner token it had, or `None` if it was free.
    ///
    /// The holder, if alive, learns of it at its next renewal (its lost signal fires), but
    /// may already have written: only fencing protects the resource from it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a bad name; transport
    /// errors.
    pub async fn force_release(&self) -> Result<Option<String>> {
        validate_name("lock", self.name())?;
        let keys = self.keys();
        let core = self.core();
        let call = ScriptCall::new(&FORCE_RELEASE)
            .key(&keys.lock)
            .key(&keys.holds)
            .arg(&keys.channel)
            .arg(&*core.release_message(Wake::One));
        let owner: Option<String> = core
            .backend()
            .node_for("breaking a lock")?
            .run(&call)
            .await?;
        if owner.is_some() {
            tracing::warn!(lock = %self.name(), "fenced: lock broken by force");
            core.wake_local(&keys.channel, Wake::One);
        }
        Ok(owner.map(|o| o.chars().take(OWNER_PREFIX_LEN).collect()))
    }
}

/// Everything of this client's namespace whose name matches a pattern, as
/// [`Client::list`](crate::Client::list) finds it in one `SCAN` pass, each kind sorted by name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// Held locks (plain, re-entrant, fair, a read-write lock's writer, multi-lock names).
    pub locks: Vec<LockStatus>,
    /// Semaphores with live holders.
    pub semaphores: Vec<SemaphoreStatus>,
    /// Read-write locks with live readers or waiting writers.
    pub rw_locks: Vec<RwLockStatus>,
    /// Fair locks with waiters in their queue.
    pub fair_queues: Vec<FairQueueStatus>,
    /// Countdown latches, open or counting.
    pub latches: Vec<LatchStatus>,
    /// Elections with a leader or candidates.
    pub elections: Vec<ElectionListing>,
    /// Every name that handed out a fencing token within the fence retention, held now or
    /// not, with its fence: reading it twice shows which names moved in between.
    pub grants: Vec<GrantStatus>,
    /// Keys found that hold another type of data than `fenced` keeps there (another program
    /// wrote them): named here, and left out of the lists above, while the rest is listed.
    pub unreadable: Vec<Unreadable>,
}

/// A key of the namespace that [`Client::list`](crate::Client::list) could not read: it holds
/// another type of data than `fenced` keeps there (Redis' `WRONGTYPE`), written by another program.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Unreadable {
    /// The name whose key it is.
    pub name: String,
    /// The Redis key of the unexpected type.
    pub key: String,
    /// What the key was read as: `lock`, `semaphore`, `rw_lock`, `fair_queue`, `latch` or
    /// `election`.
    pub kind: &'static str,
}

/// Sorts a listing read's answer: a value to keep, a key of another type to name in
/// `unreadable` (then `None`), or an error that ends the listing.
fn readable<T>(
    answer: Result<T>,
    name: &str,
    kind: &'static str,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Option<T>> {
    match answer {
        Ok(value) => Ok(Some(value)),
        Err(Error::WrongType { key, .. }) => {
            unreadable.push(Unreadable {
                name: name.to_owned(),
                key,
                kind,
            });
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// [`Client::list`](crate::Client::list).
pub(crate) async fn list(core: &Arc<Core>, pattern: &str) -> Result<Listing> {
    let ns = &core.options().namespace;
    let found = scan(core.backend().node_for("listing")?, ns, pattern).await?;
    let mut unreadable = Vec::new();
    let u = &mut unreadable;
    Ok(Listing {
        locks: locks(core, &found.locks, u).await?,
        semaphores: semaphores(core, found.semaphores, u).await?,
        rw_locks: rw_locks(core, found.rw_locks, u).await?,
        fair_queues: fair_queues(core, found.fair_queues, u).await?,
        latches: latches(core, found.latches, u).await?,
        elections: elections(core, found.elections, u).await?,
        grants: grants(core, &found.fences, &found.permit_fences).await?,
        unreadable,
    })
}

/// The held ones among `names`.
async fn locks(
    core: &Arc<Core>,
    names: &[String],
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<LockStatus>> {
    let ns = &core.options().namespace;
    let node = core.node()?;
    let mut out = Vec::with_capacity(names.len());
    // One round trip per batch of names, not one per name; on a cluster a batch (one
    // pipeline) stays within one slot.
    for batch in batches(node, ns, names) {
        let keys: Vec<LockKeys> = batch.iter().map(|name| LockKeys::new(ns, name)).collect();
        let seen = inspect(node, &keys, "list").await?;
        for (name, seen) in batch.iter().zip(seen) {
            let Some(seen) = readable(seen, name, "lock", unreadable)? else {
                continue;
            };
            // Released between the scan and now: not held any more.
            if seen.owner.is_some() {
                out.push(status((*name).clone(), seen));
            }
        }
    }
    Ok(out)
}

/// The semaphores among `names` with live holders.
async fn semaphores(
    core: &Arc<Core>,
    names: Vec<String>,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<SemaphoreStatus>> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let status = Semaphore::new(core, name.clone(), 1).status().await;
        let Some(status) = readable(status, &name, "semaphore", unreadable)? else {
            continue;
        };
        if status.holders > 0 {
            out.push(status);
        }
    }
    Ok(out)
}

/// A read-write lock with live readers or waiting writers, as [`Client::list`](crate::Client::list)
/// finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwLockStatus {
    /// The lock's name.
    pub name: String,
    /// Readers holding a live lease.
    pub readers: u64,
    /// Writers registered as waiting.
    pub waiting_writers: u64,
}

/// A countdown latch, as [`Client::list`](crate::Client::list) finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LatchStatus {
    /// The latch's name.
    pub name: String,
    /// Counts left before it opens (0: open).
    pub count: u64,
}

/// An election with a leader or candidates, as [`Client::list`](crate::Client::list) finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ElectionListing {
    /// The election's name.
    pub name: String,
    /// Its leader and candidates.
    pub status: crate::election::ElectionStatus,
}

/// A fair lock's queue of waiters, as [`Client::list`](crate::Client::list) finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct FairQueueStatus {
    /// The lock's name.
    pub name: String,
    /// Waiters in the queue, in the order they will be served.
    pub queued: u64,
}

/// The read-write locks among `names` with live readers or waiting writers. (A writer
/// holds the lock's plain key: it is listed among the locks.)
async fn rw_locks(
    core: &Arc<Core>,
    names: Vec<String>,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<RwLockStatus>> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let seen = RwLock::new(core, name.clone()).status().await;
        let Some(seen) = readable(seen, &name, "rw_lock", unreadable)? else {
            continue;
        };
        if seen.readers > 0 || seen.waiting_writers > 0 {
            out.push(RwLockStatus {
                name,
                readers: seen.readers,
                waiting_writers: seen.waiting_writers,
            });
        }
    }
    Ok(out)
}

/// The latches among `names` that still exist.
async fn latches(
    core: &Arc<Core>,
    names: Vec<String>,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<LatchStatus>> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let count = Latch::new(core, name.clone()).count().await;
        if let Some(Some(count)) = readable(count, &name, "latch", unreadable)? {
            out.push(LatchStatus { name, count });
        }
    }
    Ok(out)
}

/// The elections among `names` with a leader or candidates.
async fn elections(
    core: &Arc<Core>,
    names: Vec<String>,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<ElectionListing>> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let status = Election::new(core, name.clone()).status().await;
        let Some(status) = readable(status, &name, "election", unreadable)? else {
            continue;
        };
        if status.leader.is_some() || status.candidates > 0 {
            out.push(ElectionListing { name, status });
        }
    }
    Ok(out)
}

/// The fair locks among `names` with waiters in their queue.
async fn fair_queues(
    core: &Arc<Core>,
    names: Vec<String>,
    unreadable: &mut Vec<Unreadable>,
) -> Result<Vec<FairQueueStatus>> {
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let queued = FairLock::new(core, name.clone()).queued().await;
        let Some(queued) = readable(queued, &name, "fair_queue", unreadable)? else {
            continue;
        };
        if queued > 0 {
            out.push(FairQueueStatus { name, queued });
        }
    }
    Ok(out)
}

/// The fence of each of `names` that still exists (a lock,
/// reentrant, read-write, fair or multi grant within the fence retention), then of each
/// semaphore of `semaphores` (its permits count their own tokens).
async fn grants(
    core: &Arc<Core>,
    names: &[String],
    semaphores: &[String],
) -> Result<Vec<GrantStatus>> {
    let ns = &core.options().namespace;
    let node = core.node()?;
    let mut out = Vec::with_capacity(names.len() + semaphores.len());
    let fences = batches(node, ns, names)
        .into_iter()
        .map(|batch| {
            let fences = batch.iter().map(|name| LockKeys::new(ns, name).fence);
            batch
                .iter()
                .copied()
                .zip(fences)
                .map(|(n, f)| (n, f, false))
                .collect::<Vec<_>>()
        })
        .chain(batches(node, ns, semaphores).into_iter().map(|batch| {
            let fences = batch.iter().map(|name| SemaphoreKeys::new(ns, name).fence);
            batch
                .iter()
                .copied()
                .zip(fences)
                .map(|(n, f)| (n, f, true))
                .collect()
        }));
    // One pipeline a batch (on a cluster, a batch is one slot's).
    for chunk in fences {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for (_, fence, _) in &chunk {
            pipe.cmd("XINFO").arg("STREAM").arg(fence);
        }
        let replies: Vec<std::result::Result<Value, RedisError>> =
            node.query_pipe("grants", &pipe).await?;
        for ((name, _, semaphore), reply) in chunk.iter().zip(&replies) {
            // Gone since the scan (its retention ended), or not a fence: not listed.
            if let Some(fence) = fence_token(reply) {
                out.push(GrantStatus {
                    name: (*name).clone(),
                    fence,
                    semaphore: *semaphore,
                });
            }
        }
    }
    Ok(out)
}

/// The token of a fence's last ID, from `XINFO STREAM`'s reply (`scripts/fence.lua`); `None`
/// for a fence that does not exist, or a key that is not a fence's stream (a fence of an
/// earlier development build is converted by its next grant).
fn fence_token(reply: &std::result::Result<Value, RedisError>) -> Option<FencingToken> {
    let fields: Vec<(&Value, &Value)> = match reply.as_ref().ok()? {
        Value::Array(items) => items
            .chunks_exact(2)
            .map(|pair| (&pair[0], &pair[1]))
            .collect(),
        Value::Map(pairs) => pairs.iter().map(|(k, v)| (k, v)).collect(),
        _ => return None,
    };
    let id = fields.into_iter().find_map(|(key, value)| {
        let named = matches!(key, Value::BulkString(k) if k == b"last-generated-id")
            || matches!(key, Value::SimpleString(k) if k == "last-generated-id");
        match value {
            Value::BulkString(id) if named => Some(id.as_slice()),
            _ => None,
        }
    })?;
    match FenceId::parse(id) {
        FenceId::Token(token) => Some(FencingToken::new(token)),
        // A sequence past 999, never handed out: every token so far is below the next ms's.
        FenceId::Carry(ms) => Some(FencingToken::new(ms * 1000 - 1)),
        FenceId::Foreign => None,
    }
}

/// A name's fence, as [`Client::list`](crate::Client::list) finds it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GrantStatus {
    /// The name.
    pub name: String,
    /// The fence: every fencing token handed out for the name is at or below it, the next is
    /// above it (a refused grant by transaction moves it too).
    pub fence: FencingToken,
    /// Whether these are a semaphore's permits, whose tokens count apart from a lock of the
    /// same name's.
    pub semaphore: bool,
}

/// `names` in batches of at most [`INSPECT_BATCH`]; on a cluster, of one hash slot each
/// (every key of a name shares its `{name}` tag).
#[cfg_attr(not(feature = "cluster"), allow(unused_variables))]
fn batches<'a>(node: &Node, ns: &str, names: &'a [String]) -> Vec<Vec<&'a String>> {
    #[cfg(feature = "cluster")]
    if node.is_cluster() {
        return batches_by_slot(ns, names);
    }
    names
        .chunks(INSPECT_BATCH)
        .map(|c| c.iter().collect())
        .collect()
}

/// [`batches`] on a cluster.
#[cfg(feature = "cluster")]
fn batches_by_slot<'a>(ns: &str, names: &'a [String]) -> Vec<Vec<&'a String>> {
    let mut by_slot: Vec<(Slot, Vec<&String>)> = Vec::new();
    for name in names {
        let slot = Slot::for_key(LockKeys::new(ns, name).lock);
        match by_slot
            .iter_mut()
            .find(|(s, batch)| *s == slot && batch.len() < INSPECT_BATCH)
        {
            Some((_, batch)) => batch.push(name),
            None => by_slot.push((slot, vec![name])),
        }
    }
    by_slot.into_iter().map(|(_, batch)| batch).collect()
}

/// The names of each kind found by one `SCAN` pass over `<ns>{pattern}*`, sorted and without
/// duplicates (`SCAN` may return a key twice).
#[derive(Default)]
struct Found {
    /// `<ns>{name}`: a lock key.
    locks: Vec<String>,
    /// `<ns>{name}:permits`: a semaphore's holders.
    semaphores: Vec<String>,
    /// `<ns>{name}:readers` or `:writers`: a read-write lock's.
    rw_locks: Vec<String>,
    /// `<ns>{name}:queue`: a fair lock's queue.
    fair_queues: Vec<String>,
    /// `<ns>{name}:latch`.
    latches: Vec<String>,
    /// `<ns>{name}:fence`: a name's fence.
    fences: Vec<String>,
    /// `<ns>{name}:permits:fence`: a semaphore's fence.
    permit_fences: Vec<String>,
    /// `<ns>election:{name}`, `:queue` or `:leader`: an election's.
    elections: Vec<String>,
}

impl Found {
    /// Files `key` under its kind, by the suffix after the `{name}` tag; other keys (tombstones,
    /// epochs, hold counts, cache entries) are not listed.
    fn keep(&mut self, ns: &str, key: &str) {
        let Some(rest) = key.strip_prefix(ns) else {
            return;
        };
        let (election, rest) = match rest.strip_prefix(crate::election::ELECTION_PREFIX) {
            Some(rest) => (true, rest),
            None => (false, rest),
        };
        let Some((name, suffix)) = rest.strip_prefix('{').and_then(|k| k.split_once('}')) else {
            return;
        };
        // Names never contain braces: anything else is not one of ours.
        if name.contains('{') || suffix.contains(['{', '}']) {
            return;
        }
        if election {
            if matches!(suffix, "" | ":queue" | ":leader") {
                self.elections.push(name.to_owned());
            }
            return;
        }
        let list = match suffix {
            "" => &mut self.locks,
            ":permits" => &mut self.semaphores,
            ":readers" | ":writers" => &mut self.rw_locks,
            ":queue" => &mut self.fair_queues,
            ":latch" => &mut self.latches,
            ":fence" => &mut self.fences,
            ":permits:fence" => &mut self.permit_fences,
            _ => return,
        };
        list.push(name.to_owned());
    }

    fn sorted(mut self) -> Self {
        for list in [
            &mut self.locks,
            &mut self.semaphores,
            &mut self.rw_locks,
            &mut self.fair_queues,
            &mut self.latches,
            &mut self.fences,
            &mut self.permit_fences,
            &mut self.elections,
        ] {
            list.sort();
            list.dedup();
        }
        self
    }
}

/// One `SCAN` pass over every key of the namespace whose name matches the glob `pattern`.
async fn scan(node: &Node, ns: &str, pattern: &str) -> Result<Found> {
    // `<ns>{pattern}*` and `<ns>election:{pattern}*` in one pass: whatever else `*` lets
    // through is not filed (`Found::keep`).
    let match_pattern = format!("{}*{{{pattern}}}*", escape_glob(ns));
    let scan = |cursor: u64| {
        let mut scan = redis::cmd("SCAN");
        scan.arg(cursor)
            .arg("MATCH")
            .arg(&match_pattern)
            .arg("COUNT")
            .arg(1000);
        scan
    };
    let mut found = Found::default();
    let mut keep = |keys: Vec<String>| {
        for key in keys {
            found.keep(ns, &key);
        }
    };
    #[cfg(feature = "cluster")]
    if node.is_cluster() {
        scan_masters(node, &scan, &mut keep).await?;
        return Ok(found.sorted());
    }
    {
        let mut cursor = 0;
        loop {
            let (next, keys): (u64, Vec<String>) = node.query("scan", &scan(cursor)).await?;
            keep(keys);
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(found.sorted())
}

/// [`scan`] on a cluster: each master holds its own slots' keys, so one walk per master, the
/// first steps at once.
#[cfg(feature = "cluster")]
async fn scan_masters(
    node: &Node,
    scan: &(dyn Fn(u64) -> redis::Cmd + Sync),
    keep: &mut (dyn FnMut(Vec<String>) + Send),
) -> Result<()> {
    for (addr, first) in node.on_every_master("scan", &scan(0)).await? {
        let (mut cursor, keys): (u64, Vec<String>) = match first {
            // That master refused (a missing permission, say): its own error.
            Value::ServerError(e) => {
                return Err(crate::error::Error::from_redis(
                    "scan",
                    Duration::ZERO,
                    e.into(),
                ));
            }
            v => redis::from_redis_value(v).map_err(|e| unexpected("scan", e.to_string()))?,
        };
        keep(keys);
        while cursor != 0 {
            let (next, keys): (u64, Vec<String>) =
                node.query_at("scan", &addr, &scan(cursor)).await?;
            keep(keys);
            cursor = next;
        }
    }
    Ok(())
}

/// Escapes the glob characters of a literal (the namespace) for `SCAN MATCH`.
fn escape_glob(literal: &str) -> String {
    let mut out = String::with_capacity(literal.len());
    for c in literal.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn glob_characters_of_the_namespace_are_escaped() {
        assert_eq!(super::escape_glob("app:*[x]?\\"), "app:\\*\\[x\\]\\?\\\\");
        assert_eq!(super::escape_glob("fenced:"), "fenced:");
    }
}

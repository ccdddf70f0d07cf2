//! The lock protocol: the only code that sends Lua to Redis.
//!
//! Everything above this module (waiting, renewal, guards) speaks in typed replies
//! ([`AcquireReply`], [`ReleaseReply`], …) and never builds a Redis command itself, so another
//! backend (Redlock over several masters, Cluster) can slot in here without touching it.
//!
//! Invariants:
//! 1. Every call is bounded by the client's per-call timeout; a timed-out write has an unknown
//!    outcome and is reported as [`Error::Timeout`].
//! 2. User data (names, tokens, values) travels only in KEYS and ARGV; script bodies are static
//!    files compiled into the binary.
//! 3. Scripts run by `EVALSHA`; a `NOSCRIPT` reply (after a restart, a failover or a
//!    `SCRIPT FLUSH`) loads the script and retries once. Pipelines get the same fallback.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::{RedisError, Script, Value};

use crate::error::{Error, Result};
use crate::keys::{LockKeys, ResourceKeys};
use crate::lease::ExpiryReply;
use crate::token::{FencingToken, OwnerToken};

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));
static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("abandon.lua")));
static EXTEND: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("extend.lua")));
static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("force_release.lua")));
static FENCED_WRITE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fenced_write.lua")));
static FENCED_READ: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("fenced_read.lua")));

/// What an acquire attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The lease is ours, with this fencing token.
    Acquired(FencingToken),
    /// Somebody holds it; their lease has this much left (`None`: the key has no expiry).
    Held { remaining: Option<Duration> },
    /// This attempt had been abandoned by the client before it reached Redis; nothing changed.
    Abandoned,
}

/// What a release found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseReply {
    /// Deleted now; waiters were notified.
    Released,
    /// An earlier attempt of this same release already deleted it (its reply was lost).
    AlreadyReleased,
    /// Not ours any more; nothing changed.
    NotHeld,
}

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedWrite {
    /// The token was at least the highest seen; the fields were written.
    Applied,
    /// A write with a higher token was accepted before; nothing was written.
    Stale {
        /// The highest token the resource has accepted.
        highest: FencingToken,
    },
}

/// What a fenced read found: the values, or that a newer token was seen first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencedRead<T> {
    /// The token was at least the highest seen, and is now recorded as the highest: every
    /// write with an older token is refused from now on. The values read.
    Current(T),
    /// A newer token was seen before; nothing was read or changed.
    Stale {
        /// The highest token the resource has seen.
        highest: FencingToken,
    },
}

/// A lock's state as read by [`Protocol::inspect`].
pub(crate) struct Inspection {
    pub(crate) owner: Option<String>,
    pub(crate) pttl: i64,
    pub(crate) last_token: Option<FencingToken>,
    pub(crate) subscribers: u64,
}

/// One lease to renew (or re-time) in a batch.
pub(crate) struct RenewItem<'a> {
    pub(crate) keys: &'a LockKeys,
    pub(crate) owner: &'a OwnerToken,
    pub(crate) ttl_ms: u64,
    /// The expiry epoch the request belongs to; see `extend.lua`.
    pub(crate) epoch: u64,
}

/// The connection and settings every protocol call needs. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Protocol {
    conn: ConnectionManager,
    timeout: Duration,
    fence_retention_ms: u64,
    /// How long a release's record lives: longer than a release is retried in the foreground.
    release_record_ms: u64,
    client_id: Arc<str>,
}

impl Protocol {
    pub(crate) fn new(
        conn: ConnectionManager,
        timeout: Duration,
        fence_retention: Duration,
        client_id: Arc<str>,
    ) -> Self {
        Protocol {
            conn,
            timeout,
            fence_retention_ms: crate::options::ttl_millis(fence_retention),
            release_record_ms: crate::options::ttl_millis(timeout * 3),
            client_id,
        }
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The shared multiplexed connection, for other single-command primitives.
    pub(crate) fn connection(&self) -> ConnectionManager {
        self.conn.clone()
    }

    /// Bounds `fut` by the per-call timeout and maps its error.
    pub(crate) async fn bounded<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Error::from_redis(operation, self.timeout, e)),
            Err(_) => Err(Error::Timeout {
                operation,
                after: self.timeout,
            }),
        }
    }

    /// Sends `PING`; used to check a new client can reach its server.
    pub(crate) async fn ping(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        self.bounded("ping", async move {
            redis::cmd("PING").query_async::<String>(&mut conn).await
        })
        .await
        .map(|_| ())
    }

    /// One acquire attempt: `SET NX PX` plus a fencing token, in one round trip.
    pub(crate) async fn try_acquire(
        &self,
        keys: &LockKeys,
        owner: &OwnerToken,
        ttl_ms: u64,
    ) -> Result<AcquireReply> {
        let mut conn = self.conn.clone();
        let mut inv = ACQUIRE.prepare_invoke();
        inv.key(&keys.lock)
            .key(&keys.fence)
            .key(keys.tombstone(owner))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(self.fence_retention_ms);
        let (granted, value): (i64, Value) =
            self.bounded("acquire", inv.invoke_async(&mut conn)).await?;
        match (granted, value) {
            (1, Value::BulkString(bytes)) => {
                parse_token("acquire", &bytes).map(AcquireReply::Acquired)
            }
            (0, Value::Int(-3)) => Ok(AcquireReply::Abandoned),
            (0, Value::Int(pttl)) => Ok(AcquireReply::Held {
                remaining: u64::try_from(pttl).ok().map(Duration::from_millis),
            }),
            (g, v) => Err(unexpected("acquire", format!("{g}, {v:?}"))),
        }
    }

    /// Compare-and-delete, then notify waiters.
    pub(crate) async fn release(
        &self,
        keys: &LockKeys,
        owner: &OwnerToken,
    ) -> Result<ReleaseReply> {
        let mut conn = self.conn.clone();
        let mut inv = RELEASE.prepare_invoke();
        inv.key(&keys.lock)
            .key(keys.release_record(owner))
            .arg(owner.as_str())
            .arg(&keys.channel)
            .arg(&*self.client_id)
            .arg(self.release_record_ms);
        let code: i64 = self.bounded("release", inv.invoke_async(&mut conn)).await?;
        match code {
            1 => Ok(ReleaseReply::Released),
            2 => Ok(ReleaseReply::AlreadyReleased),
            0 => Ok(ReleaseReply::NotHeld),
            other => Err(unexpected("release", other.to_string())),
        }
    }

    /// Voids an acquire attempt of unknown outcome: releases the lease if the attempt took it,
    /// or makes the attempt refuse itself should it arrive within `patience`. True if it had
    /// taken it.
    pub(crate) async fn abandon(
        &self,
        keys: &LockKeys,
        owner: &OwnerToken,
        patience: Duration,
    ) -> Result<bool> {
        let mut conn = self.conn.clone();
        let mut inv = ABANDON.prepare_invoke();
        inv.key(&keys.lock)
            .key(keys.tombstone(owner))
            .arg(owner.as_str())
            .arg(&keys.channel)
            .arg(&*self.client_id)
            .arg(crate::options::ttl_millis(patience).max(1));
        let code: i64 = self.bounded("abandon", inv.invoke_async(&mut conn)).await?;
        Ok(code == 1)
    }

    /// Compare-and-pexpire in epoch order (see `extend.lua`).
    pub(crate) async fn extend(&self, item: &RenewItem<'_>) -> Result<ExpiryReply> {
        let mut conn = self.conn.clone();
        let mut inv = EXTEND.prepare_invoke();
        inv.key(&item.keys.lock)
            .key(item.keys.epoch(item.owner))
            .arg(item.owner.as_str())
            .arg(item.ttl_ms)
            .arg(item.epoch);
        let code: i64 = self.bounded("extend", inv.invoke_async(&mut conn)).await?;
        expiry_reply(code)
    }

    /// Renews many leases in ONE pipelined round trip. The outer error means the round trip
    /// failed as a whole (nothing is known); the inner results are per lease.
    pub(crate) async fn extend_many(
        &self,
        items: &[RenewItem<'_>],
    ) -> Result<Vec<Result<ExpiryReply>>> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for item in items {
            pipe.cmd("EVALSHA")
                .arg(EXTEND.get_hash())
                .arg(2)
                .arg(&item.keys.lock)
                .arg(item.keys.epoch(item.owner))
                .arg(item.owner.as_str())
                .arg(item.ttl_ms)
                .arg(item.epoch);
        }
        let mut conn = self.conn.clone();
        let timeout = self.timeout;
        let replies: Vec<Result<i64, RedisError>> = self
            .bounded("renew", async {
                let first: Vec<Result<i64, RedisError>> = pipe.query_async(&mut conn).await?;
                if first.iter().any(is_noscript) {
                    // The script cache was emptied (restart, failover, SCRIPT FLUSH): a pipeline
                    // cannot fall back by itself, so load the script and send the batch again.
                    EXTEND.prepare_invoke().load_async(&mut conn).await?;
                    return pipe.query_async(&mut conn).await;
                }
                Ok(first)
            })
            .await?;
        Ok(replies
            .into_iter()
            .map(|r| {
                r.map_err(|e| Error::from_redis("renew", timeout, e))
                    .and_then(expiry_reply)
            })
            .collect())
    }

    /// Deletes a lock whoever holds it; returns the owner value it had.
    pub(crate) async fn force_release(&self, keys: &LockKeys) -> Result<Option<String>> {
        let mut conn = self.conn.clone();
        let mut inv = FORCE_RELEASE.prepare_invoke();
        inv.key(&keys.lock).arg(&keys.channel).arg(&*self.client_id);
        self.bounded("force release", inv.invoke_async(&mut conn))
            .await
    }

    /// Reads the state of several locks in one round trip (not atomically: for display only).
    pub(crate) async fn inspect(&self, locks: &[LockKeys]) -> Result<Vec<Inspection>> {
        let mut pipe = redis::pipe();
        for keys in locks {
            pipe.cmd("GET")
                .arg(&keys.lock)
                .cmd("PTTL")
                .arg(&keys.lock)
                .cmd("HGET")
                .arg(&keys.fence)
                .arg("last")
                .cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&keys.channel);
        }
        let mut conn = self.conn.clone();
        type Reply = (Option<String>, i64, Option<Vec<u8>>, (String, u64));
        let replies: Vec<Value> = self.bounded("inspect", pipe.query_async(&mut conn)).await?;
        replies
            .chunks(4)
            .map(|four| {
                let (owner, pttl, last, numsub): Reply =
                    redis::from_redis_value(Value::Array(four.to_vec()))
                        .map_err(|e| unexpected("inspect", e.to_string()))?;
                Ok(Inspection {
                    owner,
                    pttl,
                    last_token: last.map(|b| parse_token("inspect", &b)).transpose()?,
                    subscribers: numsub.1,
                })
            })
            .collect()
    }

    /// One `SCAN` step over string keys matching `pattern`; returns the next cursor.
    pub(crate) async fn scan_strings(
        &self,
        cursor: u64,
        pattern: &str,
    ) -> Result<(u64, Vec<String>)> {
        let mut conn = self.conn.clone();
        self.bounded("scan", async move {
            redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .arg("TYPE")
                .arg("string")
                .query_async(&mut conn)
                .await
        })
        .await
    }

    /// Writes `fields` to a resource if `token` is not older than the newest accepted one.
    pub(crate) async fn fenced_write(
        &self,
        keys: &ResourceKeys,
        token: FencingToken,
        fields: &[(&str, &[u8])],
    ) -> Result<FencedWrite> {
        let mut conn = self.conn.clone();
        let mut inv = FENCED_WRITE.prepare_invoke();
        inv.key(&keys.data).key(&keys.fence).arg(token.get());
        for (field, value) in fields {
            inv.arg(*field).arg(*value);
        }
        let (applied, value): (i64, Value) = self
            .bounded("fenced write", inv.invoke_async(&mut conn))
            .await?;
        match (applied, value) {
            (1, _) => Ok(FencedWrite::Applied),
            (0, Value::BulkString(bytes)) => Ok(FencedWrite::Stale {
                highest: parse_token("fenced write", &bytes)?,
            }),
            (a, v) => Err(unexpected("fenced write", format!("{a}, {v:?}"))),
        }
    }

    /// Reads `fields` of a resource if `token` is current, and records `token` as the highest.
    pub(crate) async fn fenced_read(
        &self,
        keys: &ResourceKeys,
        token: FencingToken,
        fields: &[&str],
    ) -> Result<FencedRead<Vec<Option<Vec<u8>>>>> {
        let mut conn = self.conn.clone();
        let mut inv = FENCED_READ.prepare_invoke();
        inv.key(&keys.data).key(&keys.fence).arg(token.get());
        for field in fields {
            inv.arg(*field);
        }
        let reply: Vec<Value> = self
            .bounded("fenced read", inv.invoke_async(&mut conn))
            .await?;
        match reply.split_first() {
            Some((Value::Int(1), values)) if values.len() == fields.len() => values
                .iter()
                .map(|v| match v {
                    Value::Nil => Ok(None),
                    Value::BulkString(b) => Ok(Some(b.clone())),
                    other => Err(unexpected("fenced read", format!("{other:?}"))),
                })
                .collect::<Result<Vec<_>>>()
                .map(FencedRead::Current),
            Some((Value::Int(0), [Value::BulkString(bytes)])) => Ok(FencedRead::Stale {
                highest: parse_token("fenced read", bytes)?,
            }),
            _ => Err(unexpected("fenced read", format!("{reply:?}"))),
        }
    }

    /// Reads one field of a resource.
    pub(crate) async fn resource_get(
        &self,
        keys: &ResourceKeys,
        field: &str,
    ) -> Result<Option<Vec<u8>>> {
        let mut conn = self.conn.clone();
        self.bounded("resource read", async move {
            redis::cmd("HGET")
                .arg(&keys.data)
                .arg(field)
                .query_async(&mut conn)
                .await
        })
        .await
    }

    /// Reads the highest token a resource has accepted.
    pub(crate) async fn resource_fence(&self, keys: &ResourceKeys) -> Result<Option<FencingToken>> {
        let mut conn = self.conn.clone();
        let raw: Option<Vec<u8>> = self
            .bounded("resource read", async move {
                redis::cmd("GET")
                    .arg(&keys.fence)
                    .query_async(&mut conn)
                    .await
            })
            .await?;
        raw.map(|b| parse_token("resource read", &b)).transpose()
    }
}

fn expiry_reply(code: i64) -> Result<ExpiryReply> {
    match code {
        1 => Ok(ExpiryReply::Applied),
        2 => Ok(ExpiryReply::Superseded),
        0 => Ok(ExpiryReply::NotHeld),
        other => Err(unexpected("extend", other.to_string())),
    }
}

fn is_noscript(r: &Result<i64, RedisError>) -> bool {
    matches!(r, Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript))
}

fn parse_token(script: &'static str, bytes: &[u8]) -> Result<FencingToken> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(FencingToken::new)
        .ok_or_else(|| {
            unexpected(
                script,
                format!(
                    "fencing token {:?} is not a u64",
                    String::from_utf8_lossy(bytes)
                ),
            )
        })
}

fn unexpected(script: &'static str, detail: String) -> Error {
    Error::UnexpectedReply { script, detail }
}

#[cfg(test)]
mod tests {
    //! The scripts' answers in the cases the client cannot easily produce on purpose: a
    //! release whose reply was lost, an acquire that arrives after it was abandoned.

    use super::*;

    async fn protocol(server: &fenced_testkit::RedisServer) -> Protocol {
        let client = redis::Client::open(server.url()).unwrap();
        let conn = ConnectionManager::new(client).await.unwrap();
        Protocol::new(
            conn,
            Duration::from_secs(2),
            Duration::from_secs(60),
            Arc::from("test-client"),
        )
    }

    fn owner() -> OwnerToken {
        OwnerToken::generate().unwrap()
    }

    #[tokio::test]
    async fn a_repeated_release_reports_already_released_not_not_held() {
        let server = fenced_testkit::RedisServer::start().unwrap();
        let p = protocol(&server).await;
        let keys = LockKeys::new("t:", "job");
        let me = owner();
        assert!(matches!(
            p.try_acquire(&keys, &me, 10_000).await.unwrap(),
            AcquireReply::Acquired(_)
        ));
        assert_eq!(p.release(&keys, &me).await.unwrap(), ReleaseReply::Released);
        // The same release again, as after a lost reply:
        assert_eq!(
            p.release(&keys, &me).await.unwrap(),
            ReleaseReply::AlreadyReleased
        );
        // ... even after other holders came and went in between:
        let other = owner();
        assert!(matches!(
            p.try_acquire(&keys, &other, 10_000).await.unwrap(),
            AcquireReply::Acquired(_)
        ));
        assert_eq!(
            p.release(&keys, &other).await.unwrap(),
            ReleaseReply::Released
        );
        assert_eq!(
            p.release(&keys, &me).await.unwrap(),
            ReleaseReply::AlreadyReleased
        );
        // Somebody else's release attempt with a token that never held the lock:
        assert_eq!(
            p.release(&keys, &owner()).await.unwrap(),
            ReleaseReply::NotHeld
        );
    }

    #[tokio::test]
    async fn an_abandoned_attempt_that_arrives_late_refuses_itself() {
        let server = fenced_testkit::RedisServer::start().unwrap();
        let p = protocol(&server).await;
        let keys = LockKeys::new("t:", "late");
        let late = owner();
        // The client gave up on the attempt before Redis saw it:
        assert!(
            !p.abandon(&keys, &late, Duration::from_secs(5))
                .await
                .unwrap()
        );
        // The attempt arrives after all, and takes nothing:
        assert_eq!(
            p.try_acquire(&keys, &late, 10_000).await.unwrap(),
            AcquireReply::Abandoned
        );
        // A tombstone for an attempt that never arrives expires by itself:
        let never = owner();
        assert!(
            !p.abandon(&keys, &never, Duration::from_millis(200))
                .await
                .unwrap()
        );
        let mut conn = p.conn.clone();
        let pttl: i64 = redis::cmd("PTTL")
            .arg(keys.tombstone(&never))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 0 && pttl <= 200, "tombstone pttl {pttl}");
        // The used tombstone is gone, and the lock is free for others:
        let other = owner();
        assert!(matches!(
            p.try_acquire(&keys, &other, 10_000).await.unwrap(),
            AcquireReply::Acquired(_)
        ));
        // An abandoned attempt that DID take the lease is released by the abandon:
        assert_eq!(
            p.release(&keys, &other).await.unwrap(),
            ReleaseReply::Released
        );
        let taken = owner();
        assert!(matches!(
            p.try_acquire(&keys, &taken, 10_000).await.unwrap(),
            AcquireReply::Acquired(_)
        ));
        assert!(
            p.abandon(&keys, &taken, Duration::from_secs(5))
                .await
                .unwrap()
        );
        assert!(matches!(
            p.try_acquire(&keys, &owner(), 10_000).await.unwrap(),
            AcquireReply::Acquired(_)
        ));
    }

    #[tokio::test]
    async fn a_failed_fenced_write_does_not_move_the_fence() {
        let server = fenced_testkit::RedisServer::start().unwrap();
        let p = protocol(&server).await;
        let keys = ResourceKeys::new("t:", "doc");
        assert_eq!(
            p.fenced_write(&keys, FencingToken::new(5), &[("f", b"v")])
                .await
                .unwrap(),
            FencedWrite::Applied
        );
        let mut conn = p.conn.clone();
        let _: () = redis::cmd("SET")
            .arg(&keys.data)
            .arg("not a hash")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            p.fenced_write(&keys, FencingToken::new(9), &[("f", b"v")])
                .await
                .is_err()
        );
        assert_eq!(
            p.resource_fence(&keys).await.unwrap(),
            Some(FencingToken::new(5))
        );
    }

    #[tokio::test]
    async fn a_batch_renews_held_leases_and_refuses_lost_ones() {
        let server = fenced_testkit::RedisServer::start().unwrap();
        let p = protocol(&server).await;
        let held = LockKeys::new("t:", "held");
        let gone = LockKeys::new("t:", "gone");
        let (a, b) = (owner(), owner());
        p.try_acquire(&held, &a, 10_000).await.unwrap();
        p.try_acquire(&gone, &b, 10_000).await.unwrap();
        p.release(&gone, &b).await.unwrap();
        // An emptied script cache must not break the pipelined renewal.
        let mut conn = p.conn.clone();
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut conn)
            .await
            .unwrap();
        let items = [
            RenewItem {
                keys: &held,
                owner: &a,
                ttl_ms: 20_000,
                epoch: 0,
            },
            RenewItem {
                keys: &gone,
                owner: &b,
                ttl_ms: 20_000,
                epoch: 0,
            },
        ];
        let replies = p.extend_many(&items).await.unwrap();
        assert!(matches!(replies[0], Ok(ExpiryReply::Applied)));
        assert!(matches!(replies[1], Ok(ExpiryReply::NotHeld)));
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&held.lock)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(pttl > 15_000);
    }

    #[tokio::test]
    async fn a_late_expiry_change_of_an_older_epoch_is_refused() {
        // The race of a renewal that timed out on a dead connection and reaches Redis after a
        // newer `extend` sent on a fresh one: the older request must not re-time the lease.
        let server = fenced_testkit::RedisServer::start().unwrap();
        let p = protocol(&server).await;
        let keys = LockKeys::new("t:", "epochs");
        let me = owner();
        p.try_acquire(&keys, &me, 3_000).await.unwrap();
        let item = |ttl_ms, epoch| RenewItem {
            keys: &keys,
            owner: &me,
            ttl_ms,
            epoch,
        };
        // extend(300ms) opens epoch 1 and is applied first ...
        assert_eq!(p.extend(&item(300, 1)).await.unwrap(), ExpiryReply::Applied);
        // ... then the delayed epoch-0 renewal for 3s arrives: refused, nothing changes.
        assert_eq!(
            p.extend(&item(3_000, 0)).await.unwrap(),
            ExpiryReply::Superseded
        );
        let mut conn = p.conn.clone();
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&keys.lock)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            pttl <= 300,
            "the older epoch re-timed the lease: pttl {pttl}"
        );
        // The opposite order: a longer epoch 2 applied, then a late epoch-1 (shorter) renewal.
        assert_eq!(
            p.extend(&item(20_000, 2)).await.unwrap(),
            ExpiryReply::Applied
        );
        assert_eq!(
            p.extend(&item(300, 1)).await.unwrap(),
            ExpiryReply::Superseded
        );
        let pttl: i64 = redis::cmd("PTTL")
            .arg(&keys.lock)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(
            pttl > 15_000,
            "the older epoch shortened the lease: pttl {pttl}"
        );
        // Same epoch in any order is applied; the epoch key expires with the lease.
        assert_eq!(
            p.extend(&item(20_000, 2)).await.unwrap(),
            ExpiryReply::Applied
        );
        let epoch_pttl: i64 = redis::cmd("PTTL")
            .arg(keys.epoch(&me))
            .query_async(&mut conn)
            .await
            .unwrap();
        assert!(epoch_pttl > 15_000 && epoch_pttl <= 20_000);
        // Another owner's requests are refused whatever their epoch.
        assert_eq!(
            p.extend(&RenewItem {
                keys: &keys,
                owner: &owner(),
                ttl_ms: 1_000,
                epoch: 9,
            })
            .await
            .unwrap(),
            ExpiryReply::NotHeld
        );
    }
}

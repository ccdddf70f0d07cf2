//! The one error type of the crate, and how Redis errors map onto it.

use std::time::Duration;

use crate::token::FencingToken;

/// Everything that can go wrong in `fenced`.
///
/// Match on the variant to decide what to do: [`Error::NotAcquired`] is contention (try later),
/// [`Error::LeaseLost`] and [`Error::NotHeld`] mean your exclusive access ended (stop writing),
/// [`Error::Unavailable`] and [`Error::Timeout`] mean Redis could not be reached in time (the
/// outcome of a write may be unknown), and [`Error::InvalidArgument`] is a bug in the caller.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// [`Lock::acquire`](crate::Lock::acquire) (or any primitive's acquire, or a campaign)
    /// gave up: its wait deadline or its attempt limit was used up while somebody else held
    /// it; or [`Latch::wait`](crate::Latch::wait) gave up before the latch opened. `what`
    /// says which it was.
    #[error("{}", not_acquired_text(*what, name, *waited, *attempts))]
    NotAcquired {
        /// What was waited for: a lock, a semaphore's permits, a latch, ...
        what: Awaited,
        /// Its name.
        name: String,
        /// How long the call waited, on the monotonic clock.
        waited: Duration,
        /// How many acquire attempts were sent to Redis.
        attempts: u32,
    },
    /// A release or extend found that this lease is no longer held: it expired, or the lock was
    /// broken by force, or somebody else holds it now. Nothing was changed in Redis.
    #[error(
        "the lease on lock {name:?} is no longer held by this owner (it expired or was taken over)"
    )]
    NotHeld {
        /// The lock's name.
        name: String,
    },
    /// The lease ended while the protected work was running: a renewal was refused, its
    /// validity deadline passed without a successful renewal, its maximum hold ended it, or
    /// its holder went silent under a heartbeat ([`LostCause`]). Returned by
    /// [`Lock::with_lock`](crate::Lock::with_lock) and [`Lease::check`](crate::Lease::check).
    #[error(
        "the lease on lock {name:?} (fencing token {fencing_token}) was lost before the work finished{}",
        because(*cause)
    )]
    LeaseLost {
        /// The lock's name.
        name: String,
        /// The fencing token of the lease that was lost.
        fencing_token: FencingToken,
        /// Why it was lost, where that is known.
        cause: Option<LostCause>,
    },
    /// The guard gave the lease back (it was released or dropped) while work holding a
    /// [`Lease`](crate::Lease) clone still ran: from then on somebody else may hold the lock.
    /// Returned by [`Lease::check`](crate::Lease::check).
    #[error(
        "the lease on lock {name:?} (fencing token {fencing_token}) was released by its guard; work using it must stop"
    )]
    LeaseEnded {
        /// The lock's name.
        name: String,
        /// The fencing token of the lease that ended.
        fencing_token: FencingToken,
    },
    /// An optimistic transaction kept meeting concurrent changes to its watched keys and gave
    /// up: its attempt limit or deadline was reached. Nothing was written.
    #[error(
        "transaction gave up after {attempts} attempts in {waited:?}: the watched keys kept changing"
    )]
    Conflict {
        /// How many times the transaction ran.
        attempts: u32,
        /// How long it tried.
        waited: Duration,
    },
    /// Redis could not be reached (the connection was refused, reset or closed), or cannot
    /// serve now and may soon: loading, a busy script, a replica or a failover under way
    /// (`READONLY`, `MASTERDOWN`, `CLUSTERDOWN`, `TRYAGAIN`), or a master that refuses writes
    /// (`OOM` at `maxmemory`, `MISCONF` after a failed save, `NOREPLICAS` below
    /// `min-replicas-to-write`). Waits retry it within their deadline.
    #[error("Redis is unavailable: {source}")]
    Unavailable {
        /// The underlying client error.
        #[source]
        source: redis::RedisError,
    },
    /// A Redis call did not answer within the client's per-call timeout. For a write (acquire,
    /// release, fenced write) the outcome is unknown: it may or may not have taken effect.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// The operation that timed out, such as `"acquire"`.
        operation: &'static str,
        /// The timeout that was exceeded.
        after: Duration,
    },
    /// Too few of several independent Redis nodes agreed (Redlock over N masters): a
    /// majority is needed, and could not be had before the call's bound. Partial grants were
    /// given back. Transient: a retry may find a majority.
    #[error("no quorum: only {granted} of {nodes} Redis nodes agreed; {needed} are needed")]
    NoQuorum {
        /// Nodes that granted.
        granted: usize,
        /// Nodes needed: a strict majority.
        needed: usize,
        /// Nodes asked.
        nodes: usize,
    },
    /// Fewer replicas than [`ClientBuilder::replica_acks`](crate::ClientBuilder::replica_acks)
    /// asks for acknowledged a write within its wait (`WAIT`). The write was applied on the
    /// master, but a failover now could lose it. A grant that falls short is given back (and
    /// retried within the wait), a renewal that falls short does not count (the lease's
    /// validity is not extended by it), and every other write that must survive a failover
    /// (a fenced read's or write's fence, a cache store or invalidation, a latch, the atomic
    /// helpers) is reported with this error: it may be lost, or it may stay. Transient: a
    /// retry may find the replicas, but the write WAS applied on the master, so repeat only a
    /// write that is idempotent (a fenced write, a store, an invalidation), never a count down
    /// or a decrement: read the state instead.
    #[error(
        "{operation}: only {acked} of the {needed} replicas asked for acknowledged it in time; the master has it, a failover could lose it"
    )]
    NotReplicated {
        /// What was written (`acquire`, `renew`, `fenced write`, `fenced read`, ...).
        operation: &'static str,
        /// Replicas that acknowledged.
        acked: usize,
        /// Replicas asked for.
        needed: usize,
    },
    /// The Redis user may not run a command `fenced` needs (an ACL without it). The command is
    /// named even when it runs inside one of `fenced`'s scripts; "Least privilege" in
    /// `docs/operations.md` lists what each feature needs.
    ///
    /// A user who may run the command but not on `fenced`'s keys or channels (their ACL
    /// patterns, `~fenced:*` and `&fenced:*` for the default namespace) is refused too: the
    /// command is then `keys` or `channels`.
    #[error("{}", permission_text(command, operation, detail))]
    Permission {
        /// The command refused, lower case, as ACL rules name it (`set`, `script|load`); or
        /// `keys` or `channels` when the user's key or channel patterns left `fenced`'s out.
        command: String,
        /// What `fenced` was doing (`acquire`, `release`, ...).
        operation: &'static str,
        /// The server's own words.
        detail: String,
    },
    /// An argument was rejected before anything was sent to Redis; or, at connect, a
    /// password given to a server that has none set (for its default user).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The deployment cannot do this: a primitive or an operation its backend does not run
    /// (a lock over several names on a Redis Cluster, a latch on Redlock). Checked before
    /// anything is sent.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The call would wait for itself, forever (or, with a deadline, only to run out), and is
    /// refused before anything is sent:
    ///
    /// - a handle asking for a write lease while it (or a clone) holds a read lease of the
    ///   same lock;
    /// - a task waiting, in [`Lock::acquire`](crate::Lock::acquire),
    ///   [`FairLock::acquire`](crate::FairLock::acquire),
    ///   [`MultiLock::acquire`](crate::MultiLock::acquire) or
    ///   [`Semaphore::acquire_many`](crate::Semaphore::acquire_many), for a name that guards it
    ///   acquired itself hold, or for more permits than those guards leave.
    ///
    /// A guard is held by the future that acquired it, known by its waker: its task (or
    /// `block_on`, the body of `#[tokio::main]`), or its own future in a `FuturesUnordered`
    /// (`buffer_unordered`, `for_each_concurrent`: those wait for each other as before), for
    /// as long as it lives and its lease is renewed until given back. A lease without
    /// renewal, or under a maximum hold, ends by itself and is waited for. A guard moved to
    /// another task still counts as its acquirer's, and the arms of one `join!` or `select!`
    /// are their task: to wait for a guard that another task, or another arm, will give
    /// back, acquire from a task of its own (`tokio::spawn`). A `try_acquire` never waits,
    /// and is never refused.
    #[error("would deadlock: {0}")]
    WouldDeadlock(String),
    /// A key `fenced` uses holds another type of data than `fenced` keeps there (Redis'
    /// `WRONGTYPE`): another program wrote it, a hash where a lock's string belongs, say.
    /// Every primitive answers it at once, without waiting: no release will ever change it.
    /// The key is named; delete it (or use another name, or another namespace) to go on.
    /// Not transient.
    #[error(
        "{operation}: the key {key:?} holds another type of data than fenced keeps there (WRONGTYPE): another program wrote it"
    )]
    WrongType {
        /// The Redis key of the unexpected type.
        key: String,
        /// What `fenced` was doing (`acquire`, `status`, ...).
        operation: &'static str,
    },
    /// Redis answered with an error (for example `READONLY` from a replica, or `ERR` on a
    /// value that is not a number). A refused permission is [`Error::Permission`], a key of
    /// another type [`Error::WrongType`].
    #[error("Redis returned an error: {0}")]
    Redis(#[source] redis::RedisError),
    /// A script or a transaction answered in a shape this version of `fenced` does not
    /// understand.
    #[error("unexpected reply to {script}: {detail}")]
    UnexpectedReply {
        /// Which script answered.
        script: &'static str,
        /// What was wrong with the reply.
        detail: String,
    },
}

/// What an [`Error::NotAcquired`] waited for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Awaited {
    /// A [`Lock`](crate::Lock) (or a striped lock's stripe).
    Lock,
    /// A [`ReentrantLock`](crate::ReentrantLock).
    ReentrantLock,
    /// A [`FairLock`](crate::FairLock).
    FairLock,
    /// An [`UnfencedLock`](crate::UnfencedLock).
    UnfencedLock,
    /// A [`MultiLock`](crate::MultiLock).
    MultiLock,
    /// Permits of a [`Semaphore`](crate::Semaphore).
    Semaphore,
    /// A read lease of an [`RwLock`](crate::RwLock).
    ReadLease,
    /// The write lease of an [`RwLock`](crate::RwLock).
    WriteLease,
    /// Leadership of an [`Election`](crate::Election).
    Election,
    /// A [`Latch`](crate::Latch) to open.
    Latch,
    /// A [`Cache`](crate::Cache) entry that another caller computes.
    CacheEntry,
}

impl std::fmt::Display for Awaited {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Awaited::Lock => "lock",
            Awaited::ReentrantLock => "re-entrant lock",
            Awaited::FairLock => "fair lock",
            Awaited::UnfencedLock => "unfenced lock",
            Awaited::MultiLock => "multi-lock",
            Awaited::Semaphore => "semaphore",
            Awaited::ReadLease | Awaited::WriteLease => "read-write lock",
            Awaited::Election => "election",
            Awaited::Latch => "latch",
            Awaited::CacheEntry => "cache entry",
        })
    }
}

/// Why a lease was lost: [`Lease::lost_cause`](crate::Lease::lost_cause), and the `cause` of
/// [`Error::LeaseLost`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostCause {
    /// Redis refused a renewal or an `extend`: the key had expired, was deleted, or belongs to
    /// another holder.
    Refused,
    /// The validity deadline passed before Redis confirmed a renewal: Redis did not answer in
    /// time (down, paused, slow) or refused the renewal (an ACL, too few replicas, no quorum);
    /// or the lease was not renewed (`with_auto_renew(false)`).
    Expired,
    /// Renewal could not run in time: the client's renewal task was due to send it at least a
    /// sixth of a ttl before the validity deadline, waiting on no reply from Redis, and had
    /// not run by the deadline. The threads of the runtime the client was connected on were
    /// busy or blocked: blocking work on a `current_thread` runtime, or on every worker of a
    /// multi-threaded one. Run it in [`tokio::task::spawn_blocking`].
    RenewalLate {
        /// How long after the renewal was due the loss was found, the renewal still not sent.
        late_by: Duration,
    },
    /// The maximum hold ([`Lock::with_max_hold`](crate::Lock::with_max_hold)) ended the
    /// lease: it is not renewed past it, whatever its holder does.
    MaxHold,
    /// The holder went silent: a renewal fell due with no heartbeat
    /// ([`Lease::beat`](crate::Lease::beat)) for longer than the maximum silence
    /// ([`Lock::with_heartbeat`](crate::Lock::with_heartbeat)). The lease is no longer
    /// renewed, and Redis frees the name when it runs out: the key is not deleted.
    Silent {
        /// How long no beat had come when the renewal fell due.
        silent_for: Duration,
    },
}

impl std::fmt::Display for LostCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LostCause::Refused => f.write_str(
                "Redis refused its renewal (the key expired, was deleted, or belongs to another holder)",
            ),
            LostCause::Expired => {
                f.write_str("its validity deadline passed before Redis confirmed a renewal")
            }
            LostCause::RenewalLate { late_by } => write!(
                f,
                "its renewal was {} late, past its deadline: the runtime's threads were busy or blocked (run blocking work in spawn_blocking)",
                short(*late_by)
            ),
            LostCause::MaxHold => f.write_str("it reached its maximum hold"),
            LostCause::Silent { silent_for } => write!(
                f,
                "no heartbeat came for {}, longer than its maximum silence: it was no longer renewed",
                short(*silent_for)
            ),
        }
    }
}

/// `: <cause>` after a lost lease's message, when the cause is known.
fn because(cause: Option<LostCause>) -> String {
    cause.map(|c| format!(": {c}")).unwrap_or_default()
}

/// `lock "x" is held by another owner (gave up after 1.5s, 3 attempts)`.
fn not_acquired_text(what: Awaited, name: &str, waited: Duration, attempts: u32) -> String {
    let state = match what {
        Awaited::Lock | Awaited::ReentrantLock | Awaited::UnfencedLock => {
            "is held by another owner"
        }
        Awaited::FairLock => "is held by another owner, or others are ahead in its queue",
        Awaited::MultiLock => "has a name held by another owner",
        Awaited::Semaphore => "has no free permits",
        Awaited::ReadLease => "has a writer, holding it or waiting",
        Awaited::WriteLease => "is held by readers or another writer",
        Awaited::Election => "is led by another candidate",
        Awaited::Latch => "is not open",
        Awaited::CacheEntry => "is still being computed by another caller",
    };
    let after = short(waited);
    match (what, attempts) {
        (Awaited::Latch | Awaited::CacheEntry, _) | (_, 0) => {
            format!("{what} {name:?} {state} (gave up after {after})")
        }
        (_, 1) => format!("{what} {name:?} {state} (gave up after {after}, 1 attempt)"),
        (_, n) => format!("{what} {name:?} {state} (gave up after {after}, {n} attempts)"),
    }
}

/// `850ms`, `1.5s`.
fn short(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else {
        format!("{:.1}s", d.as_secs_f64())
    }
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// True for errors where Redis could not be reached or did not answer in time, so retrying
    /// later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Unavailable { .. }
                | Error::Timeout { .. }
                | Error::NoQuorum { .. }
                | Error::NotReplicated { .. }
        )
    }

    /// Maps a client error of an `operation` onto our variants.
    pub(crate) fn from_redis(
        operation: &'static str,
        timeout: Duration,
        err: redis::RedisError,
    ) -> Self {
        use redis::ServerErrorKind as S;
        if err.is_timeout() {
            return Error::Timeout {
                operation,
                after: timeout,
            };
        }
        let passing = matches!(
            err.kind(),
            redis::ErrorKind::Server(
                S::BusyLoading | S::TryAgain | S::MasterDown | S::ReadOnly | S::ClusterDown
            )
        ) || matches!(err.code(), Some(code) if PASSING.contains(&code))
            || script_error_code(&err.to_string()).is_some_and(|code| PASSING.contains(&code));
        if passing
            || err.is_io_error()
            || err.is_connection_refusal()
            || err.is_connection_dropped()
        {
            // Loading after a restart, a busy script, a failover in progress: Redis cannot
            // serve us now, but may soon.
            Error::Unavailable { source: err }
        } else if let Some(command) = refused_command(&err) {
            Error::Permission {
                command,
                operation,
                detail: err.to_string(),
            }
        } else {
            Error::Redis(err)
        }
    }

    /// A `NOPERM` refusal inside a script names no command, only the script's line: read the
    /// command from that line of the script's source.
    pub(crate) fn in_script(self, operation: &'static str, source: &str) -> Self {
        let Error::Redis(err) = &self else {
            return self;
        };
        let text = err.to_string();
        if !text.contains("can't run this command or subcommand") {
            return self;
        }
        let command = script_line(&text)
            .and_then(|line| source.lines().nth(line.checked_sub(1)?))
            .and_then(|line| line.split("redis.call(").nth(1))
            .and_then(|rest| match rest.strip_prefix('\'') {
                Some(quoted) => Some(quoted.to_owned()),
                // `redis.call(PUBLISH, ...)`: the command a prelude names, as in
                // `local PUBLISH = 'SPUBLISH'` (the prelude of `scripts/mod.rs`).
                None => {
                    let name: String = rest
                        .chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                        .collect();
                    let declared = format!("local {name} = '");
                    source
                        .lines()
                        .find_map(|l| l.strip_prefix(declared.as_str()))
                        .map(str::to_owned)
                }
            })
            .and_then(|rest| {
                // 'PUBSUB', 'NUMSUB', ...: ACL rules name a container's subcommand too.
                let mut quoted = rest.split('\'');
                let command = quoted.next()?.to_ascii_lowercase();
                let sub = quoted.nth(1).map(str::to_ascii_lowercase);
                Some(match sub {
                    Some(sub) if CONTAINERS.contains(&command.as_str()) => {
                        format!("{command}|{sub}")
                    }
                    _ => command,
                })
            });
        match command {
            Some(command) => Error::Permission {
                command,
                operation,
                detail: text,
            },
            None => self,
        }
    }

    /// Whether this is the server refusing scripts themselves, before running one: `EVALSHA`
    /// or `SCRIPT LOAD` outside the user's ACL, or commands the server (a proxy, a build
    /// without Lua) does not have. A refusal inside a script names another command.
    pub(crate) fn refuses_scripts(&self) -> bool {
        match self {
            Error::Permission { command, .. } => {
                matches!(command.as_str(), "evalsha" | "script|load" | "script")
            }
            Error::Redis(e) => {
                let text = e.to_string().to_ascii_lowercase();
                (text.contains("unknown command") || text.contains("unsupported command"))
                    && (text.contains("'evalsha'") || text.contains("'script'"))
            }
            _ => false,
        }
    }

    /// A refusal of scripts ([`refuses_scripts`](Self::refuses_scripts)) in a few words: the
    /// command refused, and the fix.
    pub(crate) fn script_refusal(&self) -> String {
        match self {
            Error::Permission { command, .. } => {
                format!("the Redis user may not run {command}: grant it +@scripting")
            }
            Error::Redis(e) => {
                let text = e.to_string().to_ascii_lowercase();
                let command = if text.contains("'evalsha'") {
                    "evalsha"
                } else {
                    "script"
                };
                format!("the server refuses {command}: use one that runs Lua scripts")
            }
            other => other.to_string(),
        }
    }

    /// Whether this is Redis' `WRONGTYPE`, not yet named ([`Error::Redis`]).
    pub(crate) fn is_raw_wrong_type(&self) -> bool {
        matches!(self, Error::Redis(e) if is_wrong_type(e))
    }

    /// A `WRONGTYPE` raised inside a script, named by the script's line: the first `KEYS[n]`
    /// of the `redis.call` on the line the server names, read from the script's `source`;
    /// `keys` gives KEYS[n] (1-based). `None` when the line names no key so (a local
    /// variable), or this is not such an error.
    pub(crate) fn wrong_type_in_script(
        &self,
        source: &str,
        keys: impl Fn(usize) -> Option<String>,
    ) -> Option<String> {
        let Error::Redis(err) = self else {
            return None;
        };
        if !is_wrong_type(err) {
            return None;
        }
        let text = err.to_string();
        let line = script_line(&text)?;
        let call = source.lines().nth(line.checked_sub(1)?)?;
        let rest = call.split("redis.call(").nth(1)?;
        let index = rest.split("KEYS[").nth(1)?;
        let digits: String = index.chars().take_while(char::is_ascii_digit).collect();
        if !index[digits.len()..].starts_with(']') {
            return None;
        }
        keys(digits.parse().ok()?)
    }

    /// A wait's end named after what it waited for: the wait loop names a lock.
    pub(crate) fn waited_for(mut self, what: Awaited) -> Self {
        if let Error::NotAcquired { what: was, .. } = &mut self {
            *was = what;
        }
        self
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidArgument(msg.into())
    }

    pub(crate) fn unsupported(msg: impl Into<String>) -> Self {
        Error::Unsupported(msg.into())
    }
}

/// Error codes of a server that cannot serve us now but may soon.
const PASSING: [&str; 9] = [
    "BUSY",
    "OOM",
    "MISCONF",
    "NOREPLICAS",
    "LOADING",
    "TRYAGAIN",
    "MASTERDOWN",
    "READONLY",
    "CLUSTERDOWN",
];

/// The error code of a command that failed inside a script, where the server gives it only in
/// the text: Redis 6 answers `ERR Error running script (…): @user_script:97: @user_script: 97:
/// -READONLY You can't write…` (Redis 7 and Valkey give the code itself).
fn script_error_code(text: &str) -> Option<&str> {
    let (_, after) = text.rsplit_once("@user_script")?;
    after
        .split_whitespace()
        .map(|word| word.trim_start_matches('-'))
        .find(|word| word.len() >= 3 && word.bytes().all(|b| b.is_ascii_uppercase()))
}

/// Whether a client error is Redis' `WRONGTYPE`: its code, or (inside a script on Redis 6)
/// the code in its text.
pub(crate) fn is_wrong_type(err: &redis::RedisError) -> bool {
    err.code() == Some("WRONGTYPE")
        || script_error_code(&err.to_string()).is_some_and(|code| code == "WRONGTYPE")
}

/// The line of a script that failed, as the server names it: `@user_script:31` (Redis 6 and
/// 7, Valkey).
fn script_line(text: &str) -> Option<usize> {
    let rest = text.split("@user_script:").nth(1)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// A refusal's message, with the ACL rule that would grant what was refused.
fn permission_text(command: &str, operation: &str, detail: &str) -> String {
    match command {
        "keys" => format!(
            "the Redis user may not access fenced's keys (needed by fenced's {operation}; grant a key pattern such as ~fenced:* for the namespace): {detail}"
        ),
        "channels" => format!(
            "the Redis user may not use fenced's channels (needed by fenced's {operation}; grant a channel pattern such as &fenced:* for the namespace): {detail}"
        ),
        _ => format!(
            "the Redis user may not run {command:?} (needed by fenced's {operation}; grant +{command}): {detail}"
        ),
    }
}

/// What an ACL refused when the user may run the command but not on these keys or channels:
/// `keys` or `channels`. The servers word it differently: Redis 7 `NOPERM this user has no
/// permissions to access one of the keys used as arguments` (and, in a script, `can't access
/// at least one of the keys`, `can't publish to the channel`), Valkey `No permissions to
/// access a key` (or `a channel`).
fn refused_access(text: &str) -> Option<&'static str> {
    const KEYS: [&str; 3] = [
        "access one of the keys",
        "access a key",
        "access at least one of the keys",
    ];
    const CHANNELS: [&str; 3] = [
        "access one of the channels",
        "access a channel",
        "publish to the channel",
    ];
    if KEYS.iter().any(|k| text.contains(k)) {
        Some("keys")
    } else if CHANNELS.iter().any(|c| text.contains(c)) {
        Some("channels")
    } else {
        None
    }
}

/// Commands whose ACL rules name a subcommand (`pubsub|numsub`).
const CONTAINERS: [&str; 6] = ["pubsub", "script", "client", "config", "object", "function"];

/// The command a refusal by ACL names: "... no permissions to run the 'evalsha' command".
fn refused_command(err: &redis::RedisError) -> Option<String> {
    let text = err.to_string();
    // Refused outright (code `NOPERM`), or inside MULTI (then EXEC answers EXECABORT with
    // the NOPERM text), or inside a script on Valkey, which answers `ERR ACL failure in
    // script: User u has no permissions to run the 'set' command` (no code of its own).
    if let Some(what) = refused_access(&text) {
        return Some(what.to_owned());
    }
    if err.code() != Some("NOPERM")
        && !text.contains("NOPERM")
        && !text.contains("ACL failure in script")
    {
        return None;
    }
    let quoted = text.split("run the '").nth(1)?;
    let command = quoted.split('\'').next()?.to_ascii_lowercase();
    // Redis 6 names only the container ("the 'script' command or its subcommand"): name the
    // one subcommand of it that fenced sends outside scripts, as ACL rules spell it.
    Some(
        match SUBCOMMAND_SENT
            .iter()
            .find(|(container, _)| *container == command)
        {
            Some((_, full)) if !command.contains('|') => (*full).to_owned(),
            _ => command,
        },
    )
}

/// The only subcommand of a container that fenced sends as a command of its own.
const SUBCOMMAND_SENT: [(&str, &str); 2] = [("script", "script|load"), ("pubsub", "pubsub|numsub")];

#[cfg(test)]
mod code_tests {
    use super::{refused_access, script_error_code};

    #[test]
    fn key_and_channel_refusals_of_every_server_are_read() {
        for keys in [
            "NOPERM this user has no permissions to access one of the keys used as arguments",
            "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: bffd, on @user_script:1.",
            "ERR Error running script (call to f_bffd): @user_script:1: @user_script: 1: The user executing the script can't access at least one of the keys mentioned in the command arguments",
            "NOPERM No permissions to access a key",
            "ERR ACL failure in script: No permissions to access a key script: on @user_script:1.",
        ] {
            assert_eq!(refused_access(keys), Some("keys"), "{keys}");
        }
        for channels in [
            "NOPERM this user has no permissions to access one of the channels used as arguments",
            "ERR The user executing the script can't publish to the channel mentioned in the command script: 57b7, on @user_script:1.",
            "NOPERM No permissions to access a channel",
            "ERR ACL failure in script: No permissions to access a channel script: on @user_script:1.",
        ] {
            assert_eq!(refused_access(channels), Some("channels"), "{channels}");
        }
        assert_eq!(
            refused_access("NOPERM User u has no permissions to run the 'set' command"),
            None
        );
    }

    #[test]
    fn a_code_inside_a_redis_6_script_error_is_found() {
        let ro = "Error running script (call to f_391e): @user_script:97: @user_script: 97: -READONLY You can't write against a read only replica.";
        assert_eq!(script_error_code(ro), Some("READONLY"));
        let wt = "Error running script (call to f_cea0): @user_script:103: WRONGTYPE Operation against a key";
        assert_eq!(script_error_code(wt), Some("WRONGTYPE"));
        assert_eq!(script_error_code("ERR plain error"), None);
        assert_eq!(
            script_error_code("@user_script:1: The user executing the script"),
            None
        );
    }
}

#[cfg(test)]
mod wrong_type_tests {
    use super::Error;

    /// A server's error reply, as the client parses it off the wire.
    fn server(text: &str) -> Error {
        let wire = format!("-{text}\r\n");
        match redis::parse_redis_value(wire.as_bytes()).and_then(|v| v.extract_error()) {
            Err(e) => Error::Redis(e),
            Ok(v) => panic!("not an error: {v:?}"),
        }
    }

    const SOURCE: &str = "local a = 1\nlocal x = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', 1)\nlocal h = redis.call('LINDEX', queue, 0)\n";

    fn keys(i: usize) -> Option<String> {
        ["fenced:{a}", "fenced:{a}:permits"]
            .get(i.checked_sub(1)?)
            .map(|k| (*k).to_owned())
    }

    #[test]
    fn a_wrongtype_inside_a_script_names_the_key_of_its_line_on_every_server() {
        for text in [
            // Redis 7, Valkey.
            "WRONGTYPE Operation against a key holding the wrong kind of value script: 1a2b, on @user_script:2.",
            // Redis 6.
            "ERR Error running script (call to f_1a2b): @user_script:2: WRONGTYPE Operation against a key holding the wrong kind of value",
        ] {
            let e = server(text);
            assert!(e.is_raw_wrong_type(), "{text}");
            assert_eq!(
                e.wrong_type_in_script(SOURCE, keys).as_deref(),
                Some("fenced:{a}:permits"),
                "{text}"
            );
        }
        // A line that names its key by a variable: not named here (the caller asks TYPE).
        let e = server("WRONGTYPE Operation against a key script: 1a2b, on @user_script:3.");
        assert_eq!(e.wrong_type_in_script(SOURCE, keys), None);
        // Another error is none of this.
        let e = server(
            "ERR Error running script (call to f_1a2b): @user_script:2: ERR value is not an integer",
        );
        assert!(!e.is_raw_wrong_type());
        assert_eq!(e.wrong_type_in_script(SOURCE, keys), None);
    }

    #[test]
    fn a_key_of_another_type_is_named_and_not_transient() {
        let e = Error::WrongType {
            key: "fenced:{a}".into(),
            operation: "acquire",
        };
        assert!(!e.is_transient());
        let text = e.to_string();
        assert!(
            text.contains("\"fenced:{a}\"") && text.contains("WRONGTYPE"),
            "{text}"
        );
        assert_eq!(text.lines().count(), 1);
    }
}

#[cfg(test)]
mod not_acquired_tests {
    use std::time::Duration;

    use super::{Awaited, Error, LostCause};

    #[test]
    fn not_acquired_names_what_it_waited_for_in_one_line() {
        let text = |what, attempts| {
            Error::NotAcquired {
                what,
                name: "x".into(),
                waited: Duration::from_millis(1500),
                attempts,
            }
            .to_string()
        };
        assert_eq!(
            text(Awaited::Lock, 1),
            "lock \"x\" is held by another owner (gave up after 1.5s, 1 attempt)"
        );
        assert_eq!(
            text(Awaited::Semaphore, 3),
            "semaphore \"x\" has no free permits (gave up after 1.5s, 3 attempts)"
        );
        assert_eq!(
            text(Awaited::Latch, 4),
            "latch \"x\" is not open (gave up after 1.5s)"
        );
        for what in [
            Awaited::ReentrantLock,
            Awaited::FairLock,
            Awaited::UnfencedLock,
            Awaited::MultiLock,
            Awaited::ReadLease,
            Awaited::WriteLease,
            Awaited::Election,
            Awaited::CacheEntry,
        ] {
            let shown = text(what, 2);
            assert!(shown.starts_with(&format!("{what} \"x\" ")), "{shown}");
            assert_eq!(shown.lines().count(), 1, "{shown}");
        }
    }

    #[test]
    fn a_lost_lease_says_why_when_it_is_known() {
        let text = |cause| {
            Error::LeaseLost {
                name: "x".into(),
                fencing_token: crate::FencingToken::new(7),
                cause,
            }
            .to_string()
        };
        let lost = "the lease on lock \"x\" (fencing token 7) was lost before the work finished";
        assert_eq!(text(None), lost);
        let late = LostCause::RenewalLate {
            late_by: Duration::from_millis(805),
        };
        assert_eq!(
            text(Some(late)),
            format!(
                "{lost}: its renewal was 805ms late, past its deadline: the runtime's threads were busy or blocked (run blocking work in spawn_blocking)"
            )
        );
        assert_eq!(
            text(Some(LostCause::MaxHold)),
            format!("{lost}: it reached its maximum hold")
        );
        let silent = LostCause::Silent {
            silent_for: Duration::from_millis(1_240),
        };
        assert_eq!(
            text(Some(silent)),
            format!(
                "{lost}: no heartbeat came for 1.2s, longer than its maximum silence: it was no longer renewed"
            )
        );
    }
}

// Here rather than in `token.rs`, which stays below this module (it imports no error type).
impl crate::token::OwnerToken {
    /// A fresh token, or the typed error for a failed OS random source.
    pub(crate) fn fresh() -> Result<Self> {
        Self::generate().map_err(|e| Error::invalid(format!("the OS random source failed: {e}")))
    }
}

/// Bounds `fut` by `timeout` and maps its error: the one place where a timeout becomes
/// [`Error::Timeout`].
pub(crate) async fn bounded<T>(
    timeout: Duration,
    operation: &'static str,
    fut: impl Future<Output = std::result::Result<T, redis::RedisError>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::from_redis(operation, timeout, e)),
        Err(_) => Err(Error::Timeout {
            operation,
            after: timeout,
        }),
    }
}

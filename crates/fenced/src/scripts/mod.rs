//! Every Lua script of the crate, in one registry.
//!
//! Each script is its own `.lua` file in this folder, with a header naming its KEYS, ARGV and
//! replies. Scripts are sent by `EVALSHA`, under the hash the server gave when the node first
//! loaded them (`SCRIPT LOAD`; the client computes no SHA-1); the node loads them again on a
//! `NOSCRIPT` reply (a restart, a failover, a reconnect to a fresh server, `SCRIPT FLUSH`)
//! and, because a pipeline cannot fall back on its own, loads every script of the batch
//! before sending it again.
//!
//! Invariants:
//! 1. User data (names, tokens, values) travels only in KEYS and ARGV; script bodies are
//!    static text compiled into the binary.
//! 2. A [`ScriptCall`] names all the keys it touches, and the keys of one primitive share a
//!    `{hash tag}`, so a call runs on one Redis Cluster slot.
//! 3. A script with a [`Native`] twin answers exactly what the twin's first command answers,
//!    so a node may send either (the twin where the server has its command) and the reply is
//!    read the same way.
//! 4. Each script is registered once, and names the [`Step`] it runs. What a call asks beyond
//!    its script (a grant by script only, the operation its errors name) travels in the call,
//!    never in a second registration of the same text.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use redis::{Cmd, ToRedisArgs};

/// A script of the registry, with the operation name its errors carry.
pub(crate) struct Lua {
    /// The operation, as shown in errors and logs ("acquire", "release", ...).
    pub(crate) operation: &'static str,
    /// The static's own name (`SEMAPHORE_ACQUIRE`), which [`primitive`](Self::primitive)
    /// reads.
    name: &'static str,
    classic: Body,
    /// For a script that announces releases: the same script announcing with `SPUBLISH`
    /// (sharded pub/sub on a Redis Cluster). `None` for the others.
    sharded: Option<Body>,
    /// The server command that does the same, where the server has it (invariant 3).
    pub(crate) native: Option<Native>,
    /// The step the script runs, by which a node knows its other ways (invariant 4).
    pub(crate) step: Step,
}

/// What a call does, whichever way a node runs it (invariant 4). A node's executor loop
/// (`backend/node/exec.rs`) knows a step's other ways by this value, never by which script
/// the call names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The plain lock's grant and its token: also one `MULTI`/`EXEC` (`backend/node/grant.rs`).
    Grant,
    /// A lease's renewal or re-timing, in epoch order: also a `WATCH` transaction.
    Extend,
    /// Compare-and-delete, then the announcement: also a native command where the server has
    /// one ([`Native`]), and a `WATCH` transaction.
    Release,
    /// Void an attempt of unknown outcome, leaving a tombstone: also a `WATCH` transaction.
    Abandon,
    /// Break a lock whoever holds it: also a `WATCH` transaction.
    ForceRelease,
    /// Its script alone.
    Script,
}

/// A server command (or two) that does what a script does, with the script's reply as the
/// first command's (invariant 3), and without the script's cost on the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Native {
    /// `SET KEYS[1] ARGV[1] NX PX ARGV[2]`: every server has it.
    SetNxPx,
    /// `DELIFEQ KEYS[1] ARGV[1]` (Valkey 9), then `PUBLISH ARGV[2] ARGV[3]` (`SPUBLISH` with
    /// sharded pub/sub): compare-and-delete and the release's announcement. The announcement
    /// goes out even when nothing was deleted: a waiter woken for nothing tries once more.
    /// An empty ARGV[3] announces nothing, as in the script.
    DelIfEqThenPublish,
}

impl Native {
    /// Whether every server fenced supports runs it (no probe needed).
    pub(crate) fn everywhere(self) -> bool {
        matches!(self, Native::SetNxPx)
    }
}

/// One script text as sent to Redis.
pub(crate) struct Body {
    source: &'static str,
}

impl Body {
    /// The script's source, as sent.
    pub(crate) fn source(&self) -> &'static str {
        self.source
    }

    /// `SCRIPT LOAD` for this script.
    pub(crate) fn load_cmd(&self) -> Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }
}

/// The primitive each prefix of the statics' names stands for, as a message names it; a
/// plain lock's scripts have none of these.
const PRIMITIVES: [(&str, &str); 14] = [
    ("UNFENCED_", "an unfenced lock"),
    ("REENTRANT_", "a re-entrant lock"),
    ("SEMAPHORE_", "a semaphore"),
    ("MULTI_", "a multi-lock"),
    ("RW_", "a read-write lock"),
    ("FAIR_", "a fair lock"),
    ("ELECTION_", "an election"),
    ("LATCH_", "a latch"),
    ("CACHE_", "a cache"),
    ("FENCED_", "a fenced resource"),
    ("COMPARE_AND_SET", "compare_and_set"),
    ("SET_IF_VERSION", "set_if_version"),
    ("SET_EXTREME", "set_max or set_min"),
    ("DECREMENT_IF_AT_LEAST", "decrement_if_at_least"),
];

impl Lua {
    /// The primitive (or helper) this script serves, as a message names it: "a semaphore".
    pub(crate) fn primitive(&self) -> &'static str {
        PRIMITIVES
            .iter()
            .find(|&&(prefix, _)| self.name.starts_with(prefix))
            .map_or("a lock", |&(_, words)| words)
    }

    /// The text to send: the sharded one when the node announces on sharded pub/sub and the
    /// script announces anything.
    pub(crate) fn body(&self, sharded: bool) -> &Body {
        match (&self.sharded, sharded) {
            (Some(body), true) => body,
            _ => &self.classic,
        }
    }
}

/// The hashes one server gave for the scripts loaded there (`SCRIPT LOAD` answers the hash
/// `EVALSHA` wants), by script body: the client computes no SHA-1 of its own.
#[derive(Debug, Default)]
pub(crate) struct Hashes(Mutex<HashMap<usize, Arc<str>>>);

impl Hashes {
    /// The hash the server gave for `body`, once loaded.
    pub(crate) fn get(&self, body: &Body) -> Option<Arc<str>> {
        let hashes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        hashes.get(&Self::slot(body)).cloned()
    }

    /// Remembers the hash a `SCRIPT LOAD` of `body` answered; `None` for a reply that is not
    /// a hash (40 hexadecimal digits), which `EVALSHA` could not take.
    pub(crate) fn learn(&self, body: &Body, hash: &str) -> Option<Arc<str>> {
        if hash.len() != 40 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        let hash: Arc<str> = Arc::from(hash);
        let mut hashes = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        hashes.insert(Self::slot(body), Arc::clone(&hash));
        Some(hash)
    }

    /// The table's key for a body: its address (every body is a `static` of this registry).
    fn slot(body: &Body) -> usize {
        std::ptr::from_ref(body).addr()
    }
}

macro_rules! lua {
    (@native) => { None };
    (@native $native:ident) => { Some(Native::$native) };
    // A script that announces releases starts with the command it announces by: classic
    // `PUBLISH`, which every node of a cluster relays to every other node; or, on a Redis
    // Cluster with sharded pub/sub (Redis 7+), `SPUBLISH`, delivered by the node of the
    // channel's slot alone (every channel carries its primitive's {hash tag}, so it lives in
    // the slot of the script's keys).
    ($(#[$doc:meta])* $name:ident, $operation:literal, $step:ident, announces $(native $native:ident)?, $($file:literal),+) => {
        $(#[$doc])*
        pub(crate) static $name: Lua = Lua {
            operation: $operation,
            name: stringify!($name),
            step: Step::$step,
            classic: Body {
                source: concat!("local PUBLISH = 'PUBLISH'\n", $(include_str!($file)),+),
            },
            sharded: Some(Body {
                source: concat!("local PUBLISH = 'SPUBLISH'\n", $(include_str!($file)),+),
            }),
            native: lua!(@native $($native)?),
        };
    };
    ($(#[$doc:meta])* $name:ident, $operation:literal, $step:ident, $(native $native:ident,)? $($file:literal),+) => {
        $(#[$doc])*
        pub(crate) static $name: Lua = Lua {
            operation: $operation,
            name: stringify!($name),
            step: Step::$step,
            classic: Body {
                source: concat!($(include_str!($file)),+),
            },
            sharded: None,
            native: lua!(@native $($native)?),
        };
    };
}

lua!(/// Take a lock and a fencing token (sent as a transaction where the node can).
    ACQUIRE, "acquire", Grant, "fence.lua", "acquire.lua");
lua!(/// Give a held lock straight to a waiter of the same client.
    HAND_OVER, "hand over", Script, "fence.lua", "hand_over.lua");
lua!(/// Compare-and-delete a lock, then publish: `DELIFEQ` where the server has it.
    RELEASE, "release", Release, announces native DelIfEqThenPublish, "release.lua");
lua!(/// Take an unfenced lease: `SET NX PX`, no fence, no `TIME`.
    UNFENCED_ACQUIRE, "acquire", Script, native SetNxPx, "unfenced_acquire.lua");
lua!(/// Void an acquire attempt of unknown outcome.
    ABANDON, "abandon", Abandon, announces, "abandon.lua");
lua!(/// Renew or re-time a lease, in epoch order.
    EXTEND, "extend", Extend, "extend.lua");
lua!(/// Raise a lock's or a semaphore's fence to a Redlock quorum's token.
    FENCE_RAISE, "fence write-back", Script, "fence.lua", "fence_raise.lua");
lua!(/// Break a lock whoever holds it.
    FORCE_RELEASE, "force release", ForceRelease, announces, "force_release.lua");
lua!(/// Take or re-enter a reentrant lock.
    REENTRANT_ACQUIRE, "acquire", Script, "fence.lua", "reentrant_acquire.lua");
lua!(/// Renew one hold of a reentrant lock (never shortens it).
    REENTRANT_EXTEND, "extend", Script, "reentrant_extend.lua");
lua!(/// Give back one hold of a reentrant lock.
    REENTRANT_RELEASE, "release", Script, announces, "reentrant_release.lua");
lua!(/// Void a reentrant acquire attempt of unknown outcome.
    REENTRANT_ABANDON, "abandon", Script, announces, "reentrant_abandon.lua");
lua!(/// Take leased permits of a semaphore.
    SEMAPHORE_ACQUIRE, "acquire", Script, "fence.lua", "semaphore_acquire.lua");
lua!(/// Renew or re-time a semaphore holder's lease.
    SEMAPHORE_EXTEND, "extend", Script, "semaphore_extend.lua");
lua!(/// Give back a holder's permits.
    SEMAPHORE_RELEASE, "release", Script, announces, "semaphore_release.lua");
lua!(/// Void a semaphore acquire attempt of unknown outcome.
    SEMAPHORE_ABANDON, "abandon", Script, announces, "semaphore_abandon.lua");
lua!(/// Take several locks, all or nothing, with one token.
    MULTI_ACQUIRE, "acquire", Script, "fence.lua", "multi_acquire.lua");
lua!(/// Renew every lock of a multi-lock, all or nothing.
    MULTI_EXTEND, "extend", Script, "multi_extend.lua");
lua!(/// Give back every lock of a multi-lock; abandoning, void an attempt of unknown outcome.
    MULTI_RELEASE, "release", Script, announces, "multi_release.lua");
lua!(/// Take a read lease of a read-write lock (writer-preferring).
    RW_READ_ACQUIRE, "acquire", Script, "fence.lua", "rw_read_acquire.lua");
lua!(/// Take the write lease of a read-write lock, or register as a waiting writer.
    RW_WRITE_ACQUIRE, "acquire", Script, "fence.lua", "rw_write_acquire.lua");
lua!(/// Void a read-write lock writer's attempt of unknown outcome, and leave the waiting
    /// writers.
    RW_WRITE_ABANDON, "abandon", Script, announces, "rw_write_leave.lua", "abandon.lua");
lua!(/// Take a fair lock at the head of its FIFO queue, or queue.
    FAIR_ACQUIRE, "acquire", Script, "fence.lua", "fair_queue.lua", "fair_take.lua", "fair_acquire.lua");
lua!(/// Give a fair lock back and wake the head of its queue.
    FAIR_RELEASE, "release", Script, announces, "fair_free.lua", "fair_release.lua");
lua!(/// Give a fair lock straight to the head of its queue, a waiter of the same client; or
    /// release it as usual when the head is anyone else.
    FAIR_HAND_OVER, "hand over", Script, announces, "fence.lua", "fair_queue.lua", "fair_hand_over.lua");
lua!(/// Leave a fair lock's queue; void an attempt of unknown outcome.
    FAIR_ABANDON, "abandon", Script, announces, "fair_free.lua", "fair_abandon.lua");
lua!(/// Campaign in an election: a fair grant that records the leader and tells observers.
    ELECTION_CAMPAIGN, "campaign", Script, announces, "fence.lua", "fair_queue.lua", "fair_take.lua", "election_campaign.lua");
lua!(/// Renew a leader's lease and its record, in epoch order.
    ELECTION_EXTEND, "extend", Script, "election_extend.lua");
lua!(/// Step down as leader (or yield to a chosen candidate), wake the next candidate, tell
    /// observers.
    ELECTION_RESIGN, "resign", Script, announces, "fair_free.lua", "election_resign.lua");
lua!(/// Leave an election's queue; void a campaign of unknown outcome.
    ELECTION_ABANDON, "abandon", Script, announces, "fair_free.lua", "election_abandon.lua");
lua!(/// Change the value a leader advertises.
    ELECTION_PROCLAIM, "proclaim", Script, announces, "election_proclaim.lua");
lua!(/// Arm a countdown latch.
    LATCH_ARM, "latch arm", Script, "latch_arm.lua");
lua!(/// Count a latch down; opening it wakes every waiter.
    LATCH_COUNT_DOWN, "latch count down", Script, announces, "latch_count_down.lua");
lua!(/// Store a computed cache entry unless a newer grant or invalidation came first.
    CACHE_STORE, "cache store", Script, announces, "fence.lua", "cache_store.lua");
lua!(/// Drop a cached entry and raise its fence past every running compute.
    CACHE_INVALIDATE, "cache invalidate", Script, "fence.lua", "cache_invalidate.lua");
lua!(/// Write or read a resource with a current fencing token, fencing off older ones.
    FENCED_ACCESS, "fenced write", Script, "fenced_access.lua");
lua!(/// Compare-and-set a plain key.
    COMPARE_AND_SET, "compare and set", Script, "compare_and_set.lua");
lua!(/// Write a versioned value if its version is current.
    SET_IF_VERSION, "versioned write", Script, "set_if_version.lua");
lua!(/// Keep the maximum or minimum of a key.
    SET_EXTREME, "set max/min", Script, "set_extreme.lua");
lua!(/// Take from a stock if enough is left.
    DECREMENT_IF_AT_LEAST, "decrement if at least", Script, "decrement_if_at_least.lua");

/// One script invocation: which script, its keys and its arguments. Keys, then arguments, are
/// packed into one byte buffer (a redis-rs `Cmd`), not one allocation each: the renewal loop
/// builds one call per held lease per tick, and a lock cycle two.
#[derive(Clone)]
pub(crate) struct ScriptCall {
    pub(crate) lua: &'static Lua,
    /// The keys, then the arguments.
    parts: Cmd,
    /// How many of `parts` are keys.
    keys: usize,
    /// The operation its errors name: the script's, unless the call says otherwise.
    operation: &'static str,
    /// A grant that goes by script where the server runs scripts (invariant 4).
    by_script: bool,
}

impl std::fmt::Debug for Lua {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.operation)
    }
}

impl std::fmt::Debug for ScriptCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptCall")
            .field("lua", &self.lua)
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl ScriptCall {
    pub(crate) fn new(lua: &'static Lua) -> Self {
        // Room for a typical call's keys and arguments up front: growing a command's buffers
        // one argument at a time was an eighth of a lock cycle's client instructions.
        ScriptCall {
            lua,
            parts: Cmd::with_capacity(10, 384),
            keys: 0,
            operation: lua.operation,
            by_script: false,
        }
    }

    /// The step this call runs (invariant 4).
    pub(crate) fn step(&self) -> Step {
        self.lua.step
    }

    /// The operation its errors name.
    pub(crate) fn operation(&self) -> &'static str {
        self.operation
    }

    /// Names its errors after `operation` rather than its script's (a fence started for a
    /// grant is part of the grant).
    pub(crate) fn named_as(mut self, operation: &'static str) -> Self {
        self.operation = operation;
        self
    }

    /// A grant by script where the server runs scripts: a refused grant then leaves the fence
    /// as it is, so it stays the last grant's token (`counted_grants(false)`).
    pub(crate) fn by_script(mut self) -> Self {
        self.by_script = true;
        self
    }

    /// Whether it asked to go by script ([`by_script`](Self::by_script)).
    pub(crate) fn prefers_script(&self) -> bool {
        self.by_script
    }

    /// The first key: on a cluster, where the call runs (every key shares its hash tag).
    pub(crate) fn first_key(&self) -> Option<&[u8]> {
        if self.keys == 0 {
            return None;
        }
        match self.parts.args_iter().next()? {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        }
    }

    /// KEYS[i] (1-based, as the scripts count), as text: for errors naming a key.
    pub(crate) fn key_at(&self, i: usize) -> Option<String> {
        if i == 0 || i > self.keys {
            return None;
        }
        match self.parts.args_iter().nth(i - 1)? {
            redis::Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
            _ => None,
        }
    }

    /// Every key of the call, in order, as text.
    pub(crate) fn keys(&self) -> Vec<String> {
        (1..=self.keys).filter_map(|i| self.key_at(i)).collect()
    }

    /// Adds a key (KEYS[n]).
    ///
    /// Keys come before arguments: every call site names them first, as the scripts' headers
    /// list them (a debug build refuses a key after an argument; the tests run every call).
    pub(crate) fn key(mut self, key: impl ToRedisArgs) -> Self {
        debug_assert_eq!(
            self.parts.args_iter().len(),
            self.keys,
            "a key added after an argument"
        );
        let before = self.parts.args_iter().len();
        self.parts.arg(key);
        self.keys += self.parts.args_iter().len() - before;
        self
    }

    /// Adds an argument (ARGV[n]).
    pub(crate) fn arg(mut self, arg: impl ToRedisArgs) -> Self {
        self.parts.arg(arg);
        self
    }

    /// The `EVALSHA` command of the script whose hash, as its server gave it, is `hash`.
    pub(crate) fn evalsha(&self, hash: &str) -> Cmd {
        let parts = self.parts.args_iter();
        // Sized exactly: the name, the hash, the key count (at most 20 digits), then the parts.
        let bytes = parts.clone().fold(7 + 40 + 20, |n, part| match part {
            redis::Arg::Simple(bytes) => n + bytes.len(),
            _ => n,
        });
        let mut cmd = Cmd::with_capacity(3 + parts.len(), bytes);
        cmd.arg("EVALSHA").arg(hash).arg(self.keys);
        for part in parts {
            if let redis::Arg::Simple(bytes) = part {
                cmd.arg(bytes);
            }
        }
        cmd
    }

    /// The native twin of this call, built from its keys and arguments (invariant 3): its
    /// command, and an announcement to send after it (whose reply is not the call's); `None`
    /// when its script has none or the call's shape does not fit it.
    pub(crate) fn native(&self, sharded: bool) -> Option<(Cmd, Option<Cmd>)> {
        let native = self.lua.native?;
        let mut parts = self.parts.args_iter().filter_map(|a| match a {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        if self.keys != 1 {
            return None;
        }
        let (key, owner) = (parts.next()?, parts.next()?);
        match native {
            Native::SetNxPx => {
                let ttl = parts.next()?;
                let mut cmd = Cmd::with_capacity(6, 64 + key.len() + owner.len());
                cmd.arg("SET")
                    .arg(key)
                    .arg(owner)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl);
                Some((cmd, None))
            }
            Native::DelIfEqThenPublish => {
                let (channel, message) = (parts.next()?, parts.next()?);
                let mut cmd = Cmd::with_capacity(3, 16 + key.len() + owner.len());
                cmd.arg("DELIFEQ").arg(key).arg(owner);
                if message.is_empty() {
                    // As in the script: no announcement.
                    return Some((cmd, None));
                }
                let mut announce = Cmd::with_capacity(3, 16 + channel.len() + message.len());
                announce
                    .arg(if sharded { "SPUBLISH" } else { "PUBLISH" })
                    .arg(channel)
                    .arg(message);
                Some((cmd, Some(announce)))
            }
        }
    }

    /// The plain lock's grant as one transaction, where this is its acquire call (three keys,
    /// three arguments: no Redlock proposal): `MULTI`, `SET lock owner NX PX ttl`,
    /// `XADD fence NOMKSTREAM MAXLEN 0 * f 1`, `PTTL fence`, `PEXPIRE fence retention`,
    /// `PTTL lock`, `TYPE lock`, `EXEC` (`backend/node/grant.rs`).
    pub(crate) fn grant_transaction(&self) -> Option<[Cmd; 8]> {
        if self.lua.step != Step::Grant || self.keys != 3 {
            return None;
        }
        let [lock, fence, _tombstone, owner, ttl, retention] = self.exact_parts()?;
        let mut set = Cmd::with_capacity(6, 48 + lock.len() + owner.len());
        set.arg("SET")
            .arg(lock)
            .arg(owner)
            .arg("NX")
            .arg("PX")
            .arg(ttl);
        // No fence is started here: `*` would start one at the clock's `ms-0`, which a grant
        // earlier in that ms may have passed; a granted lease starts it past (`grant.rs`,
        // invariant 2).
        let mut add = Cmd::with_capacity(8, 48 + fence.len());
        add.arg("XADD")
            .arg(fence)
            .arg("NOMKSTREAM")
            .arg("MAXLEN")
            .arg("0")
            .arg("*")
            .arg("f")
            .arg("1");
        // The fence's life before the retention is applied: a key of another type there gets
        // its own back (`grant.rs`, invariant 3).
        let mut life = Cmd::with_capacity(2, 8 + fence.len());
        life.arg("PTTL").arg(fence);
        let mut expiry = Cmd::with_capacity(3, 16 + fence.len() + retention.len());
        expiry.arg("PEXPIRE").arg(fence).arg(retention);
        let mut pttl = Cmd::with_capacity(2, 8 + lock.len());
        pttl.arg("PTTL").arg(lock);
        let mut kind = Cmd::with_capacity(2, 8 + lock.len());
        kind.arg("TYPE").arg(lock);
        Some([
            redis::cmd("MULTI"),
            set,
            add,
            life,
            expiry,
            pttl,
            kind,
            redis::cmd("EXEC"),
        ])
    }

    /// The keys, then the arguments, as bytes: exactly `N` of them, or `None`.
    pub(crate) fn exact_parts<const N: usize>(&self) -> Option<[&[u8]; N]> {
        let mut parts = self.parts.args_iter().map(|a| match a {
            redis::Arg::Simple(bytes) => Some(bytes),
            _ => None,
        });
        let mut out = [&[][..]; N];
        for slot in &mut out {
            *slot = parts.next()??;
        }
        parts.next().is_none().then_some(out)
    }

    /// How many keys the call touches.
    pub(crate) fn key_count(&self) -> usize {
        self.keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_script_names_its_primitive() {
        for (lua, words) in [
            (&ACQUIRE, "a lock"),
            (&HAND_OVER, "a lock"),
            (&UNFENCED_ACQUIRE, "an unfenced lock"),
            (&SEMAPHORE_ACQUIRE, "a semaphore"),
            (&RW_READ_ACQUIRE, "a read-write lock"),
            (&ELECTION_CAMPAIGN, "an election"),
            (&LATCH_ARM, "a latch"),
            (&CACHE_STORE, "a cache"),
            (&FENCED_ACCESS, "a fenced resource"),
            (&SET_EXTREME, "set_max or set_min"),
        ] {
            assert_eq!(lua.primitive(), words, "{}", lua.name);
        }
    }

    #[test]
    fn shared_lua_is_prepended_and_user_data_stays_out_of_bodies() {
        assert!(ACQUIRE.classic.source.contains("local function next_token"));
        assert!(
            FENCED_ACCESS
                .classic
                .source
                .starts_with("-- A resource's check")
        );
        let call = ScriptCall::new(&ACQUIRE)
            .key("k{x}")
            .arg("v'); evil")
            .arg(5u64);
        let hash = "0123456789abcdef0123456789abcdef01234567";
        let packed = call.evalsha(hash).get_packed_command();
        let text = String::from_utf8_lossy(&packed);
        assert!(text.contains(hash));
        assert_eq!(call.key_count(), 1);
        assert!(text.contains("v'); evil"), "arguments travel as data");
    }

    #[test]
    fn keys_and_arguments_travel_in_their_order_with_the_key_count() {
        let call = ScriptCall::new(&RELEASE)
            .key("a{x}")
            .key("b{x}")
            .arg("one")
            .arg(2u64);
        assert_eq!(call.key_count(), 2);
        assert_eq!(call.first_key(), Some(&b"a{x}"[..]));
        let hash = "0123456789abcdef0123456789abcdef01234567";
        let packed = call.evalsha(hash).get_packed_command();
        let text = String::from_utf8_lossy(&packed);
        let expected = format!(
            "*7\r\n$7\r\nEVALSHA\r\n$40\r\n{hash}\r\n$1\r\n2\r\n$4\r\na{{x}}\r\n$4\r\nb{{x}}\r\n$3\r\none\r\n$1\r\n2\r\n"
        );
        assert_eq!(text, expected);
        assert_eq!(ScriptCall::new(&RELEASE).arg("no keys").first_key(), None);
        assert_eq!(call.key_at(2).as_deref(), Some("b{x}"));
        assert_eq!(call.key_at(0), None);
        assert_eq!(call.key_at(3), None, "an argument is not a key");
        assert_eq!(call.keys(), ["a{x}", "b{x}"]);
    }

    #[test]
    fn a_hash_is_remembered_per_script_and_a_reply_that_is_no_hash_is_refused() {
        let hashes = Hashes::default();
        assert_eq!(hashes.get(RELEASE.body(false)), None);
        let hash = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(
            hashes.learn(RELEASE.body(false), hash).as_deref(),
            Some(hash)
        );
        assert_eq!(hashes.get(RELEASE.body(false)).as_deref(), Some(hash));
        assert_eq!(
            hashes.get(RELEASE.body(true)),
            None,
            "the sharded text is another script"
        );
        assert_eq!(hashes.get(ACQUIRE.body(false)), None);
        for bad in [
            "",
            "OK",
            "0123456789abcdef",
            &format!("{hash}0"),
            &hash.replace('0', "g"),
        ] {
            assert_eq!(hashes.learn(ACQUIRE.body(false), bad), None, "{bad:?}");
        }
        assert_eq!(hashes.get(ACQUIRE.body(false)), None);
    }

    #[test]
    fn each_script_is_registered_once_and_a_call_carries_what_it_asks_beyond_it() {
        // A grant's fence start is the write-back's script, its errors named after the grant.
        let start = ScriptCall::new(&FENCE_RAISE).named_as("acquire");
        assert_eq!(start.operation(), "acquire");
        assert_eq!(
            ScriptCall::new(&FENCE_RAISE).operation(),
            "fence write-back"
        );
        let by_script = ScriptCall::new(&ACQUIRE).by_script();
        assert!(by_script.prefers_script() && !ScriptCall::new(&ACQUIRE).prefers_script());
        assert_eq!(by_script.step(), Step::Grant);
        assert_eq!(ScriptCall::new(&HAND_OVER).step(), Step::Script);
        // No two statics of the registry send one text under one flag of their own.
        let all = [
            &ACQUIRE,
            &HAND_OVER,
            &RELEASE,
            &UNFENCED_ACQUIRE,
            &ABANDON,
            &EXTEND,
            &FENCE_RAISE,
            &FORCE_RELEASE,
        ];
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(
                    a.classic.source, b.classic.source,
                    "{} and {}",
                    a.name, b.name
                );
            }
        }
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "a key added after an argument")]
    fn a_key_after_an_argument_is_refused_in_debug_builds() {
        let _ = ScriptCall::new(&RELEASE).arg("first").key("k{x}");
    }

    #[test]
    fn scripts_that_announce_have_a_sharded_twin_and_the_others_do_not() {
        // Every script whose text publishes declares it, so a cluster with sharded pub/sub
        // never runs a classic PUBLISH it would relay to every node.
        for lua in [
            &RELEASE,
            &ABANDON,
            &FORCE_RELEASE,
            &REENTRANT_RELEASE,
            &REENTRANT_ABANDON,
            &SEMAPHORE_RELEASE,
            &SEMAPHORE_ABANDON,
            &MULTI_RELEASE,
            &FAIR_RELEASE,
            &FAIR_ABANDON,
            &RW_WRITE_ABANDON,
            &FAIR_HAND_OVER,
            &ELECTION_CAMPAIGN,
            &ELECTION_RESIGN,
            &ELECTION_ABANDON,
            &ELECTION_PROCLAIM,
            &LATCH_COUNT_DOWN,
            &CACHE_STORE,
        ] {
            let (classic, sharded) = (lua.body(false), lua.body(true));
            assert!(classic.source().starts_with("local PUBLISH = 'PUBLISH'\n"));
            assert!(sharded.source().starts_with("local PUBLISH = 'SPUBLISH'\n"));
            assert_ne!(classic.source(), sharded.source());
        }
        for lua in [
            &ACQUIRE,
            &EXTEND,
            &HAND_OVER,
            &FENCED_ACCESS,
            &CACHE_INVALIDATE,
        ] {
            assert!(!lua.body(false).source().contains("PUBLISH"));
            assert!(std::ptr::eq(lua.body(true), lua.body(false)));
        }
    }
}

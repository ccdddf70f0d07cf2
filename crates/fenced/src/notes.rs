//! [`ServerNote`]: what connecting learned about a server's configuration that weakens what a
//! lock promises, read with [`Client::server_notes`](crate::Client::server_notes).
//!
//! Invariants:
//! 1. Reading the configuration never fails a connect. `CONFIG` may be refused (an ACL, a
//!    managed service that renames it, a proxy): then nothing is said, at debug level only.
//! 2. One `CONFIG GET maxmemory*` per server, bounded by the client's timeout like every call,
//!    and sent only to a server that has just answered: a server that refuses it answers at
//!    once, and a Redlock master that is down is not asked. One glob, because Redis 6.2 takes
//!    one parameter per `CONFIG GET`.

use std::fmt;

use redis::Value;

use crate::backend::Node;

/// What a [`ServerNote`] is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum NoteKind {
    /// The server may evict a held lock's key to make room: a `maxmemory` with a
    /// `maxmemory-policy` that evicts any key (`allkeys-*`), or keys that have an expiry
    /// (`volatile-*`), which every lock key has.
    Eviction,
}

/// Something in a server's configuration that weakens what a lock promises, found when the
/// client connected ([`Client::server_notes`](crate::Client::server_notes)), with what to
/// change.
///
/// A server that may evict keys can drop a held lock before its lease ends: another client
/// is then granted the name while the holder still works, until the holder's next renewal
/// finds the key gone and its lost signal fires. Fencing tokens still increase (an evicted
/// fence starts again from the server's clock), so a resource that checks them still refuses
/// the older holder.
///
/// # Examples
///
/// ```
/// let note = fenced::ServerNote::eviction("10.0.0.5:6379", Some(100 << 20), "allkeys-lru")
///     .expect("allkeys-lru with a memory limit evicts any key");
/// assert_eq!(note.kind, fenced::NoteKind::Eviction);
/// assert!(note.message.contains("allkeys-lru"));
/// assert!(note.fix.starts_with("CONFIG SET maxmemory-policy noeviction"));
/// println!("{note}"); // 10.0.0.5:6379: maxmemory-policy allkeys-lru … (fix: CONFIG SET …)
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServerNote {
    /// What it is about.
    pub kind: NoteKind,
    /// The server it is about: its address as the client reached it, with its role where
    /// it has one (`10.0.0.5:6379 (master of mymaster)`).
    pub node: String,
    /// What the setting may do to a held lock, in a sentence.
    pub message: String,
    /// What to change on the server.
    pub fix: String,
}

impl ServerNote {
    /// The note for the server `node` whose memory settings are these, if they may evict a
    /// lock's keys: a `maxmemory` above 0 (`None` when it could not be read, taken as
    /// bounded) with a `maxmemory-policy` of `allkeys-*` (any key) or `volatile-*` (keys with
    /// an expiry, which every lock key has). `None` for `noeviction`, and for any policy
    /// without a memory limit (nothing is evicted then). `fenced doctor` judges by it too.
    pub fn eviction(
        node: impl Into<String>,
        maxmemory: Option<u64>,
        policy: &str,
    ) -> Option<ServerNote> {
        if !evicting_policy(policy) || maxmemory == Some(0) {
            return None;
        }
        let limit = maxmemory.map_or_else(
            || "a maxmemory that could not be read".to_owned(),
            |n| format!("maxmemory {}", bytes(n)),
        );
        let which = if policy.starts_with("volatile-") {
            "keys that have an expiry, and every lock key has one"
        } else {
            "any key"
        };
        Some(ServerNote {
            kind: NoteKind::Eviction,
            node: node.into(),
            message: format!(
                "maxmemory-policy {policy} with {limit}: at the memory limit the server evicts {which}, so a held lock can vanish before its lease ends and be granted to another client while its holder still works (fencing tokens still increase)"
            ),
            fix: "CONFIG SET maxmemory-policy noeviction (and the same in the server's configuration file), or keep the locks on a server that never evicts".to_owned(),
        })
    }
}

impl fmt::Display for ServerNote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (fix: {})", self.node, self.message, self.fix)
    }
}

/// Whether `policy` evicts keys at all once memory is bounded: `allkeys-*` any key,
/// `volatile-*` keys with an expiry (`noeviction` refuses writes instead).
fn evicting_policy(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

/// A size as the server's configuration writes it, where it is a whole number of a unit
/// (`10mb`, the server's `mb` being 1024 × 1024 bytes), else in bytes.
fn bytes(n: u64) -> String {
    const UNITS: [(u64, &str); 3] = [(1 << 30, "gb"), (1 << 20, "mb"), (1 << 10, "kb")];
    UNITS
        .iter()
        .find(|(size, _)| n > 0 && n.is_multiple_of(*size))
        .map_or_else(
            || format!("{n} bytes"),
            |(size, unit)| format!("{}{unit}", n / size),
        )
}

/// `CONFIG GET maxmemory*`: the memory limit and the eviction policy in one call (invariant 2).
fn memory_settings() -> redis::Cmd {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg("maxmemory*");
    cmd
}

/// The (name, value) pairs of a `CONFIG GET` reply: a flat array under RESP2, a map under
/// RESP3. Anything else (a refusal inside a cluster's reply) has none.
fn config_pairs(reply: Value) -> Vec<(String, String)> {
    fn text(v: &Value) -> Option<String> {
        match v {
            Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
            Value::SimpleString(s) => Some(s.clone()),
            Value::VerbatimString { text, .. } => Some(text.clone()),
            _ => None,
        }
    }
    match reply {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [name, value] => Some((text(name)?, text(value)?)),
                _ => None,
            })
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(name, value)| Some((text(name)?, text(value)?)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The note for the server `node` whose `CONFIG GET maxmemory*` answered `reply`, if any.
fn judge(node: &str, reply: Value) -> Option<ServerNote> {
    let settings = config_pairs(reply);
    let setting = |name: &str| {
        settings
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    let policy = setting("maxmemory-policy")?;
    let maxmemory = setting("maxmemory").and_then(|v| v.trim().parse::<u64>().ok());
    ServerNote::eviction(node, maxmemory, policy)
}

/// The eviction note of the server behind `node` (one server, or Sentinel's master), labelled
/// `label`; `None` when it never evicts lock keys or will not say (invariant 1).
pub(crate) async fn eviction(node: &Node, label: &str) -> Option<ServerNote> {
    match node
        .query::<Value>("server notes", &memory_settings())
        .await
    {
        Ok(reply) => judge(label, reply),
        Err(e) => {
            tracing::debug!(node = %label, error = %e, "fenced: the server's memory settings cannot be read (CONFIG refused?); nothing said about eviction");
            None
        }
    }
}

/// The eviction notes of every master of a Redis Cluster, each labelled with its address
/// (invariant 1: a master that refuses says nothing).
#[cfg(feature = "cluster")]
pub(crate) async fn eviction_on_every_master(node: &Node) -> Vec<ServerNote> {
    match node
        .on_every_master("server notes", &memory_settings())
        .await
    {
        Ok(replies) => replies
            .into_iter()
            .filter_map(|(addr, reply)| judge(&addr, reply))
            .collect(),
        Err(e) => {
            tracing::debug!(error = %e, "fenced: the cluster's memory settings cannot be read (CONFIG refused?); nothing said about eviction");
            Vec::new()
        }
    }
}

/// The one warning of a connect that found notes (`Client::connect`), naming every node.
pub(crate) fn warn(notes: &[ServerNote]) {
    if notes.is_empty() {
        return;
    }
    let said: Vec<String> = notes.iter().map(ToString::to_string).collect();
    tracing::warn!(notes = notes.len(), "fenced: {}", said.join("; "));
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::{NoteKind, ServerNote, bytes, judge};

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn only_a_bounded_server_whose_policy_evicts_lock_keys_gets_a_note() {
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-ttl",
        ] {
            let note = ServerNote::eviction("n:1", Some(10 << 20), policy);
            assert!(
                note.as_ref().is_some_and(|n| n.kind == NoteKind::Eviction
                    && n.message.contains(policy)
                    && n.message.contains("maxmemory 10mb")
                    && n.fix.starts_with("CONFIG SET maxmemory-policy noeviction")),
                "{policy}: {note:?}"
            );
            // No memory limit: nothing is evicted. An unreadable one is taken as a limit.
            assert_eq!(ServerNote::eviction("n:1", Some(0), policy), None);
            assert!(ServerNote::eviction("n:1", None, policy).is_some());
        }
        assert_eq!(
            ServerNote::eviction("n:1", Some(10 << 20), "noeviction"),
            None
        );
        assert_eq!(ServerNote::eviction("n:1", None, "noeviction"), None);
    }

    #[test]
    fn the_memory_settings_are_read_from_either_protocol() {
        let resp2 = Value::Array(vec![
            bulk("maxmemory"),
            bulk("1048576"),
            bulk("maxmemory-policy"),
            bulk("volatile-lru"),
            bulk("maxmemory-samples"),
            bulk("5"),
        ]);
        let note = judge("n:1", resp2);
        assert!(note.is_some_and(|n| n.node == "n:1" && n.message.contains("maxmemory 1mb")));
        let resp3 = Value::Map(vec![
            (bulk("maxmemory-policy"), bulk("allkeys-lru")),
            (bulk("maxmemory"), bulk("0")),
        ]);
        assert_eq!(judge("n:1", resp3), None);
        assert_eq!(judge("n:1", Value::Nil), None);
    }

    #[test]
    fn sizes_read_as_the_configuration_writes_them() {
        assert_eq!(bytes(10 << 20), "10mb");
        assert_eq!(bytes(3 << 30), "3gb");
        assert_eq!(bytes(2048), "2kb");
        assert_eq!(bytes(1000), "1000 bytes");
    }
}

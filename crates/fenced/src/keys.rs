//! Names, their limits, and the Redis keys a primitive uses.
//!
//! Every key of one lock carries the hash tag `{name}`, so on Redis Cluster all of them live in
//! one slot and one script can touch them atomically:
//!
//! | key | type | what it holds |
//! |---|---|---|
//! | `<ns>{<name>}` | string | the owner token of the current holder, with `PX` = the lease |
//! | `<ns>{<name>}:fence` | stream | the fence: its last ID (`ms-seq`, entries trimmed as they are added) is the last fencing token handed out, or a refused grant's by transaction; kept for the fence retention after the last grant |
//! | `<ns>{<name>}:released` | pub/sub channel | one message per release, payload = `<client id> <wake>` (the releasing client's id, so it can skip its own echo, and whom to wake: `1`, `N` or `all`; see `docs/protocol.md`) |
//! | `<ns>{<name>}:void:<owner>` | string | tombstone of an abandoned acquire attempt, until the attempt can no longer arrive |
//! | `<ns>{<name>}:epoch:<owner>` | string | the newest expiry epoch applied to that owner's lease, after an `extend`; expires with the lease |
//! | `<ns>{<name>}:taken:<owner>` | string | the nonce of the take-over from a ticket that applied that owner's newest epoch; expires with the lease |
//! | `<ns>{<name>}:holds` | hash | a reentrant lock's holds: `token`, and `h:<id>` per hold |
//! | `<ns>{<name>}:permits` | zset | a semaphore's holders, scored by the end of their lease (server ms) |
//! | `<ns>{<name>}:permits:n` | hash | permits held, per holder |
//! | `<ns>{<name>}:permits:fence` | stream | a semaphore's fence, as `:fence` is a lock's |
//! | `<ns>{<name>}:permits:void:<owner>`, `:permits:epoch:<owner>` | string | a semaphore holder's tombstone and expiry epoch, as for a lock |
//! | `<ns>{<name>}:readers:void:<owner>`, `:readers:epoch:<owner>` | string | a reader's tombstone and expiry epoch, as for a lock |
//! | `<ns>{<name>}:void:<owner>:<hold>` | string | a re-entrant hold's tombstone |
//! | `<ns>{<name>}:permits:released` | pub/sub channel | one message per semaphore release |
//! | `<ns>{<name>}:readers` | zset | a read-write lock's readers, scored by the end of their lease (server ms) |
//! | `<ns>{<name>}:readers:n` | hash | a read-write lock's holds per reader |
//! | `<ns>{<name>}:writers` | zset | a read-write lock's waiting writers, scored by the end of their registration |
//! | `<ns>{<name>}:queue` | list | a fair lock's waiters, oldest first |
//! | `<ns>{<name>}:queue:ends` | hash | a fair lock's waiter -> end of its registration (server ms) |
//! | `<ns>{<name>}:fair:<waiter>` | pub/sub channel | wakes one fair waiter when it reaches the head |
//! | `<ns>{<name>}:latch` | string | a latch's count left, with `PX` = its lifetime |
//! | `<ns>{<name>}:latch:opened` | pub/sub channel | one message when the latch opens |
//! | `<ns>{<name>}:cached` | hash | a [`Cache`](crate::Cache) entry (its name is `<cache>:<key>`): `v` value, `d` compute µs, `s` stale grace ms; `PX` = ttl + grace |
//! | `<ns>res:{<name>}` | hash | a [`FencedResource`](crate::FencedResource)'s fields |
//! | `<ns>res:{<name>}:fence` | string | the highest fencing token that resource has accepted |

use crate::error::{Error, Result};

/// The longest lock or resource name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 1024;

/// The longest namespace prefix accepted, in bytes.
pub const MAX_NAMESPACE_LEN: usize = 256;

/// Checks a lock or resource name before anything is sent to Redis.
pub(crate) fn validate_name(kind: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(format!("{kind} name is empty")));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(format!(
            "{kind} name is {} bytes long; the limit is {MAX_NAME_LEN}",
            name.len()
        )));
    }
    if name.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "{kind} name {name:?} contains '{{' or '}}'; fenced wraps names in a {{hash tag}} so that all keys of one lock share a Redis Cluster slot, and braces inside the name would break it"
        )));
    }
    Ok(())
}

/// Checks a namespace prefix given to the client builder.
pub(crate) fn validate_namespace(ns: &str) -> Result<()> {
    if ns.len() > MAX_NAMESPACE_LEN {
        return Err(Error::invalid(format!(
            "namespace is {} bytes long; the limit is {MAX_NAMESPACE_LEN}",
            ns.len()
        )));
    }
    if ns.contains(['{', '}']) {
        return Err(Error::invalid(format!(
            "namespace {ns:?} contains '{{' or '}}', which would move the hash tag of every key"
        )));
    }
    Ok(())
}

/// The keys and channel of one lock.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys {
    pub(crate) lock: String,
    pub(crate) fence: String,
    pub(crate) channel: String,
    /// The holds of a reentrant lock (hash), next to its lock key.
    pub(crate) holds: String,
}

impl LockKeys {
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        let lock = format!("{namespace}{{{name}}}");
        LockKeys {
            fence: format!("{lock}:fence"),
            holds: format!("{lock}:holds"),
            channel: format!("{lock}:released"),
            lock,
        }
    }
}

impl LockKeys {
    /// The queue of a [`FairLock`](crate::FairLock) of the same name.
    pub(crate) fn fair_queue(&self) -> String {
        format!("{}:queue", self.lock)
    }

    /// The tombstone that voids an abandoned acquire attempt.
    pub(crate) fn tombstone(&self, owner: &crate::token::OwnerToken) -> String {
        // Built on every acquire attempt: one allocation of the right size, no formatting.
        let owner = owner.as_str();
        let mut key = String::with_capacity(self.lock.len() + ":void:".len() + owner.len());
        key.push_str(&self.lock);
        key.push_str(":void:");
        key.push_str(owner);
        key
    }

    /// The newest expiry epoch applied to this owner's lease (exists only after an `extend`).
    pub(crate) fn epoch(&self, owner: &crate::token::OwnerToken) -> String {
        format!("{}:epoch:{}", self.lock, owner.as_str())
    }

    /// The nonce of the take-over that applied this owner's newest epoch (`extend.lua`).
    pub(crate) fn taken(&self, owner: &crate::token::OwnerToken) -> String {
        format!("{}:taken:{}", self.lock, owner.as_str())
    }
}

/// The type `fenced` keeps at `key`, read from its layout (the table above) by what follows
/// the `{name}` tag; `None` for a key of no known shape. For naming a key of another type.
pub(crate) fn expected_type(key: &str) -> Option<&'static str> {
    // Names never contain braces: the last one closes the tag.
    let (head, suffix) = key.rsplit_once('}')?;
    let (prefix, _) = head.rsplit_once('{')?;
    Some(match suffix {
        "" if prefix.ends_with("res:") => "hash",
        // A resource's fence: the highest token it accepted, a decimal.
        ":fence" if prefix.ends_with("res:") => "string",
        // `:transitions`: an election's count of leader changes.
        "" | ":latch" | ":transitions" => "string",
        ":fence" | ":permits:fence" => "stream",
        ":holds" | ":permits:n" | ":readers:n" | ":queue:ends" | ":queue:values" | ":cached" => {
            "hash"
        }
        ":permits" | ":readers" | ":writers" => "zset",
        ":queue" => "list",
        s if s.contains(":void:") || s.contains(":epoch:") => "string",
        _ => return None,
    })
}

/// The keys of one fenced resource.
#[derive(Clone, Debug)]
pub(crate) struct ResourceKeys {
    pub(crate) data: String,
    pub(crate) fence: String,
}

impl ResourceKeys {
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        let data = format!("{namespace}res:{{{name}}}");
        ResourceKeys {
            fence: format!("{data}:fence"),
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_type_kept_at_each_key_is_read_from_its_layout() {
        for (key, kind) in [
            ("fenced:{a}", Some("string")),
            ("fenced:{a}:fence", Some("stream")),
            ("fenced:{a}:void:0123", Some("string")),
            ("fenced:{a}:permits", Some("zset")),
            ("fenced:{a}:permits:n", Some("hash")),
            ("fenced:{a}:readers", Some("zset")),
            ("fenced:{a}:queue", Some("list")),
            ("fenced:{a}:queue:ends", Some("hash")),
            ("fenced:election:{a}:queue:values", Some("hash")),
            ("fenced:election:{a}:transitions", Some("string")),
            ("fenced:{a}:holds", Some("hash")),
            ("fenced:res:{a}", Some("hash")),
            ("fenced:res:{a}:fence", Some("string")),
            ("fenced:{a}:unknown", None),
            ("plain", None),
        ] {
            assert_eq!(expected_type(key), kind, "{key}");
        }
    }

    #[test]
    fn keys_share_the_name_as_hash_tag() {
        let k = LockKeys::new("fenced:", "product:10100101:shopping");
        assert_eq!(k.lock, "fenced:{product:10100101:shopping}");
        assert_eq!(k.fence, "fenced:{product:10100101:shopping}:fence");
        assert_eq!(k.channel, "fenced:{product:10100101:shopping}:released");
        let r = ResourceKeys::new("app:", "stock");
        assert_eq!(r.data, "app:res:{stock}");
        assert_eq!(r.fence, "app:res:{stock}:fence");
    }

    #[test]
    fn bad_names_are_rejected_with_a_reason() {
        for (name, needle) in [("", "empty"), ("a}b", "hash tag"), ("{x", "hash tag")] {
            match validate_name("lock", name) {
                Err(Error::InvalidArgument(msg)) => assert!(msg.contains(needle), "{msg}"),
                other => panic!("{name:?} gave {other:?}"),
            }
        }
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(matches!(
            validate_name("lock", &long),
            Err(Error::InvalidArgument(_))
        ));
        assert!(validate_name("lock", &"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(validate_name("lock", "naïve name with spaces\nand newline").is_ok());
        assert!(validate_namespace("a{").is_err());
        assert!(validate_namespace("").is_ok());
    }

    /// The hash tag Redis Cluster computes a key's slot from: the text between the first `{`
    /// and the first `}` after it, if not empty; otherwise the whole key.
    fn cluster_hash_tag(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    proptest::proptest! {
        #[test]
        fn every_key_of_a_lock_hashes_on_its_name(
            name in "[^{}]{1,64}",
            ns in "[a-z:]{0,12}",
        ) {
            let keys = LockKeys::new(&ns, &name);
            let owner = crate::token::OwnerToken::generate().expect("OS random source");
            for key in [keys.lock.clone(), keys.fence.clone(), keys.channel.clone(), keys.tombstone(&owner), keys.epoch(&owner), keys.holds.clone()] {
                proptest::prop_assert_eq!(cluster_hash_tag(&key), name.as_str());
            }
            let res = ResourceKeys::new(&ns, &name);
            proptest::prop_assert_eq!(cluster_hash_tag(&res.data), name.as_str());
            proptest::prop_assert_eq!(cluster_hash_tag(&res.fence), name.as_str());
        }

        #[test]
        fn names_are_accepted_exactly_when_they_fit_the_rules(name in ".{0,40}") {
            let fits = !name.is_empty() && name.len() <= MAX_NAME_LEN && !name.contains(['{', '}']);
            proptest::prop_assert_eq!(validate_name("lock", &name).is_ok(), fits);
        }
    }
}

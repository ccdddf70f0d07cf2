//! The leased permits under [`Semaphore`](crate::Semaphore): a sorted set of holders scored by
//! the end of their lease (Redis server time), and a hash of how many permits each holds.

use std::sync::Arc;

use crate::kind::Wake;
use crate::kind::{LeaseKind, OnRedlock, Primitive};
use crate::scripts::{
    FENCE_RAISE, SEMAPHORE_ABANDON, SEMAPHORE_ACQUIRE, SEMAPHORE_EXTEND, SEMAPHORE_RELEASE,
    ScriptCall,
};
use crate::token::{FencingToken, OwnerToken};

/// The keys and channel of one semaphore; all share the hash tag `{name}`.
#[derive(Clone, Debug)]
pub(crate) struct SemaphoreKeys {
    /// zset: owner -> end of its lease (server ms).
    pub(crate) holders: String,
    /// hash: owner -> permits held.
    pub(crate) counts: String,
    /// stream: the fence of the permits' tokens (`fence.lua`; its own: a lock of the same name
    /// keeps its own fence).
    pub(crate) fence: String,
    /// pub/sub: one message per release, saying how many permits came back.
    pub(crate) channel: String,
}

impl SemaphoreKeys {
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        let base = format!("{namespace}{{{name}}}");
        let holders = format!("{base}:permits");
        SemaphoreKeys {
            counts: format!("{holders}:n"),
            fence: format!("{holders}:fence"),
            channel: format!("{holders}:released"),
            holders,
        }
    }

    fn per_owner(&self, what: &str, owner: &OwnerToken) -> String {
        format!("{}:{what}:{}", self.holders, owner.as_str())
    }
}

/// One holder's permits.
pub(crate) struct Permits {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<SemaphoreKeys>,
    /// Permits this lease holds.
    pub(crate) permits: u32,
    /// Permits in all, as the acquiring handle sees it.
    pub(crate) limit: u32,
    pub(crate) fence_retention_ms: u64,
}

impl LeaseKind for Permits {
    fn redlock(&self) -> Option<&dyn OnRedlock> {
        Some(self)
    }

    fn primitive(&self) -> Primitive {
        Primitive::Semaphore
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn channels(&self) -> &[String] {
        std::slice::from_ref(&self.keys.channel)
    }

    fn wakes(&self) -> Wake {
        Wake::N(self.permits)
    }

    fn holds(&self, key: &str) -> u32 {
        if self.keys.holders == key {
            self.permits
        } else {
            0
        }
    }

    fn acquire(&self, owner: &OwnerToken, ttl_ms: u64) -> ScriptCall {
        ScriptCall::new(&SEMAPHORE_ACQUIRE)
            .key(&self.keys.holders)
            .key(&self.keys.counts)
            .key(&self.keys.fence)
            .key(self.keys.per_owner("void", owner))
            .arg(owner.as_str())
            .arg(self.permits)
            .arg(self.limit)
            .arg(ttl_ms)
            .arg(self.fence_retention_ms)
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall {
        ScriptCall::new(&SEMAPHORE_EXTEND)
            .key(&self.keys.holders)
            .key(&self.keys.counts)
            .key(self.keys.per_owner("epoch", owner))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(epoch)
    }

    fn release(&self, owner: &OwnerToken, message: &str) -> ScriptCall {
        ScriptCall::new(&SEMAPHORE_RELEASE)
            .key(&self.keys.holders)
            .key(&self.keys.counts)
            .arg(owner.as_str())
            .arg(&self.keys.channel)
            .arg(message)
    }

    fn abandon(&self, owner: &OwnerToken, message: &str, patience_ms: u64) -> ScriptCall {
        ScriptCall::new(&SEMAPHORE_ABANDON)
            .key(&self.keys.holders)
            .key(&self.keys.counts)
            .key(self.keys.per_owner("void", owner))
            .arg(owner.as_str())
            .arg(&self.keys.channel)
            .arg(message)
            .arg(patience_ms.max(1))
    }
}

impl OnRedlock for Permits {
    /// More than `nodes · N / (N + 1)` masters for N permits, and at least a majority. Each
    /// master admits holders of at most N permits; with a smaller quorum, holders of more than
    /// N permits in all could each be admitted by enough masters (3 masters, N = 2: three
    /// holders on two masters each). With N ≥ 2 on 3 masters that is all of them.
    fn quorum(&self, nodes: usize) -> usize {
        let limit = self.limit as usize;
        let safe = nodes.saturating_mul(limit) / limit.saturating_add(1) + 1;
        safe.max(nodes / 2 + 1).min(nodes)
    }

    fn propose_token(&self, acquire: &ScriptCall, token: u64) -> Option<ScriptCall> {
        // The acquire script's optional last argument.
        Some(acquire.clone().arg(token))
    }

    fn raise_fence(&self, owner: &OwnerToken, token: FencingToken) -> Option<ScriptCall> {
        Some(
            ScriptCall::new(&FENCE_RAISE)
                .key(&self.keys.holders)
                .key(&self.keys.fence)
                .arg(owner.as_str())
                .arg(token.get())
                .arg(self.fence_retention_ms)
                .arg("permits"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_semaphore_key_hashes_on_its_name() {
        let k = SemaphoreKeys::new("fenced:", "pool");
        for key in [&k.holders, &k.counts, &k.fence, &k.channel] {
            assert!(key.starts_with("fenced:{pool}"), "{key}");
        }
    }

    #[test]
    fn a_redlock_quorum_for_n_permits_leaves_no_room_for_a_holder_too_many() {
        let permits = |limit| Permits {
            name: "pool".into(),
            keys: Arc::new(SemaphoreKeys::new("fenced:", "pool")),
            permits: 1,
            limit,
            fence_retention_ms: 1,
        };
        // (masters, permits) -> masters each holder needs
        for (nodes, limit, quorum) in [
            (3, 1, 2),
            (3, 2, 3),
            (5, 1, 3),
            (5, 2, 4),
            (5, 4, 5),
            (7, 3, 6),
        ] {
            let q = permits(limit).quorum(nodes);
            assert_eq!(q, quorum, "{nodes} masters, {limit} permits");
            // limit + 1 holders, each on q masters, would need more than limit slots somewhere.
            assert!((limit as usize + 1) * q > limit as usize * nodes);
        }
    }
}

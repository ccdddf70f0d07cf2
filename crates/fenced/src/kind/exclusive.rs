//! The exclusive lease under [`Lock`](crate::Lock): a plain string key holding the owner
//! token, `SET NX PX`, the layout redis-py, redsync and node-redlock use too.

use std::sync::Arc;

use crate::keys::LockKeys;
use crate::kind::Wake;
use crate::kind::{HandOverTo, HandedOver, LeaseKind, OnRedlock, Primitive, Ticketed};
use crate::scripts::{ABANDON, ACQUIRE, EXTEND, FENCE_RAISE, HAND_OVER, RELEASE, ScriptCall};
use crate::token::{FencingToken, OwnerToken};

/// One exclusive lease on a name.
pub(crate) struct Exclusive {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    /// How long the fencing counter outlives its last grant, in ms.
    pub(crate) fence_retention_ms: u64,
    /// Whether a grant may count on the fence by transaction, where refused attempts also
    /// count (`backend/node/grant.rs`); false where the fence must stay the last grant's
    /// token (a cache entry's lock, whose store compares its token with the fence).
    pub(crate) counted: bool,
}

impl LeaseKind for Exclusive {
    fn redlock(&self) -> Option<&dyn OnRedlock> {
        Some(self)
    }

    fn ticketed(&self) -> Option<&dyn Ticketed> {
        Some(self)
    }

    fn handed_over(&self) -> Option<&dyn HandedOver> {
        Some(self)
    }

    fn primitive(&self) -> Primitive {
        Primitive::Lock
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn channels(&self) -> &[String] {
        std::slice::from_ref(&self.keys.channel)
    }

    fn wakes(&self) -> Wake {
        Wake::One
    }

    fn holds(&self, key: &str) -> u32 {
        u32::from(self.keys.lock == key)
    }

    fn acquire(&self, owner: &OwnerToken, ttl_ms: u64) -> ScriptCall {
        let call = ScriptCall::new(&ACQUIRE)
            .key(&self.keys.lock)
            .key(&self.keys.fence)
            .key(self.keys.tombstone(owner))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(self.fence_retention_ms);
        if self.counted { call } else { call.by_script() }
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall {
        ScriptCall::new(&EXTEND)
            .key(&self.keys.lock)
            .key(self.keys.epoch(owner))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(epoch)
    }

    fn release(&self, owner: &OwnerToken, message: &str) -> ScriptCall {
        ScriptCall::new(&RELEASE)
            .key(&self.keys.lock)
            .arg(owner.as_str())
            .arg(&self.keys.channel)
            .arg(message)
    }

    fn announced_by_key_events(&self) -> bool {
        true
    }

    fn abandon(&self, owner: &OwnerToken, message: &str, patience_ms: u64) -> ScriptCall {
        ScriptCall::new(&ABANDON)
            .key(&self.keys.lock)
            .key(self.keys.tombstone(owner))
            .arg(owner.as_str())
            .arg(&self.keys.channel)
            .arg(message)
            .arg(patience_ms.max(1))
    }
}

impl OnRedlock for Exclusive {
    fn propose_token(&self, acquire: &ScriptCall, token: u64) -> Option<ScriptCall> {
        // The acquire script's optional last argument.
        Some(acquire.clone().arg(token))
    }

    fn raise_fence(&self, owner: &OwnerToken, token: FencingToken) -> Option<ScriptCall> {
        Some(
            ScriptCall::new(&FENCE_RAISE)
                .key(&self.keys.lock)
                .key(&self.keys.fence)
                .arg(owner.as_str())
                .arg(token.get())
                .arg(self.fence_retention_ms),
        )
    }
}

impl Ticketed for Exclusive {
    fn ticket_kind(&self) -> &'static str {
        "lock"
    }

    fn resume(
        &self,
        owner: &OwnerToken,
        ttl_ms: u64,
        epoch: u64,
        take_over: (&OwnerToken, &[OwnerToken]),
    ) -> ScriptCall {
        self::take_over(&self.keys, owner, ttl_ms, epoch, take_over)
    }
}

impl HandedOver for Exclusive {
    fn hand_over_to(&self) -> HandOverTo<'_> {
        HandOverTo::LocalQueue(&self.keys.channel)
    }

    fn hand_over(
        &self,
        owner: &OwnerToken,
        successor: &OwnerToken,
        ttl_ms: u64,
        _waiter: Option<&str>,
    ) -> Option<ScriptCall> {
        let call = ScriptCall::new(&HAND_OVER)
            .key(&self.keys.lock)
            .key(&self.keys.fence)
            .key(self.keys.tombstone(successor))
            .key(self.keys.fair_queue())
            .arg(owner.as_str())
            .arg(successor.as_str())
            .arg(ttl_ms)
            .arg(self.fence_retention_ms)
            .arg(&self.keys.channel);
        Some(call)
    }
}

/// A take-over from a ticket of a lease on `keys` (`extend.lua` with its take-over keys and
/// arguments): the lock's, a fair lock's and an unfenced lock's.
pub(crate) fn take_over(
    keys: &LockKeys,
    owner: &OwnerToken,
    ttl_ms: u64,
    epoch: u64,
    (mark, proofs): (&OwnerToken, &[OwnerToken]),
) -> ScriptCall {
    let mut call = ScriptCall::new(&EXTEND)
        .key(&keys.lock)
        .key(keys.epoch(owner))
        .key(keys.taken(owner))
        .arg(owner.as_str())
        .arg(ttl_ms)
        .arg(epoch)
        .arg("1")
        .arg(mark.as_str());
    for proof in proofs {
        call = call.arg(proof.as_str());
    }
    call
}

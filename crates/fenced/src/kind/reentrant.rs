//! The reentrant lease under [`ReentrantLock`](crate::ReentrantLock): the exclusive lock key
//! (so plain and reentrant locks on one name exclude each other) plus a hash of holds, one
//! field per hold, each with its own id. The key is deleted when the last hold is given back.

use std::sync::Arc;

use crate::keys::LockKeys;
use crate::kind::Wake;
use crate::kind::{LeaseKind, Primitive};
use crate::scripts::{
    REENTRANT_ABANDON, REENTRANT_ACQUIRE, REENTRANT_EXTEND, REENTRANT_RELEASE, ScriptCall,
};
use crate::token::OwnerToken;

/// One hold of a reentrant lock.
pub(crate) struct ReentrantHold {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    /// This hold's random id: tells its release and abandon apart from the owner's others.
    pub(crate) hold: String,
    /// Re-enter only: never take the lock when the owner does not hold it.
    pub(crate) reenter_only: bool,
    pub(crate) fence_retention_ms: u64,
}

impl ReentrantHold {
    fn per_hold(&self, key: String) -> String {
        format!("{key}:{}", self.hold)
    }
}

impl LeaseKind for ReentrantHold {
    fn primitive(&self) -> Primitive {
        Primitive::ReentrantLock
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
        ScriptCall::new(&REENTRANT_ACQUIRE)
            .key(&self.keys.lock)
            .key(&self.keys.holds)
            .key(&self.keys.fence)
            .key(self.per_hold(self.keys.tombstone(owner)))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(self.fence_retention_ms)
            .arg(&self.hold)
            .arg(if self.reenter_only { "1" } else { "0" })
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, _epoch: u64) -> ScriptCall {
        // Never shortens (the owner's other holds count on their own ttls), so the epoch
        // order of `extend.lua` is not needed: re-entrant holds have no `extend`.
        ScriptCall::new(&REENTRANT_EXTEND)
            .key(&self.keys.lock)
            .key(&self.keys.holds)
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(&self.hold)
    }

    fn release(&self, owner: &OwnerToken, message: &str) -> ScriptCall {
        ScriptCall::new(&REENTRANT_RELEASE)
            .key(&self.keys.lock)
            .key(&self.keys.holds)
            .arg(owner.as_str())
            .arg(&self.hold)
            .arg(&self.keys.channel)
            .arg(message)
    }

    fn abandon(&self, owner: &OwnerToken, message: &str, patience_ms: u64) -> ScriptCall {
        ScriptCall::new(&REENTRANT_ABANDON)
            .key(&self.keys.lock)
            .key(&self.keys.holds)
            .key(self.per_hold(self.keys.tombstone(owner)))
            .arg(owner.as_str())
            .arg(&self.hold)
            .arg(&self.keys.channel)
            .arg(message)
            .arg(patience_ms.max(1))
    }
}

//! The lease under [`MultiLock`](crate::MultiLock): the exclusive lock keys of several names,
//! taken, renewed and given back together by one script each.

use std::sync::Arc;

use crate::keys::LockKeys;
use crate::kind::Wake;
use crate::kind::{LeaseKind, Primitive};
use crate::scripts::{MULTI_ACQUIRE, MULTI_EXTEND, MULTI_RELEASE, ScriptCall};
use crate::token::OwnerToken;

/// Several names held as one lease. `keys` is sorted by name and never empty.
pub(crate) struct MultiExclusive {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<Vec<LockKeys>>,
    /// The names' channels, in the order of `keys`.
    pub(crate) channels: Arc<Vec<String>>,
    pub(crate) fence_retention_ms: u64,
}

impl MultiExclusive {
    /// The first name's keys, where the per-owner records live.
    fn first(&self) -> &LockKeys {
        &self.keys[0]
    }

    fn locks(&self, call: ScriptCall) -> ScriptCall {
        self.keys.iter().fold(call, |call, k| call.key(&k.lock))
    }

    /// `multi_release.lua`'s call: a release (no `patience`), or an abandon leaving a
    /// tombstone for that long where nothing was held.
    fn give_back(
        &self,
        call: ScriptCall,
        owner: &OwnerToken,
        patience: &str,
        message: &str,
    ) -> ScriptCall {
        let call = self
            .locks(call.key(self.first().tombstone(owner)))
            .arg(owner.as_str())
            .arg(patience)
            .arg(message);
        self.keys.iter().fold(call, |call, k| call.arg(&k.channel))
    }
}

impl LeaseKind for MultiExclusive {
    fn primitive(&self) -> Primitive {
        Primitive::MultiLock
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn channels(&self) -> &[String] {
        &self.channels
    }

    fn wakes(&self) -> Wake {
        Wake::One
    }

    fn holds(&self, key: &str) -> u32 {
        u32::from(self.keys.iter().any(|k| k.lock == key))
    }

    fn one_slot(&self) -> bool {
        self.keys.len() == 1
    }

    fn acquire(&self, owner: &OwnerToken, ttl_ms: u64) -> ScriptCall {
        let call = self.locks(ScriptCall::new(&MULTI_ACQUIRE).key(self.first().tombstone(owner)));
        self.keys
            .iter()
            .fold(call, |call, k| call.key(&k.fence))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(self.fence_retention_ms)
            .arg(self.keys.len())
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall {
        self.locks(ScriptCall::new(&MULTI_EXTEND).key(self.first().epoch(owner)))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(epoch)
    }

    fn release(&self, owner: &OwnerToken, message: &str) -> ScriptCall {
        self.give_back(ScriptCall::new(&MULTI_RELEASE), owner, "", message)
    }

    fn abandon(&self, owner: &OwnerToken, message: &str, patience_ms: u64) -> ScriptCall {
        let patience = patience_ms.max(1).to_string();
        let call = ScriptCall::new(&MULTI_RELEASE).named_as("abandon");
        self.give_back(call, owner, &patience, message)
    }
}

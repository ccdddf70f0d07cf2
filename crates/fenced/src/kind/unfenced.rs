//! The unfenced lease under [`UnfencedLock`](crate::UnfencedLock): the exclusive lease without
//! a fencing token. The same key and value as [`Exclusive`](super::exclusive::Exclusive)
//! (so fenced and unfenced holders of one name exclude each other), taken by a bare
//! `SET NX PX` and given back by compare-and-delete (`DELIFEQ` where the server has it): no
//! fence key, no `TIME`, no script on the way in.
//!
//! What the token-less way in gives up: an attempt of unknown outcome cannot be voided by a
//! tombstone (the native `SET` reads none). Its abandon deletes the lease if the attempt took
//! it; an attempt that reaches Redis later still (stuck in a dead connection's buffer) holds
//! the name for its ttl, owned by nobody. Exclusion is not at stake, only that ttl.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::keys::LockKeys;
use crate::kind::Wake;
use crate::kind::{LeaseKind, OnRedlock, Primitive, Ticketed};
use crate::scripts::{EXTEND, RELEASE, ScriptCall, UNFENCED_ACQUIRE};
use crate::token::OwnerToken;

/// One unfenced exclusive lease on a name.
pub(crate) struct Unfenced {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<LockKeys>,
    /// Whether no refusal of this acquire was looked at yet: the first is followed by one
    /// check of the lock key's type (`Node::refusal_type`: the native `SET NX PX` answers nil
    /// for a key of another type too). Shared by the attempts of one acquire.
    pub(crate) unchecked: Arc<AtomicBool>,
}

impl LeaseKind for Unfenced {
    fn ticketed(&self) -> Option<&dyn Ticketed> {
        Some(self)
    }

    fn redlock(&self) -> Option<&dyn OnRedlock> {
        Some(self)
    }

    fn primitive(&self) -> Primitive {
        Primitive::UnfencedLock
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
        ScriptCall::new(&UNFENCED_ACQUIRE)
            .key(&self.keys.lock)
            .arg(owner.as_str())
            .arg(ttl_ms)
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall {
        // The epoch order needs the script (`extend.lua`); renewals are off the hot path.
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

    fn abandon(&self, owner: &OwnerToken, message: &str, _patience_ms: u64) -> ScriptCall {
        // Deletes the lease if the attempt took it: 1, as an abandon that released answers.
        self.release(owner, message)
    }

    fn announced_by_key_events(&self) -> bool {
        true
    }

    fn checks_type_of_refusal(&self) -> bool {
        self.unchecked.swap(false, Ordering::Relaxed)
    }
}

impl Ticketed for Unfenced {
    fn ticket_kind(&self) -> &'static str {
        "unfenced"
    }

    fn resume(
        &self,
        owner: &OwnerToken,
        ttl_ms: u64,
        epoch: u64,
        take_over: (&OwnerToken, &[OwnerToken]),
    ) -> ScriptCall {
        super::exclusive::take_over(&self.keys, owner, ttl_ms, epoch, take_over)
    }
}

/// Each master grants or refuses with `SET NX PX`: a majority, and no token to agree on.
impl OnRedlock for Unfenced {}

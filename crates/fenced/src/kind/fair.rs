//! The lease under [`FairLock`](crate::FairLock): the plain lock key, taken only by the head
//! of a FIFO queue of waiters kept in Redis (a list, and a hash of when each waiter's
//! registration ends, in server ms).

use std::sync::Arc;

use crate::kind::Wake;
use crate::kind::exclusive::Exclusive;
use crate::kind::{HandOverTo, HandedOver, LeaseKind, Primitive, Ticketed};
use crate::scripts::{FAIR_ABANDON, FAIR_ACQUIRE, FAIR_HAND_OVER, FAIR_RELEASE, ScriptCall};
use crate::token::OwnerToken;

/// One waiter's (then holder's) lease of a fair lock.
pub(crate) struct FairLease {
    pub(crate) exclusive: Exclusive,
    /// list: waiter ids, oldest first.
    pub(crate) queue: Arc<str>,
    /// hash: waiter id -> end of its registration.
    pub(crate) registrations: Arc<str>,
    /// A waiter is woken on `<prefix><waiter id>`.
    pub(crate) channel_prefix: Arc<str>,
    pub(crate) waiter: Arc<str>,
    /// 0: a try that never queues.
    pub(crate) registration_ms: u64,
    /// The first half of every owner a local holder would hand the lock to this waiter under
    /// (`None`: no offers).
    pub(crate) offer_half: Option<Arc<str>>,
}

impl LeaseKind for FairLease {
    fn ticketed(&self) -> Option<&dyn Ticketed> {
        Some(self)
    }

    fn handed_over(&self) -> Option<&dyn HandedOver> {
        Some(self)
    }

    fn primitive(&self) -> Primitive {
        Primitive::FairLock
    }

    fn name(&self) -> &Arc<str> {
        self.exclusive.name()
    }

    fn channels(&self) -> &[String] {
        // The release script wakes the queue's head on its own channel, with a message that
        // this client's pub/sub task delivers too: no local wake-up to add.
        &[]
    }

    fn wakes(&self) -> Wake {
        Wake::One
    }

    fn holds(&self, key: &str) -> u32 {
        self.exclusive.holds(key)
    }

    fn acquire(&self, owner: &OwnerToken, ttl_ms: u64) -> ScriptCall {
        let keys = &self.exclusive.keys;
        ScriptCall::new(&FAIR_ACQUIRE)
            .key(&keys.lock)
            .key(&*self.queue)
            .key(&*self.registrations)
            .key(&keys.fence)
            .key(keys.tombstone(owner))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(self.exclusive.fence_retention_ms)
            .arg(&*self.waiter)
            .arg(self.registration_ms)
            .arg(self.offer_half.as_deref().unwrap_or(""))
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall {
        self.exclusive.extend(owner, ttl_ms, epoch)
    }

    fn release(&self, owner: &OwnerToken, _message: &str) -> ScriptCall {
        ScriptCall::new(&FAIR_RELEASE)
            .key(&self.exclusive.keys.lock)
            .key(&*self.queue)
            .arg(owner.as_str())
            .arg(&*self.channel_prefix)
    }

    fn abandon(&self, owner: &OwnerToken, _message: &str, patience_ms: u64) -> ScriptCall {
        let keys = &self.exclusive.keys;
        ScriptCall::new(&FAIR_ABANDON)
            .key(&keys.lock)
            .key(keys.tombstone(owner))
            .key(&*self.queue)
            .key(&*self.registrations)
            .arg(owner.as_str())
            .arg(&*self.waiter)
            .arg(&*self.channel_prefix)
            .arg(patience_ms.max(1))
    }
}

impl Ticketed for FairLease {
    fn ticket_kind(&self) -> &'static str {
        "fair"
    }

    fn resume(
        &self,
        owner: &OwnerToken,
        ttl_ms: u64,
        epoch: u64,
        take_over: (&OwnerToken, &[OwnerToken]),
    ) -> ScriptCall {
        self.exclusive.resume(owner, ttl_ms, epoch, take_over)
    }
}

impl HandedOver for FairLease {
    fn hand_over_to(&self) -> HandOverTo<'_> {
        HandOverTo::FairHead(&self.channel_prefix)
    }

    fn hand_over(
        &self,
        owner: &OwnerToken,
        successor: &OwnerToken,
        ttl_ms: u64,
        waiter: Option<&str>,
    ) -> Option<ScriptCall> {
        let keys = &self.exclusive.keys;
        Some(
            ScriptCall::new(&FAIR_HAND_OVER)
                .key(&keys.lock)
                .key(&*self.queue)
                .key(&*self.registrations)
                .key(&keys.fence)
                .key(keys.tombstone(successor))
                .arg(owner.as_str())
                .arg(successor.as_str())
                .arg(ttl_ms)
                .arg(self.exclusive.fence_retention_ms)
                .arg(waiter?)
                .arg(&*self.channel_prefix),
        )
    }
}

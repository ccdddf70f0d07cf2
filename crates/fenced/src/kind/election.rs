//! The lease under [`Election`](crate::Election): a fair lock's lease on the election's leader
//! key (candidates queue in FIFO order), whose grant also records the leader's value, term and
//! start and counts the change of leader, whose candidates record their values while they
//! queue, and whose every change (a grant, a step down) is announced to the observers.
//!
//! A leadership is never handed straight to a local candidate (the fair lock's shortcut): the
//! record names the candidate's value, which only the candidate's own campaign knows.

use std::sync::Arc;

use crate::kind::fair::FairLease;
use crate::kind::{LeaseKind, Primitive, Wake};
use crate::scripts::{
    ELECTION_ABANDON, ELECTION_CAMPAIGN, ELECTION_EXTEND, ELECTION_RESIGN, ScriptCall,
};
use crate::token::OwnerToken;

/// One candidate's (then leader's) lease.
pub(crate) struct ElectionLease {
    pub(crate) fair: FairLease,
    /// hash: the leader record (owner, value, term, since, v).
    pub(crate) record: Arc<str>,
    /// hash: the candidates' values (waiter id -> `<queued since> <value>`).
    pub(crate) values: Arc<str>,
    /// string: how many times leadership changed hands.
    pub(crate) transitions: Arc<str>,
    /// The value this candidate advertises once elected.
    pub(crate) value: Arc<str>,
    /// The observers' channel: `[<leader key>:released]`.
    pub(crate) observers: Arc<[String]>,
    /// A grant's announcement: `<client id> 1`, so this client skips its echo (its
    /// campaign wakes its own observers directly).
    pub(crate) announcement: Arc<str>,
}

impl ElectionLease {
    fn observers(&self) -> &str {
        self.observers.first().map_or("", String::as_str)
    }
}

impl LeaseKind for ElectionLease {
    fn primitive(&self) -> Primitive {
        Primitive::Election
    }

    fn name(&self) -> &Arc<str> {
        self.fair.name()
    }

    fn channels(&self) -> &[String] {
        // A step down by this client wakes its own observers directly (their watcher queues
        // on this channel); the script's message is skipped here as an echo.
        &self.observers
    }

    fn wakes(&self) -> Wake {
        // One watcher per client serves every observer of the election (`election/observe.rs`):
        // it is the queue's one head. (`all` would also leave it a stored wake-up, and so a
        // second read, whenever it was already reading.)
        Wake::One
    }

    fn acquire(&self, owner: &OwnerToken, ttl_ms: u64) -> ScriptCall {
        let keys = &self.fair.exclusive.keys;
        ScriptCall::new(&ELECTION_CAMPAIGN)
            .key(&keys.lock)
            .key(&*self.fair.queue)
            .key(&*self.fair.registrations)
            .key(&keys.fence)
            .key(keys.tombstone(owner))
            .key(&*self.record)
            .key(&*self.values)
            .key(&*self.transitions)
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(self.fair.exclusive.fence_retention_ms)
            .arg(&*self.fair.waiter)
            .arg(self.fair.registration_ms)
            .arg("")
            .arg(&*self.value)
            .arg(self.observers())
            .arg(&*self.announcement)
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall {
        let keys = &self.fair.exclusive.keys;
        ScriptCall::new(&ELECTION_EXTEND)
            .key(&keys.lock)
            .key(keys.epoch(owner))
            .key(&*self.record)
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(epoch)
    }

    fn release(&self, owner: &OwnerToken, message: &str) -> ScriptCall {
        ScriptCall::new(&ELECTION_RESIGN)
            .key(&self.fair.exclusive.keys.lock)
            .key(&*self.fair.queue)
            .arg(owner.as_str())
            .arg(&*self.fair.channel_prefix)
            .arg(self.observers())
            .arg(message)
    }

    fn abandon(&self, owner: &OwnerToken, message: &str, patience_ms: u64) -> ScriptCall {
        let keys = &self.fair.exclusive.keys;
        ScriptCall::new(&ELECTION_ABANDON)
            .key(&keys.lock)
            .key(keys.tombstone(owner))
            .key(&*self.fair.queue)
            .key(&*self.fair.registrations)
            .key(&*self.values)
            .arg(owner.as_str())
            .arg(&*self.fair.waiter)
            .arg(&*self.fair.channel_prefix)
            .arg(patience_ms.max(1))
            .arg(self.observers())
            .arg(message)
    }
}

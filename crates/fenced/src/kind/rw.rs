//! The leases under [`RwLock`](crate::RwLock): the writer holds the plain lock key (so it
//! excludes plain locks too); each reader holds an entry of a sorted set scored by the end of
//! its lease (server ms), renewed and released by the semaphore's scripts; writers that wait
//! are registered so that new readers wait behind them.

use std::sync::Arc;

use crate::keys::LockKeys;
use crate::kind::Wake;
use crate::kind::exclusive::Exclusive;
use crate::kind::{LeaseKind, Primitive};
use crate::scripts::{
    RW_READ_ACQUIRE, RW_WRITE_ABANDON, RW_WRITE_ACQUIRE, SEMAPHORE_ABANDON, SEMAPHORE_EXTEND,
    SEMAPHORE_RELEASE, ScriptCall,
};
use crate::token::OwnerToken;

/// The keys of one read-write lock; all share the hash tag `{name}`.
#[derive(Clone, Debug)]
pub(crate) struct RwKeys {
    /// The writer's key, fence and channel: a plain lock's.
    pub(crate) lock: Arc<LockKeys>,
    /// zset: reader owner -> end of its lease (server ms).
    pub(crate) readers: String,
    /// hash: reader owner -> 1.
    pub(crate) reader_counts: String,
    /// zset: waiting writer id -> end of its registration (server ms).
    pub(crate) waiting_writers: String,
}

impl RwKeys {
    pub(crate) fn new(namespace: &str, name: &str) -> Self {
        let lock = LockKeys::new(namespace, name);
        RwKeys {
            readers: format!("{}:readers", lock.lock),
            reader_counts: format!("{}:readers:n", lock.lock),
            waiting_writers: format!("{}:writers", lock.lock),
            lock: Arc::new(lock),
        }
    }

    fn reader_key(&self, what: &str, owner: &OwnerToken) -> String {
        format!("{}:{what}:{}", self.readers, owner.as_str())
    }
}

/// One reader's lease.
pub(crate) struct ReadLease {
    pub(crate) name: Arc<str>,
    pub(crate) keys: Arc<RwKeys>,
    pub(crate) fence_retention_ms: u64,
}

impl LeaseKind for ReadLease {
    fn primitive(&self) -> Primitive {
        Primitive::RwRead
    }

    fn name(&self) -> &Arc<str> {
        &self.name
    }

    fn channels(&self) -> &[String] {
        std::slice::from_ref(&self.keys.lock.channel)
    }

    fn wakes(&self) -> Wake {
        // A reader leaving can let one writer in.
        Wake::One
    }

    fn acquire(&self, owner: &OwnerToken, ttl_ms: u64) -> ScriptCall {
        ScriptCall::new(&RW_READ_ACQUIRE)
            .key(&self.keys.lock.lock)
            .key(&self.keys.readers)
            .key(&self.keys.reader_counts)
            .key(&self.keys.waiting_writers)
            .key(&self.keys.lock.fence)
            .key(self.keys.reader_key("void", owner))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(self.fence_retention_ms)
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall {
        ScriptCall::new(&SEMAPHORE_EXTEND)
            .key(&self.keys.readers)
            .key(&self.keys.reader_counts)
            .key(self.keys.reader_key("epoch", owner))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(epoch)
    }

    fn release(&self, owner: &OwnerToken, message: &str) -> ScriptCall {
        ScriptCall::new(&SEMAPHORE_RELEASE)
            .key(&self.keys.readers)
            .key(&self.keys.reader_counts)
            .arg(owner.as_str())
            .arg(&self.keys.lock.channel)
            .arg(message)
    }

    fn abandon(&self, owner: &OwnerToken, message: &str, patience_ms: u64) -> ScriptCall {
        ScriptCall::new(&SEMAPHORE_ABANDON)
            .key(&self.keys.readers)
            .key(&self.keys.reader_counts)
            .key(self.keys.reader_key("void", owner))
            .arg(owner.as_str())
            .arg(&self.keys.lock.channel)
            .arg(message)
            .arg(patience_ms.max(1))
    }
}

/// The writer's lease: a plain exclusive lease, taken by the writer-aware script.
pub(crate) struct WriteLease {
    pub(crate) exclusive: Exclusive,
    pub(crate) keys: Arc<RwKeys>,
    /// The same for every attempt of one `write()`: its registration as a waiting writer.
    pub(crate) waiter: Arc<str>,
    pub(crate) registration_ms: u64,
}

impl LeaseKind for WriteLease {
    fn primitive(&self) -> Primitive {
        Primitive::RwWrite
    }

    fn name(&self) -> &Arc<str> {
        self.exclusive.name()
    }

    fn channels(&self) -> &[String] {
        self.exclusive.channels()
    }

    fn wakes(&self) -> Wake {
        // A writer leaving lets every waiting reader in at once.
        Wake::All
    }

    fn holds(&self, key: &str) -> u32 {
        self.exclusive.holds(key)
    }

    fn acquire(&self, owner: &OwnerToken, ttl_ms: u64) -> ScriptCall {
        let keys = &self.keys.lock;
        ScriptCall::new(&RW_WRITE_ACQUIRE)
            .key(&keys.lock)
            .key(&self.keys.readers)
            .key(&self.keys.waiting_writers)
            .key(&keys.fence)
            .key(keys.tombstone(owner))
            .arg(owner.as_str())
            .arg(ttl_ms)
            .arg(self.exclusive.fence_retention_ms)
            .arg(&*self.waiter)
            .arg(self.registration_ms)
    }

    fn extend(&self, owner: &OwnerToken, ttl_ms: u64, epoch: u64) -> ScriptCall {
        self.exclusive.extend(owner, ttl_ms, epoch)
    }

    fn release(&self, owner: &OwnerToken, message: &str) -> ScriptCall {
        self.exclusive.release(owner, message)
    }

    fn abandon(&self, owner: &OwnerToken, message: &str, patience_ms: u64) -> ScriptCall {
        // Abandoned when the wait is over, or while it goes on (an attempt of unknown outcome,
        // retried at once, which registers again): either way readers need not wait behind
        // this writer meanwhile.
        let keys = &self.keys.lock;
        ScriptCall::new(&RW_WRITE_ABANDON)
            .key(&keys.lock)
            .key(keys.tombstone(owner))
            .key(&self.keys.waiting_writers)
            .arg(owner.as_str())
            .arg(&keys.channel)
            .arg(message)
            .arg(patience_ms.max(1))
            .arg(&*self.waiter)
    }
}

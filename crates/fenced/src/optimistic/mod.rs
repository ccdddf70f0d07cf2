//! Optimistic concurrency: change Redis data without locking, and retry (or give up) when
//! somebody else changed it first.
//!
//! | | optimistic ([`Client::transaction`], atomic scripts) | pessimistic ([`Lock`](crate::Lock)) |
//! |---|---|---|
//! | assumes | conflicts are rare | conflicts are common |
//! | how | version check / `WATCH` at write time | mutual exclusion before the work |
//! | on conflict | retry (transaction) or a typed answer (script) | wait for the lock |
//! | suits | read-heavy, write-light data in Redis: counters, stock, "keep the maximum" | long work, work outside Redis, expensive side effects |
//!
//! Prefer an atomic script when the whole change fits in one ([`Client::set_max`],
//! [`Client::decrement_if_at_least`], [`Client::compare_and_set`],
//! [`Client::set_if_version`]): one round trip, no retries, nothing to conflict with. Use a
//! transaction when the decision needs your own code between the read and the write.
//! `docs/benchmarks.md` measures all three on the flash sale and a contended counter.
//!
//! [`Client::transaction`]: crate::Client::transaction
//! [`Client::set_max`]: crate::Client::set_max
//! [`Client::decrement_if_at_least`]: crate::Client::decrement_if_at_least
//! [`Client::compare_and_set`]: crate::Client::compare_and_set
//! [`Client::set_if_version`]: crate::Client::set_if_version

mod atomic;
mod transaction;

pub use atomic::{CasOutcome, MAX_KEY_LEN, MAX_STOCK, Stock, Versioned, VersionedWrite};
pub use transaction::Tx;

pub(crate) use atomic::{
    compare_and_set, decrement_if_at_least, get_versioned, set_extreme, set_if_version,
};
pub(crate) use transaction::transaction;

pub(crate) use crate::backend::pool::Slot;

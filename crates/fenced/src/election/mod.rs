//! [`Election`]: leader election with terms, on the fair lock's FIFO queue.
//!
//! Keys, all under the hash tag `{name}` with the prefix `<ns>election:`:
//!
//! | key | type | what it holds |
//! |---|---|---|
//! | `<ns>election:{<name>}` | string | the leader's owner token, with `PX` = its lease |
//! | `<ns>election:{<name>}:fence` | string | the last term handed out (a fencing token) |
//! | `<ns>election:{<name>}:queue`, `:queue:ends` | list, hash | the candidates, oldest first, as a fair lock's waiters |
//! | `<ns>election:{<name>}:queue:values` | hash | waiter id -> `<queued since (server ms)> <value>`, for the queue's candidates; expires as the queue |
//! | `<ns>election:{<name>}:leader` | hash | the leader record: `owner`, `value`, `term`, `since` (server ms), `v` (proclaims) |
//! | `<ns>election:{<name>}:transitions` | string | how many times leadership changed hands; kept as long as the fence |
//! | `<ns>election:{<name>}:released` | pub/sub channel | one message per change: a grant, a proclaim, a step down |
//!
//! Invariants:
//! 1. A term is the fencing token of its leader's grant: terms strictly increase, and a
//!    deposed leader's fenced writes are refused wherever a newer term was seen.
//! 2. The leader record counts only while its `owner` holds the leader key: it is written in
//!    the grant's own script, so a reader never sees a leader without its value, and a record
//!    left by a lease that ended names nobody.
//! 3. Observers never go backwards: a change is reported only when its (term, proclaims) is
//!    past the last one reported, and "no leader" only after a leader (`observe.rs`).
//! 4. One watcher per client and election serves every observer; it reads on a change's
//!    announcement, after the pub/sub connection came back, and when the leader's lease is due
//!    to end (an expiry announces nothing), never on a timer while nothing changes. It reads
//!    the leader alone: the candidates are counted, never listed.
//! 5. While candidates queue, only the head of the queue is elected. A yield moves the chosen
//!    candidate to the head in the step down's own script, so no other candidate can be
//!    elected before it, and its term, a fencing token, is greater than the yielding
//!    leader's (invariant 1).
//! 6. A candidate's value entry lives as long as its place in the queue: written when it
//!    queues, deleted when it leaves the queue (elected, given up, or taken off the head once
//!    its registration ended). Reads go by the queue, so an entry left behind by a client that
//!    does not delete it is never listed.

mod handle;
mod leadership;
mod observe;
mod record;
#[cfg(test)]
mod record_tests;

pub use handle::Election;
pub use leadership::Leadership;
pub use observe::LeaderChanges;
pub(crate) use record::ELECTION_PREFIX;
pub use record::{Candidate, ElectionStatus, Leader, MAX_VALUE_LEN};

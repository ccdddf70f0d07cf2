//! The workloads: what the workers do, and what each promises that the checkers hold it to.

use serde::{Deserialize, Serialize};

/// What the workers do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// The lock protecting a counter: fenced read-modify-write with the grant's token.
    Lock,
    /// The lock workload with waiters woken by keyspace events, and releases that do not
    /// publish (`ClientBuilder::keyspace_events`; the server is started with the events on).
    LockEvents,
    /// The lock workload with its workers taking every way a lock is granted, in turn: by
    /// transaction (the default), by script (`ClientBuilder::counted_grants(false)`), and
    /// without scripts (`ClientBuilder::without_scripts`: the grant by transaction, release
    /// and renewal by `WATCH` transaction where the server has no native step): tokens must
    /// still increase across every holder of a key.
    LockMixed,
    /// The same over Redlock on three masters.
    Redlock,
    /// The efficiency lease (`Lock::unfenced`) over a plain counter (GET and SET, no
    /// fencing): shows what fencing prevents.
    Unfenced,
    /// A semaphore of 2 permits; the checker counts holders.
    Semaphore,
    /// The reentrant lock, entered twice per section, protecting the fenced counter.
    Reentrant,
    /// The fair lock (FIFO queue in Redis) protecting the fenced counter.
    Fair,
    /// Optimistic transactions (WATCH/MULTI/EXEC) incrementing a counter; no lease.
    Optimistic,
    /// The read-write lock: one section in four writes (fenced increment under the write
    /// lock), the others read the counter (fenced read under a read lock).
    Rw,
    /// Leader election: each section campaigns (FIFO), proclaims once, writes the fenced
    /// counter with its term and steps down; every worker also observes every key's election
    /// (the checker reads each observer's sequence of terms).
    Election,
    /// `fenced run KEY -- CMD`, the command: CMD appends numbered lines to the key's file for
    /// longer than the ttl; the file shows whether a CMD ever wrote after a newer one began.
    Run,
}

impl Workload {
    /// The name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Lock => "lock",
            Workload::LockEvents => "lock-events",
            Workload::LockMixed => "lock-mixed",
            Workload::Redlock => "redlock",
            Workload::Unfenced => "unfenced",
            Workload::Semaphore => "semaphore",
            Workload::Reentrant => "reentrant",
            Workload::Fair => "fair",
            Workload::Optimistic => "optimistic",
            Workload::Rw => "rw",
            Workload::Run => "run",
            Workload::Election => "election",
        }
    }

    /// Whether it writes a counter whose history the resource checker reads.
    pub fn counts(self) -> bool {
        !matches!(self, Workload::Semaphore | Workload::Run)
    }

    /// Whether its writes carry fencing tokens (so that stale writes must be refused).
    pub fn fenced(self) -> bool {
        matches!(
            self,
            Workload::Lock
                | Workload::LockEvents
                | Workload::LockMixed
                | Workload::Redlock
                | Workload::Reentrant
                | Workload::Fair
                | Workload::Rw
                | Workload::Election
        )
    }

    /// Whether it takes leases (so that lease faults apply).
    pub fn leased(self) -> bool {
        !matches!(self, Workload::Optimistic)
    }

    /// How many holders may overlap.
    pub fn holders(self) -> usize {
        if self == Workload::Semaphore { 2 } else { 1 }
    }

    /// The lock servers it needs.
    pub fn servers(self) -> usize {
        if self == Workload::Redlock { 3 } else { 1 }
    }

    /// The counter's key for `key`, where the counter lives (the store for leased workloads,
    /// the lock server for optimistic transactions).
    pub fn counter(self, key: u32) -> String {
        match self {
            Workload::Optimistic => format!("chaos:opt:{key}"),
            Workload::Unfenced => format!("chaos:plain:{key}"),
            _ => format!("chaos:res:{key}"),
        }
    }
}

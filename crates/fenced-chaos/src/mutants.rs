//! Mutants: one deliberately broken behaviour, built into this program only (never into the
//! library), played by worker 0 of a run without faults. A run with a mutant must fail, and
//! says which checkers caught it; a checker that lets a mutant through does not bite.
//!
//! Each mutant does, with raw Redis commands, what a broken library would do:
//! - `release-without-owner-check`: its release arrives after its lease ended (it waits a ttl
//!   first, as a delayed packet would) and deletes the lock key without comparing the owner,
//!   then announces the release: whoever held the lock then loses it to the next waiter
//!   while still working.
//! - `token-not-increasing`: every grant after its first reports and uses its first token.
//! - `write-skips-fence`: reads the counter, stalls past its lease (as a paused holder), and
//!   writes it back without the fencing token.
//! - `renewal-after-loss`: its renewal comes after its lease ended and another worker took
//!   the lock, without the owner compare (a `PEXPIRE` on whoever holds the key); it takes
//!   the reply for its own lease and writes.
//! - `handover-to-wrong-waiter`: a fair lock's release hands the lock to a waiter of its own
//!   (its next section, with a new token) that is not the head of the queue in Redis, and
//!   releases it there too, so the head is granted as well.
//! - `semaphore-overgrant`: asks the semaphore of 2 for one permit more (a handle of 3).
//!
//! Runs without faults keep every lease alive by renewal (ttl 1 s), so a holder that believes
//! past its lease, or beside another holder, is the mutant's doing and nothing else's.

use serde::{Deserialize, Serialize};

use crate::workload::Workload;

/// A broken behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Mutant {
    /// Compare-less delete at release, after the lease ended.
    ReleaseWithoutOwnerCheck,
    /// Grants that keep the first token.
    TokenNotIncreasing,
    /// A counter write without the fencing token, after a stall past the lease.
    WriteSkipsFence,
    /// A renewal accepted after the lease was lost.
    RenewalAfterLoss,
    /// A fair lock's handover to a waiter that is not the queue's head.
    HandoverToWrongWaiter,
    /// One permit more than the semaphore has.
    SemaphoreOvergrant,
}

impl Mutant {
    /// Every mutant.
    pub const ALL: [Mutant; 6] = [
        Mutant::ReleaseWithoutOwnerCheck,
        Mutant::TokenNotIncreasing,
        Mutant::RenewalAfterLoss,
        Mutant::WriteSkipsFence,
        Mutant::HandoverToWrongWaiter,
        Mutant::SemaphoreOvergrant,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Mutant::ReleaseWithoutOwnerCheck => "release-without-owner-check",
            Mutant::TokenNotIncreasing => "token-not-increasing",
            Mutant::WriteSkipsFence => "write-skips-fence",
            Mutant::RenewalAfterLoss => "renewal-after-loss",
            Mutant::HandoverToWrongWaiter => "handover-to-wrong-waiter",
            Mutant::SemaphoreOvergrant => "semaphore-overgrant",
        }
    }

    /// What it breaks, in a line.
    pub fn what(self) -> &'static str {
        match self {
            Mutant::ReleaseWithoutOwnerCheck => {
                "a late release deletes the lock without comparing its owner"
            }
            Mutant::TokenNotIncreasing => "every grant after the first keeps the first token",
            Mutant::WriteSkipsFence => "a stalled holder writes without its fencing token",
            Mutant::RenewalAfterLoss => {
                "a renewal after the lease ended extends another's and the holder writes on"
            }
            Mutant::HandoverToWrongWaiter => {
                "a fair release hands the lock to a waiter that is not the queue's head"
            }
            Mutant::SemaphoreOvergrant => "the semaphore of 2 grants a third permit",
        }
    }

    /// The workload it runs in.
    pub fn workload(self) -> Workload {
        match self {
            Mutant::SemaphoreOvergrant => Workload::Semaphore,
            Mutant::HandoverToWrongWaiter => Workload::Fair,
            _ => Workload::Lock,
        }
    }
}

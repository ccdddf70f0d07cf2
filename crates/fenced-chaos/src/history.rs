//! The history: what each worker did, with times on one clock for every process.
//!
//! Times are `CLOCK_MONOTONIC` nanoseconds. On Linux that clock is shared by every process of
//! the machine, so a worker's "acquired at" and the controller's "paused at" compare directly,
//! and no wall clock is involved.

use serde::{Deserialize, Serialize};

/// Monotonic nanoseconds since boot, the same clock in every process.
pub fn now_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| {
            u64::try_from(t.tv_sec()).unwrap_or(0) * 1_000_000_000
                + u64::try_from(t.tv_nsec()).unwrap_or(0)
        })
        .unwrap_or(0)
}

/// What happened to a write made inside a critical section.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Write {
    /// The resource took it (acknowledged).
    Applied,
    /// The resource refused it: a newer token had read or written (the fence worked).
    Refused,
    /// The call failed or its reply was lost: it may or may not have been applied.
    Indeterminate,
    /// The holder saw its lost-lease signal first and did not write.
    Skipped,
    /// The fenced read's reply was lost: nothing was written, but the read may have raised
    /// the resource's fence to this holder's token.
    ReadLost,
    /// The workload writes nothing (the semaphore).
    None,
}

/// One event, as a worker prints it (one JSON line each).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "e", rename_all = "kebab-case")]
pub enum Event {
    /// The worker is connected and starts its loop.
    Ready {
        /// Worker id.
        w: u32,
    },
    /// A lease was granted; printed at once, so the controller knows who holds what.
    Acquired {
        /// Worker id.
        w: u32,
        /// Which of the workload's keys.
        key: u32,
        /// The grant's fencing token (0 where the workload has none).
        t: u64,
        /// When the acquire was invoked.
        inv: u64,
        /// When its grant arrived.
        ok: u64,
        /// A write lock of the read-write lock.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        writer: bool,
    },
    /// The holder stopped at the point the controller asked for ("linger"), holding its
    /// lease, so that a fault strikes a holder mid-section.
    Lingering {
        /// Worker id.
        w: u32,
        /// The process that holds the lease, when it is not the worker itself (the `fenced`
        /// command of the `run` workload).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pid: Option<u32>,
    },
    /// An acquire that ended without a grant.
    AcquireFailed {
        /// Worker id.
        w: u32,
        /// Which key.
        key: u32,
        /// When it was invoked.
        inv: u64,
        /// When it returned.
        end: u64,
        /// The error's kind (see `worker::kind`).
        err: String,
    },
    /// A finished critical section (or optimistic transaction).
    Section(Section),
    /// An election observer reported a change.
    Observed {
        /// Worker id.
        w: u32,
        /// Which key's election.
        key: u32,
        /// The observer (one per key and worker process).
        o: u64,
        /// The leader's term; 0: nobody leads.
        t: u64,
        /// The leader's proclaims in its term.
        p: u64,
    },
}

/// A finished critical section, as recorded.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Section {
    /// Worker id.
    pub w: u32,
    /// Which key.
    pub key: u32,
    /// The fencing token (0 where the workload has none).
    pub t: u64,
    /// When the acquire was invoked.
    pub inv: u64,
    /// When the grant arrived (for a transaction: when it committed).
    pub ok: u64,
    /// The write's fate.
    pub write: Write,
    /// The counter value written (read + 1), when a write was attempted.
    pub value: Option<i64>,
    /// When the release was invoked: the end of the holder's belief that it holds.
    pub rel_inv: u64,
    /// When the release returned.
    pub rel_end: u64,
    /// The release's outcome: "released", or an error kind.
    pub release: String,
    /// Nanoseconds the worker stalled on purpose (the starved-renewal nemesis), not
    /// counted against the call bounds.
    pub stalled: u64,
    /// For the read-write lock: whether this section held the write lock (readers may
    /// overlap each other, nobody may overlap a writer).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub writer: bool,
}

/// A small xorshift generator: the schedule needs cheap randomness, not a crypto one.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded from the OS, or from `seed` when given (a run can be replayed).
    pub fn new(seed: Option<u64>) -> Rng {
        let seed = seed.unwrap_or_else(|| {
            let mut b = [0u8; 8];
            let _ = getrandom::fill(&mut b);
            u64::from_le_bytes(b)
        });
        Rng(seed | 1)
    }

    /// The next 64 random bits.
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    /// A number in `0..n` (0 for n = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

//! The faults, and how each is injected and healed.

use serde::Serialize;

use crate::workload::Workload;

/// One kind of fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Nemesis {
    /// SIGSTOP the worker holding a lease for 2.5 ttl: it and its renewal freeze (a GC pause).
    PauseHolder,
    /// Block the holder's only runtime thread for 2.5 ttl inside its section: renewal starves
    /// while the holder's own code runs on afterwards.
    StarveRenewal,
    /// SIGKILL the holder (a crash); a new worker takes its place.
    KillHolder,
    /// SIGSTOP redis-server (on Redlock: a majority of the masters) for 1.5 ttl.
    PauseRedis,
    /// Kill redis-server and start it again at once, without persistence: every key is gone.
    RestartRedis,
    /// The same, with the server down for 1.5 ttl before it comes back.
    RestartRedisDelayed,
    /// Keep redis-server's state, let the work go on for a ttl, then put it back: each fence
    /// goes back to an older value. In turn: a restart from a snapshot (`SAVE`; every write
    /// since is lost, as in a failover to a replica that missed writes), `DEBUG LOADAOF` of an
    /// append-only file closed a ttl ago (on the running server), and `RESTORE … REPLACE` of
    /// every fence as it was.
    RestoreRedis,
    /// Cut the holder off from Redis (every byte dropped, connections open) for 2.5 ttl.
    Partition,
    /// Delay every reply to every worker by ttl / 8 for 3 ttl.
    Latency,
    /// Five times, 100 ms apart: every connection loses its next reply and is closed after
    /// the command ran.
    Reset,
    /// A clock step on the server, simulated: every lease key expires now (`PEXPIRE 1`, and
    /// the lease scores of a semaphore's holders and an RW lock's readers set to 0), as if the
    /// clock jumped past the ttl.
    ClockStep,
    /// For 3 ttl, redis-server (on Redlock: a majority of the masters) short of memory: a
    /// `maxmemory` a little above its use, `volatile-ttl`, and filler keys written every
    /// 10 ms, so that it keeps evicting the keys closest to their expiry: leases first, never
    /// a resource's data (`evict.rs`). Then put back as it was.
    Evict,
    /// As `evict`, under `volatile-random`: fences are evicted too, and a fence lost twice
    /// within one millisecond of the server's clock can hand out a token again. Not in the
    /// schedule (`--nemesis evict-fences`): it shows what a server that may evict fences
    /// costs, a configuration `fenced doctor` fails.
    EvictFences,
}

impl Nemesis {
    /// Every kind, in the order a round-robin schedule takes them.
    pub const ALL: [Nemesis; 12] = [
        Nemesis::PauseHolder,
        Nemesis::StarveRenewal,
        Nemesis::KillHolder,
        Nemesis::PauseRedis,
        Nemesis::RestartRedis,
        Nemesis::RestartRedisDelayed,
        Nemesis::RestoreRedis,
        Nemesis::Partition,
        Nemesis::Latency,
        Nemesis::Reset,
        Nemesis::ClockStep,
        Nemesis::Evict,
    ];

    /// The name used in reports and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Nemesis::PauseHolder => "pause-holder",
            Nemesis::StarveRenewal => "starve-renewal",
            Nemesis::KillHolder => "kill-holder",
            Nemesis::PauseRedis => "pause-redis",
            Nemesis::RestartRedis => "restart-redis",
            Nemesis::RestartRedisDelayed => "restart-redis-delayed",
            Nemesis::RestoreRedis => "restore-redis",
            Nemesis::Partition => "partition",
            Nemesis::Latency => "latency",
            Nemesis::Reset => "reset",
            Nemesis::ClockStep => "clock-step",
            Nemesis::Evict => "evict",
            Nemesis::EvictFences => "evict-fences",
        }
    }

    /// Whether the fault means anything for `workload`. Optimistic transactions hold no
    /// lease (no renewal to starve, no lease to expire or evict), and their counter lives on
    /// the faulted server, so a restart without persistence would erase the data under test.
    pub fn applies_to(self, workload: Workload) -> bool {
        if workload == Workload::Run {
            // The faults under which `fenced run` promises that CMD never outlives the lease:
            // the command killed, cut off, or slowed; Redis paused. (A paused `fenced`, a
            // restart, a clock step or an eviction can end the lease while CMD runs on: only
            // a fenced resource protects against those.)
            return matches!(
                self,
                Nemesis::KillHolder
                    | Nemesis::Partition
                    | Nemesis::PauseRedis
                    | Nemesis::Latency
                    | Nemesis::Reset
            );
        }
        workload.leased()
            || !matches!(
                self,
                Nemesis::StarveRenewal
                    | Nemesis::RestartRedis
                    | Nemesis::RestartRedisDelayed
                    | Nemesis::RestoreRedis
                    | Nemesis::ClockStep
                    | Nemesis::Evict
                    | Nemesis::EvictFences
            )
    }
}

/// One injected fault, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct Fault {
    /// Its kind.
    pub kind: Nemesis,
    /// What it struck ("worker 3", "servers 0,1").
    pub target: String,
    /// When it began (monotonic ns).
    pub start: u64,
    /// When it was healed.
    pub end: u64,
    /// For a fault that struck one holder: that worker and the key it held.
    pub holder: Option<(u32, u32)>,
    /// For an eviction: how many of the workload's keys the servers evicted (the lab's
    /// filler aside).
    pub evicted: Option<u64>,
}

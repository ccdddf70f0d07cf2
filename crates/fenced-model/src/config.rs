//! What a check explores: the clients, the lease lengths, the faults the checker may take at
//! any point, the bounds that keep the state space finite, and a mutant, if any.

/// A fault: an action the checker may take at any point of any history.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fault {
    /// The master writes its keyspace to disk (a snapshot, or the append-only file as of now).
    Save,
    /// The replica catches up with the master; it lags from then on.
    Sync,
    /// The master restarts from its disk (an older snapshot or append-only file; an empty
    /// keyspace where none was written), with a new replication ID.
    Restart,
    /// The replica is promoted: its copy, as of its last sync, with a new replication ID.
    Failover,
    /// `DEBUG LOADAOF` of an older append-only file: the disk's copy, same replication ID.
    LoadAof,
    /// `RESTORE` of an older dump of the fence: the disk's fence, same replication ID.
    RestoreFence,
    /// The lock key is evicted (or deleted by hand).
    EvictLock,
    /// The fence key is evicted (or deleted, or past its retention).
    EvictFence,
    /// The server clock steps back one ms.
    ClockBack,
    /// The server clock jumps one ms ahead of real time (server and client clocks disagree).
    ClockAhead,
}

impl Fault {
    /// Every fault.
    pub const ALL: [Fault; 10] = [
        Fault::Save,
        Fault::Sync,
        Fault::Restart,
        Fault::Failover,
        Fault::LoadAof,
        Fault::RestoreFence,
        Fault::EvictLock,
        Fault::EvictFence,
        Fault::ClockBack,
        Fault::ClockAhead,
    ];
}

/// A broken rule built into the model, which the checker must catch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mutant {
    /// Tokens counted by `INCR`, with no clock floor.
    IncrWithoutClockFloor,
    /// `INCR`, trusted while the replication ID it was minted under is the server's, a clock
    /// token otherwise (the rule before the stream).
    ReplicationIdRule,
    /// Release deletes the lock key whoever holds it.
    ReleaseWithoutOwnerCheck,
    /// A renewal sets the expiry without reading the epoch (`SET … IFEQ owner PX ttl`).
    RenewalWithoutEpochOrder,
    /// A validity deadline counted from the reply instead of from before the send.
    DeadlineFromReply,
    /// An observer reports whatever leader it reads, older terms included.
    ObserverWithoutTermOrder,
}

impl Mutant {
    /// Every mutant, with its name on the command line.
    pub const ALL: [(&'static str, Mutant); 6] = [
        ("incr-without-clock-floor", Mutant::IncrWithoutClockFloor),
        ("replication-id-rule", Mutant::ReplicationIdRule),
        (
            "release-without-owner-check",
            Mutant::ReleaseWithoutOwnerCheck,
        ),
        (
            "renewal-without-epoch-order",
            Mutant::RenewalWithoutEpochOrder,
        ),
        ("deadline-from-reply", Mutant::DeadlineFromReply),
        (
            "observer-without-term-order",
            Mutant::ObserverWithoutTermOrder,
        ),
    ];

    /// Its name.
    pub fn name(self) -> &'static str {
        Mutant::ALL
            .iter()
            .find(|(_, m)| *m == self)
            .map_or("?", |(name, _)| name)
    }
}

/// A check's configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Its name in reports.
    pub name: &'static str,
    /// Clients.
    pub clients: u8,
    /// The lease's ttl, ms.
    pub ttl: i64,
    /// The ttl a holder may re-time its lease to (a new epoch).
    pub long_ttl: i64,
    /// The drift bound, ms: the server clock may run ahead of the clients' by this much over a
    /// lease, and a client counts its validity as ttl less this.
    pub drift: i64,
    /// Sequences per ms (1000 in the protocol; small here, so carries happen).
    pub seq_limit: u32,
    /// How far the server clock may step back in all, ms.
    pub max_step_back: i64,
    /// The faults the checker may take.
    pub faults: Vec<Fault>,
    /// Faults per history at most.
    pub max_faults: u8,
    /// Requests and replies may be lost, and a client may give up on an acquire.
    pub losses: bool,
    /// The server's steps run as they are sent, and their replies arrive at once: no
    /// interleaving between a client and the server (writes to the resource may still be
    /// late). For the checks of what the server keeps, where the network's timing is not what
    /// is checked; it shrinks their state space a hundredfold.
    pub prompt: bool,
    /// The clients that grant by script (a bit per client): a refused grant by script leaves
    /// the fence as it was, where the grant by transaction (the others) burns one ID of a
    /// fence that exists.
    pub scripted: u8,
    /// Messages in flight at most: a client sends nothing while this many are.
    pub max_in_flight: usize,
    /// Holders renew, and may re-time their lease (a new epoch).
    pub renewals: bool,
    /// Holders write to the resource.
    pub writes: bool,
    /// The lock is an election: grants write the leader record, an observer reads it.
    pub election: bool,
    /// Attempts per client at most.
    pub max_attempts: u8,
    /// Real time runs this many ms at most.
    pub max_time: i64,
    /// The broken rule, if any.
    pub mutant: Option<Mutant>,
    /// Explore past the stated bounds too (to show what they are for).
    pub past_bounds: bool,
}

/// Real time at the start (so server clocks that step back stay positive).
pub const START: i64 = 10;

impl Config {
    /// The base every check starts from: two clients, ttl 2 ms, drift 1 ms, no faults.
    pub fn base(name: &'static str) -> Config {
        Config {
            name,
            clients: 2,
            ttl: 2,
            long_ttl: 4,
            drift: 1,
            seq_limit: 2,
            max_step_back: 2,
            faults: Vec::new(),
            max_faults: 2,
            losses: false,
            prompt: false,
            scripted: 0,
            max_in_flight: 3,
            renewals: false,
            writes: true,
            election: false,
            max_attempts: 2,
            max_time: 3,
            mutant: None,
            past_bounds: false,
        }
    }

    /// The checks CI runs, each with the faults that threaten its properties.
    ///
    /// - `restore`: data put back older (a restart from an older snapshot, `DEBUG LOADAOF`,
    ///   `RESTORE`), under grants, releases and fenced writes;
    /// - `failover`: a failover to a lagging replica, and a clock that steps back;
    /// - `evict`: the lock and the fence evicted, clocks that step back or run ahead;
    /// - `delays`: late requests, late and lost replies, attempts given up and abandoned,
    ///   clocks that disagree within the drift bound;
    /// - `renewals`: renewals and re-timed leases (a new epoch) delivered in any order;
    /// - `election`: the storage faults under an election and its observer.
    pub fn checks() -> Vec<Config> {
        let restore = Config {
            faults: vec![
                Fault::Save,
                Fault::Restart,
                Fault::LoadAof,
                Fault::RestoreFence,
            ],
            prompt: true,
            max_time: 2,
            ..Config::base("restore")
        };
        let failover = Config {
            faults: vec![Fault::Sync, Fault::Failover, Fault::ClockBack],
            prompt: true,
            max_time: 2,
            ..Config::base("failover")
        };
        let evict = Config {
            faults: vec![
                Fault::EvictLock,
                Fault::EvictFence,
                Fault::ClockBack,
                Fault::ClockAhead,
            ],
            prompt: true,
            ..Config::base("evict")
        };
        let delays = Config {
            faults: vec![Fault::ClockAhead],
            losses: true,
            writes: false,
            max_in_flight: 2,
            max_faults: 1,
            ..Config::base("delays")
        };
        let renewals = Config {
            faults: vec![Fault::ClockAhead],
            renewals: true,
            writes: false,
            max_in_flight: 2,
            max_faults: 1,
            ..Config::base("renewals")
        };
        let election = Config {
            faults: vec![
                Fault::Save,
                Fault::Sync,
                Fault::Restart,
                Fault::Failover,
                Fault::LoadAof,
                Fault::EvictLock,
            ],
            writes: false,
            election: true,
            prompt: true,
            ..Config::base("election")
        };
        vec![restore, failover, evict, delays, renewals, election]
    }

    /// The deeper checks, run on demand: each check with one more ms of time and one more
    /// fault per history.
    pub fn deep_checks() -> Vec<Config> {
        Config::checks()
            .into_iter()
            .map(|c| Config {
                max_time: c.max_time + 1,
                max_faults: c.max_faults + 1,
                ..c
            })
            .collect()
    }

    /// The check that must catch a mutant: the faults that expose it, nothing more.
    pub fn for_mutant(mutant: Mutant) -> Config {
        let mut c = Config::base(mutant.name());
        c.mutant = Some(mutant);
        c.prompt = true;
        match mutant {
            Mutant::IncrWithoutClockFloor => {
                c.faults = vec![Fault::Save, Fault::RestoreFence];
            }
            Mutant::ReplicationIdRule => {
                c.faults = vec![Fault::Save, Fault::LoadAof];
            }
            Mutant::ReleaseWithoutOwnerCheck => {
                c.faults = vec![Fault::EvictLock];
                c.writes = false;
            }
            Mutant::RenewalWithoutEpochOrder => {
                c.faults = Vec::new();
                c.prompt = false;
                c.losses = true;
                c.renewals = true;
                c.writes = false;
                c.drift = 0;
                c.ttl = 2;
                c.long_ttl = 4;
            }
            Mutant::DeadlineFromReply => {
                c.faults = Vec::new();
                c.prompt = false;
                c.writes = false;
                c.losses = true;
            }
            Mutant::ObserverWithoutTermOrder => {
                c.faults = vec![Fault::Save, Fault::LoadAof];
                c.election = true;
                c.writes = false;
            }
        }
        c
    }

    /// The checks past the stated bounds: each must find the limit the documentation states.
    pub fn limits() -> Vec<(&'static str, Config)> {
        vec![
            (
                "fence-lost-twice-in-one-ms",
                Config {
                    faults: vec![Fault::EvictFence],
                    past_bounds: true,
                    prompt: true,
                    writes: false,
                    ..Config::base("fence-lost-twice-in-one-ms")
                },
            ),
            (
                "fence-put-back-within-the-ms-of-a-grant",
                Config {
                    faults: vec![Fault::Save, Fault::RestoreFence, Fault::ClockBack],
                    past_bounds: true,
                    prompt: true,
                    writes: false,
                    ..Config::base("fence-put-back-within-the-ms-of-a-grant")
                },
            ),
        ]
    }
}

//! What the bench runs: the scenarios, the libraries that can do each one's job, the
//! configuration of a run, and what every scenario is given.

use std::str::FromStr;
use std::time::Duration;

use redis::aio::MultiplexedConnection;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scenario {
    /// One task, acquire + release cycles on one name.
    Uncontended1,
    /// 32 tasks on 32 distinct names, one shared client.
    Uncontended32,
    /// 8 workers on one name, each holding it about 1 ms.
    Contended8,
    /// 16 tasks sharing 4 leased permits of one semaphore, each holding one about 1 ms.
    Semaphore4of16,
    /// One task: a reentrant lock taken, entered twice more, and given back three times.
    ReentrantDepth3,
    /// 32 tasks locking random items of 10 000 through 1 stripe (one global lock).
    Striped1,
    /// The same through 16 stripes.
    Striped16,
    /// The same through 256 stripes.
    Striped256,
    /// The same through 1024 stripes.
    Striped1024,
    /// 8 workers on one fair lock, each holding it ~1ms.
    Fair8,
    /// 32 readers and 1 writer on one read-write lock.
    RwReads,
    /// 1000 waiters on one latch, opened by one count down, round after round.
    Latch1000,
    /// 16 tasks taking 3 of 6 names at a time.
    Multi3,
    /// One holder keeps a name for a few seconds while 1000 tasks of one process wait.
    Waiters1000,
    /// One process holds 10 000 leases with automatic renewal for a few renewal periods.
    Renew10000,
    /// The seckill sale, round after round: 20 workers make 300 purchase attempts on a stock
    /// of 20.
    Seckill,
    /// 32 tasks changing one counter as fast as they can.
    CounterContended,
    /// 1000 requests at once for a cold cache key, over 4 clients, round after round.
    Stampede1000,
    /// One task's lock cycles over 3 independent masters, each 1 ms away (Redlock).
    Redlock3,
    /// One task's lock cycles over 5 independent masters, each 1 ms away.
    Redlock5,
    /// As `Redlock5`, with one master 50 ms away.
    Redlock5Slow,
    /// 32 tasks' lock cycles on a Redis Cluster of 3 masters, each task on its own name.
    ClusterUncontended32,
    /// Leaders cut off (as by a SIGKILL) and stepping down, candidates waiting, an observer
    /// following; then 1000 observers of a quiet election.
    ElectionFailover,
    /// A holder that hangs under a heartbeat, its guard alive, while a waiter of another
    /// client asks for the name, round after round: from its last beat until the waiter's
    /// grant.
    HeartbeatTakeover,
}

impl Scenario {
    /// Every scenario, in run order.
    pub const ALL: [Scenario; 24] = [
        Scenario::Uncontended1,
        Scenario::Uncontended32,
        Scenario::Contended8,
        Scenario::Semaphore4of16,
        Scenario::ReentrantDepth3,
        Scenario::Striped1,
        Scenario::Striped16,
        Scenario::Striped256,
        Scenario::Striped1024,
        Scenario::Fair8,
        Scenario::RwReads,
        Scenario::Latch1000,
        Scenario::Multi3,
        Scenario::Waiters1000,
        Scenario::Renew10000,
        Scenario::Seckill,
        Scenario::CounterContended,
        Scenario::Stampede1000,
        Scenario::Redlock3,
        Scenario::Redlock5,
        Scenario::Redlock5Slow,
        Scenario::ClusterUncontended32,
        Scenario::ElectionFailover,
        Scenario::HeartbeatTakeover,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Uncontended1 => "uncontended-1",
            Scenario::Uncontended32 => "uncontended-32",
            Scenario::Contended8 => "contended-8",
            Scenario::Semaphore4of16 => "semaphore-4of16",
            Scenario::ReentrantDepth3 => "reentrant-depth-3",
            Scenario::Striped1 => "striped-1",
            Scenario::Striped16 => "striped-16",
            Scenario::Striped256 => "striped-256",
            Scenario::Striped1024 => "striped-1024",
            Scenario::Fair8 => "fair-8",
            Scenario::RwReads => "rw-reads",
            Scenario::Latch1000 => "latch-1000",
            Scenario::Multi3 => "multi-3",
            Scenario::Waiters1000 => "waiters-1000",
            Scenario::Renew10000 => "renew-10000",
            Scenario::Seckill => "seckill",
            Scenario::CounterContended => "counter-contended",
            Scenario::Stampede1000 => "stampede-1000",
            Scenario::Redlock3 => "redlock-3",
            Scenario::Redlock5 => "redlock-5",
            Scenario::Redlock5Slow => "redlock-5-slow",
            Scenario::ClusterUncontended32 => "cluster-uncontended-32",
            Scenario::ElectionFailover => "election-failover",
            Scenario::HeartbeatTakeover => "heartbeat-takeover",
        }
    }

    /// The libraries that can do this scenario's job.
    pub fn libraries(self) -> &'static [Library] {
        use Library::*;
        match self {
            Scenario::Uncontended1 | Scenario::Uncontended32 | Scenario::Contended8 => &[
                Fenced,
                FencedScripted,
                FencedNoScripts,
                FencedUnfenced,
                Raw,
                Rslock,
                Redlock,
            ],
            Scenario::Waiters1000 => &[Fenced, FencedUnfenced, Raw, Rslock],
            Scenario::Renew10000 => &[Fenced, FencedNoScripts],
            Scenario::Semaphore4of16
            | Scenario::ReentrantDepth3
            | Scenario::Striped1
            | Scenario::Striped16
            | Scenario::Striped256
            | Scenario::Striped1024
            | Scenario::Fair8
            | Scenario::RwReads
            | Scenario::Latch1000
            | Scenario::Multi3 => &[Fenced],
            Scenario::Seckill => &[FencedTx, FencedScript, FencedLock],
            Scenario::CounterContended => &[FencedTx, FencedScript],
            Scenario::Stampede1000 => &[FencedCache, CacheAside],
            Scenario::Redlock3 | Scenario::Redlock5 | Scenario::Redlock5Slow => {
                &[Fenced, Raw, Rslock, Redlock]
            }
            Scenario::ClusterUncontended32
            | Scenario::ElectionFailover
            | Scenario::HeartbeatTakeover => &[Fenced],
        }
    }

    /// The libraries left out, and why.
    pub fn not_applicable(self) -> &'static [(Library, &'static str)] {
        use Library::*;
        match self {
            Scenario::Waiters1000 => &[(
                Redlock,
                "synchronous: 1000 waiters would need 1000 OS threads, each sleeping in thread::sleep",
            )],
            Scenario::Renew10000 => &[
                (
                    Raw,
                    "no renewal: the hand-written floor only acquires and releases",
                ),
                (
                    Rslock,
                    "extend() only, no automatic renewal: the caller would need a timer per lock",
                ),
                (Redlock, "no extend and no renewal"),
            ],
            Scenario::Semaphore4of16 => &[
                (Raw, "a plain lock only"),
                (Rslock, "a plain lock only: no semaphore"),
                (Redlock, "a plain lock only: no semaphore"),
            ],
            Scenario::ReentrantDepth3 => &[
                (Raw, "a plain lock only"),
                (
                    Rslock,
                    "no re-entry: a second lock() by the holder waits for itself",
                ),
                (
                    Redlock,
                    "no re-entry: a second lock() by the holder waits for itself",
                ),
            ],
            Scenario::ElectionFailover => &[
                (Raw, "no election"),
                (Rslock, "no election: a lock, without terms or observers"),
                (Redlock, "no election: a lock, without terms or observers"),
            ],
            Scenario::HeartbeatTakeover => &[
                (
                    Raw,
                    "no heartbeat: the hand-written floor only acquires and releases",
                ),
                (
                    Rslock,
                    "no heartbeat: extend() only, no automatic renewal to hold back",
                ),
                (Redlock, "no heartbeat: no extend and no renewal"),
            ],
            Scenario::ClusterUncontended32 => &[
                (Raw, "written for one server"),
                (Rslock, "no Redis Cluster mode"),
                (Redlock, "no Redis Cluster mode"),
            ],
            _ => &[],
        }
    }
}

impl FromStr for Scenario {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown scenario {s:?}; known: {}",
                    Scenario::ALL.map(Scenario::name).join(", ")
                )
            })
    }
}

/// An implementation under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Library {
    /// This project's lock.
    Fenced,
    /// This project's lock on a client with `counted_grants(false)`: granted by script.
    FencedScripted,
    /// This project's lock on a client built without scripts (`without_scripts`): each step
    /// a `WATCH`/`MULTI`/`EXEC` transaction.
    FencedNoScripts,
    /// This project's unfenced lock (`Lock::unfenced`): no fencing token.
    FencedUnfenced,
    /// The hand-written redis-rs lock floor.
    Raw,
    /// rslock 0.10 (async, redis-rs 1.x).
    Rslock,
    /// redlock 2.0 (redlock-rs; synchronous, run on blocking threads).
    Redlock,
    /// This project's WATCH/MULTI/EXEC transaction.
    FencedTx,
    /// This project's atomic script (`decrement_if_at_least`).
    FencedScript,
    /// This project's lock around read-check-write, with fenced writes.
    FencedLock,
    /// This project's `Cache::get_or_compute`.
    FencedCache,
    /// Cache-aside without protection: GET, and on a miss query the database and SET.
    CacheAside,
}

impl Library {
    /// Every library.
    pub const ALL: [Library; 12] = [
        Library::Fenced,
        Library::FencedScripted,
        Library::FencedNoScripts,
        Library::FencedUnfenced,
        Library::Raw,
        Library::Rslock,
        Library::Redlock,
        Library::FencedTx,
        Library::FencedScript,
        Library::FencedLock,
        Library::FencedCache,
        Library::CacheAside,
    ];

    /// The name used in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Library::Fenced => "fenced",
            Library::FencedScripted => "fenced-scripted",
            Library::FencedNoScripts => "fenced-noscripts",
            Library::FencedUnfenced => "fenced-unfenced",
            Library::Raw => "raw",
            Library::Rslock => "rslock",
            Library::Redlock => "redlock",
            Library::FencedTx => "fenced-tx",
            Library::FencedScript => "fenced-script",
            Library::FencedLock => "fenced-lock",
            Library::FencedCache => "fenced-cache",
            Library::CacheAside => "cache-aside",
        }
    }
}

impl FromStr for Library {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Library::ALL
            .into_iter()
            .find(|l| l.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown library {s:?}; known: {}",
                    Library::ALL.map(Library::name).join(", ")
                )
            })
    }
}

/// What to run, and for how long.
#[derive(Clone, Debug)]
pub struct Config {
    /// Measured time per (scenario, library) in the throughput scenarios.
    pub duration: Duration,
    /// Unmeasured time before it.
    pub warmup: Duration,
    /// How long the holder keeps the lock in `waiters-1000`.
    pub hold: Duration,
    /// Scenarios to run.
    pub scenarios: Vec<Scenario>,
    /// Libraries to run.
    pub libraries: Vec<Library>,
    /// Runs of each pair; the libraries take turns, in alternating order, so drift of the
    /// machine's speed hits all of them alike. The report holds each pair's median run.
    pub repeat: usize,
    /// fenced's clients wake waiters by keyspace events and release without `PUBLISH`
    /// (connecting turns the events on, so every library runs against a server sending them).
    pub keyspace_events: bool,
    /// How many leases `renew-10000` holds: 10,000, its name; fewer where only the row's
    /// sanity counts (the smoke test).
    pub renew_leases: usize,
}

/// What every scenario gets: the server's URL and a few shared connections.
pub(crate) struct Env {
    pub(crate) url: String,
    pub(crate) fenced: fenced::Client,
    /// A client that grants the lock by script (`counted_grants(false)`).
    pub(crate) scripted: fenced::Client,
    /// A client that sends no scripts (`without_scripts`).
    pub(crate) no_scripts: fenced::Client,
    pub(crate) raw: MultiplexedConnection,
}

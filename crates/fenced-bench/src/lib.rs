//! Benchmarks of `fenced` against the raw redis-rs floor and the Rust peers (rslock 0.10,
//! redlock 2.0), measured side by side in one run on one redis-server that the harness
//! starts itself, so the machine's noise cancels in the ratios.
//!
//! Scenarios ([`Scenario`]):
//! - `uncontended-1`, `uncontended-32`: 1 task / 32 tasks on distinct names, acquire +
//!   release as fast as they can;
//! - `contended-8`: 8 workers on one name, each holding it about 1 ms;
//! - `semaphore-4of16`: 16 tasks sharing 4 leased permits, each holding one about 1 ms
//!   (fenced only: no Rust peer has a semaphore);
//! - `reentrant-depth-3`: take a reentrant lock, enter it twice more, give all three back
//!   (fenced only: no Rust peer re-enters);
//! - `striped-1`, `striped-16`, `striped-256`: 32 tasks locking random items of 10 000
//!   through 1, 16 or 256 lock stripes (lock segments: contention against key count);
//! - `fair-8` (fairness, max against mean wait; p50 is the MEAN wait here), `rw-reads` (reads/s
//!   of 32 readers; p50/p99/max are the one writer's waits), `latch-1000` (wake-up of 1000
//!   waiters after the count down; ops/s = rounds/s), `multi-3` (3-name locks under contention);
//! - `waiters-1000`: one holder keeps a name for a few seconds while 1000 tasks wait; what
//!   waiting costs Redis and the client, then how long until all had the lock once;
//! - `renew-10000`: 10 000 leases renewed automatically for a few renewal periods;
//! - `seckill`: the seckill sale, round after round (20 workers, 300 attempts, stock 20), by
//!   `fenced-tx` (transaction), `fenced-script` (`decrement_if_at_least`) and `fenced-lock`
//!   (a lock around read-check-write with fenced writes);
//! - `counter-contended`: 32 tasks changing one counter, `fenced-tx` against `fenced-script`;
//! - `stampede-1000`: 1000 requests at once for a cold cache key over 4 clients, the database a
//!   20 ms query: `fenced-cache` (`Cache::get_or_compute`) against `cache-aside` (GET, and on
//!   a miss query and SET); database queries per round and request latency;
//! - `redlock-3`: one task's lock cycles over 3 independent masters, each behind a proxy that
//!   delays its replies by 1 ms: `fenced` (`Client::redlock_builder`) against the raw floor
//!   (parallel `SET NX PX` decided at the majority, no tokens), rslock and redlock-rs given
//!   the same 3 URLs; `redlock-5` the same over 5 masters, and
//!   `redlock-5-slow` with one of the 5 masters 50 ms away instead of 1 ms;
//! - `cluster-uncontended-32`: `uncontended-32`'s cycles by `fenced` on a Redis Cluster of 3
//!   masters (`Client::cluster_builder`), to set against the same run's one-server row. rslock
//!   and redlock-rs have no cluster mode;
//! - `election-failover`: leaders cut off as by a SIGKILL (300 ms leases) and stepping down
//!   while candidates wait, an observer following: cut to next leader, step down to next
//!   leader, grant to observer (p50/p99 columns), then the Redis commands per second of 1000
//!   observers of a quiet election (fenced only: no peer has elections);
//! - `heartbeat-takeover`: a holder with a 500 ms lease and a 300 ms heartbeat beats once and
//!   hangs, its guard alive, while a waiter of another client asks for the name: from the
//!   last beat until the waiter's grant, p50 and max against the target of the heartbeat, a
//!   ttl and 100 ms (fenced only: no peer has a heartbeat).
//!
//! Libraries ([`Library`]): `fenced`; `raw`, the same cycle written by hand with redis-rs
//! (`SET NX PX`, then `EVALSHA` compare-and-delete; waiting by 1 ms polling); `rslock`;
//! `redlock` (synchronous, on blocking threads). Pairs a library cannot do are listed with the
//! reason in [`Report::not_applicable`].

mod charts;
mod cluster;
mod election;
mod family;
mod heartbeat;
mod locks;
mod measure;
mod optimistic;
mod peers;
mod raw;
mod redlock3;
mod renewal;
mod report;
mod run;
mod scenario;
mod stampede;
mod waiters;

pub use charts::write_charts;
pub use raw::RawLock;
pub use report::{NotApplicable, Report, Row};
pub use run::run;
pub use scenario::{Config, Library, Scenario};

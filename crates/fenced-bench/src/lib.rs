//! Benchmarks of `fenced` against the raw redis-rs floor, measured side by side in one run on
//! one redis-server that the harness starts itself, so the machine's noise cancels in the
//! ratios.
//!
//! Scenarios ([`Scenario`]):
//! - `uncontended-1`: one task, acquire + release cycles on one name;
//! - `uncontended-32`: 32 tasks, each on its own name, sharing one client;
//! - `contended-8`: 8 tasks on one name, each holding it about 1 ms;
//! - `seckill`: the seed's sale, round after round (20 workers, 300 attempts, stock 20), by
//!   `fenced-tx` (transaction), `fenced-script` (`decrement_if_at_least`) and `fenced-lock`
//!   (a lock around read-check-write with fenced writes);
//! - `counter-contended`: 32 tasks changing one counter, `fenced-tx` against `fenced-script`.
//!
//! Libraries ([`Library`]): `fenced`, and `raw`: the same cycle written by hand with redis-rs
//! (`SET NX PX`, then `EVALSHA` compare-and-delete; under contention, 1 ms polling).

mod optimistic;
mod raw;
mod report;
mod run;

pub use report::{Report, Row};
pub use run::{Config, Library, Scenario, run};

//! Benchmarks of `fenced` against the raw redis-rs floor, measured side by side in one run on
//! one redis-server that the harness starts itself, so the machine's noise cancels in the
//! ratios.
//!
//! Scenarios ([`Scenario`]):
//! - `uncontended-1`: one task, acquire + release cycles on one name;
//! - `uncontended-32`: 32 tasks, each on its own name, sharing one client;
//! - `contended-8`: 8 tasks on one name, each holding it about 1 ms.
//!
//! Libraries ([`Library`]): `fenced`, and `raw`: the same cycle written by hand with redis-rs
//! (`SET NX PX`, then `EVALSHA` compare-and-delete; under contention, 1 ms polling).

mod raw;
mod report;
mod run;

pub use report::{Report, Row};
pub use run::{Config, Library, Scenario, run};

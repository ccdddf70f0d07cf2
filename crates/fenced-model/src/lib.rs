//! A model of fenced's lock protocol, checked by [stateright] over every interleaving of its
//! clients, the server, the network and the faults, to a bound.
//!
//! The fault suite (`fenced-chaos`) checks the histories a run happened to take. This model
//! checks every history within its bounds: N clients that acquire, renew, re-time, release,
//! give up and abandon, and write to a fenced resource; one Redis master with a snapshot on
//! disk and a lagging replica; and faults the checker may take at any step (a client paused
//! past its deadline, a request or reply lost or late, a failover to a lagging replica, a
//! restart from an older snapshot, `DEBUG LOADAOF`, `RESTORE` of an older fence, eviction of
//! the lock or the fence, the server clock stepping back or running ahead).
//!
//! - [`fence`]: the token rule, shared with the conformance test that replays it against a
//!   real server;
//! - [`config`]: what each check explores, the mutants, the limits;
//! - [`model`]: the steps and the properties, over [`state`] and [`action`]; [`liveness`]:
//!   the fair run;
//! - [`trace`]: counterexamples in words.
//!
//! `docs/reliability.md` ("The protocol, model-checked") states what it covers, what it does
//! not, and the bounds.
//!
//! ```
//! use fenced_model::{check, config::Config};
//!
//! let outcome = check(Config { max_time: 2, ..Config::base("tiny") });
//! assert!(outcome.failures.is_empty());
//! assert!(outcome.unique_states > 10);
//! ```

pub mod action;
pub mod config;
pub mod fence;
pub mod liveness;
pub mod model;
pub mod state;
pub mod trace;

use stateright::{Checker, HasDiscoveries, Model};

use config::Config;
use model::Protocol;

/// What a check found.
#[derive(Debug)]
pub struct Outcome {
    /// The check's name.
    pub name: &'static str,
    /// Distinct states visited.
    pub unique_states: usize,
    /// States visited, with repeats.
    pub states: usize,
    /// The longest history explored.
    pub max_depth: usize,
    /// Each property that failed, with its counterexample's trace (past the stated bounds: the
    /// repeated token found there).
    pub failures: Vec<(&'static str, String)>,
    /// Each `sometimes` property that no history reached (the model would be vacuous).
    pub unreached: Vec<&'static str>,
}

/// Explores every state the configuration allows, breadth first (so each counterexample is a
/// shortest one), and reports.
pub fn check(config: Config) -> Outcome {
    run(config, HasDiscoveries::All, 2)
}

/// The same, stopping at the first property that fails (for a mutant, which must fail one),
/// on one thread: strictly level by level, so that the trace is a shortest one.
pub fn check_until_failure(config: Config) -> Outcome {
    run(config, HasDiscoveries::AnyFailures, 1)
}

fn run(config: Config, finish: HasDiscoveries, threads: usize) -> Outcome {
    let name = config.name;
    let model = Protocol::new(config);
    let properties = model.properties();
    let checker = model
        .clone()
        .checker()
        .threads(threads)
        .finish_when(finish)
        .spawn_bfs()
        .join();
    let mut failures = Vec::new();
    let mut unreached = Vec::new();
    for property in properties {
        let found = checker.discovery(property.name);
        let failing = property.expectation.discovery_is_failure();
        let counted = failing || property.name == model::LIMIT;
        match found {
            Some(path) if counted => {
                // The path up to the first state that decides the property: the checker may
                // report it at a later state of the same history.
                let mut steps = path.into_vec();
                let decided = steps
                    .iter()
                    .position(|(state, _)| (property.condition)(&model, state) != failing);
                if let Some(at) = decided {
                    steps.truncate(at + 1);
                }
                failures.push((property.name, trace::render(&model, &steps)));
            }
            None if !failing && property.name != model::LIMIT => unreached.push(property.name),
            _ => {}
        }
    }
    Outcome {
        name,
        unique_states: checker.unique_state_count(),
        states: checker.state_count(),
        max_depth: checker.max_depth(),
        failures,
        unreached,
    }
}

//! The bounded model check CI runs: every property holds in every check, every mutant is
//! caught with a counterexample, and past the stated bounds a token does repeat (the limits
//! the documentation states are real, and the bounds are what keeps them away).

use fenced_model::config::{Config, Mutant};
use fenced_model::{check, check_until_failure};

#[test]
fn every_property_holds_in_every_bounded_check() {
    for config in Config::checks() {
        let outcome = check(config);
        println!(
            "{}: {} distinct states, depth {}",
            outcome.name, outcome.unique_states, outcome.max_depth
        );
        for (property, trace) in &outcome.failures {
            println!("{property}:\n{trace}");
        }
        assert!(
            outcome.failures.is_empty(),
            "{}: a property failed",
            outcome.name
        );
        assert!(
            outcome.unreached.is_empty(),
            "{}: never reached {:?} (the check is vacuous)",
            outcome.name,
            outcome.unreached
        );
    }
}

#[test]
fn every_mutant_gives_a_counterexample() {
    for (name, mutant) in Mutant::ALL {
        let outcome = check_until_failure(Config::for_mutant(mutant));
        let (property, trace) = outcome
            .failures
            .first()
            .unwrap_or_else(|| panic!("mutant {name} was not caught"));
        println!("{name}: {property}\n{trace}");
        assert!(trace.lines().count() > 2, "{name}: the trace is empty");
    }
}

#[test]
fn past_the_stated_bounds_a_token_repeats() {
    for (name, config) in Config::limits() {
        let outcome = check_until_failure(config);
        let trace = outcome
            .failures
            .iter()
            .find(|(p, _)| *p == fenced_model::model::LIMIT)
            .map(|(_, t)| t.clone())
            .unwrap_or_else(|| panic!("{name}: no repeated token past the bound"));
        println!("{name}:\n{trace}");
        assert!(trace.contains("past the stated bound"), "{name}: {trace}");
    }
}

//! `fenced-model`: checks the protocol's model and prints the state counts, the mutants'
//! counterexamples, and the limits past the stated bounds.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use fenced_model::config::{Config, Mutant};
use fenced_model::{Outcome, check, check_until_failure};

/// Model-checks fenced's lock protocol.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The deeper checks (one more ms of time and one more fault per history).
    #[arg(long)]
    deep: bool,
    /// Check this mutant only (it must be caught); `--list-mutants` names them.
    #[arg(long)]
    mutant: Option<String>,
    /// Name the mutants.
    #[arg(long)]
    list_mutants: bool,
    /// Also check past the stated bounds, and print what breaks there.
    #[arg(long)]
    limits: bool,
    /// Run only the check of this name (`restore`, `evict`, `delays`, `renewals`, `election`).
    #[arg(long)]
    check: Option<String>,
    /// Let real time run this many ms instead of the check's own bound.
    #[arg(long)]
    max_time: Option<i64>,
    /// Skip the mutants.
    #[arg(long)]
    no_mutants: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    if args.list_mutants {
        for (name, _) in Mutant::ALL {
            println!("{name}");
        }
        return ExitCode::SUCCESS;
    }
    let mut ok = true;
    if let Some(name) = &args.mutant {
        let Some((_, mutant)) = Mutant::ALL.iter().find(|(n, _)| n == name) else {
            eprintln!("fenced-model: no mutant {name:?}; --list-mutants names them");
            return ExitCode::from(64);
        };
        return report_mutant(*mutant);
    }
    let checks = if args.deep {
        Config::deep_checks()
    } else {
        Config::checks()
    };
    println!("| check | distinct states | states | depth | seconds | properties |");
    println!("|---|---|---|---|---|---|");
    for mut config in checks {
        if args.check.as_ref().is_some_and(|name| name != config.name) {
            continue;
        }
        if let Some(ms) = args.max_time {
            config.max_time = ms;
        }
        let started = Instant::now();
        let outcome = check(config);
        ok &= print_row(&outcome, started);
    }
    for (name, mutant) in Mutant::ALL {
        if args.no_mutants {
            break;
        }
        println!("\nmutant {name}:");
        ok &= report_mutant(mutant) == ExitCode::SUCCESS;
    }
    if args.limits {
        for (name, config) in Config::limits() {
            let outcome = check(config);
            println!("\npast the bounds, {name}:");
            for (property, trace) in &outcome.failures {
                println!("  {property}:\n{trace}");
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_row(outcome: &Outcome, started: Instant) -> bool {
    let verdict = if outcome.failures.is_empty() && outcome.unreached.is_empty() {
        "all hold".to_string()
    } else {
        let mut words: Vec<String> = outcome
            .failures
            .iter()
            .map(|(p, _)| format!("FAILED: {p}"))
            .collect();
        words.extend(
            outcome
                .unreached
                .iter()
                .map(|p| format!("never reached: {p}")),
        );
        words.join("; ")
    };
    println!(
        "| {} | {} | {} | {} | {:.1} | {} |",
        outcome.name,
        outcome.unique_states,
        outcome.states,
        outcome.max_depth,
        started.elapsed().as_secs_f64(),
        verdict
    );
    for (property, trace) in &outcome.failures {
        eprintln!("{property}:\n{trace}");
    }
    outcome.failures.is_empty() && outcome.unreached.is_empty()
}

fn report_mutant(mutant: Mutant) -> ExitCode {
    let started = Instant::now();
    let outcome = check_until_failure(Config::for_mutant(mutant));
    match outcome.failures.first() {
        Some((property, trace)) => {
            println!(
                "caught ({} distinct states, {:.1} s): {property}\n{trace}",
                outcome.unique_states,
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        None => {
            println!("NOT caught ({} distinct states)", outcome.unique_states);
            ExitCode::FAILURE
        }
    }
}

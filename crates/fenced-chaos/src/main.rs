//! `fenced-chaos`: runs fenced's workloads on real redis-servers while nemeses inject faults,
//! records the history, checks it, and prints the figures.
//!
//! ```text
//! fenced-chaos --quick                  # the CI tier, about 2 minutes
//! fenced-chaos --long                   # the published tier, ≥ 100k critical sections
//! fenced-chaos --workload lock --nemesis pause-holder --duration 30
//! ```
//!
//! Exit status: 0 when every checker passes, 1 when one fails, 64 for bad arguments, 70 when
//! the lab cannot start (no redis-server).

mod admin;
mod check;
mod evict;
mod history;
mod lab;
mod models;
mod mutants;
mod nemesis;
mod ops;
mod report;
mod restore;
mod worker;
mod workload;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::lab::{Lab, Plan};
use crate::nemesis::Nemesis;
use crate::workload::Workload;

/// Faults against fenced, checked.
#[derive(Parser, Debug)]
#[command(name = "fenced-chaos", version, about)]
struct Args {
    /// The CI tier: every workload under every fault kind in turn, about 2 minutes.
    #[arg(long, conflicts_with = "long")]
    quick: bool,
    /// The published tier: every workload under a mixed soak of every fault kind, at least
    /// 100,000 critical sections.
    #[arg(long)]
    long: bool,
    /// Only these workloads (default: all).
    #[arg(long = "workload", value_enum)]
    workloads: Vec<Workload>,
    /// Only these faults (default: all that apply).
    #[arg(long = "nemesis", value_enum)]
    nemeses: Vec<Nemesis>,
    /// Seconds per workload (default: the tier's).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    duration: Option<u64>,
    /// Worker processes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=64))]
    workers: u32,
    /// The `fenced` command for the `run` workload (default: next to this program).
    #[arg(long, value_name = "PATH")]
    fenced_bin: Option<std::path::PathBuf>,
    /// Write the figures as JSON to this file too.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
    /// Write every run's history (the workers' events and the faults, one JSON object per
    /// line) to this file.
    #[arg(long)]
    history: Option<std::path::PathBuf>,
    /// Write every run's operations (invoke, then ok, fail or info; `docs/reliability.md`)
    /// to this file, one JSON object per line: what the third-party checker reads.
    #[arg(long)]
    ops: Option<std::path::PathBuf>,
    /// Run without faults: the strict models apply (at most N holders at once; no certain
    /// overlap), which a run under faults cannot promise.
    #[arg(long, conflicts_with_all = ["nemeses", "mutant"])]
    no_faults: bool,
    /// Play this broken behaviour in worker 0 of a run without faults, in the workload it
    /// breaks; the run must fail, naming the checkers that caught it (`--list-mutants`).
    #[arg(long, value_enum, conflicts_with_all = ["workloads", "quick", "long"])]
    mutant: Option<mutants::Mutant>,
    /// List the mutants, and exit.
    #[arg(long)]
    list_mutants: bool,
    /// Also print failed calls by error kind.
    #[arg(long)]
    markdown: bool,
}

fn main() -> ExitCode {
    let mut argv = std::env::args();
    if argv.nth(1).as_deref() == Some("worker") {
        let config = argv.next().unwrap_or_default();
        return ExitCode::from(u8::try_from(worker::run(&config)).unwrap_or(70));
    }
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) if e.use_stderr() => {
            let _ = e.print();
            return ExitCode::from(64);
        }
        Err(e) => {
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fenced-chaos: {e}");
            return ExitCode::from(70);
        }
    };
    runtime.block_on(async {
        use tokio::signal::unix::{SignalKind, signal};
        // Ended by a signal, the run is dropped, and with it the lab: its workers and
        // servers, each in a process group of its own, would outlive a plain exit.
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            return run(args).await;
        };
        tokio::select! {
            code = run(args) => code,
            _ = term.recv() => ExitCode::from(143),
            _ = int.recv() => ExitCode::from(130),
        }
    })
}

/// The seconds each workload runs in a tier.
fn tier_seconds(workload: Workload, long: bool) -> u64 {
    match (workload, long) {
        (Workload::Lock, false) => 20,
        (Workload::Redlock, false) => 12,
        (Workload::Run, false) => 10,
        (_, false) => 6,
        (Workload::Lock, true) => 180,
        (Workload::Redlock, true) => 120,
        (Workload::Unfenced, true) => 45,
        (_, true) => 60,
    }
}

async fn run(args: Args) -> ExitCode {
    if args.list_mutants {
        for m in mutants::Mutant::ALL {
            println!(
                "{:<28} {} ({} workload)",
                m.name(),
                m.what(),
                m.workload().name()
            );
        }
        return ExitCode::SUCCESS;
    }
    let workloads = if let Some(m) = args.mutant {
        vec![m.workload()]
    } else if args.workloads.is_empty() {
        vec![
            Workload::Lock,
            Workload::LockEvents,
            Workload::LockMixed,
            Workload::Redlock,
            Workload::Reentrant,
            Workload::Fair,
            Workload::Semaphore,
            Workload::Rw,
            Workload::Run,
            Workload::Election,
            Workload::Optimistic,
            Workload::Unfenced,
        ]
    } else {
        args.workloads.clone()
    };
    let fenced_bin = args.fenced_bin.clone().or_else(|| {
        let sibling = std::env::current_exe().ok()?.with_file_name("fenced");
        sibling.exists().then_some(sibling)
    });
    if workloads.contains(&Workload::Run) && fenced_bin.is_none() {
        eprintln!(
            "fenced-chaos: the run workload needs the fenced command: build it (cargo build -p fenced-cli) or pass --fenced-bin"
        );
        return ExitCode::from(70);
    }
    let mut rows = Vec::new();
    let mut failed = false;
    for workload in workloads {
        let nemeses: Vec<Nemesis> = if args.no_faults || args.mutant.is_some() {
            Vec::new()
        } else if !args.nemeses.is_empty() {
            args.nemeses.clone()
        } else if workload == Workload::Unfenced {
            // The unfenced run only shows what pauses do without fencing.
            vec![Nemesis::PauseHolder, Nemesis::StarveRenewal]
        } else {
            Nemesis::ALL.to_vec()
        };
        let nemeses: Vec<Nemesis> = nemeses
            .into_iter()
            .filter(|n| n.applies_to(workload))
            .collect();
        let faultless = nemeses.is_empty();
        let seconds = args
            .duration
            .unwrap_or_else(|| tier_seconds(workload, args.long));
        let plan = Plan {
            workload,
            nemeses,
            mixed: args.long,
            duration: Duration::from_secs(seconds),
            workers: args.workers,
            // `fenced run`'s sections last about 0.7 s, so with as many keys as the others a
            // struck holder's key would mostly have nobody waiting for it: its recovery could
            // not be timed (`report.rs`).
            keys: match (workload, args.long) {
                // Without faults, one contended key: a broken behaviour strikes a holder.
                _ if faultless => 1,
                (Workload::Run, _) => 3,
                (_, true) => 8,
                (_, false) => 4,
            },
            // Without faults no lease may end by accident, even on a loaded machine: the
            // strict models count every overlap.
            ttl: Duration::from_millis(if faultless { 1000 } else { 400 }),
            timeout: Duration::from_millis(if faultless { 500 } else { 150 }),
            wait: Duration::from_secs(if faultless { 10 } else { 2 }),
            work_us: if faultless { 5000 } else { 200 },
            fenced_bin: fenced_bin.clone(),
            mutant: args.mutant,
        };
        eprintln!(
            "fenced-chaos: {} for {seconds}s, {} workers, faults: {}",
            workload.name(),
            plan.workers,
            plan.nemeses
                .iter()
                .map(|n| n.name())
                .collect::<Vec<_>>()
                .join(" ")
        );
        let lab = match Lab::start(plan.clone()).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("fenced-chaos: cannot start the lab: {e}");
                return ExitCode::from(70);
            }
        };
        let bound = lab.call_bound();
        let record = match lab.run().await {
            Ok(r) => r,
            Err(e) => {
                eprintln!("fenced-chaos: {} run failed: {e}", workload.name());
                return ExitCode::from(70);
            }
        };
        let verdict = check::check(
            workload,
            &record,
            u64::try_from(bound.as_nanos()).unwrap_or(u64::MAX),
        );
        if let Some(path) = &args.history
            && let Err(e) = report::append_history(path, workload, &record)
        {
            eprintln!("fenced-chaos: cannot write {}: {e}", path.display());
            return ExitCode::from(70);
        }
        let ops = ops::operations(workload, &record.events);
        if let Some(path) = &args.ops
            && let Err(e) = ops::append(path, workload, &ops)
        {
            eprintln!("fenced-chaos: cannot write {}: {e}", path.display());
            return ExitCode::from(70);
        }
        let strictness = if faultless {
            models::Strictness::Holders(workload.holders())
        } else {
            models::Strictness::Faults
        };
        let third_party = models::check(workload, &ops, strictness);
        let mut failures = verdict.failures(workload);
        if third_party.failed() {
            failures.push(format!("{}: {}", models::CHECKER, third_party.summary()));
        }
        if !failures.is_empty() {
            failed = true;
            eprintln!(
                "fenced-chaos: {} FAILED: {}",
                workload.name(),
                failures.join(", ")
            );
            for line in &record.stderr {
                eprintln!("  {line}");
            }
        }
        rows.push(report::Row::new(
            workload,
            seconds,
            &record,
            verdict,
            third_party,
            failures,
        ));
    }
    report::print(&rows, args.markdown);
    if let (Some(m), Some(row)) = (args.mutant, rows.first()) {
        if row.failures.is_empty() {
            eprintln!("fenced-chaos: mutant {} was NOT caught", m.name());
        } else {
            println!("mutant {} ({}): caught by", m.name(), m.what());
            for f in &row.failures {
                println!("- {f}");
            }
        }
    }
    if let Some(path) = &args.json
        && let Err(e) = report::write_json(path, &rows)
    {
        eprintln!("fenced-chaos: cannot write {}: {e}", path.display());
        return ExitCode::from(70);
    }
    if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

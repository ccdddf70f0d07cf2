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

mod check;
mod history;
mod lab;
mod nemesis;
mod report;
mod worker;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;

use crate::lab::{Lab, Plan};
use crate::nemesis::Nemesis;
use crate::worker::Workload;

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
    runtime.block_on(run(args))
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
    let workloads = if args.workloads.is_empty() {
        vec![
            Workload::Lock,
            Workload::LockEvents,
            Workload::LockMixed,
            Workload::Redlock,
            Workload::Reentrant,
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
        let nemeses: Vec<Nemesis> = if !args.nemeses.is_empty() {
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
                (Workload::Run, _) => 3,
                (_, true) => 8,
                (_, false) => 4,
            },
            ttl: Duration::from_millis(400),
            timeout: Duration::from_millis(150),
            wait: Duration::from_secs(2),
            work_us: 200,
            fenced_bin: fenced_bin.clone(),
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
        let failures = verdict.failures(workload);
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
            workload, seconds, &record, verdict, failures,
        ));
    }
    report::print(&rows, args.markdown);
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

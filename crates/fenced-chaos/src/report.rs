//! The figures: one row per workload, faults with their recovery times, errors by kind.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::check::Verdict;
use crate::history::{Event, Section, Write};
use crate::lab::Record;
use crate::workload::Workload;

/// How one kind of fault went.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FaultFigures {
    /// How many were injected.
    pub count: u64,
    /// How many of them have a recovery time: a fault that struck a holder is timed only if
    /// another worker was already waiting for that key; until somebody asks, nobody can tell
    /// when the key came back.
    pub timed: u64,
    /// Recovery, ms: median. For a fault that struck a holder, from the fault to the grant
    /// of that key to a worker that was waiting for it then; for the others, from the heal
    /// to the next grant on any key.
    pub recovery_p50_ms: f64,
    /// The slowest recovery, ms.
    pub recovery_max_ms: f64,
    /// For `evict`: how many of the workload's keys the servers evicted, over every such
    /// fault (the lab's filler aside). Leases and fences among them are what the fault is
    /// for: a count of 0 means it did not strike.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evicted: Option<u64>,
}

/// One workload's figures.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// The workload.
    pub workload: &'static str,
    /// Seconds it ran.
    pub seconds: u64,
    /// What our checkers found.
    pub verdict: Verdict,
    /// What the third-party checker found (`models.rs`).
    pub third_party: crate::models::Verdict,
    /// Faults by kind.
    pub faults: BTreeMap<&'static str, FaultFigures>,
    /// Failed acquires and releases by error kind.
    pub errors: BTreeMap<String, u64>,
    /// The guarantees it broke (empty: passed).
    pub failures: Vec<String>,
}

impl Row {
    /// Summarises one run.
    pub fn new(
        workload: Workload,
        seconds: u64,
        record: &Record,
        verdict: Verdict,
        third_party: crate::models::Verdict,
        failures: Vec<String>,
    ) -> Row {
        // Grants of sections with effect, sorted. A fault's recovery: for a fault that struck
        // one holder, from its start to the next grant of that key to anyone but the struck
        // holder (another worker, or a section its worker asked for after the fault: `fenced
        // run` starts a new process), which is how long the key stayed unusable. It is timed
        // only when another worker was already waiting for that key: until somebody asks,
        // nobody can tell when the key came back. For the other faults, from the heal to the
        // next grant.
        let mut done: Vec<(u64, u32, u32, u64)> = record
            .events
            .iter()
            .filter_map(|e| match *e {
                Event::Section(ref s) if matches!(s.write, Write::Applied | Write::None) => {
                    Some((s.ok, s.w, s.key, s.inv))
                }
                _ => None,
            })
            .collect();
        done.sort_unstable();
        // Every wait for a key, granted or not: (worker, key, asked, ended).
        let waits: Vec<(u32, u32, u64, u64)> = record
            .events
            .iter()
            .filter_map(|e| match *e {
                Event::Section(ref s) => Some((s.w, s.key, s.inv, s.ok)),
                Event::AcquireFailed {
                    w, key, inv, end, ..
                } => Some((w, key, inv, end)),
                _ => None,
            })
            .collect();
        let mut recoveries: BTreeMap<&'static str, Vec<f64>> = BTreeMap::new();
        let mut faults: BTreeMap<&'static str, FaultFigures> = BTreeMap::new();
        for fault in &record.faults {
            let figures = faults.entry(fault.kind.name()).or_default();
            figures.count += 1;
            if let Some(n) = fault.evicted {
                *figures.evicted.get_or_insert(0) += n;
            }
            let from = if fault.holder.is_some() {
                fault.start
            } else {
                fault.end
            };
            let i = done.partition_point(|&(t, _, _, _)| t <= from);
            let next = done[i..]
                .iter()
                .find(|&&(_, w, key, asked)| match fault.holder {
                    Some((fw, fkey)) => key == fkey && (w != fw || asked > from),
                    None => true,
                });
            // A holder fault is timed only if somebody waited for the key from the fault up
            // to that grant: a waiter that gave up before it leaves the time in between
            // unobserved.
            let observed = |t: u64| match fault.holder {
                Some((fw, fkey)) => waits.iter().any(|&(w, key, asked, ended)| {
                    w != fw && key == fkey && asked <= from && ended >= t
                }),
                None => true,
            };
            if let Some(&(t, _, _, _)) = next.filter(|&&(t, _, _, _)| observed(t)) {
                if let Some(f) = faults.get_mut(fault.kind.name()) {
                    f.timed += 1;
                }
                recoveries
                    .entry(fault.kind.name())
                    .or_default()
                    .push((t - from) as f64 / 1e6);
            }
        }
        for (kind, mut times) in recoveries {
            times.sort_by(f64::total_cmp);
            if let Some(f) = faults.get_mut(kind) {
                f.recovery_p50_ms = times[times.len() / 2];
                f.recovery_max_ms = times[times.len() - 1];
            }
        }
        let mut errors = BTreeMap::new();
        for event in &record.events {
            let kind = match event {
                Event::AcquireFailed { err, .. } => format!("acquire: {err}"),
                Event::Section(Section { release, .. })
                    if !matches!(release.as_str(), "released" | "committed") =>
                {
                    format!("release: {release}")
                }
                _ => continue,
            };
            *errors.entry(kind).or_insert(0) += 1;
        }
        Row {
            workload: workload.name(),
            seconds,
            verdict,
            third_party,
            faults,
            errors,
            failures,
        }
    }
}

/// Prints the tables (markdown, readable as text too).
pub fn print(rows: &[Row], detail: bool) {
    println!(
        "| workload | s | sections | ok | failed | indeterminate | refused by fence | acquire p50 / p99 ms | overlaps certain / possible | max holders | stale accepted | lost | duplicated | token order | CMD after its lease | hangs | panics | verdict |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut total = 0;
    for r in rows {
        let v = &r.verdict;
        total += v.attempted;
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {:.2} / {:.1} | {} / {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            r.workload,
            r.seconds,
            v.attempted,
            v.ok,
            v.failed,
            v.indeterminate,
            v.refused,
            v.acquire_p50_ms,
            v.acquire_p99_ms,
            v.overlaps_certain,
            v.overlaps_possible,
            v.max_holders,
            v.stale_accepted,
            v.lost,
            v.duplicated,
            v.token_violations,
            v.outlived,
            v.hangs,
            v.panics,
            if r.failures.is_empty() {
                "pass"
            } else {
                "FAIL"
            },
        );
    }
    println!("\n{total} critical sections in all.\n");
    println!("| workload | our checkers | {} |", crate::models::CHECKER);
    println!("|---|---|---|");
    for r in rows {
        let ours = if r.failures.is_empty() {
            "pass".to_owned()
        } else {
            r.failures.join(", ")
        };
        let mut theirs = r.third_party.summary();
        if r.third_party.expected_violations
            && r.third_party.models.iter().any(|m| m.violation.is_some())
        {
            theirs.push_str(", as expected without fencing");
        }
        let ops: u64 = r.third_party.models.iter().map(|m| m.ops).sum();
        let windows: u64 = r.third_party.models.iter().map(|m| m.windows).sum();
        println!(
            "| {} | {ours} | {theirs} ({ops} operations, {windows} windows) |",
            r.workload
        );
    }
    println!();
    for r in rows.iter().filter(|r| r.verdict.observed > 0) {
        println!(
            "{}: the observers reported {} changes, {} of them backwards.\n",
            r.workload, r.verdict.observed, r.verdict.observed_backwards
        );
    }
    println!("| workload | fault | injected | timed | recovery p50 ms | recovery max ms |");
    println!("|---|---|---|---|---|---|");
    for r in rows {
        for (kind, f) in &r.faults {
            println!(
                "| {} | {kind} | {} | {} | {:.0} | {:.0} |",
                r.workload, f.count, f.timed, f.recovery_p50_ms, f.recovery_max_ms
            );
        }
    }
    // What the faults that act on the servers' data did to it: the table has no room for it.
    let evictions: Vec<(&str, &str, &FaultFigures, u64)> = rows
        .iter()
        .flat_map(|r| {
            r.faults
                .iter()
                .filter_map(move |(kind, f)| Some((r.workload, *kind, f, f.evicted?)))
        })
        .collect();
    if !evictions.is_empty() {
        println!();
    }
    for (workload, kind, f, n) in evictions {
        let missed = if n == 0 {
            " (the fault did not strike)"
        } else {
            ""
        };
        println!(
            "{workload}: {kind} ×{}: the lock servers evicted {n} of the workload's keys{missed}.",
            f.count
        );
    }
    if detail {
        println!("\n| workload | error | count |\n|---|---|---|");
        for r in rows {
            for (kind, n) in &r.errors {
                println!("| {} | {kind} | {n} |", r.workload);
            }
        }
    }
}

/// Writes the rows as JSON.
pub fn write_json(path: &std::path::Path, rows: &[Row]) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(rows).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

/// Appends one run's history to `path`: a line per fault, then a line per event.
pub fn append_history(
    path: &std::path::Path,
    workload: Workload,
    record: &Record,
) -> std::io::Result<()> {
    use std::io::Write as _;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut out = std::io::BufWriter::new(file);
    let line = |v: serde_json::Result<String>| v.map_err(std::io::Error::other);
    for fault in &record.faults {
        let json = line(serde_json::to_string(fault))?;
        writeln!(
            out,
            "{{\"workload\":\"{}\",\"fault\":{json}}}",
            workload.name()
        )?;
    }
    for event in &record.events {
        let json = line(serde_json::to_string(event))?;
        writeln!(
            out,
            "{{\"workload\":\"{}\",\"event\":{json}}}",
            workload.name()
        )?;
    }
    out.flush()
}

//! The history as operations, the way Jepsen records one: per process, an `invoke`, then
//! `ok`, `fail` or `info` (an outcome that is not known), one JSON object per line
//! (`docs/reliability.md`, "Histories"). This is what the third-party checker reads
//! (`models.rs`), and what `--ops FILE` writes for any other.
//!
//! A worker's sections become up to three operations on its key:
//! - `acquire`: from the acquire call to the grant (`ok`, with the token), or to the failure
//!   (`fail` when nothing was granted, `info` when a grant may have been made);
//! - `write`: the fenced read-modify-write of the counter, from the grant to the release call
//!   (the write lies somewhere in there), with the token and the value written: `ok`
//!   acknowledged, `fail` refused by the fence, `info` its reply lost;
//! - `release`: from the release call to its return: `ok`, `fail` (not held any more), `info`.
//!
//! After an `info`, a process may still have an effect at any later time, so, as in Jepsen,
//! the worker goes on as a new process: `process = worker + 1000 × incarnation`.

use std::collections::HashMap;

use serde::Serialize;

use crate::history::{Event, Write};
use crate::workload::Workload;

/// What an operation did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Type {
    /// Invoked.
    Invoke,
    /// Completed with the effect stated.
    Ok,
    /// Completed without effect.
    Fail,
    /// The outcome is not known.
    Info,
}

/// Which operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum F {
    /// Take the lease (a lock, a permit, a read or write lease, a leadership).
    Acquire,
    /// The counter's fenced read-modify-write (or the transaction's increment).
    Write,
    /// Give the lease back.
    Release,
    /// A fenced read whose reply was lost (always `info`): it wrote nothing, but may have
    /// raised the resource's fence to its token.
    Read,
}

/// One line of the history.
#[derive(Clone, Debug, Serialize)]
pub struct Op {
    /// The process: worker + 1000 × incarnation.
    pub process: u64,
    /// `invoke`, `ok`, `fail` or `info`.
    #[serde(rename = "type")]
    pub kind: Type,
    /// `acquire`, `write` or `release`.
    pub f: F,
    /// Which of the workload's keys.
    pub key: u32,
    /// The fencing token (the grant's; a write's is the token it carried). None where the
    /// workload has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// A write's value (the counter read + 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<i64>,
    /// A read-write lock's write lease.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub writer: bool,
    /// Monotonic nanoseconds (one clock for every process of the machine).
    pub time: u64,
}

/// The operations of a run, in time order (at one instant, invocations first: an operation
/// that returned at t is not taken to precede one invoked at t).
pub fn operations(workload: Workload, events: &[Event]) -> Vec<Op> {
    let mut incarnation: HashMap<u32, u64> = HashMap::new();
    // Per process, the end of its last operation: its next one is invoked after it.
    let mut last_end: HashMap<u64, u64> = HashMap::new();
    let mut ops = Vec::new();
    let token = |t: u64| (t != 0).then_some(t);
    for event in events {
        let mut steps: Vec<Step> = Vec::new();
        let w = match event {
            Event::AcquireFailed {
                w,
                key,
                inv,
                end,
                err,
            } => {
                // Refused for certain: the wait ran out, or a conflict; anything else may
                // have been granted.
                let kind = if err == "not-acquired" || err == "conflict" {
                    Type::Fail
                } else {
                    Type::Info
                };
                let f = if workload == Workload::Optimistic {
                    F::Write
                } else {
                    F::Acquire
                };
                steps.push(Step::new(*key, f, (*inv, *end), kind));
                *w
            }
            Event::Section(s) if workload == Workload::Optimistic => {
                // The whole transaction, retries included; nothing applied when it failed
                // before sending EXEC.
                let (kind, value) = match s.write {
                    Write::Skipped => (Type::Fail, None),
                    w => write_outcome(w, s.value),
                };
                let mut step = Step::new(s.key, F::Write, (s.inv, s.rel_end), kind);
                step.value = value;
                steps.push(step);
                s.w
            }
            Event::Section(s) => {
                let mut acquire = Step::new(s.key, F::Acquire, (s.inv, s.ok), Type::Ok);
                acquire.token = token(s.t);
                acquire.writer = s.writer;
                steps.push(acquire);
                if s.write == Write::ReadLost {
                    let mut read = Step::new(s.key, F::Read, (s.ok, s.rel_inv), Type::Info);
                    read.token = token(s.t);
                    steps.push(read);
                } else if !matches!(s.write, Write::None | Write::Skipped) {
                    let (kind, value) = write_outcome(s.write, s.value);
                    let mut write = Step::new(s.key, F::Write, (s.ok, s.rel_inv), kind);
                    write.token = token(s.t);
                    write.value = value;
                    steps.push(write);
                }
                let kind = match s.release.as_str() {
                    "released" => Type::Ok,
                    "not-held" | "lease-lost" | "lease-ended" => Type::Fail,
                    _ => Type::Info,
                };
                let mut release = Step::new(s.key, F::Release, (s.rel_inv, s.rel_end), kind);
                release.token = token(s.t);
                release.writer = s.writer;
                steps.push(release);
                s.w
            }
            _ => continue,
        };
        let inc = incarnation.entry(w).or_default();
        for step in steps {
            let process = u64::from(w) + 1000 * *inc;
            let after = last_end.get(&process).map_or(0, |t| t + 1);
            let inv = step.span.0.max(after);
            let end = step.span.1.max(inv + 1);
            last_end.insert(process, end);
            let op = |kind, time| Op {
                process,
                kind,
                f: step.f,
                key: step.key,
                token: step.token,
                value: step.value,
                writer: step.writer,
                time,
            };
            let mut invoke = op(Type::Invoke, inv);
            if step.f == F::Acquire {
                invoke.token = None; // not known until granted
            }
            ops.push(invoke);
            ops.push(op(step.kind, end));
            // After an unknown outcome, the worker goes on as a new process.
            if step.kind == Type::Info {
                *inc += 1;
            }
        }
    }
    ops.sort_by_key(|o| (o.time, o.kind != Type::Invoke));
    ops
}

/// One operation before it is placed on its process's timeline.
struct Step {
    key: u32,
    f: F,
    span: (u64, u64),
    kind: Type,
    token: Option<u64>,
    value: Option<i64>,
    writer: bool,
}

impl Step {
    fn new(key: u32, f: F, span: (u64, u64), kind: Type) -> Step {
        Step {
            key,
            f,
            span,
            kind,
            token: None,
            value: None,
            writer: false,
        }
    }
}

fn write_outcome(write: Write, value: Option<i64>) -> (Type, Option<i64>) {
    match write {
        Write::Applied => (Type::Ok, value),
        Write::Refused => (Type::Fail, value),
        _ => (Type::Info, value),
    }
}

/// Appends `ops` to `path` as JSON lines, each with the workload's name.
pub fn append(path: &std::path::Path, workload: Workload, ops: &[Op]) -> std::io::Result<()> {
    use std::io::Write as _;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    let mut out = std::io::BufWriter::new(file);
    for op in ops {
        let mut value = serde_json::to_value(op).map_err(std::io::Error::other)?;
        value["workload"] = serde_json::Value::from(workload.name());
        writeln!(out, "{value}")?;
    }
    out.flush()
}

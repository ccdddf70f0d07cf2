//! The third-party verdict: each key's operations (`ops.rs`) checked for linearizability
//! against small sequential models by stateright's `LinearizabilityTester`, a checker we did
//! not write. We write only the models (each a few lines) and the windows.
//!
//! Models (`docs/reliability.md`, "The third-party checker"):
//! - **fenced grants** (`Grants`): every grant's token exceeds the token of every grant
//!   linearized before it. For every leased workload with tokens (locks, fair, Redlock,
//!   re-entrant, semaphore permits, read-write leases, elections, `fenced run`).
//! - **holders** (`Holders`, strict, for runs without faults): at most N holders at once
//!   (1 for a lock, the permits for a semaphore), and a release is by a holder.
//!   Under faults a lease may end without its holder's knowledge, so only the grants model
//!   applies there.
//! - **fenced counter** (`Counter`): the counter's read-modify-writes, each atomic with its
//!   token: applied only with a token at least the highest seen, and then writing the current
//!   value + 1; refused only with a lower token. Without tokens (optimistic transactions, the
//!   unfenced lease) every applied write must still be the current value + 1, which the
//!   unfenced lease breaks under pauses: its verdict is shown, not failed.
//!
//! Windows: a key's history is cut into windows of at least `WINDOW` lines, only at an
//! instant when nothing is in flight but waiting acquires that will be granted a token above
//! every grant before the cut (they move to the next window), and when every operation of
//! unknown outcome (`info`) so far can no longer change the state (its token is below the
//! highest acknowledged write's: should it land later, it is refused; earlier, a later
//! acknowledged write supersedes it). So every operation before the cut precedes every one
//! after it in real time, and the state at the cut is the same in every linearization: the
//! next window starts from it. For the grants and counter models a violation cannot hide at
//! an edge; for the holders model, an extra holder that came after every grant of the window
//! and went before the cut is counted against the holders at the cut, and can (our
//! client-view checker still counts it). `docs/reliability.md` has the argument.

use std::collections::BTreeSet;

use serde::Serialize;
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

use crate::ops::{F, Op, Type};
use crate::workload::Workload;

/// The fewest history lines of a window (it grows until a cut is allowed). The search of a
/// window that no order explains tries every order its concurrent operations allow, so the
/// holders model, whose windows are busiest, gets short ones.
const WINDOW: usize = 200;
/// The same for the holders model.
const HOLDERS_WINDOW: usize = 24;
/// Writes of unknown outcome a window is searched for both ways (2^N versions).
const MAX_UNKNOWN: usize = 5;
/// Start states a window is searched from at most.
const MAX_STATES: usize = 16;

/// The checker's name in reports.
pub const CHECKER: &str = "stateright 0.31 LinearizabilityTester";

/// A model's return for an operation whose outcome is not known (`info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ret {
    /// Granted, with this token (0: none).
    Granted(u64),
    /// Refused: not granted, or a write refused by the fence.
    Refused,
    /// Done: a release, or an applied write.
    Done,
    /// Not known.
    Unknown,
}

/// An operation as the models see it.
#[derive(Clone, Debug)]
pub enum MOp {
    /// A grant asked for by a process.
    Acquire(u64),
    /// A release by a process.
    Release(u64),
    /// A read-modify-write with a token (0: none) writing a value (`None`: not known, an
    /// increment whose reply was lost).
    Write(u64, Option<i64>),
    /// A fenced read whose reply was lost: it may have raised the fence to its token.
    Read(u64),
}

/// Fenced grants: each grant's token exceeds the last.
#[derive(Clone, Debug, Default)]
pub struct Grants {
    last: u64,
}

impl SequentialSpec for Grants {
    type Op = MOp;
    type Ret = Ret;

    fn invoke(&mut self, _op: &MOp) -> Ret {
        // An operation of unknown outcome: no token to speak of, no effect.
        Ret::Unknown
    }

    fn is_valid_step(&mut self, op: &MOp, ret: &Ret) -> bool {
        match (op, ret) {
            (MOp::Acquire(_), Ret::Granted(t)) => {
                let ok = *t > self.last;
                self.last = self.last.max(*t);
                ok
            }
            _ => true,
        }
    }
}

/// Holders: at most `n` at once, and a release by a holder (fault-free runs). Tokens are the
/// grants model's: checking them here too would make the search try every order of the
/// waiting acquires.
#[derive(Clone, Debug)]
pub struct Holders {
    n: usize,
    held: BTreeSet<u64>,
}

impl SequentialSpec for Holders {
    type Op = MOp;
    type Ret = Ret;

    fn invoke(&mut self, op: &MOp) -> Ret {
        // Unknown outcome: a release may have freed, an acquire may not have taken.
        if let MOp::Release(p) = op {
            self.held.remove(p);
        }
        Ret::Unknown
    }

    fn is_valid_step(&mut self, op: &MOp, ret: &Ret) -> bool {
        match (op, ret) {
            (MOp::Acquire(p), Ret::Granted(_)) => {
                let ok = self.held.len() < self.n;
                self.held.insert(*p);
                ok
            }
            (MOp::Release(p), Ret::Done) => self.held.remove(p),
            // "Not held": its lease had ended.
            (MOp::Release(p), _) => {
                self.held.remove(p);
                true
            }
            _ => true,
        }
    }
}

/// The fenced counter: (highest token seen, value).
#[derive(Clone, Debug, Default)]
pub struct Counter {
    highest: u64,
    value: i64,
}

impl SequentialSpec for Counter {
    type Op = MOp;
    type Ret = Ret;

    fn invoke(&mut self, op: &MOp) -> Ret {
        if let MOp::Read(t) = op {
            self.highest = self.highest.max(*t);
            return Ret::Unknown;
        }
        // Unknown outcome: applied if the fence and the counter let it.
        if let MOp::Write(t, v) = op
            && *t >= self.highest
            && v.is_none_or(|v| v == self.value + 1)
        {
            self.highest = *t;
            self.value += 1;
        }
        Ret::Unknown
    }

    fn is_valid_step(&mut self, op: &MOp, ret: &Ret) -> bool {
        let MOp::Write(t, v) = op else {
            self.invoke(op);
            return true;
        };
        match ret {
            Ret::Done => {
                let ok = *t >= self.highest && v.is_none_or(|v| v == self.value + 1);
                self.highest = self.highest.max(*t);
                self.value = v.unwrap_or(self.value + 1);
                ok
            }
            // Refused by the fence (tokens), or a transaction that did not commit.
            Ret::Refused => *t == 0 || *t < self.highest,
            _ => {
                self.invoke(op);
                true
            }
        }
    }
}

/// One model's verdict over a workload's history.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ModelVerdict {
    /// The model.
    pub model: &'static str,
    /// Operations checked.
    pub ops: u64,
    /// Windows searched.
    pub windows: u64,
    /// The first window no linearization explains, if any: "key K, ops a..b".
    pub violation: Option<String>,
}

/// The third-party verdict of a workload.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verdict {
    /// The checker.
    pub checker: &'static str,
    /// Each model's verdict.
    pub models: Vec<ModelVerdict>,
    /// Whether a violation is expected (the unfenced lease's counter: shown, not failed).
    pub expected_violations: bool,
}

impl Verdict {
    /// "linearizable", or what was not.
    pub fn summary(&self) -> String {
        let bad: Vec<String> = self
            .models
            .iter()
            .filter_map(|m| m.violation.as_ref().map(|v| format!("{}: {v}", m.model)))
            .collect();
        if self.models.is_empty() {
            "n/a".to_owned()
        } else if bad.is_empty() {
            "linearizable".to_owned()
        } else {
            format!("NOT linearizable ({})", bad.join("; "))
        }
    }

    /// Whether a model found a violation that breaks a guarantee.
    pub fn failed(&self) -> bool {
        !self.expected_violations && self.models.iter().any(|m| m.violation.is_some())
    }
}

/// Which models apply, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strictness {
    /// Faults were injected: a lease may end unseen.
    Faults,
    /// No fault: at most `n` holders at once.
    Holders(usize),
}

/// Checks `ops` (one workload's, in time order) with every model that applies.
pub fn check(workload: Workload, ops: &[Op], strictness: Strictness) -> Verdict {
    let mut v = Verdict {
        checker: CHECKER,
        expected_violations: workload == Workload::Unfenced,
        ..Verdict::default()
    };
    let tokens = ops.iter().any(|o| o.token.is_some());
    if workload.leased() && tokens {
        let grants: Vec<&Op> = ops.iter().filter(|o| o.f == F::Acquire).collect();
        v.models
            .push(run("fenced grants", &grants, true, Grants::default));
    }
    if let Strictness::Holders(n) = strictness
        && workload.leased()
        && workload != Workload::Rw
    {
        let leases: Vec<&Op> = ops
            .iter()
            .filter(|o| matches!(o.f, F::Acquire | F::Release))
            .collect();
        v.models.push(run_windows(
            "holders",
            &leases,
            true,
            HOLDERS_WINDOW,
            || Holders {
                n,
                held: BTreeSet::new(),
            },
        ));
    }
    if workload.counts() {
        let writes: Vec<&Op> = ops
            .iter()
            .filter(|o| matches!(o.f, F::Write | F::Read))
            .collect();
        let name = if tokens { "fenced counter" } else { "counter" };
        v.models.push(run(name, &writes, false, Counter::default));
    }
    v
}

/// Runs one model over every key's operations, window by window. With `carry_waiters`, a
/// window may end while acquires are still waiting: their invocations move to the next window
/// (see [`Strictness::Holders`]).
fn run<S>(
    model: &'static str,
    ops: &[&Op],
    carry_waiters: bool,
    init: impl Fn() -> S,
) -> ModelVerdict
where
    S: SequentialSpec<Op = MOp, Ret = Ret> + Clone + Send + std::fmt::Debug + 'static,
{
    run_windows(model, ops, carry_waiters, WINDOW, init)
}

/// [`run`] with windows of at least `window` lines.
fn run_windows<S>(
    model: &'static str,
    ops: &[&Op],
    carry_waiters: bool,
    window: usize,
    init: impl Fn() -> S,
) -> ModelVerdict
where
    S: SequentialSpec<Op = MOp, Ret = Ret> + Clone + Send + std::fmt::Debug + 'static,
{
    let mut verdict = ModelVerdict {
        model,
        ..ModelVerdict::default()
    };
    let mut keys: Vec<u32> = ops.iter().map(|o| o.key).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        let of_key = renumbered(ops.iter().filter(|o| o.key == key).copied());
        // Where each invocation completes (its process's next line).
        let mut completes = vec![usize::MAX; of_key.len()];
        let mut open: std::collections::HashMap<u64, usize> = Default::default();
        for (i, op) in of_key.iter().enumerate() {
            if op.kind == Type::Invoke {
                open.insert(op.process, i);
            } else if let Some(at) = open.remove(&op.process) {
                completes[at] = i;
            }
        }
        // The states the window may start from: one, but for unknown outcomes (below).
        let mut states = vec![init()];
        let mut start = 0;
        // Waiters' invocations moved past a cut, by line.
        let mut carried: Vec<usize> = Vec::new();
        for end in cuts(&of_key, carry_waiters, window, &completes) {
            let mut window = Vec::new();
            let lines = std::mem::take(&mut carried).into_iter().chain(start..end);
            for i in lines {
                let op = &of_key[i];
                if op.kind == Type::Invoke && completes[i] != usize::MAX && completes[i] >= end {
                    carried.push(i); // still waiting: invoked again at the next cut
                } else {
                    window.push(op.clone());
                }
            }
            verdict.windows += 1;
            verdict.ops += window.iter().filter(|o| o.kind == Type::Invoke).count() as u64;
            let mut next: Vec<S> = Vec::new();
            for variant in variants(&window) {
                for state in &states {
                    if let Some(end) = search(state.clone(), variant.clone()) {
                        let seen = format!("{end:?}");
                        if next.len() < MAX_STATES && !next.iter().any(|s| format!("{s:?}") == seen)
                        {
                            next.push(end);
                        }
                    }
                }
            }
            if next.is_empty() {
                if std::env::var_os("FENCED_CHAOS_DUMP").is_some() {
                    eprintln!("{model}: from {states:?}");
                    for o in &window {
                        eprintln!(
                            "  {} {:?} {:?} t={:?} v={:?} at {}",
                            o.process, o.kind, o.f, o.token, o.value, o.time
                        );
                    }
                }
                verdict.violation = Some(format!("key {key}, history lines {start}..{end}"));
                return verdict;
            }
            states = next;
            start = end;
        }
    }
    verdict
}

/// The operations of one model, each worker's renumbered as a new process after each of ITS
/// operations of unknown outcome (an `info` of another model's operations does not end a
/// process here: a lost write's reply does not make its section's release another holder's).
fn renumbered<'a>(ops: impl Iterator<Item = &'a Op>) -> Vec<Op> {
    let mut incarnation: std::collections::HashMap<u64, u64> = Default::default();
    ops.map(|o| {
        let worker = o.process % 1000;
        let inc = incarnation.entry(worker).or_default();
        let mut op = o.clone();
        op.process = worker + 1000 * *inc;
        if o.kind == Type::Info {
            *inc += 1;
        }
        op
    })
    .collect()
}

/// The versions of a window to search: a write whose outcome is not known (`info`) either
/// took effect within its span (it then completes there) or never did (it is left out). With
/// more than `MAX_UNKNOWN` such writes, they stay in flight instead: the tester then places
/// each anywhere after its invocation, or nowhere.
fn variants(window: &[Op]) -> Vec<Vec<Op>> {
    let unknown: Vec<usize> = window
        .iter()
        .enumerate()
        .filter(|(_, o)| o.kind == Type::Info && o.f == F::Write)
        .map(|(i, _)| i)
        .collect();
    if unknown.is_empty() || unknown.len() > MAX_UNKNOWN {
        return vec![window.to_vec()];
    }
    // Each unknown outcome's invocation: its process's invocation before it, if in the window.
    let invoked: Vec<Option<usize>> = unknown
        .iter()
        .map(|&at| {
            (0..at).rev().find(|&i| {
                window[i].process == window[at].process && window[i].kind == Type::Invoke
            })
        })
        .collect();
    let mut out = Vec::new();
    for mask in 0u32..(1 << unknown.len()) {
        let applied = |j: usize| mask & (1 << j) != 0;
        let mut variant = Vec::with_capacity(window.len());
        for (i, op) in window.iter().enumerate() {
            if let Some(j) = unknown.iter().position(|&at| at == i) {
                if applied(j) {
                    let mut done = op.clone();
                    done.kind = Type::Ok;
                    variant.push(done);
                }
                continue;
            }
            // The invocation of a write left out goes too.
            if invoked
                .iter()
                .enumerate()
                .any(|(j, at)| *at == Some(i) && !applied(j))
            {
                continue;
            }
            variant.push(op.clone());
        }
        out.push(variant);
    }
    out
}

/// The ends of a key's windows (exclusive indices into `ops`): at least `WINDOW` lines, and
/// then the first instant when every unknown outcome is pinned and nothing is in flight but,
/// with `carry_waiters`, acquires that will be granted a token above every grant before the
/// cut (so they were granted after all of those: moved to the next window, they keep their
/// place in every order the full history allows). `completes[i]`: where the invocation at
/// `i` completes.
fn cuts(ops: &[Op], carry_waiters: bool, window: usize, completes: &[usize]) -> Vec<usize> {
    let mut ends = Vec::new();
    // Invocations in flight, by process: their line.
    let mut in_flight: std::collections::HashMap<u64, usize> = Default::default();
    // Operations of unknown outcome not yet pinned (token, line), the highest acknowledged
    // write's token, and the latest line at which an acknowledged write was invoked.
    let mut unpinned: Vec<(u64, usize)> = Vec::new();
    let mut highest_ack = 0u64;
    let mut ack_invoked_at: Option<usize> = None;
    let mut highest_grant = 0u64;
    let mut since = 0usize;
    let grant_free = grant_free(ops);
    let granted_above = |at: usize, floor: u64| {
        let done = completes.get(at).copied().unwrap_or(usize::MAX);
        ops.get(done).is_some_and(|c| {
            c.f == F::Acquire && c.kind == Type::Ok && c.token.unwrap_or(0) > floor
        })
    };
    for (i, op) in ops.iter().enumerate() {
        match op.kind {
            Type::Invoke => {
                in_flight.insert(op.process, i);
            }
            kind => {
                let invoked = in_flight.remove(&op.process);
                if kind == Type::Info {
                    unpinned.push((op.token.unwrap_or(0), i));
                } else if op.f == F::Write && kind == Type::Ok {
                    highest_ack = highest_ack.max(op.token.unwrap_or(0));
                    ack_invoked_at = ack_invoked_at.max(invoked);
                } else if op.f == F::Acquire && kind == Type::Ok {
                    highest_grant = highest_grant.max(op.token.unwrap_or(0));
                }
            }
        }
        since += 1;
        if since < window {
            continue;
        }
        // A fenced write of unknown outcome cannot change the state after the cut once a
        // newer token was acknowledged: landing later, it is refused. A write without a token
        // (a transaction's EXEC) can land after its client gave up: sent to a paused server,
        // it waits in the server's socket buffer, and the server runs it when it resumes, in
        // the first pass over its clients. It is settled once a write invoked after it gave
        // up was acknowledged: that write's several round trips (WATCH, the read, EXEC) each
        // took a pass of their own, so the stale EXEC had run, or could no longer, by its EXEC.
        let pinned = unpinned.iter().all(|(t, line)| {
            grant_free
                || (*t == 0 && ack_invoked_at.is_some_and(|at| at > *line))
                || (*t != 0 && *t < highest_ack)
        });
        let quiet = in_flight
            .values()
            .all(|at| carry_waiters && granted_above(*at, highest_grant));
        if quiet && pinned {
            unpinned.clear();
            ends.push(i + 1);
            since = 0;
        }
    }
    if ends.last() != Some(&ops.len()) {
        ends.push(ops.len());
    }
    ends
}

/// Whether these operations carry no write (grants and releases only): their unknown
/// outcomes change no model state that a later window depends on, except the holders model,
/// whose runs have no faults and so no unknown outcomes to speak of.
fn grant_free(ops: &[Op]) -> bool {
    ops.iter().all(|o| o.f != F::Write)
}

/// Searches one window from `state`; the state after it, or `None` if no linearization
/// explains it.
fn search<S>(state: S, window: Vec<Op>) -> Option<S>
where
    S: SequentialSpec<Op = MOp, Ret = Ret> + Clone + Send + 'static,
{
    // The search recurses once per operation: a thread with a stack to match.
    let worker = std::thread::Builder::new()
        .stack_size(512 << 20)
        .spawn(move || {
            let mut tester = LinearizabilityTester::new(state.clone());
            let mut pending: std::collections::HashMap<u64, MOp> = Default::default();
            for op in &window {
                let m = match op.f {
                    F::Acquire => MOp::Acquire(op.process),
                    F::Release => MOp::Release(op.process),
                    F::Write => MOp::Write(op.token.unwrap_or(0), op.value),
                    F::Read => MOp::Read(op.token.unwrap_or(0)),
                };
                let fed = match op.kind {
                    Type::Invoke => {
                        pending.insert(op.process, m.clone());
                        tester.on_invoke(op.process, m).map(|_| ())
                    }
                    Type::Info => Ok(()), // stays in flight: it may or may not have happened
                    kind => {
                        pending.remove(&op.process);
                        let ret = match (op.f, kind) {
                            (F::Acquire, Type::Ok) => Ret::Granted(op.token.unwrap_or(0)),
                            (_, Type::Ok) => Ret::Done,
                            _ => Ret::Refused,
                        };
                        tester.on_return(op.process, ret).map(|_| ())
                    }
                };
                if fed.is_err() {
                    return None;
                }
            }
            let history = tester.serialized_history()?;
            let mut end = state;
            for (op, ret) in history {
                end.is_valid_step(&op, &ret);
            }
            Some(end)
        });
    worker.ok()?.join().ok()?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(process: u64, kind: Type, f: F, token: u64, value: i64, time: u64) -> Op {
        let value = Some(value);
        Op {
            process,
            kind,
            f,
            key: 0,
            token: (token != 0).then_some(token),
            value,
            writer: false,
            time,
        }
    }

    /// A transaction whose `EXEC` went unanswered (a paused server) may still run when the
    /// server resumes: no window may start before a write invoked after it was acknowledged.
    #[test]
    fn no_cut_parts_a_transaction_of_unknown_outcome_from_the_write_that_settles_it() {
        use F::Write;
        use Type::{Info, Invoke, Ok};
        let mut ops = vec![
            op(1, Invoke, Write, 0, 0, 1),
            op(1, Info, Write, 0, 0, 2),
            op(2, Invoke, Write, 0, 0, 3),
            op(2, Ok, Write, 0, 1, 4),
        ];
        let completes = [1, usize::MAX, 3, usize::MAX];
        assert_eq!(cuts(&ops, false, 2, &completes), vec![4]);
        // Once settled, the windows are cut again as often as they may be.
        ops.extend([op(3, Invoke, Write, 0, 0, 5), op(3, Ok, Write, 0, 2, 6)]);
        let completes = [1, usize::MAX, 3, usize::MAX, 5, usize::MAX];
        assert_eq!(cuts(&ops, false, 2, &completes), vec![4, 6]);
    }

    #[test]
    fn overlapping_writes_in_token_order_are_linearizable_and_a_lower_one_after_is_not() {
        use F::Write;
        use Type::{Fail, Invoke, Ok};
        let good = [
            op(1, Invoke, Write, 5, 1, 1),
            op(2, Invoke, Write, 7, 2, 2),
            op(1, Ok, Write, 5, 1, 3),
            op(2, Ok, Write, 7, 2, 4),
            op(3, Invoke, Write, 6, 3, 5),
            op(3, Fail, Write, 6, 3, 6),
        ];
        let refs: Vec<&Op> = good.iter().collect();
        assert!(run("c", &refs, false, Counter::default).violation.is_none());
        // A stale write acknowledged after a newer one: no order explains it.
        let bad = [
            op(2, Invoke, Write, 7, 1, 1),
            op(2, Ok, Write, 7, 1, 2),
            op(1, Invoke, Write, 5, 2, 3),
            op(1, Ok, Write, 5, 2, 4),
        ];
        let refs: Vec<&Op> = bad.iter().collect();
        assert!(run("c", &refs, false, Counter::default).violation.is_some());
    }

    #[test]
    fn a_grant_below_an_earlier_one_and_two_holders_are_violations() {
        use F::{Acquire, Release};
        use Type::{Invoke, Ok};
        let lower = [
            op(1, Invoke, Acquire, 0, 0, 1),
            op(1, Ok, Acquire, 9, 0, 2),
            op(2, Invoke, Acquire, 0, 0, 3),
            op(2, Ok, Acquire, 8, 0, 4),
        ];
        let refs: Vec<&Op> = lower.iter().collect();
        assert!(run("g", &refs, false, Grants::default).violation.is_some());
        let two = [
            op(1, Invoke, Acquire, 0, 0, 1),
            op(1, Ok, Acquire, 1, 0, 2),
            op(2, Invoke, Acquire, 0, 0, 3),
            op(2, Ok, Acquire, 2, 0, 4),
            op(1, Invoke, Release, 1, 0, 5),
            op(1, Ok, Release, 1, 0, 6),
        ];
        let refs: Vec<&Op> = two.iter().collect();
        let holders = || Holders {
            n: 1,
            held: BTreeSet::new(),
        };
        assert!(run("h", &refs, true, holders).violation.is_some());
        assert!(run("g", &refs, false, Grants::default).violation.is_none());
    }
}

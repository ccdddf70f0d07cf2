//! The checkers: what the history says about exclusion, the resource, tokens and bounds.
//!
//! 1. **Client view.** A holder believes it holds from its grant (`ok`) to its release call
//!    (`rel_inv`): two such intervals on one key that intersect are a *certain* overlap (both
//!    believed at once). From the acquire call (`inv`) to the release's return (`rel_end`) they
//!    are a *possible* one. Overlaps are counted, never hidden: pauses make them happen, and
//!    the resource view says whether they did harm.
//! 2. **Resource view.** Every applied increment wrote `read + 1`. Two acknowledged writes of
//!    the same value are a lost update; a counter above acknowledged plus indeterminate writes
//!    is a duplicated effect; acknowledged writes ordered by value must carry strictly rising
//!    tokens, or a stale write was accepted.
//! 3. **Tokens.** If grant A arrived before grant B was asked for, A's token is lower.
//! 4. **Bounds.** Every section returns within the call bound, time frozen on purpose aside;
//!    no worker goes silent; no worker panics or fails.

use std::collections::HashMap;

use serde::Serialize;

use crate::history::{Event, Section, Write};
use crate::lab::Record;
use crate::workload::Workload;

/// What the checkers found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Verdict {
    /// Critical sections (or transactions) attempted.
    pub attempted: u64,
    /// Completed with their write acknowledged (for the semaphore: held and given back).
    pub ok: u64,
    /// Ended without effect: no grant, a refused write, or a write skipped on the lost signal.
    pub failed: u64,
    /// A write whose fate is unknown (a lost reply, a killed holder).
    pub indeterminate: u64,
    /// Writes refused by the fence (included in `failed`).
    pub refused: u64,
    /// Writes skipped because the lost-lease signal had fired (included in `failed`).
    pub skipped: u64,
    /// Acquire latency of granted sections, ms: p50.
    pub acquire_p50_ms: f64,
    /// p99.
    pub acquire_p99_ms: f64,
    /// Certain overlaps (client view): sections that began while `holders` others believed
    /// they held.
    pub overlaps_certain: u64,
    /// Possible overlaps.
    pub overlaps_possible: u64,
    /// Most holders believing at once.
    pub max_holders: u64,
    /// Stale writes accepted by the resource.
    pub stale_accepted: u64,
    /// Lost updates (two acknowledged writes of one value, or a write the counter forgot).
    pub lost: u64,
    /// Effects beyond what acknowledged and indeterminate writes explain.
    pub duplicated: u64,
    /// Grants out of real-time order, or one token granted twice.
    pub token_violations: u64,
    /// Sections over the call bound, plus workers gone silent or not stopping.
    pub hangs: u64,
    /// Worker panics.
    pub panics: u64,
    /// Faults injected in the run: without any, the client view must show no certain overlap.
    pub faults_injected: u64,
    /// Election observers' reports: changes seen.
    pub observed: u64,
    /// Reports that went backwards: an older term (or value) after a newer one, or a term
    /// again after "nobody leads" had followed it.
    pub observed_backwards: u64,
    /// For `fenced run`: lines a CMD wrote after a CMD of a newer grant had begun (a CMD that
    /// outlived its lease).
    pub outlived: u64,
}

impl Verdict {
    /// The failures that break a guarantee, by name. Overlaps without fencing, and lost
    /// updates in the unfenced workload, are what the docs show, not failures.
    pub fn failures(&self, workload: Workload) -> Vec<String> {
        let mut out = Vec::new();
        let mut fail = |cond: bool, what: String| {
            if cond {
                out.push(what);
            }
        };
        fail(
            self.stale_accepted > 0 && workload != Workload::Unfenced,
            format!("{} stale writes accepted", self.stale_accepted),
        );
        fail(
            self.lost > 0 && workload != Workload::Unfenced,
            format!("{} lost updates", self.lost),
        );
        fail(
            self.duplicated > 0,
            format!("{} duplicated effects", self.duplicated),
        );
        fail(
            self.token_violations > 0,
            format!("{} token order violations", self.token_violations),
        );
        fail(self.hangs > 0, format!("{} hangs", self.hangs));
        fail(
            self.faults_injected == 0 && self.overlaps_certain > 0,
            format!(
                "{} certain overlaps without any fault (at most {} holder(s) at once)",
                self.overlaps_certain,
                workload.holders()
            ),
        );
        fail(
            self.observed_backwards > 0,
            format!(
                "{} observer reports went backwards",
                self.observed_backwards
            ),
        );
        fail(
            workload == Workload::Election && self.observed == 0,
            "no observer reported a change".to_owned(),
        );
        fail(
            self.outlived > 0,
            format!(
                "{} lines written by a command after its lease",
                self.outlived
            ),
        );
        fail(
            self.panics > 0,
            format!("{} panics or crashes", self.panics),
        );
        fail(self.ok == 0, "no section completed".to_owned());
        out
    }
}

/// Runs every checker over one run's record.
pub fn check(workload: Workload, record: &Record, bound_ns: u64) -> Verdict {
    let mut v = Verdict {
        faults_injected: record.faults.len() as u64,
        ..Verdict::default()
    };
    let mut secs = Vec::new();
    let mut acquire = hdrhistogram::Histogram::<u64>::new(3).ok();
    // Per observer: the last (term, proclaims) reported, and whether somebody led then.
    let mut observers: HashMap<(u32, u32, u64), (u64, u64, bool)> = HashMap::new();
    for event in &record.events {
        match *event {
            Event::Observed { w, key, o, t, p } => {
                v.observed += 1;
                let last = observers.get(&(w, key, o)).copied();
                if let Some(last) = last
                    && backwards(last, (t, p))
                {
                    v.observed_backwards += 1;
                }
                // "Nobody leads" keeps the last term reported: only a newer one may follow.
                let now = match (t, last) {
                    (0, Some((term, proclaims, _))) => (term, proclaims, false),
                    _ => (t, p, t != 0),
                };
                observers.insert((w, key, o), now);
            }
            Event::AcquireFailed { w, inv, end, .. } => {
                v.attempted += 1;
                v.failed += 1;
                if end
                    .saturating_sub(inv)
                    .saturating_sub(frozen(record, w, inv, end))
                    > bound_ns
                {
                    v.hangs += 1;
                }
            }
            Event::Section(ref s) => {
                v.attempted += 1;
                match s.write {
                    Write::Applied | Write::None => v.ok += 1,
                    Write::Refused => {
                        v.failed += 1;
                        v.refused += 1;
                    }
                    Write::Skipped | Write::ReadLost => {
                        v.failed += 1;
                        v.skipped += 1;
                    }
                    Write::Indeterminate => v.indeterminate += 1,
                }
                if let Some(h) = acquire.as_mut() {
                    let _ = h.record(s.ok.saturating_sub(s.inv) / 1000);
                }
                secs.push(s);
            }
            _ => {}
        }
    }
    if let Some(h) = &acquire {
        v.acquire_p50_ms = h.value_at_quantile(0.5) as f64 / 1000.0;
        v.acquire_p99_ms = h.value_at_quantile(0.99) as f64 / 1000.0;
    }
    for s in &secs {
        let took = s
            .rel_end
            .saturating_sub(s.inv)
            .saturating_sub(s.stalled)
            .saturating_sub(frozen(record, s.w, s.inv, s.rel_end));
        if took > bound_ns {
            v.hangs += 1;
        }
    }
    v.hangs += u64::from(record.silent);
    v.panics = u64::from(record.panics + record.crashes);

    let mut by_key: HashMap<u32, Vec<&Section>> = HashMap::new();
    for s in secs {
        by_key.entry(s.key).or_default().push(s);
    }
    for (key, list) in &by_key {
        // For `fenced run` a section spans the whole `fenced` process, which releases before
        // it exits: its client view says nothing, and the file is checked instead.
        if workload.leased() && workload != Workload::Run {
            let certain = overlaps(list, workload, |s| (s.ok, s.rel_inv));
            let possible = overlaps(list, workload, |s| (s.inv, s.rel_end));
            v.overlaps_certain += certain.0;
            v.max_holders = v.max_holders.max(certain.1);
            v.overlaps_possible += possible.0;
        }
        if workload.leased() {
            v.token_violations += token_order(list);
        }
        if let Some(text) = record.run_files.get(key) {
            let (outlived, backwards) = run_file(text);
            v.outlived += outlived;
            v.token_violations += backwards;
        }
        if workload.counts() {
            let final_value = record.counters.get(key).copied().unwrap_or(0);
            let (stale, lost, duplicated) = resource(list, final_value, workload.fenced());
            v.stale_accepted += stale;
            v.lost += lost;
            v.duplicated += duplicated;
        }
    }
    v
}

/// Whether an observer's report `(t, p)` (term 0: nobody leads) went backwards from `last`:
/// an older leader, or the same term again after "nobody leads".
fn backwards((term, proclaims, led): (u64, u64, bool), (t, p): (u64, u64)) -> bool {
    if t == 0 {
        return false; // nobody leads: always allowed after somebody
    }
    if led {
        (t, p) < (term, proclaims)
    } else {
        t <= term
    }
}

/// How long worker `w` was frozen on purpose between `from` and `to`.
fn frozen(record: &Record, w: u32, from: u64, to: u64) -> u64 {
    record
        .frozen
        .iter()
        .filter(|&&(x, _, _)| x == w)
        .map(|&(_, start, end)| end.min(to).saturating_sub(start.max(from)))
        .sum()
}

/// Sections that began while the workload's rule was broken by those still believed held
/// (`holders` or more of them; for the read-write lock, any one if this is a writer, a
/// writer if this is a reader), and the most held at once.
fn overlaps(
    list: &[&Section],
    workload: Workload,
    span: impl Fn(&Section) -> (u64, u64),
) -> (u64, u64) {
    let mut spans: Vec<(u64, u64, bool)> = list
        .iter()
        .map(|s| {
            let (start, end) = span(s);
            (start, end, s.writer)
        })
        .collect();
    spans.sort_unstable();
    let mut active: Vec<(u64, bool)> = Vec::new();
    let (mut count, mut most) = (0u64, 0u64);
    for (start, end, writer) in spans {
        active.retain(|&(e, _)| e > start);
        let broken = match workload {
            Workload::Rw if writer => !active.is_empty(),
            Workload::Rw => active.iter().any(|&(_, w)| w),
            _ => active.len() >= workload.holders(),
        };
        if broken {
            count += 1;
        }
        active.push((end, writer));
        most = most.max(active.len() as u64);
    }
    (count, most)
}

/// Grants whose token is not above every grant that arrived before they were asked for,
/// plus tokens granted twice.
fn token_order(list: &[&Section]) -> u64 {
    let mut by_inv: Vec<&Section> = list.iter().copied().filter(|s| s.t > 0).collect();
    let mut by_ok = by_inv.clone();
    by_inv.sort_unstable_by_key(|s| s.inv);
    by_ok.sort_unstable_by_key(|s| s.ok);
    let (mut i, mut highest, mut bad) = (0usize, 0u64, 0u64);
    for s in by_inv {
        while i < by_ok.len() && by_ok[i].ok < s.inv {
            highest = highest.max(by_ok[i].t);
            i += 1;
        }
        if s.t <= highest {
            bad += 1;
        }
    }
    let mut tokens: Vec<u64> = list.iter().filter(|s| s.t > 0).map(|s| s.t).collect();
    tokens.sort_unstable();
    tokens.dedup();
    bad + (list.iter().filter(|s| s.t > 0).count() - tokens.len()) as u64
}

/// Reads a `run` file (lines `token i`, appended in real-time order by each CMD): lines of a
/// CMD after a CMD of a newer token began (it outlived its lease), and new tokens lower than
/// the one before (grants out of order).
fn run_file(text: &str) -> (u64, u64) {
    let mut seen = std::collections::HashSet::new();
    let (mut current, mut outlived, mut backwards) = (None::<u64>, 0u64, 0u64);
    for line in text.lines() {
        let Some(token) = line.split_whitespace().next().and_then(|t| t.parse().ok()) else {
            continue;
        };
        if Some(token) == current {
            continue;
        }
        if seen.contains(&token) {
            outlived += 1;
            continue;
        }
        if current.is_some_and(|c| token < c) {
            backwards += 1;
        }
        seen.insert(token);
        current = Some(token);
    }
    (outlived, backwards)
}

/// (stale writes accepted, lost updates, duplicated effects) for one counter.
fn resource(list: &[&Section], final_value: i64, fenced: bool) -> (u64, u64, u64) {
    let mut acked: Vec<(i64, u64)> = list
        .iter()
        .filter(|s| s.write == Write::Applied)
        .filter_map(|s| s.value.map(|v| (v, s.t)))
        .collect();
    acked.sort_unstable();
    let indeterminate = list
        .iter()
        .filter(|s| s.write == Write::Indeterminate)
        .count() as i64;
    let mut lost = acked.windows(2).filter(|p| p[0].0 == p[1].0).count() as u64;
    lost += acked.iter().filter(|(v, _)| *v > final_value).count() as u64;
    let mut distinct: Vec<i64> = acked.iter().map(|(v, _)| *v).collect();
    distinct.dedup();
    let explained = distinct.len() as i64 + indeterminate;
    let duplicated = u64::try_from(final_value - explained).unwrap_or(0);
    let stale = if fenced {
        // Two acknowledged writes of one value: the later token's write was derived from a
        // value the earlier one had already replaced, or the reverse; either way one of them
        // was stale when it was accepted.
        acked
            .windows(2)
            .filter(|p| p[0].0 == p[1].0 || p[1].1 <= p[0].1)
            .count() as u64
    } else {
        // Without tokens, a stale write shows as a lost update; count those.
        lost
    };
    (stale, lost, duplicated)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(list: &[Section]) -> Vec<&Section> {
        list.iter().collect()
    }

    fn sec(key: u32, t: u64, span: (u64, u64), value: Option<i64>) -> Section {
        Section {
            w: 0,
            key,
            t,
            inv: span.0,
            ok: span.0 + 1,
            write: if value.is_some() {
                Write::Applied
            } else {
                Write::None
            },
            value,
            rel_inv: span.1,
            rel_end: span.1 + 1,
            release: String::new(),
            stalled: 0,
            writer: false,
        }
    }

    #[test]
    fn overlapping_beliefs_are_counted_and_disjoint_ones_are_not() {
        let belief = |s: &Section| (s.ok, s.rel_inv);
        let disjoint = [sec(0, 1, (0, 10), None), sec(0, 2, (20, 30), None)];
        assert_eq!(overlaps(&refs(&disjoint), Workload::Lock, belief), (0, 1));
        let paused = [sec(0, 1, (0, 100), None), sec(0, 2, (20, 30), None)];
        assert_eq!(overlaps(&refs(&paused), Workload::Lock, belief), (1, 2));
        assert_eq!(
            overlaps(&refs(&paused), Workload::Semaphore, belief),
            (0, 2)
        );
        // Readers share; a writer shares with nobody.
        assert_eq!(overlaps(&refs(&paused), Workload::Rw, belief), (0, 2));
        let mut writer = paused.clone();
        writer[1].writer = true;
        assert_eq!(overlaps(&refs(&writer), Workload::Rw, belief), (1, 2));
        let mut reader_late = paused;
        reader_late[0].writer = true;
        assert_eq!(overlaps(&refs(&reader_late), Workload::Rw, belief), (1, 2));
    }

    #[test]
    fn a_command_writing_after_a_newer_one_began_outlived_its_lease() {
        assert_eq!(run_file("5 1\n5 2\n9 1\n9 2\n"), (0, 0));
        assert_eq!(run_file("5 1\n9 1\n5 2\n9 2\n"), (1, 0));
        assert_eq!(run_file("9 1\n5 1\n"), (0, 1));
    }

    #[test]
    fn an_observer_going_back_to_an_older_leader_is_a_violation() {
        assert!(!backwards((5, 0, true), (5, 1)), "a proclaim");
        assert!(!backwards((5, 1, true), (0, 0)), "nobody leads");
        assert!(!backwards((5, 1, false), (6, 0)), "a newer term");
        assert!(backwards((5, 1, true), (4, 9)), "an older term");
        assert!(backwards((5, 1, true), (5, 0)), "an older value");
        assert!(
            backwards((5, 1, false), (5, 1)),
            "the same term after nobody"
        );
    }

    #[test]
    fn a_token_below_an_earlier_grant_is_a_violation() {
        let fine = [sec(0, 5, (0, 10), None), sec(0, 9, (20, 30), None)];
        assert_eq!(token_order(&refs(&fine)), 0);
        let backwards = [sec(0, 9, (0, 10), None), sec(0, 5, (20, 30), None)];
        assert_eq!(token_order(&refs(&backwards)), 1);
        // Concurrent requests may be granted in either order.
        let concurrent = [sec(0, 9, (0, 10), None), sec(0, 5, (0, 30), None)];
        assert_eq!(token_order(&refs(&concurrent)), 0);
        let twice = [sec(0, 9, (0, 10), None), sec(0, 9, (0, 30), None)];
        assert_eq!(token_order(&refs(&twice)), 1);
    }

    #[test]
    fn the_resource_checker_finds_stale_lost_and_duplicated_writes() {
        let chain = [sec(0, 1, (0, 1), Some(1)), sec(0, 2, (2, 3), Some(2))];
        assert_eq!(resource(&refs(&chain), 2, true), (0, 0, 0));
        let stale = [sec(0, 2, (0, 1), Some(1)), sec(0, 1, (2, 3), Some(2))];
        assert_eq!(resource(&refs(&stale), 2, true).0, 1);
        let lost = [sec(0, 1, (0, 1), Some(1)), sec(0, 2, (2, 3), Some(1))];
        assert_eq!(resource(&refs(&lost), 1, true).1, 1);
        assert_eq!(
            resource(&refs(&chain), 3, true).2,
            1,
            "one effect nobody made"
        );
    }
}

//! What the library reports through the [`metrics`] facade: nothing is recorded unless the
//! application installs a recorder (Prometheus, StatsD, OpenTelemetry, ...), and then every
//! primitive reports the same series. Names follow OpenTelemetry's rules (dotted, lower
//! case, the unit declared apart: seconds; a Prometheus exporter writes `.` as `_`), and the
//! lock series follow ShedLock's (attempts, acquired, not acquired, how long held, active).
//! Labels are bounded: the primitive (`lock`, `reentrant_lock`, `semaphore`, `rw_read`,
//! `rw_write`, `fair_lock`, `multi_lock`, `unfenced_lock`, `election`) and an outcome, never
//! a lock's name, except `fenced.lock.waiting.by_name`, which a client asks for
//! ([`ClientBuilder::metrics_by_name`](crate::ClientBuilder::metrics_by_name)).
//!
//! | series | kind | labels |
//! |---|---|---|
//! | `fenced.lock.attempts` | counter | `primitive`, `outcome` = `acquired`, `busy` (found taken: contention) |
//! | `fenced.lock.acquired` | counter | `primitive`, `via` = `attempt` or `handover` |
//! | `fenced.lock.not_acquired` | counter | `primitive` (the wait ran out) |
//! | `fenced.lock.wait.duration` | histogram, s | `primitive` (acquired or not) |
//! | `fenced.lock.held.duration` | histogram, s | `primitive` (from the grant until the guard is done) |
//! | `fenced.lock.active` | gauge | `primitive`: leases this process holds |
//! | `fenced.lock.waiting` | gauge | `primitive`: tasks of this process waiting after a busy attempt |
//! | `fenced.lock.waiting.by_name` | gauge | `primitive`, `name`: the same, per name (opt-in) |
//! | `fenced.lock.released` | counter | `primitive`, `outcome` = `released`, `handed_over`, `not_held`, `failed` |
//! | `fenced.lease.renewals` | counter | `outcome` = `applied`, `failed` |
//! | `fenced.lease.lost` | counter | `primitive` |
//! | `fenced.resource.stale_writes` | counter | (a stale token refused at a resource) |
//! | `fenced.transaction.conflicts` | counter | (an optimistic transaction retried) |
//! | `fenced.cache.lookups` | counter | `result` = `hit`, `stale`, `shared` (another caller's compute), `computed` (this caller's) |
//! | `fenced.cache.computes` | counter | `outcome` = `stored`, `refused` (fenced off), `failed` |

use std::time::Duration;

use crate::kind::Primitive;

/// Without the `metrics` feature: the same calls, recording nothing, with no dependency.
/// Named like the crate it stands in for, so every call reads the same either way.
#[cfg(not(feature = "metrics"))]
#[allow(clippy::module_inception)]
mod metrics {
    /// A series that records nothing.
    pub(crate) struct Noop;

    impl Noop {
        pub(crate) fn increment<T>(&self, _: T) {}
        pub(crate) fn decrement(&self, _: f64) {}
        pub(crate) fn record(&self, _: f64) {}
    }

    macro_rules! counter {
        ($name:literal $(, $key:literal => $value:expr)* $(,)?) => {{
            $(let _ = $value;)*
            $crate::core::metrics::metrics::Noop
        }};
    }
    macro_rules! histogram {
        ($name:literal $(, $key:literal => $value:expr)* $(,)?) => {{
            $(let _ = $value;)*
            $crate::core::metrics::metrics::Noop
        }};
    }
    macro_rules! gauge {
        ($name:literal $(, $key:literal => $value:expr)* $(,)?) => {{
            $(let _ = $value;)*
            $crate::core::metrics::metrics::Noop
        }};
    }
    pub(crate) use {counter, gauge, histogram};
}

/// How a lease was acquired: the `via` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Via {
    /// By an attempt of its own.
    Attempt,
    /// Handed over by a holder of the same client (`handover.rs`).
    Handover,
}

impl Via {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Via::Attempt => "attempt",
            Via::Handover => "handover",
        }
    }
}

/// How a release ended: the `outcome` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Released,
    HandedOver,
    NotHeld,
    Failed,
}

// Every label below is matched to a string literal. The `metrics` macros give a series whose
// labels are all literals a `static` key; a label taken from a variable makes them build and
// allocate the key on every event, recorder or not, which cost a lock cycle about 2 % of its
// client instructions. The enums make the matches exhaustive.

/// `$emit!((before) "label")` for the primitive's label.
macro_rules! by_primitive {
    ($primitive:expr, $emit:ident!$before:tt) => {
        match $primitive {
            Primitive::Lock => $emit!($before "lock"),
            Primitive::ReentrantLock => $emit!($before "reentrant_lock"),
            Primitive::Semaphore => $emit!($before "semaphore"),
            Primitive::RwRead => $emit!($before "rw_read"),
            Primitive::RwWrite => $emit!($before "rw_write"),
            Primitive::FairLock => $emit!($before "fair_lock"),
            Primitive::MultiLock => $emit!($before "multi_lock"),
            Primitive::UnfencedLock => $emit!($before "unfenced_lock"),
            Primitive::Election => $emit!($before "election"),
        }
    };
}

pub(crate) fn acquired(primitive: Primitive, via: Via) {
    macro_rules! emit {
        (($p:tt) $v:tt) => {
            metrics::counter!("fenced.lock.acquired", "primitive" => $p, "via" => $v)
                .increment(1)
        };
    }
    macro_rules! attempt {
        (() $p:tt) => {
            metrics::counter!("fenced.lock.attempts", "primitive" => $p, "outcome" => "acquired")
                .increment(1)
        };
    }
    if via == Via::Attempt {
        by_primitive!(primitive, attempt!());
    }
    macro_rules! by_via {
        (() $p:tt) => {
            match via {
                Via::Attempt => emit!(($p) "attempt"),
                Via::Handover => emit!(($p) "handover"),
            }
        };
    }
    by_primitive!(primitive, by_via!())
}

pub(crate) fn waited(primitive: Primitive, waited: Duration) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::histogram!("fenced.lock.wait.duration", "primitive" => $p)
                .record(waited.as_secs_f64())
        };
    }
    by_primitive!(primitive, emit!())
}

pub(crate) fn busy(primitive: Primitive) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::counter!("fenced.lock.attempts", "primitive" => $p, "outcome" => "busy")
                .increment(1)
        };
    }
    by_primitive!(primitive, emit!())
}

/// A wait that ran out; `None` when no attempt was even made (its primitive is unknown).
pub(crate) fn not_acquired(primitive: Option<Primitive>) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::counter!("fenced.lock.not_acquired", "primitive" => $p).increment(1)
        };
    }
    match primitive {
        Some(primitive) => by_primitive!(primitive, emit!()),
        None => emit!(() "unknown"),
    }
}

pub(crate) fn released(primitive: Primitive, outcome: Outcome) {
    macro_rules! emit {
        (($p:tt) $o:tt) => {
            metrics::counter!("fenced.lock.released", "primitive" => $p, "outcome" => $o)
                .increment(1)
        };
    }
    macro_rules! by_outcome {
        (() $p:tt) => {
            match outcome {
                Outcome::Released => emit!(($p) "released"),
                Outcome::HandedOver => emit!(($p) "handed_over"),
                Outcome::NotHeld => emit!(($p) "not_held"),
                Outcome::Failed => emit!(($p) "failed"),
            }
        };
    }
    by_primitive!(primitive, by_outcome!())
}

pub(crate) fn renewals(applied: u64, failed: u64) {
    if applied > 0 {
        metrics::counter!("fenced.lease.renewals", "outcome" => "applied").increment(applied);
    }
    if failed > 0 {
        metrics::counter!("fenced.lease.renewals", "outcome" => "failed").increment(failed);
    }
}

pub(crate) fn lease_lost(primitive: Primitive) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::counter!("fenced.lease.lost", "primitive" => $p).increment(1)
        };
    }
    by_primitive!(primitive, emit!())
}

/// A lease this process holds from now on (`fenced.lock.active`).
pub(crate) fn held_from(primitive: Primitive) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::gauge!("fenced.lock.active", "primitive" => $p).increment(1.0)
        };
    }
    by_primitive!(primitive, emit!())
}

/// A lease this process held for `held`, its guard done with it now.
pub(crate) fn held_for(primitive: Primitive, held: Duration) {
    macro_rules! emit {
        (() $p:tt) => {{
            metrics::gauge!("fenced.lock.active", "primitive" => $p).decrement(1.0);
            metrics::histogram!("fenced.lock.held.duration", "primitive" => $p)
                .record(held.as_secs_f64());
        }};
    }
    by_primitive!(primitive, emit!())
}

/// A task that waits after a busy attempt (`fenced.lock.waiting`), counted from its first
/// busy answer until it is dropped (acquired, given up, or cancelled).
#[derive(Default)]
pub(crate) struct Waiting {
    counted: std::sync::OnceLock<(Primitive, Option<std::sync::Arc<str>>)>,
}

impl Waiting {
    /// Counts this wait, once; `name`: also by name (`ClientBuilder::metrics_by_name`).
    pub(crate) fn busy(&self, primitive: Primitive, name: Option<&std::sync::Arc<str>>) {
        if self.counted.set((primitive, name.cloned())).is_ok() {
            waiting(primitive, name, 1.0);
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some((primitive, name)) = self.counted.get() {
            waiting(*primitive, name.as_ref(), -1.0);
        }
    }
}

fn waiting(primitive: Primitive, name: Option<&std::sync::Arc<str>>, by: f64) {
    macro_rules! emit {
        (() $p:tt) => {{
            metrics::gauge!("fenced.lock.waiting", "primitive" => $p).increment(by);
            if let Some(name) = name {
                metrics::gauge!(
                    "fenced.lock.waiting.by_name",
                    "primitive" => $p,
                    "name" => name.to_string()
                )
                .increment(by);
            }
        }};
    }
    by_primitive!(primitive, emit!())
}

/// Declares every series' unit and meaning to the recorder installed now (a Prometheus
/// exporter prints them as `# HELP`), once per process.
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        ONCE.call_once(|| {
            use metrics::Unit;
            metrics::describe_counter!("fenced.lock.attempts", "Acquire attempts sent, by outcome");
            metrics::describe_counter!("fenced.lock.acquired", "Leases acquired");
            metrics::describe_counter!("fenced.lock.not_acquired", "Waits that ran out");
            metrics::describe_histogram!(
                "fenced.lock.wait.duration",
                Unit::Seconds,
                "Time spent acquiring"
            );
            metrics::describe_histogram!(
                "fenced.lock.held.duration",
                Unit::Seconds,
                "Time a lease was held"
            );
            metrics::describe_gauge!("fenced.lock.active", "Leases held by this process");
            metrics::describe_gauge!(
                "fenced.lock.waiting",
                "Tasks waiting for a lease held elsewhere"
            );
            metrics::describe_gauge!("fenced.lock.waiting.by_name", "Tasks waiting, per name");
            metrics::describe_counter!("fenced.lock.released", "Releases, by outcome");
            metrics::describe_counter!("fenced.lease.renewals", "Lease renewals, by outcome");
            metrics::describe_counter!("fenced.lease.lost", "Leases lost while held");
            metrics::describe_counter!(
                "fenced.resource.stale_writes",
                "Writes refused for a stale fencing token"
            );
            metrics::describe_counter!(
                "fenced.transaction.conflicts",
                "Optimistic transactions retried"
            );
            metrics::describe_counter!("fenced.cache.lookups", "Cache lookups, by result");
            metrics::describe_counter!("fenced.cache.computes", "Cache computations, by outcome");
        });
    }
}

pub(crate) fn fenced_write_rejected() {
    metrics::counter!("fenced.resource.stale_writes").increment(1);
}

pub(crate) fn transaction_conflict() {
    metrics::counter!("fenced.transaction.conflicts").increment(1);
}

pub(crate) fn cache_lookup(result: &'static str) {
    metrics::counter!("fenced.cache.lookups", "result" => result).increment(1);
}

pub(crate) fn cache_computed(outcome: &'static str) {
    metrics::counter!("fenced.cache.computes", "outcome" => outcome).increment(1);
}

#[cfg(all(test, feature = "metrics"))]
mod tests {
    use super::*;
    use metrics_util::debugging::DebuggingRecorder;

    fn every_primitive() -> [Primitive; 9] {
        // A new primitive stops this from compiling until it is listed below too.
        let _listed = |p: Primitive| match p {
            Primitive::Lock
            | Primitive::ReentrantLock
            | Primitive::Semaphore
            | Primitive::RwRead
            | Primitive::RwWrite
            | Primitive::FairLock
            | Primitive::MultiLock
            | Primitive::UnfencedLock
            | Primitive::Election => (),
        };
        [
            Primitive::Lock,
            Primitive::ReentrantLock,
            Primitive::Semaphore,
            Primitive::RwRead,
            Primitive::RwWrite,
            Primitive::FairLock,
            Primitive::MultiLock,
            Primitive::UnfencedLock,
            Primitive::Election,
        ]
    }

    /// The label pairs of every series `emit` records, sorted.
    fn labels_of(emit: impl FnOnce()) -> Vec<Vec<(String, String)>> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, emit);
        let mut seen: Vec<Vec<(String, String)>> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .map(|(key, ..)| {
                key.key()
                    .labels()
                    .map(|l| (l.key().to_owned(), l.value().to_owned()))
                    .collect()
            })
            .collect();
        seen.sort();
        seen
    }

    fn pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn the_literal_labels_are_the_primitives_own_names() {
        for p in every_primitive() {
            let name = p.as_str();
            assert_eq!(
                labels_of(|| {
                    acquired(p, Via::Attempt);
                    acquired(p, Via::Handover);
                }),
                vec![
                    pairs(&[("primitive", name), ("outcome", "acquired")]),
                    pairs(&[("primitive", name), ("via", Via::Attempt.as_str())]),
                    pairs(&[("primitive", name), ("via", Via::Handover.as_str())]),
                ]
            );
            for (outcome, label) in [
                (Outcome::Released, "released"),
                (Outcome::HandedOver, "handed_over"),
                (Outcome::NotHeld, "not_held"),
                (Outcome::Failed, "failed"),
            ] {
                assert_eq!(
                    labels_of(|| released(p, outcome)),
                    vec![pairs(&[("primitive", name), ("outcome", label)])]
                );
            }
            assert_eq!(
                labels_of(|| busy(p)),
                vec![pairs(&[("primitive", name), ("outcome", "busy")])]
            );
            // The active gauge and the held histogram.
            assert_eq!(
                labels_of(|| held_for(p, Duration::ZERO)),
                vec![pairs(&[("primitive", name)]), pairs(&[("primitive", name)])]
            );
            for emit in [
                (|p| held_from(p)) as fn(Primitive),
                |p| lease_lost(p),
                |p| waited(p, Duration::ZERO),
                |p| not_acquired(Some(p)),
            ] {
                assert_eq!(labels_of(|| emit(p)), vec![pairs(&[("primitive", name)])]);
            }
        }
        assert_eq!(
            labels_of(|| not_acquired(None)),
            vec![pairs(&[("primitive", "unknown")])]
        );
    }
}

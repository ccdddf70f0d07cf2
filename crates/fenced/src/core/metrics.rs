//! What the library reports through the [`metrics`] facade: nothing is recorded unless the
//! application installs a recorder (Prometheus, StatsD, ...), and then every primitive reports
//! the same series. Labels are bounded: the primitive (`lock`, `reentrant_lock`, `semaphore`,
//! `rw_read`, `rw_write`, `fair_lock`, `multi_lock`) and an outcome, never a lock's name.
//!
//! | series | kind | labels |
//! |---|---|---|
//! | `fenced_acquisitions_total` | counter | `primitive`, `via` = `attempt` or `handover` |
//! | `fenced_acquire_wait_seconds` | histogram | `primitive` |
//! | `fenced_acquire_busy_total` | counter | `primitive` (an attempt found it taken: contention) |
//! | `fenced_not_acquired_total` | counter | `primitive` (the wait ran out) |
//! | `fenced_releases_total` | counter | `primitive`, `outcome` = `released`, `handed_over`, `not_held`, `failed` |
//! | `fenced_renewals_total` | counter | `outcome` = `applied`, `failed` |
//! | `fenced_leases_lost_total` | counter | `primitive` |
//! | `fenced_fenced_writes_rejected_total` | counter | (a stale token refused at a resource) |
//! | `fenced_transaction_conflicts_total` | counter | (an optimistic transaction retried) |
//! | `fenced_cache_lookups_total` | counter | `result` = `hit`, `stale`, `shared` (another caller's compute), `computed` (this caller's) |
//! | `fenced_cache_computes_total` | counter | `outcome` = `stored`, `refused` (fenced off), `failed` |

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
        pub(crate) fn increment(&self, _: u64) {}
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
    pub(crate) use {counter, histogram};
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
            metrics::counter!("fenced_acquisitions_total", "primitive" => $p, "via" => $v)
                .increment(1)
        };
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
            metrics::histogram!("fenced_acquire_wait_seconds", "primitive" => $p)
                .record(waited.as_secs_f64())
        };
    }
    by_primitive!(primitive, emit!())
}

pub(crate) fn busy(primitive: Primitive) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::counter!("fenced_acquire_busy_total", "primitive" => $p).increment(1)
        };
    }
    by_primitive!(primitive, emit!())
}

/// A wait that ran out; `None` when no attempt was even made (its primitive is unknown).
pub(crate) fn not_acquired(primitive: Option<Primitive>) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::counter!("fenced_not_acquired_total", "primitive" => $p).increment(1)
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
            metrics::counter!("fenced_releases_total", "primitive" => $p, "outcome" => $o)
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
        metrics::counter!("fenced_renewals_total", "outcome" => "applied").increment(applied);
    }
    if failed > 0 {
        metrics::counter!("fenced_renewals_total", "outcome" => "failed").increment(failed);
    }
}

pub(crate) fn lease_lost(primitive: Primitive) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::counter!("fenced_leases_lost_total", "primitive" => $p).increment(1)
        };
    }
    by_primitive!(primitive, emit!())
}

pub(crate) fn fenced_write_rejected() {
    metrics::counter!("fenced_fenced_writes_rejected_total").increment(1);
}

pub(crate) fn transaction_conflict() {
    metrics::counter!("fenced_transaction_conflicts_total").increment(1);
}

pub(crate) fn cache_lookup(result: &'static str) {
    metrics::counter!("fenced_cache_lookups_total", "result" => result).increment(1);
}

pub(crate) fn cache_computed(outcome: &'static str) {
    metrics::counter!("fenced_cache_computes_total", "outcome" => outcome).increment(1);
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
            for emit in [
                (|p| busy(p)) as fn(Primitive),
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

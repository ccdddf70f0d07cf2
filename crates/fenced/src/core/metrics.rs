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

/// `$emit!((before) $value)`, with `$value` as a string literal when it is one of the choices
/// and as the variable otherwise. A series whose labels are all literals has a `static` key; a
/// label taken from a variable builds and allocates its key on every event, which cost a lock
/// cycle about 2 % of its client instructions, recorder or not.
macro_rules! literal {
    ($value:expr, [$($choice:literal),+], $emit:ident!$before:tt) => {
        match $value {
            $($choice => $emit!($before $choice),)+
            other => {
                // Still counted, at the price of an allocation; tests run with every primitive.
                debug_assert!(false, "{other:?} is missing from its list of label values");
                $emit!($before other)
            }
        }
    };
}

/// [`literal!`] over the primitives' names (`LeaseKind::primitive`).
macro_rules! primitive {
    ($value:expr, $emit:ident!$before:tt) => {
        literal!(
            $value,
            [
                "lock",
                "reentrant_lock",
                "semaphore",
                "rw_read",
                "rw_write",
                "fair_lock",
                "multi_lock"
            ],
            $emit!$before
        )
    };
}

pub(crate) fn acquired(primitive: &'static str, via: &'static str) {
    macro_rules! emit {
        (($p:tt) $v:tt) => {
            metrics::counter!("fenced_acquisitions_total", "primitive" => $p, "via" => $v)
                .increment(1)
        };
    }
    macro_rules! by_via {
        (() $p:tt) => {
            literal!(via, ["attempt", "handover"], emit!($p))
        };
    }
    primitive!(primitive, by_via!())
}

pub(crate) fn waited(primitive: &'static str, waited: Duration) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::histogram!("fenced_acquire_wait_seconds", "primitive" => $p)
                .record(waited.as_secs_f64())
        };
    }
    primitive!(primitive, emit!())
}

pub(crate) fn busy(primitive: &'static str) {
    macro_rules! emit {
        (() $p:tt) => {
            metrics::counter!("fenced_acquire_busy_total", "primitive" => $p).increment(1)
        };
    }
    primitive!(primitive, emit!())
}

pub(crate) fn not_acquired(primitive: &'static str) {
    metrics::counter!("fenced_not_acquired_total", "primitive" => primitive).increment(1);
}

pub(crate) fn released(primitive: &'static str, outcome: &'static str) {
    macro_rules! emit {
        (($p:tt) $o:tt) => {
            metrics::counter!("fenced_releases_total", "primitive" => $p, "outcome" => $o)
                .increment(1)
        };
    }
    macro_rules! by_outcome {
        (() $p:tt) => {
            literal!(
                outcome,
                ["released", "handed_over", "not_held", "failed"],
                emit!($p)
            )
        };
    }
    primitive!(primitive, by_outcome!())
}

pub(crate) fn renewals(applied: u64, failed: u64) {
    if applied > 0 {
        metrics::counter!("fenced_renewals_total", "outcome" => "applied").increment(applied);
    }
    if failed > 0 {
        metrics::counter!("fenced_renewals_total", "outcome" => "failed").increment(failed);
    }
}

pub(crate) fn lease_lost(primitive: &'static str) {
    metrics::counter!("fenced_leases_lost_total", "primitive" => primitive).increment(1);
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

//! What the library reports through the `metrics` facade, read back with a recorder installed
//! for this test binary alone (its own process: the recorder is global).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fenced::resource::FencedWrite;
use fenced::{FencingToken, WaitPolicy};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};

#[path = "support/mod.rs"]
#[allow(unused_macros, unused_imports)] // the shared helpers, of which this binary uses a few
mod support;

type Seen = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The total of a counter, over the label sets that contain every pair of `labels`.
fn counter(seen: &Seen, name: &str, labels: &[(&str, &str)]) -> u64 {
    seen.iter()
        .filter(|(key, ..)| key.key().name() == name)
        .filter(|(key, ..)| {
            labels
                .iter()
                .all(|(k, v)| key.key().labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(.., value)| match value {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

fn histogram_count(seen: &Seen, name: &str) -> usize {
    seen.iter()
        .filter(|(key, ..)| key.key().name() == name)
        .map(|(.., value)| match value {
            DebugValue::Histogram(v) => v.len(),
            _ => 0,
        })
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primitive_reports_acquisitions_contention_releases_and_losses() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this process");
    let server = support::server();
    let c = support::client(&server).await;

    // A plain lock: taken, contended (one busy attempt, then a wait that runs out), released.
    let g = c.lock("m").acquire().await.unwrap();
    let waiter = c
        .lock("m")
        .with_wait(WaitPolicy::up_to(Duration::from_millis(100)));
    assert!(waiter.acquire().await.is_err());
    g.release().await.unwrap();
    // A semaphore permit and a read lease.
    c.semaphore("pool", 2)
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    c.rw_lock("doc")
        .read()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // A lease that is lost: deleted behind its holder's back, found at its next renewal.
    let doomed = c
        .lock("doomed")
        .with_ttl(Duration::from_millis(300))
        .acquire()
        .await
        .unwrap();
    let mut raw = support::raw(&server).await;
    let _: () = redis::cmd("DEL")
        .arg("fenced:{doomed}")
        .query_async(&mut raw)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), doomed.lost())
        .await
        .expect("the loss is noticed");
    // A stale write refused at a resource.
    let res = c.resource("stock");
    res.set(FencingToken::new(9), "n", "1").await.unwrap();
    assert!(matches!(
        res.set(FencingToken::new(5), "n", "2").await.unwrap(),
        FencedWrite::Stale { .. }
    ));

    // One snapshot (a snapshot drains the histograms).
    let seen: Seen = snapshotter.snapshot().into_vec();
    let got = |name, labels: &[(&str, &str)]| counter(&seen, name, labels);
    assert_eq!(
        got(
            "fenced_acquisitions_total",
            &[("primitive", "lock"), ("via", "attempt")]
        ),
        2
    );
    assert_eq!(
        got("fenced_acquisitions_total", &[("primitive", "semaphore")]),
        1
    );
    assert_eq!(
        got("fenced_acquisitions_total", &[("primitive", "rw_read")]),
        1
    );
    assert!(got("fenced_acquire_busy_total", &[("primitive", "lock")]) >= 1);
    assert_eq!(
        got("fenced_not_acquired_total", &[("primitive", "lock")]),
        1
    );
    assert_eq!(
        got(
            "fenced_releases_total",
            &[("primitive", "lock"), ("outcome", "released")]
        ),
        1
    );
    assert_eq!(
        got("fenced_releases_total", &[("primitive", "semaphore")]),
        1
    );
    assert_eq!(got("fenced_leases_lost_total", &[("primitive", "lock")]), 1);
    assert!(got("fenced_renewals_total", &[("outcome", "failed")]) >= 1);
    assert_eq!(got("fenced_fenced_writes_rejected_total", &[]), 1);
    assert!(histogram_count(&seen, "fenced_acquire_wait_seconds") >= 3);
}

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

/// A gauge's value for exactly `labels` (0 when it was never set).
fn gauge(seen: &Seen, name: &str, labels: &[(&str, &str)]) -> f64 {
    seen.iter()
        .filter(|(key, ..)| key.key().name() == name)
        .filter(|(key, ..)| {
            key.key().labels().count() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| key.key().labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(.., value)| match value {
            DebugValue::Gauge(v) => v.into_inner(),
            _ => 0.0,
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
    // From a task of its own: this one holds the lock, and would be refused at once.
    let waited = tokio::spawn(async move { waiter.acquire().await.map(drop) });
    assert!(matches!(
        waited.await.unwrap(),
        Err(fenced::Error::NotAcquired { .. })
    ));
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

    // A waiter counted while it waits, per primitive and (asked for) per name.
    let named = fenced::Client::builder(&server.url())
        .metrics_by_name(true)
        .connect()
        .await
        .unwrap();
    let holder = named.lock("job").acquire().await.unwrap();
    let waiter = {
        let lock = named
            .lock("job")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(10)));
        tokio::spawn(async move { lock.acquire().await.unwrap().release().await })
    };
    // Subscribed to the lock's releases: past its busy attempt, so counted.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while named.lock("job").status().await.unwrap().waiting_clients == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the waiter never waits"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The recorder's snapshot reads every series and sets it back to zero: counters and
    // gauges are summed over the snapshots below, and a gauge's sum is its value.
    let during: Seen = snapshotter.snapshot().into_vec();
    let by_name = [("primitive", "lock"), ("name", "job")];
    assert_eq!(gauge(&during, "fenced.lock.waiting.by_name", &by_name), 1.0);
    assert_eq!(
        gauge(&during, "fenced.lock.waiting", &[("primitive", "lock")]),
        1.0
    );
    holder.release().await.unwrap();
    waiter.await.unwrap().unwrap();

    // Nothing waits or is held any more once the lost lease's guard is gone.
    drop(doomed);
    let mut seen = during;
    seen.extend(snapshotter.snapshot().into_vec());
    let got = |name, labels: &[(&str, &str)]| counter(&seen, name, labels);
    // The waiter of the same client is handed the lock by its holder's release.
    assert_eq!(got("fenced.lock.acquired", &[("primitive", "lock")]), 4);
    assert_eq!(
        got(
            "fenced.lock.acquired",
            &[("primitive", "lock"), ("via", "handover")]
        ),
        1
    );
    assert_eq!(
        got("fenced.lock.acquired", &[("primitive", "semaphore")]),
        1
    );
    assert_eq!(got("fenced.lock.acquired", &[("primitive", "rw_read")]), 1);
    assert_eq!(
        got(
            "fenced.lock.attempts",
            &[("primitive", "lock"), ("outcome", "acquired")]
        ),
        3
    );
    assert!(
        got(
            "fenced.lock.attempts",
            &[("primitive", "lock"), ("outcome", "busy")]
        ) >= 2
    );
    assert_eq!(got("fenced.lock.not_acquired", &[("primitive", "lock")]), 1);
    assert_eq!(
        got(
            "fenced.lock.released",
            &[("primitive", "lock"), ("outcome", "released")]
        ),
        2
    );
    assert_eq!(
        got("fenced.lock.released", &[("primitive", "semaphore")]),
        1
    );
    assert_eq!(got("fenced.lease.lost", &[("primitive", "lock")]), 1);
    assert!(got("fenced.lease.renewals", &[("outcome", "failed")]) >= 1);
    assert_eq!(got("fenced.resource.stale_writes", &[]), 1);
    assert!(histogram_count(&seen, "fenced.lock.wait.duration") >= 5);
    assert!(histogram_count(&seen, "fenced.lock.held.duration") >= 5);
    for primitive in ["lock", "semaphore", "rw_read"] {
        let p = [("primitive", primitive)];
        assert_eq!(gauge(&seen, "fenced.lock.active", &p), 0.0, "{primitive}");
        assert_eq!(gauge(&seen, "fenced.lock.waiting", &p), 0.0, "{primitive}");
    }
    assert_eq!(gauge(&seen, "fenced.lock.waiting.by_name", &by_name), 0.0);
}

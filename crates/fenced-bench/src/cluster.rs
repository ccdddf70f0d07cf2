//! `cluster-uncontended-32`: 32 tasks, each taking and giving back a lock of its own, on a
//! Redis Cluster of 3 masters that the test kit forms on loopback. Set against the same
//! run's `uncontended-32` on one server: what routing by slot costs the client, and what
//! spreading the keys over three server processes gives back.

use fenced_testkit::RedisCluster;

use crate::measure::{Window, histogram, micros};
use crate::peers::TTL;
use crate::report::Row;
use crate::scenario::{BoxError, Library, Scenario};

pub(crate) async fn uncontended(library: Library, window: Window) -> Result<Row, BoxError> {
    if library != Library::Fenced {
        return Err(format!("{} does not run on a cluster here", library.name()).into());
    }
    // Forming the cluster takes a second or two; the window starts after it.
    let forming = tokio::time::Instant::now();
    let cluster = tokio::task::spawn_blocking(|| RedisCluster::start(3, 0)).await??;
    let client = fenced::Client::cluster_builder(&cluster.urls())
        .connect()
        .await?;
    let window = window.later(forming.elapsed());
    let mut handles = Vec::new();
    for t in 0..32 {
        let lock = client
            .lock(format!("bench:cluster-uncontended-32:{t}"))
            .with_ttl(TTL);
        handles.push(tokio::spawn(async move {
            let mut hist = histogram()?;
            while tokio::time::Instant::now() < window.end {
                let started = tokio::time::Instant::now();
                let guard = lock
                    .try_acquire()
                    .await?
                    .ok_or("a lock of one task was held by another")?;
                guard.release().await?;
                if window.measures(started) {
                    hist.record(micros(started.elapsed()))?;
                }
            }
            Ok::<_, BoxError>(hist)
        }));
    }
    let mut total = histogram()?;
    for h in handles {
        total.add(h.await??)?;
    }
    Ok(Row {
        scenario: Scenario::ClusterUncontended32.name().into(),
        library: library.name().into(),
        ops_per_sec: total.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: total.value_at_quantile(0.5) as f64,
        p99_us: total.value_at_quantile(0.99) as f64,
        ..Row::default()
    })
}

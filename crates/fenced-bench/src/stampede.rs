//! `stampede-1000`: a cold key asked for by 1000 requests at once, spread over 4 application
//! instances (4 clients), round after round. The "database" is a 20 ms wait that counts its
//! hits. Without protection (`cache-aside`: GET, on a miss query and SET) every request of the
//! stampede reaches the database; with `fenced-cache` (`Cache::get_or_compute`) one does.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::measure::{Window, histogram, micros};
use crate::report::Row;
use crate::scenario::{BoxError, Env, Library, Scenario};

/// Requests per round.
const REQUESTS: usize = 1000;
/// Application instances the requests are spread over (one client each).
const INSTANCES: usize = 4;
/// How long one database query takes.
const QUERY: Duration = Duration::from_millis(20);
const TTL: Duration = Duration::from_secs(60);

/// The database: a query takes [`QUERY`] and is counted.
#[derive(Clone, Default)]
struct Database {
    hits: Arc<AtomicU64>,
}

impl Database {
    async fn query(&self, key: &str) -> Vec<u8> {
        self.hits.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(QUERY).await;
        format!("row of {key}").into_bytes()
    }
}

pub(crate) async fn stampede(library: Library, window: Window, env: &Env) -> Result<Row, BoxError> {
    let db = Database::default();
    let mut instances = Vec::with_capacity(INSTANCES);
    for _ in 0..INSTANCES {
        let client = fenced::Client::connect(&env.url).await?;
        let conn = redis::Client::open(env.url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        instances.push((client.cache("bench:stampede"), conn));
    }
    let mut latency = histogram()?;
    let (mut rounds, mut requests, mut hits_measured) = (0u64, 0u64, 0u64);
    // Keys never repeat across runs: a repeated run must find them cold too.
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let run = RUNS.fetch_add(1, Ordering::Relaxed);
    let mut round = 0u64;
    while Instant::now() < window.end {
        let key = format!("r{run}k{round}");
        round += 1;
        let hits_before = db.hits.load(Ordering::Relaxed);
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(REQUESTS);
        for i in 0..REQUESTS {
            let (cache, mut conn) = instances[i % INSTANCES].clone();
            let (db, key) = (db.clone(), key.clone());
            tasks.push(tokio::spawn(async move {
                let value = match library {
                    Library::FencedCache => {
                        cache
                            .get_or_compute(&key, TTL, |_lease| async {
                                Ok::<_, fenced::Error>(Some(db.query(&key).await))
                            })
                            .await?
                    }
                    _ => {
                        let full = format!("bench:aside:{key}");
                        let cached: Option<Vec<u8>> =
                            redis::cmd("GET").arg(&full).query_async(&mut conn).await?;
                        match cached {
                            Some(v) => Some(v),
                            None => {
                                let v = db.query(&key).await;
                                let _: () = redis::cmd("SET")
                                    .arg(&full)
                                    .arg(&v)
                                    .arg("PX")
                                    .arg(TTL.as_millis() as u64)
                                    .query_async(&mut conn)
                                    .await?;
                                Some(v)
                            }
                        }
                    }
                };
                if value.is_none() {
                    return Err::<Instant, BoxError>("a request got no value".into());
                }
                Ok(Instant::now())
            }));
        }
        let mut done = Vec::with_capacity(REQUESTS);
        for t in tasks {
            done.push(t.await??);
        }
        if window.measures(started) {
            rounds += 1;
            requests += REQUESTS as u64;
            hits_measured += db.hits.load(Ordering::Relaxed) - hits_before;
            for at in done {
                latency.record(micros(at.saturating_duration_since(started)))?;
            }
        }
    }
    Ok(Row {
        scenario: Scenario::Stampede1000.name().into(),
        library: library.name().into(),
        ops_per_sec: requests as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: latency.value_at_quantile(0.5) as f64,
        p99_us: latency.value_at_quantile(0.99) as f64,
        max_wait_ms: Some(latency.max() as f64 / 1000.0),
        db_hits_per_round: Some(if rounds == 0 {
            0.0
        } else {
            hits_measured as f64 / rounds as f64
        }),
        ..Row::default()
    })
}

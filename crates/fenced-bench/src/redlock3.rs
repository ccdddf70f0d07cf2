//! `redlock-3`: one task taking and giving back a lock over 3 independent masters, each behind
//! a proxy that delays its replies by 1 ms (a network round trip, on loopback), so that what a
//! Redlock implementation does per cycle shows: parallel or sequential fan-out, deciding at
//! the majority or waiting for every node, a connection per command or a kept one.

use std::time::Duration;

use fenced_testkit::{Fault, Proxy, RedisServer};
use hdrhistogram::Histogram;
use tokio::time::Instant;

use crate::measure::{Window, histogram, micros};
use crate::peers::TTL;
use crate::report::Row;
use crate::scenario::{BoxError, Library, Scenario};

/// The delay each proxy adds to every reply.
pub(crate) const DELAY: Duration = Duration::from_millis(1);

/// The delay of the one slow master of `redlock-5-slow`.
pub(crate) const SLOW: Duration = Duration::from_millis(50);

pub(crate) async fn redlock3(library: Library, window: Window) -> Result<Row, BoxError> {
    redlock(Scenario::Redlock3, 3, None, library, window).await
}

/// `n` masters, each `DELAY` away; with `slow`, the last one that far instead.
pub(crate) async fn redlock(
    scenario: Scenario,
    n: usize,
    slow: Option<Duration>,
    library: Library,
    window: Window,
) -> Result<Row, BoxError> {
    let servers: Vec<RedisServer> = (0..n)
        .map(|_| RedisServer::start())
        .collect::<Result<_, _>>()?;
    let proxies: Vec<Proxy> = servers
        .iter()
        .map(|s| Proxy::start(s.addr()))
        .collect::<Result<_, _>>()?;
    for (i, p) in proxies.iter().enumerate() {
        let delay = match slow {
            Some(d) if i + 1 == n => d,
            _ => DELAY,
        };
        p.set(Fault::DelayReplies(delay));
    }
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let name = format!("bench:{}:{}", scenario.name(), library.name());
    let hist = match library {
        Library::Fenced => {
            let client = fenced::Client::redlock_builder(&urls).connect().await?;
            let lock = client.lock(&name).with_ttl(TTL);
            let mut hist = histogram()?;
            while Instant::now() < window.end {
                let started = Instant::now();
                let guard = lock
                    .try_acquire()
                    .await?
                    .ok_or("fenced redlock unexpectedly held")?;
                guard.release().await?;
                if window.measures(started) {
                    hist.record(micros(started.elapsed()))?;
                }
            }
            hist
        }
        Library::Raw => {
            let masters = RawMasters::connect(&urls, &name).await?;
            let mut hist = histogram()?;
            while Instant::now() < window.end {
                let started = Instant::now();
                let token = masters
                    .try_acquire()
                    .await
                    .ok_or("raw redlock unexpectedly held")?;
                masters.release(&token).await;
                if window.measures(started) {
                    hist.record(micros(started.elapsed()))?;
                }
            }
            hist
        }
        Library::Rslock => {
            let manager = rslock::LockManager::new(urls.clone());
            let mut hist = histogram()?;
            while Instant::now() < window.end {
                let started = Instant::now();
                let held = manager.lock(name.as_bytes(), TTL).await?;
                held.release().await;
                if window.measures(started) {
                    hist.record(micros(started.elapsed()))?;
                }
            }
            hist
        }
        Library::Redlock => {
            let rl = redlock::RedLock::new(urls.clone());
            tokio::task::spawn_blocking(move || -> Result<Histogram<u64>, BoxError> {
                let mut hist = histogram()?;
                while Instant::now() < window.end {
                    let started = Instant::now();
                    let held = rl
                        .lock(name.as_bytes(), crate::peers::redlock_ttl())?
                        .ok_or("redlock unexpectedly held")?;
                    rl.unlock(&held);
                    if window.measures(started) {
                        hist.record(micros(started.elapsed()))?;
                    }
                }
                Ok(hist)
            })
            .await??
        }
        other => {
            return Err(format!("{} does not run {}", other.name(), scenario.name()).into());
        }
    };
    Ok(Row {
        scenario: scenario.name().into(),
        library: library.name().into(),
        ops_per_sec: hist.len() as f64 / window.duration.as_secs_f64(),
        runs: 1,
        p50_us: hist.value_at_quantile(0.5) as f64,
        p99_us: hist.value_at_quantile(0.99) as f64,
        ..Row::default()
    })
}

/// The floor of a Redlock: written by hand with redis-rs, as a careful user would, without
/// fencing tokens. `SET NX PX` sent to every master at once on kept connections, decided as
/// soon as a majority answered; the release (compare-and-delete) the same way.
struct RawMasters {
    locks: Vec<crate::raw::RawLock>,
}

impl RawMasters {
    async fn connect(urls: &[String], name: &str) -> Result<Self, BoxError> {
        let mut locks = Vec::with_capacity(urls.len());
        for url in urls {
            let conn = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            locks.push(crate::raw::RawLock::new(conn, name));
        }
        Ok(RawMasters { locks })
    }

    fn quorum(&self) -> usize {
        self.locks.len() / 2 + 1
    }

    /// The token, once a majority granted it; `None` when a majority refused.
    async fn try_acquire(&self) -> Option<String> {
        let token = crate::raw::random_token();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for lock in &self.locks {
            let (mut lock, token, tx) = (lock.clone(), token.clone(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send(lock.set_nx(&token).await.unwrap_or(false));
            });
        }
        drop(tx);
        let (mut yes, mut no) = (0, 0);
        while let Some(granted) = rx.recv().await {
            if granted {
                yes += 1;
            } else {
                no += 1;
            }
            if yes >= self.quorum() {
                return Some(token);
            }
            if no > self.locks.len() - self.quorum() {
                return None;
            }
        }
        None
    }

    /// Compare-and-delete everywhere, done once a majority answered.
    async fn release(&self, token: &str) {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        for lock in &self.locks {
            let (mut lock, token, tx) = (lock.clone(), token.to_owned(), tx.clone());
            tokio::spawn(async move {
                let _ = tx.send(lock.release(&token).await.is_ok());
            });
        }
        drop(tx);
        let mut answered = 0;
        while rx.recv().await.is_some() {
            answered += 1;
            if answered >= self.quorum() {
                return;
            }
        }
    }
}

//! A worker: one process, one `fenced` client, critical sections in a loop, each printed as a
//! JSON line on stdout.
//!
//! Workers are processes, not tasks, so that the nemeses are real: SIGSTOP freezes the holder
//! and its renewal task together (a GC pause), SIGKILL leaves its lease behind (a crash), and a
//! proxy per worker partitions one holder from Redis while the others go on.
//!
//! The runtime has one thread on purpose: the "starve" command blocks it, which starves the
//! renewal task exactly as a busy executor would.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use fenced::redis::{self, aio::MultiplexedConnection};
use fenced::resource::{FencedRead, FencedWrite};
use fenced::{Client, Error, WaitPolicy};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncBufReadExt;

use crate::history::{Event, Rng, Section, Write, now_ns};
use crate::mutants::Mutant;
use crate::workload::Workload;

/// A worker's settings, passed as one JSON argument.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Config {
    /// This worker's id.
    pub id: u32,
    /// What to do.
    pub workload: Workload,
    /// The lock servers, each through this worker's own proxy.
    pub lock_urls: Vec<String>,
    /// The store holding the protected counters (never faulted: the "database").
    pub store_url: String,
    /// How many independent keys the workers spread over.
    pub keys: u32,
    /// Lease ttl, ms.
    pub ttl_ms: u64,
    /// Per-call timeout, ms.
    pub timeout_ms: u64,
    /// How long an acquire may wait, ms.
    pub wait_ms: u64,
    /// Work inside each section, µs (a sleep).
    pub work_us: u64,
    /// The `fenced` command, for the `run` workload.
    #[serde(default)]
    pub fenced_bin: Option<String>,
    /// The directory of the `run` workload's files, one per key.
    #[serde(default)]
    pub run_dir: Option<String>,
    /// The broken behaviour this worker plays, if any (`mutants.rs`).
    #[serde(default)]
    pub mutant: Option<Mutant>,
}

/// Runs a worker until its stdin closes or says "stop". Returns the process exit code.
pub fn run(config: &str) -> i32 {
    let config: Config = match serde_json::from_str(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fenced-chaos worker: bad config: {e}");
            return 64;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("fenced-chaos worker: {e}");
            return 70;
        }
    };
    runtime.block_on(work(config))
}

struct Commands {
    stop: AtomicBool,
    starve_ms: AtomicU64,
    /// Pause this long, once, at the next section's linger point, announcing it.
    linger_ms: AtomicU64,
    /// Linger after the lost-signal check (the fence must stop the write) instead of before.
    linger_after_check: AtomicBool,
}

async fn work(config: Config) -> i32 {
    let commands = Arc::new(Commands {
        stop: AtomicBool::new(false),
        starve_ms: AtomicU64::new(0),
        linger_ms: AtomicU64::new(0),
        linger_after_check: AtomicBool::new(false),
    });
    tokio::spawn(read_commands(commands.clone()));
    let Some((client, store)) = connect(&config, &commands).await else {
        return 0;
    };
    emit(&Event::Ready { w: config.id });
    if config.workload == Workload::Election {
        for key in 0..config.keys {
            tokio::spawn(observe(client.clone(), config.id, key));
        }
    }
    let mut rng = Rng::new(None);
    while !commands.stop.load(Ordering::Relaxed) {
        let key = u32::try_from(rng.below(u64::from(config.keys))).unwrap_or(0);
        let event = match config.workload {
            Workload::Optimistic => transaction(&config, &client, key, &commands).await,
            Workload::Run => run_command(&config, key, &commands).await,
            _ => section(&config, &client, &store, key, &commands).await,
        };
        emit(&event);
    }
    0
}

/// Where the protected counters live.
enum Store {
    /// A fenced client: counters are [`fenced::FencedResource`]s.
    Fenced(Client),
    /// A plain connection, for the unfenced workload.
    Plain(MultiplexedConnection),
}

/// Connects to the lock servers and the store, retrying while a nemesis keeps them away.
async fn connect(config: &Config, commands: &Commands) -> Option<(Client, Store)> {
    let timeout = Duration::from_millis(config.timeout_ms);
    let ttl = Duration::from_millis(config.ttl_ms);
    loop {
        if commands.stop.load(Ordering::Relaxed) {
            return None;
        }
        let lock = if config.lock_urls.len() > 1 {
            Client::redlock_builder(&config.lock_urls)
        } else {
            Client::builder(config.lock_urls.first().map_or("", String::as_str))
        };
        // The mixed workload's workers, in turn: by transaction, by script, without scripts.
        // The others grant as a client does by default.
        let mixed = config.workload == Workload::LockMixed;
        let turn = if mixed { config.id % 3 } else { 0 };
        let mut lock = lock.counted_grants(turn != 1);
        if turn == 2 {
            lock = lock.without_scripts();
        }
        let lock = lock
            .timeout(timeout)
            .default_ttl(ttl)
            .keyspace_events(config.workload == Workload::LockEvents)
            .connect()
            .await;
        let store = connect_store(config).await;
        match (lock, store) {
            (Ok(l), Some(s)) => return Some((l, s)),
            (Err(e @ Error::InvalidArgument(_)), _) => {
                eprintln!("fenced-chaos worker: {e}");
                return None;
            }
            _ => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

async fn connect_store(config: &Config) -> Option<Store> {
    if config.workload == Workload::Unfenced {
        let client = redis::Client::open(config.store_url.as_str()).ok()?;
        let conn = tokio::time::timeout(
            Duration::from_secs(2),
            client.get_multiplexed_async_connection(),
        )
        .await
        .ok()?
        .ok()?;
        return Some(Store::Plain(conn));
    }
    Client::builder(&config.store_url)
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .ok()
        .map(Store::Fenced)
}

async fn read_commands(commands: Arc<Commands>) {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let mut words = line.split_whitespace();
        match (words.next(), words.next().and_then(|n| n.parse().ok())) {
            (Some("starve"), Some(ms)) => commands.starve_ms.store(ms, Ordering::Relaxed),
            (Some(how @ ("linger-before-check" | "linger-after-check")), Some(ms)) => {
                let after = how == "linger-after-check";
                commands.linger_after_check.store(after, Ordering::Relaxed);
                commands.linger_ms.store(ms, Ordering::Relaxed);
            }
            (Some("stop"), _) => break,
            _ => {}
        }
    }
    commands.stop.store(true, Ordering::Relaxed);
}

/// One critical section of a leased workload.
async fn section(
    config: &Config,
    client: &Client,
    store: &Store,
    key: u32,
    commands: &Commands,
) -> Event {
    let ttl = Duration::from_millis(config.ttl_ms);
    let wait = WaitPolicy::up_to(Duration::from_millis(config.wait_ms));
    let name = format!("chaos:{key}");
    let inv = now_ns();
    let failed = |e: Error| acquire_failed(config.id, key, inv, &e);
    // Each arm takes its lease, emits `Acquired`, does the work, and releases.
    match config.workload {
        Workload::Semaphore => {
            let permits = if config.mutant == Some(Mutant::SemaphoreOvergrant) {
                3
            } else {
                2
            };
            let sem = client
                .semaphore(name, permits)
                .with_ttl(ttl)
                .with_wait(wait);
            let permit = match sem.acquire().await {
                Ok(p) => p,
                Err(e) => return failed(e),
            };
            let (ok, t) = acquired(config.id, key, inv, permit.fencing_token().get());
            let stalled = stall(commands, config.id).await;
            linger(commands, config.id, false).await;
            linger(commands, config.id, true).await;
            pause(config.work_us).await;
            let rel_inv = now_ns();
            let release = outcome(permit.release().await);
            finished(
                config.id,
                key,
                (t, inv, ok),
                (Write::None, None),
                rel_inv,
                release,
                stalled,
            )
        }
        Workload::Reentrant => {
            let lock = client.reentrant_lock(name).with_ttl(ttl).with_wait(wait);
            let outer = match lock.acquire().await {
                Ok(g) => g,
                Err(e) => return failed(e),
            };
            let (ok, t) = acquired(config.id, key, inv, outer.fencing_token().get());
            let stalled = stall(commands, config.id).await;
            // Enter again, as a nested call would; the inner hold shares the grant.
            let written = match outer.reenter().await {
                Ok(inner) => {
                    linger(commands, config.id, false).await;
                    let w = if inner.is_lost() {
                        (Write::Skipped, None)
                    } else {
                        increment(config, store, key, t, commands).await
                    };
                    let _ = inner.release().await;
                    w
                }
                Err(_) => (Write::Skipped, None),
            };
            let rel_inv = now_ns();
            let release = outcome(outer.release().await);
            finished(
                config.id,
                key,
                (t, inv, ok),
                written,
                rel_inv,
                release,
                stalled,
            )
        }
        Workload::Rw if rng_below(4) != 0 => {
            let lock = client.rw_lock(name).with_ttl(ttl).with_wait(wait);
            let guard = match lock.read().await {
                Ok(g) => g,
                Err(e) => return failed(e),
            };
            let (ok, t) = acquired(config.id, key, inv, guard.fencing_token().get());
            let stalled = stall(commands, config.id).await;
            linger(commands, config.id, false).await;
            linger(commands, config.id, true).await;
            let read = read_counter(config, store, key).await;
            let rel_inv = now_ns();
            let release = outcome(guard.release().await);
            finished(
                config.id,
                key,
                (t, inv, ok),
                (read, None),
                rel_inv,
                release,
                stalled,
            )
        }
        Workload::Rw => {
            let lock = client.rw_lock(name).with_ttl(ttl).with_wait(wait);
            let guard = match lock.write().await {
                Ok(g) => g,
                Err(e) => return failed(e),
            };
            let (ok, t) = acquired_as(config.id, key, inv, guard.fencing_token().get(), true);
            let stalled = stall(commands, config.id).await;
            linger(commands, config.id, false).await;
            let written = if guard.is_lost() {
                (Write::Skipped, None)
            } else {
                increment(config, store, key, t, commands).await
            };
            let rel_inv = now_ns();
            let release = outcome(guard.release().await);
            let mut event = finished(
                config.id,
                key,
                (t, inv, ok),
                written,
                rel_inv,
                release,
                stalled,
            );
            if let Event::Section(section) = &mut event {
                section.writer = true;
            }
            event
        }
        Workload::Election => {
            let election = client.election(name).with_ttl(ttl).with_wait(wait);
            match election.campaign(format!("w{}", config.id)).await {
                Ok(leadership) => {
                    // A new value, seen by every observer; refused if already deposed.
                    let _ = leadership.proclaim(format!("w{}'", config.id)).await;
                    let term = leadership.term().get();
                    write_under(config, store, key, commands, inv, leadership, term).await
                }
                Err(e) => failed(e),
            }
        }
        Workload::Unfenced => {
            let lock = client.lock(name).unfenced().with_ttl(ttl).with_wait(wait);
            match lock.acquire().await {
                // No token: its grants are not ordered by one.
                Ok(guard) => write_under(config, store, key, commands, inv, guard, 0).await,
                Err(e) => failed(e),
            }
        }
        _ if config.mutant.is_some() => {
            mutant_section(config, client, store, key, commands, inv).await
        }
        fair_or_plain => {
            let granted = if fair_or_plain == Workload::Fair {
                let lock = client.fair_lock(name).with_ttl(ttl).with_wait(wait);
                lock.acquire().await
            } else {
                let lock = client.lock(name).with_ttl(ttl).with_wait(wait);
                lock.acquire().await
            };
            match granted {
                Ok(guard) => {
                    let token = guard.fencing_token().get();
                    write_under(config, store, key, commands, inv, guard, token).await
                }
                Err(e) => failed(e),
            }
        }
    }
}

/// A section by a mutant (`mutants.rs`): what a broken library would do, with raw commands
/// where the library would refuse.
async fn mutant_section(
    config: &Config,
    client: &Client,
    store: &Store,
    key: u32,
    commands: &Commands,
    inv: u64,
) -> Event {
    static FIRST_TOKEN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    let ttl = Duration::from_millis(config.ttl_ms);
    let wait = WaitPolicy::up_to(Duration::from_millis(config.wait_ms));
    let name = format!("chaos:{key}");
    let lock_key = format!("fenced:{{{name}}}");
    let mutant = config.mutant.unwrap_or(Mutant::TokenNotIncreasing);
    if mutant == Mutant::HandoverToWrongWaiter {
        return wrong_handover(config, client, store, key, commands, inv).await;
    }
    let lock = client.lock(name).with_ttl(ttl).with_wait(wait);
    // The stalling mutants hold a lease that is not renewed, so that it ends while they stall.
    let lock = match mutant {
        Mutant::ReleaseWithoutOwnerCheck | Mutant::WriteSkipsFence | Mutant::RenewalAfterLoss => {
            lock.with_auto_renew(false)
        }
        _ => lock,
    };
    let guard = match lock.acquire().await {
        Ok(g) => g,
        Err(e) => return acquire_failed(config.id, key, inv, &e),
    };
    let real = guard.fencing_token().get();
    match mutant {
        Mutant::TokenNotIncreasing => {
            let token = *FIRST_TOKEN.get_or_init(|| real);
            write_under(config, store, key, commands, inv, guard, token).await
        }
        Mutant::ReleaseWithoutOwnerCheck => {
            let (ok, t) = acquired(config.id, key, inv, real);
            let written = increment(config, store, key, t, commands).await;
            let rel_inv = now_ns();
            // Neither renewed nor released by the library from here on.
            let _ticket = guard.into_ticket();
            tokio::time::sleep(ttl + Duration::from_millis(100)).await;
            let release = match raw(config.lock_urls.first()).await {
                Some(mut conn) => {
                    let mut pipe = redis::pipe();
                    pipe.cmd("DEL").arg(&lock_key).ignore();
                    pipe.cmd("PUBLISH")
                        .arg(format!("{lock_key}:released"))
                        .arg("mutant 1")
                        .ignore();
                    match pipe.query_async::<()>(&mut conn).await {
                        Ok(()) => "released",
                        Err(_) => "other",
                    }
                }
                None => "other",
            };
            finished(
                config.id,
                key,
                (t, inv, ok),
                written,
                rel_inv,
                release.to_owned(),
                0,
            )
        }
        Mutant::WriteSkipsFence => {
            let (ok, t) = acquired(config.id, key, inv, real);
            let counter = format!("fenced:res:{{{}}}", config.workload.counter(key));
            let written = match raw(Some(&config.store_url)).await {
                Some(mut conn) => {
                    let read: redis::RedisResult<Option<String>> = redis::cmd("HGET")
                        .arg(&counter)
                        .arg("n")
                        .query_async(&mut conn)
                        .await;
                    match read {
                        Ok(v) => {
                            let next = parse(v.as_deref().map(str::as_bytes)) + 1;
                            // Stalled past the lease, as a paused holder; then the write
                            // that should have carried the token.
                            tokio::time::sleep(ttl + Duration::from_millis(100)).await;
                            let set: redis::RedisResult<()> = redis::cmd("HSET")
                                .arg(&counter)
                                .arg("n")
                                .arg(next)
                                .query_async(&mut conn)
                                .await;
                            match set {
                                Ok(()) => (Write::Applied, Some(next)),
                                Err(_) => (Write::Indeterminate, Some(next)),
                            }
                        }
                        Err(_) => (Write::Skipped, None),
                    }
                }
                None => (Write::Skipped, None),
            };
            let rel_inv = now_ns();
            let release = outcome(guard.release().await);
            finished(config.id, key, (t, inv, ok), written, rel_inv, release, 0)
        }
        Mutant::RenewalAfterLoss => {
            let (ok, t) = acquired(config.id, key, inv, real);
            // Its renewal comes late, as from a starved renewal task: the lease has ended and
            // another worker holds the lock by then.
            tokio::time::sleep(ttl + Duration::from_millis(100)).await;
            // The renewal a library must refuse, sent without the owner compare: it extends
            // whoever holds the key, and the holder takes the reply for its own lease.
            // 1: the key was there (another worker's) and now lives on.
            let renewed = match raw(config.lock_urls.first()).await {
                Some(mut conn) => redis::cmd("PEXPIRE")
                    .arg(&lock_key)
                    .arg(config.ttl_ms)
                    .query_async::<i64>(&mut conn)
                    .await
                    .is_ok_and(|n| n == 1),
                None => false,
            };
            let written = if renewed {
                pause(config.work_us).await;
                increment(config, store, key, t, commands).await
            } else {
                (Write::Skipped, None)
            };
            let rel_inv = now_ns();
            let release = outcome(guard.release().await);
            finished(config.id, key, (t, inv, ok), written, rel_inv, release, 0)
        }
        // Played in `wrong_handover`.
        Mutant::SemaphoreOvergrant | Mutant::HandoverToWrongWaiter => {
            write_under(config, store, key, commands, inv, guard, real).await
        }
    }
}

/// The `handover-to-wrong-waiter` mutant: a fair lock's release that hands the lock to a
/// waiter of its own (this worker's next section) although that waiter is not the head of
/// the queue in Redis, and releases it there too: the queue's head is granted as well. The
/// handed section's token is a new one from the fence, as a handover's is.
async fn wrong_handover(
    config: &Config,
    client: &Client,
    store: &Store,
    key: u32,
    commands: &Commands,
    inv: u64,
) -> Event {
    let ttl = Duration::from_millis(config.ttl_ms);
    let wait = WaitPolicy::up_to(Duration::from_millis(config.wait_ms));
    let lock = client
        .fair_lock(format!("chaos:{key}"))
        .with_ttl(ttl)
        .with_wait(wait);
    let guard = match lock.acquire().await {
        Ok(g) => g,
        Err(e) => return acquire_failed(config.id, key, inv, &e),
    };
    let token = guard.fencing_token().get();
    // The first section, as any holder's, released by the library: the queue's head is woken
    // and granted.
    emit(&write_under(config, store, key, commands, inv, guard, token).await);
    // The wrong waiter: handed the lock at that release, with a new token.
    let inv = now_ns();
    let fence = format!("fenced:{{chaos:{key}}}:fence");
    let minted = match raw(config.lock_urls.first()).await {
        // A token drawn from the fence as a grant draws it: its next stream ID.
        Some(mut conn) => redis::cmd("XADD")
            .arg(&fence)
            .arg("MAXLEN")
            .arg(0)
            .arg("*")
            .arg("f")
            .arg(1)
            .query_async::<String>(&mut conn)
            .await
            .ok()
            .and_then(|id| {
                let (ms, seq) = id.split_once('-')?;
                Some(ms.parse::<u64>().ok()? * 1000 + seq.parse::<u64>().ok()?)
            }),
        None => None,
    };
    let Some(t) = minted else {
        return Event::AcquireFailed {
            w: config.id,
            key,
            inv,
            end: now_ns(),
            err: "other".to_owned(),
        };
    };
    let (ok, t) = acquired(config.id, key, inv, t);
    pause(config.work_us).await;
    let written = increment(config, store, key, t, commands).await;
    let rel_inv = now_ns();
    // Nothing to give back in Redis: the lock was never this waiter's there.
    finished(
        config.id,
        key,
        (t, inv, ok),
        written,
        rel_inv,
        "released".to_owned(),
        0,
    )
}

/// An acquire invoked at `inv` that ended without a grant.
fn acquire_failed(w: u32, key: u32, inv: u64, e: &Error) -> Event {
    Event::AcquireFailed {
        w,
        key,
        inv,
        end: now_ns(),
        err: kind(e).to_owned(),
    }
}

/// A plain connection to `url` (a mutant's raw commands).
async fn raw(url: Option<&String>) -> Option<MultiplexedConnection> {
    let client = redis::Client::open(url?.as_str()).ok()?;
    tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()?
    .ok()
}

/// An observer of key `key`'s election, for the life of the worker: each change it reports is
/// printed (the checker reads each observer's sequence). `o` tells this observer from one of
/// an earlier incarnation of the same worker.
async fn observe(client: Client, w: u32, key: u32) {
    let Ok(mut changes) = client.election(format!("chaos:{key}")).observe() else {
        return;
    };
    let o = Rng::new(None).next();
    while let Some(change) = changes.next().await {
        let (t, p) = change.map_or((0, 0), |l| (l.term.get(), l.proclaims));
        emit(&Event::Observed { w, key, o, t, p });
    }
}

/// The rest of an exclusive section once `guard` is held (`token`: its fencing token, 0 for
/// none): the counter's increment, skipped by a holder that knows its lease is lost, then
/// the release.
async fn write_under<G: fenced::LeaseGuard>(
    config: &Config,
    store: &Store,
    key: u32,
    commands: &Commands,
    inv: u64,
    guard: G,
    token: u64,
) -> Event {
    let (ok, t) = acquired(config.id, key, inv, token);
    let stalled = stall(commands, config.id).await;
    // A careful holder checks its signal before writing; a paused one cannot, and the fence
    // must stop it.
    linger(commands, config.id, false).await;
    let written = if guard.is_lost() {
        (Write::Skipped, None)
    } else {
        increment(config, store, key, t, commands).await
    };
    let rel_inv = now_ns();
    let release = outcome(guard.release().await);
    finished(
        config.id,
        key,
        (t, inv, ok),
        written,
        rel_inv,
        release,
        stalled,
    )
}

fn acquired(w: u32, key: u32, inv: u64, t: u64) -> (u64, u64) {
    acquired_as(w, key, inv, t, false)
}

fn acquired_as(w: u32, key: u32, inv: u64, t: u64, writer: bool) -> (u64, u64) {
    let ok = now_ns();
    emit(&Event::Acquired {
        w,
        key,
        t,
        inv,
        ok,
        writer,
    });
    (ok, t)
}

fn finished(
    w: u32,
    key: u32,
    (t, inv, ok): (u64, u64, u64),
    (write, value): (Write, Option<i64>),
    rel_inv: u64,
    release: String,
    stalled: u64,
) -> Event {
    Event::Section(Section {
        w,
        key,
        t,
        inv,
        ok,
        write,
        value,
        rel_inv,
        rel_end: now_ns(),
        release,
        stalled,
        writer: false,
    })
}

/// A random number in `0..n`, from a thread-local generator.
fn rng_below(n: u64) -> u64 {
    thread_local! {
        static RNG: std::cell::RefCell<Rng> = std::cell::RefCell::new(Rng::new(None));
    }
    RNG.with(|r| r.borrow_mut().below(n))
}

/// A reader's read of the counter: `None` when it went through (a reader writes nothing),
/// `Skipped` when it failed. Readers read with `get`, not the fenced read: concurrent readers
/// hold distinct tokens, and a fenced read by one would fence off the others.
async fn read_counter(config: &Config, store: &Store, key: u32) -> Write {
    let Store::Fenced(store) = store else {
        return Write::Skipped;
    };
    match store.resource(config.workload.counter(key)).get("n").await {
        Ok(_) => Write::None,
        Err(_) => Write::Skipped,
    }
}

/// The starved-renewal nemesis: block the only runtime thread, so that nothing renews.
async fn stall(commands: &Commands, w: u32) -> u64 {
    let ms = commands.starve_ms.swap(0, Ordering::Relaxed);
    if ms == 0 {
        return 0;
    }
    emit(&Event::Lingering { w, pid: None });
    let start = now_ns();
    std::thread::sleep(Duration::from_millis(ms));
    now_ns().saturating_sub(start)
}

/// The controller's hook for faults that must strike a holder mid-section: announce, then
/// wait (asynchronously: renewal goes on) for the fault to arrive.
async fn linger(commands: &Commands, w: u32, after_check: bool) {
    if commands.linger_after_check.load(Ordering::Relaxed) != after_check {
        return;
    }
    let ms = commands.linger_ms.swap(0, Ordering::Relaxed);
    if ms > 0 {
        emit(&Event::Lingering { w, pid: None });
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

async fn pause(us: u64) {
    if us > 0 {
        tokio::time::sleep(Duration::from_micros(us)).await;
    }
}

/// Read-modify-write of the key's counter: fenced read and write for fenced workloads, plain
/// GET and SET for the unfenced one. The "after check" linger point sits between the read and
/// the write, where a pause does the most harm.
async fn increment(
    config: &Config,
    store: &Store,
    key: u32,
    token: u64,
    commands: &Commands,
) -> (Write, Option<i64>) {
    pause(config.work_us).await;
    let counter = config.workload.counter(key);
    let store = match store {
        Store::Plain(conn) => {
            return plain_increment(conn.clone(), &counter, config.id, commands).await;
        }
        Store::Fenced(client) => client,
    };
    let token = fenced::FencingToken::new(token);
    let resource = store.resource(counter);
    let next = match resource.read(token, "n").await {
        Ok(FencedRead::Current(v)) => parse(v.as_deref()) + 1,
        Ok(FencedRead::Stale { .. }) => return (Write::Refused, None),
        // Nothing was written; the read may have raised the fence.
        Err(_) => return (Write::ReadLost, None),
    };
    linger(commands, config.id, true).await;
    match resource.set(token, "n", next.to_string()).await {
        Ok(FencedWrite::Applied) => (Write::Applied, Some(next)),
        Ok(FencedWrite::Stale { .. }) => (Write::Refused, Some(next)),
        Err(_) => (Write::Indeterminate, Some(next)),
    }
}

fn parse(raw: Option<&[u8]>) -> i64 {
    raw.and_then(|b| std::str::from_utf8(b).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

async fn plain_increment(
    mut conn: MultiplexedConnection,
    counter: &str,
    w: u32,
    commands: &Commands,
) -> (Write, Option<i64>) {
    // Read, then write blindly: exactly the unfenced holder's code.
    let bound = Duration::from_secs(2);
    let mut get = redis::cmd("GET");
    get.arg(counter);
    let next =
        match tokio::time::timeout(bound, get.query_async::<Option<Vec<u8>>>(&mut conn)).await {
            Ok(Ok(n)) => parse(n.as_deref()) + 1,
            _ => return (Write::Skipped, None),
        };
    linger(commands, w, true).await;
    let mut set = redis::cmd("SET");
    set.arg(counter).arg(next);
    match tokio::time::timeout(bound, set.query_async::<()>(&mut conn)).await {
        Ok(Ok(())) => (Write::Applied, Some(next)),
        _ => (Write::Indeterminate, Some(next)),
    }
}

/// What CMD does under `fenced run`: 8 numbered lines, 80 ms apart (longer than the ttl, so a
/// CMD that outlived its lease would show in the file).
const RUN_SCRIPT: &str =
    "for i in 1 2 3 4 5 6 7 8; do echo \"$FENCED_TOKEN $i\" >> \"$CHAOS_FILE\"; sleep 0.08; done";

/// One `fenced run`: the grant is read from its `--json` line on stderr; a fault that strikes
/// the holder strikes the `fenced` process (its pid goes with `Lingering`).
async fn run_command(config: &Config, key: u32, commands: &Commands) -> Event {
    let inv = now_ns();
    let failed = |err: &str| Event::AcquireFailed {
        w: config.id,
        key,
        inv,
        end: now_ns(),
        err: err.to_owned(),
    };
    let (Some(bin), Some(dir)) = (&config.fenced_bin, &config.run_dir) else {
        return failed("no fenced command");
    };
    let url = config.lock_urls.first().map_or("", String::as_str);
    let spawned = tokio::process::Command::new(bin)
        .args(["--json", "--redis", url, "--timeout"])
        .arg(format!("{}ms", config.timeout_ms))
        .args(["run", "--ttl"])
        .arg(format!("{}ms", config.ttl_ms))
        .arg("--wait")
        .arg(format!("{}ms", config.wait_ms))
        .args(["--kill-after", "100ms"])
        .arg(format!("chaos:{key}"))
        .args(["--", "sh", "-c", RUN_SCRIPT])
        .env("CHAOS_FILE", format!("{dir}/{key}"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        // The lab stops this process (a pause nemesis): a group of its own (see `lab.rs`).
        .process_group(0)
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(_) => return failed("spawn"),
    };
    let pid = child.id();
    let mut grant = None;
    if let Some(stderr) = child.stderr.take() {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let Ok(json) = serde_json::from_str::<serde_json::Value>(&line) else {
                continue;
            };
            if json["event"] == "acquired" {
                let t = json["fencing_token"].as_u64().unwrap_or(0);
                grant = Some(acquired(config.id, key, inv, t));
                if commands.linger_ms.swap(0, Ordering::Relaxed) > 0 {
                    emit(&Event::Lingering { w: config.id, pid });
                }
            }
        }
    }
    let status = child.wait().await;
    let rel_inv = now_ns();
    let Some((ok, t)) = grant else {
        return failed("not-acquired");
    };
    let release = match status.map(|s| (s.code(), s.success())) {
        Ok((_, true)) => "released".to_owned(),
        Ok((Some(code), false)) => format!("exit {code}"),
        Ok((None, false)) => "killed".to_owned(),
        Err(_) => "wait".to_owned(),
    };
    finished(
        config.id,
        key,
        (t, inv, ok),
        (Write::None, None),
        rel_inv,
        release,
        0,
    )
}

/// One optimistic transaction incrementing the key's counter on the lock server. It is
/// announced like a grant (token 0), so that a killed worker's transaction is recorded as
/// indeterminate, and a holder fault lingers it between its read and its `EXEC`.
async fn transaction(config: &Config, client: &Client, key: u32, commands: &Commands) -> Event {
    let counter = config.workload.counter(key);
    let inv = now_ns();
    let (ok, _) = acquired(config.id, key, inv, 0);
    // Set once a step has queued its write: from then on EXEC may have run.
    let exec_sent = AtomicBool::new(false);
    let result = client
        .transaction(&[counter.as_str()], |tx| {
            let (counter, exec_sent) = (counter.clone(), &exec_sent);
            async move {
                let n: i64 = tx.get(&counter).await?.unwrap_or(0);
                linger(commands, config.id, false).await;
                linger(commands, config.id, true).await;
                tx.set(&counter, n + 1);
                exec_sent.store(true, Ordering::Relaxed);
                Ok::<_, Error>(n + 1)
            }
        })
        .await;
    let end = now_ns();
    let (write, value, release) = match result {
        Ok(n) => (Write::Applied, Some(n), "committed".to_owned()),
        // A conflict after every retry, or a refusal before EXEC: definitely not applied.
        Err(e @ (Error::Conflict { .. } | Error::InvalidArgument(_))) => {
            (Write::Refused, None, kind(&e).to_owned())
        }
        // Failed before any EXEC was sent (WATCH, the read, the pool): nothing applied.
        Err(e) if !exec_sent.load(Ordering::Relaxed) => (Write::Skipped, None, kind(&e).to_owned()),
        Err(e) => (Write::Indeterminate, None, kind(&e).to_owned()),
    };
    Event::Section(Section {
        w: config.id,
        key,
        t: 0,
        inv,
        ok,
        write,
        value,
        rel_inv: end,
        rel_end: end,
        release,
        stalled: 0,
        writer: false,
    })
}

fn outcome(result: fenced::Result<()>) -> String {
    match result {
        Ok(()) => "released".to_owned(),
        Err(e) => kind(&e).to_owned(),
    }
}

/// A short name for an error's kind, for the figures.
pub fn kind(e: &Error) -> &'static str {
    match e {
        Error::NotAcquired { .. } => "not-acquired",
        Error::NotHeld { .. } => "not-held",
        Error::LeaseLost { .. } => "lease-lost",
        Error::LeaseEnded { .. } => "lease-ended",
        Error::Conflict { .. } => "conflict",
        Error::Unavailable { .. } => "unavailable",
        Error::Timeout { .. } => "timeout",
        Error::NoQuorum { .. } => "no-quorum",
        Error::Permission { .. } => "permission",
        Error::InvalidArgument(_) => "invalid-argument",
        Error::Redis(_) => "redis",
        _ => "other",
    }
}

/// Prints one event as a JSON line. A closed stdout means the controller is gone: exit.
fn emit(event: &Event) {
    let Ok(line) = serde_json::to_string(event) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

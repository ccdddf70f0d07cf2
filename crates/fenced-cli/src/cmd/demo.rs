//! `fenced demo`: the classic lock scenarios end to end, readable by a newcomer.
//!
//! 1. `product:10100101:shopping`: five workers contend for one product's lock; each waiter
//!    is woken by the previous release (the usual hand-written loop polls every 2 seconds).
//! 2. The seckill sale: 300 purchase attempts from 20 workers on a stock of 20, by each
//!    strategy: a lock around read-check-write (each write fenced), a WATCH/MULTI/EXEC
//!    transaction, one atomic script. Sold, oversold (must be 0), stock left, retries, time.
//! 3. A stale holder: paused past its lease, it writes with its old fencing token and the
//!    resource refuses it.
//!
//! Runs against `--redis` if given; otherwise against the default address if a server
//! answers there, or else on a throwaway redis-server. It uses a namespace of its own and
//! deletes its keys at the end, so it leaves nothing behind on a shared server.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fenced::optimistic::Stock;
use fenced::resource::FencedWrite;
use fenced::{Client, WaitPolicy};
use serde_json::{Value, json};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::args::{DEFAULT_REDIS, Global};
use crate::cmd::throwaway::Throwaway;
use crate::cmd::{address, check_url, connect_to};
use crate::exit::{self, Failure};

/// Where the demo runs.
struct Target {
    client: Client,
    url: String,
    namespace: String,
    /// Kept alive for the demo's duration; stopped on drop.
    throwaway: Option<Throwaway>,
}

pub async fn demo(global: &Global) -> Result<u8, Failure> {
    let target = pick_server(global).await?;
    let out = Out { json: global.json };
    match &target.throwaway {
        Some(_) => out.say(format!(
            "No URL was given and nothing answers at {}: started a throwaway redis-server at {} (stopped at the end).\n",
            address(DEFAULT_REDIS),
            address(&target.url)
        )),
        None => out.say(format!(
            "Using the Redis at {} (keys under {:?}, deleted at the end).\n",
            address(&target.url),
            target.namespace
        )),
    }
    // Interrupted: stop, clean up, and let the throwaway server go with `target`.
    let result = tokio::select! {
        r = scenarios(&target, &out) => r,
        code = interrupted() => {
            clean_up(&target, global).await;
            return Ok(code);
        }
    };
    clean_up(&target, global).await;
    let report = result.map_err(|e| Failure::from_lib(e, &address(&target.url)))?;
    if global.json {
        let mut report = report;
        report["redis"] =
            json!({ "address": address(&target.url), "throwaway": target.throwaway.is_some() });
        say!("{report}");
    }
    Ok(exit::OK)
}

async fn scenarios(target: &Target, out: &Out) -> Result<Value, fenced::Error> {
    let shopping = shopping(&target.client, out).await?;
    out.say("2. Seckill: every strategy must sell exactly the stock, never more");
    let mut sales = Vec::new();
    for strategy in [Strategy::Lock, Strategy::Transaction, Strategy::Script] {
        sales.push(seckill(&target.client, &target.namespace, out, strategy).await?);
    }
    out.say("");
    let stale = stale_holder(&target.client, out).await?;
    Ok(json!({ "shopping": shopping, "seckill": sales, "stale_holder": stale }))
}

async fn pick_server(global: &Global) -> Result<Target, Failure> {
    let mut suffix = [0u8; 4];
    let _ = getrandom::fill(&mut suffix);
    let namespace = format!(
        "fenced-demo:{}:",
        suffix
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
    let demo = Global {
        namespace: namespace.clone(),
        ..global.clone()
    };
    if let Some(url) = global
        .redis
        .first()
        .or(global.cluster.first())
        .or(global.sentinel.first())
    {
        check_url(url)?;
        let client = connect_to(&demo, url).await?;
        return Ok(Target {
            client,
            url: url.clone(),
            namespace,
            throwaway: None,
        });
    }
    let probe = Global {
        timeout: Duration::from_millis(300),
        ..demo.clone()
    };
    if let Ok(client) = connect_to(&probe, DEFAULT_REDIS).await {
        return Ok(Target {
            client,
            url: DEFAULT_REDIS.to_owned(),
            namespace,
            throwaway: None,
        });
    }
    let server = Throwaway::start().map_err(|e| {
        Failure::new(
            exit::UNAVAILABLE,
            format!("cannot start a throwaway redis-server: {e}"),
        )
    })?;
    let own = Global {
        no_password: true,
        ..demo.clone()
    };
    let client = connect_to(&own, &server.url()).await?;
    Ok(Target {
        client,
        url: server.url(),
        namespace,
        throwaway: Some(server),
    })
}

/// Deletes the demo's keys (its own namespace only).
async fn clean_up(target: &Target, global: &Global) {
    target.client.flush().await;
    let own = Global {
        no_password: target.throwaway.is_some() || global.no_password,
        ..global.clone()
    };
    let Ok(client) = raw_client(&target.url, &own) else {
        return;
    };
    let Ok(Ok(mut conn)) = tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    else {
        return;
    };
    let pattern = format!("{}*", target.namespace);
    let mut cursor = 0u64;
    loop {
        let step: Result<(u64, Vec<String>), _> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await;
        let Ok((next, keys)) = step else { return };
        if !keys.is_empty() {
            let _: Result<i64, _> = redis::cmd("DEL").arg(&keys).query_async(&mut conn).await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// A plain redis-rs client for the clean-up, trusting the same CA as the demo's client.
fn raw_client(url: &str, global: &Global) -> redis::RedisResult<redis::Client> {
    let mut url = redis::IntoConnectionInfo::into_connection_info(url)?;
    if let Ok(Some(password)) = crate::cmd::password(global) {
        let settings = url.redis_settings().clone().set_password(password);
        url = url.set_redis_settings(settings);
    }
    match &global.tls_ca_cert {
        Some(path) => {
            let pem = std::fs::read(path).map_err(|e| {
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "cannot read the CA",
                    e.to_string(),
                ))
            })?;
            redis::Client::build_with_tls(
                url,
                redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem),
                },
            )
        }
        None => redis::Client::open(url),
    }
}

/// Completes with 128+N when SIGINT or SIGTERM arrives.
async fn interrupted() -> u8 {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => tokio::select! {
            _ = int.recv() => 130,
            _ = term.recv() => 143,
        },
        // Without signal handling the demo simply runs to its end.
        _ => std::future::pending().await,
    }
}

/// A demo worker that panicked: a bug in the demo, not bad input.
fn worker_failed(e: tokio::task::JoinError) -> fenced::Error {
    fenced::Error::UnexpectedReply {
        script: "demo worker",
        detail: e.to_string(),
    }
}

/// Narration for people, or nothing when the output is JSON.
struct Out {
    json: bool,
}

impl Out {
    fn say(&self, text: impl AsRef<str>) {
        if !self.json {
            say!("{}", text.as_ref());
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e4).round() / 10.0
}

async fn shopping(client: &Client, out: &Out) -> Result<Value, fenced::Error> {
    out.say("1. Five workers update product 10100101, one at a time (lock \"product:10100101:shopping\")");
    let started = Instant::now();
    let last_release: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let mut workers = Vec::new();
    for w in 1..=5u32 {
        let lock = client
            .lock("product:10100101:shopping")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(30)));
        let last_release = last_release.clone();
        workers.push(tokio::spawn(async move {
            let asked = Instant::now();
            let guard = lock.acquire().await?;
            let got = Instant::now();
            let handoff = last_release
                .lock()
                .await
                .filter(|r| *r >= asked)
                .map(|r| got - r);
            let token = guard.fencing_token();
            tokio::time::sleep(Duration::from_millis(50)).await; // "modify the product"
            guard.release().await?;
            *last_release.lock().await = Some(Instant::now());
            Ok::<_, fenced::Error>((w, got - asked, handoff, token))
        }));
    }
    let mut rows = Vec::new();
    for worker in workers {
        match worker.await {
            Ok(row) => rows.push(row?),
            Err(e) => return Err(worker_failed(e)),
        }
    }
    rows.sort_by_key(|(_, _, _, token)| *token);
    let mut handoffs = Vec::new();
    for (w, waited, handoff, token) in &rows {
        let after = handoff
            .map(|h| format!(", {:.1} ms after the previous release", ms(h)))
            .unwrap_or_default();
        out.say(format!(
            "   worker {w}: waited {:>6.1} ms{after}; fencing token {token}",
            ms(*waited)
        ));
        if let Some(h) = handoff {
            handoffs.push(ms(*h));
        }
    }
    let total = started.elapsed();
    out.say(format!(
        "   all five done in {:.0} ms: each waiter was woken by the previous release; a hand-written loop that polls would have waited up to 2000 ms each.\n",
        ms(total)
    ));
    Ok(json!({
        "workers": rows.len(),
        "waits_ms": rows.iter().map(|r| ms(r.1)).collect::<Vec<_>>(),
        "handoffs_ms": handoffs,
        "total_ms": ms(total),
    }))
}

/// How a seckill purchase is made.
#[derive(Clone, Copy)]
enum Strategy {
    /// A lock around read-check-write, each write fenced.
    Lock,
    /// A WATCH/MULTI/EXEC transaction, retried on conflict.
    Transaction,
    /// One atomic script: decrement only if stock is left.
    Script,
}

impl Strategy {
    fn name(self) -> &'static str {
        match self {
            Strategy::Lock => "lock",
            Strategy::Transaction => "transaction",
            Strategy::Script => "script",
        }
    }
}

async fn seckill(
    client: &Client,
    namespace: &str,
    out: &Out,
    strategy: Strategy,
) -> Result<Value, fenced::Error> {
    const STOCK: u64 = 20;
    const WORKERS: u64 = 20;
    const ATTEMPTS: u64 = 300;
    const _: () = assert!(
        ATTEMPTS.is_multiple_of(WORKERS),
        "every worker makes the same number of attempts"
    );
    out.say(format!(
        "   strategy {:<13} {ATTEMPTS} attempts from {WORKERS} workers on a stock of {STOCK}:",
        format!("{:?}", strategy.name())
    ));
    // The lock strategy keeps the stock in a fenced resource; the others in a plain key.
    let stock = client.resource(format!("seckill:{}", strategy.name()));
    let key = format!("{namespace}seckill:{}", strategy.name());
    match strategy {
        Strategy::Lock => {
            let setup = client.lock("seckill").acquire().await?;
            stock
                .set(setup.fencing_token(), "count", STOCK.to_string())
                .await?;
            setup.release().await?;
        }
        Strategy::Transaction | Strategy::Script => {
            client
                .transaction(&[key.as_str()], |tx| {
                    let key = key.clone();
                    async move {
                        tx.set(&key, STOCK);
                        Ok::<_, fenced::Error>(())
                    }
                })
                .await?;
        }
    }
    let sold = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let client = client.clone();
        let lock = client
            .lock("seckill")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(60)));
        let (stock, key, sold, retries) =
            (stock.clone(), key.clone(), sold.clone(), retries.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..ATTEMPTS / WORKERS {
                let bought = match strategy {
                    Strategy::Lock => buy_under_lock(&lock, &stock).await?,
                    Strategy::Script => {
                        matches!(client.decrement_if_at_least(&key, 1).await?, Stock::Left(_))
                    }
                    Strategy::Transaction => {
                        let policy = WaitPolicy::TRANSACTION
                            .with_max_attempts(10_000)
                            .with_deadline(Some(Duration::from_secs(60)));
                        client
                            .transaction_with(&[key.as_str()], policy, |tx| {
                                let (key, retries) = (key.clone(), retries.clone());
                                async move {
                                    if tx.attempt() > 1 {
                                        retries.fetch_add(1, Ordering::Relaxed);
                                    }
                                    let left: i64 = tx.get(&key).await?.unwrap_or(0);
                                    if left <= 0 {
                                        return Ok::<_, fenced::Error>(false);
                                    }
                                    tx.set(&key, left - 1);
                                    Ok(true)
                                }
                            })
                            .await?
                    }
                };
                if bought {
                    sold.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok::<_, fenced::Error>(())
        }));
    }
    for worker in workers {
        match worker.await {
            Ok(r) => r?,
            Err(e) => return Err(worker_failed(e)),
        }
    }
    let took = started.elapsed();
    let sold = sold.load(Ordering::Relaxed);
    let retries = retries.load(Ordering::Relaxed);
    let left: i64 =
        match strategy {
            Strategy::Lock => read_count(&stock).await?,
            Strategy::Transaction | Strategy::Script => client
                .transaction(&[key.as_str()], |tx| {
                    let key = key.clone();
                    async move { Ok::<_, fenced::Error>(tx.get::<i64>(&key).await?.unwrap_or(0)) }
                })
                .await?,
        };
    let oversold = sold.saturating_sub(STOCK);
    out.say(format!(
        "     sold {sold}, oversold {oversold}, stock left {left}, conflicts retried {retries}, in {:.0} ms ({:.0} attempts/s)",
        ms(took),
        ATTEMPTS as f64 / took.as_secs_f64()
    ));
    Ok(json!({
        "strategy": strategy.name(),
        "attempts": ATTEMPTS,
        "sold": sold,
        "oversold": oversold,
        "stock_left": left,
        "retries": retries,
        "ms": ms(took),
    }))
}

/// One purchase under the lock: a fenced read-modify-write. The read records the holder's
/// token, so a holder that lost its lease meanwhile is refused at its write (or its read)
/// instead of selling a unit that a newer holder has already read.
async fn buy_under_lock(
    lock: &fenced::Lock,
    stock: &fenced::FencedResource,
) -> Result<bool, fenced::Error> {
    let guard = lock.acquire().await?;
    let sold = stock
        .update(guard.fencing_token(), "count", take_one)
        .await?;
    guard.release().await?;
    Ok(sold == fenced::resource::FencedUpdate::Applied)
}

/// The new stock after one sale, or `None` when sold out.
fn take_one(count: Option<&str>) -> Option<Vec<u8>> {
    let left: i64 = count?.parse().ok()?;
    (left > 0).then(|| (left - 1).to_string().into_bytes())
}

async fn read_count(stock: &fenced::FencedResource) -> Result<i64, fenced::Error> {
    Ok(stock
        .get("count")
        .await?
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0))
}

async fn stale_holder(client: &Client, out: &Out) -> Result<Value, fenced::Error> {
    out.say("3. A holder paused past its lease cannot overwrite newer data");
    let doc = client.resource("stock:10100101");
    let lock = client
        .lock("stock:10100101")
        .with_ttl(Duration::from_millis(300));
    // A takes the lock, then "pauses" (a long GC, a swapped-out VM): no renewal runs for it.
    let a = lock.clone().with_auto_renew(false).acquire().await?;
    out.say(format!(
        "   A holds the lock with fencing token {}, then pauses",
        a.fencing_token()
    ));
    // B gets the lock once A's lease has run out, and writes.
    let b = lock
        .clone()
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await?;
    let b_write = doc.set(b.fencing_token(), "count", "19").await?;
    out.say(format!(
        "   A's lease ran out; B got the lock with token {} and wrote count=19: {b_write:?}",
        b.fencing_token()
    ));
    // A wakes up, still believing it holds the lock, and writes.
    let a_write = doc.set(a.fencing_token(), "count", "18").await?;
    let count = doc
        .get("count")
        .await?
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    out.say(format!(
        "   A wakes up and writes count=18 with token {}: {a_write:?}",
        a.fencing_token()
    ));
    out.say(format!(
        "   the count is {}: B's write stands.",
        count.as_deref().unwrap_or("?")
    ));
    let (a_token, b_token) = (a.fencing_token().get(), b.fencing_token().get());
    b.release().await?;
    drop(a);
    let word = |w: FencedWrite| match w {
        FencedWrite::Applied => "applied",
        FencedWrite::Stale { .. } => "refused",
    };
    Ok(json!({
        "a_token": a_token,
        "b_token": b_token,
        "b_write": word(b_write),
        "a_write": word(a_write),
        "final_count": count,
    }))
}

//! The seed scenarios end to end, against a throwaway redis-server started on a free loopback
//! port (stopped when the demo ends). Run it with `scripts/demo`.
//!
//! 1. `product:10100101:shopping`: five workers contend for one product's lock; waiters are
//!    woken by the release, where the seed's version polled every 2 seconds.
//! 2. A stale holder: paused past its lease, it wakes up and writes with its old fencing token;
//!    the resource refuses the write, and the newer holder's data stays.
//! 3. The lost-lease signal: somebody breaks the lock while work runs; the holder hears it at
//!    its next renewal (a third of the ttl) and stops, instead of finding out when it releases.

use std::time::Duration;

use fenced::{Client, FencedWrite, WaitPolicy};
use fenced_testkit::{BoxError, RedisServer};
use tokio::time::Instant;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let server = RedisServer::start()?;
    println!(
        "Started a throwaway redis-server at {} (it stops when the demo ends).\n",
        server.url()
    );
    let client = Client::connect(&server.url()).await?;

    shopping(&client).await?;
    stale_holder(&client).await?;
    lost_lease(&client, &server.url()).await?;
    Ok(())
}

async fn shopping(client: &Client) -> Result<(), BoxError> {
    println!("1. Five workers update product 10100101, one at a time");
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 1..=5 {
        let lock = client
            .lock("product:10100101:shopping")
            .with_wait(WaitPolicy::up_to(Duration::from_secs(10)));
        workers.push(tokio::spawn(async move {
            let asked = Instant::now();
            let guard = lock.acquire().await?;
            let waited = asked.elapsed();
            let token = guard.fencing_token();
            tokio::time::sleep(Duration::from_millis(50)).await; // "modify the product"
            guard.release().await?;
            Ok::<_, fenced::Error>((w, waited, token))
        }));
    }
    let mut rows = Vec::new();
    for worker in workers {
        rows.push(worker.await??);
    }
    rows.sort_by_key(|(_, _, token)| *token);
    for (w, waited, token) in rows {
        println!(
            "   worker {w}: waited {:>6.1} ms, fencing token {token}",
            waited.as_secs_f64() * 1e3
        );
    }
    println!(
        "   all five done in {:.0} ms: each waiter was woken by the previous release (the seed polled every 2000 ms).\n",
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

async fn stale_holder(client: &Client) -> Result<(), BoxError> {
    println!("2. A holder paused past its lease cannot overwrite newer data");
    let stock = client.resource("stock:10100101");
    let lock = client
        .lock("stock:10100101")
        .with_ttl(Duration::from_millis(300));
    // A: takes the lock, then "pauses" (a long GC, a swapped-out VM): no renewal runs.
    let a = lock.clone().with_auto_renew(false).acquire().await?;
    println!(
        "   A holds the lock with fencing token {}, then pauses",
        a.fencing_token()
    );
    // B: gets the lock once A's lease has run out, and writes.
    let b = lock
        .clone()
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await?;
    let written = stock.set(b.fencing_token(), "count", "19").await?;
    println!(
        "   A's lease ran out; B got the lock with token {} and wrote count=19: {written:?}",
        b.fencing_token()
    );
    // A wakes up, still believing it holds the lock, and writes.
    let late = stock.set(a.fencing_token(), "count", "18").await?;
    let count = stock
        .get("count")
        .await?
        .map(|v| String::from_utf8_lossy(&v).into_owned());
    println!(
        "   A wakes up and writes count=18 with token {}: {late:?}",
        a.fencing_token()
    );
    println!(
        "   stock count is {}: B's write stands.\n",
        count.as_deref().unwrap_or("?")
    );
    assert!(matches!(late, FencedWrite::Stale { .. }));
    b.release().await?;
    Ok(())
}

async fn lost_lease(client: &Client, url: &str) -> Result<(), BoxError> {
    println!("3. The holder is told when its lock is taken away, at its next renewal");
    let guard = client
        .lock("nightly-report")
        .with_ttl(Duration::from_secs(3))
        .acquire()
        .await?;
    let lease = guard.lease();
    let work = tokio::spawn(async move {
        let mut steps = 0;
        loop {
            tokio::select! {
                _ = lease.lost() => return steps,
                _ = tokio::time::sleep(Duration::from_millis(20)) => steps += 1,
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    // An operator breaks the lock (what `fenced release --force` will do).
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let broken_at = Instant::now();
    let _: i64 = redis::cmd("DEL")
        .arg("fenced:{nightly-report}")
        .query_async(&mut conn)
        .await?;
    let steps = work.await?;
    println!(
        "   the lock was deleted; the work stopped after {steps} steps, {:.0} ms later (the next renewal, at ttl/3).",
        broken_at.elapsed().as_secs_f64() * 1e3
    );
    match guard.release().await {
        Err(fenced::Error::NotHeld { .. }) => {
            println!("   release() says NotHeld: nothing of anybody else's was deleted.")
        }
        other => println!("   release() returned {other:?}"),
    }
    Ok(())
}

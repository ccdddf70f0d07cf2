//! The Rust snippets of `docs/guide.md`, made by `tests/guide_snippets.rs` (`FENCED_BLESS=1`
//! rewrites this file): compiled by the `guide` target, never run.

use crate::world::*;

/// docs/guide.md, Rust snippet 1.
async fn snippet_1(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let client = fenced::Client::connect("redis://127.0.0.1:6379").await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 2.
async fn snippet_2(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    use std::time::Duration;
    use fenced::{Client, WaitPolicy};
    use fenced::resource::FencedWrite;

    let client = Client::connect("redis://127.0.0.1:6379").await?;
    let lock = client
        .lock("product:10100101:shopping")            // lock one product, not the catalogue
        .with_ttl(Duration::from_secs(10))
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)));
    let stock = client.resource("stock:10100101");

    let guard = lock.acquire().await?;                   // waits for a release notification
    tokio::select! {
        _ = guard.lost() => eprintln!("lease lost: stop writing"),
        written = stock.set(guard.fencing_token(), "count", "19") => {
            assert_eq!(written?, FencedWrite::Applied);   // a stale holder would get Stale
        }
    }
    guard.release().await?;                              // compare-and-delete, wakes the next waiter

    // Or scoped: the work is cancelled if the lease is lost, and the lock released at the end.
    let n = lock.with_lock(|lease| async move { lease.fencing_token().get() }).await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 3.
async fn snippet_3(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let lock = client.lock("report");
    let guard = lock.acquire().await?;
    assert!(matches!(lock.acquire().await, Err(fenced::Error::WouldDeadlock(_))));
    let waiter = tokio::spawn({
        let lock = lock.clone();
        async move { lock.acquire().await }   // another task: waits for the release
    });
    guard.release().await?;
    let next = waiter.await??;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 4.
async fn snippet_4(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let lock = client.lock("report"); let guard = lock.acquire().await?;
    guard.release().await?;                 // freed when this returns
    let again = lock.try_acquire().await?;  // Some(guard)

    // or, after drops (a short-lived program before it exits, say):
    client.flush().await;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 5.
async fn snippet_5(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let lock = client.lock("export");
    let guard = lock.acquire().await?;
    let token = guard.fencing_token();
    let rows = tokio::task::spawn_blocking(move || export_rows(token)).await?;
    guard.release().await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 6.
async fn snippet_6(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let report = client.lock("nightly-report").unfenced();
    if let Some(guard) = report.try_acquire().await? {
        build_report().await;
        guard.release().await?;
    }
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 7.
async fn snippet_7(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let client = fenced::Client::builder(url).without_scripts().connect().await?;
    let guard = client.lock("nightly-report").acquire().await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 8.
async fn snippet_8(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    use std::time::Duration;

    let lock = client
        .lock("nightly-report")
        .with_min_hold(Duration::from_secs(60)) // later machines of this schedule skip too
        .with_max_hold(Duration::from_secs(3600)); // a hung run loses the lock after an hour
    if let Some(guard) = lock.try_acquire().await? {
        // None: a run of this schedule is going, or just ended: skip.
        // ... the job, watching guard.lost() ...
        guard.release().await?; // before the minimum: the lock expires then, waking nobody
    }
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 9.
async fn snippet_9(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let batches: Vec<u32> = Vec::new(); async fn import(_batch: u32, _token: fenced::FencingToken) -> fenced::Result<()> { Ok(()) }
    use std::time::Duration;

    let guard = client
        .lock("nightly-import")
        .with_ttl(Duration::from_secs(10))
        .with_heartbeat(Duration::from_secs(60)) // no progress for a minute: give the lock up
        .with_lock_delay(Duration::from_secs(30)) // and keep the name 30 s past a lost lease
        .acquire()
        .await?;
    let lease = guard.lease();
    for batch in batches {
        lease.check()?;
        import(batch, lease.fencing_token()).await?;
        lease.beat(); // one atomic store
    }
    guard.release().await?; // a release frees the name at once, lock delay or not
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 10.
async fn snippet_10(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let mut queue: Vec<Job> = Vec::new(); let worker_client = client.clone();
    let ticket = client.lock("order:7").acquire().await?.into_ticket();
    queue.push(Job { order: 7, ticket });
    // In the worker, within the lease's ttl:
    let job = queue.pop().expect("the job queued above");
    let guard = worker_client.resume(&job.ticket).await?;
    fulfil(7, guard.fencing_token()).await?;
    guard.release().await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 11.
async fn snippet_11(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let lock = client.reentrant_lock("account:42");

    let outer = lock.acquire().await?;
    let inner = outer.reenter().await?;          // the holder itself: no waiting
    assert_eq!(inner.fencing_token(), outer.fencing_token());
    assert!(client.lock("account:42").try_acquire().await?.is_none());

    // A handle lets another task (or a child process) enter the same hold.
    let handle = outer.holder();
    let other_task = tokio::spawn({
        let lock = lock.clone();
        async move { lock.reenter(&handle).await?.release().await }
    });
    other_task.await.expect("task")?;

    inner.release().await?;                      // still held by `outer`
    assert!(client.lock("account:42").try_acquire().await?.is_none());
    outer.release().await?;                      // the last hold: free now
    assert!(client.lock("account:42").try_acquire().await?.is_some());
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 12.
async fn snippet_12(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let turnstile = client.fair_lock("turnstile");
    let guard = turnstile.acquire().await?;
    // ... waiters of every process now queue, and get the lock in order ...
    guard.release().await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 13.
async fn snippet_13(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let election = client.election("billing-scheduler").with_ttl(Duration::from_secs(10));

    // A candidate: waits until elected, then leads until it resigns or loses the lease.
    let leadership = election.campaign("host-a:8080").await?;
    tokio::select! {
        _ = leadership.lost() => { /* deposed: stop leading */ }
        _ = lead(leadership.term()) => {}
    }
    leadership.resign().await?;          // the next candidate is elected at once

    // Anyone: who leads, and every change, in term order.
    let leader = election.leader().await?;
    let mut changes = election.observe()?;
    while let Some(change) = changes.next().await {     // or `StreamExt::next`: it is a Stream
        match change {
            Some(l) => println!("{} leads in term {}", l.value, l.term),
            None => println!("nobody leads"),
        }
    }
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 14.
async fn snippet_14(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let election = client.election("billing-scheduler");
    // Who leads, how many times leadership changed hands, and who is next, in order.
    let status = election.status().await?;
    if let Some(leader) = &status.leader {
        println!("{} leads in term {} after {} change(s)", leader.value, leader.term, leader.transitions);
    }
    for candidate in &status.queue {
        println!("then {:?}, queued for {:?}", candidate.value, candidate.queued_for);
    }

    // A rolling upgrade: the leader hands over to the new version's candidate, if it is queued.
    let leadership = election.campaign("v1:host-a").await?;
    if !leadership.yield_to("v2:host-b").await? {
        leadership.resign().await?;      // nobody advertises v2:host-b: step down as usual
    }
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 15.
async fn snippet_15(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let catalogue = client.rw_lock("catalogue");

    let r1 = catalogue.read().await?;
    let r2 = catalogue.read().await?;           // readers share it
    assert!(catalogue.try_write().await.is_err(), "this handle still reads: refused, not deadlocked");
    drop((r1, r2));
    let w = catalogue.write().await?;
    assert!(catalogue.try_read().await?.is_none());
    w.release().await?;                        // wakes every waiting reader
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 16.
async fn snippet_16(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let downloads = client.semaphore("downloads", 2);

    let a = downloads.acquire().await?;
    let b = downloads.acquire().await?;
    assert!(downloads.try_acquire().await?.is_none(), "both permits are out");
    assert_eq!(downloads.available().await?, 0);
    assert!(b.fencing_token() > a.fencing_token());

    a.release().await?;                   // wakes one waiter
    let c = downloads.acquire().await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 17.
async fn snippet_17(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    // A transfer locks both accounts, in whichever order the caller names them.
    let both = client.multi_lock(["account:7", "account:3"])?;
    let guard = both.acquire().await?;
    assert!(client.lock("account:3").try_acquire().await?.is_none());
    assert_eq!(guard.names(), ["account:3", "account:7"]);
    guard.release().await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 18.
async fn snippet_18(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let products = client.striped_lock("products", 64)?;
    let guard = products.lock_for("product:10100101").acquire().await?;
    assert_eq!(guard.name(), products.lock_for("product:10100101").name());
    guard.release().await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 19.
async fn snippet_19(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let ready = client.latch("deploy:2026-11-23:shards-ready");
    assert!(ready.arm(2).await?);

    let waiter = tokio::spawn({
        let ready = ready.clone();
        async move { ready.wait().await }
    });
    assert_eq!(ready.count_down().await?, Some(1));
    assert_eq!(ready.count_down().await?, Some(0));   // open: every waiter wakes
    waiter.await.expect("task")?;
    assert_eq!(ready.count().await?, Some(0));
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 20.
async fn snippet_20(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    use fenced::resource::{FencedRead, FencedUpdate};

    let stock = client.resource("stock:10100101");
    let guard = client.lock("stock:10100101").acquire().await?;
    let token = guard.fencing_token();
    stock.set(token, "count", "20").await?;
    // Read-modify-write in one call: the read fences off older holders, the write is fenced.
    let sold = stock
        .update(token, "count", |count| {
            let left: u32 = count?.parse().ok()?;
            (left > 0).then(|| (left - 1).to_string().into_bytes())
        })
        .await?;
    assert_eq!(sold, FencedUpdate::Applied);
    assert_eq!(stock.read(token, "count").await?, FencedRead::Current(Some(b"19".to_vec())));
    guard.release().await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 21.
async fn snippet_21(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    struct Orders {
        client: fenced::Client,
    }

    impl Orders {
        #[fenced::locked(client = self.client, name = "order:{id}", ttl = "10s", wait = "5s")]
        async fn pay(&self, id: u64, #[lease] lease: fenced::Lease) -> fenced::Result<u64> {
            // ... one payment per order at a time, across every process ...
            Ok(lease.fencing_token().get())
        }
    }

    let orders = Orders { client: fenced::Client::connect("redis://127.0.0.1:6379").await? };
    let token = orders.pay(42).await?;
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 22.
mod snippet_22 {
    #[allow(unused_imports)]
    use crate::world::*;

    use fenced::testing::RedisServer;

    #[tokio::test]
    async fn the_report_runs_once_per_schedule() -> Result<(), Box<dyn std::error::Error>> {
        let server = RedisServer::start()?;
        let client = fenced::Client::connect(&server.url()).await?;
        let lock = client.lock("nightly-report");
        let first = lock.try_acquire().await?;
        assert!(first.is_some());
        assert!(lock.try_acquire().await?.is_none(), "a second run of the schedule skips");
        Ok(())
    }
}

/// docs/guide.md, Rust snippet 23.
async fn snippet_23(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    for note in client.server_notes() {
        eprintln!("{note}"); // the server, what may happen, and the fix
    }
    #[allow(unreachable_code)]
    Ok(())
}

/// docs/guide.md, Rust snippet 24.
async fn snippet_24(client: Client, url: &'static str) -> Result<(), BoxError> {
    let _ = (&client, url);
    let (id, db) = ("10100101".to_owned(), Db);
    let products = client.cache("product").with_stale_for(Duration::from_secs(30));
    let row = products
        .get_or_compute(&id, Duration::from_secs(60), |_lease| db.load_product(&id))
        .await?; // Option<Vec<u8>>: None when the product does not exist

    // The product changed: drop the entry, and fence off any compute still running.
    products.invalidate(&id).await?;
    #[allow(unreachable_code)]
    Ok(())
}

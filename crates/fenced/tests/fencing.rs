//! Fencing tokens: strictly increasing across expiry, counter loss and restarts; and enforced
//! at the resource, so a holder paused past its lease cannot overwrite newer data.

use std::time::Duration;

use fenced::resource::{FencedRead, FencedWrite};
use fenced::{FencingToken, WaitPolicy};

use crate::support::{client, raw, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holder_is_refused_by_the_resource() {
    let server = server();
    let a = client(&server).await;
    let b = client(&server).await;
    let ttl = Duration::from_millis(300);
    // Holder A, "paused" past its lease: no renewal runs for it.
    let guard_a = a
        .lock("doc")
        .with_ttl(ttl)
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    let token_a = guard_a.fencing_token();
    // B waits for the lease to run out, then writes with its newer token.
    let guard_b = b
        .lock("doc")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    assert!(guard_b.fencing_token() > token_a);
    let doc_b = b.resource("doc");
    assert_eq!(
        doc_b
            .set(guard_b.fencing_token(), "body", "B's version")
            .await
            .unwrap(),
        FencedWrite::Applied
    );
    // A wakes up and writes as if it still held the lock: refused.
    assert!(guard_a.is_lost());
    let doc_a = a.resource("doc");
    assert_eq!(
        doc_a
            .set(token_a, "body", "A's stale version")
            .await
            .unwrap(),
        FencedWrite::Stale {
            highest: guard_b.fencing_token()
        }
    );
    assert_eq!(
        doc_a.get("body").await.unwrap().as_deref(),
        Some(&b"B's version"[..])
    );
    assert_eq!(
        doc_a.highest_token().await.unwrap(),
        Some(guard_b.fencing_token())
    );
    // The same holder may write again with the same token.
    assert_eq!(
        doc_b
            .set_many(guard_b.fencing_token(), &[("body", b"B2"), ("rev", b"2")])
            .await
            .unwrap(),
        FencedWrite::Applied
    );
    guard_b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_expiry_counter_loss_and_restart() {
    let mut server = server();
    let mut tokens = Vec::new();
    {
        let c = client(&server).await;
        let lock = c
            .lock("seq")
            .with_ttl(Duration::from_millis(150))
            .with_auto_renew(false);
        for _ in 0..3 {
            let g = lock.acquire().await.unwrap();
            tokens.push(g.fencing_token());
            g.release().await.unwrap();
        }
        // An expired lease, not released:
        let g = lock.acquire().await.unwrap();
        tokens.push(g.fencing_token());
        tokio::time::timeout(Duration::from_secs(2), g.lost())
            .await
            .unwrap();
        std::mem::forget(g);
        tokens.push(lock.acquire().await.unwrap().fencing_token());
        // The fence counter evicted or expired:
        let mut conn = raw(&server).await;
        let _: i64 = redis::cmd("DEL")
            .arg("fenced:{seq}:fence")
            .query_async(&mut conn)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(150)).await; // let the last lease expire
        tokens.push(lock.acquire().await.unwrap().fencing_token());
    }
    // A restart that lost every key:
    server.restart().unwrap();
    let c = client(&server).await;
    tokens.push(c.lock("seq").acquire().await.unwrap().fencing_token());
    for pair in tokens.windows(2) {
        assert!(pair[1] > pair[0], "tokens did not increase: {tokens:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencing_compares_every_u64_exactly() {
    let server = server();
    let c = client(&server).await;
    let r = c.resource("big");
    let high = FencingToken::new(u64::MAX);
    let just_below = FencingToken::new(u64::MAX - 1);
    assert_eq!(
        r.set(just_below, "f", "1").await.unwrap(),
        FencedWrite::Applied
    );
    assert_eq!(r.set(high, "f", "2").await.unwrap(), FencedWrite::Applied);
    assert_eq!(
        r.set(just_below, "f", "3").await.unwrap(),
        FencedWrite::Stale { highest: high }
    );
    assert_eq!(
        r.set(FencingToken::new(9), "f", "4").await.unwrap(),
        FencedWrite::Stale { highest: high }
    );
    assert_eq!(r.get("f").await.unwrap().as_deref(), Some(&b"2"[..]));
}

/// The read-modify-write interleaving: A reads the stock and pauses past its lease;
/// B acquires and reads the same stock; A's write must be refused although B has not written
/// yet, or both would sell the same unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_holders_read_modify_write_is_refused_after_a_newer_fenced_read() {
    let server = server();
    let c = client(&server).await;
    let stock = c.resource("rmw-stock");
    let lock = c.lock("rmw").with_ttl(Duration::from_millis(150));
    let a = lock.clone().with_auto_renew(false).acquire().await.unwrap();
    stock.set(a.fencing_token(), "count", "20").await.unwrap();
    let FencedRead::Current(Some(a_read)) = stock.read(a.fencing_token(), "count").await.unwrap()
    else {
        panic!("A's read was refused");
    };
    // A pauses; its lease runs out and B gets the lock.
    let b = lock
        .clone()
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    let FencedRead::Current(Some(b_read)) = stock.read(b.fencing_token(), "count").await.unwrap()
    else {
        panic!("B's read was refused");
    };
    assert_eq!(a_read, b_read);
    // A wakes up and writes its derived value: refused, B has read.
    let a_write = stock.set(a.fencing_token(), "count", "19").await.unwrap();
    assert_eq!(
        a_write,
        FencedWrite::Stale {
            highest: b.fencing_token()
        }
    );
    let b_write = stock.set(b.fencing_token(), "count", "19").await.unwrap();
    assert_eq!(b_write, FencedWrite::Applied);
    // A's further reads are refused too.
    assert!(matches!(
        stock.read(a.fencing_token(), "count").await.unwrap(),
        FencedRead::Stale { .. }
    ));
    // Several fields read in the order asked, a missing one as none; no field at all still
    // records the token.
    let token = b.fencing_token();
    stock
        .set_many(token, &[("price", b"7"), ("count", b"18")])
        .await
        .unwrap();
    assert_eq!(
        stock
            .read_many(token, &["count", "missing", "price"])
            .await
            .unwrap(),
        FencedRead::Current(vec![Some(b"18".to_vec()), None, Some(b"7".to_vec())])
    );
    assert_eq!(
        stock.read_many(token, &[]).await.unwrap(),
        FencedRead::Current(vec![])
    );
    b.release().await.unwrap();
}

/// Many holders whose leases run out mid-sale (random pauses up to twice the ttl between read
/// and write): every accepted sale is exactly one unit of stock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accepted_sales_always_equal_the_drop_in_stock_when_holders_pause() {
    let server = server();
    let c = client(&server).await;
    let stock = c.resource("rmw-many");
    let lock = c
        .lock("rmw-many")
        .with_ttl(Duration::from_millis(150))
        .with_auto_renew(false);
    let setup = lock.acquire().await.unwrap();
    stock
        .set(setup.fencing_token(), "count", "1000")
        .await
        .unwrap();
    setup.release().await.unwrap();
    let applied = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stale = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = Vec::new();
    for worker in 0..8u64 {
        let (lock, stock, applied, stale) =
            (lock.clone(), stock.clone(), applied.clone(), stale.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..15u64 {
                let guard = lock.acquire().await.unwrap();
                let token = guard.fencing_token();
                let FencedRead::Current(Some(v)) = stock.read(token, "count").await.unwrap() else {
                    stale.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    continue;
                };
                let left: u64 = String::from_utf8(v).unwrap().parse().unwrap();
                // Every third sale pauses past the lease (up to two ttls).
                if (worker + i) % 3 == 0 {
                    tokio::time::sleep(Duration::from_millis(100 + 20 * (i % 10))).await;
                }
                match stock
                    .set(token, "count", (left - 1).to_string())
                    .await
                    .unwrap()
                {
                    FencedWrite::Applied => {
                        applied.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    }
                    FencedWrite::Stale { .. } => {
                        stale.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                    }
                };
                drop(guard);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let left: u64 = String::from_utf8(stock.get("count").await.unwrap().unwrap())
        .unwrap()
        .parse()
        .unwrap();
    let applied = applied.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(applied, 1000 - left, "accepted sales vs the drop in stock");
    assert!(
        stale.load(std::sync::atomic::Ordering::Relaxed) > 0,
        "no holder was ever late: the test did not exercise the fence"
    );
}

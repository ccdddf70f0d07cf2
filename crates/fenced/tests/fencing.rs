//! Fencing tokens: strictly increasing across expiry, counter loss and restarts; and enforced
//! at the resource, so a holder paused past its lease cannot overwrite newer data.

use std::time::Duration;

use fenced::{FencedWrite, FencingToken, WaitPolicy};

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
            .with_ttl(Duration::from_millis(100))
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

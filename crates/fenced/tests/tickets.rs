//! Tickets: a lease handed from one process to another (`into_ticket`, `resume`), and the
//! tickets that must be refused: stale, forged, truncated, of another kind or namespace.

use std::time::Duration;

use fenced::{Client, Error};

use crate::support::{client, lock_key, raw, server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_handed_over_by_ticket_is_renewed_extended_and_released_by_its_new_holder() {
    let server = server();
    let (web, worker) = (client(&server).await, client(&server).await);
    let ttl = Duration::from_millis(300);
    let guard = web.lock("order:7").with_ttl(ttl).acquire().await.unwrap();
    let token = guard.fencing_token();
    let lease = guard.lease();
    let ticket = guard.into_ticket();
    // The first holder let go: its lease clones say so, and it renews no more.
    assert!(matches!(lease.check(), Err(Error::LeaseEnded { .. })));
    let resumed = worker.resume(&ticket).await.unwrap();
    assert_eq!(resumed.fencing_token(), token);
    assert_eq!(resumed.name(), "order:7");
    // Held, and renewed past several ttls by the worker alone.
    tokio::time::sleep(ttl * 4).await;
    assert!(!resumed.is_lost());
    assert!(web.lock("order:7").try_acquire().await.unwrap().is_none());
    resumed.extend(Duration::from_secs(2)).await.unwrap();
    resumed.release().await.unwrap();
    assert!(web.lock("order:7").try_acquire().await.unwrap().is_some());

    // Fair and unfenced leases travel too.
    let fair = web
        .fair_lock("fair:7")
        .acquire()
        .await
        .unwrap()
        .into_ticket();
    worker.resume(&fair).await.unwrap().release().await.unwrap();
    let unfenced = web
        .lock("u:7")
        .unfenced()
        .acquire()
        .await
        .unwrap()
        .into_ticket();
    assert!(
        matches!(worker.resume(&unfenced).await, Err(Error::InvalidArgument(m)) if m.contains("resume_unfenced"))
    );
    worker
        .resume_unfenced(&unfenced)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_forged_and_truncated_tickets_are_refused_and_touch_no_other_holder() {
    let server = server();
    let (a, b) = (client(&server).await, client(&server).await);
    let mut conn = raw(&server).await;
    let ttl = Duration::from_millis(200);
    let ticket = a
        .lock("job")
        .with_ttl(ttl)
        .acquire()
        .await
        .unwrap()
        .into_ticket();
    // The lease runs out (nobody renews it once handed off), and the name is granted again.
    let newer = b
        .lock("job")
        .with_wait(fenced::WaitPolicy::up_to(Duration::from_secs(3)))
        .acquire()
        .await
        .unwrap();
    let owner: String = redis::cmd("GET")
        .arg(lock_key("job"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        matches!(b.resume(&ticket).await, Err(Error::NotHeld { .. })),
        "a stale ticket"
    );
    let still: String = redis::cmd("GET")
        .arg(lock_key("job"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let pttl: i64 = redis::cmd("PTTL")
        .arg(lock_key("job"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(owner, still, "the newer holder's lock was touched");
    assert!(pttl > 20_000, "the newer holder's ttl was changed: {pttl}");

    // A made-up owner in a well-formed ticket: refused the same way.
    let held = b.lock("other").acquire().await.unwrap().into_ticket();
    let mut fields: Vec<&str> = held.split('.').collect();
    fields[5] = "0123456789abcdef0123456789abcdef";
    assert!(matches!(
        b.resume(&fields.join(".")).await,
        Err(Error::NotHeld { .. })
    ));
    // Truncated, altered, or of another namespace: refused before anything is sent.
    for bad in [
        held[..held.len() / 2].to_owned(),
        held.replacen("fenced1", "fenced9", 1),
        held.replace('.', ":"),
        String::new(),
    ] {
        assert!(
            matches!(b.resume(&bad).await, Err(Error::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    let elsewhere = Client::builder(&server.url())
        .namespace("other:")
        .connect()
        .await
        .unwrap();
    assert!(
        matches!(elsewhere.resume(&held).await, Err(Error::InvalidArgument(m)) if m.contains("namespace"))
    );
    // The genuine ticket still works, once: a second taker (a message delivered twice) is
    // refused, so two workers never hold one lease.
    let taken = b.resume(&held).await.unwrap();
    assert!(
        matches!(a.resume(&held).await, Err(Error::NotHeld { .. })),
        "taken over twice"
    );
    taken.release().await.unwrap();
    newer.release().await.unwrap();
}

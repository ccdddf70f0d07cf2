//! Each primitive's core invariants, run by [`on_backends!`] on every backend that runs the
//! primitive: one server, a Redis Cluster of 3 masters, and Redlock over 3 masters (locks and
//! semaphores). The deeper suites of each primitive run on one server; these show that the
//! backend seam changes none of the guarantees.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use fenced::WaitPolicy;
use fenced::resource::FencedWrite;

use crate::support::on_backends;

/// Counts how many holders are inside at once; `max` keeps the highest count seen.
#[derive(Default)]
struct Occupancy {
    inside: AtomicU32,
    max: AtomicU32,
}

impl Occupancy {
    fn enter(&self) {
        let now = self.inside.fetch_add(1, Ordering::SeqCst) + 1;
        self.max.fetch_max(now, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.inside.fetch_sub(1, Ordering::SeqCst);
    }
}

on_backends!(Single, Cluster, Redlock;
    async fn lock_holders_of_two_clients_exclude_each_other_and_tokens_increase(client, deployment) {
        let other = deployment.client().await;
        let seen = Arc::new(Occupancy::default());
        let mut tasks = Vec::new();
        for (i, c) in [client.clone(), other.clone(), client.clone(), other.clone()].into_iter().enumerate() {
            let seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                let lock = c
                    .lock("shared")
                    .with_wait(WaitPolicy::up_to(Duration::from_secs(20)));
                let mut last = 0;
                for _ in 0..8 {
                    let g = lock.acquire().await.unwrap();
                    assert!(g.fencing_token().get() > last, "task {i}: tokens must increase");
                    last = g.fencing_token().get();
                    seen.enter();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    seen.leave();
                    g.release().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(seen.max.load(Ordering::SeqCst), 1, "two holders at once");
    }
);

on_backends!(Single, Cluster, Redlock;
    async fn a_semaphore_admits_at_most_its_permits(client, deployment) {
        let other = deployment.client().await;
        let seen = Arc::new(Occupancy::default());
        let mut tasks = Vec::new();
        for c in [client.clone(), other.clone(), client.clone(), other.clone(), client.clone()] {
            let seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                let pool = c
                    .semaphore("pool", 2)
                    .with_wait(WaitPolicy::up_to(Duration::from_secs(20)));
                for _ in 0..6 {
                    let p = pool.acquire().await.unwrap();
                    seen.enter();
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    seen.leave();
                    p.release().await.unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        let max = seen.max.load(Ordering::SeqCst);
        assert!((1..=2).contains(&max), "{max} holders of 2 permits");
    }
);

on_backends!(Single, Cluster;
    async fn the_rest_of_the_family_keeps_its_rules(client, deployment) {
        let other = deployment.client().await;
        // Reentrant: the holder enters again; another client waits.
        let outer = client.reentrant_lock("re").acquire().await.unwrap();
        let inner = outer.reenter().await.unwrap();
        assert!(other.reentrant_lock("re").try_acquire().await.unwrap().is_none());
        drop(inner);
        outer.release().await.unwrap();
        assert!(other.reentrant_lock("re").try_acquire().await.unwrap().is_some());

        // Read-write: readers share, a writer excludes them.
        let r = client.rw_lock("doc").read().await.unwrap();
        assert!(other.rw_lock("doc").try_read().await.unwrap().is_some());
        assert!(other.rw_lock("doc").try_write().await.unwrap().is_none());
        r.release().await.unwrap();

        // Fair: FIFO across clients.
        let held = client.fair_lock("line").acquire().await.unwrap();
        assert!(other.fair_lock("line").try_acquire().await.unwrap().is_none());
        held.release().await.unwrap();

        // A fenced resource takes the newest holder's writes only.
        let old = client.lock("writer").acquire().await.unwrap();
        let old_token = old.fencing_token();
        old.release().await.unwrap();
        let new = other.lock("writer").acquire().await.unwrap();
        assert_eq!(
            other.resource("ledger").set(new.fencing_token(), "x", "1").await.unwrap(),
            FencedWrite::Applied
        );
        assert!(matches!(
            client.resource("ledger").set(old_token, "x", "2").await.unwrap(),
            FencedWrite::Stale { .. }
        ));
        new.release().await.unwrap();

        // A latch opens for every client.
        assert!(client.latch("go").arm(2).await.unwrap());
        other.latch("go").count_down().await.unwrap();
        client.latch("go").count_down().await.unwrap();
        tokio::time::timeout(Duration::from_secs(5), other.latch("go").wait())
            .await
            .expect("the latch did not open")
            .unwrap();
    }
);

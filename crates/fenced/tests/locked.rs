//! `#[fenced::locked]`: the attribute takes the lock around the function's body, gives the
//! body its lease when asked, and turns a lock that cannot be taken into the function's error.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use fenced::{Client, Error};

use crate::support::{client, server};

/// An application error that a lock failure converts into.
#[derive(Debug)]
enum AppError {
    Lock(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Lock(e)
    }
}

struct Orders {
    client: Client,
}

/// Shared by every client's calls: who is inside `pay` now, and how often two were.
static INSIDE: AtomicBool = AtomicBool::new(false);
static OVERLAPS: AtomicU32 = AtomicU32::new(0);

impl Orders {
    #[fenced::locked(client = self.client, name = "order:{id}", ttl = "10s")]
    async fn pay(&self, id: u64, #[lease] lease: fenced::Lease) -> Result<u64, AppError> {
        if INSIDE.swap(true, Ordering::SeqCst) {
            OVERLAPS.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        INSIDE.store(false, Ordering::SeqCst);
        assert_eq!(lease.name(), format!("order:{id}"));
        Ok(lease.fencing_token().get())
    }

    #[fenced::locked(client = self.client, name = "report", wait = "100ms")]
    async fn report(&self) -> Result<(), AppError> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_on_one_name_take_turns_across_clients_and_the_body_gets_its_lease() {
    let server = server();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let orders = Arc::new(Orders {
            client: client(&server).await,
        });
        for _ in 0..4 {
            let orders = orders.clone();
            tasks.push(tokio::spawn(async move {
                let mut tokens = Vec::new();
                for _ in 0..10 {
                    tokens.push(orders.pay(7).await.unwrap());
                }
                tokens
            }));
        }
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    assert_eq!(
        OVERLAPS.load(Ordering::SeqCst),
        0,
        "two calls inside at once"
    );
    all.sort_unstable();
    all.dedup();
    assert_eq!(
        all.len(),
        80,
        "every call had its own lease and fencing token"
    );
}

#[tokio::test]
async fn a_lock_that_cannot_be_taken_is_the_functions_error() {
    let server = server();
    let c = client(&server).await;
    let holder = client(&server).await;
    let _held = holder.lock("report").acquire().await.unwrap();
    let orders = Orders { client: c.clone() };
    match orders.report().await {
        Err(AppError::Lock(Error::NotAcquired { .. })) => {}
        other => panic!("{other:?}"),
    }
}

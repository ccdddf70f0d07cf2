//! The README's program: a lock whose fencing token guards the stock it protects.
//! Run it with `REDIS_URL=redis://127.0.0.1:6379 cargo run -p fenced --example readme`.
use std::time::Duration;

use fenced::resource::FencedWrite;
use fenced::{Client, WaitPolicy};

#[tokio::main]
async fn main() -> Result<(), fenced::Error> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    sell_one(&url).await
}

/// Takes the lock, writes the stock under its token, gives the lock back; then again, scoped.
pub async fn sell_one(url: &str) -> Result<(), fenced::Error> {
    let client = Client::connect(url).await?;
    let lock = client
        .lock("product:10100101") // lock one product, not the catalogue
        .with_ttl(Duration::from_secs(10)) // renewed in the background while held
        .with_wait(WaitPolicy::up_to(Duration::from_secs(5)));
    let stock = client.resource("stock:10100101"); // refuses writes with an older token

    let guard = lock.acquire().await?; // a waiter is woken by the release, not by polling
    tokio::select! {
        _ = guard.lost() => eprintln!("lease lost: stop writing"),
        written = stock.set(guard.fencing_token(), "count", "19") => match written? {
            FencedWrite::Applied => println!("sold one under token {}", guard.fencing_token()),
            FencedWrite::Stale { highest } => eprintln!("token {highest} wrote first"),
        },
    }
    guard.release().await?; // compare-and-delete: never frees a lock someone else holds

    // Or scoped: the work is cancelled if the lease is lost, and the lock released after.
    let token = lock
        .with_lock(|lease| async move { lease.fencing_token() })
        .await?;
    println!("held again under token {token}");
    Ok(())
}

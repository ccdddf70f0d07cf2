//! Lock cycles on one task, to count what a cycle costs the client: `scripts/client-costs`
//! runs this under valgrind for N and for 3N cycles and takes the difference, so start-up
//! and connecting cancel out.
//!
//! ```text
//! cycle_cost fenced|scripted|unfenced|raw CYCLES REDIS_URL
//! ```
//!
//! `fenced`: `Lock::try_acquire` then `LockGuard::release`, with the default settings
//! (renewal on); `unfenced`: the same on `Lock::unfenced`. `raw`: the bench's floor, `SET NX PX` with a fresh token then an `EVALSHA`
//! compare-and-delete. Both run in a spawned task of a two-worker runtime, as in the bench.

use std::error::Error;
use std::time::Duration;

type BoxError = Box<dyn Error + Send + Sync>;

fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1);
    let (Some(library), Some(cycles), Some(url)) = (args.next(), args.next(), args.next()) else {
        return Err("usage: cycle_cost fenced|scripted|unfenced|raw CYCLES REDIS_URL".into());
    };
    let cycles: u64 = cycles.parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        match library.as_str() {
            "fenced" | "scripted" => {
                let client = fenced::Client::builder(&url)
                    .counted_grants(library == "fenced")
                    .connect()
                    .await?;
                let lock = client.lock("cycle-cost").with_ttl(Duration::from_secs(30));
                tokio::spawn(async move {
                    for _ in 0..cycles {
                        let guard = lock.try_acquire().await?.ok_or("the lock was held")?;
                        guard.release().await?;
                    }
                    Ok::<_, BoxError>(())
                })
                .await?
            }
            "unfenced" => {
                let client = fenced::Client::connect(&url).await?;
                let lock = client
                    .lock("cycle-cost")
                    .with_ttl(Duration::from_secs(30))
                    .unfenced();
                tokio::spawn(async move {
                    for _ in 0..cycles {
                        let guard = lock.try_acquire().await?.ok_or("the lock was held")?;
                        guard.release().await?;
                    }
                    Ok::<_, BoxError>(())
                })
                .await?
            }
            "raw" => {
                let conn = redis::Client::open(url.as_str())?
                    .get_multiplexed_async_connection()
                    .await?;
                let mut lock = fenced_bench::RawLock::new(conn, "cycle-cost");
                tokio::spawn(async move {
                    for _ in 0..cycles {
                        let token = lock.try_acquire().await?.ok_or("the lock was held")?;
                        if !lock.release(&token).await? {
                            return Err("the raw lock was gone before its release".into());
                        }
                    }
                    Ok::<_, BoxError>(())
                })
                .await?
            }
            other => {
                Err(format!("unknown library {other:?}: fenced, scripted, unfenced or raw").into())
            }
        }
    })
}

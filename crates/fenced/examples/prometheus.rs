//! Exporting fenced's metrics to Prometheus: install a recorder, use locks, and render the text
//! exposition format (serve it on `/metrics` with the web framework of your service).
//!
//! ```sh
//! cargo run -p fenced --example prometheus -- redis://127.0.0.1:6379
//! ```
//!
//! Without a URL the example starts a throwaway redis-server (the test kit's).

use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let server;
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            server = fenced_testkit::RedisServer::start()?;
            server.url()
        }
    };
    let client = fenced::Client::connect(&url).await?;
    // A little traffic: a few lock cycles, one of them contended, and a semaphore permit.
    let lock = client.lock("prometheus-example");
    for _ in 0..3 {
        lock.acquire().await?.release().await?;
    }
    let held = lock.acquire().await?;
    let waiter = lock
        .clone()
        .with_wait(fenced::WaitPolicy::up_to(Duration::from_millis(50)));
    // Another task (this one, the holder, would be refused at once): its wait runs out,
    // counted as contention and a wait not granted.
    let _ = tokio::spawn(async move { waiter.acquire().await.map(drop) }).await;
    held.release().await?;
    client
        .semaphore("prometheus-pool", 2)
        .acquire()
        .await?
        .release()
        .await?;

    let text = handle.render();
    print!("{text}");
    if !text.contains("fenced_lock_acquired") {
        return Err("no fenced series in the exposition".into());
    }
    Ok(())
}

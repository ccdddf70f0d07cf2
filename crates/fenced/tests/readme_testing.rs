// Cargo.toml: [dev-dependencies] fenced = { version = "0.1", features = ["testing"] }
#[tokio::test]
async fn one_run_at_a_time() -> Result<(), Box<dyn std::error::Error>> {
    let server = fenced::testing::RedisServer::start()?;
    let client = fenced::Client::connect(&server.url()).await?;
    let held = client.lock("nightly-report").try_acquire().await?;
    assert!(held.is_some());
    assert!(client.lock("nightly-report").try_acquire().await?.is_none());
    Ok(())
}

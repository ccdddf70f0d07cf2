//! Tests of code that takes a lock, against a real throwaway `redis-server` (the `testing`
//! feature).
//!
//! [`RedisServer::start`] runs `redis-server` on a free loopback port, with no persistence,
//! in a temporary directory, and stops it when dropped. The binary is `$FENCED_REDIS_SERVER`
//! when set, else `redis-server` on `PATH` (Valkey's `valkey-server` works too, through the
//! variable). With none to be found it fails with one line that says how to install one: a
//! test never quietly passes without a server.
//!
//! The server can be broken on purpose, so a test can check what the code under test does
//! when its lease is lost: [`RedisServer::pause`] (a stopped server: renewals time out),
//! [`RedisServer::kill`], [`RedisServer::restart`]; a [`Proxy`] in front of it delays,
//! partitions or drops replies.
//!
//! Enable it for tests only:
//!
//! ```toml
//! [dev-dependencies]
//! fenced = { version = "0.1", features = ["testing"] }
//! ```
//!
//! ```
//! use fenced::testing::RedisServer;
//!
//! # async fn takes_the_nightly_lock(client: &fenced::Client) -> Result<u64, fenced::Error> {
//! #     let guard = client.lock("nightly-report").acquire().await?;
//! #     let token = guard.fencing_token().get();
//! #     guard.release().await?;
//! #     Ok(token)
//! # }
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! // In a `#[tokio::test]`:
//! let server = RedisServer::start()?; // stopped when dropped
//! let client = fenced::Client::connect(&server.url()).await?;
//! let first = takes_the_nightly_lock(&client).await?;
//! let second = takes_the_nightly_lock(&client).await?;
//! assert!(second > first, "each grant's token is greater than the last");
//! # Ok(()) })
//! # }
//! ```

pub use fenced_testkit::{Fault, LatencyProxy, Proxy, RedisServer, TestkitError};

//! The lab's own connections to a server, straight to it and never through a worker's proxy:
//! what the nemeses that act on a server's data or settings send (`restore.rs`, `evict.rs`,
//! the clock step), and what reads the counters at the end of a run.
//!
//! A module of its own, below the lab and the nemeses that use it, so that none of them has
//! to import another to reach a server.

use std::time::Duration;

use fenced::redis;

/// Why a lab could not run.
pub type LabError = Box<dyn std::error::Error + Send + Sync>;

/// A connection of the lab's own to `url`.
pub(crate) async fn connection(url: &str) -> Result<redis::aio::MultiplexedConnection, LabError> {
    let client = redis::Client::open(url)?;
    bounded(client.get_multiplexed_async_connection()).await
}

/// `f`, given 5 s: a server that does not answer fails the step instead of hanging the lab.
pub(crate) async fn bounded<T>(
    f: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T, LabError> {
    Ok(tokio::time::timeout(Duration::from_secs(5), f).await??)
}

/// `CONFIG SET parameter value`.
pub(crate) async fn config_set(
    conn: &mut redis::aio::MultiplexedConnection,
    parameter: &str,
    value: &str,
) -> Result<(), LabError> {
    let _: () = bounded(
        redis::cmd("CONFIG")
            .arg("SET")
            .arg(parameter)
            .arg(value)
            .query_async(conn),
    )
    .await?;
    Ok(())
}

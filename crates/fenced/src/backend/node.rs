//! [`Node`]: one Redis server as the core sees it. Every command of the crate goes through
//! here: bounded by the timeout, scripts by `EVALSHA` with their reload, errors mapped once.
//!
//! Invariants:
//! 1. Every call is bounded by the per-call timeout; a timed-out write has an unknown outcome
//!    and is reported as [`Error::Timeout`].
//! 2. A `NOSCRIPT` reply loads the script and sends the call once more. In a batch, every
//!    script of the batch is loaded and the whole batch is sent again, so only idempotent
//!    calls (renewals) are batched.

use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, Value};

use crate::error::{Error, Result};
use crate::scripts::ScriptCall;

/// One server, reached through any redis-rs async connection: a reconnecting
/// `ConnectionManager` today, a cluster connection or one master of several later.
#[derive(Clone)]
pub(crate) struct Node<C = ConnectionManager> {
    conn: C,
    timeout: Duration,
}

impl<C> Node<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    pub(crate) fn new(conn: C, timeout: Duration) -> Self {
        Node { conn, timeout }
    }

    /// Bounds `fut` by the per-call timeout and maps its error: the one place where a
    /// timeout becomes [`Error::Timeout`].
    pub(crate) async fn bounded<T>(
        &self,
        operation: &'static str,
        fut: impl Future<Output = Result<T, RedisError>>,
    ) -> Result<T> {
        bounded(self.timeout, operation, fut).await
    }

    /// One command.
    pub(crate) async fn query<T: FromRedisValue>(
        &self,
        operation: &'static str,
        cmd: &Cmd,
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        self.bounded(operation, cmd.query_async(&mut conn)).await
    }

    /// A pipeline, answered as a whole.
    pub(crate) async fn query_pipe<T: FromRedisValue>(
        &self,
        operation: &'static str,
        pipe: &Pipeline,
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        self.bounded(operation, pipe.query_async(&mut conn)).await
    }

    /// Runs one script call, loading the script first if the server does not know it.
    pub(crate) async fn run<T: FromRedisValue>(&self, call: &ScriptCall) -> Result<T> {
        let mut conn = self.conn.clone();
        let operation = call.lua.operation;
        let source = call.lua.source();
        self.bounded(operation, async {
            let cmd = call.evalsha();
            match cmd.query_async(&mut conn).await {
                Err(e) if is_noscript(&e) => {
                    call.lua.load_cmd().query_async::<()>(&mut conn).await?;
                    cmd.query_async(&mut conn).await
                }
                other => other,
            }
        })
        .await
        .map_err(|e| e.in_script(operation, source))
    }

    /// Runs idempotent script calls in ONE pipelined round trip. The outer error means the
    /// round trip failed as a whole (nothing is known); the inner results are per call.
    pub(crate) async fn run_batch(
        &self,
        operation: &'static str,
        calls: &[ScriptCall],
    ) -> Result<Vec<Result<Value>>> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for call in calls {
            pipe.add_command(call.evalsha());
        }
        let mut conn = self.conn.clone();
        let replies: Vec<Result<Value, RedisError>> = self
            .bounded(operation, async {
                let first: Vec<Result<Value, RedisError>> = pipe.query_async(&mut conn).await?;
                if first.iter().any(|r| matches!(r, Err(e) if is_noscript(e))) {
                    // The script cache was emptied (restart, failover, SCRIPT FLUSH): a
                    // pipeline cannot fall back by itself, so load its scripts and resend.
                    let mut loaded: Vec<&str> = Vec::new();
                    for call in calls {
                        if !loaded.contains(&call.lua.hash()) {
                            loaded.push(call.lua.hash());
                            call.lua.load_cmd().query_async::<()>(&mut conn).await?;
                        }
                    }
                    return pipe.query_async(&mut conn).await;
                }
                Ok(first)
            })
            .await?;
        let timeout = self.timeout;
        Ok(replies
            .into_iter()
            .zip(calls)
            .map(|(r, call)| {
                r.map_err(|e| {
                    Error::from_redis(operation, timeout, e).in_script(operation, call.lua.source())
                })
            })
            .collect())
    }
}

/// Bounds `fut` by `timeout` and maps its error.
pub(crate) async fn bounded<T>(
    timeout: Duration,
    operation: &'static str,
    fut: impl Future<Output = Result<T, RedisError>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Error::from_redis(operation, timeout, e)),
        Err(_) => Err(Error::Timeout {
            operation,
            after: timeout,
        }),
    }
}

fn is_noscript(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

//! [`Wait`]: `WAIT` after a write that must survive a failover (`node.rs`, invariant 5), sent
//! in the same pipeline as the write, and its reply read in one place.

use std::time::Duration;

use redis::{Cmd, RedisError, Value};

use super::{Node, Shortfall};
use crate::error::{Error, Result};
use crate::kind::unexpected;

/// `WAIT` after a write that must survive a failover (`node.rs`, invariant 5).
pub(crate) struct Wait {
    /// `WAIT replicas ms`.
    pub(super) cmd: Cmd,
    /// How many replicas must acknowledge.
    needed: usize,
}

impl Wait {
    /// What `WAIT`'s reply says: the shortfall, when too few replicas acknowledged in time.
    pub(super) fn read(
        &self,
        reply: Option<Result<Value, RedisError>>,
        timeout: Duration,
    ) -> Result<Option<Shortfall>> {
        match reply {
            Some(Ok(Value::Int(acked))) => {
                let acked = usize::try_from(acked).unwrap_or(0);
                let needed = self.needed;
                Ok((acked < needed).then_some(Shortfall { acked, needed }))
            }
            Some(Err(e)) => Err(Error::from_redis("wait", timeout, e)),
            other => Err(unexpected("wait", format!("{other:?}"))),
        }
    }

    /// [`read`](Self::read) where a `WAIT` was sent: `reply` takes its reply, and is not
    /// called otherwise (it may take the reply before it).
    pub(super) fn read_if(
        wait: Option<&Wait>,
        reply: impl FnOnce() -> Option<Result<Value, RedisError>>,
        timeout: Duration,
    ) -> Result<Option<Shortfall>> {
        wait.map_or(Ok(None), |wait| wait.read(reply(), timeout))
    }
}

/// A step's reply, with the shortfall of its `WAIT` when it had one.
pub(crate) type Answer = (Value, Option<Shortfall>);

impl Node {
    /// The `WAIT` of acknowledged writes, if the client asks for replica acknowledgements.
    pub(super) fn wait(&self) -> Option<Wait> {
        let (needed, wait) = self.acks?;
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(needed)
            .arg(u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1));
        Some(Wait { cmd, needed })
    }
}

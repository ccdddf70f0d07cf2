//! The three ways `restore-redis` puts a lock server's fences back to older values, taken in
//! turn: each is a way production meets older data under the same server.
//!
//! - **Restart from a snapshot**: `SAVE`, work goes on, then the server is killed and started
//!   from the file (a restart from an older RDB, a failover to a replica that missed writes).
//! - **A stale append-only file loaded again**: the file is written (`CONFIG SET appendonly
//!   yes`, its rewrite awaited) and closed (`appendonly no`), work goes on, then `DEBUG
//!   LOADAOF` empties the running server and loads the file: no restart, no new replication ID.
//! - **Older fences restored**: every fence stream is `DUMP`ed, work goes on, then each is put
//!   back with `RESTORE … REPLACE` on the running server (a backup tool, a key copied back).
//!   Only the fences: a lease put back would be a holder nobody has, not a restore of a fence.

use std::time::Duration;

use fenced::redis;

use crate::admin::{LabError, bounded, config_set, connection};

/// One way of putting the fences back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Restore {
    /// Kill the server and start it from an older snapshot.
    Restart,
    /// `DEBUG LOADAOF` of an append-only file closed a while ago.
    LoadAof,
    /// `RESTORE … REPLACE` of every fence as it was a while ago.
    Keys,
}

impl Restore {
    /// The way the `n`-th restore takes.
    pub fn nth(n: u64) -> Restore {
        match n % 3 {
            0 => Restore::Restart,
            1 => Restore::LoadAof,
            _ => Restore::Keys,
        }
    }

    /// How the report names it.
    pub fn name(self) -> &'static str {
        match self {
            Restore::Restart => "restart from a snapshot",
            Restore::LoadAof => "DEBUG LOADAOF",
            Restore::Keys => "RESTORE of the fences",
        }
    }
}

/// What was kept of one server, to be put back later.
pub enum Kept {
    /// The snapshot file, or the append-only file, is on the server's disk.
    OnDisk,
    /// Each fence's key, its `DUMP`, and its time to live in ms (0: none).
    Fences(Vec<(String, Vec<u8>, i64)>),
}

/// Keeps the server's present state the way `how` puts it back.
pub async fn keep(url: &str, how: Restore) -> Result<Kept, LabError> {
    let mut conn = connection(url).await?;
    match how {
        Restore::Restart => {
            let _: () = bounded(redis::cmd("SAVE").query_async(&mut conn)).await?;
            Ok(Kept::OnDisk)
        }
        Restore::LoadAof => {
            config_set(&mut conn, "appendonly", "yes").await?;
            rewritten(&mut conn).await?;
            config_set(&mut conn, "appendonly", "no").await?;
            Ok(Kept::OnDisk)
        }
        Restore::Keys => {
            let keys: Vec<String> = bounded(
                redis::cmd("KEYS")
                    .arg("fenced:*{chaos:*:fence")
                    .query_async(&mut conn),
            )
            .await?;
            let mut fences = Vec::new();
            for key in keys {
                let kind: String =
                    bounded(redis::cmd("TYPE").arg(&key).query_async(&mut conn)).await?;
                if kind != "stream" {
                    continue;
                }
                let dump: Option<Vec<u8>> =
                    bounded(redis::cmd("DUMP").arg(&key).query_async(&mut conn)).await?;
                let ttl: i64 = bounded(redis::cmd("PTTL").arg(&key).query_async(&mut conn)).await?;
                if let Some(dump) = dump {
                    fences.push((key, dump, ttl.max(0)));
                }
            }
            Ok(Kept::Fences(fences))
        }
    }
}

/// Puts back what `keep` kept, on a running server (a restart from a snapshot is the lab's:
/// it kills and starts the process).
pub async fn put_back(url: &str, kept: Kept, how: Restore) -> Result<(), LabError> {
    let mut conn = connection(url).await?;
    match (how, kept) {
        (Restore::LoadAof, _) => {
            let _: () = bounded(redis::cmd("DEBUG").arg("LOADAOF").query_async(&mut conn)).await?;
        }
        (Restore::Keys, Kept::Fences(fences)) => {
            for (key, dump, ttl) in fences {
                let _: () = bounded(
                    redis::cmd("RESTORE")
                        .arg(&key)
                        .arg(ttl)
                        .arg(dump)
                        .arg("REPLACE")
                        .query_async(&mut conn),
                )
                .await?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Removes the snapshot a restart just loaded (`CONFIG GET dir`, `dbfilename`), so that a
/// later restart without persistence still loses every key.
pub async fn forget_snapshot(url: &str) -> Result<(), LabError> {
    let mut conn = connection(url).await?;
    let mut path = std::path::PathBuf::new();
    for parameter in ["dir", "dbfilename"] {
        let pair: Vec<String> = bounded(
            redis::cmd("CONFIG")
                .arg("GET")
                .arg(parameter)
                .query_async(&mut conn),
        )
        .await?;
        let value = pair.get(1).cloned().unwrap_or_default();
        path.push(value);
    }
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.into()),
        _ => Ok(()),
    }
}

/// Waits until the rewrite that `appendonly yes` began has written the file: closing it
/// earlier would leave no file, and `DEBUG LOADAOF` of a missing file stops the server.
async fn rewritten(conn: &mut redis::aio::MultiplexedConnection) -> Result<(), LabError> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = bounded(redis::cmd("INFO").arg("persistence").query_async(conn)).await?;
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(str::trim)
                .map(str::to_owned)
        };
        let busy = field("aof_rewrite_in_progress").as_deref() != Some("0")
            || field("aof_rewrite_scheduled").as_deref() != Some("0");
        if !busy {
            if field("aof_last_bgrewrite_status").as_deref() != Some("ok") {
                return Err(format!("the append-only file's rewrite failed:\n{info}").into());
            }
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            return Err("the append-only file's rewrite took over 10 s".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

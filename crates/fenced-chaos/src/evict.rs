//! The `evict` fault: a lock server short of memory evicts keys, as a Redis shared with a
//! cache does under `maxmemory`.
//!
//! For the fault's window, the server gets a `maxmemory` a little above what it uses and an
//! eviction policy of the `volatile-*` kind. The lab writes filler keys (`evict-filler:N`, a
//! name no workload uses: theirs start with `fenced:` or `chaos:`) until the server starts to
//! evict, then one every 10 ms: each takes the server past its limit, and it evicts again to
//! make room. Then the limit and the policy are put back as they were, and the filler is
//! deleted.
//!
//! **Why `volatile-*`.** Such a policy evicts only keys with an expiry. Every key fenced keeps
//! on a lock server has one (a lease, a fence's retention, a queue's registration); a fenced
//! resource's data has none. So leases and fences go, and data stays: the threat a lock meets
//! on a server that keeps data beside its locks, and the one fencing answers. A holder's key
//! evicted while it works lets a second holder in, and the resource must refuse the first
//! one's late write. An `allkeys-*` policy evicts the same leases and fences, and the data
//! besides, a loss no lock can prevent. (In this lab the counters live on the store, which no
//! fault touches. The `optimistic` workload's counter lives on the lock server, without an
//! expiry, and that workload holds no lease: it does not take this fault.) The filler has an
//! expiry too, so there is always something to evict: a server with nothing left to evict
//! refuses writes (`OOM`), which is another fault.
//!
//! **The policies.**
//! - `volatile-ttl` (`evict`): the keys closest to their expiry first: leases, tombstones and
//!   registrations go before the filler (an hour), which goes before the fences (a day), as
//!   far as the server's sampling tells them apart. A held lock's key is evicted, and a second
//!   holder is granted while the first still works: fencing must refuse the first one's late
//!   write. This is the threat a server that evicts lock keys poses.
//! - `volatile-random` (`evict-fences`): any key with an expiry, fences included. An evicted
//!   fence starts again past the server clock; evicted twice within one millisecond, its next
//!   token can repeat one already handed out. It measures that cost.
//!
//! **The count.** The server's `evicted_keys` (`INFO stats`) over the window, less the filler
//! missing at the end: each filler key has a name of its own and outlives the window, so one
//! that is gone was evicted. The rest were the workload's keys.

use std::time::Duration;

use fenced::redis::{self, aio::MultiplexedConnection};

use crate::admin::{LabError, bounded, config_set, connection};

/// How far above the memory the server uses its limit is set: room for about 16 filler keys.
/// Under `volatile-random` a round of eviction picks among the filler and the workload's keys
/// until it has freed enough, which only a filler key does: the fewer filler keys, the more of
/// the workload's go first.
const HEADROOM: u64 = 512 * 1024;

/// The size of one filler value, in bytes.
const FILLER_BYTES: usize = 32_000;

/// A filler key's expiry: longer than any window, so that one missing at the end was evicted,
/// and shorter than a fence's retention (a day), so that `volatile-ttl` takes the filler first.
const FILLER_TTL_MS: u64 = 3_600_000;

/// The filler's names: no workload's key starts so (theirs: `fenced:`, `chaos:`).
const FILLER_PREFIX: &str = "evict-filler:";

/// How often a filler key is written once the server evicts.
const TICK: Duration = Duration::from_millis(10);

/// The eviction policy a fault sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// `volatile-random`: any key with an expiry.
    Random,
    /// `volatile-ttl`: the keys closest to their expiry first.
    Ttl,
}

impl Policy {
    /// Its name, as `maxmemory-policy` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Policy::Random => "volatile-random",
            Policy::Ttl => "volatile-ttl",
        }
    }
}

/// Keeps every server of `urls` short of memory under `policy` for `window`, then puts each
/// back as it was. Returns how many of the workload's keys the servers evicted in all.
pub async fn run(urls: &[String], policy: Policy, window: Duration) -> Result<u64, LabError> {
    let filler = "x".repeat(FILLER_BYTES);
    let mut pressed = Vec::new();
    for url in urls {
        pressed.push(Pressed::press(url, policy, &filler).await?);
    }
    let end = tokio::time::Instant::now() + window;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(TICK).await;
        for server in &mut pressed {
            server.feed(&filler).await?;
        }
    }
    let mut evicted = 0;
    for server in pressed {
        evicted += server.heal().await?;
    }
    Ok(evicted)
}

/// One server kept short of memory.
struct Pressed {
    conn: MultiplexedConnection,
    /// `maxmemory` and `maxmemory-policy` as they were, to be put back in this order.
    was: [(&'static str, String); 2],
    /// The server's `evicted_keys` when the fault began.
    evicted_before: u64,
    /// Filler keys written: `evict-filler:0` up to this number, excluded.
    written: u64,
}

impl Pressed {
    /// Sets the limit and the policy, and writes filler until the server evicts.
    async fn press(url: &str, policy: Policy, filler: &str) -> Result<Pressed, LabError> {
        let mut conn = connection(url).await?;
        let maxmemory = config_get(&mut conn, "maxmemory").await?;
        let was_policy = config_get(&mut conn, "maxmemory-policy").await?;
        let evicted_before = info_number(&mut conn, "stats", "evicted_keys").await?;
        let used = info_number(&mut conn, "memory", "used_memory").await?;
        // The policy before the limit: the first key past the limit is evicted under it.
        config_set(&mut conn, "maxmemory-policy", policy.name()).await?;
        config_set(&mut conn, "maxmemory", &(used + HEADROOM).to_string()).await?;
        let mut pressed = Pressed {
            conn,
            was: [("maxmemory", maxmemory), ("maxmemory-policy", was_policy)],
            evicted_before,
            written: 0,
        };
        // Filler until the server evicts: it is then at its limit, where every key written
        // makes it evict again. (Its `used_memory` never reads above the limit: every command,
        // `INFO` too, first evicts down to it.) Bounded, should the memory figures mislead:
        // the count then says that nothing was evicted.
        let most = 4 * HEADROOM / FILLER_BYTES as u64 + 16;
        while pressed.written < most {
            pressed.feed(filler).await?;
            let evicted = info_number(&mut pressed.conn, "stats", "evicted_keys").await?;
            if evicted > evicted_before {
                break;
            }
        }
        Ok(pressed)
    }

    /// Writes one more filler key.
    async fn feed(&mut self, filler: &str) -> Result<(), LabError> {
        let key = format!("{FILLER_PREFIX}{}", self.written);
        let _: () = bounded(
            redis::cmd("SET")
                .arg(&key)
                .arg(filler)
                .arg("PX")
                .arg(FILLER_TTL_MS)
                .query_async(&mut self.conn),
        )
        .await?;
        self.written += 1;
        Ok(())
    }

    /// Puts the limit and the policy back, deletes the filler, and returns how many of the
    /// workload's keys the server evicted.
    async fn heal(mut self) -> Result<u64, LabError> {
        // The limit first: from then on nothing is evicted, and the count is final.
        for (parameter, value) in &self.was {
            config_set(&mut self.conn, parameter, value).await?;
        }
        let after = info_number(&mut self.conn, "stats", "evicted_keys").await?;
        let names: Vec<String> = (0..self.written)
            .map(|i| format!("{FILLER_PREFIX}{i}"))
            .collect();
        let mut deleted = 0u64;
        for chunk in names.chunks(256) {
            let n: u64 = bounded(redis::cmd("DEL").arg(chunk).query_async(&mut self.conn)).await?;
            deleted += n;
        }
        let filler_evicted = self.written.saturating_sub(deleted);
        Ok(after
            .saturating_sub(self.evicted_before)
            .saturating_sub(filler_evicted))
    }
}

/// `CONFIG GET parameter`: its value.
async fn config_get(conn: &mut MultiplexedConnection, parameter: &str) -> Result<String, LabError> {
    let pair: Vec<String> = bounded(
        redis::cmd("CONFIG")
            .arg("GET")
            .arg(parameter)
            .query_async(conn),
    )
    .await?;
    pair.get(1)
        .cloned()
        .ok_or_else(|| LabError::from(format!("CONFIG GET {parameter} answered no value")))
}

/// A number of `INFO section`, by its field's name.
async fn info_number(
    conn: &mut MultiplexedConnection,
    section: &str,
    name: &str,
) -> Result<u64, LabError> {
    let info: String = bounded(redis::cmd("INFO").arg(section).query_async(conn)).await?;
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| LabError::from(format!("INFO {section} has no {name}")))
}

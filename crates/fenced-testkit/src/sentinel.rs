//! [`RedisSentinels`]: a master, its replicas and the Redis Sentinels that watch it, on
//! loopback, with failovers on demand (`SENTINEL FAILOVER`) or by killing the master.

use std::time::{Duration, Instant};

use crate::cluster::{Reply, command};
use crate::{RedisServer, TestkitError};

/// The service (master) name the sentinels watch.
pub const SERVICE: &str = "mymaster";

/// A master (node 0 at the start), `replicas` replicas of it (nodes 1…), and `sentinels`
/// sentinels that watch it as `"mymaster"` with a majority quorum, noticing a dead master
/// after 1 s. Every process stops when this is dropped.
#[derive(Debug)]
pub struct RedisSentinels {
    nodes: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
}

fn failed(reason: String) -> TestkitError {
    TestkitError::StartFailed {
        port: 0,
        reason,
        log: String::new(),
    }
}

impl RedisSentinels {
    /// Starts the master, its replicas and the sentinels, and waits until every replica is
    /// in sync and every sentinel knows every replica and every other sentinel (a failover
    /// needs both).
    pub fn start(replicas: usize, sentinels: usize) -> Result<Self, TestkitError> {
        let master = RedisServer::start()?;
        let port = master.port().to_string();
        let mut nodes = vec![master];
        for _ in 0..replicas {
            nodes.push(RedisServer::start_with(&[
                "--replicaof",
                "127.0.0.1",
                &port,
            ])?);
        }
        let quorum = sentinels / 2 + 1;
        let config = format!(
            "sentinel monitor {SERVICE} 127.0.0.1 {port} {quorum}\n\
             sentinel down-after-milliseconds {SERVICE} 1000\n\
             sentinel failover-timeout {SERVICE} 4000\n\
             sentinel parallel-syncs {SERVICE} {replicas}\n"
        );
        let mut set = RedisSentinels {
            nodes,
            sentinels: Vec::new(),
        };
        set.wait("the replicas to sync", |s| {
            (1..s.nodes.len()).all(|i| s.info(i, "replication").contains("master_link_status:up"))
        })?;
        for _ in 0..sentinels {
            set.sentinels.push(RedisServer::start_sentinel(&config)?);
        }
        set.wait("the sentinels to know each other and the replicas", |s| {
            (0..s.sentinels.len()).all(|i| {
                s.count(i, "REPLICAS") == replicas && s.count(i, "SENTINELS") + 1 == sentinels
            })
        })?;
        Ok(set)
    }

    fn count(&self, sentinel: usize, what: &str) -> usize {
        match command(
            self.sentinels[sentinel].port(),
            &["SENTINEL", what, SERVICE],
        ) {
            Ok(Reply::Array(items)) => items.len(),
            _ => usize::MAX,
        }
    }

    fn info(&self, node: usize, section: &str) -> String {
        command(self.nodes[node].port(), &["INFO", section])
            .map(|r| r.text().to_owned())
            .unwrap_or_default()
    }

    fn wait(&self, what: &str, mut done: impl FnMut(&Self) -> bool) -> Result<(), TestkitError> {
        let deadline = Instant::now() + Duration::from_secs(40);
        while !done(self) {
            if Instant::now() >= deadline {
                return Err(failed(format!("timed out waiting for {what}")));
            }
            std::thread::sleep(Duration::from_millis(25));
        }
        Ok(())
    }

    /// The sentinels' URLs, for `Client::sentinel_builder`.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels.iter().map(RedisServer::url).collect()
    }

    /// Node `i` (0 is the first master), to pause, kill or restart.
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The node the first sentinel that answers names as the master now.
    pub fn master(&self) -> Result<usize, TestkitError> {
        for s in &self.sentinels {
            let Ok(Reply::Array(addr)) =
                command(s.port(), &["SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE])
            else {
                continue;
            };
            let port: Option<u16> = addr.get(1).and_then(|p| p.text().parse().ok());
            if let Some(i) = self.nodes.iter().position(|n| Some(n.port()) == port) {
                return Ok(i);
            }
        }
        Err(failed("no sentinel names a master".into()))
    }

    /// Waits until every running node other than the master is its replica, in sync: its
    /// link is up and the master counts its offset equal to its own (after a failover the
    /// sentinels re-point the other nodes, which then resynchronise).
    pub fn wait_synced(&self) -> Result<(), TestkitError> {
        self.wait("every replica to be in sync with the master", |s| {
            let Ok(m) = s.master() else { return false };
            if !s.is_master(m) {
                return false;
            }
            let port = format!("master_port:{}", s.nodes[m].port());
            let replicas: Vec<usize> = (0..s.nodes.len())
                .filter(|&i| i != m && s.nodes[i].pid().is_some() && !s.nodes[i].is_paused())
                .collect();
            let linked = replicas.iter().all(|&i| {
                let info = s.info(i, "replication");
                info.contains(&port) && info.contains("master_link_status:up")
            });
            let info = s.info(m, "replication");
            let offset = info
                .lines()
                .find_map(|l| l.strip_prefix("master_repl_offset:"))
                .map(str::trim)
                .unwrap_or("?")
                .to_owned();
            let caught_up = info
                .lines()
                .filter(|l| l.starts_with("slave") && l.contains("offset="))
                .filter(|l| l.contains(&format!("offset={offset},")))
                .count();
            linked && caught_up == replicas.len()
        })
    }

    /// Closes every replica's link on node `i` (`CLIENT KILL TYPE replica`): writes from now
    /// on stay on `i` alone until a replica connects again. With the replicas paused first,
    /// they cannot, and a failover then loses those writes (data in flight on a link that
    /// was merely paused would still arrive when the replica resumes).
    pub fn cut_replicas(&self, i: usize) -> Result<(), TestkitError> {
        command(self.nodes[i].port(), &["CLIENT", "KILL", "TYPE", "replica"])?;
        Ok(())
    }

    /// Whether node `i` runs and says it is a master.
    pub fn is_master(&self, i: usize) -> bool {
        self.nodes[i].pid().is_some() && self.info(i, "replication").contains("role:master")
    }

    /// Asks the sentinels for a failover (`SENTINEL FAILOVER`) and waits until they name a
    /// new master that says it is one; returns it.
    pub fn failover(&self) -> Result<usize, TestkitError> {
        let old = self.master()?;
        let asked = self.sentinels.iter().any(|s| {
            matches!(
                command(s.port(), &["SENTINEL", "FAILOVER", SERVICE]),
                Ok(Reply::Status(_))
            )
        });
        if !asked {
            return Err(failed("no sentinel accepted SENTINEL FAILOVER".into()));
        }
        self.wait_for_new_master(old)
    }

    /// Waits until the sentinels name a master other than `old` that says it is one (after
    /// a kill of `old`, say); returns it.
    pub fn wait_for_new_master(&self, old: usize) -> Result<usize, TestkitError> {
        let mut now = old;
        self.wait("a new master", |s| {
            now = s.master().unwrap_or(old);
            now != old && s.is_master(now)
        })?;
        Ok(now)
    }
}

//! [`RedisCluster`]: a real Redis Cluster of `redis-server` processes on loopback, made with
//! the cluster commands themselves (no `redis-cli`), and broken on purpose: a slot migrated
//! under a held key, a replica promoted, a master killed.

use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::{Capability, RedisServer, TestkitError, free_port, server_binary};

/// The number of hash slots of every Redis Cluster.
pub const SLOTS: u16 = 16384;

/// A reply of a raw command, as far as the kit needs to read one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// `+OK` and other simple strings.
    Status(String),
    /// An error reply (`-ERR …`), without the dash.
    Error(String),
    /// An integer.
    Int(i64),
    /// A bulk string (lossy UTF-8), or `None` for nil.
    Bulk(Option<String>),
    /// An array.
    Array(Vec<Reply>),
}

impl Reply {
    /// The text of a status or bulk reply, or `""`.
    pub fn text(&self) -> &str {
        match self {
            Reply::Status(s) | Reply::Bulk(Some(s)) => s,
            _ => "",
        }
    }
}

/// Sends one command (`args`, binary-safe as RESP) to the server on `port` and reads its reply.
pub fn command(port: u16, args: &[&str]) -> std::io::Result<Reply> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    stream.write_all(&out)?;
    read_reply(&mut BufReader::new(stream))
}

fn read_reply(r: &mut impl BufRead) -> std::io::Result<Reply> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let line = line.trim_end_matches(['\r', '\n']);
    let (kind, rest) = line.split_at(line.len().min(1));
    let number = || {
        rest.parse::<i64>()
            .map_err(|_| std::io::Error::other(format!("bad RESP line {line:?}")))
    };
    Ok(match kind {
        "+" => Reply::Status(rest.to_owned()),
        "-" => Reply::Error(rest.to_owned()),
        ":" => Reply::Int(number()?),
        "$" => {
            let n = number()?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let mut body = vec![0u8; usize::try_from(n).unwrap_or(0) + 2];
                r.read_exact(&mut body)?;
                body.truncate(body.len() - 2);
                Reply::Bulk(Some(String::from_utf8_lossy(&body).into_owned()))
            }
        }
        "*" => {
            let n = number()?;
            let mut items = Vec::new();
            for _ in 0..n.max(0) {
                items.push(read_reply(r)?);
            }
            Reply::Array(items)
        }
        _ => return Err(std::io::Error::other(format!("bad RESP line {line:?}"))),
    })
}

/// The hash slot of `key` (CRC16/XMODEM of its `{hash tag}`, or of the whole key), as Redis
/// Cluster computes it.
pub fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = match bytes.iter().position(|&b| b == b'{') {
        Some(open) => match bytes[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &bytes[open + 1..open + 1 + len],
            _ => bytes,
        },
        None => bytes,
    };
    let mut crc: u16 = 0;
    for &b in hashed {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % SLOTS
}

/// A Redis Cluster on loopback: `masters` masters sharing the slots evenly, each with
/// `replicas` replicas. Node `i < masters` is master `i` at the start; replica `r` of master
/// `m` is node `masters + m * replicas + r`. Every node stops when this is dropped.
#[derive(Debug)]
pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    masters: usize,
    /// Node 0's cluster bus port (not its port + 10000: ports are picked free).
    bus0: u16,
}

fn failed(reason: String) -> TestkitError {
    TestkitError::StartFailed {
        port: 0,
        reason,
        log: String::new(),
    }
}

impl RedisCluster {
    /// Starts and forms the cluster, and waits until every node agrees that all slots are
    /// served and every replica has synchronised.
    pub fn start(masters: usize, replicas: usize) -> Result<Self, TestkitError> {
        Self::start_needing(&[], masters, replicas)
    }

    /// Like [`start`](Self::start), on a binary with every capability in `needs` (sharded
    /// pub/sub, say); see [`server_binary`].
    pub fn start_needing(
        needs: &[Capability],
        masters: usize,
        replicas: usize,
    ) -> Result<Self, TestkitError> {
        if masters == 0 {
            return Err(failed("a cluster needs at least one master".into()));
        }
        let mut nodes = Vec::new();
        let mut bus0 = 0;
        // `--cluster-port` is Redis 7 (and Valkey); before it the bus listens on the data port
        // + 10000, which `start_with` retries on another port if that one is out of range or
        // taken.
        let bus_flag = server_binary(needs)?.redis7();
        for i in 0..masters * (1 + replicas) {
            let port = free_port()?;
            let bus = port.to_string();
            let mut args = vec![
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-node-timeout",
                "1000",
            ];
            if bus_flag {
                args.extend(["--cluster-port", &bus]);
            }
            let node = RedisServer::start_needing(needs, &args)?;
            if i == 0 {
                bus0 = if bus_flag { port } else { node.port() + 10000 };
            }
            nodes.push(node);
        }
        let cluster = RedisCluster {
            nodes,
            masters,
            bus0,
        };
        cluster.form(replicas)?;
        Ok(cluster)
    }

    fn form(&self, replicas: usize) -> Result<(), TestkitError> {
        let modern = self.nodes[0].binary().redis7();
        let per = usize::from(SLOTS) / self.masters;
        for m in 0..self.masters {
            let lo = m * per;
            let hi = if m + 1 == self.masters {
                usize::from(SLOTS) - 1
            } else {
                lo + per - 1
            };
            if modern {
                self.ok(
                    m,
                    &["CLUSTER", "ADDSLOTSRANGE", &lo.to_string(), &hi.to_string()],
                )?;
            } else {
                // Redis 6: every slot by name.
                let slots: Vec<String> = (lo..=hi).map(|s| s.to_string()).collect();
                let mut args = vec!["CLUSTER", "ADDSLOTS"];
                args.extend(slots.iter().map(String::as_str));
                self.ok(m, &args)?;
            }
        }
        for i in 0..self.nodes.len() {
            self.ok(i, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])?;
        }
        let (first, bus) = (self.nodes[0].port().to_string(), self.bus0.to_string());
        for i in 1..self.nodes.len() {
            if modern {
                self.ok(i, &["CLUSTER", "MEET", "127.0.0.1", &first, &bus])?;
            } else {
                self.ok(i, &["CLUSTER", "MEET", "127.0.0.1", &first])?;
            }
        }
        let n = self.nodes.len();
        self.wait("every node to know every other", |c| {
            (0..n)
                .all(|i| c.info_field(i, "cluster_known_nodes").as_deref() == Some(&n.to_string()))
        })?;
        for m in 0..self.masters {
            let id = self.node_id(m)?;
            for r in 0..replicas {
                let node = self.masters + m * replicas + r;
                // A replica may be refused until it has heard of its master through gossip.
                self.wait("a replica to attach", |c| {
                    matches!(
                        c.run(node, &["CLUSTER", "REPLICATE", &id]),
                        Ok(Reply::Status(_))
                    )
                })?;
            }
        }
        self.wait_healthy()
    }

    /// Waits until every running node reports `cluster_state:ok` with all slots served, and
    /// every running replica's link to its master is up.
    pub fn wait_healthy(&self) -> Result<(), TestkitError> {
        self.wait("the cluster to be healthy", |c| {
            c.running().all(|i| {
                c.info_field(i, "cluster_state").as_deref() == Some("ok")
                    && c.info_field(i, "cluster_slots_ok").as_deref() == Some("16384")
                    && c.replication_ok(i)
            })
        })
    }

    fn replication_ok(&self, i: usize) -> bool {
        let Ok(info) = self.run(i, &["INFO", "replication"]) else {
            return false;
        };
        let info = info.text().to_owned();
        !info.contains("role:slave") || info.contains("master_link_status:up")
    }

    fn running(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].pid().is_some() && !self.nodes[i].is_paused())
    }

    fn wait(&self, what: &str, mut done: impl FnMut(&Self) -> bool) -> Result<(), TestkitError> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !done(self) {
            if Instant::now() >= deadline {
                return Err(failed(format!("timed out waiting for {what}")));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Runs one command on node `i`.
    pub fn run(&self, i: usize, args: &[&str]) -> std::io::Result<Reply> {
        command(self.nodes[i].port(), args)
    }

    fn ok(&self, i: usize, args: &[&str]) -> Result<(), TestkitError> {
        match self.run(i, args)? {
            Reply::Error(e) => Err(failed(format!("{} on node {i}: {e}", args.join(" ")))),
            _ => Ok(()),
        }
    }

    fn info_field(&self, i: usize, field: &str) -> Option<String> {
        let info = self.run(i, &["CLUSTER", "INFO"]).ok()?;
        info.text()
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .map(|v| v.trim().to_owned())
    }

    /// The cluster id of node `i`.
    pub fn node_id(&self, i: usize) -> Result<String, TestkitError> {
        match self.run(i, &["CLUSTER", "MYID"])? {
            Reply::Bulk(Some(id)) => Ok(id),
            other => Err(failed(format!("CLUSTER MYID on node {i}: {other:?}"))),
        }
    }

    /// `redis://127.0.0.1:<port>` of every node: seeds for a cluster client.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// Node `i`, to pause, kill or restart.
    pub fn node(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// How many nodes there are.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether there are no nodes (never, once started).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The node that serves `slot` now, as node `asker` sees the cluster (a running master).
    pub fn owner_of(&self, slot: u16, asker: usize) -> Result<usize, TestkitError> {
        let Reply::Array(ranges) = self.run(asker, &["CLUSTER", "SLOTS"])? else {
            return Err(failed("CLUSTER SLOTS did not answer an array".into()));
        };
        for range in ranges {
            let Reply::Array(fields) = range else {
                continue;
            };
            let (Some(Reply::Int(lo)), Some(Reply::Int(hi)), Some(Reply::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                continue;
            };
            if (*lo..=*hi).contains(&i64::from(slot))
                && let Some(Reply::Int(port)) = master.get(1)
            {
                return self
                    .nodes
                    .iter()
                    .position(|n| i64::from(n.port()) == *port)
                    .ok_or_else(|| {
                        failed(format!("slot {slot} is served by unknown port {port}"))
                    });
            }
        }
        Err(failed(format!("no node serves slot {slot}")))
    }

    /// The replicas of master node `m`, as node `m` lists them.
    pub fn replicas_of(&self, m: usize) -> Result<Vec<usize>, TestkitError> {
        let id = self.node_id(m)?;
        let Reply::Array(lines) = self.run(m, &["CLUSTER", "REPLICAS", &id])? else {
            return Ok(Vec::new());
        };
        Ok(lines
            .iter()
            .filter_map(|l| {
                let addr = l.text().split_whitespace().nth(1)?;
                let port: u16 = addr.split('@').next()?.rsplit(':').next()?.parse().ok()?;
                self.nodes.iter().position(|n| n.port() == port)
            })
            .collect())
    }

    /// Moves `slot` and its keys from the node that serves it to node `to` (a master), the
    /// way `redis-cli --cluster reshard` does: IMPORTING, MIGRATING, MIGRATE the keys, then
    /// assign the slot to its new owner everywhere.
    pub fn migrate_slot(&self, slot: u16, to: usize) -> Result<(), TestkitError> {
        let from = self.owner_of(slot, to)?;
        if from == to {
            return Ok(());
        }
        let (from_id, to_id) = (self.node_id(from)?, self.node_id(to)?);
        let s = slot.to_string();
        self.ok(to, &["CLUSTER", "SETSLOT", &s, "IMPORTING", &from_id])?;
        self.ok(from, &["CLUSTER", "SETSLOT", &s, "MIGRATING", &to_id])?;
        while let Reply::Array(keys) = self.run(from, &["CLUSTER", "GETKEYSINSLOT", &s, "100"])? {
            if keys.is_empty() {
                break;
            }
            let port = self.nodes[to].port().to_string();
            let mut args = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
            args.extend(keys.iter().map(Reply::text));
            self.ok(from, &args)?;
        }
        for i in self.running().collect::<Vec<_>>() {
            if self.is_master(i) {
                self.ok(i, &["CLUSTER", "SETSLOT", &s, "NODE", &to_id])?;
            }
        }
        self.wait("the migrated slot's new owner to be known", |c| {
            c.running().all(|i| c.owner_of(slot, i).ok() == Some(to))
        })
    }

    /// Whether node `i` is a master now.
    pub fn is_master(&self, i: usize) -> bool {
        self.run(i, &["ROLE"]).is_ok_and(|r| match r {
            Reply::Array(fields) => fields.first().map(Reply::text) == Some("master"),
            _ => false,
        })
    }

    /// Promotes replica node `replica` with a manual failover (`CLUSTER FAILOVER`, which
    /// waits for the replica to catch up first, or `FORCE` when its master is down), and
    /// waits until the cluster is healthy again with it as a master.
    pub fn failover(&self, replica: usize, force: bool) -> Result<(), TestkitError> {
        let mut args = vec!["CLUSTER", "FAILOVER"];
        if force {
            args.push("FORCE");
        }
        self.ok(replica, &args)?;
        self.wait("the replica to become a master", |c| c.is_master(replica))?;
        self.wait_healthy()
    }
}

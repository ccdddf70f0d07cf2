//! `fenced doctor`: one report of each server's fitness for locks, a line per check, each
//! with what to change.
//!
//! Invariants:
//! 1. Read only. Every command sent reads: `INFO`, `CONFIG GET`, `COMMAND INFO` and `COMMAND
//!    DOCS`, `ACL WHOAMI` and `ACL DRYRUN`, `TIME`, and `EVAL` of a script that returns 1.
//! 2. A refusal makes its line `unknown`, never fails the command: only a server that cannot
//!    be talked to (down, silent past `--timeout`, a wrong password) ends the report, with
//!    the exit code every command gives it.
//! 3. Exit 78 only for a line marked `fail`: a server that may evict a held lock's key
//!    (mutual exclusion then breaks while the server runs normally, which no other setting
//!    does), and a server older than fenced supports. What weakens a promise only when a
//!    server restarts or fails over (no persistence, asynchronous replicas) is a `warn`, and
//!    so is what fails loudly when used (scripts or commands refused: exit 77 or 78 then).
//! 4. Each server is asked on a plain connection of its own, with the command line's password
//!    and TLS settings, not through a lock client: a server a client would refuse (too old,
//!    say) still gets its report.

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, FromRedisValue, IntoConnectionInfo, RedisError, RedisResult, Value};
use serde_json::{Map, Value as Json, json};

use crate::args::{DEFAULT_REDIS, Global};
use crate::cmd::{address, check_url, password};
use crate::exit::{self, Failure};

/// How a check came out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    /// Fit for locks.
    Ok,
    /// Worth knowing; any change is a choice, not a need.
    Info,
    /// Weakens a promise when the server restarts or fails over, or fails loudly when used.
    Warn,
    /// Breaks a guarantee while the server runs normally, or is not supported (exit 78).
    Fail,
    /// The server would not say.
    Unknown,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Unknown => "unknown",
        }
    }
}

/// One line of the report.
struct Check {
    /// The check's name: its field in JSON, and (with spaces for `_`) the start of its line.
    id: &'static str,
    status: Status,
    /// What was found, and what it means for locks.
    summary: String,
    /// What to change, where something should or could.
    fix: Option<String>,
    /// The figures behind the line, for JSON.
    data: Map<String, Json>,
}

impl Check {
    fn new(id: &'static str, status: Status, summary: impl Into<String>) -> Check {
        Check {
            id,
            status,
            summary: summary.into(),
            fix: None,
            data: Map::new(),
        }
    }

    /// A line the server would not answer: `what` was refused (invariant 2).
    fn refused(id: &'static str, what: &str, e: &RedisError) -> Check {
        Check::new(
            id,
            Status::Unknown,
            format!("unknown ({what} refused: {})", one_line(e)),
        )
    }

    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }

    fn with(mut self, key: &str, value: Json) -> Check {
        self.data.insert(key.to_owned(), value);
        self
    }
}

/// Every check of one server.
struct Report {
    node: String,
    checks: Vec<Check>,
}

impl Report {
    fn fit(&self) -> bool {
        self.checks.iter().all(|c| c.status != Status::Fail)
    }
}

/// `fenced doctor`: examines each server, prints the report (or its JSON), and exits 78 when
/// a line is marked fail (invariant 3).
pub async fn doctor(global: &Global) -> Result<u8, Failure> {
    for url in global
        .redis
        .iter()
        .chain(&global.cluster)
        .chain(&global.sentinel)
    {
        check_url(url)?;
    }
    let mut reports = Vec::new();
    for (node, client) in servers(global).await? {
        let mut server = Server::open(node, &client, global.timeout).await?;
        let checks = examine(&mut server, global).await?;
        reports.push(Report {
            node: server.label,
            checks,
        });
    }
    let fit = reports.iter().all(Report::fit);
    if global.json {
        let nodes: Vec<Json> = reports.iter().map(report_json).collect();
        say!("{}", json!({"fit": fit, "nodes": nodes}));
    } else {
        for report in &reports {
            say!("{}", report.node);
            for c in &report.checks {
                let fix = c
                    .fix
                    .as_ref()
                    .map_or(String::new(), |f| format!("; fix: {f}"));
                say!(
                    "  {:<16} {:<7} {}{fix}",
                    c.id.replace('_', " "),
                    c.status.word(),
                    c.summary
                );
            }
        }
        let unknown = reports
            .iter()
            .flat_map(|r| &r.checks)
            .filter(|c| c.status == Status::Unknown)
            .count();
        if fit && unknown > 0 {
            say!(
                "fit for locks as far as the server says: no line breaks a guarantee, {unknown} unknown"
            );
        } else if fit {
            say!("fit for locks: no line breaks a guarantee");
        } else {
            say!("not fit for locks: each line marked fail breaks a guarantee");
        }
    }
    Ok(if fit { exit::OK } else { exit::CONFIG })
}

fn report_json(report: &Report) -> Json {
    let mut checks = Map::new();
    for c in &report.checks {
        let mut line = Map::new();
        line.insert("status".to_owned(), json!(c.status.word()));
        line.insert("summary".to_owned(), json!(c.summary));
        line.insert("fix".to_owned(), json!(c.fix));
        line.extend(c.data.clone());
        checks.insert(c.id.to_owned(), Json::Object(line));
    }
    json!({"node": report.node, "fit": report.fit(), "checks": checks})
}

/// Every check, in the report's order.
async fn examine(s: &mut Server, global: &Global) -> Result<Vec<Check>, Failure> {
    let mut checks = Vec::with_capacity(8);
    checks.push(server(s).await?);
    checks.push(scripts(s, global.no_scripts).await?);
    checks.push(acl(s, &global.namespace).await?);
    checks.push(eviction(s).await?);
    checks.push(persistence(s).await?);
    checks.push(replicas(s).await?);
    checks.push(keyspace_events(s).await?);
    checks.push(clock(s).await?);
    Ok(checks)
}

/// The servers to examine, each with its label: every `--redis` (one server, or each
/// Redlock master), every master of the `--cluster`, or Sentinel's master of `--service`.
async fn servers(global: &Global) -> Result<Vec<(String, redis::Client)>, Failure> {
    if !global.sentinel.is_empty() {
        return Ok(vec![sentinel_master(global).await?]);
    }
    if !global.cluster.is_empty() {
        return cluster_masters(global).await;
    }
    let urls: Vec<&str> = if global.redis.is_empty() {
        vec![DEFAULT_REDIS]
    } else {
        global.redis.iter().map(String::as_str).collect()
    };
    urls.into_iter()
        .map(|url| -> Result<(String, redis::Client), Failure> {
            Ok((address(url), client_for(global, url, None, true)?))
        })
        .collect()
}

/// The master Sentinel names for `--service`, asked of each sentinel in turn; reached like the
/// first sentinel URL (its scheme and user), with the command line's password, as a lock
/// client reaches it.
async fn sentinel_master(global: &Global) -> Result<(String, redis::Client), Failure> {
    let service = global.service.as_deref().unwrap_or_default();
    let mut last = None;
    for url in &global.sentinel {
        // The sentinels' URLs carry their own credentials.
        let sentinel = client_for(global, url, None, false)?;
        let ask = async {
            let mut conn = sentinel.get_multiplexed_async_connection().await?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(service)
                .query_async::<Option<(String, u16)>>(&mut conn)
                .await
        };
        match tokio::time::timeout(global.timeout, ask).await {
            Ok(Ok(Some((host, port)))) => {
                let client = client_for(
                    global,
                    &global.sentinel[0],
                    Some((host.as_str(), port)),
                    true,
                )?;
                return Ok((format!("{host}:{port} (master of {service})"), client));
            }
            Ok(Ok(None)) => {
                return Err(Failure::new(
                    exit::UNAVAILABLE,
                    format!(
                        "the sentinel at {} knows no service {service:?}",
                        address(url)
                    ),
                ));
            }
            Ok(Err(e)) => last = Some(lost(e, &address(url), global.timeout)),
            Err(_) => last = Some(timed_out(&address(url), global.timeout)),
        }
    }
    Err(last.unwrap_or_else(|| Failure::usage("--sentinel needs at least one URL")))
}

/// The masters of the cluster, from `CLUSTER SLOTS` of the first seed that answers, each
/// reached like that seed.
async fn cluster_masters(global: &Global) -> Result<Vec<(String, redis::Client)>, Failure> {
    let mut last = None;
    for seed in &global.cluster {
        let client = client_for(global, seed, None, true)?;
        let ask = async {
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query_async::<Value>(&mut conn)
                .await
        };
        let slots = match tokio::time::timeout(global.timeout, ask).await {
            Ok(Ok(slots)) => slots,
            Ok(Err(e)) if cut_off(&e) => {
                last = Some(lost(e, &address(seed), global.timeout));
                continue;
            }
            Ok(Err(e)) => {
                return Err(Failure::from_lib(fenced::Error::Redis(e), &address(seed)));
            }
            Err(_) => {
                last = Some(timed_out(&address(seed), global.timeout));
                continue;
            }
        };
        let seed_host = address(seed)
            .rsplit_once(':')
            .map_or_else(|| address(seed), |(host, _)| host.to_owned());
        let mut masters = BTreeSet::new();
        if let Value::Array(ranges) = slots {
            for range in ranges {
                if let Value::Array(parts) = range
                    && let Some(Value::Array(master)) = parts.get(2)
                    && let (Some(host), Some(Value::Int(port))) = (master.first(), master.get(1))
                    && let Ok(port) = u16::try_from(*port)
                {
                    // An empty host is the one the first node was reached at.
                    let host = text(host).filter(|h| !h.is_empty() && h != "?");
                    masters.insert((host.unwrap_or_else(|| seed_host.clone()), port));
                }
            }
        }
        if masters.is_empty() {
            return Err(Failure::new(
                exit::UNAVAILABLE,
                format!(
                    "the cluster node at {} serves no slots: is the cluster set up?",
                    address(seed)
                ),
            ));
        }
        return masters
            .into_iter()
            .map(|(host, port)| -> Result<(String, redis::Client), Failure> {
                let client = client_for(global, seed, Some((host.as_str(), port)), true)?;
                Ok((format!("{host}:{port}"), client))
            })
            .collect();
    }
    Err(last.unwrap_or_else(|| Failure::usage("--cluster needs at least one URL")))
}

/// A client of `template`'s server, or of `at` with `template`'s scheme, user and database
/// (a master named by Sentinel or by the cluster), with the command line's TLS settings and,
/// with `own_password`, its password.
fn client_for(
    global: &Global,
    template: &str,
    at: Option<(&str, u16)>,
    own_password: bool,
) -> Result<redis::Client, Failure> {
    let unusable = |e: RedisError| {
        Failure::usage(format!(
            "Redis URL {:?} is not usable: {e}",
            address(template)
        ))
    };
    let mut info = template.into_connection_info().map_err(unusable)?;
    if own_password && let Some(secret) = password(global)? {
        let settings = info.redis_settings().clone().set_password(secret);
        info = info.set_redis_settings(settings);
    }
    if let Some((host, port)) = at {
        let addr = match info.addr() {
            ConnectionAddr::Tcp(..) => ConnectionAddr::Tcp(host.to_owned(), port),
            ConnectionAddr::TcpTls { insecure, .. } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: None,
            },
            _ => {
                return Err(Failure::usage(format!(
                    "{} names its nodes by TCP address; give a redis:// or rediss:// URL",
                    address(template)
                )));
            }
        };
        info = info.set_addr(addr);
    }
    let read = |path: &std::path::Path, what: &str| {
        std::fs::read(path)
            .map_err(|e| Failure::usage(format!("cannot read {what} {}: {e}", path.display())))
    };
    let root_cert = match &global.tls_ca_cert {
        Some(path) => Some(read(path, "--tls-ca-cert")?),
        None => None,
    };
    let client_tls = match (&global.tls_cert, &global.tls_key) {
        (Some(cert), Some(key)) => Some(redis::ClientTlsConfig {
            client_cert: read(cert, "--tls-cert")?,
            client_key: read(key, "--tls-key")?,
        }),
        _ => None,
    };
    if root_cert.is_none() && client_tls.is_none() {
        return redis::Client::open(info).map_err(unusable);
    }
    redis::Client::build_with_tls(
        info,
        redis::TlsCertificates {
            client_tls,
            root_cert,
        },
    )
    .map_err(unusable)
}

/// One server being examined.
struct Server {
    label: String,
    conn: MultiplexedConnection,
    timeout: Duration,
}

impl Server {
    /// Connects, bounded by `--timeout` (as every call after it).
    async fn open(
        label: String,
        client: &redis::Client,
        timeout: Duration,
    ) -> Result<Server, Failure> {
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout));
        let connect = client.get_multiplexed_async_connection_with_config(&config);
        match tokio::time::timeout(timeout, connect).await {
            Ok(Ok(conn)) => Ok(Server {
                label,
                conn,
                timeout,
            }),
            Ok(Err(e)) => Err(lost(e, &label, timeout)),
            Err(_) => Err(timed_out(&label, timeout)),
        }
    }

    /// Sends `cmd`: its answer, or the server's refusal of it (invariant 2). `Err` when the
    /// server cannot be talked to.
    async fn ask<T: FromRedisValue>(
        &mut self,
        cmd: &redis::Cmd,
    ) -> Result<RedisResult<T>, Failure> {
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut self.conn)).await {
            Err(_) => Err(timed_out(&self.label, self.timeout)),
            Ok(Err(e)) if cut_off(&e) => Err(lost(e, &self.label, self.timeout)),
            Ok(answer) => Ok(answer),
        }
    }

    /// Sends `pipe` (which ignores errors): each command's answer or refusal.
    async fn ask_each(
        &mut self,
        pipe: &redis::Pipeline,
    ) -> Result<RedisResult<Vec<RedisResult<Value>>>, Failure> {
        let sent = pipe.query_async::<Vec<RedisResult<Value>>>(&mut self.conn);
        match tokio::time::timeout(self.timeout, sent).await {
            Err(_) => Err(timed_out(&self.label, self.timeout)),
            Ok(Err(e)) if cut_off(&e) => Err(lost(e, &self.label, self.timeout)),
            Ok(answer) => Ok(answer),
        }
    }

    /// The value of the configuration parameter `name` (`None` when the server has none).
    async fn config(&mut self, name: &str) -> Result<RedisResult<Option<String>>, Failure> {
        let reply = self
            .ask::<Value>(redis::cmd("CONFIG").arg("GET").arg(name))
            .await?;
        Ok(reply.map(|reply| setting(&config_pairs(reply), name)))
    }
}

/// Errors by which the server cannot be talked to at all (invariant 2): the connection is
/// down or silent, or the password is wrong.
fn cut_off(e: &RedisError) -> bool {
    e.is_io_error()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// A server that cannot be talked to, as every command reports it (69, or 77 for a password).
fn lost(e: RedisError, node: &str, timeout: Duration) -> Failure {
    let err = if e.is_timeout() {
        fenced::Error::Timeout {
            operation: "doctor",
            after: timeout,
        }
    } else if e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
    {
        fenced::Error::Redis(e)
    } else {
        fenced::Error::Unavailable { source: e }
    };
    Failure::from_lib(err, node)
}

fn timed_out(node: &str, timeout: Duration) -> Failure {
    Failure::from_lib(
        fenced::Error::Timeout {
            operation: "doctor",
            after: timeout,
        },
        node,
    )
}

/// The version, and the native commands a lock could use instead of a script.
async fn server(s: &mut Server) -> Result<Check, Failure> {
    let info = match s.ask::<String>(redis::cmd("INFO").arg("server")).await? {
        Ok(info) => info,
        Err(e) => return Ok(Check::refused("server", "INFO", &e)),
    };
    let Some(redis_version) = info_field(&info, "redis_version") else {
        return Ok(Check::new(
            "server",
            Status::Unknown,
            "unknown (INFO server names no redis_version)",
        ));
    };
    let valkey_version = info_field(&info, "valkey_version");
    let name = match &valkey_version {
        Some(v) => format!("Valkey {v} (as Redis {redis_version})"),
        None => format!("Redis {redis_version}"),
    };
    let (delifeq, delex) = match s
        .ask::<Value>(
            redis::cmd("COMMAND")
                .arg("INFO")
                .arg("DELIFEQ")
                .arg("DELEX"),
        )
        .await?
    {
        // A nil for each command the server does not have.
        Ok(Value::Array(known)) => {
            let has = |i: usize| known.get(i).map(|v| !matches!(v, Value::Nil));
            (has(0), has(1))
        }
        _ => (None, None),
    };
    let set_ifeq = match s
        .ask::<Value>(redis::cmd("COMMAND").arg("DOCS").arg("SET"))
        .await?
    {
        Ok(docs) => Some(mentions(&docs, "IFEQ")),
        Err(_) => None,
    };
    let (major, minor) = fenced::MIN_SERVER_VERSION;
    let too_old = version(&redis_version).is_some_and(|v| v < (major, minor));
    let check = if too_old {
        Check::new(
            "server",
            Status::Fail,
            format!(
                "{name}: older than Redis {major}.{minor}, the oldest fenced supports (a lock client refuses it)"
            ),
        )
        .fix(format!("upgrade to Redis {major}.{minor} or later, or Valkey"))
    } else {
        Check::new(
            "server",
            Status::Ok,
            format!(
                "{name}; native commands: DELIFEQ {} (releases use it where the server has it, instead of a script), DELEX {}, SET IFEQ {} (fenced uses neither: renewals keep their script, which orders a lease's expiry changes)",
                yes_no(delifeq),
                yes_no(delex),
                yes_no(set_ifeq)
            ),
        )
    };
    Ok(check
        .with("version", json!(redis_version))
        .with("valkey_version", json!(valkey_version))
        .with(
            "native_commands",
            json!({"delifeq": delifeq, "delex": delex, "set_ifeq": set_ifeq}),
        ))
}

/// Whether the server runs Lua scripts for this user.
async fn scripts(s: &mut Server, no_scripts: bool) -> Result<Check, Failure> {
    let said = if no_scripts {
        " (this command line sends none: --no-scripts)"
    } else {
        ""
    };
    Ok(
        match s.ask::<i64>(redis::cmd("EVAL").arg("return 1").arg(0)).await? {
            Ok(_) => Check::new(
                "scripts",
                Status::Ok,
                format!("Lua scripts run: every primitive works{said}"),
            )
            .with("allowed", json!(true)),
            Err(e) => Check::new(
                "scripts",
                Status::Warn,
                format!(
                    "Lua scripts refused ({}): locks and unfenced locks still work on one server or behind Sentinel, each step a transaction; other primitives, a Redis Cluster and Redlock answer that they need scripts (exit 78){said}",
                    one_line(&e)
                ),
            )
            .fix("allow them (ACL SETUSER <user> +@scripting, or a server built with Lua), or keep to locks with --no-scripts")
            .with("allowed", json!(false)),
        },
    )
}

/// What each primitive runs, the commands it sends and those its scripts run, as the
/// operations guide ("Least privilege") lists them and the library's ACL tests check them:
/// `(name, commands)`. The lock's first two rows are alternatives: with scripts, or without.
const PRIMITIVES: &[(&str, &str)] = &[
    (
        "lock",
        "evalsha script|load ping set get mget del pexpire pttl xadd publish",
    ),
    (
        "lock without scripts",
        "ping set mget del pexpire pttl xadd type publish watch multi exec",
    ),
    ("wake-up on release", "subscribe unsubscribe"),
    (
        "semaphore",
        "evalsha script|load ping time set get del xadd pexpire publish zadd zrange zrangebyscore zremrangebyscore zscore zrem pexpireat hset hdel hvals hgetall",
    ),
    (
        "re-entrant lock",
        "evalsha script|load ping xadd type xinfo time set get mget del pexpire pttl publish hset hget hdel hexists hlen",
    ),
    (
        "fair lock",
        "evalsha script|load ping xadd type xinfo time set get mget del pexpire pttl publish hset hget hdel rpush lpop lindex lrem llen",
    ),
    (
        "read-write lock",
        "evalsha script|load ping xadd type xinfo time set get mget del pexpire pexpireat pttl publish hset hdel zadd zcount zrange zrangebyscore zrem zremrangebyscore zscore",
    ),
    (
        "multi-lock",
        "evalsha script|load ping xadd type xinfo time set get mget del pexpire pttl publish",
    ),
    ("latch", "evalsha script|load ping set get decr publish"),
    (
        "fenced resource",
        "evalsha script|load ping set get hset hget hmget",
    ),
    (
        "cache",
        "evalsha script|load ping xadd type xinfo time set get mget del pexpire pttl publish hset hmget",
    ),
];

/// The arguments of `command` for `ACL DRYRUN`, on `key` and `channel`: as many as the
/// command takes, with the key and the channel where it names them, so the user's key and
/// channel patterns are checked too.
fn sample(command: &str, key: &str, channel: &str) -> Vec<String> {
    let words: Vec<&str> = match command {
        "evalsha" => vec![
            "EVALSHA",
            "0000000000000000000000000000000000000000",
            "1",
            key,
        ],
        "script|load" => vec!["SCRIPT", "LOAD", "return 1"],
        "xinfo" => vec!["XINFO", "STREAM", key],
        "ping" | "time" | "multi" | "exec" => vec![command],
        "publish" => vec![command, channel, "1"],
        "subscribe" | "unsubscribe" => vec![command, channel],
        "xadd" => vec![command, key, "*", "f", "v"],
        "set" | "rpush" => vec![command, key, "1"],
        "pexpire" | "pexpireat" | "lindex" => vec![command, key, "1"],
        "hset" => vec![command, key, "f", "v"],
        "hget" | "hdel" | "hexists" | "hmget" | "zscore" | "zrem" => vec![command, key, "f"],
        "zadd" => vec![command, key, "1", "m"],
        "zrange" | "zrangebyscore" | "zremrangebyscore" | "zcount" | "lrem" => {
            vec![command, key, "0", "1"]
        }
        // The rest take the key alone: get, mget, del, decr, pttl, type, watch, llen, lpop,
        // hvals, hgetall, hlen.
        _ => vec![command, key],
    };
    words.into_iter().map(str::to_owned).collect()
}

/// The permissions each primitive needs, asked of the server for this user in one round trip
/// of `ACL DRYRUN` (Redis 7 and later, Valkey).
async fn acl(s: &mut Server, namespace: &str) -> Result<Check, Failure> {
    let user = match s.ask::<String>(redis::cmd("ACL").arg("WHOAMI")).await? {
        Ok(user) => user,
        Err(e) => return Ok(Check::refused("acl", "ACL WHOAMI", &e)),
    };
    let key = format!("{namespace}{{fenced-doctor}}");
    let resource_key = format!("{namespace}res:{{fenced-doctor}}");
    let channel = format!("{key}:released");
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    let mut asked: Vec<(usize, &str)> = Vec::new();
    for (row, (name, commands)) in PRIMITIVES.iter().enumerate() {
        let key = if *name == "fenced resource" {
            &resource_key
        } else {
            &key
        };
        for command in commands.split_whitespace() {
            let mut dry = redis::cmd("ACL");
            dry.arg("DRYRUN")
                .arg(&user)
                .arg(sample(command, key, &channel));
            pipe.add_command(dry);
            asked.push((row, command));
        }
    }
    let replies = match s.ask_each(&pipe).await? {
        Ok(replies) => replies,
        Err(e) => return Ok(Check::refused("acl", "ACL DRYRUN", &e)),
    };
    if let Some(Err(e)) = replies.first()
        && replies.iter().all(Result::is_err)
    {
        if e.to_string()
            .to_ascii_lowercase()
            .contains("unknown subcommand")
        {
            return Ok(Check::new(
                "acl",
                Status::Unknown,
                format!("unknown (user {user}: this server has no ACL DRYRUN, which Redis 7 and later have)"),
            )
            .with("user", json!(user)));
        }
        return Ok(Check::refused("acl", "ACL DRYRUN", e).with("user", json!(user)));
    }
    // What each row lacks, as the ACL rules that would grant it.
    let mut lacks: Vec<BTreeSet<String>> = vec![BTreeSet::new(); PRIMITIVES.len()];
    let mut unchecked = 0;
    for (&(row, command), reply) in asked.iter().zip(&replies) {
        match reply {
            Ok(Value::Okay) => {}
            Ok(Value::SimpleString(ok)) if ok.eq_ignore_ascii_case("OK") => {}
            Ok(denied @ (Value::BulkString(_) | Value::VerbatimString { .. })) => {
                let why = text(denied).unwrap_or_default();
                let rule = if why.contains("' channel") {
                    format!("&{namespace}*")
                } else if why.contains("' key") {
                    format!("~{namespace}*")
                } else {
                    format!("+{command}")
                };
                lacks[row].insert(rule);
            }
            _ => unchecked += 1,
        }
    }
    // The lock needs one of its two rows: with scripts, or without.
    let lock_ok = lacks[0].is_empty() || lacks[1].is_empty();
    let mut short = Vec::new();
    let mut grant = BTreeSet::new();
    for (row, (name, _)) in PRIMITIVES.iter().enumerate() {
        if lacks[row].is_empty() || (row < 2 && lock_ok) {
            continue;
        }
        let rules: Vec<&str> = lacks[row].iter().map(String::as_str).collect();
        short.push(format!("{name} lacks {}", rules.join(" ")));
        grant.extend(rules);
    }
    let unchecked = if unchecked > 0 {
        format!(" ({unchecked} permission(s) could not be checked)")
    } else {
        String::new()
    };
    let check = if short.is_empty() {
        Check::new(
            "acl",
            Status::Ok,
            format!(
                "user {user} may run what every primitive needs on {namespace}* (ACL DRYRUN){unchecked}"
            ),
        )
    } else {
        let rules: Vec<&str> = grant.into_iter().collect();
        Check::new(
            "acl",
            Status::Warn,
            format!(
                "user {user}: {}; a primitive refused a command it needs fails naming it (exit 77), and waiters that may not subscribe poll{unchecked}",
                short.join("; ")
            ),
        )
        .fix(format!(
            "ACL SETUSER {user} {} (the operations guide, \"Least privilege\", lists what each primitive needs)",
            rules.join(" ")
        ))
    };
    let missing: Map<String, Json> = PRIMITIVES
        .iter()
        .zip(&lacks)
        .map(|((name, _), rules)| ((*name).to_owned(), json!(rules)))
        .collect();
    Ok(check
        .with("user", json!(user))
        .with("missing", Json::Object(missing)))
}

/// Whether the server may evict a held lock's key (`fenced::ServerNote::eviction` judges, as
/// a client does at connect).
async fn eviction(s: &mut Server) -> Result<Check, Failure> {
    const CHECK: &str = "make sure maxmemory-policy is noeviction, or that maxmemory is 0 (a volatile-* or allkeys-* policy evicts lock keys)";
    let reply = match s
        .ask::<Value>(redis::cmd("CONFIG").arg("GET").arg("maxmemory*"))
        .await?
    {
        Ok(reply) => config_pairs(reply),
        Err(e) => return Ok(Check::refused("eviction", "CONFIG GET", &e).fix(CHECK)),
    };
    let Some(policy) = setting(&reply, "maxmemory-policy") else {
        return Ok(Check::new(
            "eviction",
            Status::Unknown,
            "unknown (CONFIG GET names no maxmemory-policy)",
        )
        .fix(CHECK));
    };
    let maxmemory = setting(&reply, "maxmemory").and_then(|v| v.trim().parse::<u64>().ok());
    let check = if let Some(note) =
        fenced::ServerNote::eviction(s.label.clone(), maxmemory, &policy)
    {
        Check::new("eviction", Status::Fail, note.message).fix(note.fix)
    } else if policy.starts_with("allkeys-") || policy.starts_with("volatile-") {
        Check::new(
            "eviction",
            Status::Warn,
            format!(
                "maxmemory-policy {policy} without a maxmemory: nothing is evicted now, but a memory limit set later would evict lock keys"
            ),
        )
        .fix("CONFIG SET maxmemory-policy noeviction")
    } else {
        Check::new(
            "eviction",
            Status::Ok,
            format!(
                "maxmemory-policy {policy}: held locks are never evicted (at a memory limit the server refuses writes instead, and an acquire fails: exit 69)"
            ),
        )
    };
    Ok(check
        .with("maxmemory", json!(maxmemory))
        .with("policy", json!(policy)))
}

/// What a restart keeps: nothing, the last snapshot, or the append-only file.
async fn persistence(s: &mut Server) -> Result<Check, Failure> {
    // What a restart that forgets grants does to them.
    const FORGOTTEN: &str = "their holders lose their leases (the next renewal is refused and the lost signal fires) while other clients may be granted the same names at once; fencing tokens still increase, since a fence that is lost starts again from the server's clock";
    const KEEP: &str = "CONFIG SET appendonly yes (with appendfsync everysec) to keep grants across restarts; on Redlock, set redlock_restart_grace to the longest ttl";
    let aof = s.config("appendonly").await?;
    let fsync = s.config("appendfsync").await?;
    let save = s.config("save").await?;
    let (aof, fsync, save) = match (aof, fsync, save) {
        (Ok(aof), Ok(fsync), Ok(save)) => (
            aof.unwrap_or_default(),
            fsync.unwrap_or_default(),
            save.unwrap_or_default(),
        ),
        (Err(e), ..) | (_, Err(e), _) | (.., Err(e)) => {
            return Ok(Check::refused("persistence", "CONFIG GET", &e));
        }
    };
    let data = |check: Check| {
        check
            .with("appendonly", json!(aof == "yes"))
            .with("appendfsync", json!(fsync))
            .with("save", json!(save))
    };
    let check = match (aof.as_str(), fsync.as_str(), save.trim().is_empty()) {
        ("yes", "always", _) => Check::new(
            "persistence",
            Status::Ok,
            "append-only file, fsync always: a restart keeps every grant",
        ),
        ("yes", "everysec", _) => Check::new(
            "persistence",
            Status::Ok,
            "append-only file, fsync every second: a crash may forget the last second's grants and releases",
        ),
        ("yes", _, _) => Check::new(
            "persistence",
            Status::Warn,
            format!(
                "append-only file with appendfsync {fsync} (the OS writes it when it likes, every 30 s or so): a crash may forget that long of grants, and {FORGOTTEN}"
            ),
        )
        .fix("CONFIG SET appendfsync everysec"),
        (_, _, false) => Check::new(
            "persistence",
            Status::Warn,
            format!(
                "snapshots only (save \"{}\"): a restart forgets every grant since the last snapshot; {FORGOTTEN}",
                save.trim()
            ),
        )
        .fix(KEEP),
        (_, _, true) => Check::new(
            "persistence",
            Status::Warn,
            format!("none: a restart forgets every lock; {FORGOTTEN}"),
        )
        .fix(KEEP),
    };
    Ok(data(check))
}

/// The server's role and its replicas, and what waiting for them (`replica_acks`) needs.
async fn replicas(s: &mut Server) -> Result<Check, Failure> {
    let info = match s
        .ask::<String>(redis::cmd("INFO").arg("replication"))
        .await?
    {
        Ok(info) => info,
        Err(e) => return Ok(Check::refused("replicas", "INFO", &e)),
    };
    let role = info_field(&info, "role").unwrap_or_default();
    if role == "slave" || role == "replica" {
        let master = format!(
            "{}:{}",
            info_field(&info, "master_host").unwrap_or_default(),
            info_field(&info, "master_port").unwrap_or_default()
        );
        return Ok(Check::new(
            "replicas",
            Status::Warn,
            format!("this server is a replica of {master}: it refuses fenced's writes (READONLY)"),
        )
        .fix("point fenced at the master (--redis), or find it through --sentinel")
        .with("role", json!("replica")));
    }
    let connected = info_field(&info, "connected_slaves")
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    let check = if connected == 0 {
        Check::new(
            "replicas",
            Status::Ok,
            "no replicas connected: no failover can lose a grant, and replica_acks would have none to wait for",
        )
    } else {
        let majority = connected / 2 + 1;
        Check::new(
            "replicas",
            Status::Info,
            format!(
                "{connected} replica(s) connected; replication is asynchronous, so a failover can lose the last grants: two holders then overlap until the first one's renewal is refused (fencing tokens still increase)"
            ),
        )
        .fix(format!(
            "where a failover must keep every grant, have clients wait for replicas: ClientBuilder::replica_acks(n, wait) with n at most {connected} ({majority}, a majority, say) and a short wait"
        ))
    };
    Ok(check
        .with("role", json!(role))
        .with("connected_replicas", json!(connected)))
}

/// Keyspace notifications: which the server sends, and what of fenced uses them.
async fn keyspace_events(s: &mut Server) -> Result<Check, Failure> {
    let flags = match s.config("notify-keyspace-events").await? {
        Ok(flags) => flags.unwrap_or_default(),
        Err(e) => return Ok(Check::refused("keyspace_events", "CONFIG GET", &e)),
    };
    let shown = if flags.is_empty() {
        "off".to_owned()
    } else {
        format!("\"{flags}\"")
    };
    let exact = flags.contains('K') && (flags.contains('$') || flags.contains('A'));
    Ok(Check::new(
        "keyspace_events",
        Status::Info,
        format!(
            "notify-keyspace-events {shown}: fenced needs none; a client built with keyspace_events(true) wakes lock waiters by them (and adds K, g and x when it connects), and fenced top counts grants exactly {}",
            if exact {
                "with these"
            } else {
                "with K and $ (lower bounds now)"
            }
        ),
    )
    .with("flags", json!(flags)))
}

/// The server's clock against this machine's: informational, since fenced compares no two
/// machines' clocks for safety (leases run on each client's monotonic clock, tokens on the
/// server's clock alone).
async fn clock(s: &mut Server) -> Result<Check, Failure> {
    let before = SystemTime::now();
    let answer = s.ask::<(u64, u64)>(&redis::cmd("TIME")).await?;
    let after = SystemTime::now();
    let (secs, micros) = match answer {
        Ok(time) => time,
        Err(e) => return Ok(Check::refused("clock", "TIME", &e)),
    };
    let since_epoch = |t: SystemTime| {
        t.duration_since(UNIX_EPOCH)
            .map_or(0, |d| i128::try_from(d.as_micros()).unwrap_or(i128::MAX))
    };
    let (sent, answered) = (since_epoch(before), since_epoch(after));
    let local = sent + (answered - sent) / 2;
    let server = i128::from(secs) * 1_000_000 + i128::from(micros);
    let offset = server - local;
    let within = (answered - sent).max(0) / 2;
    let way = if offset >= 0 { "ahead of" } else { "behind" };
    Ok(Check::new(
        "clock",
        Status::Info,
        format!(
            "the server's clock is {} {way} this machine's (± {}): fenced compares no two machines' clocks for safety (leases run on each client's monotonic clock, fencing tokens on the server's clock alone)",
            span(offset),
            span(within)
        ),
    )
    .with(
        "offset_us",
        json!(i64::try_from(offset).unwrap_or(i64::MAX)),
    )
    .with(
        "uncertainty_us",
        json!(i64::try_from(within).unwrap_or(i64::MAX)),
    ))
}

/// A span of microseconds for people: `850µs`, `12.3ms`, `1.250s`.
fn span(micros: i128) -> String {
    let n = micros.unsigned_abs();
    if n < 1_000 {
        format!("{n}µs")
    } else if n < 1_000_000 {
        format!("{:.1}ms", n as f64 / 1e3)
    } else {
        format!("{:.3}s", n as f64 / 1e6)
    }
}

/// A field of an `INFO` text (`name:value` lines).
fn info_field(info: &str, name: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(|v| v.trim().to_owned())
}

/// `major.minor` of a version text.
fn version(text: &str) -> Option<(u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

fn yes_no(known: Option<bool>) -> &'static str {
    match known {
        Some(true) => "yes",
        Some(false) => "no",
        None => "unknown",
    }
}

/// A text reply as a string.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// Whether `word` is one of the strings anywhere in `v` (a command's documentation).
fn mentions(v: &Value, word: &str) -> bool {
    match v {
        Value::Array(items) | Value::Set(items) => items.iter().any(|i| mentions(i, word)),
        Value::Map(pairs) => pairs
            .iter()
            .any(|(k, x)| mentions(k, word) || mentions(x, word)),
        other => text(other).is_some_and(|t| t.eq_ignore_ascii_case(word)),
    }
}

/// The (name, value) pairs of a `CONFIG GET` reply: a flat array under RESP2, a map under
/// RESP3.
fn config_pairs(reply: Value) -> Vec<(String, String)> {
    match reply {
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [name, value] => Some((text(name)?, text(value)?)),
                _ => None,
            })
            .collect(),
        Value::Map(pairs) => pairs
            .iter()
            .filter_map(|(name, value)| Some((text(name)?, text(value)?)))
            .collect(),
        _ => Vec::new(),
    }
}

fn setting(pairs: &[(String, String)], name: &str) -> Option<String> {
    pairs
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// An error's text on one line.
fn one_line(e: &RedisError) -> String {
    e.to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::{PRIMITIVES, config_pairs, info_field, mentions, sample, span, version};

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn info_fields_and_versions_are_read_exactly() {
        let info =
            "# Server\r\nredis_version:7.2.4\r\nredis_version_extra:x\r\nvalkey_version:9.1.2\r\n";
        assert_eq!(info_field(info, "redis_version").as_deref(), Some("7.2.4"));
        assert_eq!(info_field(info, "valkey_version").as_deref(), Some("9.1.2"));
        assert_eq!(info_field(info, "role"), None);
        assert_eq!(version("6.0.16"), Some((6, 0)));
        assert!(version("6.0.16").is_some_and(|v| v < fenced::MIN_SERVER_VERSION));
        assert_eq!(version("x"), None);
    }

    #[test]
    fn config_replies_read_the_same_under_both_protocols() {
        let flat = Value::Array(vec![bulk("save"), bulk(""), bulk("appendonly"), bulk("no")]);
        let map = Value::Map(vec![
            (bulk("save"), bulk("")),
            (bulk("appendonly"), bulk("no")),
        ]);
        assert_eq!(config_pairs(flat), config_pairs(map));
    }

    #[test]
    fn a_word_is_found_anywhere_in_a_documentation_reply() {
        let docs = Value::Map(vec![(
            bulk("set"),
            Value::Array(vec![
                bulk("arguments"),
                Value::Array(vec![bulk("token"), bulk("IFEQ")]),
            ]),
        )]);
        assert!(mentions(&docs, "ifeq"));
        assert!(!mentions(&docs, "delex"));
    }

    /// Every command of every row has arguments of its own arity: a sample that falls back
    /// to the key alone is one of the commands that take just the key.
    #[test]
    fn every_command_checked_has_arguments_the_server_accepts() {
        let key_alone = [
            "get", "mget", "del", "decr", "pttl", "type", "watch", "llen", "lpop", "hvals",
            "hgetall", "hlen",
        ];
        for (_, commands) in PRIMITIVES {
            for command in commands.split_whitespace() {
                let words = sample(command, "k", "c");
                if words.len() == 2 && words[1] == "k" && words[0] == command {
                    assert!(key_alone.contains(&command), "{command}: {words:?}");
                }
            }
        }
    }

    #[test]
    fn spans_read_in_their_unit() {
        assert_eq!(span(850), "850µs");
        assert_eq!(span(-12_300), "12.3ms");
        assert_eq!(span(1_250_000), "1.250s");
    }
}

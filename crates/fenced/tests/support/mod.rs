//! Shared helpers: servers, clients with short timeouts, raw connections, waiting on events.

#![allow(dead_code)]

use std::time::Duration;

use fenced::Client;
use fenced_testkit::RedisServer;
use tokio::time::Instant;

/// A fresh server; panics loudly (with the reason) if none can be started.
pub fn server() -> RedisServer {
    match RedisServer::start() {
        Ok(s) => s,
        Err(e) => panic!("this test needs a real redis-server: {e}"),
    }
}

/// A cluster of `masters` masters with `replicas` replicas each; fails loudly without
/// redis-server.
pub fn cluster(masters: usize, replicas: usize) -> fenced_testkit::RedisCluster {
    match fenced_testkit::RedisCluster::start(masters, replicas) {
        Ok(c) => c,
        Err(e) => panic!("this test needs a real redis-server cluster: {e}"),
    }
}

/// A cluster whose nodes have sharded pub/sub (Redis 7+, Valkey), for the tests that watch
/// where the subscriptions sit: on another binary they fail saying so.
pub fn sharded_cluster(masters: usize, replicas: usize) -> fenced_testkit::RedisCluster {
    let needs = [fenced_testkit::Capability::ShardedPubSub];
    match fenced_testkit::RedisCluster::start_needing(&needs, masters, replicas) {
        Ok(c) => c,
        Err(e) => panic!("this test needs a redis-server cluster with sharded pub/sub: {e}"),
    }
}

/// A cluster client with a short timeout (a failover takes about two node timeouts, 2 s).
pub async fn cluster_client(c: &fenced_testkit::RedisCluster) -> Client {
    Client::cluster_builder(&c.urls())
        .timeout(Duration::from_millis(800))
        .connect()
        .await
        .expect("connect to the cluster")
}

/// A client with a short per-call timeout, so failure tests finish quickly.
pub async fn client(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// A plain redis-rs connection for looking behind the library's back.
pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Polls `check` every few milliseconds until it returns true or `limit` passes; returns
/// whether it became true. For state that has no event to wait on (keys in Redis).
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Number of keys in the server's database.
pub async fn dbsize(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    redis::cmd("DBSIZE").query_async(conn).await.unwrap()
}

/// The lock key of `name` in the default namespace.
pub fn lock_key(name: &str) -> String {
    format!("fenced:{{{name}}}")
}

/// Every key in the server's database, sorted (test servers hold a handful).
pub async fn all_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(conn).await.unwrap();
    keys.sort();
    keys
}

/// The deployments a primitive's tests run on: one server, a Redis Cluster (3 masters),
/// and Redlock over 3 independent masters. A test written with [`on_backends!`] runs its
/// body once on each backend it names, each time against a fresh deployment.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Single,
    Cluster,
    Redlock,
}

impl Backend {
    /// Starts the deployment; it stops when the returned value is dropped.
    pub fn start(self) -> Deployment {
        match self {
            Backend::Single => Deployment::Single(server()),
            Backend::Cluster => Deployment::Cluster(cluster(3, 0)),
            Backend::Redlock => Deployment::Redlock((0..3).map(|_| server()).collect()),
        }
    }
}

/// A running deployment of test servers.
pub enum Deployment {
    Single(RedisServer),
    Cluster(fenced_testkit::RedisCluster),
    Redlock(Vec<RedisServer>),
}

impl Deployment {
    /// A client of this deployment with the short test timeout.
    pub async fn client(&self) -> Client {
        match self {
            Deployment::Single(s) => client(s).await,
            Deployment::Cluster(c) => cluster_client(c).await,
            Deployment::Redlock(servers) => {
                let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
                Client::redlock_builder(&urls)
                    .timeout(Duration::from_millis(500))
                    .connect()
                    .await
                    .expect("connect to the Redlock masters")
            }
        }
    }
}

/// `on_backends!(Single, Cluster, Redlock; async fn name(client, deployment) { ... })`: a
/// test whose body runs once per named [`Backend`], each time with a fresh deployment and a
/// client of it (more clients: `deployment.client().await`).
macro_rules! on_backends {
    ($($backend:ident),+; $(#[$meta:meta])* async fn $name:ident($client:ident, $deployment:ident) $body:block) => {
        $(#[$meta])*
        #[tokio::test]
        async fn $name() {
            for backend in [$($crate::support::Backend::$backend),+] {
                let $deployment = backend.start();
                let $client = $deployment.client().await;
                eprintln!("{} on {backend:?}", stringify!($name));
                $body
            }
        }
    };
}
pub(crate) use on_backends;

/// A worker process: this test binary run again with one test selected (`test`, a path such
/// as `storms::worker`) and `env` set, so a test can hold leases from another process and
/// SIGKILL it. Killed when dropped.
pub struct Worker {
    child: std::process::Child,
    lines: Option<std::io::BufReader<std::process::ChildStdout>>,
}

impl Worker {
    pub fn spawn(test: &str, env: &[(&str, &str)]) -> Worker {
        use std::os::unix::process::CommandExt;
        let mut command = std::process::Command::new(std::env::current_exe().unwrap());
        // A group of its own: a test may stop (SIGSTOP) or kill it, never the runner's group.
        command
            .process_group(0)
            .args([test, "--exact", "--nocapture", "--test-threads", "1"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command.spawn().unwrap();
        let lines = child.stdout.take().map(std::io::BufReader::new);
        Worker { child, lines }
    }

    /// Waits (up to 30 s) for the worker to print a line containing `word`; false if it
    /// exited or stayed silent. (libtest prints "test <name> ... " first, on the same line.)
    pub async fn said(&mut self, word: &'static str) -> bool {
        use std::io::BufRead;
        let Some(mut out) = self.lines.take() else {
            return false;
        };
        let read = tokio::task::spawn_blocking(move || {
            let mut line = String::new();
            loop {
                line.clear();
                if out.read_line(&mut line).unwrap_or(0) == 0 {
                    return (false, out);
                }
                if line.contains(word) {
                    return (true, out);
                }
            }
        });
        match tokio::time::timeout(Duration::from_secs(30), read).await {
            Ok(Ok((seen, out))) => {
                self.lines = Some(out);
                seen
            }
            _ => false,
        }
    }

    /// The worker's process id (its process group's too).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL: no release, no renewal, no goodbye.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits up to `limit` for the worker to exit; whether it succeeded (`None`: still running).
    pub async fn finished_within(&mut self, limit: Duration) -> Option<bool> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(done) = self.finished() {
                return Some(done);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether the worker has exited, and if so whether it succeeded.
    pub fn finished(&mut self) -> Option<bool> {
        self.child.try_wait().unwrap().map(|s| s.success())
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A `MONITOR` connection recording, in execution order, every script call clients make
/// (commands that scripts run are left out). The server's own order of events, for checkers
/// that must not trust the library's view.
pub struct Monitor {
    lines: tokio::task::JoinHandle<Vec<Vec<String>>>,
    port: u16,
}

impl Monitor {
    pub async fn start(server: &RedisServer) -> Monitor {
        use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        stream.write_all(b"MONITOR\r\n").await.unwrap();
        let mut reader = tokio::io::BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).await.unwrap();
        assert_eq!(ok.trim(), "+OK");
        let lines = tokio::spawn(async move {
            let mut calls = Vec::new();
            let mut line = String::new();
            loop {
                line.clear();
                if reader.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return calls;
                }
                // `+<time> [<db> <addr>] "CMD" "arg" ...`; `[0 lua]` lines are script-internal.
                let Some((_, rest)) = line.split_once("] ") else {
                    continue;
                };
                if line.contains(" lua] ") {
                    continue;
                }
                let words = monitor_words(rest.trim_end());
                if words.first().is_some_and(|w| w == "ECHO")
                    && words.get(1).is_some_and(|w| w == "monitor-end")
                {
                    return calls;
                }
                if words.first().is_some_and(|w| {
                    w.eq_ignore_ascii_case("EVALSHA") || w.eq_ignore_ascii_case("EVAL")
                }) {
                    calls.push(words);
                }
            }
        });
        Monitor {
            lines,
            port: server.port(),
        }
    }

    /// Every script call seen until now: `["EVALSHA", sha, numkeys, keys.., args..]`.
    pub async fn stop(self) -> Vec<Vec<String>> {
        let mut conn = redis::Client::open(format!("redis://127.0.0.1:{}", self.port))
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: String = redis::cmd("ECHO")
            .arg("monitor-end")
            .query_async(&mut conn)
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.lines)
            .await
            .expect("the monitor fell behind")
            .unwrap()
    }
}

/// Splits a MONITOR line's `"quoted" "words"` (with `\"`, `\\` and `\xNN` escapes).
fn monitor_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut word = String::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        if let Ok(b) = u8::from_str_radix(&hex, 16) {
                            word.push(char::from(b));
                        }
                    }
                    Some(other) => word.push(other),
                    None => {}
                },
                other => word.push(other),
            }
        }
        words.push(word);
    }
    words
}

/// How many times the server has run `command` (its `INFO commandstats` name: `evalsha`,
/// `publish`, `pubsub|numsub`, ...), commands inside scripts included.
pub async fn calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    let count = |name: &str| {
        let prefix = format!("cmdstat_{name}:calls=");
        info.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.split(',').next()?.parse().ok())
    };
    // Redis 6 counts a container's subcommands together (`cmdstat_pubsub`).
    count(command)
        .or_else(|| {
            let (container, _) = command.split_once('|')?;
            let redis6 = !info.contains('|');
            redis6.then(|| count(container)).flatten()
        })
        .unwrap_or(0)
}

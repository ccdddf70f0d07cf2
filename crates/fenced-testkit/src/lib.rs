//! Real `redis-server` processes for tests and benchmarks: started on free loopback ports,
//! broken on purpose (pause, kill, restart, and through a [`Proxy`]: delayed, partitioned,
//! replies lost), and stopped when dropped.
//!
//! No mocks: every test of `fenced` talks to a real server started here. When no
//! `redis-server` binary can be found, [`RedisServer::start`] fails with a message that says
//! how to install one; it never pretends.
//!
//! The binary is `$FENCED_REDIS_SERVER` if set and not empty, else `redis-server` on `PATH`, else
//! `/usr/bin/redis-server` or `/usr/sbin/redis-server`. `scripts/ensure-redis-server` installs
//! Debian's package when it is missing, and `scripts/servers` fetches Redis 6.2 and Valkey 9.1.
//! The kit reads each binary's version and whether it has TLS, and passes it only the
//! arguments it knows; a server that needs a [`Capability`] the chosen binary lacks (TLS, say)
//! runs on the first binary that has it, or fails with [`TestkitError::Missing`].
//!
//! ```
//! let server = fenced_testkit::RedisServer::start()?;
//! assert!(server.url().starts_with("redis://127.0.0.1:"));
//! # Ok::<(), fenced_testkit::TestkitError>(())
//! ```

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

mod binary;
mod cluster;
mod latency;
mod ports;
mod proxy;
mod sentinel;

pub use binary::{Capability, Flavour, ServerBinary, server_binary};

pub use cluster::{RedisCluster, Reply, SLOTS, command, key_slot};
pub use latency::LatencyProxy;
pub use ports::free_port;
pub use proxy::{Fault, Proxy};
pub use sentinel::RedisSentinels;

/// What can go wrong while starting or controlling a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TestkitError {
    /// No `redis-server` binary was found.
    #[error(
        "no redis-server found on PATH or in $FENCED_REDIS_SERVER: install one (apt-get install redis-server, brew install redis) or set FENCED_REDIS_SERVER to its path"
    )]
    NoBinary,
    /// No binary has a capability a test needs (TLS, say).
    #[error(
        "no redis-server binary has {capability}: tried {binaries} (scripts/ensure-redis-server installs Debian's, which has TLS)"
    )]
    Missing {
        /// What was needed.
        capability: String,
        /// The binaries tried, with their versions.
        binaries: String,
    },
    /// The server did not come up.
    #[error("redis-server on port {port} did not start: {reason}\n--- server log ---\n{log}")]
    StartFailed {
        /// The port it was started on.
        port: u16,
        /// What went wrong.
        reason: String,
        /// The server's log file.
        log: String,
    },
    /// An I/O error (temporary directory, spawning, signalling).
    #[error("testkit I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// Sending a signal failed.
    #[error("could not signal redis-server: {0}")]
    Signal(#[from] nix::Error),
}

/// One `redis-server` process on `127.0.0.1`, stopped (SIGKILL) when dropped.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    binary: ServerBinary,
    extra: Vec<String>,
    paused: bool,
    /// With TLS: the CA certificate (PEM) that signed the server's certificate.
    tls_ca: Option<Vec<u8>>,
    /// A configuration file in `dir`, given first on the command line (a sentinel needs one
    /// it can rewrite).
    config_file: Option<String>,
}

impl RedisServer {
    /// Starts a server with no persistence on a free loopback port and waits until it answers.
    pub fn start() -> Result<Self, TestkitError> {
        Self::start_with(&[])
    }

    /// Like [`start`](Self::start), with extra `redis-server` arguments such as
    /// `["--requirepass", "secret"]`.
    pub fn start_with(extra: &[&str]) -> Result<Self, TestkitError> {
        Self::start_needing(&[], extra)
    }

    /// Like [`start_with`](Self::start_with), on a binary that has every capability in
    /// `needs` (see [`server_binary`]): a test that needs sharded pub/sub says so here, and
    /// fails with [`TestkitError::Missing`] when no binary has it.
    pub fn start_needing(needs: &[Capability], extra: &[&str]) -> Result<Self, TestkitError> {
        Self::start_plain(server_binary(needs)?, extra)
    }

    /// Like [`start_with`](Self::start_with), running the binary at `path` (a benchmark's
    /// `--server`, say), probed like any other.
    pub fn start_binary(path: &Path, extra: &[&str]) -> Result<Self, TestkitError> {
        Self::start_plain(ServerBinary::probe(path)?, extra)
    }

    fn start_plain(binary: ServerBinary, extra: &[&str]) -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new().prefix("fenced-redis-").tempdir()?;
        let extra = extra.iter().map(|s| (*s).to_owned()).collect();
        Self::start_in(dir, extra, None, None, binary)
    }

    /// Starts a Redis Sentinel (`redis-server sentinel.conf --sentinel`) whose configuration
    /// file holds `config` (`sentinel monitor …` lines).
    pub fn start_sentinel(config: &str) -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("fenced-sentinel-")
            .tempdir()?;
        std::fs::write(dir.path().join("sentinel.conf"), config)?;
        Self::start_in(
            dir,
            vec!["--sentinel".to_owned()],
            None,
            Some("sentinel.conf".to_owned()),
            server_binary(&[])?,
        )
    }

    /// Starts a server that speaks only TLS, with a certificate for `127.0.0.1` signed by a
    /// throwaway CA made with `openssl`; [`tls_ca`](Self::tls_ca) gives the CA, and
    /// [`url`](Self::url) a `rediss://` URL.
    pub fn start_tls() -> Result<Self, TestkitError> {
        Self::start_tls_with(false)
    }

    /// Like [`start_tls`](Self::start_tls), and the server requires a client certificate
    /// signed by its CA (`tls-auth-clients yes`): mutual TLS. [`tls_client`](Self::tls_client)
    /// gives identities to connect with.
    pub fn start_mtls() -> Result<Self, TestkitError> {
        Self::start_tls_with(true)
    }

    fn start_tls_with(mutual: bool) -> Result<Self, TestkitError> {
        let dir = tempfile::Builder::new()
            .prefix("fenced-redis-tls-")
            .tempdir()?;
        make_certificates(dir.path())?;
        if mutual {
            make_client_certificates(dir.path())?;
        }
        let ca = std::fs::read(dir.path().join("ca.crt"))?;
        let file = |name: &str| dir.path().join(name).display().to_string();
        let extra = vec![
            "--tls-cert-file".to_owned(),
            file("server.crt"),
            "--tls-key-file".to_owned(),
            file("server.key"),
            "--tls-ca-cert-file".to_owned(),
            file("ca.crt"),
            "--tls-auth-clients".to_owned(),
            if mutual { "yes" } else { "no" }.to_owned(),
        ];
        Self::start_in(
            dir,
            extra,
            Some(ca),
            None,
            server_binary(&[Capability::Tls])?,
        )
    }

    /// Starts in `dir`, retrying on another port when the chosen one was taken meanwhile.
    fn start_in(
        mut dir: tempfile::TempDir,
        extra: Vec<String>,
        tls_ca: Option<Vec<u8>>,
        config_file: Option<String>,
        binary: ServerBinary,
    ) -> Result<Self, TestkitError> {
        let mut last_err = None;
        for _ in 0..5 {
            let mut server = RedisServer {
                child: None,
                port: free_port()?,
                dir,
                binary: binary.clone(),
                extra: extra.clone(),
                paused: false,
                tls_ca: tls_ca.clone(),
                config_file: config_file.clone(),
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    last_err = Some(e);
                    // Keep the directory (certificates, log) for the next try.
                    dir = std::mem::replace(&mut server.dir, tempfile::tempdir()?);
                }
            }
        }
        Err(last_err.unwrap_or(TestkitError::NoBinary))
    }

    /// A client identity (certificate and key, PEM) for a server started with
    /// [`start_mtls`](Self::start_mtls): `"client"` (valid, signed by the server's CA),
    /// `"expired"` (signed by it, expired), `"foreign"` (valid, from another CA).
    pub fn tls_client(&self, which: &str) -> Option<(Vec<u8>, Vec<u8>)> {
        let cert = std::fs::read(self.dir.path().join(format!("{which}.crt"))).ok()?;
        let key = std::fs::read(self.dir.path().join(format!("{which}.key"))).ok()?;
        Some((cert, key))
    }

    /// The CA certificate (PEM) of a server started with [`start_tls`](Self::start_tls).
    pub fn tls_ca(&self) -> Option<&[u8]> {
        self.tls_ca.as_deref()
    }

    fn spawn(&mut self) -> Result<(), TestkitError> {
        let log = self.log_path();
        // A fresh log: readiness (and any error report) must come from this run alone.
        let _ = std::fs::remove_file(&log);
        let mut cmd = Command::new(&self.binary.path);
        if let Some(name) = &self.config_file {
            cmd.arg(self.dir.path().join(name));
        }
        // Only what this binary knows: `--tls-port` needs a build with TLS, and
        // `--enable-debug-command` Redis 7 (before it, `DEBUG` is on anyway).
        if self.tls_ca.is_some() {
            cmd.args(["--port", "0", "--tls-port"])
                .arg(self.port.to_string());
        } else {
            cmd.arg("--port").arg(self.port.to_string());
        }
        if self.binary.redis7() {
            cmd.args(["--enable-debug-command", "local"]);
        }
        cmd.args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--daemonize", "no"])
            // A replica syncs at once: since Redis 7 a master waits 5 s for more replicas
            // before a diskless sync.
            .args(["--repl-diskless-sync-delay", "0"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own: a server this kit stops (SIGSTOP) must never sit stopped in
            // the test runner's group, or the kernel hangs up on that whole group (SIGHUP,
            // then SIGCONT) as soon as the group is orphaned, which it is from the start
            // when the runner has no job control (`setsid`, `nohup`, a CI agent).
            .process_group(0);
        let mut child = cmd.spawn()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Err(self.start_failed(format!("exited with {status}"))),
                Ok(None) => {}
                Err(e) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(e.into());
                }
            }
            let ready = if self.tls_ca.is_some() {
                // No TLS client here: the log says when the server listens (a fresh log, so
                // this is our process's line).
                self.log().contains("Ready to accept connections")
            } else {
                // Whoever answers must be our child, not a server that won the port race.
                // Behind a password INFO is refused; then our child must at least be alive.
                match server_pid(self.port) {
                    Ok(pid) => pid == child.id(),
                    Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                        // Our own (fresh) log must say we listen, or the answer is a stranger's.
                        matches!(child.try_wait(), Ok(None))
                            && self.log().contains("Ready to accept connections")
                    }
                    Err(_) => false,
                }
            };
            if ready {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(self.start_failed("no answer to PING within 10s".into()));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    fn start_failed(&self, reason: String) -> TestkitError {
        TestkitError::StartFailed {
            port: self.port,
            reason,
            log: self.log(),
        }
    }

    /// `redis://127.0.0.1:<port>` (`rediss://` for a TLS server).
    pub fn url(&self) -> String {
        let scheme = if self.tls_ca.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// The binary it runs, with its version and capabilities.
    pub fn binary(&self) -> &ServerBinary {
        &self.binary
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Freezes the process (SIGSTOP): connections stay open, nothing answers, keys do not
    /// expire. The nearest thing to a long GC pause or a partition.
    pub fn pause(&mut self) -> Result<(), TestkitError> {
        self.signal(Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// Lets a paused process run again (SIGCONT).
    pub fn resume(&mut self) -> Result<(), TestkitError> {
        self.signal(Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// True while paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Kills the process (SIGKILL) and reaps it; all data is gone. No other server of this
    /// process is given its port meanwhile ([`free_port`]).
    pub fn kill(&mut self) -> Result<(), TestkitError> {
        self.stop()
    }

    /// Kills the process if it runs, and starts a fresh one on the same port: with empty data,
    /// or with the snapshot in its directory when one was written (`SAVE`).
    pub fn restart(&mut self) -> Result<(), TestkitError> {
        self.stop()?;
        self.spawn()
    }

    /// SIGKILL and reap, leaving the port free.
    fn stop(&mut self) -> Result<(), TestkitError> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        self.paused = false;
        Ok(())
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    fn signal(&self, sig: Signal) -> Result<(), TestkitError> {
        let pid = self
            .child
            .as_ref()
            .map(Child::id)
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| std::io::Error::other("redis-server is not running"))?;
        kill(Pid::from_raw(pid), sig)?;
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL works on a stopped process too; errors here leave nothing we could fix.
        let _ = self.stop();
    }
}

/// Runs `openssl` in `dir`.
fn openssl(dir: &Path, args: &[&str]) -> Result<(), TestkitError> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(TestkitError::StartFailed {
            port: 0,
            reason: format!(
                "openssl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ),
            log: String::new(),
        })
    }
}

/// Makes a self-signed CA `<prefix>.crt`/`<prefix>.key` named `cn` in `dir`, valid two days.
fn make_ca(dir: &Path, cn: &str, prefix: &str) -> Result<(), TestkitError> {
    let subject = format!("/CN={cn}");
    let (key, crt) = (format!("{prefix}.key"), format!("{prefix}.crt"));
    openssl(
        dir,
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", &subject,
            "-keyout", &key, "-out", &crt,
        ],
    )
}

/// Makes client identities in `dir` (next to `ca.crt`/`ca.key`): `client` signed by the CA,
/// `expired` signed by it with a validity that ended in the past, and `foreign` signed by
/// another CA.
fn make_client_certificates(dir: &Path) -> Result<(), TestkitError> {
    let run = |args: &[&str]| openssl(dir, args);
    std::fs::write(
        dir.join("client.ext"),
        "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n",
    )?;
    make_ca(dir, "another CA", "other-ca")?;
    for (name, ca) in [("client", "ca"), ("expired", "ca"), ("foreign", "other-ca")] {
        run(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            &format!("/CN=fenced {name}"),
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
        ])?;
        let (csr, crt) = (format!("{name}.csr"), format!("{name}.crt"));
        let (ca_crt, ca_key) = (format!("{ca}.crt"), format!("{ca}.key"));
        let mut args = vec![
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            &ca_crt,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-extfile",
            "client.ext",
            "-out",
            &crt,
        ];
        // The expired one ended a day before it began (`-days -1`): verification says
        // "certificate has expired", which is the case to test.
        args.extend(["-days", if name == "expired" { "-1" } else { "2" }]);
        run(&args)?;
    }
    Ok(())
}

/// Makes `ca.crt`, and `server.crt`/`server.key` for `127.0.0.1` signed by it, in `dir`.
fn make_certificates(dir: &Path) -> Result<(), TestkitError> {
    let run = |args: &[&str]| openssl(dir, args);
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n",
    )?;
    make_ca(dir, "fenced test CA", "ca")?;
    run(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ])?;
    run(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.crt",
    ])?;
    Ok(())
}

/// The `redis-server` binary this kit would run, if any.
pub fn redis_server_binary() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FENCED_REDIS_SERVER").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("redis-server"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        ["/usr/bin/redis-server", "/usr/sbin/redis-server"]
            .iter()
            .map(Path::new)
            .find(|p| p.is_file())
            .map(Path::to_path_buf)
    })
}

/// Sends `PING` over a fresh TCP connection; `Ok` when the server answers at all (an
/// authentication error counts as an answer).
pub fn ping(port: u16) -> std::io::Result<()> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"PING\r\n")?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line)?;
    if line.starts_with("+PONG") || line.starts_with("-NOAUTH") {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("unexpected reply {line:?}")))
    }
}

/// The `process_id` that the server on `port` reports in `INFO server`.
fn server_pid(port: u16) -> std::io::Result<u32> {
    use std::io::Read;
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    stream.write_all(b"INFO server\r\n")?;
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    reader.read_line(&mut header)?;
    if header.starts_with("-NOAUTH") {
        return Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            "the server wants a password",
        ));
    }
    let len: usize = header
        .strip_prefix('$')
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("unexpected reply {header:?}")))?;
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|p| p.trim().parse().ok())
        .ok_or_else(|| std::io::Error::other("INFO server has no process_id"))
}

/// Boxed error for examples and doctests.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Runs a doctest body on a fresh tokio runtime against a fresh server, and panics with the
/// error (and the server log) if the body fails. For documentation examples only.
#[allow(clippy::expect_used)] // a doctest helper: failing loudly is its whole job
pub fn doctest<F, Fut>(body: F)
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    let server = RedisServer::start().expect("doctest needs redis-server");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(body(server.url())) {
        panic!("doctest failed: {e}\n--- server log ---\n{}", server.log());
    }
}

/// [`doctest`] against `n` independent servers (a Redlock deployment); the body gets their
/// URLs.
#[allow(clippy::expect_used)] // a doctest helper: failing loudly is its whole job
pub fn doctest_redlock<F, Fut>(n: usize, body: F)
where
    F: FnOnce(Vec<String>) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    let servers: Vec<RedisServer> = (0..n)
        .map(|_| RedisServer::start().expect("doctest needs redis-server"))
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(body(servers.iter().map(RedisServer::url).collect())) {
        panic!("doctest failed: {e}");
    }
}

/// [`doctest`] against a fresh Redis Cluster of 3 masters without replicas; the body gets
/// the nodes' URLs (seeds).
#[allow(clippy::expect_used)] // a doctest helper: failing loudly is its whole job
pub fn doctest_cluster<F, Fut>(body: F)
where
    F: FnOnce(Vec<String>) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    let cluster = RedisCluster::start(3, 0).expect("doctest needs redis-server");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(body(cluster.urls())) {
        panic!("doctest failed: {e}");
    }
}

/// [`doctest`] against a master with one replica behind 3 sentinels watching it as
/// `mymaster`; the body gets the sentinels' URLs.
#[allow(clippy::expect_used)] // a doctest helper: failing loudly is its whole job
pub fn doctest_sentinel<F, Fut>(body: F)
where
    F: FnOnce(Vec<String>) -> Fut,
    Fut: Future<Output = Result<(), BoxError>>,
{
    let set = RedisSentinels::start(1, 3).expect("doctest needs redis-server");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    if let Err(e) = rt.block_on(body(set.sentinel_urls())) {
        panic!("doctest failed: {e}");
    }
}

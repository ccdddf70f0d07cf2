//! Which server binary to run, and what it can do: its flavour and version (from
//! `--version`), and whether it was built with TLS (from a start that fails at once). The kit
//! passes each binary only the arguments it knows, and a test that needs a capability asks
//! for it with [`Capability`]: it then runs on a binary that has it, or fails saying which.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};

use crate::TestkitError;

/// What a test may need of the server binary beyond the basics every supported one has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Capability {
    /// Built with TLS (`rediss://`).
    Tls,
    /// `DEBUG` must be enabled by `--enable-debug-command` (Redis 7+, every Valkey), or is
    /// on by default (Redis 6).
    Debug,
    /// Sharded pub/sub (`SPUBLISH`, `SSUBSCRIBE`): Redis 7+, every Valkey.
    ShardedPubSub,
    /// `SET key value IFEQ old` and `DELIFEQ` / `DELEX … IFEQ`: Valkey 8.1+, Redis 8.4+.
    CompareAndSet,
}

/// The server's maker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flavour {
    /// Redis.
    Redis,
    /// Valkey.
    Valkey,
}

/// A server binary, probed once.
#[derive(Clone, Debug)]
pub struct ServerBinary {
    /// Its path.
    pub path: PathBuf,
    /// Redis or Valkey.
    pub flavour: Flavour,
    /// Its own version (`v=` of `--version`): for Valkey, Valkey's, not the Redis version it
    /// reports in `INFO`.
    pub version: (u32, u32, u32),
    /// Built with TLS.
    pub tls: bool,
}

impl ServerBinary {
    /// Probes `path`: runs `--version`, and a start with TLS settings that exits at once.
    pub fn probe(path: &Path) -> Result<ServerBinary, TestkitError> {
        static SEEN: OnceLock<Mutex<HashMap<PathBuf, ServerBinary>>> = OnceLock::new();
        let seen = SEEN.get_or_init(Default::default);
        if let Some(known) = seen.lock().ok().and_then(|m| m.get(path).cloned()) {
            return Ok(known);
        }
        let out = Command::new(path).arg("--version").output()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let flavour = if text.starts_with("Valkey") {
            Flavour::Valkey
        } else {
            Flavour::Redis
        };
        let version = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("v="))
            .and_then(parse_version)
            .ok_or_else(|| TestkitError::StartFailed {
                port: 0,
                reason: format!("{} --version said {text:?}", path.display()),
                log: String::new(),
            })?;
        let binary = ServerBinary {
            path: path.to_path_buf(),
            flavour,
            version,
            tls: has_tls(path)?,
        };
        if let Ok(mut m) = seen.lock() {
            m.insert(path.to_path_buf(), binary.clone());
        }
        Ok(binary)
    }

    /// Whether this binary has `capability`.
    pub fn has(&self, capability: Capability) -> bool {
        let (major, minor, _) = self.version;
        match capability {
            Capability::Tls => self.tls,
            Capability::Debug => true,
            Capability::ShardedPubSub => self.flavour == Flavour::Valkey || major >= 7,
            Capability::CompareAndSet => match self.flavour {
                Flavour::Valkey => (major, minor) >= (8, 1),
                Flavour::Redis => (major, minor) >= (8, 4),
            },
        }
    }

    /// Redis 7's commands and flags are there (every Valkey has them): `--enable-debug-command`
    /// (before it `DEBUG` is on anyway), `--cluster-port`, `CLUSTER ADDSLOTSRANGE`, and
    /// `CLUSTER MEET` with a bus port.
    pub(crate) fn redis7(&self) -> bool {
        self.flavour == Flavour::Valkey || self.version.0 >= 7
    }

    /// "Redis 7.0.15", "Valkey 9.1.2".
    pub fn describe(&self) -> String {
        let (a, b, c) = self.version;
        let name = match self.flavour {
            Flavour::Redis => "Redis",
            Flavour::Valkey => "Valkey",
        };
        format!("{name} {a}.{b}.{c}")
    }
}

fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// A build without TLS refuses `tls-port` (Redis 6: "Bad directive"; Valkey: "Failed finding
/// TLS support"); a build with it fails later, on the missing certificate. Either way the
/// process exits at once: nothing listens.
fn has_tls(path: &Path) -> Result<bool, TestkitError> {
    let port = crate::free_port()?.to_string();
    let out = Command::new(path)
        .args(["--port", "0", "--tls-port", &port])
        .args(["--tls-cert-file", "/nonexistent/fenced-probe.crt"])
        .args(["--tls-key-file", "/nonexistent/fenced-probe.key"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .stdin(Stdio::null())
        .output()?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(!said.contains("Bad directive")
        && !said.contains("Failed finding TLS support")
        && !said.contains("connection type tls"))
}

/// The binaries the kit may run, in order: `$FENCED_REDIS_SERVER`, then `redis-server` on
/// `PATH`, `/usr/bin/redis-server` and `/usr/sbin/redis-server`.
fn candidates() -> Vec<PathBuf> {
    let mut all = Vec::new();
    if let Some(p) = std::env::var_os("FENCED_REDIS_SERVER").filter(|p| !p.is_empty()) {
        all.push(PathBuf::from(p));
    }
    if let Some(paths) = std::env::var_os("PATH") {
        all.extend(
            std::env::split_paths(&paths)
                .map(|dir| dir.join("redis-server"))
                .filter(|p| p.is_file()),
        );
    }
    for p in ["/usr/bin/redis-server", "/usr/sbin/redis-server"] {
        let p = Path::new(p);
        if p.is_file() {
            all.push(p.to_path_buf());
        }
    }
    all
}

/// The binary to run for a test that needs `needs`: the first candidate (see
/// [`redis_server_binary`](crate::redis_server_binary)) that has every capability. A
/// `$FENCED_REDIS_SERVER` without one gives way to the default binary for that test; when no
/// candidate has it, the error says so.
pub fn server_binary(needs: &[Capability]) -> Result<ServerBinary, TestkitError> {
    let all = candidates();
    if all.is_empty() {
        return Err(TestkitError::NoBinary);
    }
    let mut lacking = Vec::new();
    for path in all {
        let binary = ServerBinary::probe(&path)?;
        if needs.iter().all(|c| binary.has(*c)) {
            return Ok(binary);
        }
        lacking.push(format!("{} ({})", path.display(), binary.describe()));
    }
    Err(TestkitError::Missing {
        capability: format!("{needs:?}"),
        binaries: lacking.join(", "),
    })
}

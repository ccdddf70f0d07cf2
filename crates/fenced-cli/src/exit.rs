//! Exit codes (sysexits) and the one error type every command returns.

use std::fmt;

/// The command ran (or the subcommand succeeded).
pub const OK: u8 = 0;
/// Bad arguments.
pub const USAGE: u8 = 64;
/// Redis could not be reached.
pub const UNAVAILABLE: u8 = 69;
/// Something unexpected inside `fenced`.
pub const SOFTWARE: u8 = 70;
/// sysexits' EX_CANTCREAT: an output file could not be written.
pub const CANT_CREATE: u8 = 73;
/// The lock was not acquired within `--wait` (or was held, with `--no-wait`).
pub const NOT_ACQUIRED: u8 = 75;
/// The lease was lost while the command ran.
pub const LEASE_LOST: u8 = 76;
/// The command could not be executed (as shells do).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells do).
pub const NOT_FOUND: u8 = 127;

/// A failure with its exit code and a one-line message for stderr.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Failure::new(USAGE, message)
    }

    /// Maps a library error; `redis` names the server for "unreachable" messages.
    pub fn from_lib(err: fenced::Error, redis: &str) -> Self {
        use fenced::Error as E;
        match err {
            E::InvalidArgument(msg) => Failure::usage(msg),
            E::NotAcquired { name, waited, .. } => Failure::new(
                NOT_ACQUIRED,
                format!(
                    "lock {name:?} is held by somebody else (gave up after {})",
                    show(waited)
                ),
            ),
            E::LeaseLost { name, .. } | E::NotHeld { name } => {
                Failure::new(LEASE_LOST, format!("the lease on lock {name:?} was lost"))
            }
            e @ (E::Unavailable { .. } | E::Timeout { .. }) => {
                Failure::new(UNAVAILABLE, format!("cannot reach Redis at {redis}: {e}"))
            }
            E::Redis(e) => Failure::new(UNAVAILABLE, format!("Redis at {redis} refused: {e}")),
            e @ E::Permission { .. } => {
                Failure::new(UNAVAILABLE, format!("Redis at {redis} refused: {e}"))
            }
            other => Failure::new(SOFTWARE, other.to_string()),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A duration for people: `1.5s`, `250ms`, `2m3s`.
pub fn show(d: std::time::Duration) -> String {
    if d < std::time::Duration::from_secs(1) {
        format!("{}ms", d.as_millis())
    } else if d < std::time::Duration::from_secs(60) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        let s = d.as_secs();
        format!("{}m{}s", s / 60, s % 60)
    }
}

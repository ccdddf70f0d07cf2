//! Exit codes (sysexits) and the one error type every command returns.

use std::fmt;

/// The command ran (or the subcommand succeeded).
pub const OK: u8 = 0;
/// sysexits' EX_USAGE: bad arguments.
pub const USAGE: u8 = 64;
/// sysexits' EX_DATAERR: data in Redis is not what fenced expects (a key of another type).
pub const DATA: u8 = 65;
/// sysexits' EX_UNAVAILABLE: Redis could not be reached, no quorum of masters agreed, or
/// too few replicas acknowledged.
pub const UNAVAILABLE: u8 = 69;
/// sysexits' EX_SOFTWARE: something unexpected inside `fenced` (or an answer it does not
/// understand).
pub const SOFTWARE: u8 = 70;
/// sysexits' EX_CANTCREAT: an output file could not be written.
pub const CANT_CREATE: u8 = 73;
/// sysexits' EX_TEMPFAIL: the lock was not acquired within `--wait` (or was held, with
/// `--no-wait`).
pub const NOT_ACQUIRED: u8 = 75;
/// The lease was lost while the command ran (sysexits' EX_PROTOCOL, taken for this).
pub const LEASE_LOST: u8 = 76;
/// sysexits' EX_NOPERM: the Redis user may not run a command fenced needs.
pub const NO_PERMISSION: u8 = 77;
/// sysexits' EX_CONFIG: the deployment cannot do what was asked (a primitive on a backend
/// that does not support it), or `fenced doctor` found a setting that breaks a guarantee.
pub const CONFIG: u8 = 78;
/// The command ran past `--max-hold` and was stopped (as `timeout(1)` exits).
pub const MAX_HOLD: u8 = 124;
/// The command could not be executed (as shells do).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (as shells do).
pub const NOT_FOUND: u8 = 127;

/// Every exit code and what it means: `--help`, the man page and the README show this table,
/// and a test checks that the README's copy and [`Failure::from_lib`] agree with it.
pub const TABLE: &[(&str, &str)] = &[
    (
        "N",
        "the command's own exit code (128+N when signal N ended it; 127 not found, 126 not executable)",
    ),
    (
        "64",
        "bad arguments (one line on stderr says what is wrong)",
    ),
    (
        "65",
        "a stale or spent ticket, or a key in Redis holds data of another type (WRONGTYPE): the key is named; `fenced list` lists the rest first",
    ),
    (
        "69",
        "Redis unreachable within --timeout or refusing writes (OOM, MISCONF), no quorum of Redlock masters, or too few replicas acknowledged",
    ),
    (
        "70",
        "an internal error, or a reply fenced does not understand",
    ),
    ("73", "an output file could not be written"),
    (
        "75",
        "not acquired (or not elected) within --wait (or held, with --no-wait); a latch not open in time; no leader (`fenced leader`)",
    ),
    (
        "76",
        "the lease (or leadership) was lost while the command ran (SIGTERM, then SIGKILL after --kill-after)",
    ),
    (
        "77",
        "authentication failed (a wrong or missing password), or the Redis user lacks a permission fenced needs (the command is named)",
    ),
    (
        "78",
        "this deployment does not support what was asked (a primitive that needs Lua where scripts are refused, say); `fenced doctor`: a server setting breaks a guarantee (a server that may evict lock keys)",
    ),
    (
        "124",
        "the command ran past --max-hold: it was stopped (SIGTERM, then SIGKILL after --kill-after) and the lock released (with --hand-off, left to the ticket's holder)",
    ),
];

/// [`TABLE`] as `--help` and the man page show it.
pub fn help_table() -> String {
    let mut text = String::from("Exit codes:");
    for (code, meaning) in TABLE {
        text.push_str(&format!("\n  {code:<4} {meaning}"));
    }
    text
}

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
        let code = code_of(&err);
        use fenced::Error as E;
        let message = match err {
            E::InvalidArgument(msg) | E::Unsupported(msg) => msg,
            E::LeaseLost { name, .. } | E::LeaseEnded { name, .. } | E::NotHeld { name } => {
                format!("the lease on lock {name:?} was lost")
            }
            E::Redis(e) | E::Unavailable { source: e } if is_not_resp(&e) => {
                format!(
                    "the server at {redis} does not speak the Redis protocol; check the host and port"
                )
            }
            e @ (E::Unavailable { .. } | E::Timeout { .. }) => {
                format!("cannot reach Redis at {redis}: {e}")
            }
            E::Redis(e) if is_authentication(&e) => {
                format!("authentication failed at Redis {redis}: {e}")
            }
            e @ (E::Redis(_) | E::Permission { .. }) => format!("Redis at {redis} refused: {e}"),
            E::WrongType { key, .. } => wrong_type(&key),
            other => other.to_string(),
        };
        Failure::new(code, message)
    }
}

/// The exit code of a library error (the table in [`TABLE`]).
pub fn code_of(err: &fenced::Error) -> u8 {
    use fenced::Error as E;
    match err {
        E::InvalidArgument(_) | E::WouldDeadlock(_) => USAGE,
        E::Unsupported(_) => CONFIG,
        E::NotAcquired { .. } | E::Conflict { .. } => NOT_ACQUIRED,
        E::LeaseLost { .. } | E::LeaseEnded { .. } | E::NotHeld { .. } => LEASE_LOST,
        E::Unavailable { .. }
        | E::Timeout { .. }
        | E::NoQuorum { .. }
        | E::NotReplicated { .. } => UNAVAILABLE,
        E::Permission { .. } => NO_PERMISSION,
        E::Redis(e) if is_authentication(e) => NO_PERMISSION,
        E::WrongType { .. } => DATA,
        // The code where the server gives one; Redis 6 wraps an error inside a script in
        // `ERR Error running script …: WRONGTYPE …`.
        E::Redis(e) if e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE") => DATA,
        E::Redis(_) => UNAVAILABLE,
        E::UnexpectedReply { .. } => SOFTWARE,
        // A variant added later: said as it is, as an internal error until mapped here.
        _ => SOFTWARE,
    }
}

/// A reply that is not the Redis protocol (RESP) at all: the server there is another one, a
/// web server say. (Not a reply of an unexpected type, which the client calls a parse error
/// too, but without the wire parser's words.)
fn is_not_resp(e: &fenced::redis::RedisError) -> bool {
    e.kind() == fenced::redis::ErrorKind::Parse && e.to_string().contains("Parse error")
}

/// A key of another type than fenced keeps there, with the fix: `release --force --force`
/// deletes a lock's own keys (the lock and its holds), which are named after the lock.
pub fn wrong_type(key: &str) -> String {
    let name = key
        .split_once('{')
        .and_then(|(_, rest)| rest.split_once('}'))
        .filter(|(_, suffix)| suffix.is_empty() || *suffix == ":holds")
        .map(|(name, _)| name);
    let fix = match name {
        Some(name) => format!("delete it (fenced release {name} --force --force)"),
        None => "delete it".to_owned(),
    };
    format!(
        "the key {key:?} holds another program's data (WRONGTYPE): {fix}, or use another name or --namespace"
    )
}

/// A wrong or missing password: `WRONGPASS`, `NOAUTH`, or the client's own word for a failed
/// `AUTH`.
fn is_authentication(e: &fenced::redis::RedisError) -> bool {
    e.kind() == fenced::redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use fenced::Error;
    use std::time::Duration;

    fn io() -> fenced::redis::RedisError {
        fenced::redis::RedisError::from(std::io::Error::other("refused"))
    }

    /// A server's error reply, as the client parses it off the wire.
    fn server(text: &str) -> fenced::redis::RedisError {
        let wire = format!("-{text}\r\n");
        match fenced::redis::parse_redis_value(wire.as_bytes()).and_then(|v| v.extract_error()) {
            Err(e) => e,
            Ok(v) => panic!("not an error: {v:?}"),
        }
    }

    /// Every variant has its code, each code is in the table, and the NoQuorum line says
    /// "quorum".
    #[test]
    fn every_error_has_the_code_the_table_gives() {
        let token = fenced::FencingToken::new(1);
        let cases: Vec<(Error, u8)> = vec![
            (Error::InvalidArgument("x".into()), 64),
            (Error::WouldDeadlock("x".into()), 64),
            (Error::Unsupported("x".into()), 78),
            (
                Error::NotAcquired {
                    what: fenced::Awaited::Lock,
                    name: "n".into(),
                    waited: Duration::ZERO,
                    attempts: 1,
                },
                75,
            ),
            (
                Error::Conflict {
                    attempts: 3,
                    waited: Duration::ZERO,
                },
                75,
            ),
            (Error::NotHeld { name: "n".into() }, 76),
            (
                Error::LeaseLost {
                    name: "n".into(),
                    fencing_token: token,
                    cause: None,
                },
                76,
            ),
            (
                Error::LeaseEnded {
                    name: "n".into(),
                    fencing_token: token,
                },
                76,
            ),
            (Error::Unavailable { source: io() }, 69),
            (
                Error::Timeout {
                    operation: "acquire",
                    after: Duration::ZERO,
                },
                69,
            ),
            (
                Error::NoQuorum {
                    granted: 2,
                    needed: 3,
                    nodes: 5,
                },
                69,
            ),
            (
                Error::NotReplicated {
                    operation: "acquire",
                    acked: 0,
                    needed: 1,
                },
                69,
            ),
            (
                Error::Permission {
                    command: "set".into(),
                    operation: "acquire",
                    detail: String::new(),
                },
                77,
            ),
            (
                Error::Redis(server("WRONGTYPE Operation against a key")),
                65,
            ),
            (Error::Redis(server("ERR something else")), 69),
            (
                Error::WrongType {
                    key: "fenced:{n}".into(),
                    operation: "acquire",
                },
                65,
            ),
            (
                Error::UnexpectedReply {
                    script: "acquire",
                    detail: String::new(),
                },
                70,
            ),
        ];
        let codes: Vec<&str> = TABLE.iter().map(|(c, _)| *c).collect();
        for (err, want) in cases {
            let shown = err.to_string();
            let got = Failure::from_lib(err, "redis://127.0.0.1:1");
            assert_eq!(got.code, want, "{shown}");
            assert!(
                codes.contains(&want.to_string().as_str()),
                "{want} is not in the table"
            );
            assert_eq!(got.message.lines().count(), 1, "{}", got.message);
            if shown.contains("Redis nodes agreed") {
                assert!(got.message.contains("quorum"), "{}", got.message);
            }
        }
    }

    /// The README's exit-code table is this one.
    #[test]
    fn the_readme_shows_this_table() {
        let readme = include_str!("../../../README.md");
        for (code, meaning) in TABLE {
            let row = format!("| {code} | {meaning} |");
            assert!(readme.contains(&row), "the README lacks the row {row}");
        }
    }
}

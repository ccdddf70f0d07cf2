//! What `fenced run` holds while CMD runs: a reentrant lock (entered afresh, or re-entered
//! through the holder a parent `fenced run` passed down), a semaphore's permit, or a read or
//! write lease of a read-write lock; and how it waits for it, showing progress.

use std::io::IsTerminal;
use std::time::Duration;

use fenced::{
    Client, FencingToken, LockGuard, ReadGuard, ReentrantGuard, SemaphorePermit, UnfencedGuard,
    WaitPolicy, WriteGuard,
};
use futures_util::FutureExt;
use futures_util::future::BoxFuture;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;

use crate::args::{Global, LeaseFlags, RunArgs};
use crate::cmd::address;
use crate::exit::{self, Failure, show};

/// The environment variable that carries the locks held by enclosing `fenced run`s to the
/// commands they start: `<hex server>.<hex namespace>.<hex name>=<holder secret>`,
/// comma-separated, where the server is the Redis URL without credentials. Its secrets let
/// the child act as the holder, as the child of a lock holder may; like everything in the
/// environment, processes of the same user can read them in `/proc/<pid>/environ`.
pub const HOLDS_VAR: &str = "FENCED_HOLDS";

/// `--min-hold`, `--heartbeat-timeout` and `--lock-delay` on any primitive's handle.
pub trait Terms: Sized {
    fn terms_of(self, min_hold: Option<Duration>, lease: &LeaseFlags) -> Self;
}

macro_rules! terms_of {
    ($($handle:ty),+) => {$(
        impl Terms for $handle {
            fn terms_of(self, min_hold: Option<Duration>, lease: &LeaseFlags) -> Self {
                let mut handle = self;
                if let Some(min) = min_hold {
                    handle = handle.with_min_hold(min);
                }
                // The file's age is read by `run_held`, which reports each touch as a beat.
                if let Some(silence) = lease.heartbeat_timeout {
                    handle = handle.with_heartbeat(silence);
                }
                if let Some(delay) = lease.lock_delay {
                    handle = handle.with_lock_delay(delay);
                }
                handle
            }
        }
    )+};
}

terms_of!(
    fenced::Lock,
    fenced::ReentrantLock,
    fenced::FairLock,
    fenced::RwLock,
    fenced::Semaphore,
    fenced::Election
);

/// `--heartbeat-timeout` and `--lock-delay` in range, checked before anything is sent.
pub fn check_lease_flags(lease: &LeaseFlags) -> Result<(), Failure> {
    let max = fenced::limits::MAX_TTL;
    if let Some(timeout) = lease.heartbeat_timeout
        && (timeout.is_zero() || timeout > max)
    {
        return Err(Failure::usage(format!(
            "--heartbeat-timeout {} is out of range: more than zero, at most {}",
            show(timeout),
            show(max)
        )));
    }
    if let Some(delay) = lease.lock_delay
        && delay > max
    {
        return Err(Failure::usage(format!(
            "--lock-delay {} is above the maximum of {}",
            show(delay),
            show(max)
        )));
    }
    Ok(())
}

/// The lock or permit held while CMD runs.
pub enum Hold {
    Lock(ReentrantGuard),
    Permits(SemaphorePermit),
    Read(ReadGuard),
    Write(WriteGuard),
    Fair(LockGuard),
    /// A plain (not re-entrant) lock: Redlock over several masters runs no re-entrant one.
    Plain(LockGuard),
    /// An unfenced lock (`--unfenced`): no fencing token, not re-entrant.
    Unfenced(UnfencedGuard),
    /// A won election (`fenced elect`): its term is the fencing token.
    Leader(Box<fenced::Leadership>),
    /// Handed to CMD's ticket at once (`--hand-off`): held by whoever resumes the ticket, or
    /// by nobody until it runs out; this run neither renews nor releases it.
    HandedOff {
        /// The grant's fencing token (none for an unfenced lock).
        token: Option<FencingToken>,
        /// Never cancelled: a handed-off lease is not this run's to lose.
        never: tokio_util::sync::CancellationToken,
    },
}

impl Hold {
    /// The grant's fencing token; `None` for an unfenced lock, which has none.
    pub fn fencing_token(&self) -> Option<FencingToken> {
        Some(match self {
            Hold::Lock(g) => g.fencing_token(),
            Hold::Permits(p) => p.fencing_token(),
            Hold::Read(r) => r.fencing_token(),
            Hold::Write(w) => w.fencing_token(),
            Hold::Fair(g) | Hold::Plain(g) => g.fencing_token(),
            Hold::Leader(l) => l.term(),
            Hold::Unfenced(_) => return None,
            Hold::HandedOff { token, .. } => return *token,
        })
    }

    pub fn lost(&self) -> WaitForCancellationFutureOwned {
        match self {
            Hold::Lock(g) => g.lost(),
            Hold::Permits(p) => p.lost(),
            Hold::Read(r) => r.lost(),
            Hold::Write(w) => w.lost(),
            Hold::Fair(g) | Hold::Plain(g) => g.lost(),
            Hold::Unfenced(g) => g.lost(),
            Hold::Leader(l) => l.lost(),
            Hold::HandedOff { never, .. } => never.clone().cancelled_owned(),
        }
    }

    /// For `--hand-off`: hands the lease to a ticket for CMD to pass on, at once. From then on
    /// whoever resumes the ticket holds it (one taker: a ticket is taken over once), or
    /// nobody until it runs out; this run neither renews nor releases it, so the lease never
    /// has two holders.
    /// `None` (and the hold as it was) for a kind that is not handed off.
    pub fn into_ticket(self) -> (Hold, Option<String>) {
        let token = self.fencing_token();
        let ticket = match self {
            Hold::Plain(g) | Hold::Fair(g) => g.into_ticket(),
            Hold::Unfenced(g) => g.into_ticket(),
            other => return (other, None),
        };
        let handed = Hold::HandedOff {
            token,
            never: tokio_util::sync::CancellationToken::new(),
        };
        (handed, Some(ticket))
    }

    /// The lease's view, for its heartbeat and the cause of its loss; `None` once handed off.
    pub fn lease(&self) -> Option<fenced::Lease> {
        Some(match self {
            Hold::Lock(g) => g.lease(),
            Hold::Permits(p) => p.lease(),
            Hold::Read(r) => r.lease(),
            Hold::Write(w) => w.lease(),
            Hold::Fair(g) | Hold::Plain(g) => g.lease(),
            Hold::Unfenced(g) => g.lease(),
            Hold::Leader(l) => l.lease(),
            Hold::HandedOff { .. } => return None,
        })
    }

    pub fn is_lost(&self) -> bool {
        match self {
            Hold::Lock(g) => g.is_lost(),
            Hold::Permits(p) => p.is_lost(),
            Hold::Read(r) => r.is_lost(),
            Hold::Write(w) => w.is_lost(),
            Hold::Fair(g) | Hold::Plain(g) => g.is_lost(),
            Hold::Unfenced(g) => g.is_lost(),
            Hold::Leader(l) => l.is_lost(),
            Hold::HandedOff { .. } => false,
        }
    }

    pub async fn release(self) -> fenced::Result<()> {
        match self {
            Hold::Lock(g) => g.release().await,
            Hold::Permits(p) => p.release().await,
            Hold::Read(r) => r.release().await,
            Hold::Write(w) => w.release().await,
            Hold::Fair(g) | Hold::Plain(g) => g.release().await,
            Hold::Unfenced(g) => g.release().await,
            Hold::Leader(l) => l.resign().await,
            // Not this run's to release.
            Hold::HandedOff { .. } => Ok(()),
        }
    }

    /// `FENCED_HOLDS` for CMD: the inherited entries, plus this lock's (permits are not
    /// re-entrant).
    pub fn holds_for_children(&self, global: &Global) -> String {
        let mut entries: Vec<String> = inherited().collect();
        if let Hold::Lock(g) = self {
            let key = entry_key(global, g.name());
            entries.retain(|e| !e.starts_with(&format!("{key}=")));
            entries.push(format!("{key}={}", g.holder().secret()));
        }
        entries.join(",")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Which lock an entry is for: the server (URL without credentials), namespace and name. A
/// run against another server or namespace does not re-enter.
fn entry_key(global: &Global, name: &str) -> String {
    let url = global.redis_url();
    let server = match url.split_once("://") {
        Some((scheme, rest)) => format!(
            "{scheme}://{}",
            rest.rsplit_once('@').map_or(rest, |(_, r)| r)
        ),
        None => url.to_owned(),
    };
    format!(
        "{}.{}.{}",
        hex(server.as_bytes()),
        hex(global.namespace.as_bytes()),
        hex(name.as_bytes())
    )
}

fn inherited() -> impl Iterator<Item = String> {
    std::env::var(HOLDS_VAR)
        .unwrap_or_default()
        .split(',')
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect::<Vec<_>>()
        .into_iter()
}

/// The secret an enclosing `fenced run` passed down for this lock, if any.
fn inherited_secret(global: &Global, name: &str) -> Option<String> {
    let prefix = format!("{}=", entry_key(global, name));
    inherited().find_map(|e| e.strip_prefix(&prefix).map(str::to_owned))
}

/// Takes what `args` asks for: permits, a re-entry under an enclosing run, or the lock.
pub async fn acquire(
    client: &Client,
    global: &Global,
    args: &RunArgs,
    policy: WaitPolicy,
) -> Result<Hold, Failure> {
    let server = address(global.redis_url());
    let fail = |e: fenced::Error| Failure::from_lib(e, &server);
    if let Some(ticket) = &args.ticket {
        // Checked before the lease is touched: a resumed ticket cannot be resumed again.
        if let Some(name) = crate::cmd::ticket::name_of(ticket)
            && name != args.name
        {
            return Err(Failure::usage(format!(
                "the ticket is for {name:?}, not {:?}",
                args.name
            )));
        }
        return Ok(
            match crate::cmd::ticket::resume(client, global, ticket).await? {
                crate::cmd::ticket::Resumed::Lock(g) => Hold::Plain(g),
                crate::cmd::ticket::Resumed::Unfenced(g) => Hold::Unfenced(g),
            },
        );
    }
    if let Some(n) = args.permits {
        let pool = client
            .semaphore(args.name.clone(), n)
            .with_ttl(args.ttl)
            .terms_of(args.min_hold, &args.lease)
            .with_wait(policy);
        let lookup = || {
            let pool = pool.clone();
            async move {
                pool.status().await.map(|s| {
                    format!(
                        "{} of {} permits held by {} holder(s)",
                        s.held,
                        pool.permits(),
                        s.holders
                    )
                })
            }
            .boxed()
        };
        let permit = showing_progress(&args.name, pool.acquire(), lookup, global.verbose).await;
        return permit.map(Hold::Permits).map_err(fail);
    }
    if args.fair {
        let fair = client
            .fair_lock(args.name.clone())
            .with_ttl(args.ttl)
            .terms_of(args.min_hold, &args.lease)
            .with_wait(policy);
        let lookup = || {
            let fair = fair.clone();
            async move {
                fair.queued()
                    .await
                    .map(|n| format!("somebody ({n} queued)"))
            }
            .boxed()
        };
        let guard = showing_progress(&args.name, fair.acquire(), lookup, global.verbose).await;
        return guard.map(Hold::Fair).map_err(fail);
    }
    if args.read || args.write {
        let rw = client
            .rw_lock(args.name.clone())
            .with_ttl(args.ttl)
            .terms_of(args.min_hold, &args.lease)
            .with_wait(policy);
        let plain = client.lock(args.name.clone());
        let lookup = || {
            let plain = plain.clone();
            async move {
                plain.status().await.map(|status| match status.holder {
                    Some(h) => format!("the writer {}", h.owner_prefix),
                    None => "readers, or a waiting writer".to_owned(),
                })
            }
            .boxed()
        };
        return if args.read {
            let read = showing_progress(&args.name, rw.read(), lookup, global.verbose).await;
            read.map(Hold::Read).map_err(fail)
        } else {
            let write = showing_progress(&args.name, rw.write(), lookup, global.verbose).await;
            write.map(Hold::Write).map_err(fail)
        };
    }
    if args.unfenced {
        let unfenced = client
            .lock(args.name.clone())
            .with_ttl(args.ttl)
            .terms_of(args.min_hold, &args.lease)
            .with_wait(policy)
            .unfenced();
        let plain = client.lock(args.name.clone());
        let lookup = || {
            let plain = plain.clone();
            async move {
                plain.status().await.map(|status| match status.holder {
                    Some(h) => h.owner_prefix,
                    None => "somebody".to_owned(),
                })
            }
            .boxed()
        };
        let guard = showing_progress(&args.name, unfenced.acquire(), lookup, global.verbose).await;
        return guard.map(Hold::Unfenced).map_err(fail);
    }
    let inherited = inherited_secret(global, &args.name);
    if global.redis.len() > 1
        || args.hand_off
        || (args.min_hold.is_some() && inherited.is_none())
        || (global.no_scripts && inherited.is_none())
    {
        // Redlock (several --redis), a lease to hand off by ticket, a minimum hold (a
        // re-entrant release never shortens the lease, so the name would stay taken for the
        // whole ttl), or no scripts (a re-entrant lock needs them): a plain lock, on Redlock
        // granted by a majority with a quorum fencing token. A `fenced run` started under CMD
        // waits for it like anybody else.
        return plain_lock(client, global, args, policy).await;
    }
    let lock = client
        .reentrant_lock(args.name.clone())
        .with_ttl(args.ttl)
        .terms_of(args.min_hold, &args.lease)
        .with_wait(policy);
    if let Some(secret) = inherited {
        // Started under a `fenced run` that holds this lock: enter its hold, never wait for it.
        let handle = lock
            .holder_from_secret(&secret)
            .map_err(|e| Failure::usage(format!("{HOLDS_VAR} is malformed: {e}")))?;
        // A connection blip is ridden out within the wait (each try has a hold id of its own,
        // so one that timed out is given back by itself), as a first acquire would.
        let give_up = Instant::now()
            + policy
                .deadline()
                .unwrap_or(global.timeout * 5)
                .min(Duration::from_secs(3600));
        let mut reentered = lock.reenter(&handle).await;
        while matches!(&reentered, Err(e) if e.is_transient())
            && !args.no_wait
            && Instant::now() < give_up
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            reentered = lock.reenter(&handle).await;
        }
        return match reentered {
            Ok(g) => Ok(Hold::Lock(g)),
            Err(fenced::Error::NotHeld { .. }) => Err(Failure::new(
                exit::LEASE_LOST,
                format!(
                    "the enclosing `fenced run` no longer holds {:?} (its lease was lost or released)",
                    args.name
                ),
            )),
            Err(e) => Err(fail(e)),
        };
    }
    let plain = client.lock(args.name.clone());
    let lookup = || {
        let plain = plain.clone();
        async move {
            plain.status().await.map(|status| match status.holder {
                Some(h) => match h.ttl_left {
                    Some(ttl) => format!("{} ({} left)", h.owner_prefix, show(ttl)),
                    None => format!("{} (no expiry)", h.owner_prefix),
                },
                None => "somebody".to_owned(),
            })
        }
        .boxed()
    };
    let guard = showing_progress(&args.name, lock.acquire(), lookup, global.verbose).await;
    match guard {
        Ok(g) => Ok(Hold::Lock(g)),
        // The server refuses scripts (learned from this refusal, which sent nothing else):
        // a plain lock, as with --no-scripts, said once since a `fenced run` of this name
        // under CMD now waits for it instead of entering it.
        Err(fenced::Error::Unsupported(why)) if why.contains("script") => {
            eprintln!(
                "fenced: the server refuses scripts; holding {:?} as a plain lock (a fenced run of the same name under the command would wait for it)",
                args.name
            );
            plain_lock(client, global, args, policy).await
        }
        Err(e) => Err(fail(e)),
    }
}

/// A plain lock on the name, for as long as the command runs.
async fn plain_lock(
    client: &Client,
    global: &Global,
    args: &RunArgs,
    policy: WaitPolicy,
) -> Result<Hold, Failure> {
    let plain = client
        .lock(args.name.clone())
        .with_ttl(args.ttl)
        .terms_of(args.min_hold, &args.lease)
        .with_wait(policy);
    let lookup = || async { Ok("somebody".to_owned()) }.boxed();
    let guard = showing_progress(&args.name, plain.acquire(), lookup, global.verbose).await;
    guard
        .map(Hold::Plain)
        .map_err(|e| Failure::from_lib(e, &address(global.redis_url())))
}

/// Awaits `acquire`; on a terminal, shows a spinner (indicatif) with the holder and the time
/// waited; with `-v` elsewhere, says once that it waits. Silent when stderr is not a terminal.
async fn showing_progress<'a, T>(
    name: &str,
    acquire: impl Future<Output = fenced::Result<T>>,
    holder: impl Fn() -> BoxFuture<'a, fenced::Result<String>>,
    verbose: bool,
) -> fenced::Result<T> {
    let terminal = std::io::stderr().is_terminal();
    if !terminal && !verbose {
        return acquire.await;
    }
    let started = Instant::now();
    tokio::pin!(acquire);
    // Only a wait longer than this shows progress.
    let mut tick = tokio::time::interval_at(
        started + Duration::from_millis(200),
        Duration::from_millis(100),
    );
    let mut held_by = String::from("somebody");
    let mut last_lookup = None::<Instant>;
    // The holder is looked up beside the acquire, never instead of polling it: a lease granted
    // meanwhile is tracked and renewed at once.
    let mut lookup: Option<BoxFuture<'a, fenced::Result<String>>> = None;
    let mut spinner: Option<ProgressBar> = None;
    let mut said = false;
    loop {
        tokio::select! {
            biased;
            result = &mut acquire => {
                if let Some(bar) = spinner {
                    bar.finish_and_clear();
                }
                return result;
            }
            found = poll_opt(&mut lookup) => {
                lookup = None;
                if let Ok(found) = found {
                    held_by = found;
                }
            }
            _ = tick.tick() => {
                if lookup.is_none() && last_lookup.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    last_lookup = Some(Instant::now());
                    lookup = Some(holder());
                }
                let message = format!("waiting for {name:?}, held by {held_by}; waited {}", show(started.elapsed()));
                if terminal {
                    let bar = spinner.get_or_insert_with(|| {
                        // The draw target hides itself when stderr is not a terminal.
                        ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
                            .with_style(ProgressStyle::with_template("{spinner} {msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()))
                    });
                    bar.set_message(message);
                    bar.tick();
                } else if !said {
                    warn!("fenced: waiting for {name:?}, held by {held_by}");
                    said = true;
                }
            }
        }
    }
}

async fn poll_opt<T>(fut: &mut Option<BoxFuture<'_, T>>) -> T {
    match fut {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_entries_are_keyed_by_server_namespace_and_name_in_hex() {
        use clap::Parser;
        let cli = crate::args::Cli::parse_from([
            "fenced",
            "--redis",
            "redis://u:pw@h:1/2",
            "--namespace",
            "ns:",
            "status",
            "x",
        ]);
        let key = entry_key(&cli.global, "a,b=c");
        assert_eq!(key, format!("{}.6e733a.612c623d63", hex(b"redis://h:1/2")));
        assert!(
            !key.contains(&hex(b"pw")),
            "no credentials in the environment"
        );
    }
}

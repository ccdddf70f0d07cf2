//! `fenced run NAME -- CMD`: hold a lock (or a semaphore's permit) while a program runs.
//!
//! Order of events: check arguments (64) → connect (69) → acquire, waiting by `--wait`
//! (75; a signal here aborts the wait) → start the supervisor (`supervise.rs`), which starts
//! CMD with FENCED_TOKEN and FENCED_NAME → while it runs, forward signals to it and watch the
//! lease → if the lease is lost: the supervisor sends SIGTERM to everything CMD started, then
//! SIGKILL after `--kill-after`, and we exit 76 → when CMD exits (and what it left behind has
//! been stopped): release, exit with its code. Every exit path after the acquire releases the
//! lock (or hands the release to the client's background clean-up, which `flush` waits for).
//! If `fenced` itself is killed, the supervisor SIGKILLs the whole subtree at once.
//!
//! With `--heartbeat-file`, a task reads the file's modification time every quarter of
//! `--heartbeat-timeout` (at most every second) and reports it to the lease as a beat: the
//! library renews the lease only while the last beat is younger than the timeout, and fires
//! its lost signal (76 here, as any loss) when a renewal falls due after that.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use fenced::{Client, WaitPolicy};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::json;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::args::{Global, LeaseFlags, RunArgs};
use crate::cmd::hold::{self, Hold};
use crate::cmd::supervise;
use crate::cmd::{check_name, check_url, connect, connect_until};
use crate::exit::{self, Failure, show};

/// `fenced run`; with `--json`, also one JSON line on stderr when the lock is taken and one
/// when `fenced` ends (stdout is CMD's).
pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, Failure> {
    let outcome = run_command(global, args).await;
    if global.json {
        let line = match &outcome {
            Ok(code) => json!({
                "event": "exited",
                "name": args.name,
                "code": code,
                "lease_lost": *code == exit::LEASE_LOST,
            }),
            Err(failure) => json!({
                "event": "failed",
                "name": args.name,
                "code": failure.code,
                "message": failure.message,
            }),
        };
        warn!("{line}");
    }
    outcome
}

async fn run_command(global: &Global, args: &RunArgs) -> Result<u8, Failure> {
    check_name(&args.name)?;
    check_url(global.redis_url())?;
    fenced::check_ttl(args.ttl).map_err(|e| Failure::from_lib(e, ""))?;
    for (flag, hold) in [("--min-hold", args.min_hold), ("--max-hold", args.max_hold)] {
        if let Some(hold) = hold
            && (hold.is_zero() || hold > fenced::limits::MAX_TTL)
        {
            return Err(Failure::usage(format!(
                "{flag} {} is out of range: more than zero, at most {}",
                show(hold),
                show(fenced::limits::MAX_TTL)
            )));
        }
    }
    if let (Some(min), Some(max)) = (args.min_hold, args.max_hold)
        && min > max
    {
        return Err(Failure::usage(format!(
            "--min-hold {} is longer than --max-hold {}",
            show(min),
            show(max)
        )));
    }
    hold::check_lease_flags(&args.lease)?;
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(Failure::usage("no command given after `--`"));
    };
    let mut signals = Signals::new()?;
    let asked = Instant::now();
    // With --wait, a Redis that is down or not answering yet is waited for within it, and
    // the wait for the lock gets what is left; without, it fails at once (69).
    let deadline = args.wait.map(|w| asked + w);
    let client = match deadline {
        Some(deadline) if !args.no_wait => tokio::select! {
            result = connect_until(global, deadline) => result?,
            sig = signals.next() => return Ok(128 + sig as u8),
        },
        _ => connect(global).await?,
    };
    let policy = if args.no_wait {
        WaitPolicy::FOREVER.with_max_attempts(1)
    } else {
        deadline.map_or(WaitPolicy::FOREVER, |d| {
            WaitPolicy::up_to(
                d.saturating_duration_since(Instant::now())
                    .max(std::time::Duration::from_millis(1)),
            )
        })
    };
    let acquired = tokio::select! {
        result = hold::acquire(&client, global, args, policy) => result,
        sig = signals.next() => {
            // Interrupted while waiting: any attempt in flight is abandoned in the background.
            client.flush().await;
            return Ok(128 + sig as u8);
        }
    };
    let guard = match acquired {
        Ok(g) => g,
        Err(failure) => {
            client.flush().await;
            return Err(failure);
        }
    };
    // `--hand-off`: the lease goes to a ticket for CMD to pass on, now.
    let (guard, ticket) = if args.hand_off {
        match guard.into_ticket() {
            (guard, Some(ticket)) => (guard, Some(ticket)),
            (guard, None) => {
                release(&client, guard, global).await;
                return Err(Failure::new(
                    exit::SOFTWARE,
                    "only a lock, a fair lock or an unfenced lock is handed off",
                ));
            }
        }
    } else {
        (guard, None)
    };
    let under = Under {
        name: &args.name,
        program,
        program_args,
        kill_after: args.kill_after,
        max_hold: args.max_hold,
        heartbeat: heartbeat_of(&args.lease),
        hand_off: args.hand_off,
        ticket: ticket.as_deref(),
        env: Vec::new(),
        announced: false,
    };
    run_held(global, &client, guard, &under, &mut signals, asked).await
}

/// What runs under a held lease, and how.
pub struct Under<'a> {
    /// The lock's (or election's) name: FENCED_NAME.
    pub name: &'a str,
    pub program: &'a std::ffi::OsString,
    pub program_args: &'a [std::ffi::OsString],
    /// SIGTERM to SIGKILL, after the lease is lost.
    pub kill_after: std::time::Duration,
    /// `--max-hold`.
    pub max_hold: Option<std::time::Duration>,
    /// `--heartbeat-file` and `--heartbeat-timeout`: the lease is renewed only while the
    /// file is younger than the timeout (the handle was given it `with_heartbeat`).
    pub heartbeat: Option<(&'a std::path::Path, std::time::Duration)>,
    /// `--hand-off`: the lease is a ticket's, not this run's to release.
    pub hand_off: bool,
    /// FENCED_TICKET for CMD.
    pub ticket: Option<&'a str>,
    /// More variables for CMD's environment.
    pub env: Vec<(&'static str, String)>,
    /// The grant was announced already (`--json`, `--verbose`) by the caller, in its words.
    pub announced: bool,
}

/// Runs CMD under `guard` (acquired `asked` ago): starts the supervisor, stops CMD if the
/// lease is lost (76), releases when it ends and exits with its code.
pub async fn run_held(
    global: &Global,
    client: &Client,
    guard: Hold,
    under: &Under<'_>,
    signals: &mut Signals,
    asked: Instant,
) -> Result<u8, Failure> {
    let args = under;
    let (program, program_args) = (under.program, under.program_args);
    let ticket = under.ticket;
    let token = guard.fencing_token();
    if global.json && !under.announced {
        warn!(
            "{}",
            json!({
                "event": "acquired",
                "name": args.name,
                "fencing_token": token.map(|t| t.get()),
                "waited_ms": asked.elapsed().as_millis() as u64,
            })
        );
    }
    if global.verbose && !under.announced {
        let with = token.map_or_else(
            || "unfenced".to_owned(),
            |t| format!("with fencing token {t}"),
        );
        warn!(
            "fenced: acquired {:?} {with} after {}",
            args.name,
            show(asked.elapsed())
        );
    }

    // The supervisor (and CMD under it) stays in fenced's process group, as with flock(1):
    // whoever stops fenced's group (a terminal's Ctrl-Z, a CI runner's timeout) stops CMD too.
    // It is started from this, the main thread (`run` is awaited by `block_on` in `main`):
    // its parent-death signal follows the thread that forked it.
    let terminal = in_terminal_foreground();
    // Should the supervisor itself be killed, what it started is re-parented to us, not to
    // init, and is stopped below.
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        release(client, guard, global).await;
        return Err(Failure::new(
            exit::SOFTWARE,
            format!("cannot become a subreaper: {e}"),
        ));
    }
    let mut command = Command::new("/proc/self/exe");
    command
        .arg0("fenced")
        .arg(supervise::SUBCOMMAND)
        .arg(std::process::id().to_string())
        .arg(args.kill_after.as_millis().to_string())
        .arg("--")
        .arg(program)
        .args(program_args)
        .env("FENCED_NAME", args.name)
        .env(hold::HOLDS_VAR, guard.holds_for_children(global))
        .kill_on_drop(false);
    match token {
        Some(token) => command.env("FENCED_TOKEN", token.to_string()),
        // Not an inherited token of an enclosing run: an unfenced lock has none.
        None => command.env_remove("FENCED_TOKEN"),
    };
    match ticket {
        Some(ticket) => command.env("FENCED_TICKET", ticket),
        None => command.env_remove("FENCED_TICKET"),
    };
    for (var, value) in &under.env {
        command.env(var, value);
    }
    let child = command.spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            release(client, guard, global).await;
            return Err(Failure::new(
                exit::SOFTWARE,
                format!("cannot start the supervisor: {e}"),
            ));
        }
    };
    // Our own child until we reap it: its pid cannot be reused while we signal it.
    let supervisor = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);

    // `--heartbeat-file`: each touch CMD makes is reported to the lease as a beat, by a task
    // of its own (a file system that hangs only silences the heartbeat); it ends with the
    // lease.
    if let (Some((path, timeout)), Some(lease)) = (args.heartbeat, guard.lease()) {
        tokio::spawn(report_touches(path.to_owned(), timeout, lease));
    }
    let mut lost = false;
    // `--max-hold`: from the grant, as the library's maximum hold counts, CMD may run this
    // long; then it is stopped as on a lost lease, and the lock, still held, is released.
    let max_hold_at = args.max_hold.map(|max| tokio::time::Instant::now() + max);
    let mut timed_out = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = sleep_until_opt(max_hold_at), if !timed_out && !lost => {
                send(supervisor, supervise::LEASE_LOST);
                timed_out = true;
                warn!("fenced: {:?} ran past --max-hold {}; stopping the command and everything it started (SIGTERM, SIGKILL after {})", args.name, show(args.max_hold.unwrap_or_default()), show(args.kill_after));
            }
            _ = guard.lost(), if !lost => {
                // Signal first: nothing (not even a closed stderr) may delay stopping CMD.
                send(supervisor, supervise::LEASE_LOST);
                lost = true;
                let cause = guard.lease().and_then(|l| l.lost_cause());
                let why = match (cause, args.heartbeat) {
                    (Some(fenced::LostCause::Silent { silent_for }), Some((path, _))) => {
                        format!(" ({} untouched for {})", path.display(), show(silent_for))
                    }
                    _ => String::new(),
                };
                warn!("fenced: the lease on {:?} was lost{why}; stopping the command and everything it started (SIGTERM, SIGKILL after {})", args.name, show(args.kill_after));
            }
            sig = signals.next() => {
                // Ctrl-C and Ctrl-\ on a terminal reach the whole foreground process group,
                // CMD included: forwarding them again would deliver them twice (and many
                // programs treat a second Ctrl-C as "quit now").
                let from_terminal = terminal && matches!(sig, Signal::SIGINT | Signal::SIGQUIT);
                if !from_terminal {
                    send(supervisor, sig);
                }
                if global.verbose {
                    warn!("fenced: got {sig}{}", if from_terminal { "; the terminal delivered it to the command too" } else { ", forwarded to the command" });
                }
            }
        }
    };
    let status = match status {
        Ok(status) => status,
        Err(e) => {
            // Cannot tell whether CMD still runs: give the lock back rather than keep it.
            drop(guard);
            client.flush().await;
            return Err(Failure::new(
                exit::SOFTWARE,
                format!("lost track of the command: {e}"),
            ));
        }
    };

    if let Some(killed_by) = status.signal() {
        // The supervisor was killed: CMD and its descendants are ours now. Nothing started
        // under the lock may outlive it.
        supervise::kill_subtree_now();
        // A signal we forwarded before the supervisor had set up its handlers ends it as it
        // would have ended CMD: the run was interrupted as asked.
        let forwarded = signals.received.is_some_and(|s| s as i32 == killed_by);
        if !lost && !guard.is_lost() {
            // A handed-off lease releases nothing here (`Hold::release`).
            release(client, guard, global).await;
            if forwarded {
                return Ok(u8::try_from(128 + killed_by).unwrap_or(255));
            }
            return Err(Failure::new(
                exit::SOFTWARE,
                "the supervisor was killed; stopped the command and everything it started",
            ));
        }
    }
    if lost || guard.is_lost() {
        drop(guard);
        client.flush().await;
        return Ok(exit::LEASE_LOST);
    }
    if args.hand_off {
        // Handed over when CMD started: whoever resumed (or resumes) the ticket has it.
        drop(guard);
        client.flush().await;
        return Ok(if timed_out {
            exit::MAX_HOLD
        } else {
            exit_code(status)
        });
    }
    if timed_out {
        release(client, guard, global).await;
        client.flush().await;
        return Ok(exit::MAX_HOLD);
    }
    match guard.release().await {
        Ok(()) => {}
        Err(fenced::Error::NotHeld { .. } | fenced::Error::LeaseLost { .. }) => {
            client.flush().await;
            return Err(Failure::new(
                exit::LEASE_LOST,
                format!(
                    "the lease on {:?} was gone when the command finished",
                    args.name
                ),
            ));
        }
        Err(e) => {
            warn!(
                "fenced: could not release {:?} ({e}); it expires by its ttl",
                args.name
            );
        }
    }
    client.flush().await;
    Ok(exit_code(status))
}

/// `--heartbeat-file` and `--heartbeat-timeout`, when given (clap makes them go together).
pub fn heartbeat_of(lease: &LeaseFlags) -> Option<(&std::path::Path, std::time::Duration)> {
    lease.heartbeat_file.as_deref().zip(lease.heartbeat_timeout)
}

/// Reports each modification of `path` to `lease` as a beat at its time, reading the file
/// every quarter of `timeout` (from 10 ms to a second), until the lease ends. The file's time
/// is compared with this machine's clock, which set it (on a network file system, the
/// server's clock sets it): a file modified less than `timeout` ago keeps the lease renewed.
/// A time ahead of the clock counts as now; a missing file, as no touch.
async fn report_touches(
    path: std::path::PathBuf,
    timeout: std::time::Duration,
    lease: fenced::Lease,
) {
    use std::time::{Duration, SystemTime};
    let every = (timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = lease.lost() => return,
            _ = tick.tick() => {}
        }
        // Read off the runtime's threads: a file system that hangs holds up only this task.
        let file = path.clone();
        let read = tokio::task::spawn_blocking(move || std::fs::metadata(file)?.modified());
        let Ok(Ok(modified)) = read.await else {
            continue;
        };
        let age = SystemTime::now()
            .duration_since(modified)
            .unwrap_or(Duration::ZERO);
        if let Some(at) = Instant::now().checked_sub(age) {
            lease.beat_at(at);
        }
    }
}

/// Releases after a failed start of the command.
async fn release(client: &Client, guard: Hold, global: &Global) {
    if let Err(e) = guard.release().await
        && global.verbose
    {
        warn!("fenced: release failed: {e}");
    }
    client.flush().await;
}

/// The command's exit code, or 128+N when a signal N ended it.
fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(1),
        (None, Some(sig)) => u8::try_from(128 + sig).unwrap_or(255),
        _ => 1,
    }
}

fn send(pid: Option<Pid>, sig: Signal) {
    if let Some(pid) = pid {
        // The supervisor may have exited already; there is nothing to do then.
        let _ = kill(pid, sig);
    }
}

/// True when `fenced` runs in the foreground process group of its controlling terminal:
/// then a Ctrl-C or Ctrl-\\ typed there reaches CMD (same group) without our help, whatever
/// stdin is redirected from.
fn in_terminal_foreground() -> bool {
    let Ok(tty) = std::fs::File::open("/dev/tty") else {
        return false; // no controlling terminal
    };
    nix::unistd::tcgetpgrp(&tty).is_ok_and(|fg| fg == nix::unistd::getpgrp())
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, as one stream.
pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
    /// The last signal received, if any.
    pub received: Option<Signal>,
}

impl Signals {
    pub fn new() -> Result<Self, Failure> {
        let mut streams = Vec::new();
        for (sig, kind) in [
            (Signal::SIGINT, SignalKind::interrupt()),
            (Signal::SIGTERM, SignalKind::terminate()),
            (Signal::SIGHUP, SignalKind::hangup()),
            (Signal::SIGQUIT, SignalKind::quit()),
        ] {
            let stream = signal(kind)
                .map_err(|e| Failure::new(exit::SOFTWARE, format!("cannot watch signals: {e}")))?;
            streams.push((sig, stream));
        }
        Ok(Signals {
            streams,
            received: None,
        })
    }

    /// The next signal received.
    pub async fn next(&mut self) -> Signal {
        let sig = std::future::poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*sig);
                }
            }
            std::task::Poll::Pending
        })
        .await;
        self.received = Some(sig);
        sig
    }
}

/// Sleeps until `at`; forever without one.
async fn sleep_until_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

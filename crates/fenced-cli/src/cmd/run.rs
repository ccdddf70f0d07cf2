//! `fenced run NAME -- CMD`: hold a lock while a program runs.
//!
//! Order of events: check arguments (64) → connect (69) → acquire, waiting by `--wait`
//! (75; a signal here aborts the wait) → spawn CMD with FENCED_TOKEN and FENCED_NAME → while
//! it runs, forward signals to it and watch the lease → if the lease is lost: SIGTERM, then
//! SIGKILL after `--kill-after`, exit 76 → when CMD exits: release, exit with its code.
//! Every exit path after the acquire releases the lock (or hands the release to the client's
//! background clean-up, which `flush` waits for).

use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use fenced::{Client, Lock, LockGuard, WaitPolicy};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};
use tokio::time::Instant;

use crate::args::{Global, RunArgs};
use crate::cmd::{address, check_name, check_url, connect};
use crate::exit::{self, Failure, show};

pub async fn run(global: &Global, args: &RunArgs) -> Result<u8, Failure> {
    check_name(&args.name)?;
    check_url(global.redis_url())?;
    fenced::check_ttl(args.ttl).map_err(|e| Failure::from_lib(e, ""))?;
    let Some((program, program_args)) = args.command.split_first() else {
        return Err(Failure::usage("no command given after `--`"));
    };
    let mut signals = Signals::new()?;
    let client = connect(global).await?;
    let policy = if args.no_wait {
        WaitPolicy::forever().with_max_attempts(1)
    } else {
        args.wait.map_or(WaitPolicy::forever(), WaitPolicy::up_to)
    };
    let lock = client
        .lock(args.name.clone())
        .with_ttl(args.ttl)
        .with_wait(policy);

    let asked = Instant::now();
    let acquired = tokio::select! {
        result = acquire_showing_progress(&lock, global.verbose) => result,
        sig = signals.next() => {
            // Interrupted while waiting: any attempt in flight is abandoned in the background.
            client.flush().await;
            return Ok(128 + sig as u8);
        }
    };
    let guard = match acquired {
        Ok(g) => g,
        Err(e) => {
            client.flush().await;
            return Err(Failure::from_lib(e, &address(global.redis_url())));
        }
    };
    let token = guard.fencing_token();
    if global.verbose {
        warn!(
            "fenced: acquired {:?} with fencing token {token} after {}",
            args.name,
            show(asked.elapsed())
        );
    }

    // CMD stays in fenced's process group, as with flock(1): whoever stops fenced's group (a
    // terminal's Ctrl-Z, a CI runner's timeout) stops CMD with it.
    let terminal = std::io::stdin().is_terminal();
    let child = Command::new(program)
        .args(program_args)
        .env("FENCED_TOKEN", token.to_string())
        .env("FENCED_NAME", &args.name)
        .kill_on_drop(false)
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            release(&client, guard, global).await;
            return Err(Failure::new(code, format!("cannot run {program:?}: {e}")));
        }
    };
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(Pid::from_raw);

    // On a lost lease, everything CMD started must stop too: a shell's children would
    // otherwise go on working without the lock. The tree is read when the lease is lost and
    // remembered, because children whose parent dies are re-parented and cannot be found
    // from CMD any more.
    let mut doomed: Vec<Pid> = Vec::new();
    let mut lost_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        // A --kill-after too large to add means "never SIGKILL".
        let kill_at = lost_at.and_then(|t| t.checked_add(args.kill_after));
        tokio::select! {
            status = child.wait() => break status,
            _ = guard.lost(), if lost_at.is_none() => {
                // Signal first: nothing (not even a closed stderr) may delay stopping CMD.
                doomed = pid.map(process_tree).unwrap_or_default();
                signal_all(&doomed, Signal::SIGTERM);
                lost_at = Some(Instant::now());
                warn!("fenced: the lease on {:?} was lost; sent SIGTERM to the command ({} processes)", args.name, doomed.len());
            }
            _ = sleep_until_opt(kill_at), if kill_at.is_some() && !killed => {
                doomed.extend(pid.map(process_tree).unwrap_or_default());
                signal_all(&doomed, Signal::SIGKILL);
                killed = true;
                warn!("fenced: the command was still running {} after SIGTERM; sent SIGKILL", show(args.kill_after));
            }
            sig = signals.next() => {
                // Ctrl-C and Ctrl-\ on a terminal reach the whole foreground process group,
                // CMD included: forwarding them again would deliver them twice (and many
                // programs treat a second Ctrl-C as "quit now").
                let from_terminal = terminal && matches!(sig, Signal::SIGINT | Signal::SIGQUIT);
                if !from_terminal {
                    send(pid, sig);
                }
                if global.verbose {
                    warn!("fenced: got {sig}{}", if from_terminal { "; the terminal delivered it to the command too" } else { ", forwarded to the command" });
                }
            }
        }
    };
    // CMD is gone; after a lost lease, so must be what it started (SIGKILL at --kill-after).
    if let Some(lost) = lost_at {
        let kill_at = lost.checked_add(args.kill_after);
        while doomed.iter().any(|p| alive(*p)) {
            if kill_at.is_some_and(|k| Instant::now() >= k) && !killed {
                signal_all(&doomed, Signal::SIGKILL);
                killed = true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
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

    if lost_at.is_some() || guard.is_lost() {
        drop(guard);
        client.flush().await;
        return Ok(exit::LEASE_LOST);
    }
    match guard.release().await {
        Ok(()) => {}
        Err(fenced::Error::NotHeld { .. }) => {
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

/// Releases after a failed start of the command.
async fn release(client: &Client, guard: LockGuard, global: &Global) {
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
        // The command may have exited already; there is nothing to do then.
        let _ = kill(pid, sig);
    }
}

/// Signals every process of `pids` (those already gone are skipped by the kernel).
fn signal_all(pids: &[Pid], sig: Signal) {
    for pid in pids {
        let _ = kill(*pid, sig);
    }
}

/// True while `pid` runs (a zombie waiting to be reaped by init does not count).
fn alive(pid: Pid) -> bool {
    kill(pid, None).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
}

/// `root` and all its descendants, read from `/proc` now (Linux).
fn process_tree(root: Pid) -> Vec<Pid> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<i32>().ok())
            else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
                continue;
            };
            // "pid (comm) state ppid …": comm may hold spaces and parentheses, so read after
            // the last ')'.
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<i32>().ok());
            if let Some(ppid) = ppid {
                parents.push((pid, ppid));
            }
        }
    }
    let mut tree = vec![root.as_raw()];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(child, _)| *child),
        );
        i += 1;
    }
    tree.into_iter().map(Pid::from_raw).collect()
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Acquires; on a terminal, shows a spinner with the holder and the time waited; with `-v`
/// elsewhere, says once that it waits.
async fn acquire_showing_progress(lock: &Lock, verbose: bool) -> Result<LockGuard, fenced::Error> {
    let terminal = std::io::stderr().is_terminal();
    if !terminal && !verbose {
        return lock.acquire().await;
    }
    let started = Instant::now();
    let acquire = lock.acquire();
    tokio::pin!(acquire);
    // Only a wait longer than this shows progress.
    let mut tick = tokio::time::interval_at(
        started + Duration::from_millis(200),
        Duration::from_millis(100),
    );
    let mut holder = String::from("somebody");
    let mut last_status = None::<Instant>;
    let mut said = false;
    let frames = ['|', '/', '-', '\\'];
    let mut frame = 0;
    loop {
        tokio::select! {
            result = &mut acquire => {
                if terminal && said {
                    warn_inline!("\r\x1b[2K");
                }
                return result;
            }
            _ = tick.tick() => {
                if last_status.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    last_status = Some(Instant::now());
                    if let Ok(status) = lock.status().await
                        && let Some(h) = status.holder
                    {
                        holder = match h.ttl_left {
                            Some(ttl) => format!("{} ({} left)", h.owner_prefix, show(ttl)),
                            None => format!("{} (no expiry)", h.owner_prefix),
                        };
                    }
                }
                if terminal {
                    frame = (frame + 1) % frames.len();
                    warn_inline!("\r\x1b[2K{} waiting for {:?}, held by {holder}; waited {}", frames[frame], lock.name(), show(started.elapsed()));
                    said = true;
                } else if !said {
                    warn!("fenced: waiting for {:?}, held by {holder}", lock.name());
                    said = true;
                }
            }
        }
    }
}

/// SIGINT, SIGTERM, SIGHUP and SIGQUIT, as one stream.
struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn new() -> Result<Self, Failure> {
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
        Ok(Signals { streams })
    }

    /// The next signal received.
    async fn next(&mut self) -> Signal {
        std::future::poll_fn(|cx| {
            for (sig, stream) in &mut self.streams {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*sig);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }
}

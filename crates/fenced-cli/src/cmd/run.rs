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
use nix::sys::signal::{Signal, kill, killpg};
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

    // Off a terminal (cron, CI, scripts) CMD leads a process group of its own, so a lost lease
    // stops everything CMD started, not just CMD (a shell's children would otherwise go on
    // working without the lock). On a terminal CMD stays in the foreground group, so that it
    // can still read the terminal; then only CMD itself is signalled.
    let terminal = std::io::stdin().is_terminal();
    let mut command = Command::new(program);
    command
        .args(program_args)
        .env("FENCED_TOKEN", token.to_string())
        .env("FENCED_NAME", &args.name)
        .kill_on_drop(false);
    if !terminal {
        command.process_group(0);
    }
    let child = command.spawn();
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
    let target = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .map(|id| Target {
            pid: Pid::from_raw(id),
            group: !terminal,
        });

    // Ctrl-C and Ctrl-\ on a terminal reach the whole foreground process group, CMD
    // included: forwarding them again would deliver them twice (and many programs treat a
    // second Ctrl-C as "quit now"). Signals sent to fenced alone are forwarded.
    let mut lost_at: Option<Instant> = None;
    let mut killed = false;
    let status = loop {
        // A --kill-after too large to add means "never SIGKILL".
        let kill_at = lost_at.and_then(|t| t.checked_add(args.kill_after));
        tokio::select! {
            status = child.wait() => break status,
            _ = guard.lost(), if lost_at.is_none() => {
                // Signal first: nothing (not even a closed stderr) may delay stopping CMD.
                send(target, Signal::SIGTERM);
                lost_at = Some(Instant::now());
                warn!("fenced: the lease on {:?} was lost; sent SIGTERM to the command", args.name);
            }
            _ = sleep_until_opt(kill_at), if kill_at.is_some() && !killed => {
                send(target, Signal::SIGKILL);
                killed = true;
                warn!("fenced: the command was still running {} after SIGTERM; sent SIGKILL", show(args.kill_after));
            }
            sig = signals.next() => {
                let from_terminal = terminal && matches!(sig, Signal::SIGINT | Signal::SIGQUIT);
                if !from_terminal {
                    send(target, sig);
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

/// Whom a signal for "the command" goes to.
#[derive(Clone, Copy)]
struct Target {
    pid: Pid,
    /// CMD leads its own process group: signal all of it.
    group: bool,
}

fn send(target: Option<Target>, sig: Signal) {
    // The command may have exited already; there is nothing to do then.
    match target {
        Some(Target { pid, group: true }) => {
            let _ = killpg(pid, sig);
        }
        Some(Target { pid, group: false }) => {
            let _ = kill(pid, sig);
        }
        None => {}
    }
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

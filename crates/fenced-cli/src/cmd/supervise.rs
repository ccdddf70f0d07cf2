//! `fenced __supervise`: the small process between `fenced run` and CMD that makes sure
//! nothing started under the lock outlives the lease, however `fenced` ends.
//!
//! `fenced run` starts this (its own binary, through `/proc/self/exe`) once it holds the
//! lease; this starts CMD. The supervisor is a child subreaper, so every process CMD starts
//! stays in its subtree, daemonising helpers and `(job &)` included: they are re-parented to
//! the supervisor, not to init.
//!
//! Invariants:
//! 1. When `fenced` dies, whatever kills it (SIGKILL, a group kill), the whole subtree is
//!    SIGKILLed at once: the lease is no longer renewed, so not one more write may happen.
//!    The kernel tells us by the parent-death signal (SIGUSR1), set up before CMD starts,
//!    and checked against a parent that had already died before it was set up. The signal
//!    follows the THREAD that forked us, so `fenced` starts us from its main thread, which
//!    lives as long as the process.
//! 2. On a lost lease (SIGUSR2 from `fenced`) and when CMD exits leaving processes behind, the
//!    subtree gets SIGTERM (and SIGCONT, so a stopped process acts on it at once), then
//!    SIGKILL after `--kill-after`; the supervisor exits (and `fenced` releases or reports the
//!    loss) only once the subtree is empty. Until then the SIGTERM pass repeats on every
//!    SIGCHLD and every `TERM_PASS`, doubling to `TERM_PASS_MAX` (a pass reads all of
//!    `/proc`), so a process adopted after a pass (its parent died of the SIGTERM before the
//!    pass reached it) gets its SIGTERM within one more pass: a death wakes the next pass at
//!    once. Each process, known by pid and start time, gets it once.
//! 3. Only our own unreaped children are signalled by pid (their pids cannot be reused until
//!    we reap them). Deeper descendants are reached by pidfd, opened and then checked to be
//!    a child of a process in our subtree, so a pid recycled meanwhile is never hit. A
//!    SIGKILL pass repeats until no child is left: killing a child re-parents its own
//!    children to us, where the next pass finds them.
//! 4. SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to CMD only when `fenced` sent them
//!    (`fenced` decides what a terminal already delivered); any other sender's copy (a
//!    terminal, a process-group kill) reached CMD directly, so CMD gets each signal once.
//! 5. The supervisor has a process group of its own (CMD joins fenced's), so a signal to
//!    fenced's group never takes the supervisor down with fenced. Should the supervisor be
//!    killed anyway, `fenced run` is a subreaper too and SIGKILLs what it inherits.
//!    (The kernel's orphaned-group rule: while CMD's processes are children of the
//!    supervisor, fenced's group has a parent outside it in the session. Only if the
//!    supervisor is SIGKILLed while a process of that group is stopped can the group become
//!    orphaned with a stopped member, and the kernel then sends the group SIGHUP and SIGCONT:
//!    fenced, which is ending anyway, and whatever else the caller keeps in that group. The
//!    supervisor itself exits only after its subtree is gone, stopped processes included.)
//! 6. Our exit code is CMD's (128+N when signal N ended it; 127/126 when it could not start).

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, getpid, getppid, setpgid};
use signal_hook::consts::signal::{
    SIGALRM, SIGCHLD, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
};
use signal_hook::iterator::SignalsInfo;
use signal_hook::iterator::exfiltrator::WithOrigin;

use crate::exit;

/// The hidden subcommand's name.
pub const SUBCOMMAND: &str = "__supervise";

/// The signal the kernel sends us when `fenced` dies.
pub const PARENT_DIED: Signal = Signal::SIGUSR1;

/// The signal `fenced` sends us when the lease is lost.
pub const LEASE_LOST: Signal = Signal::SIGUSR2;

/// How soon the SIGTERM pass repeats while the subtree is being stopped, without a SIGCHLD
/// (invariant 2); the pause doubles up to [`TERM_PASS_MAX`].
const TERM_PASS: Duration = Duration::from_millis(20);

/// The longest pause between SIGTERM passes.
const TERM_PASS_MAX: Duration = Duration::from_millis(320);

/// What brought the subtree down.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// CMD exited: stop what it left behind, gently first.
    CmdDone,
    /// The lease was lost: SIGTERM, then SIGKILL after `--kill-after`.
    LeaseLost,
    /// `fenced` is gone: SIGKILL everything now.
    ParentGone,
}

/// Runs the supervisor; returns the exit code. `args` is what follows the subcommand:
/// `PARENT_PID KILL_AFTER_MS -- CMD [ARGS...]`.
pub fn main(args: &[OsString]) -> u8 {
    let parsed = (|| {
        let parent: i32 = args.first()?.to_str()?.parse().ok()?;
        let kill_after: u64 = args.get(1)?.to_str()?.parse().ok()?;
        if args.get(2)? != "--" {
            return None;
        }
        let (program, rest) = args.get(3..)?.split_first()?;
        Some((
            Pid::from_raw(parent),
            Duration::from_millis(kill_after),
            program,
            rest,
        ))
    })();
    let Some((parent, kill_after, program, rest)) = parsed else {
        warn!("fenced: {SUBCOMMAND} is internal to `fenced run`");
        return exit::USAGE;
    };
    match supervise(parent, kill_after, program, rest) {
        Ok(code) => code,
        Err(message) => {
            warn!("fenced: {message}");
            // Whatever went wrong, nothing may outlive us.
            kill_subtree_now();
            exit::SOFTWARE
        }
    }
}

fn supervise(
    parent: Pid,
    kill_after: Duration,
    program: &OsString,
    args: &[OsString],
) -> Result<u8, String> {
    // Out of fenced's process group, so a group kill (a CI runner's `kill -9 -PGID`, Ctrl-C)
    // reaches fenced and CMD but never the supervisor, which then cleans up after fenced.
    // CMD joins fenced's group, as with flock(1).
    let group = getpgrp();
    setpgid(Pid::from_raw(0), Pid::from_raw(0))
        .map_err(|e| format!("cannot leave fenced's process group: {e}"))?;
    prctl::set_child_subreaper(true).map_err(|e| format!("cannot become a subreaper: {e}"))?;
    prctl::set_pdeathsig(PARENT_DIED).map_err(|e| format!("cannot watch fenced: {e}"))?;
    // Registered before CMD starts, so no SIGCHLD or forwarded signal is missed.
    let mut signals = SignalsInfo::<WithOrigin>::new([
        SIGUSR1, SIGUSR2, SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD, SIGALRM,
    ])
    .map_err(|e| format!("cannot watch signals: {e}"))?;
    if getppid() != parent {
        // fenced died before the death signal was armed: do not start CMD at all.
        return Ok(exit::LEASE_LOST);
    }
    let cmd = match Command::new(program)
        .args(args)
        .process_group(group.as_raw())
        .spawn()
    {
        Ok(child) => Pid::from_raw(child.id() as i32),
        Err(e) => {
            let code = if e.kind() == std::io::ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            warn!("fenced: cannot run {program:?}: {e}");
            return Ok(code);
        }
    };

    let mut cmd_status: Option<u8> = None;
    let mut ending: Option<Ending> = None;
    let mut killing = false;
    // Who has had its SIGTERM, and the pause before the next pass (invariant 2).
    let mut termed = Termed::default();
    let mut pass_pause = TERM_PASS;
    loop {
        // Reap whatever has exited; learn CMD's status; stop once nothing is left.
        if reap(cmd, &mut cmd_status) {
            return Ok(cmd_status.unwrap_or(exit::SOFTWARE));
        }
        if cmd_status.is_some() && ending.is_none() {
            ending = Some(Ending::CmdDone);
            arm_alarm(kill_after);
        }
        if killing {
            // A SIGKILL pass re-parents grandchildren to us: kill them on the next pass.
            kill_children(Signal::SIGKILL);
        } else if ending.is_some() {
            // Again on every wake-up: a process adopted since the last pass gets its SIGTERM.
            termed.pass();
        }
        let pace = if killing {
            Some(TERM_PASS)
        } else if ending.is_some() {
            let pause = pass_pause;
            pass_pause = (pass_pause * 2).min(TERM_PASS_MAX);
            Some(pause)
        } else {
            None
        };
        // Every signal of the wake-up: one left behind would wait for the next signal.
        for origin in wait_signals(&mut signals, pace) {
            let from_parent = origin.process.is_some_and(|p| p.pid == parent.as_raw());
            match origin.signal {
                // SIGCHLD: reaped at the top of the loop. SIGUSR1 (fenced died): handled below.
                SIGCHLD | SIGUSR1 => {}
                SIGUSR2 if from_parent && ending.is_none_or(|e| e == Ending::CmdDone) => {
                    ending = Some(Ending::LeaseLost);
                    termed.pass();
                    arm_alarm(kill_after);
                }
                SIGALRM => {
                    killing = true;
                    kill_children(Signal::SIGKILL);
                }
                sig @ (SIGINT | SIGTERM | SIGHUP | SIGQUIT)
                    if from_parent && cmd_status.is_none() =>
                {
                    if let Ok(sig) = Signal::try_from(sig) {
                        // CMD is our unreaped child: its pid is still its own.
                        let _ = kill(cmd, sig);
                    }
                }
                _ => {}
            }
        }
        if getppid() != parent && !killing {
            ending = Some(Ending::ParentGone);
            killing = true;
            kill_children(Signal::SIGKILL);
        }
    }
}

/// Waits for the next signals; with a `pace` (while the subtree is being stopped), at most
/// that long, so the SIGTERM or SIGKILL passes repeat.
fn wait_signals(
    signals: &mut SignalsInfo<WithOrigin>,
    pace: Option<Duration>,
) -> Vec<signal_hook::low_level::siginfo::Origin> {
    let Some(pace) = pace else {
        return signals.wait().collect();
    };
    let deadline = std::time::Instant::now() + pace;
    loop {
        let batch: Vec<_> = signals.pending().collect();
        if !batch.is_empty() || std::time::Instant::now() >= deadline {
            return batch;
        }
        // Short naps: a SIGCHLD (a death that may have orphaned a grandchild) is acted on
        // within a millisecond or two, not at the end of the pace.
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Reaps every exited child; records CMD's status. True when no child is left.
fn reap(cmd: Pid, cmd_status: &mut Option<u8>) -> bool {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, code)) => {
                if pid == cmd {
                    *cmd_status = Some(u8::try_from(code).unwrap_or(1));
                }
            }
            Ok(WaitStatus::Signaled(pid, sig, _)) => {
                if pid == cmd {
                    *cmd_status = Some(128u8.saturating_add(sig as u8));
                }
            }
            Ok(WaitStatus::StillAlive) => return false,
            Ok(_) => {}
            Err(Errno::ECHILD) => return true,
            Err(Errno::EINTR) => {}
            Err(_) => return false,
        }
    }
}

/// Sends SIGALRM to ourselves after `after`: the SIGKILL stage.
fn arm_alarm(after: Duration) {
    let me = getpid();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        let _ = kill(me, Signal::SIGALRM);
    });
}

/// Signals our own children, found in `/proc` now. They are unreaped, so each pid is still
/// the process we started or adopted (invariant 3).
pub fn kill_children(sig: Signal) {
    let me = getpid().as_raw();
    for p in processes() {
        if p.ppid == me {
            let _ = kill(Pid::from_raw(p.pid), sig);
        }
    }
}

/// The processes of our subtree that have had their SIGTERM, by pid and start time (a pid
/// alone could be a recycled one's).
#[derive(Default)]
struct Termed(HashSet<(i32, u64)>);

impl Termed {
    /// SIGTERM, then SIGCONT, to every process of our subtree that has not had them yet:
    /// children by pid, deeper ones by a pidfd that is checked to still belong to a child of
    /// the subtree after it was opened (invariant 3).
    fn pass(&mut self) {
        let me = getpid().as_raw();
        let table = processes();
        let mut tree = vec![me];
        let mut i = 0;
        while i < tree.len() {
            let parent = tree[i];
            for p in table.iter().filter(|p| p.ppid == parent) {
                tree.push(p.pid);
                if self.0.contains(&(p.pid, p.started)) {
                    continue;
                }
                let signalled = if parent == me {
                    // Our unreaped child: its pid is still its own.
                    let _ = kill(Pid::from_raw(p.pid), Signal::SIGTERM);
                    let _ = kill(Pid::from_raw(p.pid), Signal::SIGCONT);
                    true
                } else {
                    signal_by_pidfd(p.pid, parent)
                };
                // One that moved meanwhile (its parent died) is signalled by a later pass.
                if signalled {
                    self.0.insert((p.pid, p.started));
                }
            }
            i += 1;
        }
    }
}

/// SIGTERM, then SIGCONT, to `pid` only if, once pinned by a pidfd, it is still the child of
/// `parent`; true when signalled.
fn signal_by_pidfd(pid: i32, parent: i32) -> bool {
    let Some(raw) = rustix::process::Pid::from_raw(pid) else {
        return false;
    };
    let Ok(fd) = rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) else {
        return false; // gone already
    };
    if stat(pid).is_none_or(|p| p.ppid != parent) {
        return false;
    }
    let _ = rustix::process::pidfd_send_signal(fd.as_fd(), rustix::process::Signal::TERM);
    let _ = rustix::process::pidfd_send_signal(fd.as_fd(), rustix::process::Signal::CONT);
    true
}

/// SIGKILL to our children, in passes until none is left (each pass re-parents the next
/// generation to us, as a subreaper): for the error path, and for `fenced run` when its
/// supervisor was killed.
pub fn kill_subtree_now() {
    for _ in 0..100 {
        kill_children(Signal::SIGKILL);
        let mut status = None;
        if reap(Pid::from_raw(0), &mut status) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One process as `/proc` shows it.
struct Process {
    pid: i32,
    ppid: i32,
    /// Clock ticks after boot when it started: with the pid, who it is.
    started: u64,
}

/// Every process, read from `/proc` (Linux).
fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| stat(entry.file_name().to_str()?.parse::<i32>().ok()?))
        .collect()
}

/// `pid`'s parent and start time, from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<Process> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid … starttime …": comm may hold spaces and parentheses, so read
    // after the last ')'. After it, the state is field 3 of proc(5), the parent field 4, the
    // start time field 22.
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let ppid = fields.nth(1)?.parse().ok()?;
    let started = fields.nth(17)?.parse().ok()?;
    Some(Process { pid, ppid, started })
}

//! The fault suite's quick tier, in CI: every workload under every fault kind that applies,
//! checked. It fails when a checker does (a stale write accepted, a lost or duplicated effect,
//! tokens out of order, a hang, a panic), or when the lab cannot start: no redis-server is a
//! failure, never a skip.

use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};

const CHAOS: &str = env!("CARGO_BIN_EXE_fenced-chaos");

/// The `run` workload drives the `fenced` command, which `cargo test --workspace` builds next
/// to this one; built here when this package is tested alone.
fn ensure_fenced_command() {
    let fenced = std::path::Path::new(CHAOS).with_file_name("fenced");
    if !fenced.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--locked", "-p", "fenced-cli"])
            .status();
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "cannot build the fenced command: {status:?}"
        );
    }
}

/// The runs beside the quick tier take turns, however many tests run at once: two labs at a
/// time are what two cores carry without slowing the faults' timing out of shape.
static SECOND_LAB: Mutex<()> = Mutex::new(());

fn second_lab() -> MutexGuard<'static, ()> {
    SECOND_LAB.lock().unwrap_or_else(PoisonError::into_inner)
}

#[test]
fn the_quick_tier_passes_every_checker() {
    ensure_fenced_command();
    let out = Command::new(CHAOS)
        .arg("--quick")
        .arg("--markdown")
        .output()
        .expect("fenced-chaos runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{stderr}");
    for workload in [
        "lock",
        "lock-mixed",
        "redlock",
        "reentrant",
        "fair",
        "semaphore",
        "rw",
        "run",
        "election",
        "optimistic",
        "unfenced",
    ] {
        assert!(
            stdout.contains(&format!("| {workload} |")),
            "{workload} missing:\n{stdout}"
        );
    }
    // Both verdicts for every workload: ours, and the third-party checker's.
    for workload in ["lock", "fair", "election", "optimistic", "semaphore"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {workload} | pass | linearizable (")))
            .unwrap_or_else(|| panic!("no verdicts for {workload}:\n{stdout}"));
        assert!(line.contains("windows)"), "{line}");
    }
    // Without fencing, the pauses must show: the checker finds the lost updates.
    let unfenced = stdout
        .lines()
        .find(|l| l.starts_with("| unfenced | "))
        .unwrap_or_default();
    let lost: u64 = unfenced
        .split('|')
        .nth(12)
        .and_then(|c| c.trim().parse().ok())
        .unwrap_or(0);
    assert!(lost > 0, "the unfenced run lost no update: {unfenced}");
}

/// Without job control (`setsid`, `nohup`, a CI agent that starts jobs in a new session) the
/// lab's group is orphaned from the start: a process it stops must live in a group of its own,
/// or the first exit of a process in the lab's group makes the kernel hang up on the whole
/// group, the lab included (exit 129). The `run` workload under a paused Redis is the case
/// that showed it: CMDs exit all the time while redis-server is stopped.
#[test]
fn the_pause_nemeses_pass_under_setsid_without_a_terminal() {
    ensure_fenced_command();
    let _turn = second_lab();
    let out = Command::new("setsid")
        .arg("-w")
        .arg(CHAOS)
        .args(["--workload", "run", "--workload", "lock"])
        .args(["--nemesis", "pause-redis", "--nemesis", "pause-holder"])
        .args(["--duration", "4"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("setsid runs fenced-chaos");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(stdout.contains("| run | pause-redis |"), "{stdout}");
    assert!(stdout.contains("| lock | pause-holder |"), "{stdout}");
}

#[test]
fn bad_arguments_exit_64_with_one_line() {
    let out = Command::new(CHAOS)
        .args(["--workers", "0"])
        .output()
        .expect("fenced-chaos runs");
    assert_eq!(out.status.code(), Some(64));
    let out = Command::new(CHAOS)
        .args(["worker", "{not json"])
        .output()
        .expect("fenced-chaos runs");
    assert_eq!(out.status.code(), Some(64));
    assert_eq!(String::from_utf8_lossy(&out.stderr).lines().count(), 1);
}

/// Every mutant (one broken behaviour in one worker of a run without faults) is caught by our
/// checkers and by the third-party one, and the same runs without a mutant pass both.
#[test]
fn every_mutant_is_caught_by_both_checkers_and_the_faultless_runs_pass() {
    let _turn = second_lab();
    let listed = Command::new(CHAOS)
        .arg("--list-mutants")
        .output()
        .expect("fenced-chaos runs");
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let mutants: Vec<&str> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(mutants.len(), 6, "{listed}");
    for mutant in mutants {
        let out = Command::new(CHAOS)
            .args(["--mutant", mutant, "--duration", "3"])
            .output()
            .expect("fenced-chaos runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{mutant} was not caught:\n{stdout}"
        );
        let caught: Vec<&str> = stdout
            .lines()
            .skip_while(|l| !l.starts_with(&format!("mutant {mutant} ")))
            .skip(1)
            .filter(|l| l.starts_with("- "))
            .collect();
        assert!(
            caught
                .iter()
                .any(|l| l.contains("LinearizabilityTester: NOT linearizable")),
            "{mutant}: the third-party checker let it through:\n{stdout}"
        );
        assert!(
            caught.iter().any(|l| !l.contains("LinearizabilityTester")),
            "{mutant}: our checkers let it through:\n{stdout}"
        );
    }
    for workload in ["lock", "fair", "semaphore"] {
        let out = Command::new(CHAOS)
            .args(["--workload", workload, "--no-faults", "--duration", "3"])
            .output()
            .expect("fenced-chaos runs");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{workload} without faults:\n{stdout}"
        );
        assert!(
            stdout.contains(&format!("| {workload} | pass | linearizable (")),
            "{stdout}"
        );
    }
}

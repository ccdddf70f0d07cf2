//! The fault suite's quick tier, in CI: every workload under every fault kind that applies,
//! checked. It fails when a checker does (a stale write accepted, a lost or duplicated effect,
//! tokens out of order, a hang, a panic), or when the lab cannot start: no redis-server is a
//! failure, never a skip.

use std::process::Command;

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

/// Runs the quick tier on `workloads` (every fault kind that applies to each) and checks that
/// each passed, with both verdicts where the third-party checker has a model; returns the
/// report.
fn quick_tier(workloads: &[&str]) -> String {
    let mut cmd = Command::new(CHAOS);
    cmd.arg("--quick").arg("--markdown");
    for workload in workloads {
        cmd.args(["--workload", workload]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("fenced-chaos does not run: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "{stderr}");
    for workload in workloads {
        assert!(
            stdout.contains(&format!("| {workload} |")),
            "{workload} missing:\n{stdout}"
        );
    }
    // Both verdicts for every workload with a model: ours, and the third-party checker's.
    for workload in ["lock", "fair", "election", "optimistic", "semaphore"] {
        if !workloads.contains(&workload) {
            continue;
        }
        let line = stdout
            .lines()
            .find(|l| l.starts_with(&format!("| {workload} | pass | linearizable (")))
            .unwrap_or_else(|| panic!("no verdicts for {workload}:\n{stdout}"));
        assert!(line.contains("windows)"), "{line}");
    }
    stdout
}

/// The quick tier's first half: every fault kind that applies, on these workloads; the
/// eviction fault must have struck.
fn quick_tier_first_half() {
    let stdout = quick_tier(&[
        "lock",
        "lock-mixed",
        "redlock",
        "reentrant",
        "semaphore",
        "election",
    ]);
    // A fault that evicts nothing would leave the fence untested against evicted leases.
    let evicted: u64 = stdout
        .lines()
        .find(|l| l.starts_with("lock: evict ×"))
        .and_then(|l| l.split("evicted ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(
        evicted > 0,
        "evict evicted no key of the lock workload:\n{stdout}"
    );
}

/// The quick tier's second half; without fencing, the pauses must show.
fn quick_tier_second_half() {
    let stdout = quick_tier(&["lock-events", "fair", "rw", "run", "optimistic", "unfenced"]);
    // The checker finds the lost updates of the unfenced run.
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

/// The quick tier (every workload under every fault kind that applies), the mutant tier, and
/// the pause faults without job control, in two lanes: two labs at a time are what two cores
/// carry without slowing the faults' timing out of shape, however many tests the harness
/// runs at once.
#[test]
fn the_quick_tier_and_the_mutant_tier_pass_every_checker() {
    ensure_fenced_command();
    let mutants = mutants();
    std::thread::scope(|lanes| {
        lanes.spawn(|| {
            quick_tier_first_half();
            caught_and_faultless(&mutants[..3], &["lock"]);
        });
        lanes.spawn(|| {
            quick_tier_second_half();
            caught_and_faultless(&mutants[3..], &["fair", "semaphore"]);
            pause_faults_pass_under_setsid_without_a_terminal();
        });
    });
}

/// Without job control (`setsid`, `nohup`, a CI agent that starts jobs in a new session) the
/// lab's group is orphaned from the start: a process it stops must live in a group of its own,
/// or the first exit of a process in the lab's group makes the kernel hang up on the whole
/// group, the lab included (exit 129). The `run` workload under a paused Redis is the case
/// that showed it: CMDs exit all the time while redis-server is stopped.
fn pause_faults_pass_under_setsid_without_a_terminal() {
    let out = Command::new("setsid")
        .arg("-w")
        .arg(CHAOS)
        .args(["--workload", "run", "--workload", "lock"])
        .args(["--nemesis", "pause-redis", "--nemesis", "pause-holder"])
        .args(["--duration", "4"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("setsid does not run fenced-chaos: {e}"));
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

/// The mutants `--list-mutants` names: six.
fn mutants() -> Vec<String> {
    let listed = Command::new(CHAOS)
        .arg("--list-mutants")
        .output()
        .unwrap_or_else(|e| panic!("fenced-chaos does not run: {e}"));
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let mutants: Vec<String> = listed
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
        .collect();
    assert_eq!(mutants.len(), 6, "{listed}");
    mutants
}

/// Each of `mutants` is caught by our checkers and by the third-party one, and `workloads`
/// without a mutant pass both.
fn caught_and_faultless(mutants: &[String], workloads: &[&str]) {
    for mutant in mutants {
        let out = Command::new(CHAOS)
            .args(["--mutant", mutant, "--duration", "3"])
            .output()
            .unwrap_or_else(|e| panic!("fenced-chaos does not run: {e}"));
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
    for workload in workloads {
        let out = Command::new(CHAOS)
            .args(["--workload", workload, "--no-faults", "--duration", "3"])
            .output()
            .unwrap_or_else(|e| panic!("fenced-chaos does not run: {e}"));
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

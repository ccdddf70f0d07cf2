//! The real `fenced` binary against real redis-server processes: exit codes, exclusion
//! between processes, crashes, pauses, signals, inspection and the demo.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use fenced_testkit::RedisServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;

fn server() -> RedisServer {
    RedisServer::start().unwrap_or_else(|e| panic!("these tests need a real redis-server: {e}"))
}

/// `fenced --redis URL ARGS…`, with no inherited FENCED_REDIS_URL.
fn fenced(url: &str, args: &[&str]) -> Command {
    let mut cmd = fenced_bare(&["--redis", url]);
    cmd.args(args);
    cmd
}

/// `fenced ARGS…` with no inherited FENCED_REDIS_URL.
fn fenced_bare(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fenced"));
    cmd.env_remove("FENCED_REDIS_URL")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    cmd
}

struct Done {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs to completion within `limit` (a hang fails the test).
async fn finish(mut cmd: Command, limit: Duration) -> Done {
    let started = Instant::now();
    let child = cmd.spawn().expect("spawn fenced");
    let out = tokio::time::timeout(limit, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("fenced did not finish within {limit:?}"))
        .unwrap();
    Done {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: started.elapsed(),
    }
}

async fn wait_exit(child: &mut Child, limit: Duration) -> ExitStatus {
    tokio::time::timeout(limit, child.wait())
        .await
        .unwrap_or_else(|_| panic!("process did not exit within {limit:?}"))
        .unwrap()
}

async fn client(server: &RedisServer) -> fenced::Client {
    fenced::Client::connect(&server.url()).await.unwrap()
}

/// Waits (up to 10s) until the lock `name` is held by somebody.
async fn until_held(c: &fenced::Client, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.lock(name).status().await.unwrap().holder.is_none() {
        assert!(Instant::now() < deadline, "{name} never became held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// True while `pid` runs (no such process, or a zombie waiting to be reaped, is not running).
fn alive(pid: i32) -> bool {
    kill(Pid::from_raw(pid), None).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit(')')
                .next()
                .is_some_and(|rest| !rest.trim_start().starts_with('Z'))
        })
}

/// The pid a script wrote to `path`, once it is there (up to 5s).
async fn pid_in(path: &Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(pid) = std::fs::read_to_string(path)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
        {
            return pid;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (up to `limit`) until none of `pids` runs.
async fn until_gone(pids: &[i32], limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while pids.iter().any(|p| alive(*p)) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    true
}

fn signal(child: &Child, sig: Signal) {
    let pid = i32::try_from(child.id().expect("running")).unwrap();
    kill(Pid::from_raw(pid), sig).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_command_runs_with_its_token_and_its_exit_code_is_passed_through() {
    let s = server();
    let url = s.url();
    let ok = finish(
        fenced(
            &url,
            &[
                "run",
                "job",
                "--",
                "sh",
                "-c",
                "test -n \"$FENCED_TOKEN\" && test \"$FENCED_NAME\" = job",
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ok.code, Some(0), "{}", ok.stderr);
    let three = finish(
        fenced(&url, &["run", "job", "--", "sh", "-c", "exit 3"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(three.code, Some(3));
    let killed = finish(
        fenced(&url, &["run", "job", "--", "sh", "-c", "kill -TERM $$"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(killed.code, Some(128 + 15));
    let missing = finish(
        fenced(&url, &["run", "job", "--", "/no/such/program"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(missing.code, Some(127), "{}", missing.stderr);
    // Every run released the lock on its way out.
    assert!(
        client(&s)
            .await
            .lock("job")
            .status()
            .await
            .unwrap()
            .holder
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_lock_gives_75_with_no_wait_and_after_the_wait() {
    let s = server();
    let c = client(&s).await;
    let _held = c.lock("busy").acquire().await.unwrap();
    let once = finish(
        fenced(&s.url(), &["run", "busy", "--no-wait", "--", "true"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(once.code, Some(75), "{}", once.stderr);
    assert!(
        once.stderr
            .contains("lock \"busy\" is held by another owner")
            && once.stderr.contains(", 1 attempt)"),
        "{}",
        once.stderr
    );
    let waited = finish(
        fenced(&s.url(), &["run", "busy", "--wait", "300ms", "--", "true"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(waited.code, Some(75), "{}", waited.stderr);
    assert!(waited.took >= Duration::from_millis(300));
    assert!(waited.stderr.contains("held"), "{}", waited.stderr);
    assert!(waited.stderr.contains(" attempt"), "{}", waited.stderr);
    assert_eq!(
        waited.stderr.trim_end().lines().count(),
        1,
        "{}",
        waited.stderr
    );
    // Each primitive in its own words.
    let _permit = c.semaphore("pool", 1).acquire().await.unwrap();
    let full = finish(
        fenced(
            &s.url(),
            &["run", "pool", "--permits", "1", "--no-wait", "--", "true"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(full.code, Some(75), "{}", full.stderr);
    assert!(
        full.stderr
            .contains("semaphore \"pool\" has no free permits"),
        "{}",
        full.stderr
    );
}

/// Five cron-style runs of one job, started 0.3 s apart (machines whose clocks differ), each
/// with `--no-wait`: with `--min-hold 3s` the job runs once; without, every run runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minimum_hold_makes_staggered_runs_of_a_quick_job_run_it_once() {
    let s = server();
    let dir = tempfile::tempdir().unwrap();
    for (name, flags) in [("once", &["--min-hold", "3s"][..]), ("every", &[][..])] {
        let log = dir.path().join(name);
        let script = format!("echo ran >> {}", log.display());
        let mut runs = Vec::new();
        for _ in 0..5 {
            let mut args = vec!["run", "--no-wait", name];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "sh", "-c", &script]);
            runs.push(finish(fenced(&s.url(), &args), Duration::from_secs(10)).await);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let ran = std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .count();
        let codes: Vec<Option<i32>> = runs.iter().map(|r| r.code).collect();
        if flags.is_empty() {
            assert_eq!(ran, 5, "without --min-hold every run runs it: {codes:?}");
        } else {
            assert_eq!(
                ran, 1,
                "with --min-hold only the first run runs it: {codes:?}"
            );
            assert_eq!(codes, [Some(0), Some(75), Some(75), Some(75), Some(75)]);
            // Each run returned at once: the hold is the lock's expiry, not a wait.
            assert!(runs[0].took < Duration::from_secs(2), "{:?}", runs[0].took);
        }
    }
}

/// A minimum hold means the same on a plain run as on every kind: the name is free at the
/// minimum, not at the end of the lease's ttl.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_run_with_a_minimum_hold_frees_the_name_at_the_minimum() {
    let s = server();
    let c = client(&s).await;
    let started = Instant::now();
    let first = finish(
        fenced(
            &s.url(),
            &[
                "run",
                "jobB",
                "--no-wait",
                "--min-hold",
                "1500ms",
                "--",
                "true",
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    let held = c.lock("jobB").status().await.unwrap();
    assert!(held.holder.is_some(), "free before the minimum hold");
    // Free once the minimum has passed (the default ttl is far longer).
    let mut free_at = None;
    while started.elapsed() < Duration::from_secs(10) {
        if c.lock("jobB").status().await.unwrap().holder.is_none() {
            free_at = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let free_at = free_at.expect("the name is freed at the minimum hold");
    assert!(
        free_at <= Duration::from_millis(1500) + Duration::from_millis(1000),
        "free after {free_at:?}"
    );
    let again = finish(
        fenced(&s.url(), &["run", "jobB", "--no-wait", "--", "true"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_maximum_hold_is_stopped_exits_124_and_frees_the_name() {
    let s = server();
    let c = client(&s).await;
    let done = finish(
        fenced(
            &s.url(),
            &[
                "run",
                "hung",
                "--max-hold",
                "1s",
                "--kill-after",
                "1s",
                "--",
                "sleep",
                "30",
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(124), "{}", done.stderr);
    assert!(
        done.took < Duration::from_secs(2) + Duration::from_millis(500),
        "{:?}",
        done.took
    );
    assert!(done.stderr.contains("--max-hold"), "{}", done.stderr);
    assert!(
        c.lock("hung").try_acquire().await.unwrap().is_some(),
        "the name is free right after"
    );
}

/// A lease a program handed over with `into_ticket`, extended, run under and released from
/// the command line; stale and malformed tickets refused in one line (65, 64).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tickets_are_extended_run_under_and_released_from_the_command_line() {
    let s = server();
    let c = client(&s).await;
    let guard = c
        .lock("order:7")
        .with_ttl(Duration::from_secs(2))
        .acquire()
        .await
        .unwrap();
    let token = guard.fencing_token();
    let ticket = guard.into_ticket();
    let extended = finish(
        fenced(&s.url(), &["extend", "--ticket", &ticket, "--ttl", "20s"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(extended.code, Some(0), "{}", extended.stderr);
    let next = extended.stdout.trim().to_owned();
    let pttl: i64 = fenced::redis::cmd("PTTL")
        .arg("fenced:{order:7}")
        .query_async(&mut raw(&s).await)
        .await
        .unwrap();
    assert!(pttl > 15_000, "pttl {pttl}");
    // The old ticket is superseded by the extend: refused, as a stale one.
    let old = finish(
        fenced(&s.url(), &["release", "--ticket", &ticket]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(old.code, Some(65), "{}", old.stderr);
    assert_eq!(old.stderr.trim().lines().count(), 1, "{}", old.stderr);
    // A run under the ticket's lease: its token, released at the end.
    let wrong = finish(
        fenced(
            &s.url(),
            &["run", "order:8", "--ticket", &next, "--", "true"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(wrong.code, Some(64), "{}", wrong.stderr);
    let run = finish(
        fenced(
            &s.url(),
            &[
                "run",
                "order:7",
                "--ticket",
                &next,
                "--",
                "sh",
                "-c",
                "echo $FENCED_TOKEN",
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout.trim(), token.to_string());
    assert!(
        c.lock("order:7").try_acquire().await.unwrap().is_some(),
        "released"
    );
    // Released from the command line; then the same ticket is stale.
    let ticket = c.lock("order:9").acquire().await.unwrap().into_ticket();
    let released = finish(
        fenced(&s.url(), &["release", "--ticket", &ticket]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(released.code, Some(0), "{}", released.stderr);
    assert!(c.lock("order:9").try_acquire().await.unwrap().is_some());
    let again = finish(
        fenced(&s.url(), &["release", "--ticket", &ticket]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(again.code, Some(65), "{}", again.stderr);
    let truncated = finish(
        fenced(&s.url(), &["release", "--ticket", &ticket[..20]]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(truncated.code, Some(64), "{}", truncated.stderr);
    assert_eq!(truncated.stderr.trim().lines().count(), 1);
}

/// `fenced run --hand-off`: CMD passes `FENCED_TICKET` on and ends; the lock stays held for
/// whoever resumes the ticket, who finishes and releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_run_leaves_its_lease_to_whoever_resumes_its_ticket() {
    let s = server();
    let c = client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let queued = dir.path().join("queued");
    let script = format!(
        "echo $FENCED_TICKET > {}; echo $FENCED_TOKEN",
        queued.display()
    );
    let run = finish(
        fenced(
            &s.url(),
            &[
                "run",
                "order:1",
                "--hand-off",
                "--ttl",
                "5s",
                "--",
                "sh",
                "-c",
                &script,
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    assert!(
        c.lock("order:1").try_acquire().await.unwrap().is_none(),
        "handed off, not released"
    );
    let ticket = std::fs::read_to_string(&queued).unwrap();
    let worker = client(&s).await;
    let guard = worker.resume(ticket.trim()).await.unwrap();
    assert_eq!(guard.fencing_token().to_string(), run.stdout.trim());
    // Taken over once.
    assert!(matches!(
        c.resume(ticket.trim()).await,
        Err(fenced::Error::NotHeld { .. })
    ));
    guard.release().await.unwrap();
    assert!(c.lock("order:1").try_acquire().await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_run_excludes_fenced_ones_and_gives_its_command_no_token() {
    let s = server();
    let c = client(&s).await;
    let done = finish(
        fenced(
            &s.url(),
            &[
                "run",
                "--unfenced",
                "job",
                "--",
                "sh",
                "-c",
                "echo token=${FENCED_TOKEN:-none} name=$FENCED_NAME",
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    assert_eq!(done.stdout.trim(), "token=none name=job");
    // Held by a fenced lock: an unfenced run does not get in, and the other way round.
    let held = c.lock("job").acquire().await.unwrap();
    let refused = finish(
        fenced(
            &s.url(),
            &["run", "--unfenced", "--no-wait", "job", "--", "true"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(refused.code, Some(75), "{}", refused.stderr);
    held.release().await.unwrap();
    let holder = c.lock("job").unfenced().acquire().await.unwrap();
    let refused = finish(
        fenced(&s.url(), &["run", "--no-wait", "job", "--", "true"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(refused.code, Some(75), "{}", refused.stderr);
    holder.release().await.unwrap();
    let usage = finish(
        fenced(
            &s.url(),
            &["run", "--unfenced", "--fair", "job", "--", "true"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(usage.code, Some(64), "{}", usage.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_command_and_exits_76() {
    let s = server();
    let c = client(&s).await;
    let mut run = fenced(
        &s.url(),
        &["run", "lost", "--ttl", "600ms", "--", "sleep", "30"],
    )
    .spawn()
    .unwrap();
    until_held(&c, "lost").await;
    let broken_at = Instant::now();
    c.lock("lost").force_release().await.unwrap();
    let status = wait_exit(&mut run, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(76));
    assert!(
        broken_at.elapsed() < Duration::from_secs(3),
        "took {:?}",
        broken_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_redis_gives_69_within_the_timeout() {
    let port = fenced_testkit::free_port().unwrap();
    let url = format!("redis://127.0.0.1:{port}");
    let done = finish(
        fenced(&url, &["--timeout", "300ms", "run", "x", "--", "true"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(69), "{}", done.stderr);
    assert!(
        done.stderr.contains(&format!("127.0.0.1:{port}")),
        "{}",
        done.stderr
    );
    assert!(done.took < Duration::from_secs(3), "took {:?}", done.took);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_give_64_and_one_line() {
    let url = "redis://127.0.0.1:1"; // never contacted: arguments are checked first
    for (what, args) in [
        (
            "unknown flag",
            vec!["run", "x", "--frobnicate", "--", "true"],
        ),
        ("missing --", vec!["run", "x", "true"]),
        ("empty name", vec!["run", "", "--", "true"]),
        ("braces in name", vec!["run", "a{b}", "--", "true"]),
        (
            "bad duration",
            vec!["run", "x", "--ttl", "soon", "--", "true"],
        ),
        (
            "ttl too small",
            vec!["run", "x", "--ttl", "1ms", "--", "true"],
        ),
        (
            "wait and no-wait",
            vec!["run", "x", "--wait", "1s", "--no-wait", "--", "true"],
        ),
        ("no command", vec!["run", "x"]),
        ("no name", vec!["run", "--", "true"]),
        (
            "a minimum hold on a ticket's lease",
            vec![
                "run",
                "x",
                "--ticket",
                "t",
                "--min-hold",
                "5s",
                "--",
                "true",
            ],
        ),
        (
            "a minimum hold on a lease handed off",
            vec!["run", "x", "--hand-off", "--min-hold", "5s", "--", "true"],
        ),
        ("release without force", vec!["release", "x"]),
        ("unknown subcommand", vec!["frobnicate"]),
    ] {
        let done = finish(fenced(url, &args), Duration::from_secs(10)).await;
        assert_eq!(done.code, Some(64), "{what}: {}", done.stderr);
        assert_eq!(
            done.stderr.trim_end().lines().count(),
            1,
            "{what}: {:?}",
            done.stderr
        );
        assert!(
            !done.stderr.contains("panicked") && !done.stderr.contains("backtrace"),
            "{what}"
        );
    }
    let missing = finish(fenced(url, &["run", "x", "true"]), Duration::from_secs(10)).await;
    assert!(missing.stderr.contains("--"), "{}", missing.stderr);
    // What is missing is named, on the one line.
    let unnamed = finish(fenced(url, &["run", "--", "true"]), Duration::from_secs(10)).await;
    assert!(unnamed.stderr.contains("<NAME>"), "{}", unnamed.stderr);
    let bad_url = finish(
        fenced("nope://x", &["status", "x"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(bad_url.code, Some(64), "{}", bad_url.stderr);
    // The messages say what is wrong in the user's terms.
    let http = finish(
        fenced("http://127.0.0.1:1", &["status", "x"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(http.code, Some(64), "{}", http.stderr);
    assert!(http.stderr.contains("scheme http://"), "{}", http.stderr);
    let zero = finish(
        fenced(url, &["--timeout", "0s", "status", "x"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(zero.code, Some(64), "{}", zero.stderr);
    assert!(
        zero.stderr.contains("timeout 0s is below"),
        "{}",
        zero.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_on_one_name_never_overlap() {
    let s = server();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("marks");
    let script = format!(
        "echo \"start $FENCED_TOKEN\" >> {0}; sleep 0.05; echo \"end $FENCED_TOKEN\" >> {0}",
        log.display()
    );
    let mut runs = Vec::new();
    for _ in 0..4 {
        for _ in 0..3 {
            runs.push(
                fenced(&s.url(), &["run", "mutex", "--", "sh", "-c", &script])
                    .spawn()
                    .unwrap(),
            );
        }
        for mut r in runs.drain(..) {
            assert_eq!(
                wait_exit(&mut r, Duration::from_secs(20)).await.code(),
                Some(0)
            );
        }
    }
    check_no_overlap(&log, 12);
}

fn check_no_overlap(log: &Path, sections: usize) {
    let text = std::fs::read_to_string(log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2 * sections, "{text}");
    let mut last_token = 0u64;
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].split(' ').collect();
        let end: Vec<&str> = pair[1].split(' ').collect();
        assert_eq!(
            (start[0], end[0]),
            ("start", "end"),
            "sections overlapped:\n{text}"
        );
        assert_eq!(start[1], end[1], "sections overlapped:\n{text}");
        let token: u64 = start[1].parse().unwrap();
        assert!(token > last_token, "tokens did not increase:\n{text}");
        last_token = token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_run_takes_its_command_and_every_descendant_with_it() {
    // SIGKILL of `fenced` (nothing of it can run any more) must not
    // leave CMD, its children, or a double-forked job re-parented away from CMD working on
    // while the next holder runs.
    let s = server();
    let c = client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let (cmd, child, orphan) = (
        dir.path().join("cmd"),
        dir.path().join("child"),
        dir.path().join("orphan"),
    );
    let script = format!(
        "echo $$ > {}; sleep 300 & echo $! > {}; (sleep 300 & echo $! > {}); wait",
        cmd.display(),
        child.display(),
        orphan.display()
    );
    let mut run = fenced(
        &s.url(),
        &["run", "crash", "--ttl", "1s", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    until_held(&c, "crash").await;
    let pids = [
        pid_in(&cmd).await,
        pid_in(&child).await,
        pid_in(&orphan).await,
    ];
    signal(&run, Signal::SIGKILL);
    wait_exit(&mut run, Duration::from_secs(5)).await;
    let killed_at = Instant::now();
    assert!(
        until_gone(&pids, Duration::from_secs(2)).await,
        "processes started under the lock outlived fenced: {:?}",
        pids.iter().filter(|p| alive(**p)).collect::<Vec<_>>()
    );
    let next = finish(
        fenced(&s.url(), &["run", "crash", "--wait", "5s", "--", "true"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(next.code, Some(0), "{}", next.stderr);
    let after = killed_at.elapsed();
    assert!(
        after < Duration::from_millis(2500),
        "waited {after:?} for a 1s lease"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_double_forked_jobs_and_a_normal_exit_stops_leftovers() {
    // `(job &)` is re-parented away from CMD; it is stopped all the same.
    let s = server();
    let c = client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let orphan = dir.path().join("orphan");
    let script = format!(
        "(sleep 300 & echo $! > {}); exec sleep 300",
        orphan.display()
    );
    let mut run = fenced(
        &s.url(),
        &[
            "run",
            "daemon",
            "--ttl",
            "600ms",
            "--kill-after",
            "500ms",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .unwrap();
    until_held(&c, "daemon").await;
    let job = pid_in(&orphan).await;
    c.lock("daemon").force_release().await.unwrap();
    assert_eq!(
        wait_exit(&mut run, Duration::from_secs(10)).await.code(),
        Some(76)
    );
    assert!(!alive(job), "a double-forked job outlived the lost lease");

    // A CMD that exits normally and leaves a job behind: the job is stopped before the lock
    // is released, so nothing started under the lock runs on without it.
    let left = dir.path().join("left");
    let script = format!("(sleep 300 & echo $! > {}); exit 3", left.display());
    let done = finish(
        fenced(&s.url(), &["run", "leftover", "--", "sh", "-c", &script]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(3), "{}", done.stderr);
    assert!(
        !alive(pid_in(&left).await),
        "a leftover job outlived the lock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_utf8_names_are_usage_errors_and_command_arguments_pass_byte_exact() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let s = server();
    let bad = OsStr::from_bytes(b"bad\xffname");
    for args in [
        vec![OsStr::new("run"), bad, OsStr::new("--"), OsStr::new("true")],
        vec![
            OsStr::new("--namespace"),
            bad,
            OsStr::new("run"),
            OsStr::new("x"),
            OsStr::new("--"),
            OsStr::new("true"),
        ],
        vec![OsStr::new("status"), bad],
    ] {
        let mut cmd = fenced(&s.url(), &[]);
        cmd.args(&args);
        let done = finish(cmd, Duration::from_secs(10)).await;
        assert_eq!(done.code, Some(64), "{args:?}: {}", done.stderr);
        assert_eq!(
            done.stderr.trim_end().lines().count(),
            1,
            "{:?}",
            done.stderr
        );
        // The argument is named, not clap's "invalid UTF-8 was detected".
        let named = if args[0] == "--namespace" {
            "--namespace must be UTF-8"
        } else {
            "NAME must be UTF-8"
        };
        assert!(done.stderr.contains(named), "{args:?}: {}", done.stderr);
    }
    // A file whose name is not UTF-8 reaches CMD intact.
    let dir = tempfile::tempdir().unwrap();
    let name = OsStr::from_bytes(b"caf\xe9.txt");
    let mut cmd = fenced(&s.url(), &["run", "bytes", "--", "touch"]);
    cmd.arg(dir.path().join(name));
    let done = finish(cmd, Duration::from_secs(10)).await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    assert!(
        dir.path().join(name).exists(),
        "CMD got a different file name"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_speak_resp_gives_69_in_one_line() {
    // A web server where Redis was expected.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{Read, Write};
        for mut conn in listener.incoming().flatten().take(20) {
            let mut buf = [0u8; 512];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        }
    });
    let url = format!("redis://127.0.0.1:{port}");
    let done = finish(
        // The client's reconnects take about 500 ms to give up on the bad replies: a timeout
        // well above that, so the reply, not the clock, decides what is said.
        fenced(&url, &["--timeout", "3s", "status", "x"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(69), "{}", done.stderr);
    assert_eq!(
        done.stderr.trim_end().lines().count(),
        1,
        "{:?}",
        done.stderr
    );
    assert!(
        done.stderr.contains(&format!("127.0.0.1:{port}")),
        "{}",
        done.stderr
    );
    // Said in the user's terms, not the client's parser's.
    assert!(
        done.stderr.contains("does not speak the Redis protocol")
            && !done.stderr.contains("Parse error"),
        "{}",
        done.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_second_partition_during_the_wait_does_not_end_it() {
    // `--wait 30s` rides out a connection blip.
    let s = server();
    let proxy = fenced_testkit::Proxy::start(s.addr()).unwrap();
    let c = client(&s).await;
    let held = c.lock("blip").acquire().await.unwrap();
    let mut run = fenced(
        &proxy.url(),
        &[
            "--timeout",
            "300ms",
            "run",
            "blip",
            "--wait",
            "30s",
            "--",
            "true",
        ],
    )
    .spawn()
    .unwrap();
    // It waits: subscribed to the lock's release channel.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: Vec<(String, i64)> = fenced::redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg("fenced:{blip}:released")
            .query_async(&mut raw(&s).await)
            .await
            .unwrap();
        if n[0].1 > 0 {
            break;
        }
        assert!(Instant::now() < deadline, "fenced run never waited");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    const CUT: Duration = Duration::from_secs(2);
    proxy.set(fenced_testkit::Fault::Blackhole);
    held.release().await.unwrap();
    tokio::time::sleep(CUT).await;
    proxy.set(fenced_testkit::Fault::Pass);
    let status = wait_exit(&mut run, Duration::from_secs(20)).await;
    assert_eq!(status.code(), Some(0));
}

async fn raw(s: &RedisServer) -> fenced::redis::aio::MultiplexedConnection {
    fenced::redis::Client::open(s.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_run_loses_to_a_newer_holder_and_exits_76_on_resume() {
    let s = server();
    let c = client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let script = format!("echo $FENCED_TOKEN > {}; exec sleep 30", first.display());
    let mut a = fenced(
        &s.url(),
        &["run", "paused", "--ttl", "600ms", "--", "sh", "-c", &script],
    );
    // Stopped below: a group of its own, never the test runner's (which, without job
    // control, the kernel would hang up on when it is orphaned with a stopped member).
    a.process_group(0);
    let mut a = a.spawn().unwrap();
    until_held(&c, "paused").await;
    // CMD has started (and written its token) before fenced is stopped: a SIGSTOP that came
    // between the acquire and the start of CMD would leave nothing to compare.
    assert!(
        poll_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&first).is_ok_and(|t| t.ends_with('\n'))
        })
        .await,
        "CMD never started"
    );
    signal(&a, Signal::SIGSTOP);
    let b = finish(
        fenced(
            &s.url(),
            &[
                "run",
                "paused",
                "--wait",
                "5s",
                "--",
                "sh",
                "-c",
                "echo $FENCED_TOKEN",
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(b.code, Some(0), "{}", b.stderr);
    let token_a: u64 = std::fs::read_to_string(&first)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let token_b: u64 = b.stdout.trim().parse().unwrap();
    assert!(token_b > token_a);
    signal(&a, Signal::SIGCONT);
    let status = wait_exit(&mut a, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(76));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_are_forwarded_and_the_lock_released() {
    let s = server();
    let c = client(&s).await;
    let mut run = fenced(
        &s.url(),
        &[
            "run",
            "sig",
            "--",
            "sh",
            "-c",
            "trap 'exit 7' TERM; sleep 5 & wait",
        ],
    )
    .spawn()
    .unwrap();
    until_held(&c, "sig").await;
    // Give sh a moment to install its trap: it runs before `sleep`, which we can see.
    tokio::time::sleep(Duration::from_millis(200)).await;
    signal(&run, Signal::SIGTERM);
    let status = wait_exit(&mut run, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(7));
    assert!(c.lock("sig").status().await.unwrap().holder.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_list_and_release_show_and_break_locks() {
    let s = server();
    let c = client(&s).await;
    let guard = c.lock("deploy:web").acquire().await.unwrap();
    let status = finish(
        fenced(&s.url(), &["--json", "status", "deploy:web"]),
        Duration::from_secs(10),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(json["held"], true);
    assert_eq!(json["fence"], guard.fencing_token().get());
    let list = finish(
        fenced(&s.url(), &["list", "deploy:*"]),
        Duration::from_secs(10),
    )
    .await;
    assert!(list.stdout.contains("deploy:web"), "{}", list.stdout);
    let released = finish(
        fenced(&s.url(), &["release", "deploy:web", "--force"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(released.code, Some(0));
    assert!(released.stdout.contains("held by"), "{}", released.stdout);
    let free = finish(
        fenced(&s.url(), &["status", "deploy:web"]),
        Duration::from_secs(10),
    )
    .await;
    assert!(free.stdout.contains("free"), "{}", free.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_shows_every_primitive_with_its_holders_queue_and_waiters() {
    let s = server();
    let c = client(&s).await;
    let rw = c.rw_lock("doc");
    let _r1 = rw.read().await.unwrap();
    let _r2 = rw.read().await.unwrap();
    let holder = c.fair_lock("line").acquire().await.unwrap();
    let waiter = c.fair_lock("line");
    let queued = tokio::spawn(async move { waiter.acquire().await.map(drop) });
    let line = c.fair_lock("line");
    let deadline = Instant::now() + Duration::from_secs(10);
    while line.queued().await.unwrap() == 0 {
        assert!(Instant::now() < deadline, "the fair waiter never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(c.latch("gate").arm(3).await.unwrap());
    let _permit = c.semaphore("pool", 4).acquire().await.unwrap();
    let list = finish(fenced(&s.url(), &["list"]), Duration::from_secs(10)).await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    for expected in [
        "RW LOCK",
        "doc",
        "FAIR LOCK",
        "line",
        "LATCH",
        "gate",
        "SEMAPHORE",
        "pool",
    ] {
        assert!(
            list.stdout.contains(expected),
            "{expected}: {}",
            list.stdout
        );
    }
    let json = finish(
        fenced(&s.url(), &["--json", "list"]),
        Duration::from_secs(10),
    )
    .await;
    let all: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let find = |kind: &str| {
        all.as_array()
            .unwrap()
            .iter()
            .find(|v| v["kind"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} in {all}"))
    };
    assert_eq!(find("rw_lock")["readers"], 2);
    assert_eq!(find("fair_queue")["queued"], 1);
    assert_eq!(find("latch")["count"], 3);
    assert_eq!(find("semaphore")["holders"], 1);
    assert_eq!(find("lock")["name"], "line");
    holder.release().await.unwrap();
    queued.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_and_list_name_each_kind_for_what_it_is() {
    let s = server();
    let c = client(&s).await;
    let _permit = c.semaphore("pool", 4).acquire().await.unwrap();
    let holder = c.fair_lock("line").acquire().await.unwrap();
    let waiter = c.fair_lock("line");
    let queued = tokio::spawn(async move { waiter.acquire().await.map(drop) });
    let writer = c.rw_lock("doc").write().await.unwrap();
    let next = c.rw_lock("doc");
    let writing = tokio::spawn(async move { next.write().await.map(drop) });
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.fair_lock("line").queued().await.unwrap() == 0
        || c.rw_lock("doc").status().await.unwrap().waiting_writers == 0
    {
        assert!(Instant::now() < deadline, "the waiters never queued");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let status = |name: &'static str| {
        let url = s.url();
        async move { finish(fenced(&url, &["status", name]), Duration::from_secs(10)).await }
    };
    let pool = status("pool").await;
    assert_eq!(pool.code, Some(0), "{}", pool.stderr);
    assert!(
        pool.stdout.contains("kind:     semaphore\n"),
        "{}",
        pool.stdout
    );
    assert!(
        pool.stdout.contains("permits:  1 held by 1 holder(s)"),
        "{}",
        pool.stdout
    );
    assert!(
        !pool.stdout.contains("state:"),
        "no free lock shown: {}",
        pool.stdout
    );
    let line = status("line").await;
    assert!(
        line.stdout.contains("kind:     fair lock\n"),
        "{}",
        line.stdout
    );
    assert!(
        line.stdout.contains("queue:    1 fair waiter(s)"),
        "{}",
        line.stdout
    );
    let doc = status("doc").await;
    assert!(
        doc.stdout.contains("kind:     read-write lock\n"),
        "{}",
        doc.stdout
    );
    assert!(doc.stdout.contains("held by a writer"), "{}", doc.stdout);
    let nothing = status("nothing").await;
    assert!(
        nothing.stdout.contains("kind:     none"),
        "{}",
        nothing.stdout
    );
    let json = finish(
        fenced(&s.url(), &["--json", "status", "pool"]),
        Duration::from_secs(10),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(json["kind"], "semaphore", "{json}");

    let list = finish(fenced(&s.url(), &["list"]), Duration::from_secs(10)).await;
    let row = |name: &str| {
        list.stdout
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no row for {name}: {}", list.stdout))
            .to_owned()
    };
    assert!(row("line").contains(" fair lock "), "{}", list.stdout);
    assert!(row("doc").contains(" rw writer "), "{}", list.stdout);
    let json = finish(
        fenced(&s.url(), &["--json", "list"]),
        Duration::from_secs(10),
    )
    .await;
    let all: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let held_as: Vec<(String, String)> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["kind"] == "lock")
        .map(|v| (v["name"].to_string(), v["held_as"].to_string()))
        .collect();
    assert!(
        held_as.contains(&("\"line\"".into(), "\"fair_lock\"".into())),
        "{held_as:?}"
    );
    assert!(
        held_as.contains(&("\"doc\"".into(), "\"rw_lock\"".into())),
        "{held_as:?}"
    );
    holder.release().await.unwrap();
    writer.release().await.unwrap();
    queued.await.unwrap().unwrap();
    writing.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_against_a_given_server_sells_exactly_the_stock_and_cleans_up() {
    let s = server();
    let done = finish(
        fenced(&s.url(), &["--json", "demo"]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let json: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    let strategies: Vec<&str> = json["seckill"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["strategy"].as_str().unwrap())
        .collect();
    assert_eq!(strategies, ["lock", "transaction", "script"]);
    for sale in json["seckill"].as_array().unwrap() {
        assert_eq!(sale["sold"], 20, "{sale}");
        assert_eq!(sale["oversold"], 0, "{sale}");
        assert_eq!(sale["stock_left"], 0, "{sale}");
        assert_eq!(sale["attempts"], 300, "{sale}");
    }
    assert_eq!(json["stale_holder"]["a_write"], "refused");
    assert_eq!(json["redis"]["throwaway"], false);
    let mut conn = redis::Client::open(s.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: i64 = redis::cmd("DBSIZE").query_async(&mut conn).await.unwrap();
    assert_eq!(keys, 0, "the demo left keys behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_without_a_url_finds_or_starts_a_server() {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_fenced"));
    cmd.env_remove("FENCED_REDIS_URL")
        .args(["--json", "demo"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let done = finish(cmd, Duration::from_secs(60)).await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let json: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(json["seckill"][0]["oversold"], 0);
    assert!(json["redis"]["throwaway"].is_boolean());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rediss_with_a_private_ca_works_from_the_command_line() {
    let s = RedisServer::start_tls()
        .unwrap_or_else(|e| panic!("needs redis-server with TLS and openssl: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, s.tls_ca().unwrap()).unwrap();
    let ca = ca.display().to_string();
    let ran = finish(
        fenced(
            &s.url(),
            &["--tls-ca-cert", &ca, "run", "tls", "--", "true"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    let untrusted = finish(
        fenced(&s.url(), &["--timeout", "500ms", "status", "tls"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(untrusted.code, Some(69), "{}", untrusted.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_from_the_command_line() {
    let s = RedisServer::start_mtls()
        .unwrap_or_else(|e| panic!("needs redis-server with TLS and openssl: {e}"));
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    };
    let ca = write("ca.pem", s.tls_ca().unwrap());
    let (cert, key) = s.tls_client("client").unwrap();
    let (cert, key) = (write("client.pem", &cert), write("client.key", &key));
    let limit = Duration::from_secs(10);
    let tls = ["--tls-ca-cert", &ca, "--tls-cert", &cert, "--tls-key", &key];
    let ran = finish(
        fenced(
            &s.url(),
            &[&tls[..], &["run", "mtls", "--", "true"]].concat(),
        ),
        limit,
    )
    .await;
    assert_eq!(ran.code, Some(0), "{}", ran.stderr);
    // Without a client certificate: refused (69), in one line.
    let refused = finish(
        fenced(
            &s.url(),
            &["--tls-ca-cert", &ca, "--timeout", "1s", "status", "mtls"],
        ),
        limit,
    )
    .await;
    assert_eq!(refused.code, Some(69), "{}", refused.stderr);
    assert_eq!(
        refused.stderr.trim().lines().count(),
        1,
        "{}",
        refused.stderr
    );
    // A certificate without its key is a usage error.
    let half = finish(
        fenced(&s.url(), &["--tls-cert", &cert, "status", "mtls"]),
        limit,
    )
    .await;
    assert_eq!(half.code, Some(64), "{}", half.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_stops_the_commands_children_too() {
    let s = server();
    let c = client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let (polite, stubborn) = (dir.path().join("polite"), dir.path().join("stubborn"));
    // A shell with two jobs: one that stops on SIGTERM, one that ignores it. Signalling the
    // shell alone would leave both working without the lock.
    let script = format!(
        "sleep 30 & echo $! > {}; (trap '' TERM; sleep 30) & echo $! > {}; wait",
        polite.display(),
        stubborn.display()
    );
    let mut run = fenced(
        &s.url(),
        &[
            "run",
            "family",
            "--ttl",
            "600ms",
            "--kill-after",
            "500ms",
            "--",
            "sh",
            "-c",
            &script,
        ],
    )
    .spawn()
    .unwrap();
    until_held(&c, "family").await;
    let read_pid = |path: &Path| {
        std::fs::read_to_string(path)
            .ok()
            .and_then(|p| p.trim().parse::<i32>().ok())
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while read_pid(&polite).is_none() || read_pid(&stubborn).is_none() {
        assert!(Instant::now() < deadline, "the jobs never started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let jobs = [read_pid(&polite).unwrap(), read_pid(&stubborn).unwrap()];
    c.lock("family").force_release().await.unwrap();
    assert_eq!(
        wait_exit(&mut run, Duration::from_secs(10)).await.code(),
        Some(76)
    );
    // fenced exits only once the jobs are gone (no such process, or a zombie for init to reap).
    for job in jobs {
        assert!(!alive(job), "job {job} outlived the lost lease");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_terms_processes_adopted_after_the_first_pass_and_exits_76_at_once() {
    let s = server();
    let c = client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let (detached, child) = (dir.path().join("detached"), dir.path().join("child"));
    // A shell's child outlives the shell's own SIGTERM: it is re-parented to the supervisor
    // after a pass has computed the tree, and must still get its SIGTERM at once, not the
    // SIGKILL after --kill-after (10 s by default).
    let script = format!(
        "(sleep 31 & echo $! > {}) ; sleep 32 & echo $! > {}; wait $!",
        detached.display(),
        child.display()
    );
    for round in 0..3 {
        let name = format!("s3-{round}");
        let mut run = fenced(
            &s.url(),
            &["run", &name, "--ttl", "600ms", "--", "sh", "-c", &script],
        )
        .spawn()
        .unwrap();
        until_held(&c, &name).await;
        let pids = [pid_in(&detached).await, pid_in(&child).await];
        let released = Instant::now();
        let broke = finish(
            fenced(&s.url(), &["release", &name, "--force"]),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(broke.code, Some(0), "{}", broke.stderr);
        let status = wait_exit(&mut run, Duration::from_secs(20)).await;
        let took = released.elapsed();
        assert_eq!(status.code(), Some(76));
        assert!(
            took < Duration::from_secs(1),
            "fenced exited {took:?} after the release (round {round}): a process missed its SIGTERM"
        );
        for pid in pids {
            assert!(!alive(pid), "{pid} outlived the lost lease");
        }
        let _ = std::fs::remove_file(&detached);
        let _ = std::fs::remove_file(&child);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_on_a_terminal_reaches_the_command_once_even_with_stdin_redirected() {
    // Whether Ctrl-C already reached CMD is decided from the controlling
    // terminal's foreground process group, not from stdin. `script` gives fenced a terminal
    // (a pty, with fenced in its foreground group); stdin comes from /dev/null.
    let s = server();
    let dir = tempfile::tempdir().unwrap();
    let (ints, ready) = (dir.path().join("ints"), dir.path().join("ready"));
    let body = format!(
        "trap \"echo INT >> {}\" INT; echo $$ > {}; i=0; while [ $i -lt 30 ]; do sleep 0.05; i=$((i+1)); done",
        ints.display(),
        ready.display()
    );
    let line = format!(
        "{} --redis {} run tty -- sh -c '{body}' < /dev/null",
        env!("CARGO_BIN_EXE_fenced"),
        s.url()
    );
    let mut script = Command::new("script")
        .args(["-qfc", &line, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("`script` (util-linux) gives the test a terminal");
    pid_in(&ready).await; // the trap is set
    use tokio::io::AsyncWriteExt;
    let mut keys = script.stdin.take().unwrap();
    keys.write_all(b"\x03").await.unwrap(); // Ctrl-C typed on the terminal
    keys.flush().await.unwrap();
    let status = wait_exit(&mut script, Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    let got = std::fs::read_to_string(&ints).unwrap_or_default();
    assert_eq!(got.lines().count(), 1, "CMD got {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_kill_or_a_killed_supervisor_leaves_nothing_running() {
    let s = server();
    let c = client(&s).await;
    let dir = tempfile::tempdir().unwrap();

    // A CI runner's `kill -9 -PGID`: fenced and CMD die together; a job that left the group
    // (setsid) is stopped by the supervisor, which is not in that group.
    let escaped = dir.path().join("escaped");
    let script = format!("setsid sleep 300 & echo $! > {}; wait", escaped.display());
    let mut cmd = fenced(
        &s.url(),
        &["run", "group", "--ttl", "1s", "--", "sh", "-c", &script],
    );
    cmd.process_group(0);
    let mut run = cmd.spawn().unwrap();
    until_held(&c, "group").await;
    let job = pid_in(&escaped).await;
    let group = i32::try_from(run.id().unwrap()).unwrap();
    kill(Pid::from_raw(-group), Signal::SIGKILL).unwrap();
    wait_exit(&mut run, Duration::from_secs(5)).await;
    assert!(
        until_gone(&[job], Duration::from_secs(2)).await,
        "a job outlived a group kill of fenced"
    );

    // The supervisor itself killed: fenced inherits CMD's tree, stops it, then releases.
    let (cmd_pid, child) = (dir.path().join("cmd"), dir.path().join("child"));
    let script = format!(
        "echo $$ > {}; sleep 300 & echo $! > {}; wait",
        cmd_pid.display(),
        child.display()
    );
    let mut run = fenced(&s.url(), &["run", "orphaned", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    until_held(&c, "orphaned").await;
    let pids = [pid_in(&cmd_pid).await, pid_in(&child).await];
    let fenced_pid = i32::try_from(run.id().unwrap()).unwrap();
    let supervisor = std::fs::read_to_string(format!("/proc/{}/stat", pids[0]))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse::<i32>()
                .ok()
        })
        .unwrap();
    assert_ne!(supervisor, fenced_pid, "CMD runs under the supervisor");
    kill(Pid::from_raw(supervisor), Signal::SIGKILL).unwrap();
    let status = wait_exit(&mut run, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(70));
    assert!(
        !pids.iter().any(|p| alive(*p)),
        "CMD outlived its supervisor"
    );
    assert!(
        c.lock("orphaned").status().await.unwrap().holder.is_none(),
        "released once nothing runs"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nested_under_a_run_of_the_same_name_re_enters_instead_of_waiting() {
    let s = server();
    let url = s.url();
    let me = env!("CARGO_BIN_EXE_fenced");
    // The inner run would wait forever for the outer one if it did not re-enter; --wait
    // bounds that to a clear failure (75) instead of a hang.
    let script = format!(
        "echo outer=$FENCED_TOKEN; {me} --redis {url} run deploy --wait 2s -- sh -c 'echo inner=$FENCED_TOKEN; {me} --redis {url} --json status deploy'"
    );
    let done = finish(
        fenced(&url, &["run", "deploy", "--", "sh", "-c", &script]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let token = |tag: &str| {
        done.stdout
            .lines()
            .find_map(|l| l.strip_prefix(tag))
            .map(str::to_owned)
    };
    assert!(token("outer=").is_some(), "{}", done.stdout);
    assert_eq!(
        token("outer="),
        token("inner="),
        "one token for the whole hold"
    );
    let status = done.stdout.lines().find(|l| l.starts_with('{')).unwrap();
    let json: serde_json::Value = serde_json::from_str(status).unwrap();
    assert_eq!(json["holds"], 2, "{status}");
    // Both released: the lock is free, and a different name under the run is not re-entered.
    assert!(
        client(&s)
            .await
            .lock("deploy")
            .status()
            .await
            .unwrap()
            .holder
            .is_none()
    );
    let c = client(&s).await;
    let _other = c.lock("other").acquire().await.unwrap();
    let script = format!("{me} --redis {url} run other --no-wait -- true");
    let blocked = finish(
        fenced(&url, &["run", "deploy", "--", "sh", "-c", &script]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(blocked.code, Some(75), "{}", blocked.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_with_permits_share_n_slots_and_a_killed_ones_slot_comes_back() {
    let s = server();
    let url = s.url();
    let slot = |wait: &str| {
        fenced(
            &url,
            &[
                "run",
                "pool",
                "--permits",
                "2",
                "--ttl",
                "1s",
                wait,
                "--",
                "sleep",
                "30",
            ],
        )
    };
    let mut a = slot("--wait=5s").spawn().unwrap();
    let mut b = slot("--wait=5s").spawn().unwrap();
    let c = client(&s).await;
    let pool = c.semaphore("pool", 2);
    let deadline = Instant::now() + Duration::from_secs(10);
    while pool.status().await.unwrap().held < 2 {
        assert!(
            Instant::now() < deadline,
            "the two runs never held their permits"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let third = finish(
        fenced(
            &url,
            &["run", "pool", "--permits", "2", "--no-wait", "--", "true"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(third.code, Some(75), "{}", third.stderr);
    let list = finish(fenced(&url, &["list"]), Duration::from_secs(10)).await;
    assert!(
        list.stdout.contains("SEMAPHORE") && list.stdout.contains("pool"),
        "{}",
        list.stdout
    );
    // kill -9 one run: its permit comes back within the ttl (1s), and a waiting run gets it.
    signal(&a, Signal::SIGKILL);
    wait_exit(&mut a, Duration::from_secs(5)).await;
    let next = finish(
        fenced(
            &url,
            &[
                "run",
                "pool",
                "--permits",
                "2",
                "--wait",
                "5s",
                "--",
                "true",
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(next.code, Some(0), "{}", next.stderr);
    assert!(next.took < Duration::from_secs(3), "{:?}", next.took);
    signal(&b, Signal::SIGTERM);
    wait_exit(&mut b, Duration::from_secs(10)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_is_armed_counted_down_and_waited_for_from_the_command_line() {
    let s = server();
    let url = s.url();
    let run = |args: &[&str]| fenced(&url, args);
    let armed = finish(run(&["latch", "go", "arm", "2"]), Duration::from_secs(10)).await;
    assert_eq!(armed.code, Some(0), "{}", armed.stderr);
    let again = finish(run(&["latch", "go", "arm", "2"]), Duration::from_secs(10)).await;
    assert_eq!(again.code, Some(75), "{}", again.stderr);
    let early = finish(
        run(&["latch", "go", "wait", "--wait", "200ms"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(early.code, Some(75), "{}", early.stderr);
    assert!(early.stderr.contains("did not open"), "{}", early.stderr);
    let mut waiter = run(&["latch", "go", "wait"]).spawn().unwrap();
    let one = finish(run(&["latch", "go", "count-down"]), Duration::from_secs(10)).await;
    assert_eq!(one.stdout.trim(), "1");
    let zero = finish(run(&["latch", "go", "count-down"]), Duration::from_secs(10)).await;
    assert_eq!(zero.stdout.trim(), "0");
    assert!(
        wait_exit(&mut waiter, Duration::from_secs(10))
            .await
            .success()
    );
    let status = finish(run(&["status", "go"]), Duration::from_secs(10)).await;
    assert!(
        status.stdout.contains("latch:    open"),
        "{}",
        status.stdout
    );
    let count = finish(run(&["latch", "none", "count"]), Duration::from_secs(10)).await;
    assert_eq!(count.stdout.trim(), "none");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_run_together_and_a_writer_waits_for_them() {
    let s = server();
    let url = s.url();
    let reader = || {
        fenced(&url, &["run", "doc", "--read", "--", "sleep", "30"])
            .spawn()
            .unwrap()
    };
    let (mut r1, mut r2) = (reader(), reader());
    let mut conn = raw(&s).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n: u64 = fenced::redis::cmd("ZCARD")
            .arg("fenced:{doc}:readers")
            .query_async(&mut conn)
            .await
            .unwrap();
        if n == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the two readers never ran together"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let status = finish(
        fenced(&url, &["--json", "status", "doc"]),
        Duration::from_secs(10),
    )
    .await;
    let json: serde_json::Value = serde_json::from_str(&status.stdout).unwrap();
    assert_eq!(json["readers"], 2, "{}", status.stdout);
    assert_eq!(json["held"], false, "readers do not hold the writer's key");
    let text = finish(fenced(&url, &["status", "doc"]), Duration::from_secs(10)).await;
    assert!(text.stdout.contains("2 reading"), "{}", text.stdout);
    let blocked = finish(
        fenced(&url, &["run", "doc", "--write", "--no-wait", "--", "true"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(blocked.code, Some(75), "{}", blocked.stderr);
    let writer = fenced(
        &url,
        &["run", "doc", "--write", "--wait", "10s", "--", "true"],
    );
    let writing = tokio::spawn(finish(writer, Duration::from_secs(20)));
    signal(&r1, Signal::SIGTERM);
    signal(&r2, Signal::SIGTERM);
    wait_exit(&mut r1, Duration::from_secs(10)).await;
    wait_exit(&mut r2, Duration::from_secs(10)).await;
    let wrote = writing.await.unwrap();
    assert_eq!(wrote.code, Some(0), "{}", wrote.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_runs_take_the_lock_in_the_order_they_asked() {
    let s = server();
    let url = s.url();
    let c = client(&s).await;
    let fair = c.fair_lock("line");
    let held = fair.acquire().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("order");
    let mut runs = Vec::new();
    for i in 0..3u64 {
        let script = format!("echo {i} >> {}", log.display());
        let run = fenced(&url, &["run", "line", "--fair", "--", "sh", "-c", &script]);
        runs.push(tokio::spawn(finish(run, Duration::from_secs(20))));
        let deadline = Instant::now() + Duration::from_secs(10);
        while fair.queued().await.unwrap() < i + 1 {
            assert!(Instant::now() < deadline, "run {i} never queued");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let status = finish(fenced(&url, &["status", "line"]), Duration::from_secs(10)).await;
    assert!(
        status.stdout.contains("3 fair waiter(s)"),
        "{}",
        status.stdout
    );
    held.release().await.unwrap();
    for r in runs {
        let done = r.await.unwrap();
        assert_eq!(done.code, Some(0), "{}", done.stderr);
    }
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "0\n1\n2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completions_and_man_pages_come_from_the_command_line_itself() {
    // No server: these never touch Redis (the URL points nowhere).
    let nowhere = "redis://127.0.0.1:1";
    for (shell, marker) in [
        ("bash", "_fenced()"),
        ("zsh", "#compdef fenced"),
        ("fish", "complete -c fenced"),
    ] {
        let out = finish(
            fenced(nowhere, &["completions", shell]),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(out.code, Some(0), "{shell}: {}", out.stderr);
        assert!(out.stdout.contains(marker), "{shell}: {}", out.stdout);
        for sub in ["run", "status", "list", "release", "latch"] {
            assert!(out.stdout.contains(sub), "{shell} completes {sub}");
        }
    }
    let bad = finish(
        fenced(nowhere, &["completions", "nosh"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(bad.code, Some(64));
    assert_eq!(bad.stderr.trim().lines().count(), 1, "{}", bad.stderr);
    let man = finish(fenced(nowhere, &["man"]), Duration::from_secs(10)).await;
    assert_eq!(man.code, Some(0), "{}", man.stderr);
    assert!(man.stdout.contains(".TH fenced 1") && man.stdout.contains(".SH NAME"));
    let dir = tempfile::tempdir().unwrap();
    let pages = finish(
        fenced(nowhere, &["man", "--dir", dir.path().to_str().unwrap()]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(pages.code, Some(0), "{}", pages.stderr);
    for page in ["fenced.1", "fenced-run.1", "fenced-latch.1"] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.contains(".TH"), "{page}");
    }
    let missing = finish(
        fenced(nowhere, &["man", "--dir", "/nonexistent/fenced-man"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(missing.code, Some(73), "{}", missing.stderr);
    assert_eq!(
        missing.stderr.trim().lines().count(),
        1,
        "{}",
        missing.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_subcommand_has_examples_in_its_help() {
    let nowhere = "redis://127.0.0.1:1";
    for sub in [
        "run",
        "status",
        "list",
        "release",
        "demo",
        "latch",
        "doctor",
        "completions",
        "man",
    ] {
        let out = finish(fenced(nowhere, &[sub, "--help"]), Duration::from_secs(10)).await;
        assert_eq!(out.code, Some(0), "{sub}: {}", out.stderr);
        assert!(
            out.stdout.contains("Examples:") && out.stdout.contains(&format!("fenced {sub}")),
            "{sub} --help has no examples: {}",
            out.stdout
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_json_reports_the_acquisition_and_the_exit_as_json_lines_on_stderr() {
    let s = server();
    let out = finish(
        fenced(
            &s.url(),
            &[
                "--json",
                "run",
                "jobs",
                "--",
                "sh",
                "-c",
                "echo out; exit 3",
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(out.code, Some(3), "{}", out.stderr);
    assert_eq!(out.stdout, "out\n", "stdout stays the command's");
    let events: Vec<serde_json::Value> = out
        .stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    assert_eq!(events.len(), 2, "{}", out.stderr);
    assert_eq!(events[0]["event"], "acquired");
    assert_eq!(events[0]["name"], "jobs");
    assert!(events[0]["fencing_token"].as_u64().is_some_and(|t| t > 0));
    assert_eq!(events[1]["event"], "exited");
    assert_eq!(events[1]["code"], 3);
    assert_eq!(events[1]["lease_lost"], false);
    // Held elsewhere, with --no-wait: one "failed" line with the exit code (and the usual
    // one-line message).
    let c = client(&s).await;
    let _held = c.lock("jobs").acquire().await.unwrap();
    let busy = finish(
        fenced(
            &s.url(),
            &["--json", "run", "jobs", "--no-wait", "--", "true"],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(busy.code, Some(75));
    let failed: serde_json::Value = busy
        .stderr
        .lines()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON line: {}", busy.stderr));
    assert_eq!(failed["event"], "failed");
    assert_eq!(failed["code"], 75);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_on_a_terminal_shows_a_spinner_with_the_holder() {
    // `script` gives fenced a terminal and records what it drew on it.
    let s = server();
    let c = client(&s).await;
    let held = c.lock("busy").acquire().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let typescript = dir.path().join("typescript");
    let line = format!(
        "{} --redis {} run busy --wait 10s -- true",
        env!("CARGO_BIN_EXE_fenced"),
        s.url()
    );
    let mut script = on_a_terminal(&line, &typescript, Stdio::null());
    // Let the spinner draw a few frames (it appears after 200 ms), then free the lock.
    let shown = {
        let typescript = typescript.clone();
        poll_until(Duration::from_secs(5), move || {
            std::fs::read_to_string(&typescript)
                .unwrap_or_default()
                .contains("waiting for \"busy\", held by")
        })
        .await
    };
    held.release().await.unwrap();
    let status = wait_exit(&mut script, Duration::from_secs(10)).await;
    assert!(status.success(), "{status:?}");
    assert!(shown, "no spinner on the terminal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn top_on_a_terminal_draws_the_namespace_and_q_quits() {
    let s = server();
    let c = client(&s).await;
    let held = c.lock("deploy:web").acquire().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let typescript = dir.path().join("typescript");
    // A pty has no size until somebody sets one; a terminal over SSH has the client's.
    let line = format!(
        "stty cols 120 rows 20; {} --redis {} top --interval 200ms",
        env!("CARGO_BIN_EXE_fenced"),
        s.url()
    );
    let mut script = on_a_terminal(&line, &typescript, Stdio::piped());
    let shown = {
        let typescript = typescript.clone();
        poll_until(Duration::from_secs(10), move || {
            let screen = std::fs::read_to_string(&typescript).unwrap_or_default();
            screen.contains("deploy:web") && screen.contains("fenced top")
        })
        .await
    };
    use tokio::io::AsyncWriteExt;
    let mut keys = script.stdin.take().unwrap();
    keys.write_all(b"q").await.unwrap();
    keys.flush().await.unwrap();
    let status = wait_exit(&mut script, Duration::from_secs(10)).await;
    assert!(shown, "top did not draw the held lock");
    assert!(status.success(), "q did not quit: {status:?}");
    held.release().await.unwrap();
}

#[tokio::test]
async fn top_without_a_terminal_says_so_in_one_line() {
    let limit = Duration::from_secs(10);
    let out = finish(fenced("redis://127.0.0.1:1", &["top"]), limit).await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("needs a terminal"), "{}", out.stderr);
    let out = finish(
        fenced("redis://127.0.0.1:1", &["top", "--interval", "1ms"]),
        limit,
    )
    .await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_password_comes_from_a_file_or_the_environment_and_is_never_printed() {
    let s = RedisServer::start_with(&["--requirepass", "pw-from-elsewhere"])
        .unwrap_or_else(|e| panic!("these tests need a real redis-server: {e}"));
    let limit = Duration::from_secs(10);
    let clean = |mut cmd: Command| {
        cmd.env_remove("FENCED_REDIS_PASSWORD")
            .env_remove("REDISCLI_AUTH");
        cmd
    };
    // None given, or a wrong one: refused by the server, a permission (77), one line that
    // says authentication, no password in it.
    let out = finish(clean(fenced(&s.url(), &["status", "x"])), limit).await;
    assert_eq!(out.code, Some(77), "{}", out.stderr);
    assert_eq!(out.stderr.trim().lines().count(), 1, "{}", out.stderr);
    assert!(out.stderr.contains("authentication"), "{}", out.stderr);
    let mut wrong = clean(fenced(&s.url(), &["status", "x"]));
    wrong.env("FENCED_REDIS_PASSWORD", "not-the-password");
    let out = finish(wrong, limit).await;
    assert_eq!(out.code, Some(77), "{}", out.stderr);
    assert!(out.stderr.contains("authentication"), "{}", out.stderr);
    assert!(!out.stderr.contains("not-the-password"), "{}", out.stderr);
    // From the environment: FENCED_REDIS_PASSWORD, or redis-cli's REDISCLI_AUTH.
    for var in ["FENCED_REDIS_PASSWORD", "REDISCLI_AUTH"] {
        let mut cmd = clean(fenced(&s.url(), &["status", "x"]));
        cmd.env(var, "pw-from-elsewhere");
        let out = finish(cmd, limit).await;
        assert_eq!(out.code, Some(0), "{var}: {}", out.stderr);
        assert!(!out.stdout.contains("pw-from-elsewhere"));
    }
    // From a file (its first line).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "pw-from-elsewhere\n").unwrap();
    let out = finish(
        clean(fenced(
            &s.url(),
            &[
                "--password-file",
                file.to_str().unwrap(),
                "-v",
                "status",
                "x",
            ],
        )),
        limit,
    )
    .await;
    assert_eq!(out.code, Some(0), "{}", out.stderr);
    assert!(!out.stderr.contains("pw-from-elsewhere") && !out.stdout.contains("pw-from-elsewhere"));
    // A wrong one is refused without being echoed; a missing file is a usage error.
    std::fs::write(&file, "wrong-secret").unwrap();
    let out = finish(
        clean(fenced(
            &s.url(),
            &["--password-file", file.to_str().unwrap(), "status", "x"],
        )),
        limit,
    )
    .await;
    assert_eq!(out.code, Some(77), "{}", out.stderr);
    assert!(!out.stderr.contains("wrong-secret"), "{}", out.stderr);
    let out = finish(
        clean(fenced(
            &s.url(),
            &["--password-file", "/nonexistent/pw", "status", "x"],
        )),
        limit,
    )
    .await;
    assert_eq!(out.code, Some(64), "{}", out.stderr);
}

/// A password (from the environment, a file or the URL) for a server that has none set: one
/// line that says so, exit 64, the password never echoed, and no word of a failed
/// authentication.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_for_a_server_without_one_is_named_as_such() {
    let s = server();
    let limit = Duration::from_secs(10);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pw");
    std::fs::write(&file, "not-needed-secret\n").unwrap();
    let in_url = s.url().replace("redis://", "redis://:not-needed-secret@");
    let mut from_env = fenced(&s.url(), &["status", "x"]);
    from_env
        .env_remove("REDISCLI_AUTH")
        .env("FENCED_REDIS_PASSWORD", "not-needed-secret");
    let mut from_file = fenced(
        &s.url(),
        &["--password-file", file.to_str().unwrap(), "status", "x"],
    );
    from_file
        .env_remove("FENCED_REDIS_PASSWORD")
        .env_remove("REDISCLI_AUTH");
    let mut from_url = fenced(&in_url, &["status", "x"]);
    from_url
        .env_remove("FENCED_REDIS_PASSWORD")
        .env_remove("REDISCLI_AUTH");
    for (what, cmd) in [("env", from_env), ("file", from_file), ("url", from_url)] {
        let out = finish(cmd, limit).await;
        assert_eq!(out.code, Some(64), "{what}: {}", out.stderr);
        assert_eq!(
            out.stderr.trim().lines().count(),
            1,
            "{what}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("no password set"),
            "{what}: {}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("authentication"),
            "{what}: {}",
            out.stderr
        );
        assert!(
            !out.stderr.contains("not-needed-secret"),
            "{what}: {}",
            out.stderr
        );
    }
}

/// Runs the shell `line` on a terminal of its own (a pty from `script`), recording what it
/// draws in `typescript`.
fn on_a_terminal(line: &str, typescript: &std::path::Path, stdin: Stdio) -> Child {
    Command::new("script")
        .args(["-qfc", line, typescript.to_str().unwrap()])
        .stdin(stdin)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("`script` (util-linux) gives the test a terminal")
}

/// Polls `check` every 20 ms until it holds or `limit` passes.
async fn poll_until(limit: Duration, check: impl Fn() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if check() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_works_on_a_cluster_behind_sentinel_and_on_redlock_over_several_masters() {
    let cluster = fenced_testkit::RedisCluster::start(3, 0)
        .unwrap_or_else(|e| panic!("this test needs a real redis-server cluster: {e}"));
    let seed = &cluster.urls()[1];
    let show = "test -n \"$FENCED_TOKEN\" && echo token=$FENCED_TOKEN";
    let on_cluster = finish(
        fenced_bare(&["--cluster", seed, "run", "job", "--", "sh", "-c", show]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(on_cluster.code, Some(0), "{}", on_cluster.stderr);
    assert!(
        on_cluster.stdout.starts_with("token="),
        "{}",
        on_cluster.stdout
    );
    // The listings walk every master (the job was released: nothing is held).
    let list = finish(
        fenced_bare(&["--cluster", seed, "list"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    assert!(!list.stdout.contains("job "), "{}", list.stdout);
    // --cluster and --redis together: a usage error.
    let both = finish(
        fenced_bare(&["--cluster", seed, "--redis", seed, "status", "job"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(both.code, Some(64), "{}", both.stderr);

    let masters: Vec<RedisServer> = (0..3).map(|_| server()).collect();
    let mut args: Vec<String> = Vec::new();
    for m in &masters {
        args.push("--redis".into());
        args.push(m.url());
    }
    args.extend(["run", "job", "--", "sh", "-c", show].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let on_redlock = finish(fenced_bare(&args), Duration::from_secs(20)).await;
    assert_eq!(on_redlock.code, Some(0), "{}", on_redlock.stderr);
    assert!(
        on_redlock.stdout.starts_with("token="),
        "{}",
        on_redlock.stdout
    );

    // `status` shows each master's view, and who holds the lock on a majority.
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let holder = fenced::Client::redlock_builder(&urls)
        .connect()
        .await
        .unwrap();
    let held = holder.lock("job").acquire().await.unwrap();
    let mut masters = masters;
    masters[2].kill().unwrap();
    let mut status_args = args[..6].to_vec();
    status_args.extend(["status", "job"]);
    let status = finish(fenced_bare(&status_args), Duration::from_secs(20)).await;
    assert_eq!(status.code, Some(0), "{}", status.stderr);
    assert_eq!(
        status.stdout.matches("held by ").count(),
        3,
        "two masters and the verdict: {}",
        status.stdout
    );
    assert!(status.stdout.contains("unreadable"), "{}", status.stdout);
    assert!(status.stdout.contains("on a majority"), "{}", status.stdout);
    status_args.insert(0, "--json");
    let json = finish(fenced_bare(&status_args), Duration::from_secs(20)).await;
    let value: serde_json::Value = serde_json::from_str(json.stdout.trim()).unwrap();
    assert_eq!(value["held"], true, "{value}");
    assert_eq!(value["nodes"].as_array().map(Vec::len), Some(3), "{value}");
    held.release().await.unwrap();

    // On a cluster, the one node that keeps the name: the master of its slot.
    let on_cluster = finish(
        fenced_bare(&["--cluster", seed, "status", "job"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(on_cluster.code, Some(0), "{}", on_cluster.stderr);
    assert!(
        on_cluster.stdout.contains("(master of slot "),
        "{}",
        on_cluster.stdout
    );
}

/// The exit codes of the table that other tests do not reach: 65 for a key of another type,
/// 69 with "quorum" when a majority of Redlock masters is down, 77 for a missing permission
/// (naming the command), and 78 for what the deployment cannot do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_failure_exits_with_the_code_of_the_table() {
    let limit = Duration::from_secs(20);
    let s = server();
    let mut conn = raw(&s).await;
    let _: () = fenced::redis::cmd("HSET")
        .arg("fenced:{typed}")
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let wrong = finish(fenced(&s.url(), &["run", "typed", "--", "true"]), limit).await;
    assert_eq!(wrong.code, Some(65), "{}", wrong.stderr);
    assert!(wrong.stderr.contains("WRONGTYPE"), "{}", wrong.stderr);

    let _: () = fenced::redis::cmd("ACL")
        .arg(&[
            "SETUSER", "reader", "on", ">pw", "~*", "&*", "+@all", "-set",
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = s.url().replace("redis://", "redis://reader:pw@");
    let denied = finish(fenced(&url, &["run", "acl", "--", "true"]), limit).await;
    assert_eq!(denied.code, Some(77), "{}", denied.stderr);
    assert!(denied.stderr.contains("\"set\""), "{}", denied.stderr);

    let mut masters: Vec<RedisServer> = (0..5).map(|_| server()).collect();
    let mut args: Vec<String> = Vec::new();
    for m in &masters {
        args.extend(["--redis".to_owned(), m.url()]);
    }
    let on_redlock = |more: &[&str]| {
        let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
        all.extend(["--timeout", "300ms"]);
        all.extend(more);
        fenced_bare(&all)
    };
    let latch = finish(on_redlock(&["latch", "gate", "count"]), limit).await;
    assert_eq!(latch.code, Some(78), "{}", latch.stderr);
    let line = latch.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.len() <= 160, "{line}");
    assert!(
        line.contains("a latch") && line.contains("Redlock"),
        "{line}"
    );
    // Paused, not killed: a killed master's port is free, and another test's new server may
    // take it and answer in its place.
    for m in masters.iter_mut().take(3) {
        m.pause().unwrap();
    }
    let minority = finish(on_redlock(&["run", "q", "--no-wait", "--", "true"]), limit).await;
    for m in masters.iter_mut().take(3) {
        m.resume().unwrap();
    }
    assert_eq!(minority.code, Some(69), "{}", minority.stderr);
    assert!(minority.stderr.contains("quorum"), "{}", minority.stderr);
    assert_eq!(minority.stderr.lines().count(), 1, "{}", minority.stderr);
}

/// A key of another type where a lock keeps its string: every flavour of `run` (none given a
/// `--wait`, so each would wait forever), `status` and `list` name it at once and exit 65.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_another_type_is_named_at_once_with_exit_65() {
    let limit = Duration::from_secs(20);
    let s = server();
    let c = client(&s).await;
    let mut conn = raw(&s).await;
    let _: () = fenced::redis::cmd("HSET")
        .arg("fenced:{typed}")
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let one_line_naming_it = |what: &str, done: &Done| {
        assert_eq!(done.code, Some(65), "{what}: {}", done.stderr);
        assert!(
            done.stderr.contains("fenced:{typed}"),
            "{what}: {}",
            done.stderr
        );
        assert!(
            done.took < Duration::from_secs(5),
            "{what}: {:?}",
            done.took
        );
    };
    for flags in [
        &[][..],
        &["--unfenced"],
        &["--hand-off"],
        &["--write"],
        &["--read"],
        &["--fair"],
    ] {
        let mut args = vec!["run", "typed"];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "true"]);
        let done = finish(fenced(&s.url(), &args), limit).await;
        one_line_naming_it(&format!("run {flags:?}"), &done);
        assert_eq!(done.stderr.trim_end().lines().count(), 1, "{}", done.stderr);
    }
    let status = finish(fenced(&s.url(), &["status", "typed"]), limit).await;
    one_line_naming_it("status", &status);
    // `list` lists the rest, then names the key.
    let held = c.lock("fine").acquire().await.unwrap();
    let list = finish(fenced(&s.url(), &["list"]), limit).await;
    one_line_naming_it("list", &list);
    assert!(list.stdout.contains("fine"), "{}", list.stdout);
    let json = finish(fenced(&s.url(), &["--json", "list"]), limit).await;
    assert_eq!(json.code, Some(65), "{}", json.stderr);
    let all: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let kinds: Vec<(&str, &str)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["kind"].as_str().unwrap_or(""),
                v["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(kinds.contains(&("lock", "fine")), "{kinds:?}");
    assert!(kinds.contains(&("unreadable", "typed")), "{kinds:?}");
    held.release().await.unwrap();
}

/// A key of another type where a lock keeps its string: every message gives the fix, and
/// `release --force` says how to delete it, which `--force` given twice does; the name then
/// works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_with_force_twice_deletes_a_lock_key_another_program_wrote() {
    let limit = Duration::from_secs(20);
    let s = server();
    let mut conn = raw(&s).await;
    let _: () = fenced::redis::cmd("HSET")
        .arg("fenced:{typed}")
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let run = finish(fenced(&s.url(), &["run", "typed", "--", "true"]), limit).await;
    assert_eq!(run.code, Some(65), "{}", run.stderr);
    assert_eq!(run.stderr.trim_end().lines().count(), 1, "{}", run.stderr);
    assert!(
        run.stderr.contains("fenced release typed --force --force")
            && run.stderr.contains("another name or --namespace"),
        "{}",
        run.stderr
    );
    let once = finish(fenced(&s.url(), &["release", "typed", "--force"]), limit).await;
    assert_eq!(once.code, Some(65), "{}", once.stderr);
    assert_eq!(once.stderr.trim_end().lines().count(), 1, "{}", once.stderr);
    assert!(once.stderr.contains("--force twice"), "{}", once.stderr);
    let kept: i64 = fenced::redis::cmd("EXISTS")
        .arg("fenced:{typed}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kept, 1, "one --force deleted another program's key");
    let twice = finish(
        fenced(&s.url(), &["release", "typed", "--force", "--force"]),
        limit,
    )
    .await;
    assert_eq!(twice.code, Some(0), "{}", twice.stderr);
    assert!(
        twice.stdout.contains("deleted the key \"fenced:{typed}\""),
        "{}",
        twice.stdout
    );
    let left: i64 = fenced::redis::cmd("EXISTS")
        .arg("fenced:{typed}")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(left, 0);
    let again = finish(fenced(&s.url(), &["run", "typed", "--", "true"]), limit).await;
    assert_eq!(again.code, Some(0), "{}", again.stderr);
}

/// Waits (up to 10 s) until the election `name` has a leader, and returns its value.
async fn until_elected(c: &fenced::Client, name: &str) -> fenced::Leader {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(l) = c.election(name).leader().await.unwrap() {
            return l;
        }
        assert!(Instant::now() < deadline, "{name} never had a leader");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_runs_the_command_as_leader_with_its_term_and_leader_prints_it() {
    let s = server();
    let done = finish(
        fenced(&s.url(), &["leader", "sched"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(75), "nobody leads: {}", done.stderr);
    let fenced_bin = env!("CARGO_BIN_EXE_fenced");
    let script = format!(
        "echo \"$FENCED_TERM $FENCED_TOKEN $FENCED_VALUE $FENCED_NAME\"; {fenced_bin} --redis {} --json leader sched; exit 3",
        s.url()
    );
    let done = finish(
        fenced(
            &s.url(),
            &[
                "elect", "sched", "--value", "host-a", "--", "sh", "-c", &script,
            ],
        ),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(3), "the command's code: {}", done.stderr);
    let mut lines = done.stdout.lines();
    let env: Vec<&str> = lines.next().unwrap().split(' ').collect();
    assert_eq!(env[0], env[1], "FENCED_TERM is the fencing token");
    assert_eq!(&env[2..], ["host-a", "sched"]);
    let leader: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(leader["leader"]["value"], "host-a");
    assert_eq!(leader["leader"]["term"].to_string(), env[0]);
    // Stepped down when the command ended.
    let c = client(&s).await;
    assert_eq!(c.election("sched").leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_leadership_stops_the_command_and_exits_76_and_again_campaigns_anew() {
    let s = server();
    let c = client(&s).await;
    let mut conn = redis::Client::open(s.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let depose = async |conn: &mut redis::aio::MultiplexedConnection, name: &str| {
        let _: () = redis::cmd("DEL")
            .arg(format!("fenced:election:{{{name}}}"))
            .query_async(conn)
            .await
            .unwrap();
    };
    let mut once = fenced(
        &s.url(),
        &["elect", "once", "--ttl", "600ms", "--", "sleep", "30"],
    )
    .spawn()
    .unwrap();
    until_elected(&c, "once").await;
    depose(&mut conn, "once").await;
    assert_eq!(
        wait_exit(&mut once, Duration::from_secs(10)).await.code(),
        Some(76)
    );

    // --again: deposed, it campaigns anew and leads with a newer term; a signal ends it.
    let mut standby = fenced(
        &s.url(),
        &[
            "elect", "again", "--again", "--ttl", "600ms", "--value", "s", "--", "sleep", "30",
        ],
    )
    .spawn()
    .unwrap();
    let first = until_elected(&c, "again").await;
    depose(&mut conn, "again").await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let second = loop {
        if let Some(l) = c.election("again").leader().await.unwrap()
            && l.term > first.term
        {
            break l;
        }
        assert!(Instant::now() < deadline, "the standby did not lead again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(second.value, "s");
    signal(&standby, Signal::SIGTERM);
    let status = wait_exit(&mut standby, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(128 + 15), "SIGTERM ends a standby");
    assert_eq!(
        c.election("again").leader().await.unwrap(),
        None,
        "it stepped down"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn again_backs_off_while_the_command_fails_at_once_and_says_how_each_leadership_ended() {
    let s = server();
    let mut standby = fenced(&s.url(), &["elect", "flaky", "--again", "--", "false"])
        .spawn()
        .unwrap();
    let stderr = standby.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let mut ends = Vec::new();
    while ends.len() < 4 {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("no line within 10 s")
            .unwrap()
            .expect("fenced ended");
        assert!(
            line.contains("false exited with code 1 after") && line.contains("campaigning again"),
            "{line}"
        );
        ends.push(Instant::now());
    }
    // Pauses of 100, 200 and 400 ms between the four: not a campaign every 100 ms.
    let spread = ends[3] - ends[0];
    assert!(spread >= Duration::from_millis(700), "{spread:?}");
    signal(&standby, Signal::SIGTERM);
    let status = wait_exit(&mut standby, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(128 + 15));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_rides_out_a_redis_that_is_down_or_paused_at_start_within_its_wait() {
    let mut s = server();
    for paused in [false, true] {
        if paused {
            s.pause().unwrap();
        } else {
            s.kill().unwrap();
        }
        let mut run = fenced(
            &s.url(),
            &[
                "--timeout",
                "500ms",
                "run",
                "late",
                "--wait",
                "20s",
                "--",
                "true",
            ],
        )
        .spawn()
        .unwrap();
        let stderr = run.stderr.take().unwrap();
        let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("no word on stderr within 10 s")
            .unwrap()
            .expect("fenced ended");
        assert!(
            line.contains("trying again until the wait runs out"),
            "{line}"
        );
        if paused {
            s.resume().unwrap();
        } else {
            s.restart().unwrap();
        }
        let status = wait_exit(&mut run, Duration::from_secs(20)).await;
        assert_eq!(status.code(), Some(0), "paused {paused}: {line}");
    }
    // Without a wait to ride it out in, a Redis that is down fails at once.
    s.kill().unwrap();
    let done = finish(
        fenced(&s.url(), &["run", "late", "--no-wait", "--", "true"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(69), "{}", done.stderr);
    assert!(!done.stderr.contains("trying again"), "{}", done.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_watch_prints_a_line_per_change() {
    let s = server();
    let c = client(&s).await;
    let mut watch = fenced(&s.url(), &["--json", "leader", "w", "--watch"])
        .spawn()
        .unwrap();
    let stdout = watch.stdout.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    let mut next = async || -> serde_json::Value {
        let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
            .await
            .expect("no line within 10 s")
            .unwrap()
            .expect("the watch ended");
        serde_json::from_str(&line).unwrap()
    };
    assert_eq!(next().await["leader"], serde_json::Value::Null);
    let leadership = c.election("w").campaign("one").await.unwrap();
    assert_eq!(next().await["leader"]["value"], "one");
    leadership.proclaim("two").await.unwrap();
    let line = next().await;
    assert_eq!(
        (
            line["leader"]["value"].as_str(),
            line["leader"]["proclaims"].as_u64()
        ),
        (Some("two"), Some(1))
    );
    leadership.resign().await.unwrap();
    assert_eq!(next().await["leader"], serde_json::Value::Null);
    signal(&watch, Signal::SIGINT);
    assert_eq!(
        wait_exit(&mut watch, Duration::from_secs(10)).await.code(),
        Some(130)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_status_show_an_election_its_leader_and_candidates() {
    let s = server();
    let c = client(&s).await;
    let leading = c.election("jobs").campaign("host-a").await.unwrap();
    let other = client(&s).await;
    let election = other.election("jobs");
    let waiting = tokio::spawn(async move { election.campaign("host-b").await });
    let status = c.election("jobs");
    let deadline = Instant::now() + Duration::from_secs(10);
    while status.status().await.unwrap().candidates < 1 {
        assert!(Instant::now() < deadline, "the candidate never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let done = finish(
        fenced(&s.url(), &["--json", "list"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let all: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    let listed = all
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "election")
        .expect("the election is listed");
    assert_eq!(listed["name"], "jobs");
    assert_eq!(listed["leader"], "host-a");
    assert_eq!(listed["term"], leading.term().get());
    assert_eq!(listed["candidates"], 1);
    let done = finish(
        fenced(&s.url(), &["status", "jobs"]),
        Duration::from_secs(10),
    )
    .await;
    assert!(
        done.stdout.contains(&format!(
            "election: led by \"host-a\" in term {}",
            leading.term()
        )),
        "{}",
        done.stdout
    );
    leading.resign().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .resign()
        .await
        .unwrap();
}

/// Waits (up to 10 s) until the election `name` counts `n` candidates.
async fn until_candidates(c: &fenced::Client, name: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.election(name).status().await.unwrap().candidates != n {
        assert!(
            Instant::now() < deadline,
            "{name} never had {n} candidate(s)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_lists_the_candidates_in_order_and_counts_the_changes_of_leader() {
    let s = server();
    let c = client(&s).await;
    let first = c.election("crew").campaign("host-a").await.unwrap();
    let (b, d) = (client(&s).await, client(&s).await);
    let election = b.election("crew");
    let second = tokio::spawn(async move { election.campaign("host-b").await });
    until_candidates(&c, "crew", 1).await;
    first.resign().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(10), second)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let election = d.election("crew");
    let third = tokio::spawn(async move { election.campaign("host-c").await });
    until_candidates(&c, "crew", 1).await;

    let done = finish(
        fenced(&s.url(), &["--json", "leader", "crew"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let shown: serde_json::Value = serde_json::from_str(done.stdout.trim()).unwrap();
    assert_eq!(shown["leader"]["value"], "host-b");
    assert_eq!(shown["leader"]["term"], second.term().get());
    assert_eq!(shown["leader"]["transitions"], 1, "{shown}");
    assert_eq!(shown["candidates"], 1);
    let queue = shown["queue"].as_array().expect("the candidates, listed");
    assert_eq!(queue.len(), 1, "{shown}");
    assert_eq!(queue[0]["value"], "host-c");
    assert!(queue[0]["queued_ms"].is_u64(), "{shown}");
    assert!(queue[0]["queued_since_ms"].is_u64(), "{shown}");

    let done = finish(
        fenced(&s.url(), &["leader", "crew"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    assert!(
        done.stdout.contains("1 change(s) of leader"),
        "{}",
        done.stdout
    );
    assert!(
        done.stdout.contains("1. \"host-c\", queued for "),
        "{}",
        done.stdout
    );
    let done = finish(
        fenced(&s.url(), &["status", "crew"]),
        Duration::from_secs(10),
    )
    .await;
    assert!(
        done.stdout.contains("1. \"host-c\", queued for "),
        "{}",
        done.stdout
    );

    second.resign().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .resign()
        .await
        .unwrap();
}

/// A Redis user who may not run scripts: `run` works (fenced and unfenced, the command gets
/// its token), learned from the first refusal or asked for with `--no-scripts`; a command
/// that needs scripts exits 78 with one line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_runs_work_and_what_needs_scripts_exits_78() {
    let s = server();
    let mut conn = raw(&s).await;
    let _: () = fenced::redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "noscripts",
            "on",
            ">pw",
            "~*",
            "&*",
            "+@all",
            "-@scripting",
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = format!("redis://noscripts:pw@127.0.0.1:{}", s.port());
    let check = "test -n \"$FENCED_TOKEN\" && test \"$FENCED_NAME\" = job";
    for flags in [&[][..], &["--no-scripts"][..]] {
        let mut args = flags.to_vec();
        args.extend(["run", "job", "--", "sh", "-c", check]);
        let done = finish(fenced(&url, &args), Duration::from_secs(10)).await;
        assert_eq!(done.code, Some(0), "{flags:?}: {}", done.stderr);
        let mut args = flags.to_vec();
        args.extend(["run", "--unfenced", "job", "--", "true"]);
        let done = finish(fenced(&url, &args), Duration::from_secs(10)).await;
        assert_eq!(done.code, Some(0), "{flags:?}: {}", done.stderr);
    }
    // Every run gave the name back.
    assert!(
        client(&s)
            .await
            .lock("job")
            .status()
            .await
            .unwrap()
            .holder
            .is_none()
    );
    // Inspecting works too.
    for args in [
        &["status", "job"][..],
        &["list"][..],
        &["release", "job", "--force"][..],
    ] {
        let done = finish(fenced(&url, args), Duration::from_secs(10)).await;
        assert_eq!(done.code, Some(0), "{args:?}: {}", done.stderr);
    }
    let latch = finish(
        fenced(&url, &["--no-scripts", "latch", "go", "arm", "2"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(latch.code, Some(78), "{}", latch.stderr);
    assert_eq!(latch.stderr.trim().lines().count(), 1, "{}", latch.stderr);
    assert!(latch.stderr.contains("script"), "{}", latch.stderr);
    // One short line: the primitive, and the fix (the client was told to send no scripts).
    assert!(latch.stderr.trim().len() <= 160, "{}", latch.stderr);
    assert!(
        latch.stderr.contains("a latch") && latch.stderr.contains("--no-scripts"),
        "{}",
        latch.stderr
    );
    // Refused by the ACL: the command refused, and the grant that fixes it.
    let refused = finish(
        fenced(&url, &["latch", "go", "arm", "2"]),
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(refused.code, Some(78), "{}", refused.stderr);
    let line = refused.stderr.trim();
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(line.len() <= 160, "{line}");
    assert!(
        line.contains("a latch")
            && (line.contains("evalsha") || line.contains("script|load"))
            && line.contains("+@scripting")
            && !line.contains("needed by"),
        "{line}"
    );
}

/// Without scripts, `status` and `list` read every kind as with them: a held semaphore and a
/// read-write lock's reader are listed (exit 0), and the semaphore's status names it a
/// semaphore with its permits, never a free lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_scripts_status_and_list_show_a_held_semaphore_for_what_it_is() {
    let s = server();
    let c = client(&s).await;
    let _permits = c.semaphore("pool", 4).acquire_many(2).await.unwrap();
    let _reader = c.rw_lock("doc").read().await.unwrap();
    let run = |args: &'static [&'static str]| {
        let url = s.url();
        async move {
            let mut all = vec!["--no-scripts"];
            all.extend(args);
            finish(fenced(&url, &all), Duration::from_secs(10)).await
        }
    };
    let list = run(&["list"]).await;
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    for expected in ["SEMAPHORE", "pool", "RW LOCK", "doc"] {
        assert!(
            list.stdout.contains(expected),
            "{expected}: {}",
            list.stdout
        );
    }
    let pool = run(&["status", "pool"]).await;
    assert_eq!(pool.code, Some(0), "{}", pool.stderr);
    assert!(
        pool.stdout.contains("kind:     semaphore\n"),
        "{}",
        pool.stdout
    );
    assert!(
        pool.stdout.contains("permits:  2 held by 1 holder(s)"),
        "{}",
        pool.stdout
    );
    assert!(
        !pool.stdout.contains("state:") && !pool.stdout.contains("free"),
        "{}",
        pool.stdout
    );
    let json = run(&["--json", "status", "pool"]).await;
    let json: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(json["kind"], "semaphore", "{json}");
    assert_eq!(json["semaphore"]["permits_held"], 2, "{json}");
    let json = run(&["--json", "list"]).await;
    let all: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    let semaphore = all
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["kind"] == "semaphore")
        .unwrap_or_else(|| panic!("no semaphore in {all}"));
    assert_eq!(semaphore["permits_held"], 2, "{all}");
    assert_eq!(semaphore["holders"], 1, "{all}");
}

/// `--heartbeat-file`: the lease is renewed only while CMD keeps touching the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_stops_touching_its_heartbeat_file_loses_the_lock_and_exits_76() {
    let s = server();
    let c = client(&s).await;
    let dir = tempfile::tempdir().unwrap();
    let url = s.url();
    let run = |name: &str, beat: &str, script: &str| {
        fenced(
            &url,
            &[
                "run",
                name,
                "--ttl",
                "600ms",
                "--heartbeat-file",
                beat,
                "--heartbeat-timeout",
                "800ms",
                "--kill-after",
                "1s",
                "--",
                "sh",
                "-c",
                script,
            ],
        )
    };
    // Touched every 100 ms, a job of 1.5 s runs to its end.
    let beat = dir.path().join("steady");
    let beat = beat.to_str().unwrap();
    let steady = format!("i=0; while [ $i -lt 15 ]; do touch {beat}; sleep 0.1; i=$((i+1)); done");
    let done = finish(run("steady", beat, &steady), Duration::from_secs(15)).await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);

    // Touched for a while (the last time 0.8 s in), then hung: stopped as on a lost lease.
    let beat = dir.path().join("hangs");
    let beat = beat.to_str().unwrap();
    let hangs = format!("for i in 1 2 3 4 5; do touch {beat}; sleep 0.2; done; sleep 30");
    let done = finish(run("hangs", beat, &hangs), Duration::from_secs(15)).await;
    assert_eq!(done.code, Some(76), "{}", done.stderr);
    assert!(
        done.stderr.contains(&format!("{beat} untouched for")),
        "{}",
        done.stderr
    );
    assert!(
        done.took >= Duration::from_millis(1500),
        "stopped {:?} after the start, before the file was 800ms old",
        done.took
    );
    assert!(done.took < Duration::from_secs(6), "{:?}", done.took);
    // Its lock key was left to run out: the name is free within a ttl.
    let next = c
        .lock("hangs")
        .with_wait(fenced::WaitPolicy::up_to(Duration::from_secs(2)))
        .acquire()
        .await;
    next.expect("free within a ttl").release().await.unwrap();
}

/// `--lock-delay`: a run that ends frees the name at once; a killed one leaves it taken for
/// its ttl and the delay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_delay_keeps_a_killed_runs_name_taken_and_a_finished_run_frees_it_at_once() {
    let s = server();
    let c = client(&s).await;
    let delayed = |cmd: &[&str]| {
        let mut args = vec![
            "run",
            "billing",
            "--ttl",
            "600ms",
            "--lock-delay",
            "1500ms",
            "--",
        ];
        args.extend_from_slice(cmd);
        fenced(&s.url(), &args)
    };
    let mut run = delayed(&["sleep", "2.5"]).spawn().unwrap();
    until_held(&c, "billing").await;
    // Past the grant's own expiry: the renewals keep the lease its ttl and the delay.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let left = c.lock("billing").status().await.unwrap().holder;
    let left = left.and_then(|h| h.ttl_left);
    assert!(
        left.is_some_and(|l| l > Duration::from_millis(600)),
        "{left:?} left in Redis"
    );
    let status = wait_exit(&mut run, Duration::from_secs(10)).await;
    assert_eq!(status.code(), Some(0));
    let free = c.lock("billing").try_acquire().await.unwrap();
    free.expect("free at once when the command ended")
        .release()
        .await
        .unwrap();

    let mut run = delayed(&["sleep", "30"]).spawn().unwrap();
    until_held(&c, "billing").await;
    signal(&run, Signal::SIGKILL);
    wait_exit(&mut run, Duration::from_secs(5)).await;
    let killed_at = Instant::now();
    let next = c
        .lock("billing")
        .with_wait(fenced::WaitPolicy::up_to(Duration::from_secs(5)))
        .acquire()
        .await
        .unwrap();
    let after = killed_at.elapsed();
    assert!(
        after >= Duration::from_millis(1500),
        "free {after:?} after fenced was killed, within the delay"
    );
    assert!(
        after < Duration::from_millis(3500),
        "free only after {after:?}"
    );
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_and_lock_delay_flags_are_checked_before_connecting() {
    let url = "redis://127.0.0.1:1"; // never contacted
    let heartbeat = ["--heartbeat-file", "f", "--heartbeat-timeout"];
    for (what, args) in [
        (
            "a heartbeat file without its timeout",
            vec!["run", "x", "--heartbeat-file", "f", "--", "true"],
        ),
        (
            "a heartbeat timeout without its file",
            vec!["run", "x", "--heartbeat-timeout", "1s", "--", "true"],
        ),
        (
            "a heartbeat timeout of zero",
            [&["run", "x"][..], &heartbeat[..], &["0s", "--", "true"][..]].concat(),
        ),
        (
            "a lock delay that is no duration",
            vec!["run", "x", "--lock-delay", "soon", "--", "true"],
        ),
        (
            "a lock delay past the longest lease",
            vec!["run", "x", "--lock-delay", "400days", "--", "true"],
        ),
        (
            "a lock delay on a ticket's lease",
            vec![
                "run",
                "x",
                "--ticket",
                "t",
                "--lock-delay",
                "1s",
                "--",
                "true",
            ],
        ),
        (
            "a heartbeat on a lease handed off",
            [
                &["run", "x", "--hand-off"][..],
                &heartbeat[..],
                &["1s", "--", "true"][..],
            ]
            .concat(),
        ),
        (
            "an election's heartbeat timeout of zero",
            [
                &["elect", "x"][..],
                &heartbeat[..],
                &["0s", "--", "true"][..],
            ]
            .concat(),
        ),
    ] {
        let done = finish(fenced(url, &args), Duration::from_secs(10)).await;
        assert_eq!(done.code, Some(64), "{what}: {}", done.stderr);
        assert_eq!(
            done.stderr.trim_end().lines().count(),
            1,
            "{what}: {:?}",
            done.stderr
        );
    }
}

/// A server started with `args`; fails loudly without redis-server.
fn server_with(args: &[&str]) -> RedisServer {
    RedisServer::start_with(args)
        .unwrap_or_else(|e| panic!("these tests need a real redis-server: {e}"))
}

/// The checks `fenced doctor` reports for each server, as their lines start and as their
/// JSON fields are named.
const DOCTOR_CHECKS: [(&str, &str); 8] = [
    ("server", "server"),
    ("scripts", "scripts"),
    ("acl", "acl"),
    ("eviction", "eviction"),
    ("persistence", "persistence"),
    ("replicas", "replicas"),
    ("keyspace events", "keyspace_events"),
    ("clock", "clock"),
];

/// The line of `check` in a `fenced doctor` report.
fn doctor_line<'a>(stdout: &'a str, check: &str) -> &'a str {
    stdout
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{check} ")))
        .unwrap_or_else(|| panic!("no {check} line in:\n{stdout}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_finds_a_plain_server_fit_and_reports_every_check() {
    let s = server();
    let done = finish(fenced(&s.url(), &["doctor"]), Duration::from_secs(20)).await;
    assert_eq!(done.code, Some(0), "{}{}", done.stdout, done.stderr);
    for (check, _) in DOCTOR_CHECKS {
        doctor_line(&done.stdout, check);
    }
    assert!(
        doctor_line(&done.stdout, "eviction").contains(" ok "),
        "{}",
        done.stdout
    );
    // The test servers keep nothing across a restart: a warning with its fix, not a failure.
    let persistence = doctor_line(&done.stdout, "persistence");
    assert!(
        persistence.contains("warn") && persistence.contains("appendonly yes"),
        "{persistence}"
    );
    assert!(done.stdout.contains("fit for locks"), "{}", done.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_exits_78_on_a_server_that_may_evict_lock_keys_and_says_what_to_change() {
    let s = server_with(&["--maxmemory", "10mb", "--maxmemory-policy", "allkeys-lru"]);
    let done = finish(fenced(&s.url(), &["doctor"]), Duration::from_secs(20)).await;
    assert_eq!(done.code, Some(78), "{}{}", done.stdout, done.stderr);
    let eviction = doctor_line(&done.stdout, "eviction");
    assert!(
        eviction.contains("fail")
            && eviction.contains("allkeys-lru")
            && eviction.contains("CONFIG SET maxmemory-policy noeviction"),
        "{eviction}"
    );
    assert!(done.stdout.contains("not fit for locks"), "{}", done.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_json_gives_every_check_a_status() {
    let s = server();
    let done = finish(
        fenced(&s.url(), &["--json", "doctor"]),
        Duration::from_secs(20),
    )
    .await;
    assert_eq!(done.code, Some(0), "{}", done.stderr);
    let report: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(report["fit"], true, "{report}");
    let node = &report["nodes"][0];
    assert_eq!(node["node"], format!("127.0.0.1:{}", s.port()), "{report}");
    for (_, field) in DOCTOR_CHECKS {
        let status = node["checks"][field]["status"].as_str().unwrap_or("");
        assert!(
            ["ok", "info", "warn", "fail", "unknown"].contains(&status),
            "{field}: {report}"
        );
    }
    assert_eq!(node["checks"]["eviction"]["status"], "ok", "{report}");
    assert_eq!(
        node["checks"]["eviction"]["policy"], "noeviction",
        "{report}"
    );
    assert_eq!(node["checks"]["scripts"]["allowed"], true, "{report}");
}

/// A user the ACL refuses `CONFIG` (as managed services do): the lines that need it say
/// unknown and why, and fail nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_says_unknown_where_config_is_refused_and_still_exits_0() {
    let s = server();
    let _: () = fenced::redis::cmd("ACL")
        .arg(&[
            "SETUSER", "doctor", "on", ">pw", "~*", "&*", "+@all", "-config",
        ])
        .query_async(&mut raw(&s).await)
        .await
        .unwrap();
    let url = s.url().replace("redis://", "redis://doctor:pw@");
    let done = finish(fenced(&url, &["doctor"]), Duration::from_secs(20)).await;
    assert_eq!(done.code, Some(0), "{}{}", done.stdout, done.stderr);
    for check in ["eviction", "persistence", "keyspace events"] {
        let line = doctor_line(&done.stdout, check);
        assert!(
            line.contains("unknown (CONFIG GET refused:"),
            "{check}: {line}"
        );
    }
    // What the user may do is still read.
    assert!(
        !doctor_line(&done.stdout, "scripts").contains("unknown"),
        "{}",
        done.stdout
    );
}

/// Several masters (Redlock): each is reported, and the one that may evict lock keys is the
/// one marked fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_reports_each_master_and_fails_on_the_one_that_may_evict() {
    let masters = [
        server(),
        server_with(&["--maxmemory", "10mb", "--maxmemory-policy", "volatile-lru"]),
        server(),
    ];
    let mut args: Vec<String> = Vec::new();
    for m in &masters {
        args.extend(["--redis".to_owned(), m.url()]);
    }
    args.extend(["--json".to_owned(), "doctor".to_owned()]);
    let all: Vec<&str> = args.iter().map(String::as_str).collect();
    let done = finish(fenced_bare(&all), Duration::from_secs(30)).await;
    assert_eq!(done.code, Some(78), "{}{}", done.stdout, done.stderr);
    let report: serde_json::Value = serde_json::from_str(&done.stdout).unwrap();
    assert_eq!(report["fit"], false, "{report}");
    for (i, m) in masters.iter().enumerate() {
        let node = &report["nodes"][i];
        assert_eq!(node["node"], format!("127.0.0.1:{}", m.port()), "{report}");
        let want = if i == 1 { "fail" } else { "ok" };
        assert_eq!(node["checks"]["eviction"]["status"], want, "{report}");
    }
}

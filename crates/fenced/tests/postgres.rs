//! The Postgres tier (on demand: `scripts/test --postgres`): the SQLite chaos pattern of
//! `sql_fencing.rs` on a real PostgreSQL server, started here on a free loopback port as the
//! test kit starts redis-server, and stopped at the end. Statements go through `psql`, so
//! the tier needs no Rust client of its own.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fenced::{FencingToken, WaitPolicy};

use crate::support::{client, server};

/// A throwaway PostgreSQL server (as the `postgres` user when run as root, which the server
/// refuses to run as), in a process group of its own, stopped when dropped.
struct Postgres {
    dir: tempfile::TempDir,
    child: Child,
    port: u16,
}

/// Where the server's programs are: `$FENCED_PG_BIN`, or Debian's newest.
fn pg_bin(program: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os("FENCED_PG_BIN") {
        return PathBuf::from(dir).join(program);
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    versions.sort();
    match versions.last() {
        Some(v) => v.join("bin").join(program),
        None => panic!("the Postgres tier needs PostgreSQL (apt-get install postgresql)"),
    }
}

/// Whether this process runs as root (from `/proc/self/status`).
fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

fn as_postgres_user(program: &str) -> Command {
    let root = is_root();
    let mut cmd = if root {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(pg_bin(program));
        c
    } else {
        Command::new(pg_bin(program))
    };
    cmd.stdin(Stdio::null());
    cmd
}

impl Postgres {
    fn start() -> Postgres {
        let dir = tempfile::tempdir().unwrap();
        if is_root() {
            let status = Command::new("chown")
                .args(["-R", "postgres"])
                .arg(dir.path())
                .status()
                .unwrap();
            assert!(status.success());
        }
        let data = dir.path().join("data");
        let init = as_postgres_user("initdb")
            .args(["-U", "postgres", "--auth=trust", "-D"])
            .arg(&data)
            .output()
            .unwrap_or_else(|e| panic!("the Postgres tier needs initdb: {e}"));
        assert!(
            init.status.success(),
            "initdb: {}",
            String::from_utf8_lossy(&init.stderr)
        );
        let port = fenced_testkit::free_port().unwrap();
        use std::os::unix::process::CommandExt;
        let child = as_postgres_user("postgres")
            .arg("-D")
            .arg(&data)
            .args([
                "-p",
                &port.to_string(),
                "-c",
                "listen_addresses=127.0.0.1",
                "-k",
            ])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        let pg = Postgres { dir, child, port };
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while pg.psql("SELECT 1").is_none() {
            assert!(
                std::time::Instant::now() < deadline,
                "postgres did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        pg
    }

    /// Runs `sql`; its output (unaligned, tuples only), or `None` when psql failed.
    fn psql(&self, sql: &str) -> Option<String> {
        let out = Command::new("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-U",
                "postgres",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                "-p",
            ])
            .arg(self.port.to_string())
            .args(["-c", sql])
            .stdin(Stdio::null())
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    }

    fn run(&self, sql: &str) -> String {
        self.psql(sql)
            .unwrap_or_else(|| panic!("psql failed: {sql}"))
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        // SIGINT to the postmaster (its pid is the first line of `postmaster.pid`; `runuser`
        // does not pass signals on): a fast shutdown of it and its children, after which
        // `runuser` exits too.
        let pid = std::fs::read_to_string(self.dir.path().join("data/postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().map(str::to_owned));
        match pid {
            Some(pid) => {
                let _ = Command::new("kill").args(["-INT", &pid]).status();
            }
            None => {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

/// The fenced read-modify-write of `sqlite_fencing.rs` in PostgreSQL's SQL (the same
/// statements, with literals: every value here is the test's own).
fn raise_fence(pg: &Postgres, name: &str, token: FencingToken) -> bool {
    pg.run(&format!(
        "WITH r AS (INSERT INTO fences (name, token) VALUES ('{name}', {t})
           ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token
           WHERE EXCLUDED.token >= fences.token RETURNING 1) SELECT count(*) FROM r",
        t = token.get()
    )) == "1"
}

fn write_if_fence_is(pg: &Postgres, name: &str, token: FencingToken, value: i64) -> bool {
    pg.run(&format!(
        "WITH w AS (INSERT INTO counters (name, value)
           SELECT '{name}', {value} WHERE (SELECT token FROM fences WHERE name = '{name}') = {t}
           ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value RETURNING 1)
         SELECT count(*) FROM w",
        t = token.get()
    )) == "1"
}

fn read_counter(pg: &Postgres, name: &str) -> i64 {
    pg.run(&format!(
        "SELECT coalesce((SELECT value FROM counters WHERE name = '{name}'), 0)"
    ))
    .parse()
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "the Postgres tier: scripts/test --postgres"]
async fn postgres_paused_holders_are_fenced_off_and_no_update_is_lost() {
    let pg = Arc::new(Postgres::start());
    pg.run(
        "CREATE TABLE fences (name text PRIMARY KEY, token bigint NOT NULL);
         CREATE TABLE counters (name text PRIMARY KEY, value bigint NOT NULL);",
    );
    let server = server();
    let c = client(&server).await;
    let accepted = Arc::new(Mutex::new(Vec::new()));
    let refused = Arc::new(Mutex::new(0usize));
    let mut tasks = Vec::new();
    for worker in 0..3u32 {
        let lock = c
            .lock("pg-visits")
            .with_ttl(Duration::from_millis(200))
            .with_auto_renew(false)
            .with_wait(WaitPolicy::up_to(Duration::from_secs(10)));
        let (pg, accepted, refused) = (pg.clone(), accepted.clone(), refused.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..6u32 {
                let guard = lock.acquire().await.unwrap();
                let token = guard.fencing_token();
                let pg2 = pg.clone();
                let (current, value) = tokio::task::spawn_blocking(move || {
                    (
                        raise_fence(&pg2, "visits", token),
                        read_counter(&pg2, "visits"),
                    )
                })
                .await
                .unwrap();
                if (round + worker) % 3 == 0 {
                    tokio::time::sleep(Duration::from_millis(450)).await;
                }
                let pg2 = pg.clone();
                let written = current
                    && tokio::task::spawn_blocking(move || {
                        write_if_fence_is(&pg2, "visits", token, value + 1)
                    })
                    .await
                    .unwrap();
                if written {
                    accepted.lock().unwrap().push(token.get());
                } else {
                    *refused.lock().unwrap() += 1;
                }
                drop(guard);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let accepted = accepted.lock().unwrap().clone();
    let refused = *refused.lock().unwrap();
    let counter = read_counter(&pg, "visits");
    eprintln!(
        "postgres: {} writes accepted, {refused} refused, counter {counter}",
        accepted.len()
    );
    assert!(refused > 0, "no paused holder was refused");
    assert!(
        accepted.windows(2).all(|w| w[0] < w[1]),
        "a stale write was accepted: {accepted:?}"
    );
    assert_eq!(counter, accepted.len() as i64, "an update was lost");
}

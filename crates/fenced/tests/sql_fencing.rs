//! Fencing enforced in a real database (SQLite, embedded): the chaos pattern. Holders are
//! paused past their lease between their read and their write; the fenced writes
//! (`examples/sqlite_fencing.rs`) accept no stale write and lose no update, while the same
//! workload with plain writes loses updates.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fenced::{Client, WaitPolicy};
use rusqlite::Connection;

use crate::support::{client, server};

#[allow(dead_code)]
#[path = "../examples/sqlite_fencing.rs"]
mod sqlite_fencing;

/// What one workload did: writes accepted (with the token of each, in commit order), writes
/// refused, and the counter at the end.
#[derive(Default)]
struct Outcome {
    accepted: Vec<u64>,
    refused: usize,
    counter: i64,
}

/// `workers` holders increment one counter in `path`, each `rounds` times, under the lock
/// `name` with a 200 ms lease and no renewal; every third round pauses 450 ms between its
/// read and its write, past its lease, while the next holder goes ahead.
async fn increments(c: &Client, path: &std::path::Path, name: &str, fenced: bool) -> Outcome {
    let outcome = Arc::new(Mutex::new(Outcome::default()));
    let setup = Connection::open(path).unwrap();
    sqlite_fencing::create_tables(&setup).unwrap();
    let mut tasks = Vec::new();
    for worker in 0..3u32 {
        let lock = c
            .lock(name)
            .with_ttl(Duration::from_millis(200))
            .with_auto_renew(false)
            .with_wait(WaitPolicy::up_to(Duration::from_secs(10)));
        let (path, outcome, name) = (path.to_owned(), outcome.clone(), name.to_owned());
        tasks.push(tokio::spawn(async move {
            let db = Connection::open(&path).unwrap();
            db.busy_timeout(Duration::from_secs(5)).unwrap();
            for round in 0..6u32 {
                let guard = lock.acquire().await.unwrap();
                let token = guard.fencing_token();
                let current = !fenced || sqlite_fencing::raise_fence(&db, &name, token).unwrap();
                let value = sqlite_fencing::read_counter(&db, &name).unwrap();
                if (round + worker) % 3 == 0 {
                    // A pause past the lease: the next holder takes the lock meanwhile.
                    tokio::time::sleep(Duration::from_millis(450)).await;
                }
                let written = current
                    && if fenced {
                        sqlite_fencing::write_if_fence_is(&db, &name, token, value + 1).unwrap()
                    } else {
                        plain_write(&db, &name, value + 1)
                    };
                {
                    let mut o = outcome.lock().unwrap();
                    if written {
                        o.accepted.push(token.get());
                    } else {
                        o.refused += 1;
                    }
                }
                drop(guard);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut outcome = Arc::try_unwrap(outcome).ok().unwrap().into_inner().unwrap();
    outcome.counter = sqlite_fencing::read_counter(&setup, name).unwrap();
    outcome
}

/// The unfenced control's write: the counter, whoever holds the lock now.
fn plain_write(db: &Connection, name: &str, value: i64) -> bool {
    db.execute(
        "INSERT INTO counters (name, value) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        rusqlite::params![name, value],
    )
    .unwrap()
        == 1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holders_writing_to_sqlite_are_fenced_off_and_no_update_is_lost() {
    let server = server();
    let c = client(&server).await;
    let dir = tempfile::tempdir().unwrap();
    let fenced = increments(&c, &dir.path().join("fenced.db"), "visits", true).await;
    let control = increments(&c, &dir.path().join("plain.db"), "visits-plain", false).await;

    eprintln!(
        "fenced: {} writes accepted, {} refused, counter {}; plain: {} accepted, counter {}",
        fenced.accepted.len(),
        fenced.refused,
        fenced.counter,
        control.accepted.len(),
        control.counter
    );
    // The fault struck: paused holders came back after a newer grant, and were refused.
    assert!(fenced.refused > 0, "no paused holder was refused");
    // 0 stale writes accepted: the accepted writes' tokens rise in commit order.
    assert!(
        fenced.accepted.windows(2).all(|w| w[0] < w[1]),
        "a stale token's write was accepted: {:?}",
        fenced.accepted
    );
    // 0 lost updates: every accepted increment is in the counter.
    assert_eq!(fenced.counter, fenced.accepted.len() as i64);
    // The control accepted every write and lost some of them.
    assert_eq!(control.refused, 0);
    assert!(
        control.counter < control.accepted.len() as i64,
        "the unfenced control lost no update ({} of {}): the test shows nothing",
        control.counter,
        control.accepted.len()
    );
}

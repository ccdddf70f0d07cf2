//! Fencing enforced in a database: the fencing token of a [`fenced::Lock`] checked by SQLite
//! in the same statement as the write, so a holder paused past its lease (a GC pause, a
//! stopped VM) cannot overwrite the work of the holder after it.
//!
//! ```sh
//! cargo run -p fenced --features testing --example sqlite_fencing -- redis://127.0.0.1:6379
//! ```
//!
//! Without a URL the example starts a throwaway redis-server (`fenced::testing`, the `testing`
//! feature). The same SQL works in PostgreSQL and MySQL (`INSERT … ON CONFLICT` is `ON
//! DUPLICATE KEY` in MySQL).
//!
//! Two shapes:
//! - **a fence column** on the rows a holder writes blindly: one `UPDATE … WHERE fence <=
//!   :token` both checks and raises it ([`write_with_fence_column`]);
//! - **a fences table** for read-modify-writes: raise the name's fence first
//!   ([`raise_fence`]), then read, then write with the check in the `UPDATE`'s `WHERE`
//!   ([`write_if_fence_is`]). Between the raise and the write no older holder can write; a
//!   newer holder's raise makes this write change nothing.

use rusqlite::{Connection, params};

/// The tables: each name's fence (the highest fencing token seen), and the data it guards.
pub fn create_tables(db: &Connection) -> rusqlite::Result<()> {
    db.execute_batch(
        "CREATE TABLE IF NOT EXISTS fences (name TEXT PRIMARY KEY, token INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
         CREATE TABLE IF NOT EXISTS reports (day TEXT PRIMARY KEY, body TEXT NOT NULL,
                                             fence INTEGER NOT NULL DEFAULT 0);",
    )
}

/// SQLite's integers are signed 64-bit; fencing tokens fit (they count up from the server
/// clock's microseconds), and one that did not would be refused, never wrapped.
fn sql_token(token: fenced::FencingToken) -> rusqlite::Result<i64> {
    i64::try_from(token.get()).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))
}

/// Raises `name`'s fence to `token` unless a newer token got there first: true when `token` is
/// current (the same holder may raise it again). From then on every older holder's
/// [`write_if_fence_is`] changes nothing.
pub fn raise_fence(
    db: &Connection,
    name: &str,
    token: fenced::FencingToken,
) -> rusqlite::Result<bool> {
    let changed = db.execute(
        "INSERT INTO fences (name, token) VALUES (?1, ?2)
         ON CONFLICT (name) DO UPDATE SET token = excluded.token
         WHERE excluded.token >= fences.token",
        params![name, sql_token(token)?],
    )?;
    Ok(changed == 1)
}

/// Writes counter `name` only while `token` is still its fence: the check and the write are one
/// statement, so no newer holder can come in between. True when written.
pub fn write_if_fence_is(
    db: &Connection,
    name: &str,
    token: fenced::FencingToken,
    value: i64,
) -> rusqlite::Result<bool> {
    let changed = db.execute(
        "INSERT INTO counters (name, value)
         SELECT ?1, ?3 WHERE (SELECT token FROM fences WHERE name = ?1) = ?2
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        params![name, sql_token(token)?, value],
    )?;
    Ok(changed == 1)
}

/// Reads counter `name` (0 when it has none yet).
pub fn read_counter(db: &Connection, name: &str) -> rusqlite::Result<i64> {
    match db.query_row(
        "SELECT value FROM counters WHERE name = ?1",
        [name],
        |row| row.get(0),
    ) {
        Ok(v) => Ok(v),
        Err(rusqlite::Error::QueryReturnedNoRows) => Ok(0),
        Err(e) => Err(e),
    }
}

/// A blind write guarded by a fence column on the row itself: written, and its fence raised,
/// only if no newer token wrote it before. True when written.
pub fn write_with_fence_column(
    db: &Connection,
    day: &str,
    token: fenced::FencingToken,
    body: &str,
) -> rusqlite::Result<bool> {
    let changed = db.execute(
        "INSERT INTO reports (day, body, fence) VALUES (?1, ?3, ?2)
         ON CONFLICT (day) DO UPDATE SET body = excluded.body, fence = excluded.fence
         WHERE excluded.fence >= reports.fence",
        params![day, sql_token(token)?, body],
    )?;
    Ok(changed == 1)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server;
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => {
            server = fenced::testing::RedisServer::start()?;
            server.url()
        }
    };
    let client = fenced::Client::connect(&url).await?;
    let db = Connection::open_in_memory()?;
    create_tables(&db)?;

    // A read-modify-write under the lock: raise the fence, read, write with the check.
    let guard = client.lock("counter:visits").acquire().await?;
    let token = guard.fencing_token();
    if raise_fence(&db, "counter:visits", token)? {
        let visits = read_counter(&db, "counter:visits")?;
        let written = write_if_fence_is(&db, "counter:visits", token, visits + 1)?;
        println!(
            "token {token}: visits {visits} -> {} (written: {written})",
            visits + 1
        );
    }
    guard.release().await?;

    // A stale holder's write, after a newer grant, changes nothing.
    let newer = client.lock("report:2026-11-25").acquire().await?;
    let stale = fenced::FencingToken::new(newer.fencing_token().get() - 1);
    write_with_fence_column(&db, "2026-11-25", newer.fencing_token(), "the real report")?;
    let refused = !write_with_fence_column(&db, "2026-11-25", stale, "a stale holder's report")?;
    println!("the stale write was refused: {refused}");
    newer.release().await?;
    Ok(())
}

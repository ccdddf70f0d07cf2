//! The fenced grant by transaction, the default (`MULTI`, `SET NX PX`, `INCR`, `PTTL`, `GET`,
//! `INFO replication`, `EXEC`): no script on the way in, tokens that increase across clients
//! granting either way, and a fence that is lost, replaced by a program, restored from a
//! snapshot or resynchronised from an older copy never sends tokens backwards.

use std::time::Duration;

use fenced::Client;
use fenced_testkit::RedisServer;
use tokio::time::Instant;

use crate::acl::LOCK_COMMANDS;
use crate::acl_family::user;
use crate::support::{calls, client, eventually, raw, server};

/// A client that grants by transaction: any client, by default.
async fn counted(server: &RedisServer) -> Client {
    client(server).await
}

/// A client that grants by script only.
async fn by_script(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .counted_grants(false)
        .connect()
        .await
        .unwrap()
}

async fn command(conn: &mut redis::aio::MultiplexedConnection, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let _: redis::Value = cmd.query_async(conn).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_runs_no_script_once_the_name_has_a_fence() {
    let server = server();
    let c = counted(&server).await;
    let mut conn = raw(&server).await;
    // The first grant of a name reads the server clock (a script); the later ones count.
    let first = c.lock("job").acquire().await.unwrap();
    let t0 = first.fencing_token().get();
    first.release().await.unwrap();
    let (exec, evalsha) = (
        calls(&mut conn, "exec").await,
        calls(&mut conn, "evalsha").await,
    );
    let mut last = t0;
    for _ in 0..10 {
        let g = c.lock("job").acquire().await.unwrap();
        assert!(g.fencing_token().get() > last);
        last = g.fencing_token().get();
        g.release().await.unwrap();
    }
    assert_eq!(
        calls(&mut conn, "exec").await - exec,
        10,
        "one transaction a grant"
    );
    // Only the releases run a script (`release.lua`, where the server has no `DELIFEQ`).
    assert!(calls(&mut conn, "evalsha").await - evalsha <= 10);
    assert!(
        t0 > 1_000_000_000_000_000,
        "the first token is the server clock's: {t0}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_holders_granted_by_script_and_by_transaction() {
    let server = server();
    // A user without `multi`, `exec`, `incr` and `info`: its client grants by script; so
    // does a client that turned transactions off.
    let scripted_url = user(&server, "scripted", &LOCK_COMMANDS).await;
    let scripted = Client::connect(&scripted_url).await.unwrap();
    let by_script = by_script(&server).await;
    let counted = counted(&server).await;
    let mut conn = raw(&server).await;
    let exec_before = calls(&mut conn, "exec").await;
    let mut last = 0;
    for i in 0..40 {
        let c = match i % 3 {
            0 => &scripted,
            1 => &by_script,
            _ => &counted,
        };
        let g = c.lock("mixed").acquire().await.unwrap();
        let token = g.fencing_token().get();
        assert!(token > last, "grant {i}: {token} after {last}");
        last = token;
        g.release().await.unwrap();
    }
    assert!(
        calls(&mut conn, "exec").await - exec_before >= 13,
        "the counted client granted by transaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_go_backwards_when_the_fence_is_lost_or_overwritten() {
    let server = server();
    let c = counted(&server).await;
    let mut conn = raw(&server).await;
    let fence = "fenced:{ledger}:fence";
    let mut last = 0;
    for (i, damage) in [
        &["DEL", fence][..],
        &["SET", fence, "5"][..],
        &["SET", fence, "not a number"][..],
        &["HSET", fence, "f", "v"][..],
        &["DEL", fence][..],
    ]
    .iter()
    .enumerate()
    {
        for _ in 0..3 {
            let g = c.lock("ledger").acquire().await.unwrap();
            let token = g.fencing_token().get();
            assert!(token > last, "step {i}: {token} after {last}");
            last = token;
            g.release().await.unwrap();
        }
        if damage[0] == "HSET" {
            command(&mut conn, &["DEL", fence]).await;
        }
        command(&mut conn, damage).await;
    }
    let g = c.lock("ledger").acquire().await.unwrap();
    assert!(g.fencing_token().get() > last);
    g.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_with_counted_grants_off_grants_by_script() {
    let server = server();
    let c = by_script(&server).await;
    let mut conn = raw(&server).await;
    let exec = calls(&mut conn, "exec").await;
    for _ in 0..3 {
        c.lock("plain")
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert_eq!(calls(&mut conn, "exec").await, exec, "no transaction");
}

/// Grants `n` times; the tokens, in order.
async fn grants(c: &Client, name: &str, n: usize) -> Vec<u64> {
    let mut tokens = Vec::new();
    for _ in 0..n {
        let g = c.lock(name).acquire().await.unwrap();
        tokens.push(g.fencing_token().get());
        g.release().await.unwrap();
    }
    tokens
}

/// A grant of `name`, retried while the server comes back.
async fn grant_when_back(c: &Client, name: &str) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match c.lock(name).try_acquire().await {
            Ok(Some(g)) => {
                let token = g.fencing_token().get();
                g.release().await.unwrap();
                return token;
            }
            Ok(None) => panic!("nobody holds {name}"),
            Err(e) => assert!(Instant::now() < deadline, "the server never came back: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn fence(conn: &mut redis::aio::MultiplexedConnection, name: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(format!("fenced:{{{name}}}:fence"))
        .query_async(conn)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fence_restored_older_by_a_restart_from_a_snapshot_never_repeats_a_token() {
    let mut server = server();
    let c = counted(&server).await;
    let mut conn = raw(&server).await;
    let before = grants(&c, "restored", 3).await;
    let saved = fence(&mut conn, "restored").await;
    command(&mut conn, &["SAVE"]).await;
    // Counted after the snapshot, then lost with the restart: the snapshot's fence is older.
    let after = grants(&c, "restored", 5).await;
    let exec = calls(&mut conn, "exec").await;
    assert!(
        exec >= 5,
        "the grants after the first counted by transaction"
    );
    server.restart().unwrap();
    let mut conn = raw(&server).await;
    assert_eq!(
        fence(&mut conn, "restored").await,
        saved,
        "the restart loaded the snapshot"
    );
    let next = grant_when_back(&c, "restored").await;
    let last = *after.last().unwrap();
    assert!(
        next > last,
        "a token after the restart ({next}) must exceed every earlier one ({before:?} {after:?})"
    );
    // And counting goes on from there.
    let more = grants(&c, "restored", 3).await;
    assert!(
        more[0] > next && more[1] > more[0] && more[2] > more[1],
        "{more:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_fence_put_back_on_a_running_master_never_repeats_a_token_granted_by_script() {
    // What no replication ID records: an operator restores an older dump of the fence on a
    // running master. A client built with `counted_grants(false)` is the documented answer.
    let server = server();
    let c = by_script(&server).await;
    let mut conn = raw(&server).await;
    let key = "fenced:{put-back}:fence";
    let before = grants(&c, "put-back", 3).await;
    let dump: Vec<u8> = redis::cmd("DUMP")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap();
    let after = grants(&c, "put-back", 5).await;
    let _: () = redis::cmd("RESTORE")
        .arg(key)
        .arg(60_000)
        .arg(dump)
        .arg("REPLACE")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        fence(&mut conn, "put-back").await,
        Some(before[2].to_string()),
        "the fence is the older one again"
    );
    let next = grants(&c, "put-back", 1).await[0];
    assert!(
        next > *after.last().unwrap(),
        "a token after the older fence came back ({next}) must exceed every earlier one ({before:?} {after:?})"
    );
}

/// `REPLICAOF` `master` on `replica`, until the replica has loaded the master's data.
async fn replicate(replica: &RedisServer, master: &RedisServer) {
    let mut conn = raw(replica).await;
    command(
        &mut conn,
        &["REPLICAOF", "127.0.0.1", &master.port().to_string()],
    )
    .await;
    let synced = eventually(Duration::from_secs(10), || {
        let mut conn = conn.clone();
        async move {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut conn)
                .await
                .unwrap();
            info.contains("master_link_status:up") && info.contains("master_sync_in_progress:0")
        }
    })
    .await;
    assert!(synced, "the replica never synchronised");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_resynchronised_from_an_older_copy_and_promoted_again_never_repeats_a_token() {
    let (a, b) = (server(), server());
    // One client, connected to `a` throughout.
    let c = counted(&a).await;
    let mut on_a = raw(&a).await;
    let mut on_b = raw(&b).await;
    replicate(&b, &a).await;
    let before = grants(&c, "ledger", 3).await;
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query_async(&mut on_a)
        .await
        .unwrap();
    assert_eq!(acked, 1, "the replica has the first grants");
    // `b` leaves with the fence as it was; `a` counts on.
    command(&mut on_b, &["REPLICAOF", "NO", "ONE"]).await;
    let older = fence(&mut on_b, "ledger").await;
    let after = grants(&c, "ledger", 5).await;
    // `a` becomes `b`'s replica (its data replaced by the older copy), then a master again.
    replicate(&a, &b).await;
    assert_eq!(fence(&mut on_a, "ledger").await, older, "a holds b's copy");
    command(&mut on_a, &["REPLICAOF", "NO", "ONE"]).await;
    let next = grant_when_back(&c, "ledger").await;
    let last = *after.last().unwrap();
    assert!(
        next > last,
        "a token after the resynchronisation ({next}) must exceed every earlier one ({before:?} {after:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_grant_leaves_no_fence_without_an_expiry() {
    let server = server();
    let c = counted(&server).await;
    let mut conn = raw(&server).await;
    // Held by a plain `SET NX PX` (another library, say): no fence yet.
    command(
        &mut conn,
        &["SET", "fenced:{elsewhere}", "someone", "PX", "60000"],
    )
    .await;
    for _ in 0..3 {
        assert!(c.lock("elsewhere").try_acquire().await.unwrap().is_none());
    }
    let pttl: i64 = redis::cmd("PTTL")
        .arg("fenced:{elsewhere}:fence")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        pttl > 0 || pttl == -2,
        "the refused grants' count needs an expiry (PTTL {pttl})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_taken_away_later_sends_grants_by_script_with_increasing_tokens() {
    let server = server();
    let mut conn = raw(&server).await;
    let mut last = 0;
    for (i, refused) in ["exec", "multi"].into_iter().enumerate() {
        let commands: Vec<&str> = LOCK_COMMANDS
            .iter()
            .copied()
            .chain(["multi", "exec", "incr", "info"])
            .collect();
        let name = format!("later{i}");
        let url = user(&server, &name, &commands).await;
        let c = Client::connect(&url).await.unwrap();
        // Learned: grants by transaction.
        let exec = calls(&mut conn, "exec").await;
        for token in grants(&c, "ledger", 2).await {
            assert!(token > last);
            last = token;
        }
        assert!(
            calls(&mut conn, "exec").await >= exec + 2,
            "granted by transaction"
        );
        command(
            &mut conn,
            &["ACL", "SETUSER", &name, &format!("-{refused}")],
        )
        .await;
        // The first grant after it meets the refusal and still answers a token; the next ones
        // go by script and send no transaction.
        for token in grants(&c, "ledger", 2).await {
            assert!(token > last, "without {refused}: {token} after {last}");
            last = token;
        }
        let multi = calls(&mut conn, "multi").await;
        for token in grants(&c, "ledger", 3).await {
            assert!(token > last);
            last = token;
        }
        assert_eq!(
            calls(&mut conn, "multi").await,
            multi,
            "without {refused}, no more transactions"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_grants_of_a_client_probe_the_server_once() {
    let server = server();
    let c = counted(&server).await;
    let mut conn = raw(&server).await;
    let multi = calls(&mut conn, "multi").await;
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let lock = c.lock(format!("first{i}"));
            tokio::spawn(async move { lock.acquire().await.unwrap().release().await.unwrap() })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    // One probe: the pool's empty transaction on a new connection, then the grant's; the
    // grants that came while it ran went by script, the others by one transaction each.
    let first = calls(&mut conn, "multi").await - multi;
    assert!(first <= 2 + 16, "one probe at a time: {first} transactions");
    // Learned: one transaction a grant, no probe.
    let multi = calls(&mut conn, "multi").await;
    for i in 0..16 {
        c.lock(format!("first{i}"))
            .acquire()
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    assert_eq!(calls(&mut conn, "multi").await - multi, 16);
}

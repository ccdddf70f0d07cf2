//! The fenced grant by transaction (`ClientBuilder::counted_grants`: `MULTI`, `SET NX PX`,
//! `INCR`, `PTTL`, `EXEC`): no script on the way in, tokens that increase across clients
//! granting either way, and a fence that is lost, or replaced by a program, never sends tokens
//! backwards.

use fenced::Client;
use fenced_testkit::RedisServer;

use crate::acl::LOCK_COMMANDS;
use crate::acl_family::user;
use crate::support::{calls, client, raw, server};

/// A client that grants by transaction.
async fn counted(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .counted_grants(true)
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
    // A user without `multi`, `exec` and `incr`: its client grants by script even when it
    // asks for transactions; so does a client that does not ask.
    let scripted_url = user(&server, "scripted", &LOCK_COMMANDS).await;
    let scripted = Client::builder(&scripted_url)
        .counted_grants(true)
        .connect()
        .await
        .unwrap();
    let by_default = client(&server).await;
    let counted = counted(&server).await;
    let mut conn = raw(&server).await;
    let exec_before = calls(&mut conn, "exec").await;
    let mut last = 0;
    for i in 0..40 {
        let c = match i % 3 {
            0 => &scripted,
            1 => &by_default,
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
async fn a_client_grants_by_script_unless_it_asks_for_transactions() {
    let server = server();
    let c = client(&server).await;
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
    assert_eq!(
        calls(&mut conn, "exec").await,
        exec,
        "no transaction by default"
    );
}

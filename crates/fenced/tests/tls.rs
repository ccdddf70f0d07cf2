//! `rediss://`: the whole client (commands, pub/sub wake-ups, transactions) over TLS, against
//! a redis-server that speaks only TLS, with a certificate from a throwaway CA.

use std::time::Duration;

use fenced::{Client, WaitPolicy};
use fenced_testkit::RedisServer;

fn tls_server() -> RedisServer {
    RedisServer::start_tls()
        .unwrap_or_else(|e| panic!("this test needs redis-server with TLS and openssl: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_waiters_and_transactions_work_over_tls() {
    let server = tls_server();
    let ca = server.tls_ca().unwrap().to_vec();
    let connect = || {
        Client::builder(&server.url())
            .tls_root_certificate(ca.clone())
            .timeout(Duration::from_secs(2))
            .connect()
    };
    let (holder, waiter) = (connect().await.unwrap(), connect().await.unwrap());
    let guard = holder.lock("tls").acquire().await.unwrap();
    let lock = waiter
        .lock("tls")
        .with_wait(WaitPolicy::up_to(Duration::from_secs(10)));
    let waiting = tokio::spawn(async move { lock.acquire().await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    let n: i64 = holder
        .transaction(&["tls:n"], |tx| async move {
            let n: i64 = tx.get("tls:n").await?.unwrap_or(0);
            tx.set("tls:n", n + 1);
            Ok::<_, fenced::Error>(n + 1)
        })
        .await
        .unwrap();
    assert_eq!(n, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_server_certificate_is_refused() {
    let server = tls_server();
    let result = Client::builder(&server.url())
        .timeout(Duration::from_secs(2))
        .connect()
        .await;
    assert!(
        result.is_err(),
        "a certificate from an unknown CA must not be accepted"
    );
    let plain = Client::builder(&server.url().replace("rediss://", "redis://"))
        .timeout(Duration::from_millis(500))
        .connect()
        .await;
    assert!(
        plain.is_err(),
        "plain text must not reach a TLS-only server"
    );
}

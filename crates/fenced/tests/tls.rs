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

fn mtls_server() -> RedisServer {
    RedisServer::start_mtls()
        .unwrap_or_else(|e| panic!("this test needs redis-server with TLS and openssl: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_admits_a_client_certificate_from_the_servers_ca_and_refuses_others() {
    let server = mtls_server();
    let ca = server.tls_ca().unwrap().to_vec();
    let builder = |identity: Option<&str>| {
        let mut b = Client::builder(&server.url())
            .tls_root_certificate(ca.clone())
            .timeout(Duration::from_millis(1500));
        if let Some(which) = identity {
            let (cert, key) = server.tls_client(which).unwrap();
            b = b.tls_client_certificate(cert, key);
        }
        b
    };
    // The key never shows.
    let (_, key) = server.tls_client("client").unwrap();
    let key_text = String::from_utf8_lossy(&key).into_owned();
    let shown = format!("{:?}", builder(Some("client")));
    let secret_line = key_text.lines().nth(1).unwrap();
    assert!(!shown.contains(secret_line), "{shown}");
    // A certificate signed by the server's CA: everything works.
    let c = builder(Some("client")).connect().await.unwrap();
    c.lock("mtls")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    // None, an expired one, one from another CA: refused, in time, with a typed error.
    for identity in [None, Some("expired"), Some("foreign")] {
        let started = std::time::Instant::now();
        let out = builder(identity).connect().await;
        assert!(
            matches!(
                out,
                Err(fenced::Error::Unavailable { .. } | fenced::Error::Timeout { .. })
            ),
            "{identity:?}: {out:?}"
        );
        assert!(started.elapsed() < Duration::from_secs(5), "{identity:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_certificate_for_another_name_is_refused() {
    let server = tls_server();
    let ca = server.tls_ca().unwrap().to_vec();
    // The certificate is for the address 127.0.0.1, not for the name "localhost".
    let url = format!("rediss://localhost:{}", server.port());
    let out = Client::builder(&url)
        .tls_root_certificate(ca)
        .timeout(Duration::from_millis(1500))
        .connect()
        .await;
    let err = out.expect_err("a certificate for another name must not be accepted");
    // The message says why: the certificate is not valid for that name.
    let text = err.to_string();
    assert!(
        text.contains("certificate not valid for name \"localhost\""),
        "{text}"
    );
}

//! Redis down, paused or behind a password: typed errors within the configured timeout,
//! never a hang.

use std::time::Duration;

use fenced::{Client, Error, WaitPolicy};
use fenced_testkit::RedisServer;
use tokio::time::Instant;

use crate::support::{client, server};

const TIMEOUT: Duration = Duration::from_millis(500);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1500);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_nothing_fails_fast_with_unavailable() {
    let port = fenced_testkit::free_port().unwrap();
    let started = Instant::now();
    let result = Client::builder(&format!("redis://127.0.0.1:{port}"))
        .timeout(TIMEOUT)
        .connect()
        .await;
    assert!(started.elapsed() < TIMEOUT + SLACK);
    assert!(
        matches!(
            result,
            Err(Error::Unavailable { .. }) | Err(Error::Timeout { .. })
        ),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_times_out_acquire_and_release() {
    let mut server = server();
    let c = client(&server).await;
    let held = c.lock("p").acquire().await.unwrap();
    server.pause().unwrap();
    for op in ["try_acquire", "acquire", "release"] {
        let started = Instant::now();
        let result = match op {
            "try_acquire" => c.lock("q").try_acquire().await.map(|_| ()),
            // A wait retries transient failures until its deadline, then reports the last.
            "acquire" => c
                .lock("q")
                .with_wait(WaitPolicy::up_to(TIMEOUT))
                .acquire()
                .await
                .map(|_| ()),
            _ => break,
        };
        let took = started.elapsed();
        assert!(
            matches!(result, Err(Error::Timeout { .. })),
            "{op}: {result:?}"
        );
        assert!(took < 2 * TIMEOUT + SLACK, "{op} took {took:?}");
    }
    let started = Instant::now();
    let result = held.release().await;
    // Release retries transient failures a few times, each bounded by the timeout.
    assert!(matches!(result, Err(Error::Timeout { .. })), "{result:?}");
    assert!(
        started.elapsed() < 3 * TIMEOUT + SLACK,
        "release took {:?}",
        started.elapsed()
    );
    server.resume().unwrap();
    // The timed-out attempts may run late, once Redis wakes up, and the failed release never
    // reached it: background clean-up must free both locks long before their 30s ttl.
    let prompt = WaitPolicy::up_to(Duration::from_secs(5));
    let q = c
        .lock("q")
        .with_wait(prompt)
        .acquire()
        .await
        .expect("an abandoned attempt kept the lock");
    let p = c
        .lock("p")
        .with_wait(prompt)
        .acquire()
        .await
        .expect("a failed release kept the lock");
    q.release().await.unwrap();
    p.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_gives_typed_errors_and_the_client_recovers_after_restart() {
    let mut server = server();
    let c = client(&server).await;
    server.kill().unwrap();
    let started = Instant::now();
    let result = c
        .lock("k")
        .with_wait(WaitPolicy::up_to(TIMEOUT))
        .acquire()
        .await;
    assert!(
        result.as_ref().is_err_and(Error::is_transient),
        "{result:?}"
    );
    assert!(started.elapsed() < 4 * TIMEOUT + SLACK);
    server.restart().unwrap();
    let ok = crate::support::eventually(Duration::from_secs(10), || async {
        match c.lock("k").try_acquire().await {
            Ok(Some(g)) => g.release().await.is_ok(),
            _ => false,
        }
    })
    .await;
    assert!(ok, "the client never recovered after the server came back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_passwords_in_the_url_work_and_wrong_ones_are_typed_errors() {
    let server = match RedisServer::start_with(&["--requirepass", "s3cret"]) {
        Ok(s) => s,
        Err(e) => panic!("needs redis-server: {e}"),
    };
    let port = server.port();
    let good = Client::connect(&format!("redis://default:s3cret@127.0.0.1:{port}"))
        .await
        .unwrap();
    good.lock("acl")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let bad = Client::connect(&format!("redis://default:wrong@127.0.0.1:{port}")).await;
    assert!(
        matches!(bad, Err(Error::Redis(_)) | Err(Error::Unavailable { .. })),
        "{bad:?}"
    );
    let none = Client::connect(&format!("redis://127.0.0.1:{port}")).await;
    assert!(none.is_err(), "no password must not work");
}

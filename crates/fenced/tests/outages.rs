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

/// A service that starts while its Redis is down connects once it comes up, within the
/// connect wait, with no retry loop of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_wait_rides_out_a_redis_that_comes_up_late() {
    let mut server = server();
    server.kill().unwrap();
    let url = server.url();
    let connecting = tokio::spawn(async move {
        let started = Instant::now();
        let client = Client::builder(&url)
            .timeout(TIMEOUT)
            .connect_wait(Duration::from_secs(20))
            .connect()
            .await;
        (client, started.elapsed())
    });
    // Time must pass here: the first attempts have to find the server down.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!connecting.is_finished(), "connect gave up with Redis down");
    let server = tokio::task::spawn_blocking(move || server.restart().map(|()| server))
        .await
        .unwrap()
        .unwrap();
    let (client, took) = connecting.await.unwrap();
    let client = client.unwrap();
    assert!(took >= Duration::from_millis(400), "{took:?}");
    client
        .lock("late")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    drop(server);
}

/// With Redis paused, connect keeps trying until the wait's end, and ends by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_wait_ends_by_its_deadline_and_a_paused_server_resumed_in_time_is_reached() {
    let mut server = server();
    server.pause().unwrap();
    let wait = Duration::from_secs(1);
    let started = Instant::now();
    let failed = Client::builder(&server.url())
        .timeout(TIMEOUT)
        .connect_wait(wait)
        .connect()
        .await;
    let took = started.elapsed();
    assert!(
        failed.as_ref().is_err_and(Error::is_transient),
        "{failed:?}"
    );
    assert!(
        took >= wait - Duration::from_millis(50),
        "gave up early: {took:?}"
    );
    assert!(took < wait + SLACK, "overshot its wait: {took:?}");

    let url = server.url();
    let connecting = tokio::spawn(async move {
        Client::builder(&url)
            .timeout(TIMEOUT)
            .connect_wait(Duration::from_secs(20))
            .connect()
            .await
    });
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(
        !connecting.is_finished(),
        "connect gave up with Redis paused"
    );
    server.resume().unwrap();
    let client = connecting.await.unwrap().unwrap();
    assert!(
        client
            .lock("resumed")
            .try_acquire()
            .await
            .unwrap()
            .is_some()
    );
}

/// What waiting cannot mend fails at once, whatever the connect wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_wait_does_not_retry_a_wrong_password() {
    let server = RedisServer::start_with(&["--requirepass", "s3cret"]).unwrap();
    let started = Instant::now();
    let bad = Client::builder(&format!(
        "redis://default:wrong@127.0.0.1:{}",
        server.port()
    ))
    .timeout(Duration::from_secs(3))
    .connect_wait(Duration::from_secs(20))
    .connect()
    .await;
    assert!(bad.is_err());
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}: {bad:?}",
        started.elapsed()
    );
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

/// A server busy in a script answers `BUSY`, and a replica `READONLY`: both are typed as
/// transient `Unavailable` on every server of the matrix (by the error's code, not its text),
/// and nothing is left held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_and_readonly_servers_are_unavailable_by_their_error_codes() {
    let server = server();
    let c = client(&server).await;
    let mut conn = crate::support::raw(&server).await;
    // `lua-time-limit` is the name every server of the matrix knows (Redis 7 and Valkey
    // also call it `busy-reply-threshold`).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("lua-time-limit")
        .arg("50")
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = server.url();
    let spinner = std::thread::spawn(move || {
        let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
        // Ends with an error once SCRIPT KILL stops it.
        let _: redis::RedisResult<()> = redis::cmd("EVAL")
            .arg("while true do end")
            .arg(0)
            .query(&mut conn);
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    let busy = loop {
        tokio::time::sleep(Duration::from_millis(100)).await; // past the 50 ms threshold
        match c.lock("busy").try_acquire().await {
            Err(e @ Error::Unavailable { .. }) => break e,
            other => assert!(Instant::now() < deadline, "never BUSY: {other:?}"),
        }
    };
    assert!(busy.is_transient());
    assert!(
        matches!(&busy, Error::Unavailable { source } if source.code() == Some("BUSY")),
        "{busy}"
    );
    let mut killer = redis::Client::open(server.url())
        .unwrap()
        .get_connection()
        .unwrap();
    let _: redis::RedisResult<()> = redis::cmd("SCRIPT").arg("KILL").query(&mut killer);
    spinner.join().unwrap();
    let g = c.lock("busy").acquire().await.unwrap();
    g.release().await.unwrap();

    // A master at `maxmemory` with nothing to evict refuses writes: OOM, transient (keys
    // expire, memory is freed).
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query_async(&mut conn)
        .await
        .unwrap();
    match c.lock("oom").try_acquire().await {
        Err(e @ Error::Unavailable { .. }) => assert!(e.to_string().contains("OOM"), "{e}"),
        other => panic!("a master out of memory granted a lock: {other:?}"),
    }
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query_async(&mut conn)
        .await
        .unwrap();
    c.lock("oom")
        .acquire()
        .await
        .unwrap()
        .release()
        .await
        .unwrap();

    // A replica refuses writes: READONLY, transient (a failover may be under way).
    let mut set = fenced_testkit::RedisSentinels::start(1, 0).unwrap();
    let on_replica = Client::builder(&set.node(1).url())
        .timeout(TIMEOUT)
        .connect()
        .await
        .unwrap();
    match on_replica.lock("ro").try_acquire().await {
        // The code itself on Redis 7 and Valkey; inside the script error's text on Redis 6.
        Err(Error::Unavailable { source }) => assert!(
            source.code() == Some("READONLY") || source.to_string().contains("-READONLY"),
            "{source}"
        ),
        other => panic!("a replica granted a lock: {other:?}"),
    }
}

/// Time left over a deadline for one round trip and the scheduler of a loaded 2-core machine.
const ROUND_TRIP: Duration = Duration::from_millis(400);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_redis_paused_waits_and_tries_end_by_their_deadline_and_name_it() {
    let mut server = server();
    for warm in [false, true] {
        let c = Client::builder(&server.url())
            .timeout(TIMEOUT)
            .connect()
            .await
            .unwrap();
        if warm {
            // The grants' way is learned already: only the grant itself meets the pause.
            let g = c.lock("warm").acquire().await.unwrap();
            g.release().await.unwrap();
        }
        server.pause().unwrap();
        for wait in [
            Duration::from_millis(200),
            TIMEOUT,
            Duration::from_millis(1200),
        ] {
            let started = Instant::now();
            let r = c
                .lock("w")
                .with_wait(WaitPolicy::up_to(wait))
                .acquire()
                .await;
            let took = started.elapsed();
            assert!(
                took < wait + ROUND_TRIP,
                "warm {warm}: a wait of {wait:?} took {took:?}: {r:?}"
            );
            assert!(
                matches!(&r, Err(Error::Timeout { after, .. }) if *after == wait),
                "warm {warm}: a wait of {wait:?} must say so: {r:?}"
            );
        }
        let started = Instant::now();
        let r = c.lock("t").try_acquire().await;
        let took = started.elapsed();
        assert!(
            took < TIMEOUT + ROUND_TRIP,
            "warm {warm}: a try took {took:?}: {r:?}"
        );
        assert!(
            matches!(&r, Err(Error::Timeout { after, .. }) if *after == TIMEOUT),
            "warm {warm}: {r:?}"
        );
        server.resume().unwrap();
    }
}

//! Every invalid input is refused with `InvalidArgument` before anything reaches Redis.

use std::time::Duration;

use fenced::limits::MAX_NAME_LEN;
use fenced::{Client, Error, FencingToken, WaitPolicy};

use crate::support::{all_keys, client, raw, server};

fn assert_invalid<T: std::fmt::Debug>(what: &str, result: Result<T, Error>, needle: &str) {
    match result {
        Err(Error::InvalidArgument(msg)) => {
            assert!(
                msg.contains(needle),
                "{what}: message {msg:?} does not mention {needle:?}"
            )
        }
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lock_arguments_are_refused_before_any_redis_call() {
    let server = server();
    let c = client(&server).await;
    let mut conn = raw(&server).await;
    let long = "n".repeat(MAX_NAME_LEN + 1);
    let mut tried = 0;
    for (what, name, needle) in [
        ("empty name", "", "empty"),
        ("long name", long.as_str(), "limit"),
        ("closing brace", "a}b", "hash tag"),
        ("opening brace", "{a", "hash tag"),
    ] {
        assert_invalid(what, c.lock(name).try_acquire().await, needle);
        assert_invalid(what, c.lock(name).acquire().await, needle);
        assert_invalid(
            what,
            c.resource(name).set(FencingToken::new(1), "f", "v").await,
            needle,
        );
        tried += 3;
    }
    for (what, ttl, needle) in [
        ("zero ttl", Duration::ZERO, "zero"),
        ("tiny ttl", Duration::from_millis(5), "minimum"),
        (
            "huge ttl",
            Duration::from_secs(10 * 365 * 24 * 3600),
            "maximum",
        ),
        ("overflowing ttl", Duration::MAX, "maximum"),
    ] {
        assert_invalid(what, c.lock("ok").with_ttl(ttl).acquire().await, needle);
        assert_invalid(what, c.lock("ok").with_ttl(ttl).try_acquire().await, needle);
        tried += 2;
    }
    assert_invalid(
        "overflowing deadline",
        c.lock("ok")
            .with_wait(WaitPolicy::up_to(Duration::MAX))
            .acquire()
            .await,
        "overflows",
    );
    assert_invalid(
        "zero attempts",
        c.lock("ok")
            .with_wait(WaitPolicy::FOREVER.with_max_attempts(0))
            .acquire()
            .await,
        "attempt",
    );
    let fields: Vec<(&str, &[u8])> = (0..1001).map(|_| ("f", &b"v"[..])).collect();
    assert_invalid(
        "too many fields",
        c.resource("r")
            .set_many(FencingToken::new(1), &fields)
            .await,
        "limit",
    );
    tried += 3;
    // Extending a held lease with a bad ttl is refused too, and leaves the lease alone.
    let g = c.lock("held").acquire().await.unwrap();
    assert_invalid(
        "extend with zero ttl",
        g.extend(Duration::ZERO).await,
        "zero",
    );
    g.release().await.unwrap();
    tried += 1;
    // Nothing but the one valid lock's fence ever reached Redis.
    let keys = all_keys(&mut conn).await;
    assert!(
        keys == ["fenced:{held}:fence"],
        "{tried} bad inputs tried; keys left behind: {keys:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_client_settings_are_refused() {
    let server = server();
    for (what, builder, needle) in [
        (
            "braced namespace",
            Client::builder(&server.url()).namespace("app{"),
            "namespace",
        ),
        (
            "zero timeout",
            Client::builder(&server.url()).timeout(Duration::ZERO),
            "timeout",
        ),
        (
            "zero default ttl",
            Client::builder(&server.url()).default_ttl(Duration::ZERO),
            "ttl",
        ),
        (
            "inverted poll bounds",
            Client::builder(&server.url())
                .poll_interval(Duration::from_secs(2), Duration::from_millis(10)),
            "poll",
        ),
        ("not a URL", Client::builder("not a url"), "URL"),
        (
            "unknown scheme",
            Client::builder("http://127.0.0.1:1"),
            "URL",
        ),
    ] {
        assert_invalid(what, builder.connect().await, needle);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_a_bad_url_is_not_echoed() {
    let err = Client::connect("redis://user:hunter2@127.0.0.1:notaport")
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("hunter2"), "{err}");
}

#[tokio::test]
async fn bad_deployment_settings_are_refused_before_connecting() {
    let server = server();
    let url = server.url();
    let ms = Duration::from_millis;
    let acks = |n, wait| Client::builder(&url).replica_acks(n, wait).connect();
    assert_invalid("no replicas", acks(0, ms(10)).await, "replicas");
    assert_invalid(
        "a wait past half the timeout",
        acks(1, ms(1500)).await,
        "wait",
    );
    let urls = [url.clone(), url.clone(), url.clone()];
    assert_invalid(
        "WAIT on Redlock",
        Client::redlock_builder(&urls)
            .replica_acks(1, ms(10))
            .connect()
            .await,
        "Redlock",
    );
    assert_invalid(
        "Sentinel without a service",
        Client::sentinel_builder(&[url.as_str()], "")
            .connect()
            .await,
        "service",
    );
    assert_invalid(
        "a cluster without seeds",
        Client::cluster_builder::<&str>(&[]).connect().await,
        "seed",
    );
    // With replicas acknowledged, a server without replicas refuses every grant in time.
    let lone = Client::builder(&url)
        .timeout(ms(500))
        .replica_acks(1, ms(20))
        .connect()
        .await
        .unwrap();
    let refused = lone
        .lock("alone")
        .with_wait(WaitPolicy::up_to(ms(1000)))
        .acquire()
        .await;
    assert!(
        matches!(
            refused,
            Err(Error::NotReplicated {
                acked: 0,
                needed: 1,
                ..
            })
        ),
        "{refused:?}"
    );
}

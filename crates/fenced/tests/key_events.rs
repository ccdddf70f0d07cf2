//! Wake-ups by keyspace events (`ClientBuilder::keyspace_events`): connecting turns the
//! events on, a release wakes another client's waiter without a `PUBLISH`, and anything
//! but one server, or a user without `config`, is refused with a typed error.

use std::time::Duration;

use fenced::{Client, Error};

use crate::support::{calls, eventually, raw, server};

async fn events_client(url: &str) -> Client {
    // Waiters poll only every 20 s: a prompt wake-up came from an event.
    Client::builder(url)
        .keyspace_events(true)
        .poll_interval(Duration::from_secs(20), Duration::from_secs(20))
        .connect()
        .await
        .unwrap()
}

async fn flags(conn: &mut redis::aio::MultiplexedConnection) -> String {
    let reply: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(conn)
        .await
        .unwrap();
    reply[1].clone()
}

#[tokio::test]
async fn connecting_turns_the_events_on_and_keeps_the_flags_already_set() {
    let server = server();
    let mut conn = raw(&server).await;
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Ez")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _client = events_client(&server.url()).await;
    let now = flags(&mut conn).await;
    for flag in ['K', 'g', 'x', 'E', 'z'] {
        assert!(now.contains(flag), "{flag} missing from {now:?}");
    }
}

/// Waits until one client listens on `name`'s keyspace channel (database 0).
async fn listening(conn: &redis::aio::MultiplexedConnection, name: &str) {
    subscribed(conn, &format!("__keyspace@0__:fenced:{{{name}}}")).await;
}

/// Waits until one client listens on `channel`.
async fn subscribed(conn: &redis::aio::MultiplexedConnection, channel: &str) {
    let channel = channel.to_owned();
    assert!(
        eventually(Duration::from_secs(5), || {
            let (mut conn, channel) = (conn.clone(), channel.clone());
            async move {
                let n: (String, u64) = redis::cmd("PUBSUB")
                    .arg("NUMSUB")
                    .arg(&channel)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                n.1 == 1
            }
        })
        .await,
        "nobody subscribed to {channel}"
    );
}

/// The waiter is done within 5 s (it polls every 20 s), and nothing was published since
/// `published`.
async fn woken_without_a_publish(
    conn: &mut redis::aio::MultiplexedConnection,
    published: u64,
    next: tokio::task::JoinHandle<fenced::Result<()>>,
) {
    tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the waiter was not woken by the key's del event")
        .unwrap()
        .unwrap();
    assert_eq!(
        calls(conn, "publish").await,
        published,
        "the release published"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_another_clients_waiter_without_a_publish() {
    let server = server();
    let mut conn = raw(&server).await;
    let holder = events_client(&server.url()).await;
    let waiter = events_client(&server.url()).await;

    let held = holder.lock("quiet").acquire().await.unwrap();
    let lock = waiter.lock("quiet");
    let next = tokio::spawn(async move { lock.acquire().await.map(drop) });
    listening(&conn, "quiet").await;
    let published = calls(&mut conn, "publish").await;
    held.release().await.unwrap();
    woken_without_a_publish(&mut conn, published, next).await;

    let held = holder
        .lock("quiet-unfenced")
        .unfenced()
        .acquire()
        .await
        .unwrap();
    let lock = waiter.lock("quiet-unfenced").unfenced();
    let next = tokio::spawn(async move { lock.acquire().await.map(drop) });
    listening(&conn, "quiet-unfenced").await;
    let published = calls(&mut conn, "publish").await;
    held.release().await.unwrap();
    woken_without_a_publish(&mut conn, published, next).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_a_lease_whose_holder_went_silent_when_it_runs_out() {
    let server = server();
    let holder = events_client(&server.url()).await;
    let waiter = events_client(&server.url()).await;
    // A holder that never renews nor releases, as a crashed one.
    let held = holder
        .lock("lapse")
        .with_ttl(Duration::from_millis(300))
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    let lock = waiter.lock("lapse");
    let next = tokio::spawn(async move { lock.acquire().await.map(drop) });
    let conn = raw(&server).await;
    listening(&conn, "lapse").await;
    std::mem::forget(held);
    tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the waiter never took the lapsed lock")
        .unwrap()
        .unwrap();
}

#[tokio::test]
async fn a_user_without_config_cannot_turn_the_events_on() {
    let server = server();
    let url = crate::acl_family::user(&server, "noconfig", &["ping", "info"]).await;
    let err = Client::builder(&url)
        .keyspace_events(true)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Permission { .. }), "{err:?}");
}

#[tokio::test]
async fn keyspace_events_are_refused_on_anything_but_one_server_before_connecting() {
    // Nothing listens on these ports: the refusal comes before any connection.
    let urls = [
        "redis://127.0.0.1:1",
        "redis://127.0.0.1:2",
        "redis://127.0.0.1:3",
    ];
    let err = Client::redlock_builder(&urls)
        .keyspace_events(true)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_release_wakes_another_primitives_waiter_on_the_same_key_in_any_database() {
    let server = server();
    let url = format!("{}/3", server.url());
    let holder = events_client(&url).await;
    let waiter = events_client(&url).await;
    // A plain and a re-entrant lock of one name share its key and release channel.
    let held = holder.lock("shared").acquire().await.unwrap();
    let lock = waiter.reentrant_lock("shared");
    let next = tokio::spawn(async move { lock.acquire().await.map(drop) });
    let conn = raw(&server).await;
    subscribed(&conn, "__keyspace@3__:fenced:{shared}").await;
    held.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), next)
        .await
        .expect("the re-entrant waiter was not woken by the plain lock's quiet release")
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_keyspace_channel_costs_only_its_own_wake_ups() {
    let server = server();
    // Everything a lock and a semaphore need, and `config`; but the channel patterns stop at
    // `fenced:*`, so the keyspace channels are refused.
    let commands = [
        "evalsha",
        "script|load",
        "ping",
        "info",
        "set",
        "get",
        "mget",
        "del",
        "pexpire",
        "pttl",
        "time",
        "xadd",
        "publish",
        "subscribe",
        "unsubscribe",
        "pubsub|numsub",
        "llen",
        "config|get",
        "config|set",
        "zadd",
        "zrange",
        "zrangebyscore",
        "zremrangebyscore",
        "zscore",
        "zrem",
        "pexpireat",
        "hset",
        "hdel",
        "hvals",
        "hget",
    ];
    let url = crate::acl_family::user(&server, "nokeyspace", &commands).await;
    let admin = events_client(&server.url()).await;
    let c = events_client(&url).await;
    // A lock waiter whose keyspace channel is refused: it polls (capped by the holder's lease).
    let held = admin
        .lock("refused")
        .with_ttl(Duration::from_millis(500))
        .with_auto_renew(false)
        .acquire()
        .await
        .unwrap();
    let lock = c.lock("refused");
    let lock_waiter = tokio::spawn(async move { lock.acquire().await.map(drop) });
    // A semaphore waiter of the same client: its published wake-up still comes.
    let permit = admin.semaphore("pool", 1).acquire().await.unwrap();
    let pool = c.semaphore("pool", 1);
    let sem_waiter = tokio::spawn(async move { pool.acquire().await.map(drop) });
    let mut conn = raw(&server).await;
    subscribed(&conn, "fenced:{pool}:permits:released").await;
    permit.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), sem_waiter)
        .await
        .expect("the semaphore waiter was not woken: the refusal took the pub/sub connection down")
        .unwrap()
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), lock_waiter)
        .await
        .expect("the lock waiter never took the lock after its lease ran out")
        .unwrap()
        .unwrap();
    drop(held);
    let _: () = redis::cmd("PING").query_async(&mut conn).await.unwrap();
}

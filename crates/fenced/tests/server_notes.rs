//! What a client learns at connect about a server that may evict a held lock's key
//! (`Client::server_notes`): such a server is named, with its policy and what to change; a
//! server that never evicts lock keys is not; a server that will not show its configuration
//! connects as any other, and nothing is said about it. On several masters, each note names
//! its own master.

use std::time::Duration;

use fenced::{Client, NoteKind};
use fenced_testkit::RedisServer;

use crate::support::raw;

/// A fresh server started with `args`; fails loudly without redis-server.
fn server_with(args: &[&str]) -> RedisServer {
    RedisServer::start_with(args)
        .unwrap_or_else(|e| panic!("this test needs a real redis-server: {e}"))
}

/// A server whose eviction policy is `policy`, under a memory limit.
fn bounded(policy: &str) -> RedisServer {
    server_with(&["--maxmemory", "10mb", "--maxmemory-policy", policy])
}

async fn connect(url: &str) -> Client {
    Client::builder(url)
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_may_evict_any_key_is_named_at_connect() {
    let server = bounded("allkeys-lru");
    let client = connect(&server.url()).await;
    let notes = client.server_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let note = &notes[0];
    assert_eq!(note.kind, NoteKind::Eviction);
    assert!(note.message.contains("allkeys-lru"), "{note}");
    assert!(note.message.contains("maxmemory 10mb"), "{note}");
    assert!(
        note.node.ends_with(&format!(":{}", server.port())),
        "{note}"
    );
    assert!(
        note.fix.contains("CONFIG SET maxmemory-policy noeviction"),
        "{note}"
    );
    // A note is a warning, not a refusal: the locks work as on any server.
    let guard = client.lock("noted").acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// Lock keys always carry an expiry, so a `volatile-*` policy evicts exactly them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_may_evict_keys_with_an_expiry_is_named_at_connect() {
    let server = bounded("volatile-lru");
    let client = connect(&server.url()).await;
    let notes = client.server_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert_eq!(notes[0].kind, NoteKind::Eviction);
    assert!(notes[0].message.contains("volatile-lru"), "{}", notes[0]);
    assert!(notes[0].message.contains("expiry"), "{}", notes[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_evicts_lock_keys_gets_no_note() {
    let refusing = bounded("noeviction");
    assert!(connect(&refusing.url()).await.server_notes().is_empty());
    // Without a memory limit nothing is evicted, whatever the policy says.
    let unbounded = server_with(&["--maxmemory-policy", "allkeys-lru"]);
    assert!(connect(&unbounded.url()).await.server_notes().is_empty());
    let plain = crate::support::server();
    assert!(connect(&plain.url()).await.server_notes().is_empty());
}

/// A user the ACL refuses `CONFIG` (as managed services do) connects, takes locks, and is
/// told nothing: the server's settings are unknown, not wrong.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_refused_config_connects_with_nothing_said() {
    let server = bounded("allkeys-lru");
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "noconfig", "on", ">pw", "~*", "&*", "+@all", "-config",
        ])
        .query_async(&mut raw(&server).await)
        .await
        .unwrap();
    let url = server.url().replace("redis://", "redis://noconfig:pw@");
    let client = connect(&url).await;
    assert!(
        client.server_notes().is_empty(),
        "{:?}",
        client.server_notes()
    );
    let guard = client.lock("unseen").acquire().await.unwrap();
    guard.release().await.unwrap();
}

/// Redlock: a note for the one master that may evict, naming it, and none for the others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redlock_master_that_may_evict_lock_keys_is_the_one_named() {
    let masters = [
        crate::support::server(),
        bounded("allkeys-lfu"),
        crate::support::server(),
    ];
    let urls: Vec<String> = masters.iter().map(RedisServer::url).collect();
    let client = Client::redlock_builder(&urls)
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap();
    let notes = client.server_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].node.ends_with(&format!(":{}", masters[1].port())),
        "{}",
        notes[0]
    );
    assert!(notes[0].message.contains("allkeys-lfu"), "{}", notes[0]);
}

/// A Redis Cluster: a note for each master that may evict, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_master_that_may_evict_lock_keys_is_the_one_named() {
    let cluster = crate::support::cluster(3, 0);
    for (setting, value) in [("maxmemory", "100mb"), ("maxmemory-policy", "volatile-ttl")] {
        cluster.run(0, &["CONFIG", "SET", setting, value]).unwrap();
    }
    let client = crate::support::cluster_client(&cluster).await;
    let notes = client.server_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    let port = cluster.urls()[0].rsplit(':').next().unwrap().to_owned();
    assert!(notes[0].node.ends_with(&format!(":{port}")), "{}", notes[0]);
    assert!(notes[0].message.contains("volatile-ttl"), "{}", notes[0]);
}

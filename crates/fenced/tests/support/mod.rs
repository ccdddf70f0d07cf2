//! Shared helpers: servers, clients with short timeouts, raw connections, waiting on events.

#![allow(dead_code)]

use std::time::Duration;

use fenced::Client;
use fenced_testkit::RedisServer;
use tokio::time::Instant;

/// A fresh server; panics loudly (with the reason) if none can be started.
pub fn server() -> RedisServer {
    match RedisServer::start() {
        Ok(s) => s,
        Err(e) => panic!("this test needs a real redis-server: {e}"),
    }
}

/// A client with a short per-call timeout, so failure tests finish quickly.
pub async fn client(server: &RedisServer) -> Client {
    Client::builder(&server.url())
        .timeout(Duration::from_millis(500))
        .connect()
        .await
        .expect("connect")
}

/// A plain redis-rs connection for looking behind the library's back.
pub async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Polls `check` every few milliseconds until it returns true or `limit` passes; returns
/// whether it became true. For state that has no event to wait on (keys in Redis).
pub async fn eventually<F, Fut>(limit: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Number of keys in the server's database.
pub async fn dbsize(conn: &mut redis::aio::MultiplexedConnection) -> i64 {
    redis::cmd("DBSIZE").query_async(conn).await.unwrap()
}

/// The lock key of `name` in the default namespace.
pub fn lock_key(name: &str) -> String {
    format!("fenced:{{{name}}}")
}

/// Every key in the server's database, sorted (test servers hold a handful).
pub async fn all_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(conn).await.unwrap();
    keys.sort();
    keys
}

/// The deployments every primitive's tests run on. One server today; Redis Cluster and
/// Redlock over several masters join this list when their backends exist, and every test
/// written with [`on_every_backend!`] then runs on them too.
#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Single,
}

impl Backend {
    pub const ALL: [Backend; 1] = [Backend::Single];

    /// Starts the deployment; it stops when the returned value is dropped.
    pub fn start(self) -> Deployment {
        match self {
            Backend::Single => Deployment::Single(server()),
        }
    }
}

/// A running deployment of test servers.
pub enum Deployment {
    Single(RedisServer),
}

impl Deployment {
    /// A client of this deployment with the short test timeout.
    pub async fn client(&self) -> Client {
        match self {
            Deployment::Single(s) => client(s).await,
        }
    }
}

/// `on_every_backend!(async fn name(client) { ... })`: a test whose body runs once per
/// [`Backend`], each time with a client of a fresh deployment.
macro_rules! on_every_backend {
    ($(#[$meta:meta])* async fn $name:ident($client:ident) $body:block) => {
        $(#[$meta])*
        #[tokio::test]
        async fn $name() {
            for backend in $crate::support::Backend::ALL {
                let deployment = backend.start();
                let $client = deployment.client().await;
                eprintln!("{} on {backend:?}", stringify!($name));
                $body
            }
        }
    };
}
pub(crate) use on_every_backend;

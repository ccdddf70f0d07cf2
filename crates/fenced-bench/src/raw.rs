//! The floor: a lock cycle written by hand with redis-rs, as a careful user would without a
//! library.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use redis::aio::MultiplexedConnection;

static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end",
    )
});

/// One raw lock on one name.
#[derive(Clone)]
pub struct RawLock {
    conn: MultiplexedConnection,
    key: String,
}

impl RawLock {
    /// The lock on `name` (key `raw:{name}`), over `conn`.
    pub fn new(conn: MultiplexedConnection, name: &str) -> Self {
        RawLock {
            conn,
            key: format!("raw:{{{name}}}"),
        }
    }

    /// One `SET NX PX`; the token when it took the lock.
    pub async fn try_acquire(&mut self) -> redis::RedisResult<Option<String>> {
        let token = random_token();
        Ok(self.set_nx(&token).await?.then_some(token))
    }

    /// One `SET NX PX` with `token`; true when it took the lock.
    pub(crate) async fn set_nx(&mut self, token: &str) -> redis::RedisResult<bool> {
        let ok: Option<String> = redis::cmd("SET")
            .arg(&self.key)
            .arg(token)
            .arg("NX")
            .arg("PX")
            .arg(30_000)
            .query_async(&mut self.conn)
            .await?;
        Ok(ok.is_some())
    }

    /// Polls every millisecond until it takes the lock.
    pub(crate) async fn acquire_polling(&mut self) -> redis::RedisResult<String> {
        loop {
            if let Some(token) = self.try_acquire().await? {
                return Ok(token);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// Compare-and-delete by `EVALSHA`.
    pub async fn release(&mut self, token: &str) -> redis::RedisResult<bool> {
        let deleted: i64 = RELEASE
            .key(&self.key)
            .arg(token)
            .invoke_async(&mut self.conn)
            .await?;
        Ok(deleted == 1)
    }
}

/// 128 random bits as 32 hex digits, in one allocation: the floor should not pay for a
/// `format!` per byte that a careful user would not write.
pub(crate) fn random_token() -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut bytes = [0u8; 16];
    // The OS source does not fail on Linux; a zero token would still work for the benchmark.
    let _ = getrandom::fill(&mut bytes);
    let mut token = String::with_capacity(32);
    for b in bytes {
        token.push(char::from(DIGITS[usize::from(b >> 4)]));
        token.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    token
}

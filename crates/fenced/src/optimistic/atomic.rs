//! One-round-trip atomic updates (Lua scripts): compare-and-set, versioned values, keeping a
//! maximum or minimum, taking from a stock. No retry loop, no lock.

use redis::Value;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::scripts::{
    COMPARE_AND_SET, DECREMENT_IF_AT_LEAST, SET_EXTREME, SET_IF_VERSION, ScriptCall,
};

/// The longest key accepted by the atomic operations and transactions, in bytes.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// What [`Client::compare_and_set`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CasOutcome {
    /// The value was as expected and is now the new one.
    Swapped,
    /// The value differed; nothing was written. `current` is what the key holds (`None`:
    /// it does not exist).
    Mismatch {
        /// The value found.
        current: Option<Vec<u8>>,
    },
}

/// A value with a version that increases by one on every write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Versioned {
    /// The version (1 after the first write).
    pub version: u64,
    /// The data.
    pub value: Vec<u8>,
}

/// What [`Client::set_if_version`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionedWrite {
    /// Written; the value now has this version.
    Written {
        /// The new version.
        version: u64,
    },
    /// The version had moved on; nothing was written.
    Stale {
        /// The version found (0: the key does not exist).
        current: u64,
    },
}

/// The largest stock (and `n`) [`Client::decrement_if_at_least`] works with: 10^15, well
/// inside the integers Lua's numbers hold exactly.
pub const MAX_STOCK: u64 = 1_000_000_000_000_000;

/// What [`Client::decrement_if_at_least`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stock {
    /// Taken; this much is left.
    Left(i64),
    /// Fewer than asked were left; nothing was taken.
    SoldOut {
        /// What is left.
        left: i64,
    },
}

pub(crate) fn check_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key is empty"));
    }
    if key.len() > MAX_KEY_LEN {
        return Err(Error::invalid(format!(
            "key is {} bytes long; the limit is {MAX_KEY_LEN}",
            key.len()
        )));
    }
    Ok(())
}

fn unexpected(script: &'static str, reply: impl std::fmt::Debug) -> Error {
    crate::kind::unexpected(script, format!("{reply:?}"))
}

impl Client {
    async fn eval<T: redis::FromRedisValue>(&self, call: &ScriptCall) -> Result<T> {
        self.core()
            .backend()
            .node_for("the atomic helpers")?
            .run_replicated(call)
            .await
    }

    /// Sets `key` to `new` if it holds `expected` (`None`: if it does not exist), in one
    /// step. Any ttl on the key is kept. Keys are used as given (no namespace prefix).
    ///
    /// # Examples
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// use fenced::optimistic::CasOutcome;
    ///
    /// let client = fenced::Client::connect(&url).await?;
    /// assert_eq!(client.compare_and_set("config", None, b"v1").await?, CasOutcome::Swapped);
    /// assert_eq!(
    ///     client.compare_and_set("config", None, b"v2").await?,
    ///     CasOutcome::Mismatch { current: Some(b"v1".to_vec()) }
    /// );
    /// assert_eq!(client.compare_and_set("config", Some(b"v1"), b"v2").await?, CasOutcome::Swapped);
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an empty or too long key; [`Error::Redis`] if the key
    /// holds another type; transport errors.
    pub async fn compare_and_set(
        &self,
        key: &str,
        expected: Option<&[u8]>,
        new: &[u8],
    ) -> Result<CasOutcome> {
        check_key(key)?;
        let call = ScriptCall::new(&COMPARE_AND_SET)
            .key(key)
            .arg(if expected.is_some() {
                "equals"
            } else {
                "absent"
            })
            .arg(expected.unwrap_or_default())
            .arg(new);
        let reply: Vec<Value> = self.eval(&call).await?;
        match reply.as_slice() {
            [Value::Int(1)] => Ok(CasOutcome::Swapped),
            [Value::Int(0)] => Ok(CasOutcome::Mismatch { current: None }),
            [Value::Int(0), Value::BulkString(current)] => Ok(CasOutcome::Mismatch {
                current: Some(current.clone()),
            }),
            other => Err(unexpected("compare_and_set", other)),
        }
    }

    /// Reads a versioned value (written by [`set_if_version`](Self::set_if_version)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; [`Error::Redis`] if the key holds another
    /// type; transport errors.
    pub async fn get_versioned(&self, key: &str) -> Result<Option<Versioned>> {
        check_key(key)?;
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(key).arg("v").arg("d");
        let (version, value): (Option<u64>, Option<Vec<u8>>) = self
            .core()
            .backend()
            .node_for("get_versioned")?
            .query("versioned read", &cmd)
            .await?;
        Ok(match (version, value) {
            (Some(version), Some(value)) => Some(Versioned { version, value }),
            _ => None,
        })
    }

    /// Writes `value` if the stored version is still `expected` (0: the key must not exist);
    /// the version then goes up by one. The optimistic read-modify-write: read with
    /// [`get_versioned`](Self::get_versioned), compute, write with the version you read, and
    /// start over on [`VersionedWrite::Stale`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; [`Error::Redis`] if the key holds another
    /// type; transport errors.
    pub async fn set_if_version(
        &self,
        key: &str,
        expected: u64,
        value: &[u8],
    ) -> Result<VersionedWrite> {
        check_key(key)?;
        let call = ScriptCall::new(&SET_IF_VERSION)
            .key(key)
            .arg(expected)
            .arg(value);
        let (written, version): (i64, u64) = self.eval(&call).await?;
        Ok(if written == 1 {
            VersionedWrite::Written { version }
        } else {
            VersionedWrite::Stale { current: version }
        })
    }

    /// Stores `value` if it is larger than the stored integer (or the key does not exist),
    /// and returns the value stored afterwards: the maximum of everything ever offered.
    ///
    /// Unlike the `GETSET` retry loop (write yours, read back the old one, write that back if
    /// it was larger), there is no moment at which a smaller value is stored, and no retry
    /// limit to run out of under contention.
    ///
    /// # Examples
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// let client = fenced::Client::connect(&url).await?;
    /// assert_eq!(client.set_max("high-score", 40).await?, 40);
    /// assert_eq!(client.set_max("high-score", 12).await?, 40);
    /// assert_eq!(client.set_max("high-score", 99).await?, 99);
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key; [`Error::Redis`] if the key holds something
    /// other than a decimal integer; transport errors.
    pub async fn set_max(&self, key: &str, value: i64) -> Result<i64> {
        self.set_extreme(key, value, "max").await
    }

    /// Like [`set_max`](Self::set_max), keeping the minimum.
    ///
    /// # Errors
    ///
    /// As [`set_max`](Self::set_max).
    pub async fn set_min(&self, key: &str, value: i64) -> Result<i64> {
        self.set_extreme(key, value, "min").await
    }

    async fn set_extreme(&self, key: &str, value: i64, which: &'static str) -> Result<i64> {
        check_key(key)?;
        let call = ScriptCall::new(&SET_EXTREME)
            .key(key)
            .arg(value.to_string())
            .arg(which);
        let stored: String = self.eval(&call).await?;
        stored
            .parse()
            .map_err(|_| unexpected("set_extreme", stored))
    }

    /// Takes `n` from the integer stock at `key` if at least `n` are left, in one step:
    /// [`Stock::Left`] with what remains, or [`Stock::SoldOut`] (nothing taken). A missing
    /// key is a stock of 0. The seckill purchase without a lock or a retry.
    ///
    /// # Examples
    ///
    /// ```
    /// # fenced_testkit::doctest(|test_url| async move {
    /// let url = "redis://127.0.0.1:6379"; // your server
    /// # let url = test_url;
    /// use fenced::optimistic::Stock;
    ///
    /// let client = fenced::Client::connect(&url).await?;
    /// # let mut c = fenced::redis::Client::open(url.as_str())?.get_multiplexed_async_connection().await?;
    /// # let _: () = fenced::redis::cmd("SET").arg("stock:7").arg(2).query_async(&mut c).await?;
    /// assert_eq!(client.decrement_if_at_least("stock:7", 1).await?, Stock::Left(1));
    /// assert_eq!(client.decrement_if_at_least("stock:7", 1).await?, Stock::Left(0));
    /// assert_eq!(client.decrement_if_at_least("stock:7", 1).await?, Stock::SoldOut { left: 0 });
    /// # Ok(()) });
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad key or `n` of 0 or above [`MAX_STOCK`](crate::limits::MAX_STOCK);
    /// [`Error::Redis`] if the key holds something other than a decimal integer within
    /// ±[`MAX_STOCK`](crate::limits::MAX_STOCK); transport errors. With replica
    /// acknowledgements, [`Error::NotReplicated`](crate::Error::NotReplicated) means the
    /// decrement WAS applied on the master if the stock allowed it: do not repeat it blindly.
    pub async fn decrement_if_at_least(&self, key: &str, n: u64) -> Result<Stock> {
        check_key(key)?;
        if n == 0 || n > MAX_STOCK {
            return Err(Error::invalid(format!(
                "cannot take {n} items: n must be from 1 to {MAX_STOCK}"
            )));
        }
        let call = ScriptCall::new(&DECREMENT_IF_AT_LEAST).key(key).arg(n);
        let (taken, left): (i64, i64) = self.eval(&call).await?;
        Ok(if taken == 1 {
            Stock::Left(left)
        } else {
            Stock::SoldOut { left }
        })
    }
}

//! One-round-trip atomic updates (Lua scripts): compare-and-set, versioned values, keeping a
//! maximum or minimum, taking from a stock. No retry loop, no lock.

use redis::Value;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::scripts::{
    COMPARE_AND_SET, DECREMENT_IF_AT_LEAST, SET_EXTREME, SET_IF_VERSION, ScriptCall,
};

/// The longest key accepted by the atomic operations and transactions, in bytes.
pub const MAX_KEY_LEN: usize = 64 * 1024;

/// What [`Client::compare_and_set`](crate::Client::compare_and_set) did.
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

/// What [`Client::set_if_version`](crate::Client::set_if_version) did.
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

/// The largest stock (and `n`)
/// [`Client::decrement_if_at_least`](crate::Client::decrement_if_at_least) works with: 10^15, well
/// inside the integers Lua's numbers hold exactly.
pub const MAX_STOCK: u64 = 1_000_000_000_000_000;

/// What [`Client::decrement_if_at_least`](crate::Client::decrement_if_at_least) did.
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

async fn eval<T: redis::FromRedisValue>(core: &Core, call: &ScriptCall) -> Result<T> {
    core.backend()
        .node_for("the atomic helpers")?
        .run_replicated(call)
        .await
}

/// [`Client::compare_and_set`](crate::Client::compare_and_set).
pub(crate) async fn compare_and_set(
    core: &Core,
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
    let reply: Vec<Value> = eval(core, &call).await?;
    match reply.as_slice() {
        [Value::Int(1)] => Ok(CasOutcome::Swapped),
        [Value::Int(0)] => Ok(CasOutcome::Mismatch { current: None }),
        [Value::Int(0), Value::BulkString(current)] => Ok(CasOutcome::Mismatch {
            current: Some(current.clone()),
        }),
        other => Err(unexpected("compare_and_set", other)),
    }
}

/// [`Client::get_versioned`](crate::Client::get_versioned).
pub(crate) async fn get_versioned(core: &Core, key: &str) -> Result<Option<Versioned>> {
    check_key(key)?;
    let mut cmd = redis::cmd("HMGET");
    cmd.arg(key).arg("v").arg("d");
    let (version, value): (Option<u64>, Option<Vec<u8>>) = core
        .backend()
        .node_for("get_versioned")?
        .query("versioned read", &cmd)
        .await?;
    Ok(match (version, value) {
        (Some(version), Some(value)) => Some(Versioned { version, value }),
        _ => None,
    })
}

/// [`Client::set_if_version`](crate::Client::set_if_version).
pub(crate) async fn set_if_version(
    core: &Core,
    key: &str,
    expected: u64,
    value: &[u8],
) -> Result<VersionedWrite> {
    check_key(key)?;
    let call = ScriptCall::new(&SET_IF_VERSION)
        .key(key)
        .arg(expected)
        .arg(value);
    let (written, version): (i64, u64) = eval(core, &call).await?;
    Ok(if written == 1 {
        VersionedWrite::Written { version }
    } else {
        VersionedWrite::Stale { current: version }
    })
}

/// [`Client::set_max`](crate::Client::set_max) (`which`: `max`) and
/// [`Client::set_min`](crate::Client::set_min) (`min`).
pub(crate) async fn set_extreme(
    core: &Core,
    key: &str,
    value: i64,
    which: &'static str,
) -> Result<i64> {
    check_key(key)?;
    let call = ScriptCall::new(&SET_EXTREME)
        .key(key)
        .arg(value.to_string())
        .arg(which);
    let stored: String = eval(core, &call).await?;
    stored
        .parse()
        .map_err(|_| unexpected("set_extreme", stored))
}

/// [`Client::decrement_if_at_least`](crate::Client::decrement_if_at_least).
pub(crate) async fn decrement_if_at_least(core: &Core, key: &str, n: u64) -> Result<Stock> {
    check_key(key)?;
    if n == 0 || n > MAX_STOCK {
        return Err(Error::invalid(format!(
            "cannot take {n} items: n must be from 1 to {MAX_STOCK}"
        )));
    }
    let call = ScriptCall::new(&DECREMENT_IF_AT_LEAST).key(key).arg(n);
    let (taken, left): (i64, i64) = eval(core, &call).await?;
    Ok(if taken == 1 {
        Stock::Left(left)
    } else {
        Stock::SoldOut { left }
    })
}

//! [`FencedResource`]: data in Redis that only accepts writes carrying a current fencing token.

use std::fmt;
use std::sync::Arc;

use redis::Value;

use crate::core::Core;
use crate::error::{Error, Result};
use crate::keys::{ResourceKeys, validate_name};
use crate::kind::{parse_token, unexpected};
use crate::scripts::{FENCED_ACCESS, ScriptCall};
use crate::token::FencingToken;

/// What a fenced write did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedWrite {
    /// The token was at least the highest seen; the fields were written.
    Applied,
    /// A write with a higher token was accepted before; nothing was written.
    Stale {
        /// The highest token the resource has accepted.
        highest: FencingToken,
    },
}

/// What a fenced read found: the values, or that a newer token was seen first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FencedRead<T> {
    /// The token was at least the highest seen, and is now recorded as the highest: every
    /// write with an older token is refused from now on. The values read.
    Current(T),
    /// A newer token was seen before; nothing was read or changed.
    Stale {
        /// The highest token the resource has seen.
        highest: FencingToken,
    },
}

/// The most fields one fenced write or read may carry.
pub const MAX_FIELDS_PER_WRITE: usize = 1000;

/// What a fenced read-modify-write ([`FencedResource::update`]) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FencedUpdate {
    /// Read and written with a current token.
    Applied,
    /// Read with a current token (older holders are fenced off now); the function chose not
    /// to write.
    Unchanged,
    /// A newer token was seen first, at the read or at the write; nothing was written.
    Stale {
        /// The highest token the resource has seen.
        highest: FencingToken,
    },
}

fn check_field_count(n: usize) -> Result<()> {
    if n > MAX_FIELDS_PER_WRITE {
        return Err(Error::invalid(format!(
            "{n} fields in one fenced call; the limit is {MAX_FIELDS_PER_WRITE}"
        )));
    }
    Ok(())
}

/// A Redis hash that accepts a write only if the writer's fencing token is at least the highest
/// token it has accepted before, checked and applied in one script.
///
/// This is what makes a lock safe against a holder that was paused (GC, swap, `SIGSTOP`) past
/// its lease: by the time it wakes up and writes, the next holder has written with a higher
/// token, and the late write is refused with [`FencedWrite::Stale`].
///
/// The hash is `<namespace>res:{<name>}`; the highest accepted token is kept beside it in
/// `<namespace>res:{<name>}:fence`. Neither expires.
///
/// # Examples
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// use fenced::FencingToken;
/// use fenced::resource::FencedWrite;
///
/// let client = fenced::Client::connect(&url).await?;
/// let report = client.resource("report:2026-11");
/// assert_eq!(report.set(FencingToken::new(7), "status", "done").await?, FencedWrite::Applied);
/// // A late writer holding an older token is refused:
/// assert_eq!(
///     report.set(FencingToken::new(5), "status", "stale").await?,
///     FencedWrite::Stale { highest: FencingToken::new(7) }
/// );
/// assert_eq!(report.get("status").await?.as_deref(), Some(&b"done"[..]));
/// # Ok(()) });
/// ```
///
/// **A value derived from a read needs a fenced read.** Fencing only the write is not enough
/// for read-modify-write: holder A reads stock 20 and pauses past its lease; B acquires and
/// reads 20; A wakes and writes 19 (accepted: B has not written yet); B writes 19 (accepted).
/// Two sales, one unit gone. [`read`](Self::read) (or [`update`](Self::update)) records the
/// reader's token as the highest, so after B's read every write of A is refused:
///
/// ```
/// # fenced_testkit::doctest(|test_url| async move {
/// let url = "redis://127.0.0.1:6379"; // your server
/// # let url = test_url;
/// use fenced::resource::{FencedRead, FencedUpdate};
///
/// let client = fenced::Client::connect(&url).await?;
/// let stock = client.resource("stock:10100101");
/// let guard = client.lock("stock:10100101").acquire().await?;
/// let token = guard.fencing_token();
/// stock.set(token, "count", "20").await?;
/// // Read-modify-write in one call: the read fences off older holders, the write is fenced.
/// let sold = stock
///     .update(token, "count", |count| {
///         let left: u32 = count?.parse().ok()?;
///         (left > 0).then(|| (left - 1).to_string().into_bytes())
///     })
///     .await?;
/// assert_eq!(sold, FencedUpdate::Applied);
/// assert_eq!(stock.read(token, "count").await?, FencedRead::Current(Some(b"19".to_vec())));
/// guard.release().await?;
/// # Ok(()) });
/// ```
///
/// The same rule in SQL, for a resource kept in a database: store the token with the row and
/// make the update conditional on it (and read with `SELECT … FOR UPDATE` after raising the
/// row's fence to your token, for a value derived from a read).
///
/// ```sql
/// UPDATE stock SET count = $2, fence = $3
///  WHERE product_id = $1 AND fence <= $3;   -- 0 rows updated: a newer holder wrote first
/// ```
#[derive(Clone)]
pub struct FencedResource {
    core: Arc<Core>,
    name: Arc<str>,
    keys: Arc<ResourceKeys>,
}

impl fmt::Debug for FencedResource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedResource")
            .field("name", &self.name)
            .finish()
    }
}

impl FencedResource {
    pub(crate) fn new(core: &Arc<Core>, name: String) -> Self {
        let core = core.clone();
        let keys = Arc::new(ResourceKeys::new(&core.options().namespace, &name));
        FencedResource {
            core,
            name: name.into(),
            keys,
        }
    }

    /// The resource's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Writes one field if `token` is current.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors. A refused write is not an
    /// error: it is [`FencedWrite::Stale`].
    pub async fn set(
        &self,
        token: FencingToken,
        field: &str,
        value: impl AsRef<[u8]>,
    ) -> Result<FencedWrite> {
        self.set_many(token, &[(field, value.as_ref())]).await
    }

    /// Writes several fields atomically if `token` is current (up to
    /// [`MAX_FIELDS_PER_WRITE`]). With no fields it only records the token, which fences off
    /// older holders from then on.
    ///
    /// # Errors
    ///
    /// As [`set`](Self::set), plus [`Error::InvalidArgument`] for too many fields.
    pub async fn set_many(
        &self,
        token: FencingToken,
        fields: &[(&str, &[u8])],
    ) -> Result<FencedWrite> {
        validate_name("resource", &self.name)?;
        check_field_count(fields.len())?;
        check_token(token)?;
        let mut call = ScriptCall::new(&FENCED_ACCESS)
            .key(&self.keys.data)
            .key(&self.keys.fence)
            .arg(token.get())
            .arg("write");
        for (field, value) in fields {
            call = call.arg(*field).arg(*value);
        }
        let (reply, short) = self
            .core
            .backend()
            .node_for("a fenced resource")?
            .run_acked(&call)
            .await?;
        let (applied, value): (i64, Value) = redis::from_redis_value(reply)
            .map_err(|e| unexpected("fenced write", e.to_string()))?;
        match (applied, value) {
            // Applied on the master, not confirmed by enough replicas: say so.
            (1, _) => match short {
                Some(short) => Err(short.error("fenced write")),
                None => Ok(FencedWrite::Applied),
            },
            (0, Value::BulkString(bytes)) => {
                crate::core::metrics::fenced_write_rejected();
                Ok(FencedWrite::Stale {
                    highest: parse_token("fenced write", &bytes)?,
                })
            }
            (a, v) => Err(unexpected("fenced write", format!("{a}, {v:?}"))),
        }
    }

    /// Reads one field on behalf of `token`, and fences off every older token: from now on a
    /// write with an older token is refused, even before this holder writes. Use it for every
    /// value the holder will derive a write from (see the type's documentation).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors. A refused read is not an
    /// error: it is [`FencedRead::Stale`], and the holder must stop (its lease was lost).
    pub async fn read(
        &self,
        token: FencingToken,
        field: &str,
    ) -> Result<FencedRead<Option<Vec<u8>>>> {
        Ok(match self.read_many(token, &[field]).await? {
            FencedRead::Current(mut values) => FencedRead::Current(values.pop().flatten()),
            FencedRead::Stale { highest } => FencedRead::Stale { highest },
        })
    }

    /// [`read`](Self::read) for several fields at once (up to [`MAX_FIELDS_PER_WRITE`]), in
    /// the order asked.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read), plus [`Error::InvalidArgument`] for too many fields.
    pub async fn read_many(
        &self,
        token: FencingToken,
        fields: &[&str],
    ) -> Result<FencedRead<Vec<Option<Vec<u8>>>>> {
        validate_name("resource", &self.name)?;
        check_field_count(fields.len())?;
        check_token(token)?;
        let mut call = ScriptCall::new(&FENCED_ACCESS)
            .named_as("fenced read")
            .key(&self.keys.data)
            .key(&self.keys.fence)
            .arg(token.get())
            .arg("read");
        for field in fields {
            call = call.arg(*field);
        }
        let reply: Vec<Value> = self
            .core
            .backend()
            .node_for("a fenced resource")?
            .run_replicated(&call)
            .await?;
        match reply.split_first() {
            Some((Value::Int(1), values)) if values.len() == fields.len() => values
                .iter()
                .map(|v| match v {
                    Value::Nil => Ok(None),
                    Value::BulkString(b) => Ok(Some(b.clone())),
                    other => Err(unexpected("fenced read", format!("{other:?}"))),
                })
                .collect::<Result<Vec<_>>>()
                .map(FencedRead::Current),
            Some((Value::Int(0), [Value::BulkString(bytes)])) => Ok(FencedRead::Stale {
                highest: parse_token("fenced read", bytes)?,
            }),
            _ => Err(unexpected("fenced read", format!("{reply:?}"))),
        }
    }

    /// Records `token` as the highest without reading or writing: every older token's writes
    /// are refused from now on. The same as [`set_many`](Self::set_many) with no fields.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors.
    pub async fn claim(&self, token: FencingToken) -> Result<FencedWrite> {
        self.set_many(token, &[]).await
    }

    /// Fenced read-modify-write of one field: reads it with [`read`](Self::read) (fencing off
    /// older holders), computes the new value with `f` (`None`: write nothing), and writes it
    /// with the same token. Between the read and the write no older holder can write, and a
    /// newer holder's read or write makes this write [`FencedUpdate::Stale`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors (after a failed write the
    /// outcome is unknown, as for [`set`](Self::set)).
    pub async fn update<F>(&self, token: FencingToken, field: &str, f: F) -> Result<FencedUpdate>
    where
        F: FnOnce(Option<&str>) -> Option<Vec<u8>>,
    {
        let current = match self.read(token, field).await? {
            FencedRead::Current(v) => v,
            FencedRead::Stale { highest } => return Ok(FencedUpdate::Stale { highest }),
        };
        let text = current.as_deref().and_then(|v| std::str::from_utf8(v).ok());
        let Some(new) = f(text) else {
            return Ok(FencedUpdate::Unchanged);
        };
        Ok(match self.set(token, field, new).await? {
            FencedWrite::Applied => FencedUpdate::Applied,
            FencedWrite::Stale { highest } => FencedUpdate::Stale { highest },
        })
    }

    /// Reads one field, unfenced: for display. A value that a write will be derived from
    /// must be read with [`read`](Self::read).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors.
    pub async fn get(&self, field: &str) -> Result<Option<Vec<u8>>> {
        validate_name("resource", &self.name)?;
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&self.keys.data).arg(field);
        self.core
            .backend()
            .node_for("a fenced resource")?
            .query("resource read", &cmd)
            .await
    }

    /// The highest fencing token this resource has accepted, if any.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors.
    pub async fn highest_token(&self) -> Result<Option<FencingToken>> {
        validate_name("resource", &self.name)?;
        let mut cmd = redis::cmd("GET");
        cmd.arg(&self.keys.fence);
        let raw: Option<Vec<u8>> = self
            .core
            .backend()
            .node_for("a fenced resource")?
            .query("resource read", &cmd)
            .await?;
        raw.map(|b| parse_token("resource read", &b)).transpose()
    }
}

/// Refuses [`FencingToken::UNFENCED`]: an unfenced lease's token fences nothing, and a write
/// carrying it must not pass for a fenced one (on a resource no token reached yet, it would).
fn check_token(token: FencingToken) -> Result<()> {
    if token == FencingToken::UNFENCED {
        return Err(Error::invalid(
            "fencing token 0 is an unfenced lease's, which fences nothing: take the lease with Lock, not Lock::unfenced, to write to a fenced resource",
        ));
    }
    Ok(())
}

//! [`FencedResource`]: data in Redis that only accepts writes carrying a current fencing token.

use std::fmt;
use std::sync::Arc;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::keys::{ResourceKeys, validate_name};
use crate::protocol::FencedWrite;
use crate::token::FencingToken;

/// The most fields one fenced write may carry.
pub const MAX_FIELDS_PER_WRITE: usize = 1000;

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
/// # fenced_testkit::doctest(|url| async move {
/// use fenced::{FencedWrite, FencingToken};
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
/// The same rule in SQL, for a resource kept in a database: store the token with the row and
/// make the update conditional on it.
///
/// ```sql
/// UPDATE stock SET count = $2, fence = $3
///  WHERE product_id = $1 AND fence <= $3;   -- 0 rows updated: a newer holder wrote first
/// ```
#[derive(Clone)]
pub struct FencedResource {
    client: Client,
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
    pub(crate) fn new(client: Client, name: String) -> Self {
        let keys = Arc::new(ResourceKeys::new(&client.inner.options.namespace, &name));
        FencedResource {
            client,
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
        if fields.len() > MAX_FIELDS_PER_WRITE {
            return Err(Error::invalid(format!(
                "{} fields in one fenced write; the limit is {MAX_FIELDS_PER_WRITE}",
                fields.len()
            )));
        }
        self.client
            .inner
            .protocol
            .fenced_write(&self.keys, token, fields)
            .await
    }

    /// Reads one field.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors.
    pub async fn get(&self, field: &str) -> Result<Option<Vec<u8>>> {
        validate_name("resource", &self.name)?;
        self.client
            .inner
            .protocol
            .resource_get(&self.keys, field)
            .await
    }

    /// The highest fencing token this resource has accepted, if any.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a bad name; transport errors.
    pub async fn highest_token(&self) -> Result<Option<FencingToken>> {
        validate_name("resource", &self.name)?;
        self.client.inner.protocol.resource_fence(&self.keys).await
    }
}

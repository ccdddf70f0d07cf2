//! Settings of a [`Client`](crate::Client), their defaults, and the checks on durations.

use std::time::Duration;

use crate::error::{Error, Result};

/// The shortest lease accepted: 150ms.
///
/// A lease is renewed when two thirds of its ttl are still left, so a holder survives a stall
/// (of its process, its runtime, or the round trip) of up to two thirds of the ttl. At 150ms
/// that is 100ms: a stall of 50ms, or a third of the ttl, whichever is larger, still leaves
/// the renewal a third of the ttl (at least 50ms) for its round trip. Shorter leases would be
/// lost to an ordinary scheduling hiccup on a busy machine.
pub const MIN_TTL: Duration = Duration::from_millis(150);

/// The longest lease accepted (one year); longer values are almost always a unit mistake.
pub const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// Settings shared by everything made from one [`Client`](crate::Client).
///
/// Build them with [`ClientBuilder`](crate::ClientBuilder); the defaults are listed on each field's
/// setter there.
#[derive(Clone, Debug)]
pub(crate) struct ClientOptions {
    pub(crate) namespace: String,
    pub(crate) timeout: Duration,
    pub(crate) default_ttl: Duration,
    pub(crate) fence_retention: Duration,
    pub(crate) poll_min: Duration,
    pub(crate) poll_max: Duration,
    pub(crate) transaction_connections: usize,
    /// `WAIT` after grants, renewals and fenced writes: this many replicas within this long.
    pub(crate) replica_acks: Option<(usize, Duration)>,
    /// Wake lock waiters by the server's keyspace events, and release without `PUBLISH`.
    pub(crate) keyspace_events: bool,
    /// Grant the plain lock by transaction (`MULTI`, `SET NX PX`, `XADD` to the fence).
    pub(crate) counted_grants: bool,
    /// Count waiting tasks per name too (`fenced.lock.waiting.by_name`).
    pub(crate) metrics_by_name: bool,
    /// Send no scripts: the lock's steps as transactions (`backend/node/watched.rs`).
    pub(crate) without_scripts: bool,
    /// How long `connect` keeps trying while the server cannot be reached.
    pub(crate) connect_wait: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            namespace: "fenced:".to_owned(),
            timeout: Duration::from_secs(2),
            default_ttl: Duration::from_secs(30),
            fence_retention: Duration::from_secs(24 * 3600),
            poll_min: Duration::from_millis(25),
            poll_max: Duration::from_secs(1),
            transaction_connections: 16,
            replica_acks: None,
            keyspace_events: false,
            counted_grants: true,
            metrics_by_name: false,
            without_scripts: false,
            connect_wait: Duration::ZERO,
        }
    }
}

impl ClientOptions {
    /// A waiter's polling bounds under `policy`: its backoff, capped by the client's poll
    /// maximum (fair and read-write registrations count on a retry at least that often), or
    /// else the client's poll interval.
    pub(crate) fn poll_for(&self, policy: crate::WaitPolicy) -> (Duration, Duration) {
        match policy.backoff() {
            Some((min, max)) => (min.min(self.poll_max), max.min(self.poll_max)),
            None => (self.poll_min, self.poll_max),
        }
    }

    pub(crate) fn validate(&self) -> Result<()> {
        crate::keys::validate_namespace(&self.namespace)?;
        check_range(
            "timeout",
            self.timeout,
            Duration::from_millis(1),
            Duration::from_secs(3600),
        )?;
        validate_ttl(self.default_ttl)?;
        check_range(
            "fence retention",
            self.fence_retention,
            Duration::from_secs(1),
            MAX_TTL,
        )?;
        check_range(
            "poll interval",
            self.poll_min,
            Duration::from_millis(1),
            Duration::from_secs(3600),
        )?;
        check_range(
            "poll interval",
            self.poll_max,
            self.poll_min,
            Duration::from_secs(3600),
        )?;
        if let Some((replicas, wait)) = self.replica_acks {
            if !(1..=64).contains(&replicas) {
                return Err(Error::invalid(format!(
                    "replica_acks asks for {replicas} replicas; it must be from 1 to 64"
                )));
            }
            // WAIT runs inside the call, which the timeout bounds: it must fit with room to
            // spare, or every acknowledged write would time out instead.
            check_range(
                "replica acknowledgement wait",
                wait,
                Duration::from_millis(1),
                self.timeout / 2,
            )?;
        }
        if !(1..=1024).contains(&self.transaction_connections) {
            return Err(Error::invalid(format!(
                "transaction_connections is {}; it must be from 1 to 1024",
                self.transaction_connections
            )));
        }
        Ok(())
    }
}

/// Checks a lease length.
pub(crate) fn validate_ttl(ttl: Duration) -> Result<()> {
    if ttl.is_zero() {
        return Err(Error::invalid(
            "ttl is zero; a lease must last at least 150ms",
        ));
    }
    check_range("ttl", ttl, MIN_TTL, MAX_TTL)
}

fn check_range(what: &str, value: Duration, min: Duration, max: Duration) -> Result<()> {
    if value < min {
        // `Duration`'s Debug writes zero as "0ns", which reads as a unit mistake.
        let shown = if value.is_zero() {
            "0s".to_owned()
        } else {
            format!("{value:?}")
        };
        return Err(Error::invalid(format!(
            "{what} {shown} is below the minimum of {min:?}"
        )));
    }
    if value > max {
        return Err(Error::invalid(format!(
            "{what} {value:?} is above the maximum of {max:?}"
        )));
    }
    Ok(())
}

/// How much of a lease the client does not count on: clocks of client and server may run at
/// slightly different rates (the Redlock rule: 1% of the ttl plus 2ms).
pub(crate) fn drift_allowance(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// The lease in whole milliseconds, as sent in `PX`. `validate_ttl` keeps it far from overflow.
pub(crate) fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_bounds() {
        assert!(validate_ttl(Duration::ZERO).is_err());
        assert!(validate_ttl(Duration::from_millis(149)).is_err());
        assert!(validate_ttl(MIN_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL).is_ok());
        assert!(validate_ttl(MAX_TTL + Duration::from_millis(1)).is_err());
        assert!(validate_ttl(Duration::MAX).is_err());
    }

    #[test]
    fn drift_leaves_most_of_the_lease() {
        assert_eq!(
            drift_allowance(Duration::from_secs(30)),
            Duration::from_millis(302)
        );
        assert!(drift_allowance(MIN_TTL) < MIN_TTL / 30);
    }

    #[test]
    fn defaults_are_valid() {
        assert!(ClientOptions::default().validate().is_ok());
    }
}

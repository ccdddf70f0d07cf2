//! Integration tests of `fenced` against real `redis-server` processes (no mocks).
//!
//! Each topic module says what belongs in it. Every test starts its own server on a free
//! loopback port through `fenced-testkit`; a missing `redis-server` fails the test loudly.

#![allow(clippy::unwrap_used, clippy::expect_used)] // a failed step should fail the test loudly

mod support;

#[cfg(feature = "tls")]
mod tls;

mod acl;
mod acl_family;
mod backends;
mod bad_input;
mod cache;
mod cluster;
mod election;
mod exclusion;
mod expiry;
mod fair;
mod family_faults;
mod faults;
mod fencing;
mod grants;
mod guards;
mod guide_snippets;
mod handover;
mod holds;
mod hostile;
mod inspect;
mod key_events;
mod latch;
mod layout;
mod lease_validity;
mod leases;
#[cfg(feature = "macros")]
mod locked;
mod multi;
mod optimistic;
mod outages;
mod postgres;
mod readme;
mod redlock;
mod reentrant;
mod release;
mod renewal;
mod rwlock;
mod semaphore;
mod sentinel;
mod server_notes;
mod sql_fencing;
mod storms;
mod tickets;
mod unfenced;
mod wakeup;
mod without_scripts;
mod would_deadlock;

//! The model's actions: what the clients, the server, the network and the faults may do.

use crate::config::Fault;
use crate::state::ClientId;

/// An action of the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// One ms of real time passes.
    Tick,
    /// A client sends an acquire.
    Acquire(ClientId),
    /// A client gives up on its acquire (its reply is late or lost) and sends the abandon.
    GiveUp(ClientId),
    /// A holder sends a renewal of its lease, same ttl and epoch.
    Renew(ClientId),
    /// A holder re-times its lease to the long ttl: the next epoch.
    Retime(ClientId),
    /// A holder releases.
    Release(ClientId),
    /// A holder sends a write with its token.
    Write(ClientId),
    /// A holder's deadline has passed: it knows it lost the lease.
    Expire(ClientId),
    /// The message at this index is delivered (a request executed, a reply received).
    Deliver(u8),
    /// The message at this index is lost.
    Lose(u8),
    /// The election's observer reads the leader record.
    Observe,
    /// A fault.
    Fault(Fault),
}

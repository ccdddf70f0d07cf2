//! The model's state: one Redis master with its copies on disk and on a replica, the clients,
//! the messages between them, and the resource. Small integer types keep states small: the
//! checker stores every state it visits.

use crate::fence::Id;

/// A client's index.
pub type ClientId = u8;

/// An owner token: the client and its attempt (every acquisition has a fresh one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Owner {
    /// The client.
    pub client: ClientId,
    /// Its attempt, from 0.
    pub attempt: u8,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", client_name(self.client), self.attempt + 1)
    }
}

/// A client's name in traces: `A`, `B`, `C`…
pub fn client_name(client: ClientId) -> char {
    char::from(b'A' + client)
}

/// The lock key `B`: its owner, its expiry by the server clock, and the newest epoch applied
/// (`B:epoch:<owner>`, which lives and dies with the lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lease {
    /// The owner token stored in `B`.
    pub owner: Owner,
    /// Server ms at which the key expires.
    pub expires: i64,
    /// The newest epoch applied.
    pub epoch: u8,
}

/// The fence key `B:fence`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Fence {
    /// No key.
    Missing,
    /// The stream, with its last ID.
    Stream(Id),
    /// A counter (the rules the stream replaced, kept as mutants), with the replication ID it
    /// was last written under.
    Counter {
        /// The last token handed out.
        count: u64,
        /// The server's replication ID when it was written.
        replid: u8,
    },
}

/// What a server keeps for one name; a snapshot, an append-only file and a replica each hold
/// a copy of it from some earlier instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Store {
    /// `B`.
    pub lock: Option<Lease>,
    /// `B:fence`.
    pub fence: Fence,
    /// An election's leader record (`E:leader`): its owner and term.
    pub leader: Option<(Owner, u64)>,
}

impl Store {
    /// An empty keyspace.
    pub const EMPTY: Store = Store {
        lock: None,
        fence: Fence::Missing,
        leader: None,
    };

    /// The lease in `B` that has not expired at server time `now`.
    pub fn live_lock(&self, now: i64) -> Option<Lease> {
        self.lock.filter(|lease| now < lease.expires)
    }
}

/// The master.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Server {
    /// Its keyspace.
    pub store: Store,
    /// Its replication ID: new after a restart and after a failover, unchanged by `DEBUG
    /// LOADAOF` and by `RESTORE`.
    pub replid: u8,
    /// Its clock minus real time, in ms.
    pub skew: i64,
    /// How far the clock has run ahead of real time in all (the drift bound caps it).
    pub ran_ahead: i64,
}

/// What a client is doing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Holds nothing, waits for nothing.
    Idle,
    /// Sent an acquire at `sent` (its own clock) and waits for the reply.
    Acquiring {
        /// When the request was sent.
        sent: i64,
    },
    /// Believes it holds the lock until `deadline` (its own clock).
    Holding {
        /// Its fencing token.
        token: u64,
        /// The grant's number (grants are numbered in real-time order).
        grant: u8,
        /// Valid while real time is below it.
        deadline: i64,
        /// The epoch of its newest renewal request.
        epoch: u8,
        /// The ttl of its newest renewal request.
        ttl: i64,
    },
}

/// A client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// What it does.
    pub phase: Phase,
    /// Its current attempt: its owner token is `(client, attempt)`.
    pub attempt: u8,
}

/// A reply to an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Granted {
    /// Granted with this token; the grant's number.
    Yes {
        /// The fencing token.
        token: u64,
        /// The grant's number.
        grant: u8,
    },
    /// Busy.
    No,
}

/// A message in flight: requests to the server or the resource, replies to clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Msg {
    /// The acquire step (`SET B owner NX PX ttl` and the fence's `XADD`).
    Acquire {
        /// The owner token.
        owner: Owner,
        /// When it was sent.
        sent: i64,
    },
    /// Its reply.
    Acquired {
        /// The owner token.
        owner: Owner,
        /// When the request was sent.
        sent: i64,
        /// The server's answer.
        reply: Granted,
    },
    /// The extend step (`extend.lua`).
    Renew {
        /// The owner token.
        owner: Owner,
        /// Its epoch.
        epoch: u8,
        /// The ttl it sets.
        ttl: i64,
        /// When it was sent.
        sent: i64,
    },
    /// Its reply: 1 applied, 0 not held, 2 superseded by a newer epoch.
    Renewed {
        /// The owner token.
        owner: Owner,
        /// Its epoch.
        epoch: u8,
        /// The ttl it set.
        ttl: i64,
        /// When the request was sent.
        sent: i64,
        /// The server's answer.
        reply: u8,
    },
    /// The release step (`DELIFEQ`, `release.lua`), or the abandon of an attempt whose outcome
    /// is unknown: both delete `B` where it holds the owner.
    Release {
        /// The owner token.
        owner: Owner,
    },
    /// A write to the resource with a fencing token.
    Write {
        /// The writer.
        client: ClientId,
        /// Its token.
        token: u64,
        /// Its grant's number.
        grant: u8,
    },
}

/// The fenced resource: the highest token it accepted, and the grant that token came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Resource {
    /// The highest token accepted.
    pub token: u64,
    /// The latest grant whose write it accepted.
    pub grant: u8,
}

/// What went wrong, recorded where it happened (the properties read these).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct Violations {
    /// A grant's token was not above every token handed out before.
    pub token_not_increasing: bool,
    /// The resource accepted a write of a grant older than one whose write it had accepted.
    pub stale_write: bool,
    /// An observer reported a leader older than one it had reported.
    pub observer_went_back: bool,
}

/// A state of the model.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    /// Real time, ms; also every client's monotonic clock.
    pub now: i64,
    /// The master.
    pub server: Server,
    /// The last snapshot or append-only file on disk, if one was written.
    pub disk: Option<Store>,
    /// The replica's copy, as of its last sync, if it has one.
    pub replica: Option<Store>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Messages in flight, sorted (a multiset).
    pub net: Vec<Msg>,
    /// The resource.
    pub resource: Resource,
    /// The highest term an observer of the election has reported.
    pub observed: u64,
    /// The highest ID and token handed out so far, by any rule.
    pub issued: Option<(Id, u64)>,
    /// Grants so far.
    pub grants: u8,
    /// Faults so far.
    pub faults: u8,
    /// The stated bound a step broke, if any (states past it are outside the model's claim).
    pub outside: Option<&'static str>,
    /// A fault took a live lock key away (eviction, or data put back older: a restart, a
    /// failover, `DEBUG LOADAOF`): from then on two holders may overlap, as documented, and
    /// only the fence protects the resource.
    pub lock_lost: bool,
    /// What went wrong.
    pub violations: Violations,
}

impl State {
    /// The server clock, ms.
    pub fn clock(&self) -> i64 {
        self.now + self.server.skew
    }

    /// The owner a client is acquiring or holding with.
    pub fn owner(&self, client: ClientId) -> Owner {
        Owner {
            client,
            attempt: self.clients[usize::from(client)].attempt,
        }
    }

    /// Clients that believe they hold a valid lease now.
    pub fn valid_holders(&self) -> usize {
        self.clients
            .iter()
            .filter(|c| matches!(c.phase, Phase::Holding { deadline, .. } if self.now < deadline))
            .count()
    }
}

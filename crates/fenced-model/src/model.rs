//! The protocol as a stateright model: its actions, the steps of the server, the clients and
//! the resource, and the properties.
//!
//! Invariants of the model (what a step may assume and must keep):
//! 1. Real time moves only by `Tick`; every other action takes no time. So any number of
//!    grants, faults and deliveries can happen within one ms, as on a fast server.
//! 2. A client decides only by its own clock (real time): its validity deadline is the send
//!    time of the request that granted or renewed its lease, plus the ttl, less the drift
//!    bound. It sends a write only before that deadline; the write may land any time later
//!    (a pause between the check and the write, or a slow network).
//! 3. The server decides only by its clock (`now + skew`): expiry, and the fence's IDs.
//! 4. Every request is executed atomically, once, at some later point, or lost; every reply
//!    is received at some later point, or lost. A client that gave up on an acquire sends its
//!    abandon, as the engine does.
//! 5. The stated bounds (the server clock is past every token handed out when a fence was lost
//!    or put back; it runs ahead of the clients by at most the drift) are checked where they
//!    matter; a step past them is marked `outside` and, unless the check explores past the
//!    bounds, not explored further.

use stateright::{Model, Property};

pub use crate::action::Action;
use crate::config::{Config, Fault, Mutant, START};
use crate::fence::{Id, next_id, token};
use crate::liveness::waiters_are_granted;
use crate::state::{
    Client, ClientId, Fence, Granted, Lease, Msg, Owner, Phase, Resource, Server, State, Store,
    Violations,
};

/// The property that only the checks past the stated bounds reach: a token repeats there.
pub const LIMIT: &str = "past a stated bound, a token repeats";

/// The model of one check.
#[derive(Clone, Debug)]
pub struct Protocol {
    /// What it explores.
    pub config: Config,
}

impl Protocol {
    /// The model of a check.
    pub fn new(config: Config) -> Protocol {
        Protocol { config }
    }

    fn mutant(&self, m: Mutant) -> bool {
        self.config.mutant == Some(m)
    }

    /// The deadline a request sent at `sent` for `ttl` gives, received at `now`.
    fn deadline(&self, sent: i64, now: i64, ttl: i64) -> i64 {
        let from = if self.mutant(Mutant::DeadlineFromReply) {
            now
        } else {
            sent
        };
        from + ttl - self.config.drift
    }

    /// The grant: `SET B owner NX PX ttl` and the fence's next token, as one transaction.
    fn acquire(&self, s: &mut State, owner: Owner, sent: i64) {
        let clock = s.clock();
        let reply = if s.server.store.live_lock(clock).is_some() {
            // Busy. The transaction's `XADD … NOMKSTREAM` burned an ID of a fence that exists.
            let by_script = self.config.scripted & (1 << owner.client) != 0;
            if let Fence::Stream(last) = s.server.store.fence
                && !by_script
            {
                s.server.store.fence =
                    Fence::Stream(next_id(Some(last), clock, self.config.seq_limit));
            }
            Granted::No
        } else {
            s.server.store.lock = Some(Lease {
                owner,
                expires: clock + self.config.ttl,
                epoch: 0,
            });
            let token = self.mint(s);
            s.grants += 1;
            if self.config.election {
                s.server.store.leader = Some((owner, token));
            }
            Granted::Yes {
                token,
                grant: s.grants,
            }
        };
        s.net.push(Msg::Acquired { owner, sent, reply });
    }

    /// The fence's next token, by the protocol's rule or a mutant's.
    fn mint(&self, s: &mut State) -> u64 {
        let clock = s.clock();
        let k = self.config.seq_limit;
        let (id, tok) = if self.mutant(Mutant::IncrWithoutClockFloor)
            || self.mutant(Mutant::ReplicationIdRule)
        {
            let count = match s.server.store.fence {
                Fence::Counter { count, replid } => {
                    if self.mutant(Mutant::IncrWithoutClockFloor) || replid == s.server.replid {
                        count + 1
                    } else {
                        (count + 1).max(token(Id { ms: clock, seq: 0 }, k))
                    }
                }
                _ if self.mutant(Mutant::IncrWithoutClockFloor) => 1,
                _ => token(Id { ms: clock, seq: 0 }, k),
            };
            s.server.store.fence = Fence::Counter {
                count,
                replid: s.server.replid,
            };
            (crate::fence::id_of(count, k), count)
        } else {
            let last = match s.server.store.fence {
                Fence::Stream(id) => Some(id),
                _ => None,
            };
            // The stated bound: a fence lost or put back older is outrun by the clock.
            if let Some((highest, _)) = s.issued {
                let behind = last.is_none_or(|l| l < highest);
                let clock_past = if last.is_none() {
                    clock >= highest.ms
                } else {
                    clock > highest.ms
                };
                if behind && !clock_past && s.outside.is_none() {
                    s.outside = Some(if last.is_none() {
                        "the fence was lost while the server clock was not past the highest token's ms"
                    } else {
                        "the fence was put back while the server clock was not past the highest token's ms"
                    });
                }
            }
            let id = next_id(last, clock, k);
            s.server.store.fence = Fence::Stream(id);
            (id, token(id, k))
        };
        if let Some((_, highest)) = s.issued
            && tok <= highest
        {
            s.violations.token_not_increasing = true;
        }
        if s.issued.is_none_or(|(_, highest)| tok > highest) {
            s.issued = Some((id, tok));
        }
        tok
    }

    /// `extend.lua`: 1 applied, 0 not held, 2 superseded by a newer epoch.
    fn renew(&self, s: &mut State, owner: Owner, epoch: u8, ttl: i64) -> u8 {
        let clock = s.clock();
        match s.server.store.live_lock(clock) {
            Some(lease) if lease.owner == owner => {
                if epoch < lease.epoch && !self.mutant(Mutant::RenewalWithoutEpochOrder) {
                    return 2;
                }
                s.server.store.lock = Some(Lease {
                    owner,
                    expires: clock + ttl,
                    epoch: epoch.max(lease.epoch),
                });
                1
            }
            _ => 0,
        }
    }

    /// Release or abandon: `B` deleted where it holds the owner.
    fn release(&self, s: &mut State, owner: Owner) {
        let clock = s.clock();
        let held = s
            .server
            .store
            .live_lock(clock)
            .is_some_and(|l| l.owner == owner);
        if held || self.mutant(Mutant::ReleaseWithoutOwnerCheck) {
            s.server.store.lock = None;
        }
    }

    /// The resource: accepts a token at least the highest it accepted.
    fn write(s: &mut State, token: u64, grant: u8) {
        if token < s.resource.token {
            return;
        }
        if grant < s.resource.grant {
            s.violations.stale_write = true;
        }
        s.resource.token = token;
        s.resource.grant = s.resource.grant.max(grant);
    }

    fn deliver(&self, s: &mut State, msg: Msg) {
        match msg {
            Msg::Acquire { owner, sent } => self.acquire(s, owner, sent),
            Msg::Renew {
                owner,
                epoch,
                ttl,
                sent,
            } => {
                let reply = self.renew(s, owner, epoch, ttl);
                s.net.push(Msg::Renewed {
                    owner,
                    epoch,
                    ttl,
                    sent,
                    reply,
                });
            }
            Msg::Release { owner } => self.release(s, owner),
            Msg::Write { token, grant, .. } => Protocol::write(s, token, grant),
            Msg::Acquired { owner, sent, reply } => {
                let now = s.now;
                let deadline = self.deadline(sent, now, self.config.ttl);
                let client = &mut s.clients[usize::from(owner.client)];
                if client.attempt != owner.attempt
                    || !matches!(client.phase, Phase::Acquiring { .. })
                {
                    return; // given up: the abandon takes care of the key
                }
                client.phase = match reply {
                    Granted::Yes { token, grant } => Phase::Holding {
                        token,
                        grant,
                        deadline,
                        epoch: 0,
                        ttl: self.config.ttl,
                    },
                    Granted::No => {
                        client.attempt += 1;
                        Phase::Idle
                    }
                };
            }
            Msg::Renewed {
                owner,
                epoch,
                ttl,
                sent,
                reply,
            } => {
                let now = s.now;
                let new_deadline = self.deadline(sent, now, ttl);
                let client = &mut s.clients[usize::from(owner.client)];
                if client.attempt != owner.attempt {
                    return;
                }
                if let Phase::Holding {
                    epoch: current,
                    deadline,
                    ..
                } = &mut client.phase
                {
                    match reply {
                        1 if epoch == *current => *deadline = (*deadline).max(new_deadline),
                        0 => {
                            client.phase = Phase::Idle;
                            client.attempt += 1;
                        }
                        _ => {}
                    }
                }
            }
        }
    }

    fn fault(&self, s: &mut State, fault: Fault) {
        s.faults += 1;
        let live = s.server.store.live_lock(s.clock());
        let server = &mut s.server;
        match fault {
            Fault::Save => s.disk = Some(server.store),
            Fault::Sync => s.replica = Some(server.store),
            Fault::Restart => {
                server.store = s.disk.unwrap_or(Store::EMPTY);
                server.replid += 1;
            }
            Fault::Failover => {
                server.store = s.replica.unwrap_or(Store::EMPTY);
                server.replid += 1;
            }
            Fault::LoadAof => server.store = s.disk.unwrap_or(Store::EMPTY),
            Fault::RestoreFence => {
                server.store.fence = s.disk.map_or(Fence::Missing, |d| d.fence);
            }
            Fault::EvictLock => server.store.lock = None,
            Fault::EvictFence => server.store.fence = Fence::Missing,
            Fault::ClockBack => server.skew -= 1,
            Fault::ClockAhead => {
                server.skew += 1;
                server.ran_ahead += 1;
                if server.ran_ahead > self.config.drift && s.outside.is_none() {
                    s.outside = Some(
                        "the server clock ran ahead of the clients by more than the drift bound",
                    );
                }
            }
        }
        if live.is_some() && s.server.store.lock != live {
            s.lock_lost = true;
        }
    }

    fn fault_enabled(&self, s: &State, fault: Fault) -> bool {
        if s.faults >= self.config.max_faults || !self.config.faults.contains(&fault) {
            return false;
        }
        let server = &s.server;
        match fault {
            Fault::Save => s.disk != Some(server.store),
            Fault::Sync => s.replica != Some(server.store),
            Fault::Restart | Fault::LoadAof => s.disk.unwrap_or(Store::EMPTY) != server.store,
            Fault::Failover => s.replica.unwrap_or(Store::EMPTY) != server.store,
            Fault::RestoreFence => s.disk.is_some_and(|d| d.fence != server.store.fence),
            Fault::EvictLock => server.store.lock.is_some(),
            Fault::EvictFence => server.store.fence != Fence::Missing,
            Fault::ClockBack => server.skew > -self.config.max_step_back,
            Fault::ClockAhead => self.config.past_bounds || server.ran_ahead < self.config.drift,
        }
    }
}

impl Model for Protocol {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: START,
            server: Server {
                store: Store::EMPTY,
                replid: 0,
                skew: 0,
                ran_ahead: 0,
            },
            disk: None,
            replica: None,
            clients: vec![
                Client {
                    phase: Phase::Idle,
                    attempt: 0,
                };
                usize::from(self.config.clients)
            ],
            net: Vec::new(),
            resource: Resource::default(),
            observed: 0,
            issued: None,
            grants: 0,
            faults: 0,
            outside: None,
            lock_lost: false,
            violations: Violations::default(),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        let c = &self.config;
        if s.now < START + c.max_time {
            actions.push(Action::Tick);
        }
        let may_send = s.net.len() < c.max_in_flight;
        for (i, client) in s.clients.iter().enumerate() {
            let id = i as ClientId;
            let owner = s.owner(id);
            if !may_send {
                if let Phase::Holding { deadline, .. } = client.phase
                    && s.now >= deadline
                {
                    actions.push(Action::Expire(id));
                }
                continue;
            }
            let in_flight = |f: &dyn Fn(&Msg) -> bool| s.net.iter().any(f);
            match client.phase {
                Phase::Idle => {
                    if client.attempt < c.max_attempts {
                        actions.push(Action::Acquire(id));
                    }
                }
                Phase::Acquiring { .. } => {
                    if c.losses {
                        actions.push(Action::GiveUp(id));
                    }
                }
                Phase::Holding {
                    deadline, epoch, ..
                } => {
                    if s.now < deadline {
                        if c.renewals {
                            let renewing = in_flight(
                                &|m| matches!(m, Msg::Renew { owner: o, epoch: e, .. } | Msg::Renewed { owner: o, epoch: e, .. } if *o == owner && *e == epoch),
                            );
                            if !renewing {
                                actions.push(Action::Renew(id));
                            }
                            if epoch == 0 {
                                actions.push(Action::Retime(id));
                            }
                        }
                        if c.writes
                            && !in_flight(
                                &|m| matches!(m, Msg::Write { client, .. } if *client == id),
                            )
                        {
                            actions.push(Action::Write(id));
                        }
                    } else {
                        actions.push(Action::Expire(id));
                    }
                    actions.push(Action::Release(id));
                }
            }
        }
        let mut last = None;
        for (i, msg) in s.net.iter().enumerate() {
            if last == Some(msg) {
                continue; // the same message twice: one choice
            }
            last = Some(msg);
            actions.push(Action::Deliver(i as u8));
            // A lost request is a late one that the checker never delivers: only replies are
            // lost (a late request covers what a lost one does, and more).
            if c.losses && matches!(msg, Msg::Acquired { .. } | Msg::Renewed { .. }) {
                actions.push(Action::Lose(i as u8));
            }
        }
        if c.election {
            actions.push(Action::Observe);
        }
        for fault in Fault::ALL {
            if self.fault_enabled(s, fault) {
                actions.push(Action::Fault(fault));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => s.now += 1,
            Action::Acquire(id) => {
                let owner = s.owner(id);
                s.clients[usize::from(id)].phase = Phase::Acquiring { sent: s.now };
                s.net.push(Msg::Acquire { owner, sent: s.now });
            }
            Action::GiveUp(id) => {
                let owner = s.owner(id);
                let client = &mut s.clients[usize::from(id)];
                client.phase = Phase::Idle;
                client.attempt += 1;
                s.net.push(Msg::Release { owner });
            }
            Action::Renew(id) | Action::Retime(id) => {
                let owner = s.owner(id);
                let now = s.now;
                let long = self.config.long_ttl;
                if let Phase::Holding { epoch, ttl, .. } = &mut s.clients[usize::from(id)].phase {
                    if action == Action::Retime(id) {
                        *epoch += 1;
                        *ttl = long;
                    }
                    s.net.push(Msg::Renew {
                        owner,
                        epoch: *epoch,
                        ttl: *ttl,
                        sent: now,
                    });
                }
            }
            Action::Release(id) => {
                let owner = s.owner(id);
                let client = &mut s.clients[usize::from(id)];
                client.phase = Phase::Idle;
                client.attempt += 1;
                s.net.push(Msg::Release { owner });
            }
            Action::Write(id) => {
                if let Phase::Holding { token, grant, .. } = s.clients[usize::from(id)].phase {
                    s.net.push(Msg::Write {
                        client: id,
                        token,
                        grant,
                    });
                }
            }
            Action::Expire(id) => {
                let client = &mut s.clients[usize::from(id)];
                client.phase = Phase::Idle;
                client.attempt += 1;
            }
            Action::Deliver(i) => {
                let msg = s.net.remove(usize::from(i));
                self.deliver(&mut s, msg);
            }
            Action::Lose(i) => {
                s.net.remove(usize::from(i));
            }
            Action::Observe => {
                let clock = s.clock();
                let store = s.server.store;
                // The record counts only while its owner holds the key.
                if let (Some((owner, term)), Some(lease)) = (store.leader, store.live_lock(clock))
                    && lease.owner == owner
                {
                    if self.mutant(Mutant::ObserverWithoutTermOrder) {
                        if term < s.observed {
                            s.violations.observer_went_back = true;
                        }
                        s.observed = term;
                    } else if term > s.observed {
                        s.observed = term;
                    }
                }
            }
            Action::Fault(fault) => self.fault(&mut s, fault),
        }
        if self.config.prompt {
            // Run every server step at once, and hand each reply to its client.
            while let Some(i) = s.net.iter().position(|m| !matches!(m, Msg::Write { .. })) {
                let msg = s.net.remove(i);
                self.deliver(&mut s, msg);
            }
        }
        s.net.sort();
        if s == *last {
            return None;
        }
        Some(s)
    }

    fn within_boundary(&self, s: &State) -> bool {
        self.config.past_bounds || s.outside.is_none()
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("tokens strictly increase across grants", |_, s: &State| {
                s.outside.is_some() || !s.violations.token_not_increasing
            }),
            Property::always(
                "the resource never accepts a write of an older grant after a newer one's",
                |_, s: &State| s.outside.is_some() || !s.violations.stale_write,
            ),
            Property::always(
                "no two clients hold a valid lease at once (unless a fault took the lock key)",
                |_, s: &State| s.outside.is_some() || s.lock_lost || s.valid_holders() <= 1,
            ),
            Property::always(
                "a name released or expired is granted to every waiter (faults stop, steps fair)",
                |m, s: &State| s.outside.is_some() || waiters_are_granted(m, s),
            ),
            Property::always(
                "an observer never reports an older leader",
                |_, s: &State| !s.violations.observer_went_back,
            ),
            Property::sometimes(LIMIT, |_, s: &State| {
                s.outside.is_some() && s.violations.token_not_increasing
            }),
            Property::sometimes("a lease is granted", |_, s: &State| s.grants > 0),
            Property::sometimes("a second grant follows a fault", |_, s: &State| {
                s.grants >= 2 && s.faults > 0
            }),
        ]
    }
}

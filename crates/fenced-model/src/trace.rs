//! Counterexamples as readable traces: one line per step, in the protocol's words, with the
//! state that matters after it.

use crate::config::Fault;
use crate::model::{Action, Protocol};
use crate::state::{Fence, Granted, Msg, Phase, State, client_name};

/// The trace of a path: its steps from the initial state, numbered.
pub fn render(model: &Protocol, steps: &[(State, Option<Action>)]) -> String {
    let mut out = format!(
        "     (t: real time in ms; the server clock is t plus its skew; a token is the fence ID's ms × {} + seq)\n",
        model.config.seq_limit
    );
    for (n, pair) in steps.windows(2).enumerate() {
        let (before, action) = (&pair[0].0, pair[0].1);
        let after = &pair[1].0;
        let Some(action) = action else { continue };
        out.push_str(&format!(
            "{:>3}. t={:<3} {}\n",
            n + 1,
            before.now,
            describe(model, before, action, after)
        ));
    }
    if let Some(last) = steps.last() {
        out.push_str(&format!("     then: {}\n", summary(&last.0)));
        if let Some(bound) = last.0.outside {
            out.push_str(&format!("     past the stated bound: {bound}\n"));
        }
    }
    out
}

fn describe(model: &Protocol, before: &State, action: Action, after: &State) -> String {
    match action {
        Action::Tick => "1 ms passes".to_string(),
        Action::Acquire(c) if model.config.prompt => match after.clients[usize::from(c)].phase {
            Phase::Holding {
                token, deadline, ..
            } => format!(
                "{} acquires as {}: granted, token {token}, valid until t={} (server clock {}, fence {})",
                client_name(c),
                before.owner(c),
                deadline,
                before.clock(),
                fence(after.server.store.fence)
            ),
            _ => format!("{} asks as {}: busy", client_name(c), before.owner(c)),
        },
        Action::Acquire(c) => format!("{} sends acquire as {}", client_name(c), before.owner(c)),
        Action::GiveUp(c) => format!(
            "{} gives up on its acquire (no reply) and sends the abandon of {}",
            client_name(c),
            before.owner(c)
        ),
        Action::Renew(c) => format!("{} sends a renewal", client_name(c)),
        Action::Retime(c) => format!(
            "{} re-times its lease to {} ms (a new epoch)",
            client_name(c),
            model.config.long_ttl
        ),
        Action::Release(c) => format!("{} releases {}", client_name(c), before.owner(c)),
        Action::Write(c) => match before.clients[usize::from(c)].phase {
            Phase::Holding { token, .. } => {
                format!("{} sends a write with token {token}", client_name(c))
            }
            _ => format!("{} sends a write", client_name(c)),
        },
        Action::Expire(c) => format!("{}'s deadline passes: it stops", client_name(c)),
        Action::Deliver(i) => deliver(before, i, after),
        Action::Lose(i) => format!("lost: {:?}", before.net[usize::from(i)]),
        Action::Observe => format!(
            "the observer reads the leader: reports term {}",
            after.observed
        ),
        Action::Fault(fault) => format!("FAULT {}", fault_words(fault)),
    }
}

fn deliver(before: &State, i: u8, after: &State) -> String {
    let server = format!(
        "(server clock {}, fence {})",
        before.clock(),
        fence(after.server.store.fence)
    );
    match before.net[usize::from(i)] {
        Msg::Acquire { owner, .. } => {
            let reply = after.net.iter().find_map(|m| match m {
                Msg::Acquired {
                    owner: o, reply, ..
                } if *o == owner => Some(*reply),
                _ => None,
            });
            match reply {
                Some(Granted::Yes { token, .. }) => {
                    format!("server grants {owner} with token {token} {server}")
                }
                _ => format!("server refuses {owner}: busy {server}"),
            }
        }
        Msg::Acquired { owner, reply, .. } => match reply {
            Granted::Yes { token, .. } => {
                let deadline = match after.clients[usize::from(owner.client)].phase {
                    Phase::Holding { deadline, .. } => {
                        format!(", valid until t={}", deadline)
                    }
                    _ => String::new(),
                };
                format!(
                    "{} receives its grant, token {token}{deadline}",
                    client_name(owner.client)
                )
            }
            Granted::No => format!("{} receives busy", client_name(owner.client)),
        },
        Msg::Renew {
            owner, epoch, ttl, ..
        } => {
            format!("server runs {owner}'s renewal (epoch {epoch}, ttl {ttl} ms) {server}")
        }
        Msg::Renewed { owner, reply, .. } => {
            let deadline = match after.clients[usize::from(owner.client)].phase {
                Phase::Holding { deadline, .. } => {
                    format!(", valid until t={}", deadline)
                }
                _ => String::new(),
            };
            format!(
                "{} receives renewal reply {reply}{deadline}",
                client_name(owner.client)
            )
        }
        Msg::Release { owner } => format!("server runs the release of {owner} {server}"),
        Msg::Write { client, token, .. } => {
            let accepted = token >= before.resource.token;
            format!(
                "the resource {} {}'s write with token {token}",
                if accepted { "accepts" } else { "refuses" },
                client_name(client)
            )
        }
    }
}

fn fault_words(fault: Fault) -> &'static str {
    match fault {
        Fault::Save => "the server writes a snapshot",
        Fault::Sync => "the replica syncs",
        Fault::Restart => "the server restarts from its (older) snapshot, new replication ID",
        Fault::Failover => "failover to the (lagging) replica, new replication ID",
        Fault::LoadAof => "DEBUG LOADAOF of the older file, same replication ID",
        Fault::RestoreFence => "RESTORE of an older dump of the fence",
        Fault::EvictLock => "the lock key is evicted",
        Fault::EvictFence => "the fence key is evicted",
        Fault::ClockBack => "the server clock steps back 1 ms",
        Fault::ClockAhead => "the server clock jumps 1 ms ahead",
    }
}

fn fence(f: Fence) -> String {
    match f {
        Fence::Missing => "none".to_string(),
        Fence::Stream(id) => format!("{}-{}", id.ms, id.seq),
        Fence::Counter { count, replid } => format!("count {count} under replication ID {replid}"),
    }
}

fn summary(s: &State) -> String {
    let holders: Vec<String> = s
        .clients
        .iter()
        .enumerate()
        .filter_map(|(i, c)| match c.phase {
            Phase::Holding {
                token, deadline, ..
            } if s.now < deadline => Some(format!(
                "{} holds token {token} until t={}",
                client_name(i as u8),
                deadline
            )),
            _ => None,
        })
        .collect();
    let mut parts = Vec::new();
    if !holders.is_empty() {
        parts.push(holders.join(", "));
    }
    let v = s.violations;
    if v.token_not_increasing {
        parts.push("a token was handed out twice or went back".to_string());
    }
    if v.stale_write {
        parts.push("the resource accepted an older grant's write after a newer one's".to_string());
    }
    if v.observer_went_back {
        parts.push("the observer went back to an older term".to_string());
    }
    if parts.is_empty() {
        "nothing wrong".to_string()
    } else {
        parts.join("; ")
    }
}

//! Liveness under fairness, checked from every reachable state: once faults stop and every
//! actor takes its steps (each message delivered, each holder done with its work, each
//! waiter asking again, time passing), every client that does not hold the lock is granted it
//! within a bounded number of steps. The run from a state is deterministic, so one run
//! decides it.

use stateright::Model;

use crate::action::Action;
use crate::state::{ClientId, Phase, State};

/// Steps a fair run may take before it counts as stuck.
const FAIR_STEPS: usize = 200;

/// Whether every client that does not hold a valid lease in `s` is granted one by the fair
/// run from `s`.
pub fn waiters_are_granted<M: Model<State = State, Action = Action>>(model: &M, s: &State) -> bool {
    let mut granted: Vec<bool> = s
        .clients
        .iter()
        .map(|c| matches!(c.phase, Phase::Holding { deadline, .. } if s.now < deadline))
        .collect();
    let mut asked = vec![None; s.clients.len()];
    let mut s = s.clone();
    for _ in 0..FAIR_STEPS {
        if granted.iter().all(|g| *g) {
            return true;
        }
        let action = fair_step(&s, &granted, &asked);
        if let Action::Acquire(id) = action {
            asked[usize::from(id)] = Some(s.now);
        }
        if let Some(next) = model.next_state(&s, action) {
            for (i, client) in next.clients.iter().enumerate() {
                if matches!(client.phase, Phase::Holding { .. })
                    && !matches!(s.clients[i].phase, Phase::Holding { .. })
                {
                    granted[i] = true;
                }
            }
            s = next;
        }
    }
    false
}

/// The fair scheduler's next step: deliver what is in flight, let holders finish, let waiters
/// ask, else let time pass.
fn fair_step(s: &State, granted: &[bool], asked: &[Option<i64>]) -> Action {
    if !s.net.is_empty() {
        return Action::Deliver(0);
    }
    for (i, client) in s.clients.iter().enumerate() {
        let id = i as ClientId;
        match client.phase {
            Phase::Holding { deadline, .. } if s.now < deadline => return Action::Release(id),
            Phase::Holding { .. } => return Action::Expire(id),
            // A waiter refused in this ms waits for the next (as the engine waits for the
            // lease's end or a release).
            Phase::Idle if !granted[i] && asked[i] != Some(s.now) => {
                return Action::Acquire(id);
            }
            // Nothing is in flight: its request or reply was lost, and it gives up.
            Phase::Acquiring { .. } => return Action::GiveUp(id),
            _ => {}
        }
    }
    Action::Tick
}

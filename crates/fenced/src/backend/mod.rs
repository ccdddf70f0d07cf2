//! Where the core's commands go: one Redis server today; Redis Cluster and Redlock over N
//! independent masters slot in here (issue 13) without touching the core or the primitives.
//!
//! The core asks the backend to run a [`ScriptCall`](crate::scripts::ScriptCall) or a batch
//! of them; a quorum backend will fan each call out and answer with a [`Quorum`] verdict, and
//! fail with [`Error::NoQuorum`] when a majority cannot be had.

mod node;

pub(crate) use node::{Node, bounded};

use crate::error::{Error, Result};

/// The Redis deployment a client talks to. A closed set, so public types stay non-generic.
#[derive(Clone)]
pub(crate) enum Backend {
    /// One server (or one Sentinel-managed master).
    Single {
        /// Commands, scripts and batches.
        node: Node,
        /// For connections of their own (pub/sub, transactions' `WATCH`).
        client: redis::Client,
    },
}

impl Backend {
    /// The node that serves the keys of one primitive (all share its `{hash tag}`).
    pub(crate) fn node(&self) -> &Node {
        match self {
            Backend::Single { node, .. } => node,
        }
    }

    /// A client for dedicated connections: pub/sub, and transactions (`WATCH` state belongs to
    /// a connection).
    pub(crate) fn dedicated(&self) -> &redis::Client {
        match self {
            Backend::Single { client, .. } => client,
        }
    }
}

/// The outcome of a call fanned out over several nodes: how many granted it, how many were
/// needed. A single server is a quorum of one. The shape the Redlock backend (issue 13)
/// decides with; fixed now so that `Error::NoQuorum` is part of the API from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code)] // built by the Redlock fan-out; only its tests use it so far
pub(crate) struct Quorum {
    /// Nodes that granted.
    pub(crate) granted: usize,
    /// Nodes needed: a strict majority.
    pub(crate) needed: usize,
    /// Nodes asked.
    pub(crate) nodes: usize,
}

#[allow(dead_code)] // see `Quorum`
impl Quorum {
    /// Nothing granted yet among `nodes`.
    pub(crate) fn majority_of(nodes: usize) -> Self {
        Quorum {
            granted: 0,
            needed: nodes / 2 + 1,
            nodes,
        }
    }

    /// Counts one more grant.
    pub(crate) fn grant(&mut self) {
        self.granted += 1;
    }

    /// True once the majority is reached.
    pub(crate) fn reached(&self) -> bool {
        self.granted >= self.needed
    }

    /// True once the majority can no longer be reached, with `answered` nodes heard from.
    pub(crate) fn impossible(&self, answered: usize) -> bool {
        self.granted + (self.nodes - answered.min(self.nodes)) < self.needed
    }

    /// `Ok` when reached, [`Error::NoQuorum`] otherwise.
    pub(crate) fn check(&self) -> Result<()> {
        if self.reached() {
            Ok(())
        } else {
            Err(Error::NoQuorum {
                granted: self.granted,
                needed: self.needed,
                nodes: self.nodes,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quorum_is_a_strict_majority_decided_as_soon_as_it_is_known() {
        let mut q = Quorum::majority_of(5);
        assert_eq!(q.needed, 3);
        q.grant();
        q.grant();
        assert!(!q.reached() && !q.impossible(2));
        assert!(q.impossible(5), "2 of 5 answered all: no majority");
        assert!(matches!(
            q.check(),
            Err(Error::NoQuorum {
                granted: 2,
                needed: 3,
                nodes: 5
            })
        ));
        q.grant();
        assert!(q.reached() && q.check().is_ok());
        let single = Quorum::majority_of(1);
        assert_eq!(single.needed, 1);
        assert!(single.impossible(1));
    }
}

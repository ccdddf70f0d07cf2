//! [`Allows`]: one record per node of what its server lets this client run, which the node's
//! executor loop (`exec.rs`) reads before it picks a way to run a step.
//!
//! Invariants:
//! 1. Each entry is unknown, yes or no. Unknown is tried: the first use teaches it, and a use
//!    that was refused ran nothing (an unknown command, an ACL refusal, a `MULTI` or `EXEC`
//!    refused), so the step runs another way at once and the caller never sees the difference.
//! 2. Filled at connect where a cheap probe exists: `COMMAND INFO` tells whether the server
//!    has the native compare-and-delete (`Node::probe`). Scripts and transactions have no
//!    probe that costs nothing (an ACL's rules are not readable by every user), and are
//!    learned on their first use.
//! 3. Refusals are forgotten when the node's connection is lost, and behind Sentinel when the
//!    master is forgotten (switched, demoted, unreachable: `sentinel.rs`): the next
//!    connection may reach another server (a failover, an upgrade, a restart with another
//!    ACL), which may allow them. What was allowed is kept (its refusal would be learned on use), but for the
//!    native compare-and-delete, which is forgotten too: a use that finds it unknown sends
//!    the command without its announcement (`exec.rs`), so a server reached after a failover
//!    that lacks it wakes no waiter for a release that has not happened yet. The client's
//!    own choice (`without_scripts`) is never forgotten.
//! 4. Scripts refused: the reason is kept, the first one, for the messages of the steps that
//!    cannot run without them.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use crate::util::lock_unpoisoned;

/// One entry of the record: unknown, yes or no (invariant 1).
#[derive(Debug, Default)]
pub(crate) struct Learned(AtomicU8);

impl Learned {
    const UNKNOWN: u8 = 0;
    const YES: u8 = 1;
    const NO: u8 = 2;

    /// Not known to be refused: worth trying.
    pub(crate) fn worth_trying(&self) -> bool {
        self.0.load(Ordering::Relaxed) != Self::NO
    }

    /// Not yet learned.
    pub(crate) fn unknown(&self) -> bool {
        self.0.load(Ordering::Relaxed) == Self::UNKNOWN
    }

    /// Learned: the server runs it, or not.
    pub(crate) fn learned(&self, yes: bool) {
        let value = if yes { Self::YES } else { Self::NO };
        self.0.store(value, Ordering::Relaxed);
    }

    fn forget(&self) {
        self.0.store(Self::UNKNOWN, Ordering::Relaxed);
    }

    /// Tried again if refused: what was allowed is kept, and unlearned by its own refusal.
    fn forget_refusal(&self) {
        let _ = self.0.compare_exchange(
            Self::NO,
            Self::UNKNOWN,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

/// What one node's server lets this client run.
#[derive(Debug, Default)]
pub(crate) struct Allows {
    /// The native compare-and-delete (`DELIFEQ`), which not every server has.
    pub(crate) native: Learned,
    /// The plain lock's grant as a transaction, and its mint under `WATCH` (`grant.rs`).
    pub(crate) transactions: Learned,
    /// `MULTI`/`EXEC` of reads, one snapshot (`reads.rs`); no: the reads go back to back.
    pub(crate) multi: Learned,
    /// Held while the transactions' probe runs, so that a node probes once (`grant.rs`).
    pub(crate) transactions_probe: tokio::sync::Mutex<()>,
    /// Scripts (`EVALSHA`, `SCRIPT LOAD`): no means every step that has another way takes it.
    scripts: Learned,
    /// The client chose to send no scripts: never reset (invariant 3).
    chosen: AtomicBool,
    /// Why scripts are refused: the first reason (invariant 4).
    why: Mutex<Option<String>>,
}

impl Allows {
    /// Whether scripts are refused, learned or chosen.
    pub(crate) fn scripts_refused(&self) -> bool {
        !self.scripts.worth_trying()
    }

    /// No more scripts on this node, for the reason given (the first one is kept).
    pub(crate) fn refuse_scripts(&self, why: impl Into<String>) {
        let mut reason = lock_unpoisoned(&self.why);
        if reason.is_none() {
            *reason = Some(why.into());
        }
        self.scripts.learned(false);
    }

    /// The client sends no scripts on this node, ever.
    pub(crate) fn choose_no_scripts(&self) {
        self.chosen.store(true, Ordering::Relaxed);
        self.refuse_scripts("this client sends none: drop without_scripts (fenced --no-scripts)");
    }

    /// Scripts again, after a step that had no other way was refused too: the script's
    /// refusal then names what to grant. Not when the client chose: false then.
    pub(crate) fn scripts_again(&self) -> bool {
        if self.chosen.load(Ordering::Relaxed) {
            return false;
        }
        *lock_unpoisoned(&self.why) = None;
        self.scripts.forget();
        true
    }

    /// Why scripts are refused.
    pub(crate) fn why_no_scripts(&self) -> String {
        lock_unpoisoned(&self.why)
            .clone()
            .unwrap_or_else(|| "this client sends none".to_owned())
    }

    /// Forgets the refusals learned (invariant 3): the connection was lost, and the next one
    /// may reach another server. What was allowed is kept: a way refused from now on is
    /// learned by its refusal, which ran nothing; and a way kept while the server is down
    /// fails as a transient error, where one forgotten would be probed, and could not be. The
    /// native command is forgotten either way: its probe is its next use, which costs a round
    /// trip more and needs nothing else.
    pub(crate) fn forget(&self) {
        self.native.forget();
        self.transactions.forget_refusal();
        self.multi.forget_refusal();
        if self.scripts_refused() {
            self.scripts_again();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_forgets_the_refusals_and_the_native_command_but_not_the_other_ways_allowed_nor_the_clients_choice()
     {
        let learned = Allows::default();
        learned.native.learned(false);
        learned.transactions.learned(true);
        learned.refuse_scripts("NOPERM evalsha");
        assert!(learned.scripts_refused() && !learned.native.worth_trying());
        learned.forget();
        assert!(learned.native.unknown(), "a refusal is tried again");
        assert!(
            learned.transactions.worth_trying() && !learned.transactions.unknown(),
            "what was allowed is kept"
        );
        assert!(!learned.scripts_refused());

        // The native command, allowed or not, is proved again by its next use.
        let native = Allows::default();
        native.native.learned(true);
        native.forget();
        assert!(native.native.unknown());

        let chosen = Allows::default();
        chosen.choose_no_scripts();
        chosen.forget();
        assert!(chosen.scripts_refused());
        assert!(chosen.why_no_scripts().contains("without_scripts"));
    }

    #[test]
    fn the_first_reason_scripts_are_refused_is_kept() {
        let allows = Allows::default();
        allows.refuse_scripts("first");
        allows.refuse_scripts("second");
        assert_eq!(allows.why_no_scripts(), "first");
        assert!(allows.scripts_again());
        assert!(!allows.scripts_refused());
    }
}

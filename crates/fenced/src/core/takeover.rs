//! Take-overs from tickets whose outcome is unknown. A take-over is refused once its epoch was
//! applied (a ticket is taken over once), so a retry after a lost reply, or after a replica
//! shortfall, would be refused by the very take-over it repeats. So each attempt leaves a
//! random mark beside the epoch it applied (`extend.lua`), and a repeat proves itself with
//! every mark its earlier attempts may have left: the epoch is applied again only for a proof
//! that matches. This file keeps, per client, the marks of every take-over whose outcome is
//! unknown, so that resuming the same ticket again repeats it.
//!
//! Invariants:
//! 1. A line of attempts yields at most one guard. Its marks are out of the map while an
//!    attempt runs, go back only when the attempt ended without an answer (an error, or its
//!    future dropped), and never after an answer: a granted take-over is never repeated by
//!    this client, so a duplicate of the ticket, even resumed here, is refused.
//! 2. Marks handed out in a retry ticket leave the map, so only that text repeats the
//!    take-over. A take-over from a retry ticket leaves a fresh mark of its own: a copy of
//!    the same retry ticket, resumed after it was granted, proves a mark that is gone.
//!    Within one client, retries keep their mark (nothing copies a client's memory).
//! 3. An entry lives as long as the ticket's ttl from its attempt: past it, the lease has
//!    expired unless the take-over was granted, and then it is not ours to repeat.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Result;
use crate::token::OwnerToken;
use crate::util::lock_unpoisoned;

/// A ticket's take-over: its owner token and the epoch it opens.
type Key = (String, u64);

/// The take-overs of one client whose outcome is unknown: the marks each may have left.
#[derive(Default)]
pub(crate) struct TakeOvers {
    pending: Mutex<HashMap<Key, (Vec<OwnerToken>, Instant)>>,
}

impl TakeOvers {
    /// Starts a take-over of `owner`'s lease at `epoch`, for a ticket of `ttl`: the repeat of
    /// an earlier attempt of unknown outcome, if there is one, else of the attempts whose
    /// marks a retry ticket `carried`, else a first.
    pub(crate) fn begin(
        &self,
        owner: &OwnerToken,
        epoch: u64,
        carried: Vec<OwnerToken>,
        ttl: Duration,
    ) -> Result<Attempt<'_>> {
        let key = (owner.as_str().to_owned(), epoch);
        let now = Instant::now();
        let earlier = {
            let mut pending = lock_unpoisoned(&self.pending);
            pending.retain(|_, (_, until)| *until > now);
            pending.remove(&key).map(|(marks, _)| marks)
        };
        let marks = match earlier {
            // This client's own line: its last mark is its own (invariant 2).
            Some(marks) if !marks.is_empty() => marks,
            _ => {
                let mut marks = carried;
                marks.push(OwnerToken::fresh()?);
                marks
            }
        };
        Ok(Attempt {
            pending: self,
            key: Some(key),
            marks,
            until: now + ttl,
        })
    }

    /// Takes out the marks of `owner`'s take-over at `epoch` whose outcome is unknown, for a
    /// retry ticket (invariant 2).
    pub(crate) fn hand_out(&self, owner: &OwnerToken, epoch: u64) -> Option<Vec<OwnerToken>> {
        let now = Instant::now();
        let mut pending = lock_unpoisoned(&self.pending);
        pending
            .remove(&(owner.as_str().to_owned(), epoch))
            .filter(|(_, until)| *until > now)
            .map(|(marks, _)| marks)
    }
}

/// One take-over attempt. Dropped without [`answered`](Self::answered), its outcome counts as
/// unknown and its marks wait for a repeat.
pub(crate) struct Attempt<'a> {
    pending: &'a TakeOvers,
    key: Option<Key>,
    /// Every mark the line may have left; the last is the one this attempt leaves.
    marks: Vec<OwnerToken>,
    until: Instant,
}

impl Attempt<'_> {
    /// The mark this attempt leaves.
    pub(crate) fn mark(&self) -> &OwnerToken {
        // `begin` always pushes or keeps at least one.
        &self.marks[self.marks.len() - 1]
    }

    /// The marks its earlier attempts may have left: what proves it a repeat.
    pub(crate) fn proofs(&self) -> &[OwnerToken] {
        &self.marks
    }

    /// Redis answered (granted or refused): the line ends here (invariant 1).
    pub(crate) fn answered(mut self) {
        self.key = None;
    }
}

impl Drop for Attempt<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            let marks = std::mem::take(&mut self.marks);
            lock_unpoisoned(&self.pending.pending).insert(key, (marks, self.until));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(30);

    #[tokio::test(start_paused = true)]
    async fn a_take_over_of_unknown_outcome_is_repeated_with_its_mark_and_an_answered_one_never() {
        let t = TakeOvers::default();
        let owner = OwnerToken::fresh().unwrap();
        let first = t.begin(&owner, 3, Vec::new(), TTL).unwrap();
        let mark = first.mark().clone();
        // While it runs, a concurrent attempt is a first of its own.
        let other = t.begin(&owner, 3, Vec::new(), TTL).unwrap();
        assert!(other.mark() != &mark);
        other.answered();
        drop(first); // an error, or a dropped future: unknown
        let retry = t.begin(&owner, 3, Vec::new(), TTL).unwrap();
        assert!(retry.mark() == &mark && retry.proofs() == [mark.clone()]);
        retry.answered();
        assert!(t.begin(&owner, 3, Vec::new(), TTL).unwrap().mark() != &mark);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_ticket_takes_the_marks_out_and_its_take_over_leaves_a_fresh_one() {
        let t = TakeOvers::default();
        let owner = OwnerToken::fresh().unwrap();
        let mark = t.begin(&owner, 1, Vec::new(), TTL).unwrap().mark().clone();
        let handed = t.hand_out(&owner, 1).unwrap();
        assert!(handed == [mark.clone()]);
        assert!(t.hand_out(&owner, 1).is_none());
        // In another process: the carried marks prove it, and it leaves a fresh one.
        let other = TakeOvers::default();
        let carried = other.begin(&owner, 1, handed, TTL).unwrap();
        assert!(carried.proofs()[0] == mark && carried.mark() != &mark);
        drop(carried);
        assert_eq!(other.hand_out(&owner, 1).map(|m| m.len()), Some(2));
        // Entries end with the ticket's ttl.
        drop(t.begin(&owner, 1, Vec::new(), TTL).unwrap());
        tokio::time::advance(TTL).await;
        assert!(t.hand_out(&owner, 1).is_none());
    }
}

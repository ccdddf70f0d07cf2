//! The handover offers that local waiters post in their queues, and the runs of handovers
//! they count (`handover.rs`): part of the registry, apart from its wake-ups.

use super::{LocalWaiters, Offer};
use crate::core::handover::MAX_IN_A_ROW;
use crate::kind::HandOverTo;
use crate::util::lock_unpoisoned;

impl LocalWaiters {
    /// Posts a waiter's offer to take a lock straight from a local holder: at the back as it
    /// joins the queue, at the front when the head renews its offer.
    pub(crate) fn post_offer(&self, to: HandOverTo<'_>, offer: Offer, front: bool) {
        let mut guard = self.queues();
        let push = |offers: &mut std::collections::VecDeque<Offer>| {
            // Offers of waiters that have gone are dropped on the way.
            offers.retain(Offer::is_live);
            if front {
                offers.push_front(offer);
            } else {
                offers.push_back(offer);
            }
        };
        match to {
            HandOverTo::LocalQueue(channel) => {
                if let Some(q) = guard.by_key.get(channel) {
                    push(&mut lock_unpoisoned(&q.offers));
                }
            }
            HandOverTo::FairHead(key) => {
                // Locks whose fair waiters all went leave nothing behind.
                guard.fair_offers.retain(|k, offers| {
                    k == key || {
                        offers.retain(Offer::is_live);
                        !offers.is_empty()
                    }
                });
                push(guard.fair_offers.entry(key.to_owned()).or_default());
            }
        }
    }

    /// Takes the first live offer standing for `to`; for a local queue, none once its channel
    /// was handed over `MAX_IN_A_ROW` times in a row (the holder then releases as usual, which
    /// ends the run).
    pub(crate) fn take_offer(&self, to: HandOverTo<'_>) -> Option<Offer> {
        if !self.any_queue() {
            return None;
        }
        let mut queues = self.queues();
        let first_live = |offers: &mut std::collections::VecDeque<Offer>| {
            std::iter::from_fn(|| offers.pop_front()).find(Offer::is_live)
        };
        match to {
            HandOverTo::LocalQueue(channel) => {
                if queues
                    .streaks
                    .get(channel)
                    .is_some_and(|n| *n >= MAX_IN_A_ROW)
                {
                    return None;
                }
                let q = queues.by_key.get(channel)?;
                first_live(&mut lock_unpoisoned(&q.offers))
            }
            HandOverTo::FairHead(key) => {
                let offers = queues.fair_offers.get_mut(key)?;
                let offer = first_live(offers);
                if offers.is_empty() {
                    queues.fair_offers.remove(key);
                }
                offer
            }
        }
    }

    /// Counts a handover of a local queue's channel, and records that its lock is held by this
    /// process. (A fair lock's handovers follow its queue in Redis: nothing to count.)
    pub(crate) fn handed_over(&self, to: HandOverTo<'_>) {
        let HandOverTo::LocalQueue(channel) = to else {
            return;
        };
        let mut guard = self.queues();
        let queues = &mut *guard;
        if !queues.streaks.contains_key(channel) {
            self.live_streaks
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        *queues.streaks.entry(channel.to_owned()).or_insert(0) += 1;
        if let Some(q) = queues.by_key.get(channel) {
            q.held_here
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Ends `channel`'s run of handovers: an ordinary release let everyone try.
    pub(crate) fn end_streak(&self, channel: &str) {
        if self.live_streaks.load(std::sync::atomic::Ordering::SeqCst) == 0 {
            return;
        }
        if self.queues().streaks.remove(channel).is_some() {
            self.live_streaks
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// True while `channel`'s lock is known to be held by this process after a handover.
    pub(crate) fn is_held_here(&self, channel: &str) -> bool {
        self.any_queue()
            && self
                .queues()
                .by_key
                .get(channel)
                .is_some_and(|q| q.held_here.load(std::sync::atomic::Ordering::Relaxed))
    }
}

//! The one protocol for sleeping on a completion queue without losing a wake-up.
//!
//! An armed CQ raises one event for a completion written *after* the arm reached the device
//! (the verbs contract; an mlx5 device also fires at once when the arm names a consumer index
//! behind its producer index, but a waiter cannot count on every device doing so). A
//! completion written between the last empty poll and the arm raises nothing. So a waiter
//! polls, arms, and polls **again**: only when that second poll is empty may it sleep, since
//! any completion from then on comes after the arm and raises the event. Sleeping after the
//! first empty poll is the lost wake-up every hand-written loop gets wrong; it lives here,
//! once, for every backend ([`poll_arm_poll`]), and the loom model `cq_arm` checks it with a
//! device that keeps the weakest contract (mutant `no_repoll_after_arm`: no second poll).

use crate::Completion;
use crate::queue::PollCq;

/// Polls `cq` into `out`; if nothing was there, calls `arm` (which arms the CQ for the next
/// completion) and polls again. Returns the completions found: 0 means the CQ is armed and
/// was empty after the arm, so the caller may sleep until the CQ's event.
///
/// # Errors
///
/// What `arm` returns; the CQ was polled once, empty, and may not be armed.
#[inline]
pub fn poll_arm_poll<C, E>(
    cq: &mut C,
    out: &mut [Completion],
    arm: impl FnOnce(&mut C) -> Result<(), E>,
) -> Result<usize, E>
where
    C: PollCq + ?Sized,
{
    let n = cq.poll(out);
    if n > 0 {
        return Ok(n);
    }
    arm(cq)?;
    if cfg!(zverbs_mutant = "no_repoll_after_arm") {
        return Ok(0);
    }
    Ok(cq.poll(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CQ whose completion appears at its `at`-th poll.
    struct Script {
        at: usize,
        polls: usize,
        arms: usize,
    }

    impl PollCq for Script {
        fn poll(&mut self, out: &mut [Completion]) -> usize {
            self.polls += 1;
            if self.polls == self.at {
                out[0] = Completion::EMPTY;
                1
            } else {
                0
            }
        }
    }

    fn run(at: usize, arm: Result<(), &'static str>) -> (Result<usize, &'static str>, Script) {
        let mut out = [Completion::EMPTY; 2];
        let mut cq = Script {
            at,
            polls: 0,
            arms: 0,
        };
        let r = poll_arm_poll(&mut cq, &mut out, |c: &mut Script| {
            c.arms += 1;
            arm
        });
        (r, cq)
    }

    #[test]
    fn polls_again_after_arming() {
        // Written between the first poll and the arm: found by the poll after the arm.
        let (r, cq) = run(2, Ok(()));
        assert_eq!((r, cq.polls, cq.arms), (Ok(1), 2, 1));
        // Already there: no arm.
        let (r, cq) = run(1, Ok(()));
        assert_eq!((r, cq.polls, cq.arms), (Ok(1), 1, 0));
        // Nothing: armed and empty, the caller may sleep.
        let (r, cq) = run(9, Ok(()));
        assert_eq!((r, cq.polls, cq.arms), (Ok(0), 2, 1));
        // An arm that fails is reported.
        let (r, _) = run(9, Err("no channel"));
        assert_eq!(r, Err("no channel"));
    }
}

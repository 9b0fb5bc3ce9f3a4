//! Whether a queue may post, and to which incarnation of its queue pair.
//!
//! A queue pair that leaves the states that serve a queue (the error state, RESET) must refuse
//! posts with nothing written, and one that is reset and connected again restarts its
//! counters at 0, as the device does. The queue is owned by its posting thread and the
//! transitions are made on another (the control path, or the poller that sees an error
//! completion), so they meet in one word per queue, the [`Gate`]:
//!
//! - bit 0, `OPEN`: the queue may post;
//! - bits 31..1: the incarnation, counted up each time the queue pair is reset.
//!
//! The queue keeps the value it last found (open, of its incarnation). Every post compares
//! the word, loaded `Relaxed`, with it: one load and one compare, on a line the post reads
//! anyway. When they differ, out of line, the queue loads the word again with `Acquire`: a
//! closed gate refuses the request ([`PostError::NotReady`](zverbs_core::PostError)); an open
//! gate of a later incarnation makes the queue restart its counters at 0 first (the device
//! restarted its own; the control path reset the poller's credit word before it opened the
//! gate with `Release`, which the `Acquire` pairs with).

use zverbs_core::sync::atomic::{AtomicU32, Ordering};

use crate::devmem::DbrecWord;
use crate::layout::QpLayout;
use crate::prm::{RCV_DBR, SND_DBR};

/// The gate is open: the queue may post.
pub(crate) const OPEN: u32 = 1;

/// One queue's gate: open or closed, and the incarnation of its queue pair. A new gate is
/// open, of incarnation 0.
#[derive(Debug)]
pub struct Gate(AtomicU32);

impl Default for Gate {
    fn default() -> Self {
        Self::new()
    }
}

impl Gate {
    /// An open gate of incarnation 0.
    pub fn new() -> Self {
        Self(AtomicU32::new(OPEN))
    }

    /// The word, for the posting fast path's compare (`Relaxed`: an equal value needs no
    /// ordering, a different one is loaded again with [`Gate::load`]).
    #[inline(always)]
    pub(crate) fn peek(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    /// The word, `Acquire`: pairs with [`Gate::restart`]'s and [`Gate::open`]'s `Release`.
    #[inline]
    pub(crate) fn load(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// Whether posts are accepted now.
    pub fn is_open(&self) -> bool {
        self.load() & OPEN != 0
    }

    /// The incarnation: how many times the queue pair was reset.
    pub fn incarnation(&self) -> u32 {
        self.load() >> 1
    }

    /// Refuses posts from now on (the queue pair left the states that serve the queue). The
    /// control path calls it, and the poller when an error completion shows the device moved
    /// the queue pair to the error state.
    pub fn close(&self) {
        self.0.fetch_and(!OPEN, Ordering::Release);
    }

    /// Accepts posts again, of the current incarnation.
    pub fn open(&self) {
        self.0.fetch_or(OPEN, Ordering::Release);
    }

    /// Starts the next incarnation, closed: the queue pair was reset. What the control path
    /// reset before (the poller's credit word) is visible to the queue that sees the gate open
    /// again.
    pub(crate) fn restart(&self) {
        let next = (self.0.load(Ordering::Relaxed) >> 1).wrapping_add(1);
        self.0.store(next << 1, Ordering::Release);
    }
}

/// The counters the QP's doorbell record holds: (receive head, send producer counter), the
/// low 16 bits of what the queues last published. With [`SqState::retired16`] and
/// [`RqState::retired16`] they say whether every request the device was given has completed.
///
/// [`SqState::retired16`]: crate::SqState::retired16
/// [`RqState::retired16`]: crate::RqState::retired16
///
/// # Safety
///
/// `layout.dbrec` is the live QP's doorbell record (mapped while this runs).
pub unsafe fn doorbell_counters(layout: &QpLayout) -> (u16, u16) {
    // SAFETY: (caller) the record is mapped; words 0 and 1 are MLX5_RCV_DBR and MLX5_SND_DBR.
    let (rq, sq) = unsafe {
        (
            DbrecWord::new(layout.dbrec, RCV_DBR),
            DbrecWord::new(layout.dbrec, SND_DBR),
        )
    };
    (rq.read() as u16, sq.read() as u16)
}

/// Clears the QP's doorbell record, as libmlx5 does when it moves a QP to RESET: the device
/// restarts its counters at 0, and so do the queues.
///
/// # Safety
///
/// `layout.dbrec` is the live QP's doorbell record, the QP is in RESET, and no queue posts to
/// it meanwhile.
pub unsafe fn clear_doorbell_record(layout: &QpLayout) {
    for word in [RCV_DBR, SND_DBR] {
        // SAFETY: (caller) as above.
        unsafe { DbrecWord::new(layout.dbrec, word) }.publish(0, Ordering::Release);
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    use super::*;

    #[test]
    fn open_close_and_incarnations() {
        let g = Gate::new();
        assert!(g.is_open());
        assert_eq!(g.incarnation(), 0);
        g.close();
        assert!(!g.is_open());
        g.open();
        assert_eq!(g.peek(), OPEN);
        g.restart();
        assert!(!g.is_open());
        assert_eq!(g.incarnation(), 1);
        g.open();
        assert_eq!(g.peek(), 2 | OPEN);
    }
}

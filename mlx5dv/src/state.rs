//! Bookkeeping shared between a queue's poster and the completion-queue poller.
//!
//! A send queue is written by one thread and its completions may be polled on another. What
//! they share is small and sized once at set-up:
//!
//! - one [`SqSlot`] per send basic block, written by the poster when it builds a WQE starting
//!   there (the caller's `wr_id`, where the next WQE starts, whether it asked for a CQE) and
//!   read by the poller when a CQE names that WQE;
//! - one cache-padded atomic word, written only by the poller, that hands credits back: the
//!   consumer counter (in basic blocks) and the number of signaled requests completed.
//!
//! The poller stores the word with `Release` after reading the slot; the poster loads it with
//! `Acquire` before reusing the slot. So a slot is never overwritten while the poller may still
//! read it (single producer, single consumer; modelled in `loom-tests`).

use zverbs_core::sync::CachePadded;
use zverbs_core::sync::atomic::{AtomicU32, Ordering};
use zverbs_core::sync::cell::UnsafeCell;

use crate::layout::LayoutError;

/// What the poster records for a WQE starting at a basic block.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct SlotData {
    /// The caller's tag.
    pub(crate) wr_id: u64,
    /// Producer counter (basic blocks) just after this WQE: the consumer counter once it
    /// completes.
    pub(crate) next: u32,
    /// The mlx5 opcode of the WQE.
    pub(crate) opcode: u8,
    /// Whether the WQE asked for a CQE.
    pub(crate) signaled: bool,
}

/// Per-basic-block bookkeeping storage of a send queue. Allocate `sq.wqe_cnt` of them once.
#[derive(Debug, Default)]
pub struct SqSlot(UnsafeCell<SlotData>);

impl SqSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self(UnsafeCell::new(SlotData::default()))
    }
}

impl SqSlot {
    /// Poster side: records the WQE starting at this slot's basic block.
    ///
    /// # Safety
    ///
    /// The slot is the poster's: the credit word shows the poller has consumed every earlier
    /// completion of this slot, and the WQE is not published yet.
    #[inline(always)]
    pub(crate) unsafe fn record(&self, data: SlotData) {
        // SAFETY: (caller) no one else accesses this slot now.
        self.0.with_mut(|p| unsafe { p.write(data) });
    }
}

/// Per-entry bookkeeping storage of a receive queue (the `wr_id`). Allocate `rq.wqe_cnt` once.
#[derive(Debug, Default)]
pub struct RqSlot(UnsafeCell<u64>);

impl RqSlot {
    /// An empty slot.
    pub fn new() -> Self {
        Self(UnsafeCell::new(0))
    }
}

/// What a send queue shares with the completion queue that serves it.
#[derive(Debug)]
pub struct SqState<'a> {
    slots: &'a [SqSlot],
    /// `slots.len() - 1`.
    mask: u32,
    /// Low 16 bits: consumer counter in basic blocks. High 16 bits: signaled requests
    /// completed. Both wrap; written only by the poller.
    done: CachePadded<AtomicU32>,
}

// SAFETY: the slots are accessed by two threads under the protocol in the module docs (the
// poster writes a slot only when the credit word says the poller is done with it; the poller
// reads it only after the device completed the WQE the poster published through the doorbell
// record), and the credit word is atomic.
unsafe impl Sync for SqState<'_> {}
// SAFETY: as above; the state holds only shared references and atomics.
unsafe impl Send for SqState<'_> {}

impl<'a> SqState<'a> {
    /// State over `slots`, one per send basic block (`sq.wqe_cnt`, a power of two).
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotPowerOfTwo`] when the length is not a power of two ≤ 2^15.
    pub fn new(slots: &'a [SqSlot]) -> Result<Self, LayoutError> {
        check_slots(slots.len())?;
        Ok(Self {
            slots,
            mask: slots.len() as u32 - 1,
            done: CachePadded(AtomicU32::new(0)),
        })
    }

    /// Number of slots (send basic blocks).
    #[inline]
    pub fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Never true: a state has at least one slot.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[inline(always)]
    fn slot(&self, counter: u32) -> &SqSlot {
        let i = (counter & self.mask) as usize;
        debug_assert!(i < self.slots.len());
        // SAFETY: the length is a power of two (checked in `new`) and `mask` is one less, so
        // the masked index is in bounds.
        unsafe { self.slots.get_unchecked(i) }
    }

    /// The slots, for the poster, which indexes them with the ring position it has already
    /// masked (see [`SqSlot::record`]).
    #[inline(always)]
    pub(crate) fn slots(&self) -> &'a [SqSlot] {
        self.slots
    }

    /// Poster side: the credit word (`Acquire`, pairing with the poller's `Release`).
    #[inline(always)]
    pub(crate) fn load_done(&self) -> u32 {
        self.done.load(Ordering::Acquire)
    }

    /// Poller side: the WQE whose first basic block has the 16-bit counter `wqe_counter`
    /// completed (with a CQE of its own). Retires it and every unsignaled WQE before it, hands
    /// the credits back, and returns what the poster recorded.
    ///
    /// # Safety
    ///
    /// Only the one poller of this queue calls this, for a WQE the device reported complete.
    #[inline(always)]
    pub(crate) unsafe fn retire(&self, wqe_counter: u16) -> SlotData {
        // SAFETY: (caller) the device completed this WQE, so the poster wrote the slot before
        // publishing it and will not rewrite it until the credit word below releases it.
        let data = self
            .slot(u32::from(wqe_counter))
            .0
            .with(|p| unsafe { p.read() });
        let old = self.done.load(Ordering::Relaxed); // only this thread writes it
        let signaled = old.wrapping_add(u32::from(data.signaled) << 16) & 0xffff_0000;
        let word = signaled | (data.next & 0xffff);
        #[cfg(not(zverbs_mutant = "relaxed_credit"))]
        self.done.store(word, Ordering::Release);
        #[cfg(zverbs_mutant = "relaxed_credit")]
        self.done.store(word, Ordering::Relaxed);
        data
    }
}

/// What a receive queue shares with the completion queue that serves it.
#[derive(Debug)]
pub struct RqState<'a> {
    slots: &'a [RqSlot],
    /// `slots.len() - 1`.
    mask: u32,
    /// Receive requests completed (free-running); written only by the poller.
    tail: CachePadded<AtomicU32>,
}

// SAFETY: as for `SqState`: slot `i` is written by the poster only after the tail released it
// and read by the poller only after the device completed it.
unsafe impl Sync for RqState<'_> {}
// SAFETY: as above.
unsafe impl Send for RqState<'_> {}

impl<'a> RqState<'a> {
    /// State over `slots`, one per receive entry (`rq.wqe_cnt`, a power of two).
    ///
    /// # Errors
    ///
    /// [`LayoutError::NotPowerOfTwo`] when the length is not a power of two ≤ 2^15.
    pub fn new(slots: &'a [RqSlot]) -> Result<Self, LayoutError> {
        check_slots(slots.len())?;
        Ok(Self {
            slots,
            mask: slots.len() as u32 - 1,
            tail: CachePadded(AtomicU32::new(0)),
        })
    }

    /// Number of slots.
    #[inline]
    pub fn len(&self) -> u32 {
        self.slots.len() as u32
    }

    /// Never true: a state has at least one slot.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    #[inline(always)]
    fn slot(&self, counter: u32) -> &RqSlot {
        let i = (counter & self.mask) as usize;
        debug_assert!(i < self.slots.len());
        // SAFETY: the length is a power of two (checked in `new`) and `mask` is one less.
        unsafe { self.slots.get_unchecked(i) }
    }

    /// Poster side: records `wr_id` for the receive entry `head`.
    ///
    /// # Safety
    ///
    /// The slot is free (the tail shows it completed) and not yet published.
    #[inline(always)]
    pub(crate) unsafe fn record(&self, head: u32, wr_id: u64) {
        // SAFETY: (caller) no one else accesses this slot now.
        self.slot(head).0.with_mut(|p| unsafe { p.write(wr_id) });
    }

    /// Poster side: completed receives (`Acquire`, pairing with the poller's `Release`).
    #[inline(always)]
    pub(crate) fn load_tail(&self) -> u32 {
        self.tail.load(Ordering::Acquire)
    }

    /// Poller side: the oldest receive completed; returns its `wr_id` and frees its slot.
    ///
    /// # Safety
    ///
    /// Only the one poller of this queue calls this, once per receive CQE.
    #[inline(always)]
    pub(crate) unsafe fn retire(&self) -> u64 {
        let tail = self.tail.load(Ordering::Relaxed); // only this thread writes it
        // SAFETY: (caller) the device completed this receive, which the poster recorded before
        // publishing it.
        let wr_id = self.slot(tail).0.with(|p| unsafe { p.read() });
        #[cfg(not(zverbs_mutant = "relaxed_credit"))]
        self.tail.store(tail.wrapping_add(1), Ordering::Release);
        #[cfg(zverbs_mutant = "relaxed_credit")]
        self.tail.store(tail.wrapping_add(1), Ordering::Relaxed);
        wr_id
    }
}

fn check_slots(len: usize) -> Result<(), LayoutError> {
    if len == 0 || !len.is_power_of_two() {
        return Err(LayoutError::NotPowerOfTwo { count: len as u32 });
    }
    if len > 1 << 15 {
        return Err(LayoutError::RingTooLarge { count: len as u32 });
    }
    Ok(())
}

/// Which queues of one QP a completion queue serves.
#[derive(Clone, Copy, Debug)]
pub struct CqBinding<'a> {
    /// The QP number CQEs name (low 24 bits of `sop_drop_qpn`).
    pub qpn: u32,
    /// The QP's send queue state, if its send completions go to this CQ.
    pub sq: Option<&'a SqState<'a>>,
    /// The QP's receive queue state, if its receive completions go to this CQ.
    pub rq: Option<&'a RqState<'a>>,
}

impl<'a> CqBinding<'a> {
    /// A binding of both queues of QP `qpn`.
    pub const fn new(qpn: u32, sq: Option<&'a SqState<'a>>, rq: Option<&'a RqState<'a>>) -> Self {
        Self { qpn, sq, rq }
    }
}

//! The shared receive queue: receive WQEs taken from a free list, and its doorbell record.
//!
//! An mlx5 SRQ is a ring of `stride`-byte WQEs, each a next segment (`next_wqe_index`) and
//! `stride / 16 - 1` data segments; a list shorter than that ends with a data segment whose
//! lkey is `MLX5_INVALID_LKEY`. The free WQEs are linked through `next_wqe_index` from a head
//! to a tail. A post takes the head WQE, moves the head along its link, writes the data
//! segments and records the `wr_id` by WQE index; the device follows the same links as it
//! consumes receives, and learns of new ones from the doorbell record, the count of receives
//! posted (`be32`, 16 bits used), which each post updates after a
//! [`to_device`](zverbs_core::barrier::to_device) barrier (as libmlx5's `mlx5_post_srq_recv`).
//!
//! A receive completion names the WQE (`wqe_counter`); the CQ's poller reads the `wr_id`
//! recorded there, links the WQE behind the tail and counts it freed
//! ([`SrqState`](crate::SrqState)). The poster never takes the tail WQE: with `n` WQEs at most
//! `n - 1` receives are outstanding, as in libmlx5 (`head == tail` is "full").

use zverbs_core::sync::atomic::Ordering;
use zverbs_core::{BatchError, PostError, PostRecv, RecvWr, barrier};

use crate::devmem::{DbrecWord, SegRing};
use crate::layout::{LayoutError, SrqLayout};
use crate::prm::wqe::{SRQ_DATA, srq_max_gs, srq_next};
use crate::state::SrqStateRef;

/// A shared receive queue of an mlx5 device, posted to directly.
#[derive(Debug)]
pub struct SharedRecvQueue<P> {
    ring: SegRing,
    /// log2 of 16-byte segments per WQE.
    seg_shift: u32,
    /// The WQE the next receive goes into.
    head: u32,
    /// Receives posted (free-running; its low 16 bits are the doorbell record).
    posted: u32,
    /// How far `posted` may go: WQEs freed, last read from the state, plus `wqe_cnt - 1`.
    limit: u32,
    /// `wqe_cnt - 1`: the receives that can be outstanding.
    capacity: u32,
    max_sge: u32,
    srqn: u32,
    dbrec: DbrecWord,
    state: P,
}

// SAFETY: the queue owns the head of the free list and the WQEs it takes; shared state goes
// through `SrqState` (Sync).
unsafe impl<P: Send> Send for SharedRecvQueue<P> {}

impl<P: SrqStateRef> SharedRecvQueue<P> {
    /// Posts to the shared receive queue that `layout` describes.
    ///
    /// # Safety
    ///
    /// - `layout` is what `mlx5dv_init_obj` reported for a live SRQ (or the software device's
    ///   equivalent), with its true WQE count; the ring and doorbell record stay valid while
    ///   the queue lives;
    /// - nothing else posts to this SRQ (no `ibv_post_srq_recv`) while this value lives, and
    ///   it is new: nothing was posted, its free list runs from `layout.head` to `layout.tail`;
    /// - `state` was made from the same `layout`, and is bound (with
    ///   [`CqBinding::with_srq`](crate::CqBinding::with_srq)) to the one CQ on which every QP
    ///   created on this SRQ completes its receives;
    /// - under `cfg(zverbs_loom)` the ring and doorbell record are loom cells.
    ///
    /// # Errors
    ///
    /// [`LayoutError::StorageLength`] when `state` was made for another WQE count,
    /// [`LayoutError::BadStride`] for a stride that is not a power of two ≥ 32,
    /// [`LayoutError::SrqFreeList`] for a head outside the ring.
    pub unsafe fn new(layout: &SrqLayout, state: P) -> Result<Self, LayoutError> {
        let cnt = layout.wqe_cnt;
        if state.len() != cnt {
            return Err(LayoutError::StorageLength {
                needed: cnt,
                given: state.len() as usize,
            });
        }
        let stride = layout.stride;
        if stride < 32 || !stride.is_power_of_two() {
            return Err(LayoutError::BadStride { stride });
        }
        if layout.head >= cnt {
            return Err(LayoutError::SrqFreeList {
                head: layout.head,
                tail: layout.tail,
            });
        }
        let segs_per = stride / 16;
        // SAFETY: (caller) the ring holds `cnt × stride` bytes while the queue lives, and the
        // doorbell record (one word) is valid as long.
        let (ring, dbrec) = unsafe {
            (
                SegRing::new(layout.buf, cnt * segs_per),
                DbrecWord::new(layout.dbrec, 0),
            )
        };
        Ok(Self {
            ring,
            seg_shift: segs_per.trailing_zeros(),
            head: layout.head,
            posted: 0,
            limit: cnt - 1,
            capacity: cnt - 1,
            max_sge: srq_max_gs(stride as usize) as u32,
            srqn: layout.srqn,
            dbrec,
            state,
        })
    }

    /// The SRQ number.
    #[inline]
    pub fn srqn(&self) -> u32 {
        self.srqn
    }

    /// Scatter entries a receive can have (`stride / 16 - 1`).
    #[inline]
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Receives posted (free-running counter).
    #[inline]
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// The WQE the next receive goes into.
    #[inline]
    pub fn head(&self) -> u32 {
        self.head
    }

    /// Receives that can be posted now, after taking the WQEs the poller has freed.
    #[inline]
    pub fn free(&mut self) -> u32 {
        self.refresh();
        self.limit.wrapping_sub(self.posted)
    }

    #[inline(always)]
    fn refresh(&mut self) {
        self.limit = self.state.load_freed().wrapping_add(self.capacity);
    }
}

impl<P: SrqStateRef> crate::rq::RecvRing for SharedRecvQueue<P> {
    /// Checks `wr` (the core's check) and that `needed` receives fit, this one the last.
    #[inline(always)]
    fn check(&mut self, wr: &RecvWr<'_>, needed: u32) -> Result<(), PostError> {
        wr.check(self.max_sge)?;
        if self.limit.wrapping_sub(self.posted) < needed {
            self.refresh();
            let free = self.limit.wrapping_sub(self.posted);
            if free < needed {
                return Err(PostError::QueueFull { needed, free });
            }
        }
        Ok(())
    }

    /// Writes `wr` into the head WQE, records it and moves the head along its link.
    ///
    /// # Safety
    ///
    /// `check` passed for this receive.
    #[inline(always)]
    unsafe fn write(&mut self, wr: &RecvWr<'_>) {
        let index = self.head;
        let first = index.wrapping_shl(self.seg_shift);
        // The head is before the tail (the count checked), so its link was written before
        // the freed count that let the poster this far (`Acquire`), or at creation.
        let next = self.ring.with(first, |b| {
            u16::from_be_bytes([
                b[srq_next::NEXT_WQE_INDEX.start],
                b[srq_next::NEXT_WQE_INDEX.start + 1],
            ])
        });
        let seg = first.wrapping_add((SRQ_DATA / 16) as u32);
        // SAFETY: the WQE is the poster's (taken from the free list) and unpublished, its
        // scatter segments (`max_sge` after the link segment, inside its stride) and its slot
        // alike, until it completes.
        let wqe = unsafe {
            self.state.record(index, wr.wr_id);
            self.ring.reserve_recv(seg, self.max_sge)
        };
        crate::rq::write_scatter(&wqe, wr.sgl);
        // A link outside the ring (a corrupted ring) is masked into it, never followed out.
        self.head = u32::from(next) & self.capacity;
        self.posted = self.posted.wrapping_add(1);
    }

    #[inline(always)]
    fn publish(&self) {
        barrier::to_device();
        self.dbrec.publish(self.posted & 0xffff, Ordering::Relaxed);
    }
}

impl<P: SrqStateRef> PostRecv for SharedRecvQueue<P> {
    #[inline]
    unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        // SAFETY: (caller) the posting contract.
        unsafe { crate::rq::post_one(self, wr) }
    }

    unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError> {
        // SAFETY: (caller) the posting contract.
        unsafe { crate::rq::post_batch(self, wrs) }
    }
}

#[cfg(test)]
mod tests;

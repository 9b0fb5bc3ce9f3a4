//! The receive queue: receive WQEs and their doorbell record.
//!
//! A receive WQE is `stride / 16` data segments; a list shorter than that ends with a data
//! segment whose lkey is `MLX5_INVALID_LKEY`. Zero-length entries are skipped, as libmlx5 does
//! (a zero byte count means 2 GiB to the device). There is no MMIO: the device learns of new
//! receives from the doorbell record `dbrec[MLX5_RCV_DBR] = be32(head & 0xffff)`, which each
//! post updates after a [`to_device`](zverbs_core::barrier::to_device) barrier.

use zverbs_core::ring::Ring;
use zverbs_core::sync::atomic::Ordering;
use zverbs_core::{BatchError, PostError, PostRecv, RecvWr, Sge, barrier};

use crate::devmem::{DbrecWord, RecvWqe, SegRing};
use crate::layout::{LayoutError, QpLayout};
use crate::prm::wqe::DataSeg;
use crate::prm::{INVALID_LKEY, RCV_DBR};
use crate::state::RqStateRef;

/// The receive queue of an mlx5 QP, driven directly.
#[derive(Debug)]
pub struct RecvQueue<P> {
    ring: SegRing,
    entries: Ring,
    /// log2 of segments per entry.
    seg_shift: u32,
    /// Entries posted (free-running).
    head: u32,
    /// Entries completed, last read from the state.
    tail: u32,
    max_sge: u32,
    dbrec: DbrecWord,
    state: P,
    /// The gate word this queue posts under (`gate.rs`).
    gate: u32,
    /// Receives that may be outstanding at once: the ring's entries, or fewer when the queue's
    /// share of its CQ is smaller ([`RecvQueue::limit_outstanding`]).
    limit: u32,
}

// SAFETY: the queue owns its part of the ring; shared state goes through `RqState` (Sync).
unsafe impl<P: Send> Send for RecvQueue<P> {}

impl<P: RqStateRef> RecvQueue<P> {
    /// Drives the receive queue of the QP that `layout` describes.
    ///
    /// # Safety
    ///
    /// - `layout` is what `mlx5dv_init_obj` reported for a live QP (or the software device's
    ///   equivalent); the ring and doorbell record stay valid while the queue lives;
    /// - nothing else posts to this receive queue (no `ibv_post_recv`) while this value lives;
    /// - `state` is bound to the CQ that receives this QP's receive completions, and no other
    ///   receive queue uses it; the queue is new or reset (head 0);
    /// - under `cfg(zverbs_loom)` the ring and doorbell record are loom cells.
    ///
    /// # Errors
    ///
    /// A [`LayoutError`] when the QP has no receive queue, the ring is not a power of two, the
    /// stride is not a power of two ≥ 16, or `state` does not match.
    pub unsafe fn new(layout: &QpLayout, state: P) -> Result<Self, LayoutError> {
        let cnt = layout.rq.wqe_cnt;
        if cnt == 0 {
            return Err(LayoutError::NoReceiveQueue);
        }
        let entries = Ring::new(cnt).ok_or(LayoutError::NotPowerOfTwo { count: cnt })?;
        if cnt > 1 << 15 {
            return Err(LayoutError::RingTooLarge { count: cnt });
        }
        let stride = layout.rq.stride;
        if stride < 16 || !stride.is_power_of_two() {
            return Err(LayoutError::BadStride { stride });
        }
        if state.len() != cnt {
            return Err(LayoutError::StorageLength {
                needed: cnt,
                given: state.len() as usize,
            });
        }
        let segs_per = stride / 16;
        // The poller copies data scattered into a CQE into the WQEs of this ring.
        state.wqes().set(layout.rq.buf, cnt, stride);
        // SAFETY: (caller) the ring holds `cnt × stride` bytes while the queue lives, owned by
        // it, and the doorbell record is valid as long; word 0 is MLX5_RCV_DBR.
        let (ring, dbrec) = unsafe {
            (
                SegRing::new(layout.rq.buf, cnt * segs_per),
                DbrecWord::new(layout.dbrec, RCV_DBR),
            )
        };
        Ok(Self {
            ring,
            entries,
            seg_shift: segs_per.trailing_zeros(),
            head: 0,
            tail: 0,
            max_sge: segs_per,
            dbrec,
            gate: state.gate().peek() | crate::gate::OPEN,
            state,
            limit: cnt,
        })
    }

    /// Lets at most `n` receives be outstanding (clamped to 1 ..= the ring's entries): the
    /// queue's share of the CQ its receives complete on, when that holds fewer than the ring. A
    /// post beyond it is refused with [`PostError::CqFull`], nothing written.
    pub fn limit_outstanding(&mut self, n: u32) {
        self.limit = n.clamp(1, self.entries.size());
    }

    /// Scatter entries a receive can have (`stride / 16`).
    #[inline]
    pub fn max_sge(&self) -> u32 {
        self.max_sge
    }

    /// Receives posted (free-running counter).
    #[inline]
    pub fn head(&self) -> u32 {
        self.head
    }

    /// Number of entries in the ring.
    #[inline]
    pub fn entries(&self) -> u32 {
        self.entries.size()
    }

    /// Free entries, after taking what the poller has completed.
    #[inline]
    pub fn free(&mut self) -> u32 {
        if self.state.gate().peek() != self.gate {
            let _ = self.pass_gate();
        }
        self.tail = self.state.load_tail();
        self.limit
            .saturating_sub(self.entries.used(self.head, self.tail))
    }

    /// The gate changed: refuses when it is closed; open for a later incarnation (the QP was
    /// reset), restarts the counters at 0 as the device did (see `SendQueue`'s).
    #[cold]
    #[inline(never)]
    fn pass_gate(&mut self) -> Result<(), PostError> {
        let g = self.state.gate().load();
        if g & crate::gate::OPEN == 0 {
            return Err(PostError::NotReady);
        }
        if g != self.gate {
            self.head = 0;
            self.tail = 0;
            self.gate = g;
        }
        Ok(())
    }

    /// Whether `needed` receives fit now that the tail was read again; which limit refuses
    /// them: the ring (`QueueFull`), or the queue's share of its CQ (`CqFull`).
    #[cold]
    fn full(&self, needed: u32) -> Result<(), PostError> {
        let used = self.entries.used(self.head, self.tail);
        let free = self.limit.saturating_sub(used);
        if free >= needed {
            Ok(())
        } else if self.entries.size().saturating_sub(used) >= needed {
            Err(PostError::CqFull { limit: self.limit })
        } else {
            Err(PostError::QueueFull { needed, free })
        }
    }
}

impl<P: RqStateRef> crate::rq::RecvRing for RecvQueue<P> {
    /// Checks `wr` (the core's check) and that `needed` receives fit, this one the last.
    #[inline(always)]
    fn check(&mut self, wr: &RecvWr<'_>, needed: u32) -> Result<(), PostError> {
        wr.check(self.max_sge)?;
        if self.state.gate().peek() != self.gate {
            self.pass_gate()?;
        }
        if self
            .limit
            .saturating_sub(self.entries.used(self.head, self.tail))
            < needed
        {
            self.tail = self.state.load_tail();
            return self.full(needed);
        }
        Ok(())
    }

    /// Writes the receive WQE for `wr` at `head` and records it.
    ///
    /// # Safety
    ///
    /// `check` passed for this entry.
    #[inline(always)]
    unsafe fn write(&mut self, wr: &RecvWr<'_>) {
        let seg = self.head.wrapping_shl(self.seg_shift);
        // SAFETY: the entry is free (`check` saw room for it: the tail shows the device done
        // with it) and unpublished, its segments and its slot alike; `max_sge` segments are
        // the ring's stride.
        let wqe = unsafe {
            self.state.record(self.head, wr.wr_id);
            self.ring.reserve_recv(seg, self.max_sge)
        };
        write_scatter(&wqe, wr.sgl);
        self.head = self.head.wrapping_add(1);
    }

    #[inline(always)]
    fn publish(&self) {
        barrier::to_device();
        self.dbrec.publish(self.head & 0xffff, Ordering::Relaxed);
    }
}

impl<P: RqStateRef> PostRecv for RecvQueue<P> {
    #[inline]
    unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError> {
        // SAFETY: (caller) the posting contract.
        unsafe { post_one(self, wr) }
    }

    unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError> {
        // SAFETY: (caller) the posting contract.
        unsafe { post_batch(self, wrs) }
    }
}

/// A receive ring as [`post_one`] and [`post_batch`] drive it: the receive queue of a QP and a
/// shared receive queue differ in where a WQE goes and what the doorbell record counts, not in
/// the order of the steps.
pub(crate) trait RecvRing {
    /// Whether `wr` fits, with room for `needed` receives in all; nothing is written.
    fn check(&mut self, wr: &RecvWr<'_>, needed: u32) -> Result<(), PostError>;
    /// Writes `wr` at the next free place and records its `wr_id`; not published.
    ///
    /// # Safety
    ///
    /// `check` accepted `wr` with room for it, and the posting contract holds.
    unsafe fn write(&mut self, wr: &RecvWr<'_>);
    /// Hands what was written to the device (barrier, then the doorbell record).
    fn publish(&self);
}

/// Writes the non-empty entries of `sgl` as data segments into the reserved scatter list
/// `wqe`, and after them, when they fill fewer than its segments, the end marker (length 0,
/// the invalid key) at which the device stops reading the list. The queue's `check` refuses a
/// list with more non-empty entries than `wqe` has segments; were one to come here, the
/// entries past them would not be written (the writes never leave the reservation).
#[inline(always)]
pub(crate) fn write_scatter(wqe: &RecvWqe, sgl: &[Sge]) {
    let max = wqe.segs();
    let mut k = 0;
    for s in sgl.iter().filter(|s| s.length != 0).take(max as usize) {
        wqe.seg(k, |b| {
            DataSeg::new_unchecked(b).set(s.length, s.lkey, s.addr)
        });
        k += 1;
    }
    if k < max {
        wqe.seg(k, |b| DataSeg::new_unchecked(b).set(0, INVALID_LKEY, 0));
    }
}

/// `PostRecv::post` of any receive ring: check, write, publish.
///
/// # Safety
///
/// The posting contract of [`PostRecv::post`].
#[inline(always)]
pub(crate) unsafe fn post_one<R: RecvRing>(r: &mut R, wr: &RecvWr<'_>) -> Result<(), PostError> {
    r.check(wr, 1)?;
    // SAFETY: checked; (caller) the posting contract.
    unsafe { r.write(wr) };
    r.publish();
    Ok(())
}

/// `PostRecv::post_all` of any receive ring: all checked first, then all written, one
/// doorbell record update.
///
/// # Safety
///
/// The posting contract of [`PostRecv::post_all`].
pub(crate) unsafe fn post_batch<R: RecvRing>(
    r: &mut R,
    wrs: &[RecvWr<'_>],
) -> Result<(), BatchError> {
    for (index, wr) in wrs.iter().enumerate() {
        r.check(wr, index as u32 + 1)
            .map_err(|error| BatchError { index, error })?;
    }
    for wr in wrs {
        // SAFETY: every entry was checked, with room for the whole batch.
        unsafe { r.write(wr) };
    }
    if !wrs.is_empty() {
        r.publish();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::testutil::{QPN, Rig, caps, resp_cqe};
    use zverbs_core::{Completion, PollCq, Sge};

    fn seg(b: &[u8]) -> (u32, u32, u64) {
        let d = DataSeg::new_unchecked(b);
        (d.byte_count(), d.lkey(), d.addr())
    }

    #[test]
    fn receive_wqes_and_terminator() {
        // Stride 32: two entries per receive.
        let mut rig = Rig::new(8, 0, caps(1, 0));
        assert_eq!(rig.rq.max_sge(), 2);
        let one = [Sge::new(0x1000, 64, 7)];
        let two = [Sge::new(0x2000, 16, 8), Sge::new(0x3000, 32, 9)];
        let holey = [Sge::new(0x4000, 0, 8), Sge::new(0x5000, 4, 9)];
        // SAFETY: never executed.
        unsafe {
            rig.rq.post(&RecvWr::new(1, &one)).unwrap();
            rig.rq.post(&RecvWr::new(2, &two)).unwrap();
            rig.rq.post(&RecvWr::new(3, &holey)).unwrap();
        }
        let ring = rig.mem.rq_bytes();
        assert_eq!(seg(&ring[0..16]), (64, 7, 0x1000));
        assert_eq!(seg(&ring[16..32]), (0, INVALID_LKEY, 0));
        assert_eq!(seg(&ring[32..48]), (16, 8, 0x2000));
        assert_eq!(seg(&ring[48..64]), (32, 9, 0x3000));
        assert_eq!(
            seg(&ring[64..80]),
            (4, 9, 0x5000),
            "zero-length entry skipped"
        );
        assert_eq!(seg(&ring[80..96]), (0, INVALID_LKEY, 0));
        assert_eq!(rig.mem.dbrec(0), 3);
        assert_eq!(rig.mem.dbrec(1), 0, "the send counter is untouched");
    }

    #[test]
    fn a_full_list_has_no_terminator_and_leaves_the_next_entry_alone() {
        // Stride 32: two entries per receive; eight receives fill the ring, the last one's
        // entry is followed (across the wrap) by the first, still posted.
        let mut rig = Rig::new(8, 0, caps(1, 0));
        let first = [Sge::new(0x1000, 64, 7)];
        let full = [Sge::new(0x2000, 16, 8), Sge::new(0x3000, 32, 9)];
        // SAFETY: never executed.
        unsafe { rig.rq.post(&RecvWr::new(1, &first)).unwrap() };
        for id in 2..9 {
            // SAFETY: never executed.
            unsafe { rig.rq.post(&RecvWr::new(id, &full)).unwrap() };
        }
        let ring = rig.mem.rq_bytes();
        assert_eq!(
            seg(&ring[0..16]),
            (64, 7, 0x1000),
            "the first receive untouched"
        );
        assert_eq!(seg(&ring[16..32]), (0, INVALID_LKEY, 0));
        for e in 1..8 {
            assert_eq!(
                seg(&ring[e * 32..e * 32 + 16]),
                (16, 8, 0x2000),
                "entry {e}"
            );
            assert_eq!(
                seg(&ring[e * 32 + 16..e * 32 + 32]),
                (32, 9, 0x3000),
                "entry {e}"
            );
        }
        assert_eq!(rig.mem.dbrec(0), 8);
    }

    #[test]
    fn refused_receives_change_nothing() {
        let mut rig = Rig::new(8, 0, caps(1, 0));
        let one = [Sge::new(0x1000, 64, 7)];
        let three = [Sge::new(0x1000, 64, 7); 3];
        let before = rig.mem.rq_bytes();
        // SAFETY: never executed.
        let err = unsafe { rig.rq.post(&RecvWr::new(1, &three)) };
        assert_eq!(err, Err(PostError::TooManySges { got: 3, max: 2 }));
        let batch = [RecvWr::new(1, &one); 9];
        // SAFETY: never executed.
        let err = unsafe { rig.rq.post_all(&batch) }.unwrap_err();
        assert_eq!(err.index, 8);
        assert_eq!(err.error, PostError::QueueFull { needed: 9, free: 8 });
        assert_eq!(rig.mem.rq_bytes(), before);
        assert_eq!(rig.mem.dbrec(0), 0);
        // SAFETY: never executed.
        unsafe { rig.rq.post_all(&batch[..8]) }.unwrap();
        assert_eq!(rig.mem.dbrec(0), 8);
        let before = rig.mem.rq_bytes();
        // SAFETY: never executed.
        let err = unsafe { rig.rq.post(&RecvWr::new(1, &one)) };
        assert_eq!(err, Err(PostError::QueueFull { needed: 1, free: 0 }));
        assert_eq!(rig.mem.rq_bytes(), before);
    }

    #[test]
    fn a_receive_fits_in_the_one_entry_the_poller_frees() {
        let mut rig = Rig::new(8, 0, caps(1, 0));
        assert_eq!((rig.rq.entries(), rig.rq.head()), (8, 0));
        let one = [Sge::new(0x1000, 64, 7)];
        let batch = [RecvWr::new(1, &one); 8];
        // SAFETY: never executed.
        unsafe { rig.rq.post_all(&batch) }.unwrap();
        assert_eq!(rig.rq.head(), 8);
        // The poller completes one receive: one entry is free again, exactly what the next
        // receive needs.
        rig.mem.put_cqe(0, resp_cqe(QPN, 2, 64, 0, 0));
        assert_eq!(rig.cq.poll(&mut [Completion::EMPTY; 1]), 1);
        // SAFETY: never executed.
        unsafe { rig.rq.post(&RecvWr::new(9, &one)) }.unwrap();
        assert_eq!((rig.rq.head(), rig.mem.dbrec(0)), (9, 9));
    }

    #[test]
    fn a_limit_below_the_ring_refuses_what_the_cq_could_not_hold() {
        let mut rig = Rig::new(8, 0, caps(1, 0));
        // The queue's share of its CQ: 3 of the ring's 8.
        rig.rq.limit_outstanding(3);
        assert_eq!(rig.rq.free(), 3);
        let one = [Sge::new(0x1000, 64, 7)];
        let batch = [RecvWr::new(1, &one); 4];
        // SAFETY: never executed.
        let err = unsafe { rig.rq.post_all(&batch) }.unwrap_err();
        assert_eq!((err.index, err.error), (3, PostError::CqFull { limit: 3 }));
        assert_eq!(rig.mem.dbrec(0), 0, "nothing posted");
        // SAFETY: never executed.
        unsafe { rig.rq.post_all(&batch[..3]) }.unwrap();
        let before = rig.mem.rq_bytes();
        // SAFETY: never executed.
        let err = unsafe { rig.rq.post(&RecvWr::new(4, &one)) };
        assert_eq!(err, Err(PostError::CqFull { limit: 3 }));
        assert_eq!((rig.mem.rq_bytes(), rig.mem.dbrec(0)), (before, 3));
        // One completion polled: one receive fits again.
        rig.mem.put_cqe(0, resp_cqe(QPN, 2, 64, 0, 0));
        assert_eq!(rig.cq.poll(&mut [Completion::EMPTY; 1]), 1);
        // SAFETY: never executed.
        unsafe { rig.rq.post(&RecvWr::new(5, &one)) }.unwrap();
        // Clamped to the ring: no limit lets more than the ring's entries out.
        rig.rq.limit_outstanding(100);
        assert_eq!(rig.rq.free(), 5);
    }
}

//! The send queue of a DC initiator (DCI): reliable-connection operations, each addressed to a
//! DC target (DCT) of its own.
//!
//! A DCI's WQE is an RC WQE with the datagram segment (`struct mlx5_wqe_datagram_seg`, 48
//! bytes) between the control segment and the rest: control, then the address vector with the
//! DCT number in `dqp_dct` (or-ed with `MLX5_EXTENDED_UD_AV`) and the access key in
//! `key.dc_key`, then the remote-address, atomic, data or inline segments of the operation,
//! as libmlx5 builds it (`mlx5dv_wr_set_dc_addr` after the `ibv_wr_*` opcode call). With the
//! control segment the datagram segment fills the first basic block, so it never wraps; the
//! segments after it do, following the ring as every WQE does.
//!
//! [`DcSendQueue`] wraps a [`SendQueue`] and posts only through
//! [`post_to`](DcSendQueue::post_to) and [`stage_to`](DcSendQueue::stage_to), which take the
//! destination: a DCI has no peer, so a request without one does not compile. The request
//! itself is checked as on an RC queue (the core's one check); a datagram SEND
//! ([`SendOp::SendTo`](zverbs_core::SendOp::SendTo)) is refused with [`PostError::WrongTransport`].

use zverbs_core::{DcDest, PostError, PostSend, SendWr, SqCaps};

use super::{Plan, SendQueue, write_datagram_seg};
use crate::bf::SharedBf;
use crate::devmem::SegRing;
use crate::layout::{LayoutError, QpLayout};
use crate::prm::wqe::{DatagramSeg, UD_HEADER_DS, inline_ds};
use crate::prm::{MAX_DS, SEGS_PER_BB};
use crate::state::SqStateRef;

/// Segments the datagram segment adds to an RC WQE (48 bytes).
pub const DC_AV_DS: u32 = UD_HEADER_DS as u32 - 1;
const _: () = assert!(DC_AV_DS == 3);

/// The send queue of a DC initiator, driven directly: every request names its target.
///
/// Built like a [`SendQueue`] (same contract, the QP being a DCI) and polled through the same
/// [`CompletionQueue`](crate::CompletionQueue) bindings; its completions are requester
/// completions as an RC queue's are.
#[derive(Debug)]
pub struct DcSendQueue<P> {
    sq: SendQueue<P>,
}

impl<P: SqStateRef> DcSendQueue<P> {
    /// Drives the send queue of the DCI that `layout` describes; `shared` as for
    /// [`SendQueue::new`].
    ///
    /// # Safety
    ///
    /// As [`SendQueue::new`], for a DCI (`mlx5dv_create_qp` with `MLX5DV_DCTYPE_DCI`, or the
    /// software device's), whose ring was sized for WQEs with the datagram segment.
    ///
    /// # Errors
    ///
    /// As [`SendQueue::new`]; [`LayoutError::Transport`] when `caps.transport` is not
    /// [`Transport::Rc`](zverbs_core::Transport::Rc) (a DCI carries RC operations);
    /// [`LayoutError::WqeTooLarge`] when the largest request with its datagram segment does
    /// not fit.
    pub unsafe fn new(
        layout: &QpLayout,
        caps: SqCaps,
        state: P,
        shared: Option<&SharedBf>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: (caller) the contract of `SendQueue::new`.
        let sq = unsafe { SendQueue::new(layout, caps, state, shared) }?;
        Self::of(sq)
    }
}

impl<P: SqStateRef> DcSendQueue<P> {
    /// Checks that the largest request, with its datagram segment, fits a WQE and the ring.
    pub(crate) fn of(sq: SendQueue<P>) -> Result<Self, LayoutError> {
        let caps = sq.caps;
        let max_ds = 2
            + DC_AV_DS as usize
            + (caps.max_send_sge as usize).max(inline_ds(caps.max_inline_data as usize));
        let max_blocks = max_ds.div_ceil(SEGS_PER_BB) as u32;
        if max_ds > MAX_DS || max_blocks > sq.blocks.size() {
            return Err(LayoutError::WqeTooLarge { blocks: max_blocks });
        }
        Ok(Self { sq })
    }

    /// The DCI's QP number.
    #[inline]
    pub fn qpn(&self) -> u32 {
        self.sq.qpn()
    }

    /// The capabilities the queue enforces.
    #[inline]
    pub fn caps(&self) -> SqCaps {
        self.sq.caps()
    }

    /// The producer counter in basic blocks.
    #[inline]
    pub fn producer(&self) -> u32 {
        self.sq.producer()
    }

    /// WQEs written but not yet rung.
    #[inline]
    pub fn pending(&self) -> u32 {
        self.sq.pending()
    }

    /// Free basic blocks, after taking any credits the poller has returned.
    #[inline]
    pub fn free_blocks(&mut self) -> u32 {
        self.sq.free_blocks()
    }

    /// Checks `wr` as an RC request and plans its WQE with the datagram segment.
    #[inline(always)]
    fn plan_dc<'w>(&self, wr: &SendWr<'w>) -> Result<Plan<'w>, PostError> {
        let mut plan = self.sq.plan(wr)?;
        plan.ds += DC_AV_DS;
        plan.blocks = plan.ds.div_ceil(SEGS_PER_BB as u32);
        Ok(plan)
    }

    /// Writes `wr` to `dest` without ringing: it reaches the device with the next
    /// [`ring`](DcSendQueue::ring) or [`post_to`](DcSendQueue::post_to).
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend::stage`]: the local entries name registered memory
    /// that stays valid until the request completes, and inline sources are readable.
    ///
    /// # Errors
    ///
    /// As [`PostSend::stage`] on an RC queue; [`PostError::WrongTransport`] for a datagram
    /// SEND ([`SendOp::SendTo`](zverbs_core::SendOp::SendTo)). A refused request writes nothing.
    #[inline(always)]
    pub unsafe fn stage_to(&mut self, dest: &DcDest, wr: &SendWr<'_>) -> Result<(), PostError> {
        let plan = self.plan_dc(wr)?;
        self.sq.check_room(plan.blocks, u32::from(plan.signaled))?;
        // SAFETY: planned and room checked; the caller upholds the posting contract.
        let start = unsafe { self.write(dest, wr, &plan) };
        self.sq.note_pending(start, plan.blocks);
        Ok(())
    }

    /// Writes `wr` to `dest` and rings the doorbell (after ringing what was staged before).
    ///
    /// # Safety
    ///
    /// As [`DcSendQueue::stage_to`].
    ///
    /// # Errors
    ///
    /// As [`DcSendQueue::stage_to`].
    #[inline(always)]
    pub unsafe fn post_to(&mut self, dest: &DcDest, wr: &SendWr<'_>) -> Result<(), PostError> {
        let plan = self.plan_dc(wr)?;
        self.sq.check_room(plan.blocks, u32::from(plan.signaled))?;
        if self.sq.pending != 0 {
            self.sq.ring_pending();
        }
        // SAFETY: planned and room checked; the caller upholds the posting contract.
        let start = unsafe { self.write(dest, wr, &plan) };
        let sq = &mut self.sq;
        let lock = sq.doorbell.lock();
        sq.doorbell.ring(sq.ring, sq.pi, start, plan.blocks, true, lock);
        Ok(())
    }

    /// Rings the doorbell for the requests staged since the last ring; nothing when there are
    /// none.
    #[inline]
    pub fn ring(&mut self) {
        self.sq.ring();
    }

    /// Writes the planned WQE at the producer counter, records it and advances the counters;
    /// returns the segment counter of its control segment. The RC queue's write with the
    /// datagram segment after the control segment ([`SendQueue::write_after`]).
    ///
    /// # Safety
    ///
    /// `plan` is [`DcSendQueue::plan_dc`] of `wr`, room was checked, and the caller upholds
    /// the posting contract.
    #[inline(always)]
    unsafe fn write(&mut self, dest: &DcDest, wr: &SendWr<'_>, plan: &Plan<'_>) -> u32 {
        // Called by `write_after` once, with the control segment's counter of this WQE.
        let header = |ring: &SegRing, start: u32| {
            // SAFETY: segments 1, 2 and 3 of the WQE at `start` (a block boundary) are free
            // and unpublished (room was checked).
            unsafe { write_dc_av(ring, start, dest) }
        };
        // SAFETY: (caller) planned with the datagram segment's `DC_AV_DS` segments, room
        // checked, the posting contract upheld; the header writes segments 1, 2 and 3 only.
        unsafe { self.sq.write_after::<DC_AV_DS>(wr, plan, header) }
    }
}

/// Writes the datagram segment for `dest`, segments 1, 2 and 3 of the WQE at segment `start`
/// (with the control segment, the first basic block: it never wraps).
///
/// # Safety
///
/// The three segments are free and unpublished; `start` is a block boundary.
#[inline(always)]
unsafe fn write_dc_av(ring: &SegRing, start: u32, dest: &DcDest) {
    let mut seg = [0u8; 48];
    DatagramSeg::new_unchecked(&mut seg[..]).set_dc_from_av(&dest.av, dest.dctn, dest.dc_key);
    // SAFETY: (caller) as this function's contract.
    unsafe { write_datagram_seg(ring, start, &seg) };
}

impl<P: SqStateRef> DcSendQueue<P> {
    /// The RC queue inside, for what is common to both (completion bindings, reset).
    #[inline]
    pub fn inner(&self) -> &SendQueue<P> {
        &self.sq
    }
}

//! The send queue of a DC initiator (DCI), [`SendQueue<P, Dci>`]: reliable-connection
//! operations, each addressed to a DC target (DCT) of its own at its post, the way a UD
//! request names its destination.
//!
//! A DCI's WQE is an RC WQE with the datagram segment (`struct mlx5_wqe_datagram_seg`, 48
//! bytes) between the control segment and the rest: control, then the address vector with the
//! DCT number in `dqp_dct` (or-ed with `MLX5_EXTENDED_UD_AV`) and the access key in
//! `key.dc_key`, then the remote-address, atomic, data or inline segments of the operation,
//! as libmlx5 builds it (`mlx5dv_wr_set_dc_addr` after the `ibv_wr_*` opcode call). With the
//! control segment the datagram segment fills the first basic block, so it never wraps; the
//! segments after it do, following the ring as every WQE does.
//!
//! A DCI posts only through [`SendQueue::post_to`] and [`SendQueue::stage_to`], which take
//! the destination: a DCI has no peer, so [`Dci`] is not [`SelfAddressed`](super::SelfAddressed)
//! and a request without a target does not compile. The request itself is checked as on an RC
//! queue (the core's one check); a datagram SEND
//! ([`SendOp::SendTo`](zverbs_core::SendOp::SendTo)) is refused with
//! [`PostError::WrongTransport`].

use zverbs_core::{DcDest, PostError, SendWr, SqCaps};

use super::{Dci, Plan, Room, SendQueue, Vouched, write_datagram_seg};
use crate::bf::SharedBf;
use crate::devmem::Wqe;
use crate::doorbell::Back;
use crate::layout::{LayoutError, QpLayout};
use crate::prm::wqe::{UD_HEADER_DS, words};
use crate::state::SqStateRef;

/// Segments the datagram segment adds to an RC WQE (48 bytes).
pub const DC_AV_DS: u32 = UD_HEADER_DS as u32 - 1;
const _: () = assert!(DC_AV_DS == 3);

impl<P: SqStateRef> SendQueue<P, Dci> {
    /// Drives the send queue of the DCI that `layout` describes; `shared` as for
    /// [`SendQueue::new`]. Polled through the same
    /// [`CompletionQueue`](crate::CompletionQueue) bindings as an RC queue; its completions are
    /// requester completions as an RC queue's are.
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
    pub unsafe fn new_dc(
        layout: &QpLayout,
        caps: SqCaps,
        state: P,
        shared: Option<&SharedBf>,
    ) -> Result<Self, LayoutError> {
        // SAFETY: (caller) the contract of `with_register`, which is this function's.
        unsafe { Self::with_register(layout, caps, 0, state, shared) }
    }

    /// Writes `wr` to `dest` without ringing: it reaches the device with the next
    /// [`ring`](SendQueue::ring) or [`post_to`](SendQueue::post_to).
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend::stage`](zverbs_core::PostSend::stage): the local
    /// entries name registered memory that stays valid until the request completes, and inline
    /// sources are readable.
    ///
    /// # Errors
    ///
    /// As [`PostSend::stage`](zverbs_core::PostSend::stage) on an RC queue;
    /// [`PostError::WrongTransport`] for a datagram SEND
    /// ([`SendOp::SendTo`](zverbs_core::SendOp::SendTo)). A refused request writes nothing.
    #[inline(always)]
    pub unsafe fn stage_to(&mut self, dest: &DcDest, wr: &SendWr<'_>) -> Result<(), PostError> {
        let plan = self.plan(wr)?;
        self.check_room(plan.blocks, u32::from(plan.signaled))?;
        // SAFETY: the caller upholds the posting contract; room checked: the blocks at the
        // producer counter are free, and past the counter the device was given.
        let (v, room) = unsafe { (Vouched::new(wr), Room::checked()) };
        let start = self.write_to(dest, v, &plan, room);
        self.note_pending(start, plan.blocks);
        Ok(())
    }

    /// Writes `wr` to `dest` and rings the doorbell (after ringing what was staged before).
    ///
    /// # Safety
    ///
    /// As [`SendQueue::stage_to`].
    ///
    /// # Errors
    ///
    /// As [`SendQueue::stage_to`].
    #[inline(always)]
    pub unsafe fn post_to(&mut self, dest: &DcDest, wr: &SendWr<'_>) -> Result<(), PostError> {
        let plan = self.plan(wr)?;
        self.check_room(plan.blocks, u32::from(plan.signaled))?;
        if self.pending != 0 {
            self.ring_pending();
        }
        // SAFETY: as in `stage_to`.
        let (v, room) = unsafe { (Vouched::new(wr), Room::checked()) };
        let start = self.write_to(dest, v, &plan, room);
        let wqe = Back::new(&self.ring, start, plan.blocks);
        self.doorbell.ring(self.pi, wqe, true);
        Ok(())
    }

    /// Writes the planned WQE into `wqe`, at the producer counter, records it and advances the
    /// counters; returns the segment counter of its control segment. The RC queue's write
    /// with the datagram segment after the control segment ([`SendQueue::write_after`]);
    /// `plan` is [`SendQueue::plan`] of the request (with the DC address).
    #[inline(always)]
    fn write_to(&mut self, dest: &DcDest, v: Vouched<'_, '_>, plan: &Plan<'_>, room: Room) -> u32 {
        // Called by `write_after` once, with the reserved WQE; it writes segments 1, 2 and 3.
        let header = |wqe: &Wqe| write_dc_av(wqe, dest);
        self.write_after::<DC_AV_DS>(v, plan, room, header)
    }
}

/// Writes the datagram segment for `dest`, segments 1, 2 and 3 of `wqe` (with the control
/// segment, the first basic block: it never wraps).
#[inline(always)]
fn write_dc_av(wqe: &Wqe, dest: &DcDest) {
    let seg = words::dc_datagram(&dest.av, dest.dctn, dest.dc_key);
    write_datagram_seg(wqe, &seg);
}

//! The drain marker: a NOP the control path posts to a queue pair in the error state, so that
//! a send queue whose last requests completed unsignaled can be seen drained.
//!
//! In the error state the device completes every request it still holds with a flush, signaled
//! or not, and each such completion retires the requests before it. Requests it had already
//! carried out *unsignaled*, with no signaled request after them, never get a completion: no
//! device writes one, so the poller's consumer counter stays behind the doorbell record's and
//! the queue never looks drained. A request posted in the error state is flushed like any other
//! (rdma-core's and the kernel's drain do the same with a work request of their own): its
//! completion retires everything before it. [`post_drain_marker`] writes it: a NOP asking for
//! a CQE, recorded in the slot table with [`DRAIN_WR_ID`], at the producer counter the doorbell
//! record publishes, then rung as the send queue rings. Its completion reaches the poller of
//! the send CQ as a flush of a request with that `wr_id`.

use core::ptr::NonNull;

use stable_deref_trait::StableDeref;
use zverbs_core::mmio::MmioRegion;

use crate::bf::SharedBf;
use crate::devmem::{DbrecWord, SegRing};
use crate::doorbell::{Back, Doorbell};
use crate::layout::{LayoutError, QpLayout};
use crate::prm::wqe::CtrlSeg;
use crate::prm::{SEGS_PER_BB, SND_DBR, fm_ce_se, opcode};
use crate::state::{SlotData, SqSlot, SqState};

/// The `wr_id` a drain marker's completion carries.
pub const DRAIN_WR_ID: u64 = u64::MAX;

/// Posts a drain marker to the send queue of a queue pair in the error state (see the module
/// docs): a NOP asking for a CQE, at the producer counter the doorbell record publishes,
/// recorded with [`DRAIN_WR_ID`], rung with an 8-byte doorbell through the register as
/// `shared` says (the register's [`SharedBf`] when other queues write it, `None` when it is
/// this QP's own or there is no BlueFlame). Returns `false`, having written nothing, when the
/// ring has no free basic block (every block holds a request not yet retired).
///
/// # Safety
///
/// - `layout` is the live queue pair's (rings, doorbell record and register mapped), and
///   `state` its send queue's bookkeeping, bound to the poller of its send CQ;
/// - the queue pair is in the error state, and no send queue posts to it from before this
///   call until it is reset (nothing is being written past the published producer counter
///   that this could overwrite, and nothing will publish after it);
/// - `shared` is the register's shared state when other queues may write the register.
///
/// # Errors
///
/// [`LayoutError`] for a layout no send queue would take (as [`SendQueue::new`](crate::SendQueue::new)).
pub unsafe fn post_drain_marker<S: StableDeref<Target = [SqSlot]>>(
    layout: &QpLayout,
    state: &SqState<S>,
    shared: Option<&SharedBf>,
) -> Result<bool, LayoutError> {
    let cnt = layout.sq.wqe_cnt;
    if !cnt.is_power_of_two() || cnt > 1 << 15 {
        return Err(LayoutError::NotPowerOfTwo { count: cnt });
    }
    if layout.sq.stride != 64 {
        return Err(LayoutError::BadStride {
            stride: layout.sq.stride,
        });
    }
    if state.len() != cnt {
        return Err(LayoutError::StorageLength {
            needed: cnt,
            given: state.len() as usize,
        });
    }
    let bf_len = if layout.bf.size == 0 {
        8
    } else {
        2 * layout.bf.size as usize
    };
    // SAFETY: (caller) the record is mapped (word 1 is MLX5_SND_DBR); the ring holds `cnt`
    // blocks, which no queue writes meanwhile; the register is mapped with `bf_len` bytes, and
    // written by others only under `shared`'s lock, which the doorbell takes.
    let (dbrec, ring, reg) = unsafe {
        (
            DbrecWord::new(layout.dbrec, SND_DBR),
            SegRing::new(layout.sq.buf, cnt * SEGS_PER_BB as u32),
            MmioRegion::new(layout.bf.reg, bf_len),
        )
    };
    // The 16-bit producer counter the device was last given, and how far the poller retired.
    let pi = dbrec.read() & 0xffff;
    let retired = u32::from(state.retired16());
    if pi.wrapping_sub(retired) & 0xffff >= cnt {
        return Ok(false);
    }
    let seg = pi * SEGS_PER_BB as u32;
    let slot = &state.slots()[(pi & (cnt - 1)) as usize];
    // SAFETY: the block at `pi` (segment `seg`, a multiple of 4: the WQE is that one block)
    // and its slot are past the published counter and retired (the room check above), so
    // neither the device nor the poller reads them, and (caller) no queue writes them; the
    // marker is not published yet.
    let wqe = unsafe {
        slot.record(SlotData {
            wr_id: DRAIN_WR_ID,
            next: pi.wrapping_add(1),
            opcode: opcode::NOP,
            signaled: true,
        });
        ring.reserve(seg, 1)
    };
    wqe.seg(0, |b| {
        CtrlSeg::new_unchecked(&mut b[..]).set(
            pi as u16,
            opcode::NOP,
            0,
            layout.qpn,
            fm_ce_se::CQ_UPDATE,
            1,
            0,
        );
    });
    // The doorbell as the queue's: the register's lock taken when it is shared.
    let lock = shared.map(NonNull::from);
    let mut db = Doorbell::new(dbrec, reg, layout.bf.size, lock);
    // An 8-byte doorbell for the one-block WQE at `pi` (the send queue's steps).
    let wqe = Back::new(&ring, pi * SEGS_PER_BB as u32, 1);
    db.ring(pi.wrapping_add(1), wqe, false);
    Ok(true)
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    extern crate std;

    use zverbs_core::{Completion, PollCq, PostSend, SendWr, Sge, WcStatus};

    use super::*;
    use crate::SharedBf;
    use crate::testutil::{QPN, Rig, caps, err_cqe, req_cqe};

    /// The rig's QP after a signaled and an unsignaled SEND, the first completed: the second
    /// was carried out unsignaled (no CQE), and the QP is in the error state.
    fn unsignaled_tail(bf_size: u32) -> Rig {
        let mut rig = Rig::new(8, bf_size, caps(1, 0));
        let sgl = [Sge::new(0x1000, 8, 1)];
        // SAFETY: never executed by a device.
        unsafe { rig.sq.post(&SendWr::send(1, &sgl).signaled()) }.unwrap();
        // SAFETY: as above.
        unsafe { rig.sq.post(&SendWr::send(2, &sgl)) }.unwrap();
        rig.mem.put_cqe(0, req_cqe(QPN, opcode::SEND, 0, 0, 0));
        let mut wc = [Completion::EMPTY; 4];
        assert_eq!(rig.cq.poll(&mut wc), 1);
        rig
    }

    #[test]
    fn the_marker_is_a_nop_at_the_producer_counter_and_its_flush_retires_the_tail() {
        for (bf_size, shared) in [(64, false), (64, true), (0, false)] {
            let mut rig = unsignaled_tail(bf_size);
            let layout = rig.mem.qp_layout(QPN, 8, bf_size);
            let sq = rig.bindings[0].sq.clone().unwrap();
            assert_eq!((rig.mem.dbrec(1), u32::from(sq.retired16())), (2, 1));
            let lock = SharedBf::new(bf_size);
            // SAFETY: the rig's live layout and state; nothing posts meanwhile.
            let posted =
                unsafe { post_drain_marker(&layout, &sq, shared.then_some(&lock)) }.unwrap();
            assert!(posted);
            // Block 2: a NOP asking for a CQE, naming its index and the QP, one segment.
            let ring = rig.mem.sq_bytes();
            let ctrl = &ring[2 * 64..2 * 64 + 16];
            assert_eq!(
                &ctrl[0..4],
                &(2u32 << 8 | u32::from(opcode::NOP)).to_be_bytes()
            );
            assert_eq!(&ctrl[4..8], &(QPN << 8 | 1).to_be_bytes());
            assert_eq!(ctrl[11], fm_ce_se::CQ_UPDATE);
            // Published and rung: the record says 3, the register got the 8-byte doorbell.
            assert_eq!(rig.mem.dbrec(1), 3);
            assert_eq!(&rig.mem.bf_bytes()[0..8], &ctrl[0..8]);
            // The device flushes it: its completion retires everything before it.
            rig.mem.put_cqe(1, err_cqe(QPN, 13, 2, 0x05, 0, 0));
            let mut wc = [Completion::EMPTY; 4];
            assert_eq!(rig.cq.poll(&mut wc), 1);
            assert_eq!(
                (wc[0].wr_id, wc[0].status),
                (DRAIN_WR_ID, WcStatus::WrFlushErr)
            );
            assert_eq!(u32::from(sq.retired16()), rig.mem.dbrec(1), "drained");
        }
    }

    #[test]
    fn a_full_ring_gets_no_marker() {
        let mut rig = Rig::new(4, 64, caps(1, 0));
        let sgl = [Sge::new(0x1000, 8, 1)];
        for i in 0..4 {
            // SAFETY: never executed by a device.
            unsafe { rig.sq.post(&SendWr::send(i, &sgl)) }.unwrap();
        }
        let layout = rig.mem.qp_layout(QPN, 8, 64);
        let sq = rig.bindings[0].sq.clone().unwrap();
        let (ring, bf) = (rig.mem.sq_bytes(), rig.mem.bf_bytes());
        // SAFETY: as above.
        assert!(!unsafe { post_drain_marker(&layout, &sq, None) }.unwrap());
        assert_eq!((rig.mem.sq_bytes(), rig.mem.bf_bytes()), (ring, bf));
        assert_eq!(rig.mem.dbrec(1), 4, "nothing written");
    }
}

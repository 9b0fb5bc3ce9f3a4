//! Benchmarks of the zverbs data path, and the fixtures they share.
//!
//! [`MemQp`] is a queue pair and its completion queue over ordinary memory standing in for a
//! NIC's: the send ring, the doorbell record, the BlueFlame register and the CQE ring are heap
//! memory, so the benchmarks measure exactly the CPU work of posting, ringing and polling (not
//! the PCIe cost of real MMIO, which the software device cannot show either).

use std::ptr::NonNull;

use zverbs_core::{Completion, PollCq, PostSend, RemoteBuf, SendWr, Sge};
use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::{
    BfLayout, CompletionQueue, CqBinding, CqLayout, QpLayout, SendQueue, SqCaps, SqSlot, SqState,
    WqLayout,
};

/// 64-byte aligned memory block.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Block(pub [u8; 64]);

/// The QP number of the fixture.
pub const QPN: u32 = 0x1234;

fn leak<T>(v: Vec<T>) -> &'static mut [T] {
    Box::leak(v.into_boxed_slice())
}

/// A send queue and the CQ serving it, over leaked ordinary memory (benchmarks build a handful).
pub struct MemQp {
    /// The send queue.
    pub sq: SendQueue<'static>,
    /// The completion queue.
    pub cq: CompletionQueue<'static>,
    /// The CQE ring, written through this pointer only (as a device writes by DMA).
    cqes: NonNull<Block>,
    cqe_cnt: u32,
}

impl MemQp {
    /// A QP with `blocks` send basic blocks, `cqes` CQEs and BlueFlame buffers of `bf_size`
    /// bytes (0: doorbell only).
    pub fn new(blocks: u32, cqes: u32, bf_size: u32) -> Self {
        let sq_ring = leak(vec![Block([0; 64]); blocks as usize]);
        let dbrec = leak(vec![0u32; 2]);
        let bf = leak(vec![0u64; (2 * bf_size as usize / 8).max(1)]);
        let cq_ring = leak(vec![Block([0; 64]); cqes as usize]);
        for c in cq_ring.iter_mut() {
            c.0[63] = 0xf0;
        }
        let cq_dbrec = leak(vec![0u32; 2]);
        let slots = leak((0..blocks).map(|_| SqSlot::new()).collect());
        let state: &'static SqState<'static> =
            Box::leak(Box::new(SqState::new(slots).expect("power of two")));
        let bindings = leak(vec![CqBinding::new(QPN, Some(state), None)]);
        let qp = QpLayout {
            qpn: QPN,
            dbrec: NonNull::from(&mut dbrec[0]),
            sq: WqLayout {
                buf: NonNull::from(&mut sq_ring[0]).cast(),
                wqe_cnt: blocks,
                stride: 64,
            },
            rq: WqLayout {
                buf: NonNull::dangling(),
                wqe_cnt: 0,
                stride: 16,
            },
            bf: BfLayout {
                reg: NonNull::from(&mut bf[0]).cast(),
                size: bf_size,
            },
        };
        let cq_layout = CqLayout {
            buf: NonNull::from(&mut cq_ring[0]).cast(),
            dbrec: NonNull::from(&mut cq_dbrec[0]),
            cqe_cnt: cqes,
            cqe_size: 64,
            cqn: 1,
        };
        let caps = SqCaps {
            max_send_sge: 4,
            max_inline_data: 128,
            sig_all: false,
            max_signaled: cqes,
        };
        // SAFETY: the memory is leaked, so it outlives the queue, and only this queue posts.
        let sq = unsafe { SendQueue::new(&qp, caps, state) }.expect("valid layout");
        // SAFETY: as above; only this CQ polls.
        let cq = unsafe { CompletionQueue::new(&cq_layout, bindings) }.expect("valid layout");
        Self {
            sq,
            cq,
            cqes: cq_layout.buf.cast(),
            cqe_cnt: cqes,
        }
    }

    /// Completes everything posted so far: one requester CQE naming the last WQE (which
    /// retires every earlier unsignaled one), polled at once. Returns the completion.
    pub fn complete_all(&mut self, last_wqe: u16) -> Completion {
        self.write_cqes(1, |_| last_wqe);
        let mut wc = [Completion::EMPTY; 1];
        assert_eq!(self.cq.poll(&mut wc), 1);
        wc[0]
    }

    /// Writes `n` requester CQEs at the CQ's consumer index, the `i`th naming WQE
    /// `wqe(i)`, as the device would (body, then owner byte, with the right owner bit).
    pub fn write_cqes(&mut self, n: u32, wqe: impl Fn(u32) -> u16) {
        let size = self.cqe_cnt;
        let ci = self.cq.consumer();
        for i in 0..n {
            let at = ci.wrapping_add(i);
            let slot = (at % size) as usize;
            let mut c = [0u8; 64];
            c[56..60].copy_from_slice(&((u32::from(opcode::RDMA_WRITE) << 24) | QPN).to_be_bytes());
            c[60..62].copy_from_slice(&wqe(i).to_be_bytes());
            c[63] = ((at / size) & 1) as u8;
            // SAFETY: `slot` is in the leaked ring; the CQ reads it only inside `poll`, which
            // cannot run concurrently (`&mut self`), and only after this write.
            unsafe { self.cqes.add(slot).write(Block(c)) };
        }
    }
}

/// The request the post benchmarks use: a 1-SGE RDMA WRITE of 64 bytes.
pub fn write_1sge(sgl: &[Sge]) -> SendWr<'_> {
    SendWr::write(7, sgl, RemoteBuf::new(0x7f00_0000_1000, 0xdead_beef))
}

/// Posts and rings one request; the unit the post benchmarks time.
///
/// # Safety
///
/// `wr`'s memory is never read: the fixture has no device.
#[inline]
pub unsafe fn post_ring(sq: &mut SendQueue<'_>, wr: &SendWr<'_>) {
    // SAFETY: (caller) nothing executes the request.
    unsafe { sq.post_send(wr) }.expect("room was checked");
    sq.ring();
}

/// One poll into a one-entry buffer, kept out of line so its code can be read and counted.
#[inline(never)]
pub fn poll_one(cq: &mut CompletionQueue<'_>, wc: &mut [Completion; 1]) -> usize {
    cq.poll(wc)
}

/// Posts and rings a 1-SGE RDMA WRITE built from run-time operands, the way an application
/// posts: the operation is known where the request is built, its operands are not. Kept out
/// of line so its code can be read and counted.
///
/// # Safety
///
/// As [`post_ring`].
#[inline(never)]
pub unsafe fn post_write_1sge(
    sq: &mut SendQueue<'_>,
    addr: u64,
    len: u32,
    lkey: u32,
    raddr: u64,
    rkey: u32,
    wr_id: u64,
) -> Result<(), zverbs_core::PostError> {
    let sgl = [Sge::new(addr, len, lkey)];
    let wr = SendWr::write(wr_id, &sgl, RemoteBuf::new(raddr, rkey)).signaled();
    // SAFETY: (caller) nothing executes the request.
    unsafe { sq.post_send(&wr) }?;
    sq.ring();
    Ok(())
}

/// [`post_ring`], kept out of line so its code can be read and counted.
///
/// # Safety
///
/// As [`post_ring`].
#[inline(never)]
pub unsafe fn post_ring_out_of_line(sq: &mut SendQueue<'_>, wr: &SendWr<'_>) {
    // SAFETY: (caller) as `post_ring`.
    unsafe { post_ring(sq, wr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixture_posts_completes_and_polls() {
        let mut qp = MemQp::new(8, 16, 256);
        let sgl = [Sge::new(0x1000, 64, 1)];
        for _ in 0..8 {
            // SAFETY: never executed.
            unsafe { post_ring(&mut qp.sq, &write_1sge(&sgl)) };
        }
        assert_eq!(qp.sq.free_blocks(), 0);
        let wc = qp.complete_all(7);
        assert_eq!((wc.wr_id, wc.qp_num), (7, QPN));
        assert_eq!(qp.sq.free_blocks(), 8);
        // Many CQEs across the CQ's wrap, each polled once.
        for round in 0..5 {
            qp.write_cqes(16, |i| i as u16 % 8);
            let mut wc = [Completion::EMPTY; 16];
            assert_eq!(qp.cq.poll(&mut wc), 16, "round {round}");
        }
    }
}

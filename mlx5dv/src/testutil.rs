//! Ordinary memory standing in for a device's queue memory, for unit tests.

extern crate std;

use core::ptr::NonNull;
use std::boxed::Box;
use std::vec::Vec;

use crate::layout::{BfLayout, CqLayout, QpLayout, SqCaps, WqLayout};
use crate::state::{CqBinding, RqSlot, RqState, SqSlot, SqState};
use crate::{CompletionQueue, RecvQueue, SendQueue};

/// 64-byte aligned block.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Block(pub(crate) [u8; 64]);

fn leak<T>(v: Vec<T>) -> &'static mut [T] {
    Box::leak(v.into_boxed_slice())
}

/// Queue memory of one QP and its CQ, leaked for the test's duration.
pub(crate) struct Mem {
    pub(crate) sq: &'static mut [Block],
    pub(crate) rq: &'static mut [Block],
    pub(crate) dbrec: &'static mut [u32],
    pub(crate) bf: &'static mut [u64],
    pub(crate) cq: &'static mut [Block],
    pub(crate) cq_dbrec: &'static mut [u32],
    pub(crate) rq_stride: u32,
    pub(crate) cqe_size: u32,
}

impl Mem {
    pub(crate) fn new(
        sq_blocks: u32,
        rq_entries: u32,
        rq_stride: u32,
        bf_size: u32,
        cqes: u32,
    ) -> Self {
        let cqe_size = 64;
        let mut cq = std::vec![Block([0; 64]); cqes as usize];
        for c in &mut cq {
            c.0[63] = 0xf0; // invalid opcode, owner 0, as libmlx5 initialises
        }
        let rq_bytes = (rq_entries * rq_stride) as usize;
        Self {
            sq: leak(std::vec![Block([0; 64]); sq_blocks as usize]),
            rq: leak(std::vec![Block([0; 64]); rq_bytes.div_ceil(64).max(1)]),
            dbrec: leak(std::vec![0u32; 2]),
            bf: leak(std::vec![0u64; (2 * bf_size as usize / 8).max(1)]),
            cq: leak(cq),
            cq_dbrec: leak(std::vec![0u32; 2]),
            rq_stride,
            cqe_size,
        }
    }

    pub(crate) fn qp_layout(&mut self, qpn: u32, rq_entries: u32, bf_size: u32) -> QpLayout {
        QpLayout {
            qpn,
            dbrec: NonNull::new(self.dbrec.as_mut_ptr()).unwrap(),
            sq: WqLayout {
                buf: NonNull::new(self.sq.as_mut_ptr().cast()).unwrap(),
                wqe_cnt: self.sq.len() as u32,
                stride: 64,
            },
            rq: WqLayout {
                buf: NonNull::new(self.rq.as_mut_ptr().cast()).unwrap(),
                wqe_cnt: rq_entries,
                stride: self.rq_stride,
            },
            bf: BfLayout {
                reg: NonNull::new(self.bf.as_mut_ptr().cast()).unwrap(),
                size: bf_size,
            },
        }
    }

    pub(crate) fn cq_layout(&mut self) -> CqLayout {
        CqLayout {
            buf: NonNull::new(self.cq.as_mut_ptr().cast()).unwrap(),
            dbrec: NonNull::new(self.cq_dbrec.as_mut_ptr()).unwrap(),
            cqe_cnt: self.cq.len() as u32,
            cqe_size: self.cqe_size,
            cqn: 7,
        }
    }

    /// The send ring as bytes.
    pub(crate) fn sq_bytes(&self) -> Vec<u8> {
        self.sq.iter().flat_map(|b| b.0).collect()
    }

    /// The receive ring as bytes.
    pub(crate) fn rq_bytes(&self) -> Vec<u8> {
        self.rq.iter().flat_map(|b| b.0).collect()
    }

    /// The doorbell record word `i` as the counter it encodes.
    pub(crate) fn dbrec(&self, i: usize) -> u32 {
        // SAFETY: the word is in bounds and no queue writes it concurrently in these tests.
        u32::from_be(unsafe { core::ptr::read_volatile(&self.dbrec[i]) })
    }

    /// The BlueFlame area as bytes.
    pub(crate) fn bf_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for w in self.bf.iter() {
            // SAFETY: in bounds; no concurrent writer.
            v.extend_from_slice(&unsafe { core::ptr::read_volatile(w) }.to_ne_bytes());
        }
        v
    }

    /// Writes a CQE at slot `i` the way the device does: body, then `op_own`.
    pub(crate) fn put_cqe(&mut self, i: usize, body: [u8; 64]) {
        let c = &mut self.cq[i].0;
        c[..63].copy_from_slice(&body[..63]);
        c[63] = body[63];
    }

    pub(crate) fn cq_dbrec(&self) -> u32 {
        // SAFETY: in bounds; no concurrent writer.
        u32::from_be(unsafe { core::ptr::read_volatile(&self.cq_dbrec[0]) })
    }
}

/// A QP (send + receive queues) and its CQ over [`Mem`].
pub(crate) struct Rig {
    pub(crate) mem: Mem,
    pub(crate) sq: SendQueue<'static>,
    pub(crate) rq: RecvQueue<'static>,
    pub(crate) cq: CompletionQueue<'static>,
}

pub(crate) const QPN: u32 = 0x100;

pub(crate) fn caps(max_send_sge: u32, max_inline_data: u32) -> SqCaps {
    SqCaps {
        max_send_sge,
        max_inline_data,
        sig_all: false,
        max_signaled: 1 << 15,
    }
}

impl Rig {
    pub(crate) fn new(sq_blocks: u32, bf_size: u32, caps: SqCaps) -> Self {
        Self::with_cq(sq_blocks, bf_size, caps, 64)
    }

    pub(crate) fn with_cq(sq_blocks: u32, bf_size: u32, caps: SqCaps, cqes: u32) -> Self {
        let rq_entries = 8;
        let mut mem = Mem::new(sq_blocks, rq_entries, 32, bf_size, cqes);
        let qp = mem.qp_layout(QPN, rq_entries, bf_size);
        let cql = mem.cq_layout();
        let sq_slots = leak((0..sq_blocks).map(|_| SqSlot::new()).collect());
        let rq_slots = leak((0..rq_entries).map(|_| RqSlot::new()).collect());
        let sq_state: &'static SqState<'static> =
            Box::leak(Box::new(SqState::new(sq_slots).unwrap()));
        let rq_state: &'static RqState<'static> =
            Box::leak(Box::new(RqState::new(rq_slots).unwrap()));
        let bindings = leak(std::vec![CqBinding::new(
            QPN,
            Some(sq_state),
            Some(rq_state)
        )]);
        // SAFETY: the memory is leaked (lives forever) and used only by these queues and the
        // test, which touches it only between calls.
        let sq = unsafe { SendQueue::new(&qp, caps, sq_state) }.unwrap();
        // SAFETY: as above.
        let rq = unsafe { RecvQueue::new(&qp, rq_state) }.unwrap();
        // SAFETY: as above.
        let cq = unsafe { CompletionQueue::new(&cql, bindings) }.unwrap();
        Self { mem, sq, rq, cq }
    }
}

/// A requester CQE completing the WQE whose first block is `wqe_counter`, for `opcode`.
pub(crate) fn req_cqe(
    qpn: u32,
    opcode: u8,
    wqe_counter: u16,
    byte_cnt: u32,
    owner: u8,
) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
    c[56..60].copy_from_slice(&((u32::from(opcode) << 24) | qpn).to_be_bytes());
    c[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
    c[63] = owner & 1;
    c
}

/// An error CQE (`cqe_op` 13 requester, 14 responder).
pub(crate) fn err_cqe(
    qpn: u32,
    cqe_op: u8,
    wqe_counter: u16,
    syndrome: u8,
    vendor: u8,
    owner: u8,
) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[54] = vendor;
    c[55] = syndrome;
    c[56..60].copy_from_slice(&qpn.to_be_bytes());
    c[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
    c[63] = (cqe_op << 4) | (owner & 1);
    c
}

/// A responder CQE (`cqe_op` 1 WR_IMM, 2 SEND, 3 SEND_IMM).
pub(crate) fn resp_cqe(qpn: u32, cqe_op: u8, byte_cnt: u32, imm: u32, owner: u8) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[36..40].copy_from_slice(&imm.to_be_bytes());
    c[44..48].copy_from_slice(&byte_cnt.to_be_bytes());
    c[56..60].copy_from_slice(&qpn.to_be_bytes());
    c[63] = (cqe_op << 4) | (owner & 1);
    c
}

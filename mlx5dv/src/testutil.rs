//! Ordinary memory standing in for a device's queue memory, for unit tests.
//!
//! The memory is what a device's is to the queues: raw allocations that the queues reach only
//! through the raw pointers of their layouts. The tests reach it the same way (never through a
//! reference that would assert exclusive access while a queue holds a pointer into it), and
//! write CQEs as the device does: the body, then the owner byte with `Release`. So the tests
//! run under Miri's Stacked and Tree Borrows, and its data-race detector.

extern crate std;

use core::ptr::NonNull;
use std::boxed::Box;
use std::sync::Arc;
use std::vec::Vec;

use zverbs_core::sync::atomic::{AtomicU8, AtomicU32, Ordering};

use crate::layout::{BfLayout, CqLayout, QpLayout, SqCaps, WqLayout};
use crate::state::{CqBinding, RqSlot, RqState, SqSlot, SqState};
use crate::{CompletionQueue, RecvQueue, SendQueue};

/// 64-byte aligned block.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Block(pub(crate) [u8; 64]);

/// A heap allocation of `len` values of `T`, reached only through raw pointers, freed on drop.
pub(crate) struct Raw<T> {
    ptr: NonNull<T>,
    len: usize,
}

impl<T: Copy> Raw<T> {
    pub(crate) fn new(fill: T, len: usize) -> Self {
        let b: Box<[T]> = std::vec![fill; len].into_boxed_slice();
        let len = b.len();
        // SAFETY: `Box::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(b).cast::<T>()) };
        Self { ptr, len }
    }

    pub(crate) fn ptr(&self) -> NonNull<T> {
        self.ptr
    }

    fn len(&self) -> usize {
        self.len
    }

    /// The allocation as bytes, read through the raw pointer.
    pub(crate) fn bytes(&self) -> Vec<u8> {
        let n = self.len * size_of::<T>();
        let mut v = std::vec![0u8; n];
        // SAFETY: the allocation holds `n` initialised bytes; no queue writes during the copy
        // (the tests read between calls).
        unsafe {
            core::ptr::copy_nonoverlapping(self.ptr.as_ptr().cast::<u8>(), v.as_mut_ptr(), n)
        };
        v
    }

    /// Writes `bytes` at byte offset `at`, through the raw pointer.
    pub(crate) fn write_bytes(&self, at: usize, bytes: &[u8]) {
        assert!(at + bytes.len() <= self.len * size_of::<T>());
        // SAFETY: in bounds (above); no queue accesses the memory during the copy.
        unsafe {
            core::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.ptr.as_ptr().cast::<u8>().add(at),
                bytes.len(),
            )
        };
    }
}

impl<T> Drop for Raw<T> {
    fn drop(&mut self) {
        let slice = core::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: the pointer and length came from `Box::into_raw` in `new`, and this is the one
        // place that frees them; the queues that point into it are dropped before (see `Rig`).
        drop(unsafe { Box::from_raw(slice) });
    }
}

/// Queue memory of one QP and its CQ.
pub(crate) struct Mem {
    sq: Raw<Block>,
    rq: Raw<Block>,
    dbrec: Raw<u32>,
    bf: Raw<Block>,
    /// The register's length in 64-bit words (`2 * bf_size / 8`, or the 8-byte doorbell).
    bf_words: usize,
    cq: Raw<Block>,
    cq_dbrec: Raw<u32>,
    rq_stride: u32,
    cqe_size: u32,
}

impl Mem {
    pub(crate) fn new(
        sq_blocks: u32,
        rq_entries: u32,
        rq_stride: u32,
        bf_size: u32,
        cqes: u32,
    ) -> Self {
        let mut invalid = Block([0; 64]);
        invalid.0[63] = 0xf0; // invalid opcode, owner 0, as libmlx5 initialises
        let rq_bytes = (rq_entries * rq_stride) as usize;
        Self {
            sq: Raw::new(Block([0; 64]), sq_blocks as usize),
            rq: Raw::new(Block([0; 64]), rq_bytes.div_ceil(64).max(1)),
            dbrec: Raw::new(0, 2),
            // Whole blocks, 64-byte aligned as a BlueFlame buffer is in its UAR page.
            bf: Raw::new(Block([0; 64]), (2 * bf_size as usize).div_ceil(64).max(1)),
            bf_words: (2 * bf_size as usize / 8).max(1),
            cq: Raw::new(invalid, cqes as usize),
            cq_dbrec: Raw::new(0, 2),
            rq_stride,
            cqe_size: 64,
        }
    }

    pub(crate) fn qp_layout(&self, qpn: u32, rq_entries: u32, bf_size: u32) -> QpLayout {
        QpLayout {
            qpn,
            dbrec: self.dbrec.ptr(),
            sq: WqLayout {
                buf: self.sq.ptr().cast(),
                wqe_cnt: self.sq.len() as u32,
                stride: 64,
            },
            rq: WqLayout {
                buf: self.rq.ptr().cast(),
                wqe_cnt: rq_entries,
                stride: self.rq_stride,
            },
            bf: BfLayout {
                reg: self.bf.ptr().cast(),
                size: bf_size,
            },
        }
    }

    pub(crate) fn cq_layout(&self) -> CqLayout {
        CqLayout {
            buf: self.cq.ptr().cast(),
            dbrec: self.cq_dbrec.ptr(),
            cqe_cnt: self.cq.len() as u32,
            cqe_size: self.cqe_size,
            cqn: 7,
        }
    }

    /// The send ring as bytes.
    pub(crate) fn sq_bytes(&self) -> Vec<u8> {
        self.sq.bytes()
    }

    /// Fills the send ring with `byte` (stale bytes of earlier WQEs).
    pub(crate) fn fill_sq(&self, byte: u8) {
        self.sq.write_bytes(0, &std::vec![byte; self.sq.len() * 64]);
    }

    /// The receive ring as bytes.
    pub(crate) fn rq_bytes(&self) -> Vec<u8> {
        self.rq.bytes()
    }

    /// The doorbell record word `i` as the counter it encodes.
    pub(crate) fn dbrec(&self, i: usize) -> u32 {
        assert!(i < self.dbrec.len());
        // SAFETY: in bounds; the queues store to the word through an `AtomicU32` too.
        let w = unsafe { AtomicU32::from_ptr(self.dbrec.ptr().as_ptr().add(i)) };
        u32::from_be(w.load(Ordering::Acquire))
    }

    /// The BlueFlame area as bytes.
    pub(crate) fn bf_bytes(&self) -> Vec<u8> {
        let mut v = Vec::new();
        for w in 0..self.bf_words {
            // SAFETY: in bounds; no concurrent writer (the queue writes it during its calls).
            let word =
                unsafe { core::ptr::read_volatile(self.bf.ptr().cast::<u64>().as_ptr().add(w)) };
            v.extend_from_slice(&word.to_ne_bytes());
        }
        v
    }

    /// Writes a CQE at slot `i` the way the device does: body, then `op_own` with `Release`.
    pub(crate) fn put_cqe(&self, i: usize, body: [u8; 64]) {
        assert!(i < self.cq.len());
        self.cq.write_bytes(i * 64, &body[..63]);
        self.set_op_own(i, body[63]);
    }

    /// Writes all 64 bytes of entry `i` as plain memory (a compressed session's array of
    /// mini-CQEs, whose byte 63 is data, written before its title).
    pub(crate) fn put_raw(&self, i: usize, body: [u8; 64]) {
        assert!(i < self.cq.len());
        self.cq.write_bytes(i * 64, &body);
    }

    /// The `op_own` byte of the 64-byte entry `i`.
    pub(crate) fn op_own(&self, i: usize) -> u8 {
        assert!(i < self.cq.len());
        // SAFETY: as in `set_op_own`.
        let b = unsafe { AtomicU8::from_ptr(self.cq.ptr().as_ptr().add(i).cast::<u8>().add(63)) };
        b.load(Ordering::Acquire)
    }

    /// Stores the `op_own` byte of the 64-byte entry `i`, as the device does (`Release`).
    pub(crate) fn set_op_own(&self, i: usize, op_own: u8) {
        assert!(i < self.cq.len());
        // SAFETY: byte 63 of entry `i`, in bounds; the poller loads it through an `AtomicU8`.
        let b = unsafe { AtomicU8::from_ptr(self.cq.ptr().as_ptr().add(i).cast::<u8>().add(63)) };
        b.store(op_own, Ordering::Release);
    }

    /// Number of 64-byte CQ entries.
    pub(crate) fn cq_entries(&self) -> usize {
        self.cq.len()
    }

    pub(crate) fn cq_dbrec(&self) -> u32 {
        // SAFETY: word 0 of the record; the poller stores to it through an `AtomicU32`.
        let w = unsafe { AtomicU32::from_ptr(self.cq_dbrec.ptr().as_ptr()) };
        u32::from_be(w.load(Ordering::Acquire))
    }

    /// Stores `v` (host order) to the CQ doorbell record, as if the poller had.
    pub(crate) fn set_cq_dbrec(&self, v: u32) {
        // SAFETY: as in `cq_dbrec`.
        let w = unsafe { AtomicU32::from_ptr(self.cq_dbrec.ptr().as_ptr()) };
        w.store(v.to_be(), Ordering::Release);
    }
}

/// The bookkeeping handles the rig's queues use: owning ones, as the `zverbs` crate's.
pub(crate) type SqHandle = Arc<SqState<Box<[SqSlot]>>>;
pub(crate) type RqHandle = Arc<RqState<Box<[RqSlot]>>>;
pub(crate) type RigBindings = Box<[CqBinding<SqHandle, RqHandle>]>;

/// A QP (send + receive queues) and its CQ over [`Mem`]; `T` is the send queue's transport.
pub(crate) struct Rig<T = crate::Connected> {
    // Field order is drop order: the queues before the memory they point into.
    pub(crate) sq: SendQueue<SqHandle, T>,
    pub(crate) rq: RecvQueue<RqHandle>,
    pub(crate) cq: CompletionQueue<RigBindings>,
    pub(crate) bindings: RigBindings,
    pub(crate) mem: Mem,
}

pub(crate) const QPN: u32 = 0x100;

pub(crate) fn caps(max_send_sge: u32, max_inline_data: u32) -> SqCaps {
    SqCaps {
        max_send_sge,
        max_inline_data,
        sig_all: false,
        max_signaled: 1 << 15,
        transport: zverbs_core::Transport::Rc,
    }
}

impl Rig {
    pub(crate) fn new(sq_blocks: u32, bf_size: u32, caps: SqCaps) -> Self {
        Self::with_cq(sq_blocks, bf_size, caps, 64)
    }
}

impl Rig<crate::Datagram> {
    /// A rig whose send queue is a UD queue (`caps.transport` UD).
    pub(crate) fn new_ud(sq_blocks: u32, bf_size: u32, caps: SqCaps) -> Self {
        Self::with_cq(sq_blocks, bf_size, caps, 64)
    }
}

impl Rig<crate::Ethernet> {
    /// A rig whose send queue is a raw Ethernet queue (`caps.transport` Ethernet) inlining
    /// `min_inline` frame bytes.
    pub(crate) fn new_eth(sq_blocks: u32, bf_size: u32, caps: SqCaps, min_inline: u16) -> Self {
        Self::with_min_inline(sq_blocks, bf_size, caps, 64, 8, min_inline)
    }
}

impl<T: crate::SqTransport> Rig<T> {
    pub(crate) fn with_cq(sq_blocks: u32, bf_size: u32, caps: SqCaps, cqes: u32) -> Self {
        Self::with_sizes(sq_blocks, bf_size, caps, cqes, 8)
    }

    /// A rig of `cqes` CQEs and `rq_entries` receive entries.
    pub(crate) fn with_sizes(
        sq_blocks: u32,
        bf_size: u32,
        caps: SqCaps,
        cqes: u32,
        rq_entries: u32,
    ) -> Self {
        Self::with_min_inline(sq_blocks, bf_size, caps, cqes, rq_entries, 0)
    }

    /// [`Rig::with_sizes`] with an Ethernet queue's minimum inline frame bytes.
    pub(crate) fn with_min_inline(
        sq_blocks: u32,
        bf_size: u32,
        caps: SqCaps,
        cqes: u32,
        rq_entries: u32,
        min_inline: u16,
    ) -> Self {
        let mem = Mem::new(sq_blocks, rq_entries, 32, bf_size, cqes);
        let qp = mem.qp_layout(QPN, rq_entries, bf_size);
        let cql = mem.cq_layout();
        let sq_slots: Box<[SqSlot]> = (0..sq_blocks).map(|_| SqSlot::new()).collect();
        let rq_slots: Box<[RqSlot]> = (0..rq_entries).map(|_| RqSlot::new()).collect();
        let sq_state = Arc::new(SqState::new(sq_slots).unwrap());
        let rq_state = Arc::new(RqState::new(rq_slots).unwrap());
        let bindings: RigBindings = Box::new([CqBinding::new(
            QPN,
            Some(sq_state.clone()),
            Some(rq_state.clone()),
        )]);
        // SAFETY: the memory outlives the queues (field order of `Rig`) and is used only by
        // these queues and the test, which touches it only between calls.
        let sq =
            unsafe { SendQueue::with_register(&qp, caps, min_inline, sq_state, None) }.unwrap();
        // SAFETY: as above.
        let rq = unsafe { RecvQueue::new(&qp, rq_state) }.unwrap();
        // SAFETY: as above.
        let cq = unsafe { CompletionQueue::new(&cql, bindings.clone()) }.unwrap();
        Self {
            sq,
            rq,
            cq,
            bindings,
            mem,
        }
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

/// A shared receive queue's memory: four 64-byte WQEs (three data segments each) whose free
/// list runs 0 → 1 → 2 → 3 (3, the tail, is never posted to), and its doorbell record.
pub(crate) struct SrqMem {
    pub(crate) ring: Raw<Block>,
    dbrec: Raw<u32>,
    pub(crate) layout: crate::layout::SrqLayout,
}

impl SrqMem {
    pub(crate) fn new(srqn: u32) -> Self {
        let ring = Raw::new(Block([0; 64]), 4);
        for i in 0..3u16 {
            ring.write_bytes(
                i as usize * 64 + crate::prm::wqe::srq_next::NEXT_WQE_INDEX.start,
                &(i + 1).to_be_bytes(),
            );
        }
        let dbrec = Raw::new(0u32, 1);
        let layout = crate::layout::SrqLayout {
            srqn,
            buf: ring.ptr().cast(),
            dbrec: dbrec.ptr(),
            stride: 64,
            wqe_cnt: 4,
            head: 0,
            tail: 3,
        };
        Self {
            ring,
            dbrec,
            layout,
        }
    }

    /// The doorbell record, host order.
    pub(crate) fn dbrec(&self) -> u32 {
        u32::from_be_bytes(self.dbrec.bytes()[..4].try_into().unwrap())
    }

    /// The first data segment of WQE `i`: (length, lkey, address).
    pub(crate) fn data(&self, i: usize) -> (u32, u32, u64) {
        let b = self.ring.bytes();
        let d = &b[i * 64 + 16..i * 64 + 32];
        (
            u32::from_be_bytes(d[0..4].try_into().unwrap()),
            u32::from_be_bytes(d[4..8].try_into().unwrap()),
            u64::from_be_bytes(d[8..16].try_into().unwrap()),
        )
    }
}

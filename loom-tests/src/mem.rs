//! Queue memory made of the cells the library's `devmem` expects, and the NIC's side of it.

use std::ptr::NonNull;

use zverbs_core::sync::atomic::{AtomicU32, Ordering};
use zverbs_mlx5dv::devmem::SegCell;
use zverbs_mlx5dv::{BfLayout, CqLayout, QpLayout, SqCaps, SrqLayout, WqLayout};

/// The QP number the models use.
pub const QPN: u32 = 0x42;

/// One CQE: loom cells under loom, 64 plain bytes otherwise.
#[cfg(zverbs_loom)]
pub type CqeCell = zverbs_mlx5dv::devmem::LoomCqe;

/// One CQE: loom cells under loom, 64 plain bytes otherwise.
#[cfg(not(zverbs_loom))]
#[derive(Debug)]
#[repr(C, align(64))]
pub struct CqeCell(std::cell::UnsafeCell<[u8; 64]>);

fn new_cqe() -> CqeCell {
    #[cfg(zverbs_loom)]
    {
        CqeCell::new()
    }
    #[cfg(not(zverbs_loom))]
    {
        let mut b = [0u8; 64];
        b[63] = 0xf0;
        CqeCell(std::cell::UnsafeCell::new(b))
    }
}

/// The memory of one QP and its CQ.
#[derive(Debug)]
pub struct Mem {
    /// Send ring: 4 segments per basic block.
    pub sq: Vec<SegCell>,
    /// Receive ring: one segment per entry (stride 16).
    pub rq: Vec<SegCell>,
    /// QP doorbell record: `[RCV, SND]`.
    pub dbrec: Vec<AtomicU32>,
    /// BlueFlame register stand-in (never read by the model's NIC): two 64-byte buffers,
    /// aligned as a register is.
    pub bf: Vec<BfBuffer>,
    /// CQE ring.
    pub cq: Vec<CqeCell>,
    /// CQ doorbell record.
    pub cq_dbrec: Vec<AtomicU32>,
}

// SAFETY: the cells are only accessed by the library's queues and the model's NIC under the
// protocols the models check; the raw memory types are plain data.
unsafe impl Sync for Mem {}
// SAFETY: as above.
unsafe impl Send for Mem {}

/// One BlueFlame buffer's 64 bytes, as words, at a register's alignment.
#[derive(Clone, Copy, Debug)]
#[repr(C, align(64))]
pub struct BfBuffer(pub [u64; 8]);

impl Mem {
    /// A send ring of `sq_blocks`, a receive ring of `rq_entries`, `cqes` CQEs.
    pub fn new(sq_blocks: usize, rq_entries: usize, cqes: usize) -> Self {
        Self {
            sq: (0..sq_blocks * 4).map(|_| SegCell::new([0; 16])).collect(),
            rq: (0..rq_entries).map(|_| SegCell::new([0; 16])).collect(),
            dbrec: (0..2).map(|_| AtomicU32::new(0)).collect(),
            bf: vec![BfBuffer([0; 8]); 2],
            cq: (0..cqes).map(|_| new_cqe()).collect(),
            cq_dbrec: (0..2).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// The QP layout (64-byte BlueFlame buffers).
    pub fn qp_layout(&self) -> QpLayout {
        QpLayout {
            qpn: QPN,
            dbrec: nn(self.dbrec.as_ptr()).cast(),
            sq: WqLayout {
                buf: nn(self.sq.as_ptr()),
                wqe_cnt: (self.sq.len() / 4) as u32,
                stride: 64,
            },
            rq: WqLayout {
                buf: nn(self.rq.as_ptr()),
                wqe_cnt: self.rq.len() as u32,
                stride: 16,
            },
            bf: BfLayout {
                reg: nn(self.bf.as_ptr().cast::<u64>()),
                size: 64,
            },
        }
    }

    /// The CQ layout.
    pub fn cq_layout(&self) -> CqLayout {
        CqLayout {
            buf: nn(self.cq.as_ptr()),
            dbrec: nn(self.cq_dbrec.as_ptr()).cast(),
            cqe_cnt: self.cq.len() as u32,
            cqe_size: 64,
            cqn: 1,
        }
    }

    /// NIC: the producer counter in a doorbell-record word, read with `Acquire` as the device's
    /// DMA read of the record is ordered after the CPU's barrier and store.
    pub fn nic_dbrec(word: &AtomicU32) -> u32 {
        u32::from_be(word.load(Ordering::Acquire))
    }

    /// The BlueFlame buffer `i` (64 bytes each) as bytes, once no queue writes it any more.
    pub fn bf_bytes(&self, i: usize) -> [u8; 64] {
        let mut b = [0u8; 64];
        for (w, word) in self.bf[i].0.iter().enumerate() {
            // SAFETY: the queues wrote the register through raw pointers; every writer is
            // joined, so this read races with nothing.
            let v = unsafe { std::ptr::read_volatile(word) };
            b[8 * w..8 * w + 8].copy_from_slice(&v.to_ne_bytes());
        }
        b
    }

    /// NIC: reads send-ring segment `seg` (masked).
    pub fn nic_read_sq(&self, seg: u32) -> [u8; 16] {
        let cell = &self.sq[seg as usize % self.sq.len()];
        // SAFETY: a read; loom checks it is ordered after the poster's write.
        cell.with(|p| unsafe { *p })
    }

    /// NIC: reads receive-ring segment `seg` (masked).
    pub fn nic_read_rq(&self, seg: u32) -> [u8; 16] {
        let cell = &self.rq[seg as usize % self.rq.len()];
        // SAFETY: as above.
        cell.with(|p| unsafe { *p })
    }

    /// NIC: writes CQE `slot`: the body, then `op_own` with `Release`.
    pub fn nic_write_cqe(&self, slot: usize, body: [u8; 64]) {
        let cqe = &self.cq[slot];
        #[cfg(zverbs_loom)]
        {
            // SAFETY: loom checks this write is not concurrent with the poller's read.
            cqe.body.with_mut(|p| unsafe { *p = body });
            cqe.op_own.store(body[63], Ordering::Release);
        }
        #[cfg(not(zverbs_loom))]
        {
            let p = cqe.0.get().cast::<u8>();
            // SAFETY: the slot is the device's (the consumer index freed it); bytes 0..63 are
            // not read by the poller until the owner byte below says so.
            unsafe { std::ptr::copy_nonoverlapping(body.as_ptr(), p, 63) };
            // SAFETY: byte 63 is in the CQE, and all accesses to it are atomic.
            unsafe { zverbs_core::sync::atomic::AtomicU8::from_ptr(p.add(63)) }
                .store(body[63], Ordering::Release);
        }
    }
}

fn nn<T>(p: *const T) -> NonNull<u8> {
    NonNull::new(p.cast::<u8>().cast_mut()).expect("vector storage is never null")
}

/// The memory of a shared receive queue as libmlx5 lays it out: `wqes` WQEs of 32 bytes (a
/// next segment and one data segment), linked `0 → 1 → ... → wqes - 1`, and its one-word
/// doorbell record.
#[derive(Debug)]
pub struct SrqMem {
    /// The ring: two segments per WQE.
    pub ring: Vec<SegCell>,
    /// The doorbell record: receives posted.
    pub dbrec: Vec<AtomicU32>,
}

// SAFETY: as for `Mem`.
unsafe impl Sync for SrqMem {}
// SAFETY: as above.
unsafe impl Send for SrqMem {}

impl SrqMem {
    /// An SRQ of `wqes` WQEs, its free list linked in index order.
    pub fn new(wqes: usize) -> Self {
        let ring = (0..2 * wqes)
            .map(|seg| {
                let mut b = [0u8; 16];
                if seg % 2 == 0 {
                    let next = ((seg / 2 + 1) % wqes) as u16;
                    b[2..4].copy_from_slice(&next.to_be_bytes());
                }
                SegCell::new(b)
            })
            .collect();
        Self {
            ring,
            dbrec: vec![AtomicU32::new(0)],
        }
    }

    /// The SRQ's layout (SRQ number 9).
    pub fn layout(&self) -> SrqLayout {
        let wqes = (self.ring.len() / 2) as u32;
        SrqLayout {
            srqn: 9,
            buf: nn(self.ring.as_ptr()),
            dbrec: nn(self.dbrec.as_ptr()).cast(),
            stride: 32,
            wqe_cnt: wqes,
            head: 0,
            tail: wqes - 1,
        }
    }

    /// NIC: the data segment of WQE `wqe`.
    pub fn nic_read_data(&self, wqe: u32) -> [u8; 16] {
        let cell = &self.ring[2 * wqe as usize + 1];
        // SAFETY: a read; loom checks it is ordered after the poster's write.
        cell.with(|p| unsafe { *p })
    }
}

/// A responder CQE (a SEND received) of the shared receive queue's WQE `wqe`, on QP `QPN`,
/// owner bit of pass 0.
pub fn srq_cqe(wqe: u16) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[44..48].copy_from_slice(&8u32.to_be_bytes());
    c[56..60].copy_from_slice(&QPN.to_be_bytes());
    c[60..62].copy_from_slice(&wqe.to_be_bytes());
    c[63] = 0x20; // RESP_SEND, owner 0
    c
}

/// Capabilities for the models' send queues.
pub fn caps() -> SqCaps {
    SqCaps {
        max_send_sge: 1,
        max_inline_data: 40,
        sig_all: false,
        max_signaled: 16,
        transport: zverbs_mlx5dv::Transport::Rc,
    }
}

/// A requester CQE for the WQE at `wqe_counter` (send opcode `op`), with the owner bit of CQ
/// pass `pass`.
pub fn req_cqe(op: u8, wqe_counter: u16, pass: u32) -> [u8; 64] {
    let mut c = [0u8; 64];
    c[56..60].copy_from_slice(&((u32::from(op) << 24) | QPN).to_be_bytes());
    c[60..62].copy_from_slice(&wqe_counter.to_be_bytes());
    c[63] = (pass & 1) as u8;
    c
}

/// Leaks `v` for the duration of one model execution; [`free`] takes it back.
pub fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// Frees what [`leak`] gave.
///
/// # Safety
///
/// `r` came from [`leak`], and nothing uses it any more (every thread that did is joined and
/// every value borrowing it dropped).
pub unsafe fn free<T>(r: &'static T) {
    // SAFETY: (caller) `r` is the unique remaining handle to a leaked box.
    drop(unsafe { Box::from_raw((r as *const T).cast_mut()) });
}

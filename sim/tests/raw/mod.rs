//! Raw drivers for the device's queues, for the transports the direct backend does not post
//! yet (UD, shared receive queues): WQEs, receives and SRQ posts written byte by byte through
//! the `zverbs_mlx5dv::prm` views, as libmlx5 writes them, and CQEs read through `prm::cqe`.
//! Nothing here allocates, so the zero-allocation test can drive it.
#![allow(dead_code)]

pub mod eth;

use std::sync::atomic::{AtomicU32, Ordering};

use zverbs_mlx5dv::prm::cqe::{Cqe64, op};
use zverbs_mlx5dv::prm::wqe::{
    CtrlSeg, DataSeg, DatagramSeg, SrqNextSeg, inline_byte_count, inline_ds,
};
use zverbs_mlx5dv::prm::{CQ_SET_CI, INVALID_LKEY, RCV_DBR, SND_DBR};
use zverbs_sim::{SimCq, SimQp, SimSrq};

/// A scatter/gather entry: address, length, lkey.
pub type Sg = (u64, u32, u32);

/// The payload of a send WQE.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    Sges(&'a [Sg]),
    Inline(&'a [u8]),
}

/// Where a UD send goes: an address vector, the destination QPN and the Q_Key.
#[derive(Clone, Copy, Debug)]
pub struct Dest {
    pub av: [u8; 48],
    pub dqpn: u32,
    pub qkey: u32,
}

/// Stores a doorbell-record word (big-endian) with `Release`, after the WQEs it publishes.
fn store_dbrec(p: *mut u32, v: u32) {
    // SAFETY: a doorbell record word of the device, valid while it lives; the device loads it
    // atomically.
    unsafe { AtomicU32::from_ptr(p) }.store(v.to_be(), Ordering::Release);
}

/// A QP driven by hand.
pub struct RawQp {
    pub qp: SimQp,
    /// Send producer counter, in basic blocks.
    pub sq_pi: u32,
    /// Receive producer counter.
    pub rq_pi: u32,
}

impl RawQp {
    pub fn new(qp: SimQp) -> Self {
        Self {
            qp,
            sq_pi: 0,
            rq_pi: 0,
        }
    }

    pub fn qpn(&self) -> u32 {
        self.qp.qpn
    }

    /// Builds a send WQE at the producer counter: control, the datagram segment when `dest`
    /// is given, then data segments or an inline segment; publishes it in the doorbell
    /// record. Returns the WQE's index (its first basic block).
    pub fn post_send(
        &mut self,
        opcode: u8,
        dest: Option<&Dest>,
        body: Body<'_>,
        imm: u32,
        fm_ce_se: u8,
    ) -> u16 {
        let mut w = [0u8; 1024];
        let mut ds = 1usize;
        if let Some(d) = dest {
            let seg: &mut [u8; 48] = (&mut w[16..64]).try_into().unwrap();
            DatagramSeg::new_unchecked(seg).set_from_av(&d.av, d.dqpn, d.qkey);
            ds += 3;
        }
        match body {
            Body::Sges(sges) => {
                for &(addr, len, lkey) in sges {
                    DataSeg::new_unchecked(&mut w[ds * 16..ds * 16 + 16]).set(len, lkey, addr);
                    ds += 1;
                }
            }
            Body::Inline(data) if !data.is_empty() => {
                let o = ds * 16;
                w[o..o + 4].copy_from_slice(&inline_byte_count(data.len() as u32).to_be_bytes());
                w[o + 4..o + 4 + data.len()].copy_from_slice(data);
                ds += inline_ds(data.len());
            }
            Body::Inline(_) => {}
        }
        let index = self.sq_pi as u16;
        CtrlSeg::new_unchecked(&mut w[..16]).set(
            index,
            opcode,
            0,
            self.qp.qpn,
            fm_ce_se,
            ds as u8,
            imm,
        );
        self.write_blocks(&w[..ds.div_ceil(4) * 64]);
        index
    }

    /// Copies whole basic blocks into the send ring at the producer counter (wrapping) and
    /// publishes them.
    pub fn write_blocks(&mut self, bytes: &[u8]) {
        let sq = self.qp.layout.sq;
        for (i, block) in bytes.chunks(64).enumerate() {
            let slot = (self.sq_pi as usize + i) & (sq.wqe_cnt as usize - 1);
            // SAFETY: block `slot` of the device's send ring, which it reads only once
            // published.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    block.as_ptr(),
                    sq.buf.as_ptr().add(slot * 64),
                    block.len(),
                )
            };
        }
        self.sq_pi += bytes.len().div_ceil(64) as u32;
        store_dbrec(
            // SAFETY: word 1 of the QP's doorbell record.
            unsafe { self.qp.layout.dbrec.as_ptr().add(SND_DBR) },
            self.sq_pi & 0xffff,
        );
    }

    /// Posts a receive of `sges` (ended by an `MLX5_INVALID_LKEY` entry when shorter than
    /// the stride) and publishes it.
    pub fn post_recv(&mut self, sges: &[Sg]) {
        let rq = self.qp.layout.rq;
        let slot = (self.rq_pi & (rq.wqe_cnt - 1)) as usize;
        let per = rq.stride as usize / 16;
        assert!(sges.len() <= per);
        for i in 0..per.min(sges.len() + 1) {
            let mut seg = [0u8; 16];
            let (addr, len, lkey) = sges.get(i).copied().unwrap_or((0, 0, INVALID_LKEY));
            DataSeg::new_unchecked(&mut seg).set(len, lkey, addr);
            // SAFETY: entry `i` of receive `slot` of the device's receive ring.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    seg.as_ptr(),
                    rq.buf.as_ptr().add(slot * rq.stride as usize + i * 16),
                    16,
                )
            };
        }
        self.rq_pi += 1;
        store_dbrec(
            // SAFETY: word 0 of the QP's doorbell record.
            unsafe { self.qp.layout.dbrec.as_ptr().add(RCV_DBR) },
            self.rq_pi & 0xffff,
        );
    }
}

/// A shared receive queue driven by hand, as libmlx5's `mlx5_post_srq_recv` and
/// `mlx5_free_srq_wqe` drive one: post at the head of the free list, free a consumed WQE by
/// linking it after the tail.
pub struct RawSrq {
    pub srq: SimSrq,
    pub head: u32,
    pub tail: u32,
    pub counter: u32,
}

impl RawSrq {
    pub fn new(srq: SimSrq) -> Self {
        Self {
            srq,
            head: srq.head,
            tail: srq.tail,
            counter: 0,
        }
    }

    fn wqe(&self, index: u32) -> *mut u8 {
        assert!(index < self.srq.wqe_cnt);
        // SAFETY: WQE `index` of the SRQ's ring.
        unsafe {
            self.srq
                .buf
                .as_ptr()
                .add((index * self.srq.stride) as usize)
        }
    }

    /// The `next_wqe_index` of WQE `index`.
    pub fn next(&self, index: u32) -> u16 {
        // SAFETY: the next segment of a WQE in the ring.
        let seg = unsafe { self.wqe(index).cast::<[u8; 16]>().read() };
        SrqNextSeg::new_unchecked(&seg).next_wqe_index()
    }

    /// Overwrites the `next_wqe_index` of WQE `index`.
    pub fn set_next(&self, index: u32, next: u16) {
        // SAFETY: as above; the device reads it only when it consumes the WQE.
        let seg = unsafe { &mut *self.wqe(index).cast::<[u8; 16]>() };
        SrqNextSeg::new_unchecked(seg).set_next_wqe_index(next);
    }

    /// Posts a receive at the head of the free list; returns its WQE index, or `None` when
    /// the list is down to its tail (the SRQ is full).
    pub fn post(&mut self, sges: &[Sg]) -> Option<u16> {
        if self.head == self.tail {
            return None;
        }
        let index = self.head;
        let max_gs = self.srq.max_gs as usize;
        assert!(sges.len() <= max_gs);
        for i in 0..max_gs.min(sges.len() + 1) {
            let mut seg = [0u8; 16];
            let (addr, len, lkey) = sges.get(i).copied().unwrap_or((0, 0, INVALID_LKEY));
            DataSeg::new_unchecked(&mut seg).set(len, lkey, addr);
            // SAFETY: scatter entry `i` of WQE `index`, after its next segment.
            unsafe {
                std::ptr::copy_nonoverlapping(seg.as_ptr(), self.wqe(index).add(16 + i * 16), 16)
            };
        }
        self.head = u32::from(self.next(index));
        self.counter += 1;
        self.ring();
        Some(index as u16)
    }

    /// Writes the doorbell record with the counter.
    pub fn ring(&self) {
        store_dbrec(self.srq.dbrec.as_ptr(), self.counter);
    }

    /// Gives consumed WQE `index` back to the free list, after the tail.
    pub fn free(&mut self, index: u16) {
        self.set_next(self.tail, index);
        self.tail = u32::from(index);
    }
}

/// A CQ polled by hand.
pub struct RawCq {
    pub cq: SimCq,
    pub ci: u32,
}

impl RawCq {
    pub fn new(cq: SimCq) -> Self {
        Self { cq, ci: 0 }
    }

    /// The next CQE, if the device has written it (owner bit of this pass, valid opcode);
    /// the consumer counter is returned to the device.
    pub fn poll(&mut self) -> Option<[u8; 64]> {
        // SAFETY: the CQ is the device's; the device is stepped by the caller, not running.
        let c = unsafe { zverbs_sim::read_cqe(&self.cq.layout, self.ci) };
        let v = Cqe64::new_unchecked(&c);
        let pass = ((self.ci >> self.cq.layout.cqe_cnt.trailing_zeros()) & 1) as u8;
        if v.op_own() >> 4 == op::INVALID || v.owner() != pass {
            return None;
        }
        self.ci += 1;
        store_dbrec(
            // SAFETY: word 0 of the CQ's doorbell record.
            unsafe { self.cq.layout.dbrec.as_ptr().add(CQ_SET_CI) },
            self.ci & 0x00ff_ffff,
        );
        Some(c)
    }

    /// Whether no CQE is waiting.
    pub fn is_empty(&self) -> bool {
        // SAFETY: as in `poll`.
        let c = unsafe { zverbs_sim::read_cqe(&self.cq.layout, self.ci) };
        let v = Cqe64::new_unchecked(&c);
        let pass = ((self.ci >> self.cq.layout.cqe_cnt.trailing_zeros()) & 1) as u8;
        v.op_own() >> 4 == op::INVALID || v.owner() != pass
    }
}

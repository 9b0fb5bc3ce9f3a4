//! The send doorbell: the doorbell record, then BlueFlame or the 8-byte doorbell.
//!
//! The sequence is rdma-core's `post_send_db` (providers/mlx5/qp.c):
//!
//! 1. the WQEs are in the ring (plain stores);
//! 2. [`to_device`](barrier::to_device): they are visible to the device before …
//! 3. … the doorbell record `dbrec[MLX5_SND_DBR] = be32(pi & 0xffff)`, which tells the device
//!    how far it may read;
//! 4. [`wc_start`](barrier::wc_start): the record is written before the MMIO below;
//! 5. either a **BlueFlame** copy of the WQE into the write-combining buffer (one WQE, no larger
//!    than the buffer: the device takes the WQE from the doorbell write itself and skips the
//!    DMA read) in ordered 64-bit stores, never `memcpy`, whose wide or out-of-order stores
//!    could reach the device in pieces; or the **doorbell**: the first 8 bytes of the last
//!    WQE's control segment;
//! 6. [`wc_flush`](barrier::wc_flush): push the write-combining buffer out now;
//! 7. flip to the other BlueFlame buffer, so consecutive copies never merge.

use zverbs_core::barrier;
use zverbs_core::mmio::MmioRegion;
use zverbs_core::sync::atomic::Ordering;

use crate::devmem::{DbrecWord, SegRing};
use crate::prm::SEGS_PER_BB;

/// The send doorbell of one QP.
#[derive(Debug)]
pub(crate) struct Doorbell {
    dbrec: DbrecWord,
    reg: MmioRegion,
    /// BlueFlame buffer size in bytes (0: doorbell only).
    bf_size: u32,
    /// The largest WQE, in basic blocks, that BlueFlame carries (`bf_size / 64`; 0: none).
    bf_blocks: u32,
    /// Byte offset of the buffer to use next: 0 or `bf_size`.
    offset: u32,
}

impl Doorbell {
    pub(crate) fn new(dbrec: DbrecWord, reg: MmioRegion, bf_size: u32) -> Self {
        Self {
            dbrec,
            reg,
            bf_size,
            bf_blocks: bf_size / 64,
            offset: 0,
        }
    }

    /// BlueFlame buffer size (0: doorbell only).
    #[inline]
    pub(crate) fn bf_size(&self) -> u32 {
        self.bf_size
    }

    /// Publishes the ring up to producer counter `pi` (basic blocks). `last_seg` is the segment
    /// counter of the last WQE's control segment and `last_blocks` its size; `single` says it
    /// is the only WQE since the previous ring (so BlueFlame may carry it).
    #[inline(always)]
    pub(crate) fn ring(
        &mut self,
        sq: SegRing,
        pi: u32,
        last_seg: u32,
        last_blocks: u32,
        single: bool,
    ) {
        // Everything the steps below need is decided before the barriers, which make the
        // compiler reload whatever it keeps in memory, and kept in locals (`sq` too), which it
        // need not reload after each MMIO store either.
        // SAFETY: the same registers as `self.reg`, which the queue's constructor contract
        // keeps mapped while this doorbell lives; the copy lives for this call only.
        let reg = unsafe { MmioRegion::new(self.reg.base(), self.reg.len_bytes()) };
        let offset = self.offset;
        let word0 = (offset / 8) as usize;
        let blueflame = single && last_blocks <= self.bf_blocks;
        self.offset = offset ^ self.bf_size;
        // 2. WQE stores before the doorbell record.
        barrier::to_device();
        // 3. The doorbell record: basic blocks produced, 16 bits, big-endian.
        self.dbrec.publish(pi & 0xffff, Ordering::Relaxed);
        // 4. The record before the MMIO writes.
        barrier::wc_start();
        if blueflame {
            // 5a. BlueFlame: the whole WQE, 64-bit stores in order, block by block following
            // the ring's wrap (`last_blocks >= 1` and `bf_blocks == 0` without BlueFlame).
            let first = last_seg / SEGS_PER_BB as u32;
            for b in 0..last_blocks {
                let w = word0 + 8 * b as usize;
                sq.for_each_word(first.wrapping_add(b), |i, word| {
                    // SAFETY: `w + i < (offset + bf_size) / 8` because the WQE fits the
                    // buffer, and the region spans both buffers (constructor contract of the
                    // queue).
                    unsafe { reg.write_u64(w + i, word) };
                });
            }
        } else {
            // 5b. Doorbell: the first 8 bytes of the last control segment.
            let (lo, _) = sq.with(last_seg, split_seg);
            // SAFETY: the region holds at least the 8-byte doorbell at `offset`.
            unsafe { reg.write_u64(word0, lo) };
        }
        // 6. Out of the write-combining buffer now; 7. the next ring uses the other buffer
        // (`offset` was flipped above: it is this thread's alone).
        barrier::wc_flush();
    }
}

/// A segment as two 64-bit words holding its bytes in memory order.
#[inline(always)]
fn split_seg(seg: &[u8; 16]) -> (u64, u64) {
    let mut lo = [0u8; 8];
    let mut hi = [0u8; 8];
    lo.copy_from_slice(&seg[..8]);
    hi.copy_from_slice(&seg[8..]);
    (u64::from_ne_bytes(lo), u64::from_ne_bytes(hi))
}

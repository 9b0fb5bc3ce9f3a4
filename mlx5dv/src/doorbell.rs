//! The send doorbell: the doorbell record, then BlueFlame or the 8-byte doorbell.
//!
//! The sequence is rdma-core's `post_send_db` (providers/mlx5/qp.c):
//!
//! 1. the WQEs are in the ring (plain stores);
//! 2. take the register ([`BfRegister`]): a register shared with other queues is locked, so
//!    that their writes and this one never interleave; either way this write gets the buffer
//!    the previous one did not use, and the toggle flips for the next, so that consecutive
//!    copies never merge (rdma-core locks after step 4; taking the register first lets a
//!    dedicated one decide its buffer before the barriers, as rdma-core's code does);
//! 3. [`to_device`](barrier::to_device): the WQEs are visible to the device before …
//! 4. … the doorbell record `dbrec[MLX5_SND_DBR] = be32(pi & 0xffff)`, which tells the device
//!    how far it may read;
//! 5. [`wc_start`](barrier::wc_start): the record is written before the MMIO below;
//! 6. either a **BlueFlame** copy of the WQE into the write-combining buffer (one WQE, no larger
//!    than the buffer: the device takes the WQE from the doorbell write itself and skips the
//!    DMA read) in ordered 64-bit stores, never `memcpy`, whose wide or out-of-order stores
//!    could reach the device in pieces; or the **doorbell**: the first 8 bytes of the last
//!    WQE's control segment;
//! 7. [`wc_flush`](barrier::wc_flush): push the write-combining buffer out now, still holding
//!    a shared register (a copy left in this CPU's buffer could otherwise reach the device
//!    after the next holder's);
//! 8. give the register back.

use zverbs_core::barrier;
use zverbs_core::mmio::MmioRegion;
use zverbs_core::sync::atomic::Ordering;

use crate::bf::BfRegister;
use crate::devmem::{DbrecWord, SegRing};
use crate::prm::SEGS_PER_BB;
use crate::segreg::BlockRegs;

/// The send doorbell of one QP, whose BlueFlame register is held as `R` says.
#[derive(Debug)]
pub(crate) struct Doorbell<R> {
    dbrec: DbrecWord,
    reg: MmioRegion,
    /// BlueFlame buffer size in bytes (0: doorbell only).
    bf_size: u32,
    /// The largest WQE, in basic blocks, that BlueFlame carries (`bf_size / 64`; 0: none).
    bf_blocks: u32,
    /// The register's buffer toggle, and its lock when it is shared.
    register: R,
}

impl<R: BfRegister> Doorbell<R> {
    pub(crate) fn new(dbrec: DbrecWord, reg: MmioRegion, bf_size: u32, register: R) -> Self {
        Self {
            dbrec,
            reg,
            bf_size,
            bf_blocks: bf_size / 64,
            register,
        }
    }

    /// How the register is held.
    #[inline]
    pub(crate) fn register(&self) -> &R {
        &self.register
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
        let blueflame = single && last_blocks <= self.bf_blocks;
        // 2. The register (its lock, if shared), and the buffer to write.
        let word0 = (self.register.take(self.bf_size) / 8) as usize;
        // 3. WQE stores before the doorbell record.
        barrier::to_device();
        // 4. The doorbell record: basic blocks produced, 16 bits, big-endian.
        self.dbrec.publish(pi & 0xffff, Ordering::Relaxed);
        // 5. The record before the MMIO writes.
        barrier::wc_start();
        if blueflame {
            // 6a. BlueFlame: the whole WQE, 64-bit stores in order, block by block following
            // the ring's wrap (`last_blocks >= 1` and `bf_blocks == 0` without BlueFlame).
            let first = last_seg / SEGS_PER_BB as u32;
            for b in 0..last_blocks {
                let w = word0 + 8 * b as usize;
                sq.for_each_word(first.wrapping_add(b), |i, word| {
                    // SAFETY: word `w + i` lies in the buffer starting at word `word0` because
                    // the WQE fits the buffer, and the region spans both buffers (constructor
                    // contract of the queue).
                    unsafe { reg.write_u64(w + i, word) };
                });
            }
        } else {
            // 6b. Doorbell: the first 8 bytes of the last control segment.
            let (lo, _) = sq.with(last_seg, split_seg);
            // SAFETY: the region holds at least the 8-byte doorbell at word `word0` (0
            // without BlueFlame).
            unsafe { reg.write_u64(word0, lo) };
        }
        // 7. Out of the write-combining buffer now, before anyone else may write the register.
        barrier::wc_flush();
        // 8. The register back to the queues that share it (nothing to do for a dedicated one).
        self.register.give_back();
    }
}

impl<R: BfRegister> Doorbell<R> {
    /// Publishes the ring up to producer counter `pi` after one single-block WQE whose first
    /// `n` words (`n <= 8`, 64-bit words holding its bytes in memory order) are `words`: the
    /// steps of [`Doorbell::ring`], with the BlueFlame copy made from `words` as the caller
    /// holds them (not read back from the ring). The copy is the whole 64-byte block, as
    /// every BlueFlame copy: the device reads the WQE's `ds` segments of it, and the words
    /// past `n` are zeros.
    #[inline(always)]
    pub(crate) fn ring_block(&mut self, pi: u32, words: &[u64; 8], n: usize) {
        debug_assert!(n <= 8);
        if self.bf_blocks == 0 {
            // 2. Without BlueFlame the buffer is always the first (`bf_size == 0`); a shared
            // register is still taken, for its lock.
            if self.register.is_shared() {
                self.register.take(0);
            }
            self.publish(pi);
            // 6b. Doorbell: the first 8 bytes of the control segment.
            // SAFETY: the region holds at least the 8-byte doorbell, at its word 0.
            unsafe { self.reg.write_u64(0, words[0]) };
        } else {
            // 2. The register (its lock, if shared), and the buffer to write: a region of
            // its own, so that the stores address it from one register.
            let offset = self.register.take(self.bf_size) as usize;
            // SAFETY: the buffer at `offset` (0 or `bf_size >= 64`) lies in `self.reg`,
            // which the queue's constructor contract keeps mapped while this doorbell
            // lives; the copy lives for this call only.
            let buf = unsafe { MmioRegion::new(self.reg.base().add(offset), 64) };
            self.publish(pi);
            // 6a. BlueFlame: the block's eight words, in order.
            for (i, &word) in words.iter().enumerate() {
                let w = if i < n { word } else { 0 };
                // SAFETY: one block fits the buffer (`bf_blocks >= 1`), which `buf` starts.
                unsafe { buf.write_u64(i, w) };
            }
        }
        // 7. Out of the write-combining buffer now, for a shared register: before the next
        // holder's copy (docs/architecture.md). A dedicated register's next copy, this
        // queue's, goes to the other buffer after its own `wc_start`, which drains this one
        // first; and the copy is a whole 64-byte line, which the CPU sends without waiting
        // for more stores (so a single-threaded BlueFlame needs no trailing flush, as UCX
        // writes it; DESIGN section 7).
        if self.register.is_shared() {
            barrier::wc_flush();
            // 8. The register back.
            self.register.give_back();
        }
    }

    /// Whether a one-block WQE goes by BlueFlame (`bf.size >= 64`), for the prepared posts,
    /// which decide it once ([`Doorbell::ring_block_regs`]).
    #[inline(always)]
    pub(crate) fn has_blueflame(&self) -> bool {
        self.bf_blocks != 0
    }

    /// [`Doorbell::ring_block`] for the one-block WQE of a prepared post, `b`, whose
    /// segments held in registers are copied with one store each; `BF` is
    /// [`Doorbell::has_blueflame`], decided by the caller.
    ///
    /// # Safety
    ///
    /// `BF == self.has_blueflame()` (with BlueFlame the copy is 64 bytes, without it the
    /// region may hold 8).
    #[inline(always)]
    pub(crate) unsafe fn ring_block_regs<const BF: bool>(&mut self, pi: u32, b: &BlockRegs) {
        debug_assert_eq!(BF, self.has_blueflame());
        if !BF {
            // 2. As in `ring_block`.
            if self.register.is_shared() {
                self.register.take(0);
            }
            self.publish(pi);
            // 6b. Doorbell: the first 8 bytes of the control segment.
            // SAFETY: the region holds at least the 8-byte doorbell, at its word 0.
            unsafe { self.reg.write_u64(0, b.ctrl.low()) };
        } else {
            // 2. The register (its lock, if shared), and the buffer to write.
            let offset = self.register.take(self.bf_size) as usize;
            // SAFETY: as in `ring_block`.
            let buf = unsafe { MmioRegion::new(self.reg.base().add(offset), 64) };
            self.publish(pi);
            // 6a. BlueFlame: the block's four segments, in order.
            // SAFETY: one block fits the buffer (`bf_blocks >= 1`: `BF`), which `buf` starts,
            // 16-byte aligned: the register is and `offset` is 0 or `bf_size`, a multiple of 64
            // (the queue's constructor refuses a layout otherwise).
            unsafe {
                b.ctrl.store_mmio(&buf, 0);
                let d = match b.raddr {
                    Some(r) => {
                        r.store_mmio(&buf, 1);
                        4
                    }
                    None => 2,
                };
                buf.write_u64(d, b.data[0]);
                buf.write_u64(d + 1, b.data[1]);
                for w in d + 2..8 {
                    buf.write_u64(w, 0);
                }
            }
        }
        // 7., 8. As in `ring_block`.
        if self.register.is_shared() {
            barrier::wc_flush();
            self.register.give_back();
        }
    }

    /// Steps 3 to 5 of [`Doorbell::ring`]: the WQE stores before the doorbell record, the
    /// record (`pi`), and the record before the MMIO writes.
    #[inline(always)]
    fn publish(&self, pi: u32) {
        barrier::to_device();
        self.dbrec.publish(pi & 0xffff, Ordering::Relaxed);
        barrier::wc_start();
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

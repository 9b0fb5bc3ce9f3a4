//! The send doorbell: the doorbell record, then BlueFlame or the 8-byte doorbell.
//!
//! The sequence is rdma-core's `post_send_db` (providers/mlx5/qp.c):
//!
//! 1. the WQEs are in the ring (plain stores);
//! 2. take the register ([`BfMode`]): a register shared with other queues is
//!    locked ([`SharedBf`]), so that their writes and this one never interleave; either way
//!    this write gets the buffer the previous one did not use, and the toggle flips for the
//!    next, so that consecutive copies never merge (rdma-core locks after step 4; taking the
//!    register first lets a dedicated one decide its buffer before the barriers, as
//!    rdma-core's code does);
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

use core::ptr::NonNull;

use zverbs_core::barrier;
use zverbs_core::mmio::MmioRegion;
use zverbs_core::sync::atomic::Ordering;

use crate::bf::{BfMode, SharedBf};
use crate::devmem::{DbrecWord, SegRing};
use crate::prm::SEGS_PER_BB;
use crate::segreg::BlockRegs;

/// A register shared with other queues, as a ring holds it: the [`SharedBf`] whose lock it
/// takes, or `None` for a register of the queue's own. The fast paths, which only a queue
/// with a register of its own takes, pass `None` as a constant, so that they have no code for
/// the lock.
pub(crate) type Lock = Option<NonNull<SharedBf>>;

/// The send doorbell of one QP.
#[derive(Debug)]
pub(crate) struct Doorbell {
    dbrec: DbrecWord,
    reg: MmioRegion,
    /// BlueFlame buffer size in bytes (0: doorbell only).
    bf_size: u32,
    /// The largest WQE, in basic blocks, that BlueFlame carries (`bf_size / 64`; 0: none).
    bf_blocks: u32,
    /// The address of the buffer the next write to a register of the queue's own goes to:
    /// the register's base or `bf_size` past it (a shared register's toggle is in its
    /// [`SharedBf`]). An address, not an offset, so that the copy needs no add to the base.
    next: usize,
    /// The two buffers' addresses xor-ed: `next ^ toggle` is the other buffer (0 without
    /// BlueFlame, where there is one).
    toggle: usize,
    /// The register's [`SharedBf`] when other queues write it too (the queue's constructor
    /// contract keeps it alive while the queue lives).
    shared: Lock,
    /// How the register is held.
    mode: BfMode,
    /// The single posts' key to the register, tested once: `bf_blocks` for a register of the
    /// queue's own (0: doorbell only), negative for a shared one.
    key: i32,
}

impl Doorbell {
    pub(crate) fn new(dbrec: DbrecWord, reg: MmioRegion, bf_size: u32, shared: Lock) -> Self {
        let base = reg.base();
        Self {
            dbrec,
            reg,
            bf_size,
            bf_blocks: bf_size / 64,
            next: base.addr().get(),
            toggle: base.addr().get() ^ (base.addr().get() + bf_size as usize),
            shared,
            key: if shared.is_some() {
                i32::MIN
            } else {
                (bf_size / 64) as i32
            },
            mode: match (shared, bf_size) {
                (Some(_), _) => BfMode::Shared,
                (None, 0) => BfMode::DoorbellOnly,
                (None, _) => BfMode::Dedicated,
            },
        }
    }

    /// How the register is held.
    #[inline]
    pub(crate) fn mode(&self) -> BfMode {
        self.mode
    }

    /// The shared register's lock, for the rings of the paths a shared register takes.
    #[inline(always)]
    pub(crate) fn lock(&self) -> Lock {
        self.shared
    }

    /// Step 2: takes the register (`lock`: its [`SharedBf`]'s lock and toggle, or this
    /// doorbell's toggle) and returns the buffer to write (the register's base or `bf_size`
    /// past it), flipped for the next write: the token whose doorbell store is safe.
    #[inline(always)]
    fn take(&mut self, lock: Lock) -> BfBuf {
        // A buffer of `bf_size` bytes, or the 8-byte doorbell without BlueFlame.
        let len = (self.bf_size as usize).max(8);
        match lock {
            // SAFETY: the queue's constructor contract keeps its `SharedBf` alive while the
            // queue lives; the offset it hands out is 0 or `bf_size`, where a buffer of
            // `bf_size` bytes starts inside `self.reg`, which the same contract keeps mapped
            // while this doorbell lives; the lock is held until `give_back`.
            Some(s) => BfBuf(unsafe {
                MmioRegion::new(self.reg.base().add(s.as_ref().acquire() as usize), len)
            }),
            None => {
                let next = self.next;
                self.next = next ^ self.toggle;
                // SAFETY: one of the register's two buffers (`new` starts at one, and each
                // take flips to the other), in `self.reg` (so not null), which the queue's
                // constructor contract keeps mapped while this doorbell lives.
                BfBuf(unsafe {
                    MmioRegion::new(
                        NonNull::new_unchecked(self.reg.base().as_ptr().with_addr(next)),
                        len,
                    )
                })
            }
        }
    }

    /// Step 6b without BlueFlame (`bf_size == 0`: the toggle is 0, so every write goes to the
    /// register's base): the doorbell, the first 8 bytes of the last control segment.
    #[inline(always)]
    fn doorbell_only(&self, word0: u64) {
        // SAFETY: the region holds at least the 8-byte doorbell, at its word 0.
        unsafe { self.reg.write_u64(0, word0) };
    }

    /// Step 8: gives a shared register back (nothing to do for one of the queue's own).
    #[inline(always)]
    fn give_back(lock: Lock) {
        if let Some(s) = lock {
            // SAFETY: as in `take`.
            unsafe { s.as_ref() }.release();
        }
    }

    /// BlueFlame buffer size (0: doorbell only).
    #[inline]
    pub(crate) fn bf_size(&self) -> u32 {
        self.bf_size
    }

    /// Publishes the ring up to producer counter `pi` (basic blocks). `last_seg` is the segment
    /// counter of the last WQE's control segment and `last_blocks` its size; `single` says it
    /// is the only WQE since the previous ring (so BlueFlame may carry it); `lock` is the
    /// shared register's ([`Doorbell::lock`]), or `None` on the paths of a queue with a
    /// register of its own.
    #[inline(always)]
    pub(crate) fn ring(
        &mut self,
        sq: SegRing,
        pi: u32,
        last_seg: u32,
        last_blocks: u32,
        single: bool,
        lock: Lock,
    ) {
        // Everything the steps below need is decided before the barriers, which make the
        // compiler reload whatever it keeps in memory, and kept in locals (`sq` too), which it
        // need not reload after each MMIO store either.
        let blueflame = single && last_blocks <= self.bf_blocks;
        // 2. The register (its lock, if shared), and the buffer to write.
        let reg = self.take(lock);
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
                let w = 8 * b as usize;
                sq.for_each_word(first.wrapping_add(b), |i, word| {
                    // SAFETY: word `w + i` lies in the buffer because the WQE fits it.
                    unsafe { reg.0.write_u64(w + i, word) };
                });
            }
        } else {
            // 6b. Doorbell: the first 8 bytes of the last control segment.
            let (lo, _) = sq.with(last_seg, split_seg);
            reg.doorbell(lo);
        }
        // 7. Out of the write-combining buffer now, before anyone else may write the register.
        barrier::wc_flush();
        // 8. The register back to the queues that share it (nothing to do for a dedicated one).
        Self::give_back(lock);
    }

    /// Publishes the ring up to producer counter `pi` after one single-block WQE whose first
    /// `n` words (`n <= 8`, 64-bit words holding its bytes in memory order) are `words`: the
    /// steps of [`Doorbell::ring`], with the BlueFlame copy made from `words` as the caller
    /// holds them (not read back from the ring). The copy is the whole 64-byte block, as
    /// every BlueFlame copy: the device reads the WQE's `ds` segments of it, and the words
    /// past `n` are zeros. `lock` as for [`Doorbell::ring`].
    #[inline(always)]
    pub(crate) fn ring_block(&mut self, pi: u32, words: &[u64; 8], n: usize, lock: Lock) {
        if self.bf_blocks == 0 {
            self.ring_block_doorbell(pi, words[0], lock);
        } else {
            self.ring_block_copy(pi, words, n, lock);
        }
    }

    /// [`Doorbell::ring_block`] without BlueFlame (`bf_blocks == 0`): the doorbell `word0`.
    #[inline(always)]
    fn ring_block_doorbell(&mut self, pi: u32, word0: u64, lock: Lock) {
        debug_assert_eq!(self.bf_blocks, 0);
        // 2. Without BlueFlame the buffer is always the first (`bf_size == 0`); a shared
        // register is still taken, for its lock.
        if lock.is_some() {
            self.take(lock);
        }
        self.publish(pi);
        // 6b. Doorbell: the first 8 bytes of the control segment.
        self.doorbell_only(word0);
        Self::flush_shared(lock);
    }

    /// [`Doorbell::ring_block`] with BlueFlame (`bf_blocks >= 1`): the block copied.
    #[inline(always)]
    fn ring_block_copy(&mut self, pi: u32, words: &[u64; 8], n: usize, lock: Lock) {
        debug_assert!(n <= 8 && self.bf_blocks >= 1);
        // 2. The register (its lock, if shared), and the buffer to write: a region of
        // its own, so that the stores address it from one register.
        let buf = self.take(lock);
        self.publish(pi);
        // 6a. BlueFlame: the block's eight words, in order.
        for (i, &word) in words.iter().enumerate() {
            let w = if i < n { word } else { 0 };
            // SAFETY: one block fits the buffer (`bf_blocks >= 1`), which `buf` starts.
            unsafe { buf.0.write_u64(i, w) };
        }
        Self::flush_shared(lock);
    }

    /// Steps 7 and 8 of a one-block ring: out of the write-combining buffer now, for a shared
    /// register: before the next holder's copy (docs/architecture.md); then the register
    /// back. A dedicated register's next copy, this queue's, goes to the other buffer after
    /// its own `wc_start`, which drains this one first; and the copy is a whole 64-byte line,
    /// which the CPU sends without waiting for more stores (so a single-threaded BlueFlame
    /// needs no trailing flush, as UCX writes it: docs/performance.md).
    #[inline(always)]
    fn flush_shared(lock: Lock) {
        if lock.is_some() {
            barrier::wc_flush();
            Self::give_back(lock);
        }
    }

    /// [`Doorbell::ring_block`] on the register the queue has, for the single posts: one
    /// compare of the mode, whose third outcome, a shared register, goes to an out-of-line
    /// ring under its lock (the words passed by value there, so that the fast path keeps them
    /// in registers).
    #[inline(always)]
    pub(crate) fn ring_block_any(&mut self, pi: u32, words: &[u64; 8], n: usize) {
        // One load and one test of `key` (a shared register's is negative), as the
        // doorbell-only test a dedicated register makes anyway: the doorbell-only ring pays
        // nothing for sharing, the BlueFlame one a branch not taken.
        let key = self.key;
        if key == 0 {
            self.ring_block_doorbell(pi, words[0], None)
        } else if key > 0 {
            self.ring_block_copy(pi, words, n, None)
        } else {
            self.ring_block_locked(pi, *words, n)
        }
    }

    /// [`Doorbell::ring_block`] under the shared register's lock.
    #[cold]
    #[inline(never)]
    fn ring_block_locked(&mut self, pi: u32, words: [u64; 8], n: usize) {
        let lock = self.shared;
        self.ring_block(pi, &words, n, lock);
    }

    /// [`Doorbell::ring`] on the register the queue has, for the single posts: one predictable
    /// branch, as [`Doorbell::ring_block_any`].
    #[inline(always)]
    pub(crate) fn ring_any(&mut self, sq: SegRing, pi: u32, last_seg: u32, last_blocks: u32) {
        if self.key >= 0 {
            self.ring(sq, pi, last_seg, last_blocks, true, None)
        } else if let Some(s) = self.shared {
            self.ring_locked(sq, pi, last_seg, last_blocks, true, s)
        }
    }

    /// [`Doorbell::ring`] under the shared register's lock `s`.
    #[cold]
    #[inline(never)]
    pub(crate) fn ring_locked(
        &mut self,
        sq: SegRing,
        pi: u32,
        last_seg: u32,
        last_blocks: u32,
        single: bool,
        s: NonNull<SharedBf>,
    ) {
        self.ring(sq, pi, last_seg, last_blocks, single, Some(s));
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
    /// region may hold 8). `lock` as for [`Doorbell::ring`].
    #[inline(always)]
    pub(crate) unsafe fn ring_block_regs<const BF: bool>(
        &mut self,
        pi: u32,
        b: &BlockRegs,
        lock: Lock,
    ) {
        debug_assert_eq!(BF, self.has_blueflame());
        if !BF {
            // 2. As in `ring_block`.
            if lock.is_some() {
                self.take(lock);
            }
            self.publish(pi);
            // 6b. Doorbell: the first 8 bytes of the control segment.
            self.doorbell_only(b.ctrl.low());
        } else {
            // 2. The register (its lock, if shared), and the buffer to write.
            let buf = self.take(lock);
            let buf = &buf.0;
            self.publish(pi);
            // 6a. BlueFlame: the block's four segments, in order.
            // SAFETY: one block fits the buffer (`bf_blocks >= 1`: `BF`), which `buf` starts,
            // 16-byte aligned: the register is, and the buffer is its base or `bf_size` past
            // it, a multiple of 64 (the queue's constructor refuses a layout otherwise).
            unsafe {
                b.ctrl.store_mmio(buf, 0);
                let d = match b.raddr {
                    Some(r) => {
                        r.store_mmio(buf, 1);
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
        if lock.is_some() {
            barrier::wc_flush();
            Self::give_back(lock);
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

/// One of the register's buffers, taken ([`Doorbell::take`]) for one ring: mapped while the
/// doorbell lives (the queue's constructor contract), at least the 8-byte doorbell long
/// (`bf_size` bytes with BlueFlame), and the holder's alone until the register is given back.
/// Made only by `take`, so its doorbell store needs no further argument; the BlueFlame copies
/// argue their length where they know the WQE fits.
struct BfBuf(MmioRegion);

impl BfBuf {
    /// Step 6b: the doorbell, the first 8 bytes of the last control segment, at word 0.
    #[inline(always)]
    fn doorbell(&self, word0: u64) {
        // SAFETY: every buffer `take` hands out holds at least the 8-byte doorbell.
        unsafe { self.0.write_u64(0, word0) };
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

impl Doorbell {
    /// Publishes the ring up to producer counter `pi` after one WQE of `blocks` basic blocks
    /// (1 or 2), the first ring block `first` (of `sq`), rung alone: on a register of the
    /// queue's own whose BlueFlame buffer carries the WQE, each of its segments read back
    /// from the ring into a register with one load and copied with one store, block by block
    /// following the ring's wrap, no loop (as [`Doorbell::ring_block_copy`], no trailing
    /// flush: each block is a whole 64-byte line); without BlueFlame, the doorbell `word0`
    /// (the WQE's first 8 bytes); on a shared register or one whose buffer is too small, as
    /// [`Doorbell::ring_any`].
    #[inline(always)]
    pub(crate) fn ring_blocks_back(
        &mut self,
        sq: &SegRing,
        pi: u32,
        first: u32,
        blocks: u32,
        word0: u64,
    ) {
        debug_assert!(blocks == 1 || blocks == 2);
        // One compare for the common case: `key` is `bf_blocks` for a register of the queue's
        // own (negative for a shared one).
        if self.key < blocks as i32 {
            if self.key == 0 {
                self.publish(pi);
                self.doorbell_only(word0);
            } else {
                self.ring_any(*sq, pi, first.wrapping_mul(SEGS_PER_BB as u32), blocks);
            }
            return;
        }
        let buf = self.take(None);
        self.publish(pi);
        let reg = &buf.0;
        // SAFETY: the register is the queue's own and its buffer, which `buf` starts, 16-byte
        // aligned (as in `ring_block_regs`), holds `blocks` blocks (`key`: `bf_blocks`). Each
        // block's 64 bytes are in the ring at `block_ptr`, 16-byte aligned, and only the
        // ring's owner, the caller, writes them, not during this call.
        unsafe {
            // Each block's four segments, read and stored: the first block, then the second
            // (straight-line code, no loop).
            #[cfg(not(zverbs_loom))]
            let copy = |src: *const u8, at: usize| {
                for s in 0..4 {
                    let seg = src.add(16 * s).cast::<crate::segreg::SegRepr>().read();
                    crate::segreg::SegReg::from_repr(seg).store_mmio(reg, at + s);
                }
            };
            #[cfg(not(zverbs_loom))]
            {
                copy(sq.block_ptr(first), 0);
                if blocks > 1 {
                    copy(sq.block_ptr(first.wrapping_add(1)), 4);
                }
            }
            #[cfg(zverbs_loom)]
            for b in 0..blocks {
                sq.for_each_word(first.wrapping_add(b), |i, w| {
                    reg.write_u64(8 * b as usize + i, w)
                });
            }
        }
    }
}

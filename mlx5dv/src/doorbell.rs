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
use crate::segreg::{BlockRegs, SegReg};

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

    /// Publishes the ring up to producer counter `pi` (basic blocks) after `wqe`, the last WQE
    /// written; `single` says it is the only WQE since the previous ring (so BlueFlame may
    /// carry it). The one ring of the send queues: `wqe` is a constant variant at each call
    /// site ([`RingWqe`]); the register's mode is `key`, tested once: 0 for the doorbell only,
    /// a register of the queue's own whose buffer carries `key` blocks, or negative for a
    /// shared one, whose ring goes out of line under its lock. A variant that knows the mode
    /// ([`RingWqe::KEY`]) gives it as a constant, and the test folds away.
    #[inline(always)]
    pub(crate) fn ring<W: RingWqe>(&mut self, pi: u32, wqe: W, single: bool) {
        let key = match W::KEY {
            Some(k) => k,
            None => self.key,
        };
        debug_assert!(key == self.key || (0 <= key && key <= self.key));
        // Everything the steps below need is decided before the barriers, which make the
        // compiler reload whatever it keeps in memory, and kept in locals.
        if W::APART && key == 0 {
            // Without BlueFlame the buffer is always the first (`bf_size == 0`, so the toggle
            // is 0): 3.-5., then 6b., the doorbell; the register takes no copy, so nothing is
            // left for a flush to push. (The other variants take the branch below, whose
            // `take` flips a toggle of 0: one test less.)
            self.publish(pi);
            self.doorbell_only(wqe.word0());
        } else if W::OWN || key >= 0 {
            // (`key >= 0`, the register's `bf_blocks`: read again for the variants whose size
            // is not constant, rather than held in a register.)
            let limit = if W::APART { key as u32 } else { self.bf_blocks };
            let fits = single && wqe.blocks() <= limit;
            // 2. The register's next buffer.
            let buf = self.take(None);
            self.publish(pi);
            if fits {
                // 6a. BlueFlame, whole 64-byte lines, which the CPU sends without waiting for
                // more stores; this queue's next copy goes to the other buffer after its own
                // `wc_start`, which drains this one first: no trailing flush (as UCX writes
                // it: docs/performance.md).
                wqe.copy(&BfFit::new(&buf.0, wqe.blocks()));
            } else {
                // 6b., 7. The doorbell, and out of the write-combining buffer now.
                buf.doorbell(wqe.word0());
                barrier::wc_flush();
            }
        } else {
            self.ring_locked(pi, wqe, single);
        }
    }

    /// [`Doorbell::ring`] on a shared register: steps 2 to 8 under its lock (`wqe` by value,
    /// so that the fast paths keep a variant's words in registers).
    #[cold]
    #[inline(never)]
    fn ring_locked<W: RingWqe>(&mut self, pi: u32, wqe: W, single: bool) {
        let lock = self.shared;
        let fits = single && wqe.blocks() <= self.bf_blocks;
        // 2. The register, locked, and the buffer to write.
        let buf = self.take(lock);
        self.publish(pi);
        if fits {
            // 6a. BlueFlame: the WQE fits the buffer (`blocks <= bf_blocks`).
            wqe.copy(&BfFit::new(&buf.0, wqe.blocks()));
        } else {
            // 6b. The doorbell.
            buf.doorbell(wqe.word0());
        }
        // 7. Out of the write-combining buffer now, before anyone else may write the register.
        barrier::wc_flush();
        // 8. The register back to the queues that share it.
        Self::give_back(lock);
    }

    /// [`Doorbell::ring`] of a [`Back`] WQE, as the generic single post and the inline post
    /// ring it ([`Doorbell::ring_any`]): `last_seg` is the segment counter of the last WQE's
    /// control segment and `last_blocks` its size; `single` says it is the only WQE since the
    /// previous ring; `lock` is the shared register's, or `None` for one of the queue's own.
    /// Kept apart from the generic ring because routed through it those two posts hold one
    /// register more across the barriers (`opaque` and `write_inline8` two instructions more:
    /// `cargo xtask bench --instructions`).
    #[inline(always)]
    fn ring_back(
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
            let (first, buf) = (
                last_seg / SEGS_PER_BB as u32,
                BfFit::new(&reg.0, last_blocks),
            );
            for b in 0..last_blocks {
                sq.for_each_word(first.wrapping_add(b), |i, word| buf.word(b, i, word));
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

    /// [`Doorbell::ring_back`] on the register the queue has, for the generic single post and
    /// the inline post: one predictable branch, a shared register's ring out of line.
    #[inline(always)]
    pub(crate) fn ring_any(&mut self, sq: SegRing, pi: u32, last_seg: u32, last_blocks: u32) {
        if self.key >= 0 {
            self.ring_back(sq, pi, last_seg, last_blocks, true, None)
        } else if let Some(s) = self.shared {
            self.ring_back_locked(sq, pi, last_seg, last_blocks, true, s)
        }
    }

    /// [`Doorbell::ring_back`] under the shared register's lock `s`.
    #[cold]
    #[inline(never)]
    fn ring_back_locked(
        &mut self,
        sq: SegRing,
        pi: u32,
        last_seg: u32,
        last_blocks: u32,
        single: bool,
        s: NonNull<SharedBf>,
    ) {
        self.ring_back(sq, pi, last_seg, last_blocks, single, Some(s));
    }

    /// Whether a one-block WQE goes by BlueFlame (`bf.size >= 64`), for the prepared posts,
    /// which decide it once ([`Regs`]).
    #[inline(always)]
    pub(crate) fn has_blueflame(&self) -> bool {
        self.bf_blocks != 0
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

/// A WQE as [`Doorbell::ring`] rings it, one variant per call site, each inlined: its size
/// in basic blocks, its first 8 bytes (the doorbell) and its BlueFlame copy.
///
/// # Safety
///
/// [`RingWqe::blocks`] is at least 1 and the same at each call (the token of the copy,
/// [`BfFit`], holds the buffer to it); [`RingWqe::KEY`], when given, is the ringing doorbell's key or `0 <= KEY <= key`, and with
/// [`RingWqe::OWN`] the doorbell's key is not negative (which a variant giving either has the
/// caller of its constructor promise).
pub(crate) unsafe trait RingWqe {
    /// The register's mode when the variant knows it ([`Doorbell::ring`]); `None`: the
    /// doorbell's own.
    const KEY: Option<i32> = None;
    /// Whether the register is known to be the queue's own (not shared: `key >= 0`), which
    /// a variant giving it has the caller of its constructor promise.
    const OWN: bool = false;
    /// Whether a register without BlueFlame (`key == 0`) takes a branch of its own, without
    /// the `take` and the flush (one test more for the others).
    const APART: bool = true;
    /// The WQE's size in basic blocks (at least 1).
    fn blocks(&self) -> u32;
    /// Step 6b: the doorbell, the first 8 bytes of the WQE's control segment.
    fn word0(&self) -> u64;
    /// Step 6a: the BlueFlame copy, whole blocks in order, into `buf`, which holds them.
    fn copy(&self, buf: &BfFit<'_>);
}

/// The BlueFlame buffer taken for one ring, made only where the WQE was found to fit it
/// (`blocks <= bf_blocks`): proof that the WQE's [`RingWqe::blocks`] blocks lie in it, 16-byte
/// aligned (the register is, and the buffer is its base or `bf_size` past it, a multiple of 64:
/// the queue's constructor refuses a layout otherwise).
pub(crate) struct BfFit<'a> {
    reg: &'a MmioRegion,
    /// The WQE's last block (`blocks - 1`).
    last: u32,
}

impl<'a> BfFit<'a> {
    /// The token for a WQE of `blocks` blocks (at least 1) found to fit the buffer `reg`
    /// (`blocks <= bf_blocks`): made only where that was checked.
    #[inline(always)]
    fn new(reg: &'a MmioRegion, blocks: u32) -> Self {
        Self {
            reg,
            last: blocks.wrapping_sub(1),
        }
    }

    /// Stores `word` as word `i` (`< 8`) of block `block` (of the WQE's) of the copy, in the
    /// order called; outside the WQE, nothing. The indices are constants or loop counters
    /// where it is called, so that the test folds away.
    #[inline(always)]
    pub(crate) fn word(&self, block: u32, i: usize, word: u64) {
        if block <= self.last && i < 8 {
            // SAFETY: the word lies in the WQE's blocks, which lie in the buffer (`new`).
            unsafe { self.reg.write_u64(8 * block as usize + i, word) };
        }
    }

    /// Stores `seg` as segment `s` (`< 4`) of block `block` of the copy, as
    /// [`BfFit::word`].
    #[inline(always)]
    pub(crate) fn seg(&self, block: u32, s: usize, seg: SegReg) {
        if block <= self.last && s < 4 {
            // SAFETY: as in `word`; 16-byte aligned: the buffer is (the register is, and the
            // buffer is its base or `bf_size` past it, a multiple of 64: the queue's
            // constructor refuses a layout otherwise), and so is each segment of it.
            unsafe { seg.store_mmio(self.reg, 4 * block as usize + s) };
        }
    }
}

/// A one-block WQE as words in registers: the whole 64-byte block, eight 64-bit words holding
/// its bytes in memory order, zeros past the WQE's `ds` segments (the device reads those of
/// the copy, which is the whole block, as every BlueFlame copy).
#[derive(Clone, Copy)]
pub(crate) struct Words(pub(crate) [u64; 8]);

// SAFETY: one block.
unsafe impl RingWqe for Words {
    #[inline(always)]
    fn blocks(&self) -> u32 {
        1
    }
    #[inline(always)]
    fn word0(&self) -> u64 {
        self.0[0]
    }
    #[inline(always)]
    fn copy(&self, buf: &BfFit<'_>) {
        for (i, &word) in self.0.iter().enumerate() {
            buf.word(0, i, word);
        }
    }
}

/// The one-block WQE of a prepared post, whose segments held in registers are copied with one
/// store each; `FIXED`: the register is the queue's own, with BlueFlame (`BF`) or without, a
/// constant ([`Regs::new`]).
#[derive(Clone, Copy)]
pub(crate) struct Regs<'a, const FIXED: bool, const BF: bool>(&'a BlockRegs);

impl<'a, const FIXED: bool, const BF: bool> Regs<'a, FIXED, BF> {
    /// The block `b` to ring.
    ///
    /// # Safety
    ///
    /// With `FIXED`, the doorbell that rings it has a register of the queue's own (not
    /// shared) and `BF` says whether it has BlueFlame ([`Doorbell::has_blueflame`]).
    #[inline(always)]
    pub(crate) unsafe fn new(b: &'a BlockRegs) -> Self {
        Self(b)
    }
}

// SAFETY: one block; `KEY` as `new`'s caller promised: 1 (one block fits
// a register of the queue's own with BlueFlame) or 0 (a register of the queue's own).
unsafe impl<const FIXED: bool, const BF: bool> RingWqe for Regs<'_, FIXED, BF> {
    const KEY: Option<i32> = if FIXED { Some(BF as i32) } else { None };
    #[inline(always)]
    fn blocks(&self) -> u32 {
        1
    }
    #[inline(always)]
    fn word0(&self) -> u64 {
        self.0.ctrl.low()
    }
    #[inline(always)]
    fn copy(&self, buf: &BfFit<'_>) {
        let b = self.0;
        buf.seg(0, 0, b.ctrl);
        let d = match b.raddr {
            Some(r) => {
                buf.seg(0, 1, r);
                4
            }
            None => 2,
        };
        buf.word(0, d, b.data[0]);
        buf.word(0, d + 1, b.data[1]);
        for w in d + 2..8 {
            buf.word(0, w, 0);
        }
    }
}

/// A WQE read back from the ring `sq` (a [`SegRing`], or a reference to one: [`RingAt`]): its
/// control segment at segment counter `last_seg`, its size `blocks`; the copy word by word,
/// block by block following the ring's wrap. `OWN`: rung on a register known to be the
/// queue's own ([`Back::own`]).
#[derive(Clone, Copy)]
pub(crate) struct Back<R, const OWN: bool = false> {
    sq: R,
    last_seg: u32,
    blocks: u32,
}

/// Where a [`Back`] finds the ring: a copy the caller holds in registers, or a reference to
/// the queue's, read after the barriers (fewer registers held across them); which is cheaper
/// depends on the call site.
pub(crate) trait RingAt: Copy {
    /// The ring, into a local (which the MMIO stores cannot change).
    fn ring(&self) -> SegRing;
}

impl RingAt for SegRing {
    #[inline(always)]
    fn ring(&self) -> SegRing {
        *self
    }
}

impl RingAt for &SegRing {
    #[inline(always)]
    fn ring(&self) -> SegRing {
        **self
    }
}

impl<R: RingAt> Back<R> {
    /// The WQE of `blocks` basic blocks whose control segment is at segment counter
    /// `last_seg` of `sq`.
    #[inline(always)]
    pub(crate) fn new(sq: R, last_seg: u32, blocks: u32) -> Self {
        Self {
            sq,
            last_seg,
            blocks,
        }
    }
}

impl<R: RingAt> Back<R, true> {
    /// [`Back::new`] for a doorbell whose register is the queue's own, so that its ring
    /// has no test for a shared one.
    ///
    /// # Safety
    ///
    /// The doorbell that rings it has a register of the queue's own (not shared).
    #[inline(always)]
    pub(crate) unsafe fn own(sq: R, last_seg: u32, blocks: u32) -> Self {
        Self {
            sq,
            last_seg,
            blocks,
        }
    }
}

// SAFETY: `blocks` as the caller gave it, a WQE's size (at least 1); `OWN` as `own`'s caller promised.
unsafe impl<R: RingAt, const OWN: bool> RingWqe for Back<R, OWN> {
    const OWN: bool = OWN;
    const APART: bool = false;
    #[inline(always)]
    fn blocks(&self) -> u32 {
        self.blocks
    }
    #[inline(always)]
    fn word0(&self) -> u64 {
        let sq = self.sq.ring();
        sq.with(self.last_seg, split_seg).0
    }
    #[inline(always)]
    fn copy(&self, buf: &BfFit<'_>) {
        let (sq, first) = (self.sq.ring(), self.last_seg / SEGS_PER_BB as u32);
        for b in 0..self.blocks() {
            sq.for_each_word(first.wrapping_add(b), |i, word| buf.word(b, i, word));
        }
    }
}

/// A WQE of 1 or 2 blocks from ring block `first`, whose doorbell `word0` the caller holds:
/// the copy read back from the ring a segment at a time into a register with one load and
/// copied with one store, no loop.
#[derive(Clone, Copy)]
pub(crate) struct BackSegs<'a> {
    pub(crate) sq: &'a SegRing,
    pub(crate) first: u32,
    pub(crate) blocks: u32,
    pub(crate) word0: u64,
}

// SAFETY: `blocks` as the caller gave it, 1 or 2.
unsafe impl RingWqe for BackSegs<'_> {
    #[inline(always)]
    fn blocks(&self) -> u32 {
        debug_assert!(self.blocks == 1 || self.blocks == 2);
        self.blocks
    }
    #[inline(always)]
    fn word0(&self) -> u64 {
        self.word0
    }
    #[inline(always)]
    fn copy(&self, buf: &BfFit<'_>) {
        let (sq, first) = (self.sq, self.first);
        // Each block's four segments, read and stored: the first block, then the second
        // (straight-line code, no loop).
        #[cfg(not(zverbs_loom))]
        let copy = |b: u32| {
            let src = sq.block_ptr(first.wrapping_add(b));
            for s in 0..4 {
                // SAFETY: the block's 64 bytes are in the ring at `block_ptr`, 16-byte
                // aligned, and only the ring's owner, the caller, writes them, not during
                // this call.
                let seg = unsafe { src.add(16 * s).cast::<crate::segreg::SegRepr>().read() };
                buf.seg(b, s, SegReg::from_repr(seg));
            }
        };
        #[cfg(not(zverbs_loom))]
        {
            copy(0);
            // (`blocks > 1`, as the token holds it: one test.)
            if buf.last > 0 {
                copy(1);
            }
        }
        #[cfg(zverbs_loom)]
        for b in 0..self.blocks {
            sq.for_each_word(first.wrapping_add(b), |i, w| buf.word(b, i, w));
        }
    }
}

//! Access to memory shared with the device: WQE rings, CQE rings and doorbell records.
//!
//! This is the one module that turns the raw pointers `mlx5dv_init_obj` reports into accesses,
//! so that under `cfg(zverbs_loom)` the same queue code runs over loom-tracked cells: a loom
//! thread playing the NIC then proves that every byte of a WQE is written before the doorbell
//! record that publishes it, and that a CQE body is read only after its owner byte.
//!
//! In normal builds a ring is plain memory (`repr(transparent)` cells over bytes); under loom
//! it must have been allocated as an array of the cell types below.

use core::ptr::NonNull;
use zverbs_core::sync::atomic::{AtomicU32, Ordering};
use zverbs_core::sync::cell::UnsafeCell;

/// One 16-byte WQE segment of a ring.
pub type SegCell = UnsafeCell<[u8; 16]>;

/// A ring of 16-byte segments addressed by a free-running segment counter.
///
/// `Copy`: a copy is the same address and mask, which the ring's owner takes into a local
/// before writing a WQE (so the compiler need not reload them after each segment store, which
/// it cannot prove does not alias the owner's fields).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SegRing {
    base: NonNull<SegCell>,
    mask: u32,
    /// The mask of a 64-bit word index into the ring (`2 * mask + 1`).
    word_mask: u32,
}

impl SegRing {
    /// A ring of `segs` (a power of two) segments at `base`.
    ///
    /// # Safety
    ///
    /// `base` points to `segs` segments (in normal builds: `16 × segs` bytes, 16-byte aligned;
    /// under loom: `segs` [`SegCell`]s) that stay valid for the ring's lifetime, and no one but
    /// the device and this ring's owner accesses them.
    #[inline]
    pub(crate) unsafe fn new(base: NonNull<u8>, segs: u32) -> Self {
        debug_assert!(segs.is_power_of_two());
        Self {
            base: base.cast(),
            mask: segs - 1,
            word_mask: 2 * segs - 1,
        }
    }

    #[inline(always)]
    fn cell(&self, idx: u32) -> &SegCell {
        // SAFETY: the index is masked into the ring, which `new`'s contract makes valid.
        unsafe { &*self.base.as_ptr().add((idx & self.mask) as usize) }
    }

    /// The segment, in the ring, of segment counter `start` (`start mod segments`).
    #[inline(always)]
    pub(crate) fn seg_of(&self, start: u32) -> u32 {
        start & self.mask
    }

    /// The first 64-bit word, in the ring, of the basic block of producer counter `pi`
    /// (`8 * pi mod 2 * segments`): an index from which both the ring (8 bytes a unit) and the
    /// slots (16 bytes a block: 2 a unit) are addressed by the addressing mode's scale.
    #[inline(always)]
    pub(crate) fn word_of_block(&self, pi: u32) -> u32 {
        pi.wrapping_mul(8) & self.word_mask
    }

    /// Reserves the WQE whose control segment is segment counter `start` (a multiple of 4),
    /// `blocks` basic blocks: the one place a send path argues that it may write them. The
    /// token's writes are safe; what it covers reaches the device when the caller publishes
    /// the producer counter past it (the doorbell record).
    ///
    /// # Safety
    ///
    /// The `blocks` blocks from `start` are free (the room check passed: the device has
    /// completed whatever was there) and not yet published, no other token covers them while
    /// this one lives, and `blocks` is at most the ring's size.
    #[inline(always)]
    pub(crate) unsafe fn reserve(&self, start: u32, blocks: u32) -> Wqe {
        debug_assert!(start.is_multiple_of(4) && blocks * 4 <= self.mask + 1);
        Wqe {
            ring: *self,
            start,
            blocks,
        }
    }

    /// Reserves the `segs` segments of a receive WQE's scatter list from segment counter
    /// `start`: the one place a receive path argues that it may write them. The token's writes
    /// are safe; they reach the device when the caller publishes the receive (the doorbell
    /// record).
    ///
    /// # Safety
    ///
    /// The `segs` segments from `start` are the poster's (the entry is free: the room check
    /// or the free list says the device is done with it) and not yet published, no other
    /// token covers them while this one lives, and `segs` is at most the ring's size.
    #[inline(always)]
    pub(crate) unsafe fn reserve_recv(&self, start: u32, segs: u32) -> RecvWqe {
        debug_assert!(segs <= self.mask + 1);
        RecvWqe {
            ring: *self,
            start,
            segs,
        }
    }

    /// Calls `f` with segment `idx` (masked) for writing.
    ///
    /// # Safety
    ///
    /// The device is not reading the segment: it lies in a part of the ring that was not yet
    /// published, or whose work the device has completed.
    #[inline(always)]
    pub(crate) unsafe fn with_mut<R>(&self, idx: u32, f: impl FnOnce(&mut [u8; 16]) -> R) -> R {
        // SAFETY: only the owner writes the ring, and (caller) the device is not reading this
        // segment, so the exclusive reference is unique for its short life.
        self.cell(idx).with_mut(|p| f(unsafe { &mut *p }))
    }

    /// Hands the 64 bytes of basic block `block` (masked) to `f` as eight 64-bit words in
    /// memory order, `f(i, word)`, reading each word just before its call (a copy to device
    /// memory then needs one register, not eight). The ring must consist of whole blocks
    /// (4 segments each).
    #[inline(always)]
    pub(crate) fn for_each_word(&self, block: u32, mut f: impl FnMut(usize, u64)) {
        let first = block.wrapping_mul(4) & self.mask;
        #[cfg(not(zverbs_loom))]
        {
            // SAFETY: a block never straddles the ring's end (the ring is whole blocks, and
            // `first` is a multiple of 4 below the segment count), so its 64 bytes, the eight
            // words read, are contiguous and in the ring; only the ring's owner (the caller)
            // writes them, and not during this call.
            unsafe {
                let words = self.base.as_ptr().add(first as usize).cast::<u64>();
                for i in 0..8 {
                    f(i, words.add(i).read());
                }
            }
        }
        #[cfg(zverbs_loom)]
        {
            for s in 0..4u32 {
                let seg = self.with(first + s, |b| *b);
                for (h, chunk) in seg.chunks_exact(8).enumerate() {
                    let mut a = [0u8; 8];
                    a.copy_from_slice(chunk);
                    f(2 * s as usize + h, u64::from_ne_bytes(a));
                }
            }
        }
    }

    /// The address of basic block `block` (masked) of the ring: its 64 bytes, contiguous (the
    /// ring is whole blocks), 16-byte aligned (`new`'s contract).
    #[cfg(not(zverbs_loom))]
    #[inline(always)]
    pub(crate) fn block_ptr(&self, block: u32) -> *const u8 {
        let first = block.wrapping_mul(4) & self.mask;
        self.base
            .as_ptr()
            .wrapping_add(first as usize)
            .cast::<u8>()
            .cast_const()
    }

    /// Whether the `n` segments from segment `seg` of the ring (`seg_of` a counter: not
    /// masked again) lie before its end, so that they are contiguous in memory.
    #[inline(always)]
    pub(crate) fn fits_before_end(&self, seg: u32, n: u32) -> bool {
        debug_assert!(seg <= self.mask);
        seg + n <= self.mask + 1
    }

    /// Calls `f` with segment `idx` (masked) for reading.
    #[inline(always)]
    pub(crate) fn with<R>(&self, idx: u32, f: impl FnOnce(&[u8; 16]) -> R) -> R {
        // SAFETY: only the ring's owner writes segments, and it is the caller: no write can
        // overlap this read. The device only reads them.
        self.cell(idx).with(|p| f(unsafe { &*p }))
    }
}

/// Moves one `T` from byte `i` of `src` to byte `i` of `dst`: one unaligned load and one
/// unaligned store of the type's width (a `u128` is one 16-byte vector move).
///
/// # Safety
///
/// `src + i .. src + i + size_of::<T>()` is readable, `dst + i .. dst + i + size_of::<T>()`
/// writable, and the two do not overlap.
#[cfg(not(zverbs_loom))]
#[inline(always)]
unsafe fn move_at<T: Copy>(dst: *mut u8, src: *const u8, i: usize) {
    // SAFETY: (caller) both ranges are in their allocations and apart; unaligned accesses.
    unsafe {
        dst.add(i)
            .cast::<T>()
            .write_unaligned(src.add(i).cast::<T>().read_unaligned())
    }
}

/// A WQE's basic blocks, reserved by [`SegRing::reserve`]: free, unpublished and this token's
/// alone, so that its writes need no further argument. Segment `k` is counted from the control
/// segment and follows the ring's wrap; the writes stay inside the reservation
/// (`k < 4 * blocks`, checked in debug builds; in any build they stay inside the ring; the
/// first-block writes of [`Wqe::block_words_at`] take their position from the token). Not
/// `Copy`: one reservation, one token, handed down to the code that writes the WQE.
#[derive(Debug)]
pub(crate) struct Wqe {
    ring: SegRing,
    start: u32,
    blocks: u32,
}

impl Wqe {
    /// Calls `f` with segment `k` of the WQE, for writing. WQEs start on a basic block, so
    /// the segments of the first block (`k < 4`) are addressed from the block without masking
    /// each one; later ones follow the ring's wrap.
    #[inline(always)]
    pub(crate) fn seg<R>(&self, k: u32, f: impl FnOnce(&mut [u8; 16]) -> R) -> R {
        debug_assert!(k < 4 * self.blocks);
        // SAFETY: for `k < 4`, `start & mask` is a multiple of 4 (`SegRing::reserve`) at most
        // `mask - 3` (the ring is whole blocks), so the block's four segments are in the ring;
        // later ones are masked into it. The reservation (`SegRing::reserve`): the segment is
        // free, unpublished and this token's, so the exclusive reference is unique for its
        // short life.
        unsafe {
            let cell = if k < 4 {
                &*self
                    .ring
                    .base
                    .as_ptr()
                    .add((self.start & self.ring.mask) as usize)
                    .add(k as usize)
            } else {
                self.ring.cell(self.start.wrapping_add(k))
            };
            cell.with_mut(|p| f(&mut *p))
        }
    }

    /// Writes `words[..n]` (64-bit words holding the bytes in memory order, `n <= 8`) at the
    /// start of the WQE's block `j` (0: its first), which follows the ring's wrap: the
    /// segments of one block, written without a copy through a byte array. A block past the reservation (`j >= blocks`, a caller's mistake) is not written:
    /// checked in every build, a compare the callers' constants fold away.
    #[inline(always)]
    pub(crate) fn block_words_in(&self, j: u32, words: &[u64; 8], n: usize) {
        debug_assert!(n <= 8);
        if j >= self.blocks {
            return;
        }
        #[cfg(not(zverbs_loom))]
        {
            // SAFETY: `start + 4 j` masked is a multiple of 4 at most `mask - 3` (the ring is
            // whole blocks), so the block's 64 bytes, the words `i < 8` written, are in the
            // ring, 16-byte aligned (constructor contract), and the token's
            // (`SegRing::reserve`: block `j < blocks` of the reservation).
            unsafe {
                let dst = self
                    .ring
                    .base
                    .as_ptr()
                    .add((self.start.wrapping_add(4 * j) & self.ring.mask) as usize)
                    .cast::<u64>();
                for (i, w) in words.iter().take(n).enumerate() {
                    dst.add(i).write(*w);
                }
            }
        }
        #[cfg(zverbs_loom)]
        for s in 0..n.div_ceil(2) {
            self.seg(4 * j + s as u32, |b| {
                b[..8].copy_from_slice(&words[2 * s].to_ne_bytes());
                if 2 * s + 1 < n {
                    b[8..].copy_from_slice(&words[2 * s + 1].to_ne_bytes());
                }
            });
        }
    }

    /// As [`Wqe::block_words_in`] block 0, without its block check: the block written is the
    /// token's first, its position derived from the token (the computation the caller makes
    /// for its own use, which the compiler shares: no instruction added).
    #[inline(always)]
    pub(crate) fn block_words_at(&self, words: &[u64; 8], n: usize) {
        debug_assert!(n <= 8);
        let seg = self.ring.seg_of(self.start);
        #[cfg(not(zverbs_loom))]
        {
            // SAFETY: `seg` is the WQE's first segment (the token's own), a multiple of 4
            // below the ring's size: the block's 64 bytes, the words `i < 8` written, are in
            // the ring, 16-byte aligned (constructor contract), and the token's.
            unsafe {
                let dst = self.ring.base.as_ptr().add(seg as usize).cast::<u64>();
                for (i, w) in words.iter().take(n).enumerate() {
                    dst.add(i).write(*w);
                }
            }
        }
        #[cfg(zverbs_loom)]
        self.block_words_in(0, words, n);
    }

    /// Writes the one-block WQE `b` at 64-bit word `word` of the ring, the WQE's first word as
    /// [`SegRing::word_of_block`] gives it (not masked again), a segment held in a register
    /// with one store.
    #[inline(always)]
    pub(crate) fn block_regs_at(&self, word: u32, b: &crate::segreg::BlockRegs) {
        debug_assert!(word == 2 * self.ring.seg_of(self.start));
        #[cfg(not(zverbs_loom))]
        {
            // SAFETY: `word` is the WQE's first word, a multiple of 8 below the ring's size in
            // words: the block's 64 bytes are in the ring, 16-byte aligned (constructor
            // contract), and the token's. Each store below is to one of its first three
            // segments.
            unsafe {
                let dst = self
                    .ring
                    .base
                    .as_ptr()
                    .cast::<u64>()
                    .add(word as usize)
                    .cast::<u8>();
                b.ctrl.store(dst);
                let data = match b.raddr {
                    Some(r) => {
                        r.store(dst.add(16));
                        dst.add(32)
                    }
                    None => dst.add(16),
                }
                .cast::<u64>();
                data.write(b.data[0]);
                data.add(1).write(b.data[1]);
            }
        }
        #[cfg(zverbs_loom)]
        {
            let (words, n) = b.words();
            self.block_words_in(0, &words, n);
        }
    }

    /// Zeroes ring segment `seg` (not masked: `seg_of` a segment of the WQE that does not
    /// meet the ring's end).
    #[inline(always)]
    pub(crate) fn zero_seg_at(&self, seg: u32) {
        debug_assert!(
            seg <= self.ring.mask
                && seg.wrapping_sub(self.ring.seg_of(self.start)) < 4 * self.blocks
        );
        #[cfg(not(zverbs_loom))]
        // SAFETY: the segment is in the ring (below its size), 16-byte aligned (constructor
        // contract), and the token's.
        unsafe {
            self.ring
                .base
                .as_ptr()
                .add(seg as usize)
                .cast::<[u8; 16]>()
                .write([0; 16])
        };
        #[cfg(zverbs_loom)]
        self.seg_at(seg, |b| *b = [0; 16]);
    }

    /// Copies `len` bytes (at least 1) from `src` to byte `pos` of the ring (not a counter: not
    /// masked again), inline data of the WQE that does not meet the ring's end: in fixed-size
    /// moves that may overlap (two of 1 to 16 bytes, two runs of two or four 16-byte moves, or
    /// runs of four and a last one), not a copy of variable length (a call to `memcpy`).
    ///
    /// # Safety
    ///
    /// `src..src + len` is readable and does not overlap the ring; the bytes `pos..pos + len`
    /// lie in the WQE, before the ring's end.
    #[inline(always)]
    pub(crate) unsafe fn copy_in_short_at(&self, pos: usize, src: *const u8, len: usize) {
        debug_assert!(len >= 1 && pos + len <= (self.ring.mask as usize + 1) * 16);
        #[cfg(not(zverbs_loom))]
        {
            // SAFETY: (caller) `pos + len` is at most the ring's size: the bytes `dst..dst + len`
            // lie in the WQE. Every move below reads `src + i .. src + i + n` and writes
            // `dst + i .. dst + i + n` with `i + n <= len` (`n` the move's size, at most `len`),
            // inside the source (readable, caller) and the bytes given (the WQE's: the token's;
            // in the ring, not overlapping the source); unaligned moves.
            unsafe {
                let dst = self.ring.base.as_ptr().cast::<u8>().add(pos);
                // Runs of 16 bytes: two runs of `r` cover any length from `r` to `2r`.
                let run = |i: usize, r: usize| {
                    for j in (0..r).step_by(16) {
                        move_at::<u128>(dst, src, i + j);
                    }
                };
                // Chosen by halving: two compares down to 8 bytes, three to 64.
                if len >= 16 {
                    if len >= 64 {
                        let mut i = 0;
                        while i + 64 < len {
                            run(i, 64);
                            i += 64;
                        }
                        run(len - 64, 64);
                    } else if len >= 32 {
                        run(0, 32);
                        run(len - 32, 32);
                    } else {
                        move_at::<u128>(dst, src, 0);
                        move_at::<u128>(dst, src, len - 16);
                    }
                } else if len >= 8 {
                    move_at::<u64>(dst, src, 0);
                    move_at::<u64>(dst, src, len - 8);
                } else if len >= 4 {
                    move_at::<u32>(dst, src, 0);
                    move_at::<u32>(dst, src, len - 4);
                } else {
                    move_at::<u8>(dst, src, 0);
                    if len >= 2 {
                        move_at::<u16>(dst, src, len - 2);
                    }
                }
            }
        }
        #[cfg(zverbs_loom)]
        // SAFETY: (caller) as `Wqe::copy_in`'s contract, which this one's implies (`pos` is
        // in the ring: its byte counter is itself).
        unsafe {
            self.copy_in(pos as u32, src, len)
        };
    }

    /// Copies `len` bytes from `src` into the ring at byte counter `at` (16 a segment,
    /// free-running like the segment counter), continuing at the ring's start when it meets
    /// the end (at most two copies): the inline data of the WQE.
    ///
    /// # Safety
    ///
    /// `src..src + len` is readable and does not overlap the ring; the bytes `at..at + len`
    /// lie in the WQE.
    #[inline(always)]
    pub(crate) unsafe fn copy_in(&self, at: u32, src: *const u8, len: usize) {
        #[cfg(not(zverbs_loom))]
        {
            let ring_bytes = (self.ring.mask as usize + 1) * 16;
            let pos = at as usize & (ring_bytes - 1);
            let first = len.min(ring_bytes - pos);
            let dst = self.ring.base.as_ptr().cast::<u8>();
            // SAFETY: `pos + first <= ring_bytes` and `len - first <= ring_bytes`, so both
            // copies stay in the ring; (caller) the source is readable and does not overlap the
            // ring, and the bytes written lie in the WQE: the token's.
            unsafe {
                core::ptr::copy_nonoverlapping(src, dst.add(pos), first);
                if first < len {
                    core::ptr::copy_nonoverlapping(src.add(first), dst, len - first);
                }
            }
        }
        #[cfg(zverbs_loom)]
        {
            let (mut at, mut src, mut left) = (at, src, len);
            while left > 0 {
                let off = (at % 16) as usize;
                let n = left.min(16 - off);
                // SAFETY: (caller) as above; `off + n <= 16`; the source's next byte is still
                // inside it.
                unsafe {
                    self.seg_at(at / 16, |b| {
                        core::ptr::copy_nonoverlapping(src, b.as_mut_ptr().add(off), n)
                    });
                    src = src.add(n);
                }
                at = at.wrapping_add(n as u32);
                left -= n;
            }
        }
    }

    /// Calls `f` with segment `idx` of the ring (masked), for writing: a segment of the WQE
    /// addressed by the ring's segment counter (the inline data's).
    #[inline(always)]
    pub(crate) fn seg_at<R>(&self, idx: u32, f: impl FnOnce(&mut [u8; 16]) -> R) -> R {
        debug_assert!(idx.wrapping_sub(self.start) & self.ring.mask < 4 * self.blocks);
        // SAFETY: as in `Wqe::seg`.
        unsafe { self.ring.with_mut(idx, f) }
    }
}

/// A receive WQE's scatter segments, reserved by [`SegRing::reserve_recv`]: free,
/// unpublished and this token's alone, so that its writes need no further argument. Segment
/// `k` is counted from the first and follows the ring's wrap; the writes stay inside the
/// reservation (`k < segs`, checked in debug builds; in any build they stay inside the ring).
#[derive(Debug)]
pub(crate) struct RecvWqe {
    ring: SegRing,
    start: u32,
    segs: u32,
}

impl RecvWqe {
    /// The number of segments reserved.
    #[inline(always)]
    pub(crate) fn segs(&self) -> u32 {
        self.segs
    }

    /// Calls `f` with segment `k` of the reservation, for writing.
    #[inline(always)]
    pub(crate) fn seg<R>(&self, k: u32, f: impl FnOnce(&mut [u8; 16]) -> R) -> R {
        debug_assert!(k < self.segs);
        // SAFETY: the reservation (`SegRing::reserve_recv`): the segment is free, unpublished
        // and this token's.
        unsafe { self.ring.with_mut(self.start.wrapping_add(k), f) }
    }
}

/// A doorbell record word, shared with the device: a raw pointer, never a reference, because
/// the device's memory has no Rust lifetime (it lives as long as the queue that owns this,
/// by that queue's constructor contract).
#[derive(Clone, Copy, Debug)]
pub(crate) struct DbrecWord(NonNull<AtomicU32>);

impl DbrecWord {
    /// Word `word` of the doorbell record at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr.add(word)` is 4-byte aligned and valid for as long as the returned value or a copy
    /// of it is used, every access to the word from this side goes through it, and (under
    /// loom) it points to a loom `AtomicU32`.
    #[inline]
    pub(crate) unsafe fn new(ptr: NonNull<u32>, word: usize) -> Self {
        // Counted in atomics, not `u32`s: under loom an atomic is larger than its value.
        // SAFETY: (caller) `word` is inside the record.
        Self(unsafe { ptr.cast::<AtomicU32>().add(word) })
    }

    /// The word as an atomic, for this call's access.
    #[inline(always)]
    fn word(&self) -> &AtomicU32 {
        // SAFETY: `AtomicU32` has the size, alignment and bit validity of `u32` (and under loom
        // the memory holds loom atomics); the constructor's contract keeps the word valid.
        unsafe { self.0.as_ref() }
    }

    /// Stores `counter` as a big-endian doorbell-record value.
    #[inline(always)]
    pub(crate) fn publish(self, counter: u32, order: Ordering) {
        self.word().store(counter.to_be(), order);
    }

    /// The counter the word holds (`Acquire`).
    #[inline]
    pub(crate) fn read(self) -> u32 {
        u32::from_be(self.word().load(Ordering::Acquire))
    }
}

/// A CQE as laid out in memory under loom: the body and the owner byte as separate loom
/// objects, so that loom checks the poller reads the body only after the owner byte says the
/// CQE is software's. (In normal builds `op_own` is byte 63 of the body.)
#[cfg(zverbs_loom)]
#[derive(Debug)]
pub struct LoomCqe {
    /// The 64 CQE bytes (byte 63 is ignored: see `op_own`).
    pub body: UnsafeCell<[u8; 64]>,
    /// The `op_own` byte.
    pub op_own: zverbs_core::sync::atomic::AtomicU8,
}

#[cfg(zverbs_loom)]
impl LoomCqe {
    /// An invalid CQE (opcode 15, owner 1), as libmlx5 initialises a CQ.
    pub fn new() -> Self {
        Self {
            body: UnsafeCell::new([0; 64]),
            op_own: zverbs_core::sync::atomic::AtomicU8::new(0xf1),
        }
    }
}

#[cfg(zverbs_loom)]
impl Default for LoomCqe {
    fn default() -> Self {
        Self::new()
    }
}

/// A ring of CQEs.
///
/// `Copy` for the same reason as [`SegRing`]: the poller keeps it in a local while it writes
/// completions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct CqeRing {
    /// The first 64-byte CQE: the ring's start, or its second half with 128-byte CQEs.
    base: NonNull<u8>,
    /// The CQE size in bytes (64 or 128).
    #[cfg(not(zverbs_loom))]
    stride: usize,
}

impl CqeRing {
    /// A ring at `base` of CQEs of `cqe_size` (64 or 128) bytes.
    ///
    /// # Safety
    ///
    /// `base` points to the CQE ring (under loom: to an array of [`LoomCqe`]) for the ring's
    /// lifetime; only the device and the ring's owner access it.
    #[inline]
    pub(crate) unsafe fn new(base: NonNull<u8>, cqe_size: u32) -> Self {
        debug_assert!(cqe_size == 64 || cqe_size == 128);
        #[cfg(zverbs_loom)]
        let _ = cqe_size;
        Self {
            // SAFETY: (caller) a ring of `cqe_size`-byte CQEs; its 64-byte CQEs start
            // `cqe_size - 64` bytes in.
            #[cfg(not(zverbs_loom))]
            base: unsafe { base.add(cqe_size as usize - 64) },
            #[cfg(zverbs_loom)]
            base,
            #[cfg(not(zverbs_loom))]
            stride: cqe_size as usize,
        }
    }

    /// The `op_own` byte of CQE `slot` (already masked), as an atomic: the device writes it
    /// at any time, so it is accessed through an atomic (a single byte load or store, the same
    /// instruction as a volatile access), never through a reference to the CQE.
    #[cfg(not(zverbs_loom))]
    #[inline(always)]
    fn owner_byte(&self, slot: u32) -> &zverbs_core::sync::atomic::AtomicU8 {
        let off = slot as usize * self.stride + 63;
        // SAFETY: `slot` is in the ring (masked by the caller), so its last byte is too
        // (constructor contract); `AtomicU8` has the size and alignment of `u8`.
        unsafe {
            &*self
                .base
                .as_ptr()
                .add(off)
                .cast::<zverbs_core::sync::atomic::AtomicU8>()
        }
    }

    /// CQE `slot` (already masked) as its loom objects.
    #[cfg(zverbs_loom)]
    #[inline(always)]
    fn loom_cqe(&self, slot: u32) -> &LoomCqe {
        // SAFETY: under loom the ring is an array of `LoomCqe` (constructor contract), and
        // `slot` is in it (masked by the caller).
        unsafe { &*self.base.as_ptr().cast::<LoomCqe>().add(slot as usize) }
    }

    /// Loads the `op_own` byte of CQE `slot` (already masked).
    #[inline(always)]
    pub(crate) fn op_own(&self, slot: u32) -> u8 {
        #[cfg(not(zverbs_loom))]
        {
            self.owner_byte(slot).load(Ordering::Relaxed)
        }
        #[cfg(zverbs_loom)]
        {
            self.loom_cqe(slot).op_own.load(Ordering::Relaxed)
        }
    }

    /// The CQE in `slot` (already masked) as a token whose reads are safe: the one place the
    /// poller argues that a CQE is software's.
    ///
    /// # Safety
    ///
    /// The CQE is software's: its owner byte was checked and followed by
    /// [`from_device`](zverbs_core::barrier::from_device); the consumer index that would let
    /// the device reuse the entry is published only after the token's last use.
    #[inline(always)]
    pub(crate) unsafe fn owned(&self, slot: u32) -> OwnedCqe {
        OwnedCqe { ring: *self, slot }
    }

    /// The entries of the compressed session open at the consumer index, as a token that
    /// hands out each of them as an [`OwnedCqe`]: the one place the poller argues that a
    /// session's entries are software's.
    ///
    /// # Safety
    ///
    /// A session is open: its title passed the owner check (followed by
    /// [`from_device`](zverbs_core::barrier::from_device)) and its count is within the ring,
    /// so the entries from the consumer index to its last are software's; the token is given
    /// only slots of those entries, and the consumer index that would let the device reuse
    /// one is published only after the token's last use.
    #[inline(always)]
    pub(crate) unsafe fn session(&self) -> SessionCqes {
        SessionCqes { ring: *self }
    }

    /// The CQE size in bytes (64 or 128; 64 under loom).
    #[inline(always)]
    pub(crate) fn stride(&self) -> usize {
        #[cfg(not(zverbs_loom))]
        {
            self.stride
        }
        #[cfg(zverbs_loom)]
        {
            64
        }
    }
}

/// The entries of an open compressed session, from [`CqeRing::session`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct SessionCqes {
    ring: CqeRing,
}

impl SessionCqes {
    /// The entry in `slot` (already masked), an entry of the session not yet handed back.
    #[inline(always)]
    pub(crate) fn entry(&self, slot: u32) -> OwnedCqe {
        OwnedCqe {
            ring: self.ring,
            slot,
        }
    }
}

/// The WQE counter of a WQE the device reported complete: read from a CQE software owns
/// ([`OwnedCqe::qpn_and_counter`]), or made where a compressed session's completions are
/// counted ([`Reported::in_session`]). Retiring what it names needs no further argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reported(u16);

impl Reported {
    /// The counter of a completion of a compressed session.
    ///
    /// # Safety
    ///
    /// The device reported WQE `counter` complete: the counter is a mini-CQE's, or the
    /// session title's plus the completion's place in the session, of a session software owns.
    #[inline(always)]
    pub(crate) unsafe fn in_session(counter: u16) -> Self {
        Self(counter)
    }

    /// The 16-bit WQE counter.
    #[inline(always)]
    pub(crate) fn counter(self) -> u16 {
        self.0
    }
}

/// A CQE software owns, from [`CqeRing::owned`] (or [`SessionCqes::entry`]): the device does
/// not write it until the consumer index moves past it, after the token's last use, so its
/// reads (and the poller's writes of its owner byte) need no further argument.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnedCqe {
    ring: CqeRing,
    slot: u32,
}

impl OwnedCqe {
    /// Its slot in the ring.
    #[inline(always)]
    pub(crate) fn slot(&self) -> u32 {
        self.slot
    }

    /// The ring's CQE size in bytes ([`CqeRing::stride`]).
    #[inline(always)]
    pub(crate) fn stride(&self) -> usize {
        self.ring.stride()
    }

    /// The CQE's `sop_drop_qpn` and the WQE counter it reports complete.
    #[inline(always)]
    pub(crate) fn qpn_and_counter(&self) -> (u32, Reported) {
        self.with(|b| {
            let c = crate::prm::cqe::Cqe64::new_unchecked(b);
            (c.sop_drop_qpn(), Reported(c.wqe_counter()))
        })
    }

    /// Calls `f` with the 64-byte CQE.
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(&[u8; 64]) -> R) -> R {
        #[cfg(not(zverbs_loom))]
        {
            let off = self.slot as usize * self.ring.stride;
            // SAFETY: the entry is in the ring (`slot` masked), and the token's: the device
            // does not write it until the consumer index moves past it, so a shared reference
            // is not aliased by writes.
            f(unsafe { &*self.ring.base.as_ptr().add(off).cast::<[u8; 64]>() })
        }
        #[cfg(zverbs_loom)]
        {
            // SAFETY: the token's: the device is not writing the body now.
            self.ring
                .loom_cqe(self.slot)
                .body
                .with(|p| f(unsafe { &*p }))
        }
    }

    /// Stores `op_own` into the entry's owner byte: an entry of a compressed session handed
    /// back looking invalid, or marked where a poll stopped inside one. The token's: the device
    /// does not write the entry now.
    #[inline(always)]
    pub(crate) fn set_op_own(&self, op_own: u8) {
        #[cfg(not(zverbs_loom))]
        self.ring
            .owner_byte(self.slot)
            .store(op_own, Ordering::Relaxed);
        #[cfg(zverbs_loom)]
        self.ring
            .loom_cqe(self.slot)
            .op_own
            .store(op_own, Ordering::Relaxed);
    }

    /// Calls `f` with the first 64 bytes of its entry when the ring's CQEs are 128 bytes (the
    /// bytes before its 64-byte CQE, where a scatter-to-CQE of 64 bytes puts the data);
    /// `None` for 64-byte CQEs.
    #[cfg(not(zverbs_loom))]
    #[inline(always)]
    pub(crate) fn with_entry_head<R>(&self, f: impl FnOnce(&[u8; 64]) -> R) -> Option<R> {
        if self.ring.stride != 128 {
            return None;
        }
        let off = self.slot as usize * 128;
        // SAFETY: 128-byte entries: `base` is 64 bytes into the ring, so the entry's first half
        // starts 64 bytes before its CQE, inside the ring; the token's: the device does not
        // write the entry until the consumer index moves past it.
        Some(f(unsafe {
            &*self.ring.base.as_ptr().add(off).sub(64).cast::<[u8; 64]>()
        }))
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    extern crate std;

    use super::SegRing;
    use core::ptr::NonNull;

    /// A block past a WQE's reservation is not written, whatever the caller asks.
    #[test]
    fn block_words_stay_inside_the_reservation() {
        // A ring of four blocks (16 segments), 16-byte aligned.
        let mut mem = [0u128; 16];
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `mem` is 16 segments, aligned, and outlives the ring; nothing else uses it.
        let ring = unsafe { SegRing::new(base, 16) };
        let words = [u64::MAX; 8];
        {
            // SAFETY: blocks 1 and 2 of the ring are nobody's.
            let wqe = unsafe { ring.reserve(4, 1) };
            wqe.block_words_in(0, &words, 8);
            wqe.block_words_in(1, &words, 8);
        }
        {
            // SAFETY: as above.
            let wqe = unsafe { ring.reserve(12, 2) };
            wqe.block_words_in(1, &words, 8);
            wqe.block_words_in(2, &words, 8);
        }
        let written: std::vec::Vec<bool> = mem.iter().map(|s| *s != 0).collect();
        // Block 1 (segments 4..8) and block 0 (the second block of the WQE at block 3, past
        // the ring's end) written; blocks 2 and 3 not.
        let mut want = [false; 16];
        want[4..8].fill(true);
        want[0..4].fill(true);
        assert_eq!(written, want);
    }

    /// Which of a four-block ring's 16 segments are no longer what `fill` put there after
    /// `f` wrote through a one-block WQE at block 1 (segments 4..8).
    fn changed_by(fill: u128, f: impl FnOnce(&super::Wqe)) -> std::vec::Vec<usize> {
        let mut mem = [fill; 16];
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `mem` is 16 segments, aligned, and outlives the ring; nothing else uses it.
        let ring = unsafe { SegRing::new(base, 16) };
        {
            // SAFETY: block 1 of the ring is nobody's.
            let wqe = unsafe { ring.reserve(4, 1) };
            f(&wqe);
        }
        (0..16).filter(|&i| mem[i] != fill).collect()
    }

    /// The WQE's first block is written, and nothing else.
    #[test]
    fn block_words_at_writes_only_the_wqe_s_first_block() {
        let words = [u64::MAX; 8];
        let got = changed_by(0, |w| w.block_words_at(&words, 8));
        assert_eq!(got, [4, 5, 6, 7]);
    }
}

//! Memory that another thread or a device may read and write while this code does: copies into
//! and out of it, and the loads and stores that poll it, made only of atomic accesses.
//!
//! A registered buffer is written by the NIC whenever a peer's RDMA WRITE or SEND lands, and
//! by the software device's progress thread, which is an ordinary Rust thread. A `memcpy`
//! racing with either is a data race: undefined behaviour in Rust's memory model, which
//! ThreadSanitizer and Miri report, and which entitles the compiler to assume the bytes do not
//! change under it. [`SharedMem`] is a view of such memory whose every access is atomic.
//!
//! # The rule: whole words
//!
//! Atomics alone are not enough. Rust inherits from C++ the rule that two atomic accesses
//! racing on overlapping bytes (at least one a write) must have the same size and address:
//! a 1-byte atomic load racing with an 8-byte atomic store that covers its byte is undefined
//! behaviour too (Miri reports it as a "mixed-size" race). So everything that may touch the
//! memory at the same time follows one rule, which depends only on a byte's address and the
//! bounds of the memory, never on the access:
//!
//! - an 8-byte aligned word that lies wholly inside the memory is always accessed as a whole,
//!   with one 8-byte atomic load, store or compare-exchange. A copy that covers part of such a
//!   word loads the word and keeps its bytes, or merges its bytes into the word with a
//!   compare-exchange that leaves the other bytes as they are (a concurrent writer of those
//!   other bytes makes it retry, it never undoes them);
//! - a byte whose word crosses an end of the memory (only when the ends are not multiples of
//!   8) is accessed alone, with a 1-byte atomic.
//!
//! Two parties that both go through a `SharedMem` with the same bounds therefore never mix
//! sizes. The software device (`zverbs-sim`) accesses registered memory this way, with the
//! registration's bounds; `zverbs::MrBuf` does with the buffer's bounds, which are page
//! aligned, so every access to it is a whole-word one.
//!
//! # Orderings
//!
//! Copies, [`SharedMem::load_u8`], [`SharedMem::store_u8`] and the `u64` accessors are
//! `Relaxed`: each word (or edge byte) is read or written atomically, but a copy is not one
//! atomic action, and a copy racing with a writer may see some of its bytes and not others.
//! What makes a whole message visible is a release/acquire pair:
//! [`SharedMem::store_u8_release`] (the writer's last store: the software device writes the
//! last byte of every message this way) and [`SharedMem::load_u8_acquire`] /
//! [`SharedMem::load_u64_acquire`] (the reader that polls that byte). A reader whose acquire
//! load sees the byte sees every byte the writer stored before it.
//!
//! | access | x86_64 | aarch64 |
//! |---|---|---|
//! | relaxed load / store of a word or byte | `mov` | `ldr` / `str` |
//! | acquire load | `mov` (x86 keeps loads in order) | `ldar`: later loads cannot pass it |
//! | release store of a whole word | `mov` (x86 keeps stores in order) | `stlr` |
//! | merge into a partial word (release or not) | `lock cmpxchg` loop | `cas` (LSE) or `ldxr`/`stxr` loop |
//!
//! The middle of a copy is one 8-byte move per word: the compiler may not merge atomic
//! accesses into vector moves, so a copy that stays in the L1 cache takes two to three times as
//! long as `memcpy` (about one word per cycle); beyond the L1 cache both are bound by memory
//! and the difference fades. A byte store is a compare-exchange of its word.
//!
//! Bytes of shared memory are not modelled by loom (it cannot lay its atomics over memory it
//! did not allocate), so this module uses [`crate::sync::raw`], which is `core`'s atomics
//! under loom too.

use core::fmt;
use core::marker::PhantomData;
use core::ptr::NonNull;

use crate::sync::raw::{AtomicU8, AtomicU64, Ordering};

/// Bytes in a word.
const W: usize = 8;

/// Why a [`SharedMem`] access was refused. Nothing was read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum AccessError {
    /// `offset..offset + len` is not inside the memory (or `offset + len` overflows).
    #[error("range outside the memory")]
    OutOfBounds,
    /// A `u64` access at an address that is not a multiple of 8.
    #[error("u64 access at an address that is not a multiple of 8")]
    Misaligned,
}

/// A view of `len` bytes that other threads or a device may access at the same time, read and
/// written only with atomic accesses by the rule of the [module docs](self).
///
/// Every method checks its range and returns [`AccessError`] rather than panic.
#[derive(Clone, Copy)]
pub struct SharedMem<'a> {
    ptr: NonNull<u8>,
    len: usize,
    /// Whole words are the aligned words in `lo..hi` (`lo <= hi`, both multiples of 8).
    lo: usize,
    hi: usize,
    _mem: PhantomData<&'a [AtomicU8]>,
}

// SAFETY: the memory is only ever accessed atomically, as through `&[AtomicU8]`, which is
// `Send + Sync`; the constructor's contract keeps it valid for `'a`.
unsafe impl Send for SharedMem<'_> {}
// SAFETY: as for `Send`.
unsafe impl Sync for SharedMem<'_> {}

impl fmt::Debug for SharedMem<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedMem")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

/// How one access splits over the memory: `pre` bytes below the first whole word, a `head` of
/// bytes in a partial word, `body` whole words (in bytes), a `tail` of bytes in a partial word
/// and `post` bytes at or after the end of the last whole word, in address order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    pre: usize,
    head: usize,
    body: usize,
    tail: usize,
    post: usize,
}

impl<'a> SharedMem<'a> {
    /// A view of `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// - `ptr..ptr + len` is allocated and valid for reads and writes for all of `'a`;
    /// - during `'a` no Rust reference into it is live, and every other access to it that is
    ///   not ordered with this view's (happens-before) is atomic and follows the rule of the
    ///   [module docs](self) with the same bounds: it comes through a `SharedMem` of exactly
    ///   `ptr..ptr + len`, or from a device by DMA.
    #[inline]
    pub unsafe fn new(ptr: NonNull<u8>, len: usize) -> Self {
        let start = ptr.as_ptr().addr();
        // The allocation lies inside the address space: no overflow.
        let end = start + len;
        let lo = start.next_multiple_of(W);
        let hi = (end - end % W).max(lo);
        Self {
            ptr,
            len,
            lo,
            hi,
            _mem: PhantomData,
        }
    }

    /// The first byte.
    #[inline]
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Its length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address of `offset..offset + n`, if that lies inside.
    #[inline]
    fn at(&self, offset: usize, n: usize) -> Result<usize, AccessError> {
        match offset.checked_add(n) {
            Some(end) if end <= self.len => Ok(self.ptr.as_ptr().addr() + offset),
            _ => Err(AccessError::OutOfBounds),
        }
    }

    /// How `n` bytes at address `a` split into edge bytes, partial and whole words.
    #[inline]
    fn split(&self, a: usize, n: usize) -> Split {
        let end = a + n;
        let pre = self.lo.saturating_sub(a).min(n);
        let a1 = a + pre;
        let head = if a1 < self.hi && !a1.is_multiple_of(W) {
            end.min(a1.next_multiple_of(W)) - a1
        } else {
            0
        };
        let a2 = a1 + head;
        let body = end.min(self.hi).saturating_sub(a2) / W * W;
        let a3 = a2 + body;
        let tail = if a3 < self.hi {
            end.min(self.hi) - a3
        } else {
            0
        };
        Split {
            pre,
            head,
            body,
            tail,
            post: end - a3 - tail,
        }
    }

    /// The byte at address `a`, as an atomic.
    ///
    /// # Safety
    ///
    /// `a` lies inside the memory.
    #[inline(always)]
    unsafe fn byte(&self, a: usize) -> &'a AtomicU8 {
        // SAFETY: (caller) inside the memory, which is valid for `'a` (constructor contract);
        // `AtomicU8` has the size and alignment of `u8`.
        unsafe { AtomicU8::from_ptr(self.ptr.as_ptr().with_addr(a)) }
    }

    /// The aligned word at address `w`, as an atomic.
    ///
    /// # Safety
    ///
    /// `w` is a multiple of 8 and `w..w + 8` lies inside `lo..hi`.
    #[inline(always)]
    unsafe fn word(&self, w: usize) -> &'a AtomicU64 {
        debug_assert!(w.is_multiple_of(W) && w >= self.lo && w + W <= self.hi);
        // SAFETY: (caller) aligned and inside the memory, which is valid for `'a`.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().with_addr(w).cast::<u64>()) }
    }

    /// Loads the bytes at address `a` into `dst`.
    ///
    /// # Safety
    ///
    /// `a..a + dst.len()` lies inside the memory.
    unsafe fn load_into(&self, a: usize, dst: &mut [u8]) {
        let s = self.split(a, dst.len());
        let mut a = a;
        let mut rest = dst;
        // Below the first whole word: byte by byte.
        for d in take(&mut rest, s.pre) {
            // SAFETY: (caller) inside the memory.
            *d = unsafe { self.byte(a) }.load(Ordering::Relaxed);
            a += 1;
        }
        if s.head > 0 {
            let w = a - a % W;
            // SAFETY: a partial word that lies inside `lo..hi` (`split`).
            let v = unsafe { self.word(w) }
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            copy(take(&mut rest, s.head), v.get(a - w..).unwrap_or_default());
            a += s.head;
        }
        for d in take(&mut rest, s.body).chunks_exact_mut(W) {
            // SAFETY: a whole word inside `lo..hi` (`split`).
            let v = unsafe { self.word(a) }.load(Ordering::Relaxed);
            copy(d, &v.to_ne_bytes());
            a += W;
        }
        if s.tail > 0 {
            // SAFETY: `a` is the start of a word inside `lo..hi` (`split`).
            let v = unsafe { self.word(a) }
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            copy(take(&mut rest, s.tail), &v);
            a += s.tail;
        }
        for d in rest {
            // SAFETY: (caller) inside the memory.
            *d = unsafe { self.byte(a) }.load(Ordering::Relaxed);
            a += 1;
        }
    }

    /// Stores `src` at address `a`; `byte_at(i)` gives the byte for offset `i` of the copy
    /// (so that `fill` shares the walk).
    ///
    /// # Safety
    ///
    /// `a..a + n` lies inside the memory.
    #[inline(always)]
    unsafe fn store_from(&self, a: usize, n: usize, src: Src<'_>) {
        let s = self.split(a, n);
        let mut a = a;
        let mut i = 0;
        for _ in 0..s.pre {
            // SAFETY: (caller) inside the memory.
            unsafe { self.byte(a) }.store(src.at(i), Ordering::Relaxed);
            a += 1;
            i += 1;
        }
        if s.head > 0 {
            let w = a - a % W;
            let p = src.part(i, s.head);
            // SAFETY: a partial word inside `lo..hi` (`split`).
            merge(
                unsafe { self.word(w) },
                a - w,
                &p,
                s.head,
                Ordering::Relaxed,
            );
            a += s.head;
            i += s.head;
        }
        match src {
            Src::Bytes(b) => {
                let body = b.get(i..i + s.body).unwrap_or_default();
                for c in body.chunks_exact(W) {
                    let mut v = [0; W];
                    copy(&mut v, c);
                    // SAFETY: a whole word inside `lo..hi` (`split`).
                    unsafe { self.word(a) }.store(u64::from_ne_bytes(v), Ordering::Relaxed);
                    a += W;
                }
            }
            Src::Fill(b) => {
                let v = u64::from_ne_bytes([b; W]);
                for _ in 0..s.body / W {
                    // SAFETY: a whole word inside `lo..hi` (`split`).
                    unsafe { self.word(a) }.store(v, Ordering::Relaxed);
                    a += W;
                }
            }
        }
        i += s.body;
        if s.tail > 0 {
            let p = src.part(i, s.tail);
            // SAFETY: `a` starts a word inside `lo..hi` (`split`).
            merge(unsafe { self.word(a) }, 0, &p, s.tail, Ordering::Relaxed);
            a += s.tail;
            i += s.tail;
        }
        for _ in 0..s.post {
            // SAFETY: (caller) inside the memory.
            unsafe { self.byte(a) }.store(src.at(i), Ordering::Relaxed);
            a += 1;
            i += 1;
        }
    }

    /// Copies `dst.len()` bytes at `offset` into `dst` (each word or edge byte loaded
    /// atomically, `Relaxed`).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`].
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        let a = self.at(offset, dst.len())?;
        // SAFETY: checked to lie inside.
        unsafe { self.load_into(a, dst) };
        Ok(())
    }

    /// Copies `src` to `offset` (whole words stored, partial words merged, `Relaxed`).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`].
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), AccessError> {
        let a = self.at(offset, src.len())?;
        // SAFETY: checked to lie inside.
        unsafe { self.store_from(a, src.len(), Src::Bytes(src)) };
        Ok(())
    }

    /// Sets `len` bytes at `offset` to `byte` (`Relaxed`).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`].
    #[inline]
    pub fn fill(&self, offset: usize, len: usize, byte: u8) -> Result<(), AccessError> {
        let a = self.at(offset, len)?;
        // SAFETY: checked to lie inside.
        unsafe { self.store_from(a, len, Src::Fill(byte)) };
        Ok(())
    }

    /// Copies `len` bytes from `src` at `src_offset` to this memory at `offset`, as `memmove`
    /// would if the two overlap, through a buffer on the stack (256 bytes at a time).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`] for either range.
    pub fn copy_from(
        &self,
        offset: usize,
        src: &SharedMem<'_>,
        src_offset: usize,
        len: usize,
    ) -> Result<(), AccessError> {
        const CHUNK: usize = 256;
        let d = self.at(offset, len)?;
        let s = src.at(src_offset, len)?;
        let mut buf = [0u8; CHUNK];
        // Overlapping with the destination after the source: from the end, so no byte is
        // overwritten before it is read.
        let backwards = d > s && d - s < len;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(CHUNK);
            let at = if backwards { len - done - n } else { done };
            let b = &mut buf[..n];
            // SAFETY: `at + n <= len`, and both ranges were checked.
            unsafe {
                src.load_into(s + at, b);
                self.store_from(d + at, n, Src::Bytes(b));
            }
            done += n;
        }
        Ok(())
    }

    /// Loads the byte at `offset` (`Relaxed`: a fresh read each call, for spinning).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`].
    #[inline]
    pub fn load_u8(&self, offset: usize) -> Result<u8, AccessError> {
        self.load_u8_with(offset, Ordering::Relaxed)
    }

    /// Loads the byte at `offset` with `Acquire`: if it reads a value stored with
    /// [`SharedMem::store_u8_release`] (or any release store of its word), everything the
    /// storing thread wrote before that store is visible afterwards. On aarch64 this is an
    /// `ldar`, which keeps later loads after it; on x86_64 a plain load.
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`].
    #[inline]
    pub fn load_u8_acquire(&self, offset: usize) -> Result<u8, AccessError> {
        self.load_u8_with(offset, Ordering::Acquire)
    }

    #[inline(always)]
    fn load_u8_with(&self, offset: usize, order: Ordering) -> Result<u8, AccessError> {
        let a = self.at(offset, 1)?;
        let w = a - a % W;
        if w >= self.lo && w < self.hi {
            // SAFETY: a word inside `lo..hi` (`hi` is a multiple of 8 above `w`).
            let v = unsafe { self.word(w) }.load(order);
            Ok(v.to_ne_bytes()[a % W])
        } else {
            // SAFETY: checked to lie inside.
            Ok(unsafe { self.byte(a) }.load(order))
        }
    }

    /// Stores `v` at `offset` (`Relaxed`).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`].
    #[inline]
    pub fn store_u8(&self, offset: usize, v: u8) -> Result<(), AccessError> {
        self.store_u8_with(offset, v, Ordering::Relaxed)
    }

    /// Stores `v` at `offset` with `Release`: a thread whose acquire load reads it sees
    /// everything this thread wrote before. On aarch64 an `stlr` or a release
    /// compare-exchange; on x86_64 the same instructions as [`SharedMem::store_u8`].
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`].
    #[inline]
    pub fn store_u8_release(&self, offset: usize, v: u8) -> Result<(), AccessError> {
        self.store_u8_with(offset, v, Ordering::Release)
    }

    #[inline(always)]
    fn store_u8_with(&self, offset: usize, v: u8, order: Ordering) -> Result<(), AccessError> {
        let a = self.at(offset, 1)?;
        let w = a - a % W;
        if w >= self.lo && w < self.hi {
            // SAFETY: a word inside `lo..hi`.
            merge(unsafe { self.word(w) }, a - w, &[v; W], 1, order);
        } else {
            // SAFETY: checked to lie inside.
            unsafe { self.byte(a) }.store(v, order);
        }
        Ok(())
    }

    /// The aligned word at `offset`.
    #[inline(always)]
    fn word_at(&self, offset: usize) -> Result<&'a AtomicU64, AccessError> {
        let a = self.at(offset, W)?;
        if !a.is_multiple_of(W) {
            return Err(AccessError::Misaligned);
        }
        // SAFETY: aligned and inside the memory, hence inside `lo..hi`.
        Ok(unsafe { self.word(a) })
    }

    /// Loads the native-endian `u64` at `offset`, whose address is a multiple of 8
    /// (`Relaxed`).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`], [`AccessError::Misaligned`].
    #[inline]
    pub fn load_u64(&self, offset: usize) -> Result<u64, AccessError> {
        Ok(self.word_at(offset)?.load(Ordering::Relaxed))
    }

    /// As [`SharedMem::load_u64`], with `Acquire` (see [`SharedMem::load_u8_acquire`]).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`], [`AccessError::Misaligned`].
    #[inline]
    pub fn load_u64_acquire(&self, offset: usize) -> Result<u64, AccessError> {
        Ok(self.word_at(offset)?.load(Ordering::Acquire))
    }

    /// Stores the native-endian `u64` `v` at `offset`, whose address is a multiple of 8
    /// (`Relaxed`).
    ///
    /// # Errors
    ///
    /// [`AccessError::OutOfBounds`], [`AccessError::Misaligned`].
    #[inline]
    pub fn store_u64(&self, offset: usize, v: u64) -> Result<(), AccessError> {
        self.word_at(offset)?.store(v, Ordering::Relaxed);
        Ok(())
    }
}

/// Where the bytes of a store come from.
#[derive(Clone, Copy)]
enum Src<'b> {
    Bytes(&'b [u8]),
    Fill(u8),
}

impl Src<'_> {
    /// Byte `i` of the copy (0 past the end, which callers never ask for).
    #[inline(always)]
    fn at(self, i: usize) -> u8 {
        match self {
            Src::Bytes(b) => b.get(i).copied().unwrap_or_default(),
            Src::Fill(v) => v,
        }
    }

    /// Bytes `i..i + n` (`n <= 8`) of the copy, in a word-sized array.
    #[inline(always)]
    fn part(self, i: usize, n: usize) -> [u8; W] {
        let mut p = [0; W];
        match self {
            Src::Bytes(b) => copy(&mut p[..n.min(W)], b.get(i..).unwrap_or_default()),
            Src::Fill(v) => p = [v; W],
        }
        p
    }
}

/// The first `n` elements of `*s`, which keeps the rest (all of it if shorter).
#[inline(always)]
fn take<'s>(s: &mut &'s mut [u8], n: usize) -> &'s mut [u8] {
    let all = core::mem::take(s);
    let (a, b) = all.split_at_mut(n.min(all.len()));
    *s = b;
    a
}

/// Copies the first `dst.len()` bytes of `src` (no more than it has) into `dst`.
#[inline(always)]
fn copy(dst: &mut [u8], src: &[u8]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = *s;
    }
}

/// Writes the first `n` of `bytes` into `word` from byte `k` on, leaving its other bytes as
/// they are: a compare-exchange, retried while another writer changes the word meanwhile.
#[inline(always)]
fn merge(word: &AtomicU64, k: usize, bytes: &[u8; W], n: usize, order: Ordering) {
    let mut cur = word.load(Ordering::Relaxed);
    loop {
        let mut v = cur.to_ne_bytes();
        for (d, s) in v.iter_mut().skip(k).zip(bytes.iter().take(n)) {
            *d = *s;
        }
        match word.compare_exchange_weak(cur, u64::from_ne_bytes(v), order, Ordering::Relaxed) {
            Ok(_) => return,
            Err(now) => cur = now,
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::vec::Vec;

    use super::*;

    /// 8-byte aligned backing memory, accessed by the tests only through views and `snapshot`.
    struct Backing {
        words: Vec<u64>,
    }

    impl Backing {
        fn new(bytes: usize) -> Self {
            Self {
                words: std::vec![0; bytes.div_ceil(W)],
            }
        }

        fn base(&mut self) -> NonNull<u8> {
            NonNull::from(self.words.as_mut_slice()).cast()
        }

        /// A view of `len` bytes from byte `start`.
        fn view(&mut self, start: usize, len: usize) -> SharedMem<'_> {
            assert!(start + len <= self.words.len() * W);
            // SAFETY: inside the allocation, which outlives the view; no reference into it is
            // used while the view lives (the borrow of `self` sees to that).
            unsafe { SharedMem::new(self.base().add(start), len) }
        }

        fn bytes(&self) -> Vec<u8> {
            self.words.iter().flat_map(|w| w.to_ne_bytes()).collect()
        }

        fn set(&mut self, b: &[u8]) {
            for (w, c) in self.words.iter_mut().zip(b.chunks(W)) {
                let mut v = [0; W];
                v[..c.len()].copy_from_slice(c);
                *w = u64::from_ne_bytes(v);
            }
        }
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
            .collect()
    }

    /// Memory of `len` bytes at each misalignment, and every access into it of a few lengths.
    fn cases(mut f: impl FnMut(usize, usize, usize, usize)) {
        let (misaligns, lens): (&[usize], &[usize]) = if cfg!(miri) {
            (&[0, 3], &[0, 3, 13])
        } else {
            (&[0, 1, 2, 3, 4, 5, 6, 7], &[0, 1, 5, 8, 9, 17, 24, 33])
        };
        for &misalign in misaligns {
            for &len in lens {
                for offset in 0..=len {
                    for n in 0..=(len - offset) {
                        f(misalign, len, offset, n);
                    }
                }
            }
        }
    }

    #[test]
    fn split_covers_the_access_once_in_order() {
        cases(|m, len, offset, n| {
            let mut b = Backing::new(64);
            let v = b.view(m, len);
            let a = v.as_ptr().addr() + offset;
            let s = v.split(a, n);
            assert_eq!(s.pre + s.head + s.body + s.tail + s.post, n, "{s:?}");
            assert!(
                s.head < W && s.tail < W && s.body.is_multiple_of(W),
                "{s:?}"
            );
            // Byte-wise parts lie outside the memory's whole words: below the first, at or
            // after the end of the last.
            if s.pre > 0 {
                assert!(a + s.pre <= v.lo, "{s:?}");
            }
            if s.post > 0 {
                assert!(a + n - s.post >= v.hi, "{s:?}");
            }
            // Whole-word parts lie inside the memory's whole words.
            let first = a + s.pre;
            if s.head + s.body + s.tail > 0 {
                assert!(first - first % W >= v.lo, "{s:?}");
                let end = first + s.head + s.body + s.tail;
                assert!(end.next_multiple_of(W) <= v.hi, "{s:?}");
            }
        });
    }

    #[test]
    fn copies_match_plain_memory_and_stay_inside() {
        cases(|m, len, offset, n| {
            let total = 48;
            let init = pattern(total, 1);
            let src = pattern(n, 100);
            let mut b = Backing::new(total);
            b.set(&init);
            b.view(m + 8, len).write(offset, &src).unwrap();
            let mut want = init.clone();
            want[m + 8 + offset..][..n].copy_from_slice(&src);
            assert_eq!(b.bytes(), want, "write m={m} len={len} at {offset}+{n}");

            let mut got = std::vec![0; n];
            b.view(m + 8, len).read(offset, &mut got).unwrap();
            assert_eq!(got, src, "read m={m} len={len} at {offset}+{n}");

            b.view(m + 8, len).fill(offset, n, 0xee).unwrap();
            want[m + 8 + offset..][..n].fill(0xee);
            assert_eq!(b.bytes(), want, "fill m={m} len={len} at {offset}+{n}");
        });
    }

    #[test]
    fn single_bytes_and_words() {
        for m in 0..W {
            // A backing of its own for each view: the rule that decides a byte's access size
            // depends on the memory's bounds, so views with other bounds over the same bytes
            // would access them in other sizes (which Miri's weak-memory model refuses even
            // when nothing runs concurrently).
            let mut b = Backing::new(32);
            let v = b.view(m, 17);
            for i in 0..17 {
                v.store_u8(i, i as u8 + 1).unwrap();
            }
            v.store_u8_release(16, 0xaa).unwrap();
            for i in 0..16 {
                assert_eq!(v.load_u8(i), Ok(i as u8 + 1));
                assert_eq!(v.load_u8_acquire(i), Ok(i as u8 + 1));
            }
            assert_eq!(v.load_u8_acquire(16), Ok(0xaa));
        }
        let mut b = Backing::new(32);
        let v = b.view(8, 16);
        v.store_u64(8, 0x0102_0304_0506_0708).unwrap();
        assert_eq!(v.load_u64(8), Ok(0x0102_0304_0506_0708));
        assert_eq!(v.load_u64_acquire(8), Ok(0x0102_0304_0506_0708));
        let mut got = [0; 8];
        v.read(8, &mut got).unwrap();
        assert_eq!(got, 0x0102_0304_0506_0708u64.to_ne_bytes());
    }

    #[test]
    fn copy_from_is_memmove() {
        let all = [(0, 3), (3, 0), (5, 5), (0, 700), (16, 17), (17, 16)];
        let (sizes, pairs): (&[usize], &[(usize, usize)]) = if cfg!(miri) {
            (&[9, 300], &all[..3])
        } else {
            (&[1, 7, 9, 255, 256, 257, 600], &all)
        };
        for &n in sizes {
            for &(s, d) in pairs {
                let init = pattern(1400, 7);
                let mut b = Backing::new(1400);
                b.set(&init);
                let v = b.view(1, 1390);
                v.copy_from(d, &v, s, n).unwrap();
                let mut want = init.clone();
                want.copy_within(1 + s..1 + s + n, 1 + d);
                assert_eq!(b.bytes(), want, "{n} bytes from {s} to {d}");
            }
        }
    }

    #[test]
    fn bad_ranges_are_refused_not_wrapped() {
        let mut b = Backing::new(32);
        let v = b.view(0, 32);
        let oob = Err(AccessError::OutOfBounds);
        let oob_u8: Result<u8, _> = Err(AccessError::OutOfBounds);
        let oob_u64: Result<u64, _> = Err(AccessError::OutOfBounds);
        assert_eq!(v.read(usize::MAX, &mut [0; 2]), oob);
        assert_eq!(v.read(31, &mut [0; 2]), oob);
        assert_eq!(v.write(usize::MAX - 1, &[0; 4]), oob);
        assert_eq!(v.fill(1, usize::MAX, 0), oob);
        assert_eq!(v.fill(33, 0, 0), oob);
        assert_eq!(v.load_u8(32), oob_u8);
        assert_eq!(v.store_u8(usize::MAX, 1), oob);
        assert_eq!(v.load_u64(32), oob_u64);
        assert_eq!(v.load_u64(usize::MAX - 3), oob_u64);
        assert_eq!(v.store_u64(4, 1), Err(AccessError::Misaligned));
        assert_eq!(v.load_u64_acquire(12), Err(AccessError::Misaligned));
        assert_eq!(v.copy_from(0, &v, 30, 4), oob);
        assert_eq!(v.copy_from(usize::MAX, &v, 0, 1), oob);
        // The empty range at the end is inside.
        assert_eq!(v.write(32, &[]), Ok(()));
        // Nothing was written by the refused calls.
        assert!(b.bytes().iter().all(|&x| x == 0));
        // A view whose ends are not aligned has no whole word at their edges.
        let mut b = Backing::new(32);
        assert_eq!(b.view(1, 16).load_u64(7), Ok(0));
        assert_eq!(b.view(1, 16).load_u64(15), oob_u64);
    }

    /// Threads writing, filling, reading and polling overlapping, differently aligned ranges
    /// of one memory whose ends are not word-aligned, while a third plays the device: copies
    /// into it from another memory, last byte with `Release`. Miri checks that no access pair
    /// is a data race, mixed-size ones included.
    #[test]
    fn concurrent_accesses_are_race_free() {
        let rounds = if cfg!(miri) { 3 } else { 2000 };
        let mut b = Backing::new(160);
        let base = b.base();
        // SAFETY: inside the allocation, which outlives the scope; no reference into it is used
        // until the scope ends.
        let (mem, other) = unsafe {
            (
                SharedMem::new(base.add(3), 90),
                SharedMem::new(base.add(96), 64),
            )
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                for r in 0..rounds {
                    mem.write(1, &pattern(21, r as u8)).unwrap();
                    mem.fill(30, 13, r as u8).unwrap();
                    mem.store_u8(60, r as u8).unwrap();
                }
            });
            s.spawn(|| {
                let mut got = [0; 40];
                for _ in 0..rounds {
                    mem.read(0, &mut got).unwrap();
                    mem.read(7, &mut got[..30]).unwrap();
                    mem.read(30, &mut got[..15]).unwrap();
                    let _ = mem.load_u8_acquire(60).unwrap();
                    let _ = mem.load_u64(5).unwrap();
                }
            });
            s.spawn(|| {
                for _ in 0..rounds {
                    mem.copy_from(4, &other, 1, 50).unwrap();
                    let last = other.load_u8(51).unwrap();
                    mem.store_u8_release(54, last).unwrap();
                }
            });
        });
    }

    #[test]
    fn release_and_acquire_publish_a_message() {
        let rounds = if cfg!(miri) { 2 } else { 200 };
        let mut b = Backing::new(80);
        // SAFETY: as in `concurrent_accesses_are_race_free`.
        let mem = unsafe { SharedMem::new(b.base().add(1), 75) };
        for r in 1..=rounds {
            let msg = pattern(74, r as u8);
            std::thread::scope(|s| {
                let mut writer = Some(s.spawn(|| {
                    mem.write(0, &msg[..73]).unwrap();
                    mem.store_u8_release(73, r as u8).unwrap();
                }));
                while mem.load_u8_acquire(73).unwrap() != r as u8 {
                    // Once the writer is joined its store happened before this load: a flag
                    // still unseen then is a store or a load that does not work (and the test
                    // fails rather than spin for ever).
                    if writer.as_ref().is_some_and(|w| w.is_finished()) {
                        writer.take().unwrap().join().unwrap();
                        assert_eq!(mem.load_u8_acquire(73), Ok(r as u8), "round {r}");
                    }
                    std::hint::spin_loop();
                }
                let mut got = [0; 73];
                mem.read(0, &mut got).unwrap();
                assert_eq!(got[..], msg[..73]);
            });
        }
    }

    #[test]
    fn a_view_gives_its_address_and_length() {
        let mut b = Backing::new(16);
        let base = b.base().as_ptr();
        let v = b.view(3, 9);
        assert_eq!(
            (v.as_ptr(), v.len(), v.is_empty()),
            (base.wrapping_add(3), 9, false)
        );
        let v = b.view(16, 0);
        assert_eq!(
            (v.as_ptr(), v.len(), v.is_empty()),
            (base.wrapping_add(16), 0, true)
        );
    }

    #[test]
    fn errors_and_views_describe_themselves() {
        use std::format;
        assert_eq!(
            format!("{}", AccessError::OutOfBounds),
            "range outside the memory"
        );
        assert_eq!(
            format!("{}", AccessError::Misaligned),
            "u64 access at an address that is not a multiple of 8"
        );
        let mut b = Backing::new(16);
        let shown = format!("{:?}", b.view(0, 12));
        assert!(
            shown.starts_with("SharedMem { ptr: ") && shown.ends_with(", len: 12 }"),
            "{shown}"
        );
    }
}

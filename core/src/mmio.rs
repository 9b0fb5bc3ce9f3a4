//! A write-only pointer to device registers (MMIO), such as the mlx5 UAR doorbell and
//! BlueFlame buffers.
//!
//! No `&` or `&mut` reference is ever formed to MMIO memory: the compiler may assume it can
//! read through a reference, and a spurious read of a doorbell page is at best wasted PCIe
//! traffic. Every access is a single volatile 64-bit store through the `volatile` crate's
//! [`VolatilePtr`], which the compiler neither merges, splits, elides nor reorders with other
//! volatile accesses; the CPU-level ordering towards the device is the caller's business
//! (see [`crate::barrier`]).

use core::ptr::NonNull;
use volatile::VolatilePtr;
use volatile::access::WriteOnly;

/// A window of `len` 64-bit device registers starting at `base`, which can only be written.
///
/// `Send` but not `Sync`: it moves to another thread with the queue that owns it, and is never
/// shared, so two threads cannot store into one register (a BlueFlame buffer) at once.
#[derive(Debug)]
pub struct MmioRegion {
    base: NonNull<u64>,
    words: usize,
}

// SAFETY: an `MmioRegion` is an address plus a length; moving it to another thread moves the
// right to write the registers, which `&mut self`-free `write_u64` callers must coordinate
// exactly as they would on one thread (the owner of a queue pair is one thread at a time).
unsafe impl Send for MmioRegion {}

impl MmioRegion {
    /// A region of `len_bytes` bytes of device registers at `base`.
    ///
    /// # Safety
    ///
    /// - `base` is 8-byte aligned and `base..base + len_bytes` is mapped and writable (with
    ///   8-byte stores) for as long as the region or any value derived from it exists;
    /// - the memory is not accessed through Rust references while the region exists.
    ///
    /// `len_bytes` must be a multiple of 8; a remainder is ignored.
    #[inline]
    pub unsafe fn new(base: NonNull<u8>, len_bytes: usize) -> Self {
        debug_assert!((base.as_ptr() as usize).is_multiple_of(8));
        Self {
            base: base.cast(),
            words: len_bytes / 8,
        }
    }

    /// Length of the region in bytes.
    #[inline]
    pub fn len_bytes(&self) -> usize {
        self.words * 8
    }

    /// The address of the first register.
    #[inline]
    pub fn base(&self) -> NonNull<u8> {
        self.base.cast()
    }

    /// Stores `value` (as is: callers pass device byte order) into 64-bit register `word`.
    ///
    /// # Safety
    ///
    /// `word < len_bytes() / 8`.
    #[inline(always)]
    pub unsafe fn write_u64(&self, word: usize, value: u64) {
        debug_assert!(word < self.words);
        // SAFETY: `word` is in bounds (caller), and the region is mapped and writable with
        // 8-byte stores for the region's lifetime (constructor contract).
        let ptr = unsafe { VolatilePtr::new_restricted(WriteOnly, self.base.add(word)) };
        ptr.write(value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_land_in_order_at_their_word() {
        let mut mem = [0u64; 8];
        let base = NonNull::new(mem.as_mut_ptr().cast::<u8>()).unwrap();
        {
            // SAFETY: `mem` outlives `region` and is not accessed while `region` is used.
            let region = unsafe { MmioRegion::new(base, 64) };
            assert_eq!(region.len_bytes(), 64);
            for w in 0..8 {
                // SAFETY: w < 8 words.
                unsafe { region.write_u64(w, 0x1111 * (w as u64 + 1)) };
            }
        }
        assert_eq!(mem[0], 0x1111);
        assert_eq!(mem[7], 0x8888);
    }
}

//! Memory the device owns (rings, doorbell records, BlueFlame registers), and raw access to
//! memory shared with the driver.
//!
//! Every buffer the device allocates is surrounded by guard bytes, so tests can check that
//! neither the driver nor the device wrote past any of them ([`DevBuf::guards_intact`]). The
//! engine itself never keeps a buffer, only a [`Region`] (address and length): the same code
//! runs over memory that someone else allocated (libmlx5, behind an emulated ConnectX).

use core::ptr::NonNull;
use std::alloc::{Layout, alloc_zeroed, dealloc};

use zverbs_core::sync::atomic::{AtomicU8, AtomicU32, Ordering};

/// Guard bytes before and after every device buffer.
pub(crate) const GUARD: usize = 64;
/// The guard pattern.
const GUARD_BYTE: u8 = 0xa5;

/// A span of memory the device reads or writes: an address and a length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Region {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) len: usize,
}

/// A zeroed, 64-byte aligned device allocation with guard bytes on both sides.
#[derive(Debug)]
pub(crate) struct DevBuf {
    base: NonNull<u8>,
    layout: Layout,
    len: usize,
}

impl DevBuf {
    /// `len` zeroed bytes (at least 1), 64-byte aligned, between guards; `None` if the
    /// allocation fails.
    pub(crate) fn new(len: usize) -> Option<Self> {
        let len = len.max(1);
        let layout = Layout::from_size_align(len.checked_add(2 * GUARD)?, 64).ok()?;
        // SAFETY: the layout has a non-zero size.
        let base = NonNull::new(unsafe { alloc_zeroed(layout) })?;
        // SAFETY: both guards lie inside the allocation of `len + 2 * GUARD` bytes.
        unsafe {
            base.as_ptr().write_bytes(GUARD_BYTE, GUARD);
            base.as_ptr()
                .add(GUARD + len)
                .write_bytes(GUARD_BYTE, GUARD);
        }
        Some(Self { base, layout, len })
    }

    /// The usable bytes.
    pub(crate) fn region(&self) -> Region {
        Region {
            // SAFETY: `GUARD` bytes into a live allocation of more than `GUARD` bytes.
            ptr: unsafe { self.base.add(GUARD) },
            len: self.len,
        }
    }

    /// The bytes the allocation takes, guards included.
    pub(crate) fn footprint(&self) -> usize {
        self.layout.size()
    }

    /// Whether both guards still hold the pattern.
    pub(crate) fn guards_intact(&self) -> bool {
        let check = |off: usize| {
            (0..GUARD).all(|i| {
                // SAFETY: `off + i` lies in one of the guards, inside the allocation; the
                // bytes are read with atomic loads because a driver may be running.
                unsafe { load_u8(self.base.add(off + i)) == GUARD_BYTE }
            })
        };
        check(0) && check(GUARD + self.len)
    }
}

impl Drop for DevBuf {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.base.as_ptr(), self.layout) };
    }
}

/// Loads a byte the driver may be writing concurrently.
///
/// # Safety
///
/// `p` is valid for reads.
#[inline]
pub(crate) unsafe fn load_u8(p: NonNull<u8>) -> u8 {
    // SAFETY: (caller) valid; `AtomicU8` has the layout of `u8`.
    unsafe { AtomicU8::from_ptr(p.as_ptr()) }.load(Ordering::Relaxed)
}

/// Loads a big-endian doorbell-record word with `Acquire`, pairing with the driver's
/// `to_device` barrier and store: what the record publishes is visible after this load.
///
/// # Safety
///
/// `p` is 4-byte aligned and valid for reads.
#[inline]
pub(crate) unsafe fn load_be32_acquire(p: NonNull<u32>) -> u32 {
    // SAFETY: (caller) aligned and valid; `AtomicU32` has the layout of `u32`.
    u32::from_be(unsafe { AtomicU32::from_ptr(p.as_ptr()) }.load(Ordering::Acquire))
}

/// Reads 16 bytes at `p`.
///
/// # Safety
///
/// `p..p+16` is valid for reads and the driver does not write it now (it was published).
#[inline]
pub(crate) unsafe fn read16(p: NonNull<u8>) -> [u8; 16] {
    // SAFETY: (caller) valid and not concurrently written.
    unsafe { p.as_ptr().cast::<[u8; 16]>().read_unaligned() }
}

//! The one place the data path gets its atomics, fences and shared cells from.
//!
//! Normally these are `core`'s. Under `cfg(zverbs_loom)` they are loom's, so that a loom model
//! can run the backends' own code with a loom thread playing the device, and explore every
//! interleaving and every value a weak memory model allows a load to return.
//!
//! Words shared with the device (doorbell records, CQE ownership) and with other threads (the
//! credit counter a poller returns to a poster) are accessed only through these types.

/// Atomic integers, orderings and fences.
pub mod atomic {
    #[cfg(not(zverbs_loom))]
    pub use core::sync::atomic::{
        AtomicBool, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
    #[cfg(zverbs_loom)]
    pub use loom::sync::atomic::{
        AtomicBool, AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
    };
}

/// Atomics laid over raw memory (`from_ptr`): `core`'s, under loom too, which cannot lay its
/// own atomics over memory it did not allocate. For bytes of buffers shared with a device
/// ([`crate::shared`]), not for the words of a protocol, which loom must see.
pub mod raw {
    pub use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};
}

/// Spin-wait hints: under loom a spinning thread must yield, or loom would explore its loop
/// for ever.
pub mod hint {
    #[cfg(not(zverbs_loom))]
    pub use core::hint::spin_loop;
    #[cfg(zverbs_loom)]
    pub use loom::hint::spin_loop;
}

/// Shared mutable cells with loom's closure API.
pub mod cell {
    #[cfg(zverbs_loom)]
    pub use loom::cell::UnsafeCell;

    /// `core::cell::UnsafeCell` with the `with`/`with_mut` API of loom's `UnsafeCell`, so the
    /// same code compiles against both. `repr(transparent)`: a pointer to `T` in memory the
    /// device shares may be cast to a pointer to `UnsafeCell<T>`.
    #[cfg(not(zverbs_loom))]
    #[derive(Debug, Default)]
    #[repr(transparent)]
    pub struct UnsafeCell<T: ?Sized>(core::cell::UnsafeCell<T>);

    #[cfg(not(zverbs_loom))]
    impl<T> UnsafeCell<T> {
        /// A cell holding `data`.
        #[inline(always)]
        pub const fn new(data: T) -> Self {
            Self(core::cell::UnsafeCell::new(data))
        }

        /// The value, consuming the cell.
        #[inline(always)]
        pub fn into_inner(self) -> T {
            self.0.into_inner()
        }
    }

    #[cfg(not(zverbs_loom))]
    impl<T: ?Sized> UnsafeCell<T> {
        /// Calls `f` with a shared raw pointer to the contents.
        #[inline(always)]
        pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }

        /// Calls `f` with a mutable raw pointer to the contents.
        #[inline(always)]
        pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

/// Pads and aligns a value to 128 bytes (two cache lines, as adjacent-line prefetchers fetch
/// pairs), so that an index written by one thread does not share a line with data another
/// thread writes.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct CachePadded<T>(pub T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    #[inline(always)]
    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T> core::ops::DerefMut for CachePadded<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut T {
        &mut self.0
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    use super::atomic::{AtomicU32, Ordering};
    use super::cell::UnsafeCell;
    use super::*;

    #[test]
    fn cell_round_trips() {
        let c = UnsafeCell::new(5u32);
        // SAFETY: no other access to the cell is live.
        c.with_mut(|p| unsafe { *p += 1 });
        // SAFETY: as above.
        assert_eq!(c.with(|p| unsafe { *p }), 6);
        assert_eq!(c.into_inner(), 6);
    }

    #[test]
    fn padded_is_two_lines() {
        let p = CachePadded(AtomicU32::new(3));
        assert_eq!(core::mem::align_of_val(&p), 128);
        assert_eq!(p.load(Ordering::Relaxed), 3);
    }
}

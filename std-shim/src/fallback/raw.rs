//! Memory the provider reads: scatter lists handed over as they are, and arrays allocated once
//! and addressed only through raw pointers.

use std::ptr::NonNull;

use zverbs_core::Sge;

use zverbs_ffi::types::ibv_sge;

/// Scatter entries as the `sg_list` of a verbs request: [`Sge`] has the layout of
/// `struct ibv_sge` (asserted below; both are checked against the header by `zverbs-abi`), so
/// the entries are handed to the provider as they are.
#[inline(always)]
pub(crate) fn sg_list(sges: *mut Sge) -> *mut ibv_sge {
    sges.cast()
}

const _: () = {
    use core::mem::{align_of, offset_of, size_of};
    assert!(size_of::<Sge>() == size_of::<ibv_sge>());
    assert!(align_of::<Sge>() == align_of::<ibv_sge>());
    assert!(offset_of!(Sge, addr) == offset_of!(ibv_sge, addr));
    assert!(offset_of!(Sge, length) == offset_of!(ibv_sge, length));
    assert!(offset_of!(Sge, lkey) == offset_of!(ibv_sge, lkey));
};

/// An array allocated once and addressed only through raw pointers, because the provider
/// reads it (and the `next` links inside it point into it).
#[derive(Debug)]
pub(crate) struct RawArray<T> {
    ptr: NonNull<T>,
    len: usize,
}

// SAFETY: the array is plain data owned by its queue; moving the queue moves the ownership.
unsafe impl<T: Send> Send for RawArray<T> {}

impl<T: Copy> RawArray<T> {
    /// `len` copies of `init` (at least one element, so the pointer is never dangling).
    pub(crate) fn new(len: usize, init: T) -> Self {
        let len = len.max(1);
        let b: Box<[T]> = vec![init; len].into_boxed_slice();
        // SAFETY: `Box::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(Box::into_raw(b).cast::<T>()) };
        Self { ptr, len }
    }

    /// Pointer to element `i`.
    #[inline(always)]
    pub(crate) fn at(&self, i: usize) -> *mut T {
        debug_assert!(i < self.len);
        // SAFETY: `i < len` (checked by the callers' capacity checks; asserted above), so the
        // result is inside the allocation.
        unsafe { self.ptr.as_ptr().add(i) }
    }

    /// Number of elements.
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<T> Drop for RawArray<T> {
    fn drop(&mut self) {
        let slice = core::ptr::slice_from_raw_parts_mut(self.ptr.as_ptr(), self.len);
        // SAFETY: the pointer came from `Box::into_raw` of a boxed slice of `len` elements and
        // is freed once, here.
        drop(unsafe { Box::from_raw(slice) });
    }
}

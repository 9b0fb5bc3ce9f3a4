//! The libibverbs fallback: the data path for every device that is not driven directly.
//!
//! Requests go through the provider's `ibv_post_send` / `ibv_post_recv` / `ibv_poll_cq`
//! (reached through `ibv_context.ops`, as `verbs.h` does), with the `ibv_send_wr`, `ibv_sge`,
//! `ibv_recv_wr` and `ibv_wc` arrays allocated once when the queue is created: nothing is
//! allocated per operation.
//!
//! The semantics are those of the [`zverbs_core`] traits, the same as the direct backend's:
//!
//! - [`PostSend::stage`](zverbs_core::PostSend::stage) validates the request (scatter
//!   entries, inline size, atomic size and alignment, message size, room in the send queue and
//!   in the CQ) and stages it into the preallocated array; inline payloads are copied at once
//!   into staging memory, so the caller may reuse them when the call returns. Nothing reaches
//!   the provider until [`ring`](zverbs_core::PostSend::ring), which posts the staged chain with
//!   one `ibv_post_send`.
//! - If the provider refuses the chain at `ring` (its `bad_wr` names the first request not
//!   posted), the refused requests are dropped: they never complete and their queue room is
//!   returned. The next `post_send` reports the refusal as
//!   [`PostError::Verbs`](zverbs_core::PostError::Verbs) with the provider's errno (and
//!   [`SendQueue::take_ring_error`] tells which requests were dropped).
//! - NOP is [`PostError::Unsupported`](zverbs_core::PostError::Unsupported): libibverbs has no
//!   NOP work request.
//! - Immediates are given and reported in host order, converted to and from the big-endian
//!   `imm_data` of `ibv_send_wr` / `ibv_wc`.
//! - Completions are reported as the direct backend reports them: `byte_len` is the received
//!   length, the READ length, 8 for atomics and 0 for WRITE and SEND; error completions carry
//!   the request's opcode.

mod poller;
mod rq;
mod sq;
mod state;
mod ud;

pub use poller::{Binding, Poller};
pub use rq::RecvQueue;
pub(crate) use sq::post_drain_marker;
pub use sq::{RingError, SendQueue};
pub use state::{RqShared, SqShared};
pub use ud::{SrqQueue, ud_send_wr};

use std::ptr::NonNull;

use zverbs_core::Sge;

use crate::ffi::types::ibv_sge;

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

#[cfg(test)]
pub(crate) mod fake;
#[cfg(test)]
mod tests;

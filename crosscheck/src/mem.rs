//! Plain heap memory standing in for device memory (rings, doorbell records, the BlueFlame
//! register), reached only through raw pointers.
//!
//! The queues under test are built from raw pointers, as from `mlx5dv_init_obj`, and write
//! through them; the tests read and write the same bytes between calls. No Rust reference to
//! the memory is ever held, so neither side's accesses invalidate the other's.

use std::alloc::{Layout, alloc_zeroed, dealloc, handle_alloc_error};
use std::ptr::NonNull;

/// A zeroed, aligned allocation accessed only through raw pointers.
#[derive(Debug)]
pub struct DeviceMem {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl DeviceMem {
    /// `len` zeroed bytes aligned to `align` (a power of two).
    pub fn new(len: usize, align: usize) -> Self {
        let layout = Layout::from_size_align(len.max(1), align).expect("bad layout");
        // SAFETY: the layout has a nonzero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| handle_alloc_error(layout));
        Self { ptr, layout }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.layout.size()
    }

    /// Never true: an allocation has at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The first byte.
    pub fn ptr(&self) -> NonNull<u8> {
        self.ptr
    }

    /// Copies `out.len()` bytes from offset `off`.
    pub fn read_at(&self, off: usize, out: &mut [u8]) {
        assert!(off + out.len() <= self.len(), "read past the end");
        // SAFETY: in bounds (checked); `out` is ordinary memory, not part of the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ptr.as_ptr().add(off), out.as_mut_ptr(), out.len())
        };
    }

    /// All bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = vec![0; self.len()];
        self.read_at(0, &mut v);
        v
    }

    /// Copies `bytes` to offset `off`.
    pub fn write_at(&self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len(), "write past the end");
        // SAFETY: in bounds (checked); `bytes` is ordinary memory, not part of the allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.ptr.as_ptr().add(off), bytes.len())
        };
    }

    /// Sets every byte to `byte`.
    pub fn fill(&self, byte: u8) {
        // SAFETY: the whole allocation, through its own pointer.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr(), byte, self.len()) };
    }
}

impl Drop for DeviceMem {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout, freed once.
        unsafe { dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

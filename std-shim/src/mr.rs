//! Memory regions: memory the device may read and write.
//!
//! Two kinds, with different safety stories:
//!
//! - [`MrBuf`]: the library allocates the memory (page-aligned, or on hugepages), registers it
//!   and frees it after deregistering it. Rust code never holds a reference into it: it is
//!   read and written only through copies ([`MrBuf::read`], [`MrBuf::write`],
//!   [`MrBuf::load_u64`], ...), so the device writing at any moment cannot break an aliasing
//!   guarantee. The memory lives as long as any clone of the `MrBuf`, so a queue that holds
//!   one (see [`crate::safe`]) can let the device use it without `unsafe` at the call site.
//! - [`Mr`]: a registration of memory the caller owns ([`Pd::register`](crate::Pd::register),
//!   `unsafe`): the caller promises to keep the memory mapped and to keep Rust references away
//!   from it while the device may touch it.

use std::alloc::Layout;
use std::fmt;
use std::ops::Range;
use std::ptr::NonNull;
use std::sync::Arc;

use zverbs_core::{RemoteBuf, Sge};

use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::provider::MrProvider;

/// Access rights of a registration, as `enum ibv_access_flags`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AccessFlags(u32);

impl AccessFlags {
    /// The device may write (RDMA READ destinations, receives, atomic results)
    /// (`IBV_ACCESS_LOCAL_WRITE`).
    pub const LOCAL_WRITE: Self = Self(1);
    /// Peers may RDMA WRITE into it (`IBV_ACCESS_REMOTE_WRITE`).
    pub const REMOTE_WRITE: Self = Self(1 << 1);
    /// Peers may RDMA READ it (`IBV_ACCESS_REMOTE_READ`).
    pub const REMOTE_READ: Self = Self(1 << 2);
    /// Peers may run atomics on it (`IBV_ACCESS_REMOTE_ATOMIC`).
    pub const REMOTE_ATOMIC: Self = Self(1 << 3);
    /// Every local and remote right.
    pub const ALL: Self = Self(0b1111);

    /// The raw bits (libibverbs' values).
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Whether every flag of `other` is set.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for AccessFlags {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

const PAGE: usize = 4096;
const HUGEPAGE: usize = 2 << 20;

/// Memory the library owns.
pub(crate) enum Storage {
    Pages { ptr: NonNull<u8>, layout: Layout },
    Huge(memmap2::MmapMut),
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Storage::Pages { layout, .. } => write!(f, "Pages({} bytes)", layout.size()),
            Storage::Huge(m) => write!(f, "Hugepages({} bytes)", m.len()),
        }
    }
}

// SAFETY: plain memory owned by this value.
unsafe impl Send for Storage {}
// SAFETY: Rust code only copies in and out through raw pointers (see the module docs).
unsafe impl Sync for Storage {}

impl Storage {
    pub(crate) fn pages(len: usize) -> Result<Self> {
        let size = len.max(1).next_multiple_of(PAGE);
        let layout = Layout::from_size_align(size, PAGE)
            .map_err(|_| Error::InvalidArgument(format!("buffer of {len} bytes")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            Error::InvalidArgument(format!("cannot allocate a buffer of {len} bytes"))
        })?;
        Ok(Storage::Pages { ptr, layout })
    }

    pub(crate) fn hugepages(len: usize) -> Result<Self> {
        let size = len.max(1).next_multiple_of(HUGEPAGE);
        memmap2::MmapOptions::new()
            .len(size)
            .huge(None)
            .map_anon()
            .map(Storage::Huge)
            .map_err(|source| Error::NoHugepages {
                requested: size,
                source,
            })
    }

    fn ptr(&self) -> *mut u8 {
        match self {
            Storage::Pages { ptr, .. } => ptr.as_ptr(),
            // The mapping is only ever accessed through raw pointers from here on.
            Storage::Huge(m) => m.as_ptr().cast_mut(),
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        if let Storage::Pages { ptr, layout } = self {
            // SAFETY: allocated with this layout in `pages`, freed once.
            unsafe { std::alloc::dealloc(ptr.as_ptr(), *layout) };
        }
    }
}

/// A registration of memory the caller owns (from [`Pd::register`](crate::Pd::register)).
/// Deregistered when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct Mr {
    inner: Arc<MrInner>,
}

#[derive(Debug)]
struct MrInner {
    // Field order is drop order: deregister before releasing the PD.
    reg: Box<dyn MrProvider>,
    addr: usize,
    len: usize,
    _pd: Pd,
}

impl Mr {
    pub(crate) fn new(reg: Box<dyn MrProvider>, addr: *mut u8, len: usize, pd: Pd) -> Self {
        Self {
            inner: Arc::new(MrInner {
                reg,
                addr: addr as usize,
                len,
                _pd: pd,
            }),
        }
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.inner.reg.lkey()
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.reg.rkey()
    }

    /// First registered address.
    pub fn addr(&self) -> u64 {
        self.inner.addr as u64
    }

    /// Registered length.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the registration is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// A scatter entry for `range` of the region, or `None` if it is out of bounds.
    pub fn sge(&self, range: Range<usize>) -> Option<Sge> {
        sge_in(self.inner.addr, self.inner.len, self.lkey(), range)
    }

    /// The region as a remote target at `offset`, for the peer.
    pub fn remote(&self, offset: u64) -> RemoteBuf {
        RemoteBuf::new(self.addr() + offset, self.rkey())
    }
}

fn sge_in(base: usize, len: usize, lkey: u32, range: Range<usize>) -> Option<Sge> {
    if range.start > range.end || range.end > len || range.end - range.start > u32::MAX as usize {
        return None;
    }
    Some(Sge::new(
        (base + range.start) as u64,
        (range.end - range.start) as u32,
        lkey,
    ))
}

/// A registered buffer that the library allocated (see the module docs). Cloning is cheap;
/// the memory is deregistered and freed when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct MrBuf {
    pub(crate) inner: Arc<MrBufInner>,
}

#[derive(Debug)]
pub(crate) struct MrBufInner {
    // Field order is drop order: deregister, then free, then release the PD.
    reg: Box<dyn MrProvider>,
    storage: Storage,
    len: usize,
    access: AccessFlags,
    _pd: Pd,
}

impl MrBuf {
    pub(crate) fn new(pd: &Pd, storage: Storage, access: AccessFlags) -> Result<Self> {
        let len = match &storage {
            Storage::Pages { layout, .. } => layout.size(),
            Storage::Huge(m) => m.len(),
        };
        // SAFETY: the storage is owned by the `MrBufInner` built below, whose field order
        // deregisters before freeing.
        let reg = unsafe { pd.inner.provider.reg_mr(storage.ptr(), len, access)? };
        Ok(Self {
            inner: Arc::new(MrBufInner {
                reg,
                storage,
                len,
                access,
                _pd: pd.clone(),
            }),
        })
    }

    /// The local key.
    pub fn lkey(&self) -> u32 {
        self.inner.reg.lkey()
    }

    /// The remote key.
    pub fn rkey(&self) -> u32 {
        self.inner.reg.rkey()
    }

    /// First address.
    pub fn addr(&self) -> u64 {
        self.inner.storage.ptr() as u64
    }

    /// Length in bytes (the requested length rounded up to the page or hugepage size).
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Never true: buffers have at least one page.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.inner.access
    }

    /// Whether it lives on hugepages.
    pub fn is_hugepages(&self) -> bool {
        matches!(self.inner.storage, Storage::Huge(_))
    }

    /// A scatter entry for `range`, or `None` if it is out of bounds.
    pub fn sge(&self, range: Range<usize>) -> Option<Sge> {
        sge_in(
            self.inner.storage.ptr() as usize,
            self.inner.len,
            self.lkey(),
            range,
        )
    }

    /// The buffer as a remote target at `offset`, for the peer.
    pub fn remote(&self, offset: u64) -> RemoteBuf {
        RemoteBuf::new(self.addr() + offset, self.rkey())
    }

    fn check(&self, offset: usize, n: usize) {
        assert!(
            offset.checked_add(n).is_some_and(|e| e <= self.inner.len),
            "range {offset}..{offset}+{n} outside a buffer of {} bytes",
            self.inner.len
        );
    }

    /// Copies `src` into the buffer at `offset`.
    ///
    /// # Panics
    ///
    /// If the range is outside the buffer.
    pub fn write(&self, offset: usize, src: &[u8]) {
        self.check(offset, src.len());
        // SAFETY: in bounds (checked); the buffer is never referenced by Rust, only copied
        // through raw pointers, and `src` is not inside it (it is a Rust reference).
        unsafe {
            std::ptr::copy_nonoverlapping(
                src.as_ptr(),
                self.inner.storage.ptr().add(offset),
                src.len(),
            )
        };
    }

    /// Copies bytes at `offset` into `dst`. If the device writes them at the same time the
    /// copy may see part of the new bytes; poll the completion first to see all of them.
    ///
    /// # Panics
    ///
    /// If the range is outside the buffer.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        self.check(offset, dst.len());
        // SAFETY: as in `write`.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.inner.storage.ptr().add(offset),
                dst.as_mut_ptr(),
                dst.len(),
            )
        };
    }

    /// Fills `range` with `byte`.
    ///
    /// # Panics
    ///
    /// If the range is outside the buffer.
    pub fn fill(&self, range: Range<usize>, byte: u8) {
        self.check(range.start, range.len());
        // SAFETY: as in `write`.
        unsafe {
            std::ptr::write_bytes(self.inner.storage.ptr().add(range.start), byte, range.len())
        };
    }

    /// A volatile load of the byte at `offset`: a fresh read each call, for spinning on a
    /// byte a peer's RDMA WRITE will change.
    ///
    /// # Panics
    ///
    /// If the offset is outside the buffer.
    #[inline]
    pub fn load_u8(&self, offset: usize) -> u8 {
        self.check(offset, 1);
        // SAFETY: in bounds; a volatile read through a raw pointer.
        unsafe { std::ptr::read_volatile(self.inner.storage.ptr().add(offset)) }
    }

    /// A volatile store of `v` at `offset`.
    ///
    /// # Panics
    ///
    /// If the offset is outside the buffer.
    #[inline]
    pub fn store_u8(&self, offset: usize, v: u8) {
        self.check(offset, 1);
        // SAFETY: in bounds; a volatile write through a raw pointer.
        unsafe { std::ptr::write_volatile(self.inner.storage.ptr().add(offset), v) }
    }

    /// A volatile load of the native-endian `u64` at `offset` (8-byte aligned), e.g. an atomic's
    /// target or result.
    ///
    /// # Panics
    ///
    /// If the offset is outside the buffer or unaligned.
    pub fn load_u64(&self, offset: usize) -> u64 {
        self.check(offset, 8);
        assert!(offset.is_multiple_of(8), "unaligned u64 at {offset}");
        // SAFETY: in bounds and aligned (the buffer is page-aligned).
        unsafe { std::ptr::read_volatile(self.inner.storage.ptr().add(offset).cast::<u64>()) }
    }

    /// A volatile store of the native-endian `u64` at `offset` (8-byte aligned).
    ///
    /// # Panics
    ///
    /// If the offset is outside the buffer or unaligned.
    pub fn store_u64(&self, offset: usize, v: u64) {
        self.check(offset, 8);
        assert!(offset.is_multiple_of(8), "unaligned u64 at {offset}");
        // SAFETY: in bounds and aligned.
        unsafe { std::ptr::write_volatile(self.inner.storage.ptr().add(offset).cast::<u64>(), v) }
    }

    /// Whether two handles are the same buffer.
    pub fn same(&self, other: &MrBuf) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_storage_is_aligned_and_zeroed() {
        let s = Storage::pages(10).unwrap();
        assert!((s.ptr() as usize).is_multiple_of(PAGE));
        // SAFETY: 4096 bytes were allocated.
        let b = unsafe { std::slice::from_raw_parts(s.ptr(), PAGE) };
        assert!(b.iter().all(|&x| x == 0));
    }

    #[test]
    fn sge_bounds() {
        assert_eq!(sge_in(0x1000, 64, 7, 8..24), Some(Sge::new(0x1008, 16, 7)));
        assert_eq!(sge_in(0x1000, 64, 7, 60..65), None);
        #[allow(clippy::reversed_empty_ranges)]
        let r = 9..8;
        assert_eq!(sge_in(0x1000, 64, 7, r), None);
    }

    #[test]
    fn hugepages_error_says_how_to_reserve() {
        // A size no system reserves: 2^40 bytes of hugepages.
        match Storage::hugepages(1 << 40) {
            Err(e @ Error::NoHugepages { .. }) => {
                assert!(e.to_string().contains("nr_hugepages"), "{e}")
            }
            Err(e) => panic!("unexpected {e}"),
            Ok(_) => {} // a machine with a terabyte of hugepages: nothing to check
        }
    }
}

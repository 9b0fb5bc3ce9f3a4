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
//!
//! What both are, memory registered with a protection domain, is the [`Registered`] trait:
//! the keys and extent, a scatter entry for a span ([`Registered::sge`]) and a remote target
//! at an offset ([`Registered::remote`]). Every accessor that takes an offset or a range, on
//! the trait or on `MrBuf`, has one form, returning a [`BufError`] for a range outside the
//! memory (`buf.slice(0..64)?`, `buf.write(0, b"x")?`, `buf.load_u64(8)?`).
//!
//! `MrBuf`'s memory model (atomic accesses in whole words, shared with the software device's
//! engine through `zverbs_core::shared`) is written on the type, where users read it.

use std::alloc::Layout;
use std::fmt;
use std::ops::{Range, RangeBounds};
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use zverbs_core::shared::{AccessError, SharedMem};
use zverbs_core::{RemoteBuf, Sge};

use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::provider::MrProvider;
use crate::types::access::AccessFlags;
use crate::types::buf::{BufError, remote_in};

const PAGE: usize = 4096;
const HUGEPAGE: usize = 2 << 20;

/// Memory the library owns.
pub(crate) enum Storage {
    Pages {
        ptr: NonNull<u8>,
        layout: Layout,
    },
    /// The mapping, and its first byte taken once from it (the mapping is only ever accessed
    /// through that pointer).
    Huge {
        map: memmap2::MmapMut,
        ptr: NonNull<u8>,
    },
}

impl fmt::Debug for Storage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Storage::Pages { layout, .. } => write!(f, "Pages({} bytes)", layout.size()),
            Storage::Huge { map, .. } => write!(f, "Hugepages({} bytes)", map.len()),
        }
    }
}

// SAFETY: plain memory owned by this value.
unsafe impl Send for Storage {}
// SAFETY: Rust code only accesses it through `SharedMem` views, atomically (see the module
// docs).
unsafe impl Sync for Storage {}

/// `len` (at least 1) rounded up to a multiple of `unit`, or the error for a length no
/// allocation can have (the rounding would overflow, or pass `isize::MAX`).
fn rounded(len: usize, unit: usize) -> Result<usize> {
    len.max(1)
        .checked_next_multiple_of(unit)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or(Error::Buf(BufError::TooLarge { requested: len }))
}

impl Storage {
    pub(crate) fn pages(len: usize) -> Result<Self> {
        let size = rounded(len, PAGE)?;
        let layout = Layout::from_size_align(size, PAGE)
            .map_err(|_| Error::Buf(BufError::TooLarge { requested: len }))?;
        // SAFETY: the layout has a non-zero size (at least one page).
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            Error::InvalidArgument(format!("cannot allocate a buffer of {len} bytes"))
        })?;
        Ok(Storage::Pages { ptr, layout })
    }

    pub(crate) fn hugepages(len: usize) -> Result<Self> {
        let size = rounded(len, HUGEPAGE)?;
        let mut map = memmap2::MmapOptions::new()
            .len(size)
            .huge(None)
            .map_anon()
            .map_err(|source| Error::NoHugepages {
                requested: size,
                source,
            })?;
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or_else(|| Error::NoHugepages {
            requested: size,
            source: std::io::Error::other("mmap returned a null mapping"),
        })?;
        Ok(Storage::Huge { map, ptr })
    }

    fn ptr(&self) -> NonNull<u8> {
        match self {
            Storage::Pages { ptr, .. } | Storage::Huge { ptr, .. } => *ptr,
        }
    }

    fn len(&self) -> usize {
        match self {
            Storage::Pages { layout, .. } => layout.size(),
            Storage::Huge { map, .. } => map.len(),
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

impl Pd {
    /// A zeroed, page-aligned buffer of `len` bytes that the library allocates and registers.
    ///
    /// # Errors
    ///
    /// [`Error::Buf`] with [`BufError::TooLarge`]
    /// when `len`, rounded up to whole pages, is more than an allocation can hold;
    /// [`Error::MemlockLimit`] when the locked-memory limit is too
    /// low; [`Error::Verbs`] from `ibv_reg_mr`.
    pub fn alloc_buf(&self, len: usize, access: AccessFlags) -> Result<MrBuf> {
        MrBuf::new(self, Storage::pages(len)?, access)
    }

    /// A buffer of `len` bytes (rounded up to 2 MiB) backed by hugepages, registered.
    ///
    /// # Errors
    ///
    /// [`Error::NoHugepages`] when the system has too few reserved
    /// (`len` rounded up to 2 MiB); then as [`Pd::alloc_buf`].
    pub fn alloc_buf_hugepages(&self, len: usize, access: AccessFlags) -> Result<MrBuf> {
        MrBuf::new(self, Storage::hugepages(len)?, access)
    }

    /// Registers memory the caller owns.
    ///
    /// # Safety
    ///
    /// - `addr..addr+len` is mapped memory that stays mapped (not freed, unmapped or
    ///   remapped) until the returned [`Mr`] and every queue that may still access it are
    ///   dropped;
    /// - while the device may access it (a request using it is posted and not completed, or
    ///   the peer was given its rkey with remote access), Rust code holds no reference to
    ///   those bytes that assumes they do not change (no `&mut`, no `&` read while a remote
    ///   write or local READ/receive may land), and accesses them at such times only
    ///   atomically, through a [`SharedMem`] of exactly
    ///   `addr..addr+len` (the software device reads and writes whole 8-byte words of the
    ///   registration, including bytes of a word that a request covers only in part).
    ///
    /// # Errors
    ///
    /// As [`Pd::alloc_buf`].
    pub unsafe fn register(&self, addr: *mut u8, len: usize, access: AccessFlags) -> Result<Mr> {
        // SAFETY: (caller) the memory stays mapped while registered.
        let reg = unsafe { self.inner.provider.reg_mr(addr, len, access)? };
        Ok(Mr::new(reg, addr, len, self.clone()))
    }
}

/// Memory registered with a protection domain: an [`MrBuf`] (the library's memory) or an [`Mr`]
/// (the caller's). Its keys and extent, and the two things a request needs from it: a scatter
/// entry for a span of it (local), and its address at an offset for a peer (remote). Both are
/// checked against the registration and return a [`BufError`] for a span outside it, which
/// converts into [`Error`] so `?` works in set-up code:
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// use zverbs::{AccessFlags, BufError, Registered};
///
/// let pd = ctx.alloc_pd()?;
/// let buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
/// let sge = buf.sge(64..128)?; // for the `unsafe` posts: address, length and the buffer's lkey
/// assert_eq!((sge.addr, sge.length, sge.lkey), (buf.addr() + 64, 64, buf.lkey()));
/// let there = buf.remote(64)?; // what a peer needs to WRITE at offset 64
/// assert_eq!((there.addr, there.rkey), (buf.addr() + 64, buf.rkey()));
/// assert!(matches!(buf.sge(4000..4097), Err(BufError::OutOfBounds { buf_len: 4096, .. })));
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
///
/// Sealed: implemented by [`MrBuf`] and [`Mr`] only.
pub trait Registered: sealed::Sealed {
    /// The local key.
    fn lkey(&self) -> u32;

    /// The remote key.
    fn rkey(&self) -> u32;

    /// First registered address.
    fn addr(&self) -> u64;

    /// Registered length in bytes.
    fn len(&self) -> usize;

    /// Whether the registration is empty (never true of an [`MrBuf`], which has at least one
    /// page).
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A scatter entry for `range` of the registration (`buf.sge(..)?`, `buf.sge(0..64)?`), for
    /// the `unsafe` posts; the front door's queues take [`MrBuf::slice`] instead.
    ///
    /// # Errors
    ///
    /// [`BufError::ReversedRange`], [`BufError::OutOfBounds`] (naming the range and the
    /// registration's length), or [`BufError::TooLong`] for a span longer than a scatter entry
    /// carries (4 GiB − 1 bytes).
    fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge, BufError>
    where
        Self: Sized,
    {
        sge_in(self.addr(), self.len(), self.lkey(), range)
    }

    /// The registration as a remote target at `offset`, for the peer (the end itself is
    /// allowed: the target of a zero-length request).
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`] if `offset` is past the end of the registration.
    fn remote(&self, offset: usize) -> Result<RemoteBuf, BufError> {
        remote_in(self.addr(), self.len(), self.rkey(), offset)
    }
}

/// The scatter entry for `range` of `len` bytes at `base`.
fn sge_in(
    base: u64,
    len: usize,
    lkey: u32,
    range: impl RangeBounds<usize>,
) -> Result<Sge, BufError> {
    let (start, end) = crate::types::buf::resolve(range, len)?;
    // `resolve` bounded the length by `u32::MAX`.
    Ok(Sge::new(base + start as u64, (end - start) as u32, lkey))
}

mod sealed {
    /// Keeps [`Registered`](super::Registered) to this crate's two registrations.
    pub trait Sealed {}
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
}

impl sealed::Sealed for Mr {}

impl Registered for Mr {
    fn lkey(&self) -> u32 {
        self.inner.reg.lkey()
    }

    fn rkey(&self) -> u32 {
        self.inner.reg.rkey()
    }

    fn addr(&self) -> u64 {
        self.inner.addr as u64
    }

    fn len(&self) -> usize {
        self.inner.len
    }
}

/// How many times [`MrBuf::wait_u8`] loads the byte between two readings of the clock.
const SPINS_PER_CLOCK_READ: u32 = 128;

/// A registered buffer that the library allocated and registered ([`Pd::alloc_buf`]). Rust code
/// never holds a reference into it: it is read and written only through copies, so the device
/// writing at any moment cannot break an aliasing guarantee, and it lives as long as any clone
/// (cloning is cheap), so a queue that holds one (see [`crate::safe`]) can let the device use
/// it without `unsafe` at the call site. The memory is deregistered, then freed, when the last
/// clone is dropped.
///
/// # Memory model
///
/// An `MrBuf` is `Sync`: any number of threads may read and write it through `&self` while the
/// device (a NIC by DMA, or the software device's progress thread, an ordinary Rust thread)
/// writes incoming RDMA WRITEs, receives and READ responses into it. That is free of data
/// races because every accessor is made of atomic accesses, by the rule of
/// [`zverbs_core::shared`]: the buffer is read and written in whole, aligned 8-byte atomic
/// words (a copy that covers part of a word merges its bytes into the word with a
/// compare-exchange), which is also how the software device accesses registered memory, so no
/// two racing accesses differ in size.
///
/// - Copies ([`MrBuf::read`], [`MrBuf::write`], [`MrBuf::fill`]) and the plain loads and
///   stores are `Relaxed`: each word is read or written whole, but a copy is not one atomic
///   action. A copy that races with a writer (another thread, or a message landing) sees
///   some of the new bytes and not others: never undefined behaviour, but not a message
///   either.
/// - A whole message is seen through a release/acquire pair. The device writes the last byte
///   of a message last (the software device stores it with `Release`; a NIC's writes of one
///   message land in order unless the registration asked for relaxed ordering, which this
///   library never does: the property `ib_write_lat` relies on): a reader
///   that sees the last byte take its new value with [`MrBuf::load_u8_acquire`] or
///   [`MrBuf::wait_u8`] then reads the message with [`MrBuf::read`] and sees all of it.
///   Between threads of one program, [`MrBuf::store_u8_release`] is the writing side.
///   On x86_64 an acquire load is an ordinary load; on aarch64 it is an `ldar`, which keeps
///   the loads after it (the message) from being performed before it.
/// - The completion of a request is the other way to know a message has landed: after a CQE
///   is polled, every byte of its message is visible to plain reads.
///
/// The cost: the middle of a copy is one 8-byte move per word (the compiler may not merge
/// atomic moves into vector moves), so a copy that fits the L1 cache takes two to three times
/// as long as a `memcpy`, while beyond it memory bandwidth bounds both alike; a byte store
/// ([`MrBuf::store_u8`]) is a compare-exchange of its word. `docs/performance.md` has the
/// figures (`cargo bench -p zverbs-benches --bench mrbuf`).
///
/// # Bad input
///
/// Offsets and lengths are checked without overflow. Every accessor that takes an offset or a
/// range has one form, which returns a [`BufError`] for a range outside the buffer (naming the
/// range and the buffer's length) or a misaligned word, and then has read or written nothing;
/// none panics. `BufError` converts into [`Error`], so `?` works in set-up code:
/// `buf.write(0, b"x")?`, `buf.load_u64(8)?`, `buf.slice(0..64)?`.
///
/// # Example
///
/// Copies in and out, 8-byte words, the spans the safe queues post and the address a peer
/// writes to:
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// use zverbs::{AccessFlags, BufError, Registered};
///
/// let pd = ctx.alloc_pd()?;
/// let buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
/// buf.write(0, b"hello")?;
/// let mut got = [0; 5];
/// buf.read(0, &mut got)?;
/// assert_eq!(&got, b"hello");
/// buf.store_u64(8, 42)?;
/// assert_eq!(buf.load_u64(8)?, 42);
/// let span = buf.slice(0..5)?; // what a `SendQueue` posts: bounds-checked, with the buffer's key
/// assert_eq!(span.len(), 5);
/// let there = buf.remote(64)?; // what a peer needs to WRITE at offset 64
/// assert_eq!((there.addr, there.rkey), (buf.addr() + 64, buf.rkey()));
/// // Past the end: an error that names the range and the buffer's length; nothing written.
/// let e = buf.write(4092, b"12345678").unwrap_err();
/// assert_eq!(e, BufError::OutOfBounds { offset: 4092, len: 8, buf_len: 4096 });
/// assert_eq!(e.to_string(), "8 bytes at offset 4092 are outside a buffer of 4096 bytes");
/// assert_eq!(buf.load_u64(4088)?, 0);
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
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
        let len = storage.len();
        // SAFETY: the storage is owned by the `MrBufInner` built below, whose field order
        // deregisters before freeing.
        let reg = unsafe {
            pd.inner
                .provider
                .reg_mr(storage.ptr().as_ptr(), len, access)?
        };
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

    /// The whole buffer as memory shared with the device and other threads.
    #[inline]
    fn mem(&self) -> SharedMem<'_> {
        // SAFETY: the storage is `len` bytes allocated for as long as `self.inner` lives, which
        // outlives this borrow. Rust code never references it: this crate accesses it only
        // through views of the whole buffer like this one, the software device through a view
        // of the registration (the whole buffer too), and a NIC by DMA.
        unsafe { SharedMem::new(self.inner.storage.ptr(), self.inner.len) }
    }

    /// `e` from the shared view, with the offending range.
    #[cold]
    fn refused(&self, e: AccessError, offset: usize, len: usize) -> BufError {
        match e {
            AccessError::Misaligned => BufError::Misaligned { offset },
            _ => BufError::OutOfBounds {
                offset,
                len,
                buf_len: self.inner.len,
            },
        }
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.inner.access
    }

    /// Whether it lives on hugepages.
    pub fn is_hugepages(&self) -> bool {
        matches!(self.inner.storage, Storage::Huge { .. })
    }

    /// Copies `src` into the buffer at `offset`.
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`] if the range is outside the buffer; nothing is written.
    #[inline]
    pub fn write(&self, offset: usize, src: &[u8]) -> Result<(), BufError> {
        self.mem()
            .write(offset, src)
            .map_err(|e| self.refused(e, offset, src.len()))
    }

    /// Copies bytes at `offset` into `dst`. If the device or another thread writes them at the
    /// same time the copy may see part of the new bytes; poll the completion, or see the last
    /// byte change with [`MrBuf::wait_u8`], first to see all of them.
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`] if the range is outside the buffer; `dst` is left as it was.
    #[inline]
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), BufError> {
        let len = dst.len();
        self.mem()
            .read(offset, dst)
            .map_err(|e| self.refused(e, offset, len))
    }

    /// Fills `range` with `byte`.
    ///
    /// # Errors
    ///
    /// [`BufError::ReversedRange`] if `range.start > range.end`, [`BufError::OutOfBounds`] if
    /// the range is outside the buffer; nothing is written.
    pub fn fill(&self, range: Range<usize>, byte: u8) -> Result<(), BufError> {
        let Range { start, end } = range;
        let len = end
            .checked_sub(start)
            .ok_or(BufError::ReversedRange { start, end })?;
        self.mem()
            .fill(start, len, byte)
            .map_err(|e| self.refused(e, start, len))
    }

    /// Loads the byte at `offset` (`Relaxed`): a fresh read each call, for spinning on a byte a
    /// peer's RDMA WRITE will change. To read the rest of the message once it changes, use
    /// [`MrBuf::load_u8_acquire`] or [`MrBuf::wait_u8`] instead.
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`] if the offset is outside the buffer.
    #[inline]
    #[must_use = "a load does nothing but return the byte"]
    pub fn load_u8(&self, offset: usize) -> Result<u8, BufError> {
        self.mem()
            .load_u8(offset)
            .map_err(|e| self.refused(e, offset, 1))
    }

    /// Loads the byte at `offset` with `Acquire`: once it reads the last byte of a message (the
    /// device writes that byte last, the software device with `Release`), the copies that
    /// follow see the whole message. On aarch64 this is an `ldar` (later loads wait for it); on
    /// x86_64 an ordinary load.
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`] if the offset is outside the buffer.
    #[inline]
    #[must_use = "a load does nothing but return the byte"]
    pub fn load_u8_acquire(&self, offset: usize) -> Result<u8, BufError> {
        self.mem()
            .load_u8_acquire(offset)
            .map_err(|e| self.refused(e, offset, 1))
    }

    /// Spins until the byte at `offset` equals `value`, loading it with `Acquire` (see
    /// [`MrBuf::load_u8_acquire`]), or until `deadline`: the "poll the last byte of an RDMA
    /// WRITE" idiom of `ib_write_lat`, with an end. After `Ok`, reads of the message that the
    /// byte ends see all of it.
    ///
    /// It keeps the core busy (no sleep, no yield, no `pause`) and reads the clock once every
    /// 128 loads, so it returns soon after the deadline rather than exactly at it.
    ///
    /// # Errors
    ///
    /// [`BufError::TimedOut`] (with the value last read) when the deadline passes first;
    /// [`BufError::OutOfBounds`] if the offset is outside the buffer.
    pub fn wait_u8(&self, offset: usize, value: u8, deadline: Instant) -> Result<(), BufError> {
        let mem = self.mem();
        loop {
            let mut last = 0;
            for _ in 0..SPINS_PER_CLOCK_READ {
                last = mem
                    .load_u8_acquire(offset)
                    .map_err(|e| self.refused(e, offset, 1))?;
                if last == value {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                return Err(BufError::TimedOut {
                    offset,
                    expected: value,
                    last,
                });
            }
        }
    }

    /// Stores `v` at `offset` (`Relaxed`).
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`] if the offset is outside the buffer; nothing is written.
    #[inline]
    pub fn store_u8(&self, offset: usize, v: u8) -> Result<(), BufError> {
        self.mem()
            .store_u8(offset, v)
            .map_err(|e| self.refused(e, offset, 1))
    }

    /// Stores `v` at `offset` with `Release`: a thread that reads it with
    /// [`MrBuf::load_u8_acquire`] or [`MrBuf::wait_u8`] sees everything this thread wrote
    /// before (the writing side of the idiom, between threads of one program).
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`] if the offset is outside the buffer; nothing is written.
    #[inline]
    pub fn store_u8_release(&self, offset: usize, v: u8) -> Result<(), BufError> {
        self.mem()
            .store_u8_release(offset, v)
            .map_err(|e| self.refused(e, offset, 1))
    }

    /// Loads the native-endian `u64` at `offset` (a multiple of 8), e.g. an atomic's target or
    /// result (`Relaxed`).
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`], [`BufError::Misaligned`].
    #[inline]
    #[must_use = "a load does nothing but return the word"]
    pub fn load_u64(&self, offset: usize) -> Result<u64, BufError> {
        self.mem()
            .load_u64(offset)
            .map_err(|e| self.refused(e, offset, 8))
    }

    /// Loads the native-endian `u64` at `offset` (a multiple of 8) with `Acquire` (see
    /// [`MrBuf::load_u8_acquire`]).
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`], [`BufError::Misaligned`].
    #[inline]
    #[must_use = "a load does nothing but return the word"]
    pub fn load_u64_acquire(&self, offset: usize) -> Result<u64, BufError> {
        self.mem()
            .load_u64_acquire(offset)
            .map_err(|e| self.refused(e, offset, 8))
    }

    /// Stores the native-endian `u64` `v` at `offset` (a multiple of 8), `Relaxed`.
    ///
    /// # Errors
    ///
    /// [`BufError::OutOfBounds`], [`BufError::Misaligned`]; nothing is written.
    #[inline]
    pub fn store_u64(&self, offset: usize, v: u64) -> Result<(), BufError> {
        self.mem()
            .store_u64(offset, v)
            .map_err(|e| self.refused(e, offset, 8))
    }

    /// Whether two handles are the same buffer.
    pub fn same(&self, other: &MrBuf) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl sealed::Sealed for MrBuf {}

impl Registered for MrBuf {
    fn lkey(&self) -> u32 {
        self.inner.reg.lkey()
    }

    fn rkey(&self) -> u32 {
        self.inner.reg.rkey()
    }

    fn addr(&self) -> u64 {
        self.inner.storage.ptr().as_ptr() as u64
    }

    /// The requested length rounded up to the page or hugepage size.
    fn len(&self) -> usize {
        self.inner.len
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_storage_is_aligned_and_zeroed() {
        let s = Storage::pages(10).unwrap();
        assert!((s.ptr().as_ptr() as usize).is_multiple_of(PAGE));
        // SAFETY: 4096 bytes were allocated, and nothing else accesses them.
        let b = unsafe { std::slice::from_raw_parts(s.ptr().as_ptr(), PAGE) };
        assert!(b.iter().all(|&x| x == 0));
    }

    #[test]
    fn storage_sizes_that_would_wrap_are_refused() {
        for len in [usize::MAX, usize::MAX - PAGE + 2, isize::MAX as usize] {
            assert!(
                matches!(Storage::pages(len), Err(Error::Buf(BufError::TooLarge { requested })) if requested == len),
                "{len}"
            );
            assert!(
                matches!(
                    Storage::hugepages(len),
                    Err(Error::Buf(BufError::TooLarge { .. }))
                ),
                "{len}"
            );
        }
        assert_eq!(rounded(0, PAGE).ok(), Some(PAGE));
        assert_eq!(rounded(PAGE + 1, PAGE).ok(), Some(2 * PAGE));
        // The largest allocation Rust allows is isize::MAX bytes.
        let top = isize::MAX as usize + 1 - PAGE;
        assert_eq!(rounded(top, PAGE).ok(), Some(top));
        assert_eq!(rounded(top + 1, PAGE).ok(), None);
    }

    #[test]
    fn sge_bounds() {
        assert_eq!(sge_in(0x1000, 64, 7, 8..24), Ok(Sge::new(0x1008, 16, 7)));
        assert_eq!(sge_in(0x1000, 64, 7, ..), Ok(Sge::new(0x1000, 64, 7)));
        assert_eq!(sge_in(0x1000, 64, 7, 8..=15), Ok(Sge::new(0x1008, 8, 7)));
        assert_eq!(sge_in(0x1000, 64, 7, 60..), Ok(Sge::new(0x103c, 4, 7)));
        assert_eq!(
            sge_in(0x1000, 64, 7, 60..65),
            Err(BufError::OutOfBounds {
                offset: 60,
                len: 5,
                buf_len: 64
            })
        );
        #[allow(clippy::reversed_empty_ranges)]
        let r = 9..8;
        assert_eq!(
            sge_in(0x1000, 64, 7, r),
            Err(BufError::ReversedRange { start: 9, end: 8 })
        );
        assert!(matches!(
            sge_in(0x1000, 64, 7, 0..=usize::MAX),
            Err(BufError::OutOfBounds { .. })
        ));
        // A span the wire's 32-bit length cannot carry is refused, not truncated.
        let big = u32::MAX as usize + 1;
        assert_eq!(
            sge_in(0, big + 1, 7, 0..big),
            Err(BufError::TooLong {
                len: big,
                max: u32::MAX
            })
        );
        assert_eq!(sge_in(0, big + 1, 7, 1..big), Ok(Sge::new(1, u32::MAX, 7)));
        assert_eq!(remote_in(0x1000, 64, 9, 64), Ok(RemoteBuf::new(0x1040, 9)));
        assert!(remote_in(0x1000, 64, 9, 65).is_err());
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "maps hugepages: Miri supports only anonymous private mmap"
    )]
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

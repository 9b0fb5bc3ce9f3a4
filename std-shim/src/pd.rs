//! Protection domains.

use std::sync::Arc;

use crate::cq::Cq;
use crate::device::Context;
use crate::error::Result;
use crate::mr::{AccessFlags, Mr, MrBuf, Storage};
use crate::provider::PdProvider;
use crate::qp::QpBuilder;

/// A protection domain: the scope of memory registrations and queue pairs. Cloning is cheap.
///
/// # Example
///
/// Memory and queue pairs of one PD may work together: a QP posts only spans of memory
/// registered in its own PD.
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// use zverbs::AccessFlags;
///
/// let pd = ctx.alloc_pd()?;
/// let buf = pd.alloc_buf(4096, AccessFlags::ALL)?; // allocated, then registered in `pd`
/// let cq = ctx.cq_builder().build()?;
/// let qp = pd.qp_builder(&cq, &cq).build()?; // a QP of `pd`: its requests may use `buf`
/// assert_eq!(buf.len(), 4096);
/// assert_ne!(buf.rkey(), 0); // the key a peer writes into `buf` with
/// println!("QP {:#x}, backend {}", qp.qpn(), qp.backend());
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Clone, Debug)]
pub struct Pd {
    pub(crate) inner: Arc<PdInner>,
}

#[derive(Debug)]
pub(crate) struct PdInner {
    // Field order is drop order: the PD goes before the context it belongs to.
    pub(crate) provider: Box<dyn PdProvider>,
    pub(crate) ctx: Context,
}

impl Pd {
    pub(crate) fn new(ctx: &Context) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(PdInner {
                provider: ctx.inner.provider.alloc_pd()?,
                ctx: ctx.clone(),
            }),
        })
    }

    /// The context the PD belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    /// A zeroed, page-aligned buffer of `len` bytes that the library allocates and registers.
    ///
    /// # Errors
    ///
    /// [`Error::Buf`](crate::Error::Buf) with [`BufError::TooLarge`](crate::BufError::TooLarge)
    /// when `len`, rounded up to whole pages, is more than an allocation can hold;
    /// [`Error::MemlockLimit`](crate::Error::MemlockLimit) when the locked-memory limit is too
    /// low; [`Error::Verbs`](crate::Error::Verbs) from `ibv_reg_mr`.
    pub fn alloc_buf(&self, len: usize, access: AccessFlags) -> Result<MrBuf> {
        MrBuf::new(self, Storage::pages(len)?, access)
    }

    /// A buffer of `len` bytes (rounded up to 2 MiB) backed by hugepages, registered.
    ///
    /// # Errors
    ///
    /// [`Error::NoHugepages`](crate::Error::NoHugepages) when the system has too few reserved
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
    ///   atomically, through a [`SharedMem`](zverbs_core::shared::SharedMem) of exactly
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

    /// A builder for an RC queue pair whose completions go to `send_cq` and `recv_cq` (which
    /// may be the same CQ).
    pub fn qp_builder<'a>(&'a self, send_cq: &'a Cq, recv_cq: &'a Cq) -> QpBuilder<'a> {
        QpBuilder::new(self, send_cq, recv_cq)
    }
}

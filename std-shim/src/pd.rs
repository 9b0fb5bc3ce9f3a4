//! Protection domains.

use std::sync::Arc;

use crate::device::Context;
use crate::error::Result;
use crate::provider::PdProvider;

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
/// use zverbs::{AccessFlags, Registered};
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

impl Context {
    /// A protection domain (`ibv_alloc_pd`).
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`](crate::Error::Verbs).
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::new(self)
    }
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

    /// Whether `other` is this PD (or a clone of it).
    pub(crate) fn is(&self, other: &Pd) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

//! Completion queues.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::backend::{BackendKind, BackendReport, BackendRequest, want_direct};
use crate::bindings::{Publisher, Tables};
use crate::channel::{CompChannel, CqEvents};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::provider::{CqEngine, CqProvider};

impl Context {
    /// A builder for a completion queue.
    pub fn cq_builder(&self) -> CqBuilder<'_> {
        CqBuilder::new(self)
    }
}

/// A builder for a [`Cq`].
#[derive(Debug)]
pub struct CqBuilder<'a> {
    ctx: &'a Context,
    cqe: u32,
    backend: Option<BackendRequest>,
    poll_batch: u32,
    timestamps: bool,
    channel: Option<CompChannel>,
    compressed: Option<zverbs_mlx5dv::prm::mini::MiniCqeFormat>,
}

impl<'a> CqBuilder<'a> {
    pub(crate) fn new(ctx: &'a Context) -> Self {
        Self {
            ctx,
            cqe: 256,
            backend: None,
            poll_batch: 32,
            timestamps: false,
            channel: None,
            compressed: None,
        }
    }

    /// Its completion events go to `channel` (of the same context), so that its poller can
    /// [`arm`](crate::Poller::arm) it and [`wait`](crate::Poller::wait_blocking) on it. One channel may serve
    /// several CQs.
    pub fn channel(mut self, channel: &CompChannel) -> Self {
        self.channel = Some(channel.clone());
        self
    }

    /// At least this many entries (default 256). Size it for every signaled send and every
    /// receive that may be outstanding on the QPs it serves.
    pub fn cqe(mut self, cqe: u32) -> Self {
        self.cqe = cqe;
        self
    }

    /// The backend, overriding the context's choice.
    pub fn backend(mut self, backend: BackendRequest) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Completions fetched per `ibv_poll_cq` call by the fallback (default 32; the size of
    /// the `ibv_wc` array allocated once).
    pub fn poll_batch(mut self, n: u32) -> Self {
        self.poll_batch = n.max(1);
        self
    }

    /// Completions carry the device clock when the device wrote them (default off): created
    /// with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`, polled with
    /// [`PollCqTimed::poll_timed`](zverbs_core::PollCqTimed::poll_timed), converted with
    /// [`Context::clock`]. [`PollCq::poll`](zverbs_core::PollCq::poll) costs the same either
    /// way. With a [`channel`](Self::channel) too, [`Poller::wait_timed`](crate::Poller::wait_timed) sleeps on it and
    /// returns the completions with their timestamps. `build` fails with
    /// [`Error::NoTimestamps`] on a device that cannot timestamp completions.
    pub fn timestamps(mut self, on: bool) -> Self {
        self.timestamps = on;
        self
    }

    /// The device compresses runs of similar completions into sessions of one full CQE and
    /// 8-byte mini-CQEs in `format` (`mlx5dv_create_cq` with
    /// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`): less PCIe traffic and fewer cache lines per
    /// completion, for receive-heavy queues. The poller expands the sessions: it returns the
    /// same completions, in the same order, as without compression; those of one session
    /// report the session's timestamp (its first completion's). `format` says what each
    /// mini-CQE carries besides the length (the receive hash, or the checksum), which a
    /// [`Completion`](zverbs_core::Completion) does not report: any format the device supports
    /// will do.
    ///
    /// Only the direct backend expands compressed CQEs (libibverbs' `ibv_poll_cq` does not), so
    /// `build` fails with [`Error::NoCqeCompression`] on the fallback (rxe, or the verbs
    /// backend asked for), on a device that does not compress CQEs or not in `format`, and
    /// with a [`channel`](Self::channel) on rdma-core devices. Never silently without it.
    pub fn compressed(mut self, format: zverbs_mlx5dv::prm::mini::MiniCqeFormat) -> Self {
        self.compressed = Some(format);
        self
    }

    /// Creates the CQ.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `ibv_create_cq`; [`Error::Backend`] when the direct backend was
    /// required and the CQ cannot be driven directly; [`Error::NoCqeCompression`] (see
    /// [`CqBuilder::compressed`]).
    pub fn build(self) -> Result<Cq> {
        let mut choice = self.ctx.backend_choice();
        if let Some(r) = self.backend {
            choice = crate::backend::BackendChoice {
                request: r,
                source: crate::backend::RequestSource::Caller,
            };
        }
        let support = self.ctx.inner.provider.direct_support();
        let direct = want_direct(choice, &support)?;
        let provider_ = &self.ctx.inner.provider;
        let compressed = match self.compressed {
            Some(_) if !direct => {
                return Err(Error::NoCqeCompression {
                    device: provider_.name().to_string(),
                    reason: format!(
                        "only the direct backend expands compressed CQEs, and the CQ would be \
                         polled by libibverbs ({:?} backend requested, {})",
                        choice.request,
                        match &support {
                            crate::backend::DirectSupport::Yes(s)
                            | crate::backend::DirectSupport::No(s) => s,
                        }
                    ),
                });
            }
            Some(f) => Some(provider_.create_cq_compressed(
                self.cqe,
                f,
                self.timestamps,
                self.channel.as_ref().map(|c| &*c.inner.provider),
            )?),
            None => None,
        };
        let (provider, note) = match compressed {
            Some(made) => made,
            None => match (&self.channel, self.timestamps) {
                (ch, true) => provider_.create_cq_timestamped(
                    self.cqe,
                    direct,
                    ch.as_ref().map(|c| &*c.inner.provider),
                )?,
                (Some(ch), false) => {
                    provider_.create_cq_on_channel(self.cqe, direct, &*ch.inner.provider)?
                }
                (None, false) => provider_.create_cq(self.cqe, direct)?,
            },
        };
        let events = match self.channel {
            Some(ch) => Some(CqEvents::new(ch, &*provider)?),
            None => None,
        };
        let engine = provider.engine();
        if self.compressed.is_some() && !engine.is_direct() {
            return Err(Error::NoCqeCompression {
                device: provider_.name().to_string(),
                reason: note.0,
            });
        }
        if choice.request == BackendRequest::Direct && !engine.is_direct() {
            return Err(Error::Backend {
                requested: BackendKind::Direct,
                reason: note.0,
            });
        }
        let kind = if engine.is_direct() {
            BackendKind::Direct
        } else {
            BackendKind::Verbs
        };
        let reason = match (&support, kind) {
            (crate::backend::DirectSupport::Yes(s), BackendKind::Direct) => {
                format!("{s}; {}", note.0)
            }
            (crate::backend::DirectSupport::Yes(s), BackendKind::Verbs) if direct => {
                format!("{s}, but {}", note.0)
            }
            (crate::backend::DirectSupport::Yes(s), BackendKind::Verbs) => {
                format!("{s}, but the verbs backend was requested; {}", note.0)
            }
            (crate::backend::DirectSupport::No(s), _) => format!("{s}; {}", note.0),
        };
        Ok(Cq {
            inner: Arc::new(CqInner {
                provider,
                ctx: self.ctx.clone(),
                report: BackendReport {
                    kind,
                    choice,
                    reason,
                    blueflame: None,
                },
                poll_batch: self.poll_batch,
                registry: Mutex::new(Registry::default()),
                tables: if kind == BackendKind::Direct {
                    Tables::Direct(Arc::<Publisher<_>>::default())
                } else {
                    Tables::Verbs(Arc::<Publisher<_>>::default())
                },
                events,
            }),
        })
    }
}

/// A completion queue. Cloning is cheap; the CQ is destroyed when the last clone, every QP
/// using it and its poller are gone.
///
/// # Example
///
/// Create the CQ, a QP that uses it, then take its poller (QPs created later join it): nothing
/// is ready yet.
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// use zverbs::{Completion, PollCq};
///
/// let cq = ctx.cq_builder().cqe(64).build()?; // room for at least 64 completions
/// let pd = ctx.alloc_pd()?;
/// let _qp = pd.qp_builder(&cq, &cq).build()?;
/// let mut poller = cq.poller()?; // one poller per CQ, driven by one thread at a time
/// let mut wc = [Completion::EMPTY; 16];
/// assert!(poller.poll_into(&mut wc).is_empty()); // never blocks
/// println!("{} entries, {}", cq.cqe(), cq.backend());
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Clone, Debug)]
pub struct Cq {
    pub(crate) inner: Arc<CqInner>,
}

#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// The QPs created on it, each a `qp::QpInner` (whose module stands above this one: the
    /// QP module builds the poller's tables from them, `qp::attached`).
    pub(crate) qps: Vec<Weak<dyn Any + Send + Sync>>,
    /// The receive work queues whose completions go to it.
    pub(crate) wqs: Vec<Weak<crate::bindings::WqBinding>>,
    pub(crate) poller_taken: bool,
    /// A striding work queue holds every entry: nothing else may complete on the CQ.
    pub(crate) exclusive: bool,
    /// An ordinary Ethernet receive queue of an rdma-core device completes on the direct
    /// poller as the CQ's one receive queue ([`Cq::claim_sole_receiver`]): no other queue may
    /// hold entries of the CQ.
    pub(crate) sole_receiver: bool,
    /// Entries held by the QPs and SRQs attached ([`Cq::hold`]): their receives and their
    /// signaled sends.
    pub(crate) held: u32,
}

#[derive(Debug)]
pub(crate) struct CqInner {
    // Field order is drop order: the CQ goes before its context.
    pub(crate) provider: Box<dyn CqProvider>,
    pub(crate) ctx: Context,
    pub(crate) report: BackendReport,
    pub(crate) poll_batch: u32,
    pub(crate) registry: Mutex<Registry>,
    /// Where the control path hands the poller its new tables (`bindings.rs`).
    pub(crate) tables: Tables,
    /// Its completion channel and arm, when created with one.
    pub(crate) events: Option<CqEvents>,
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // Every event taken for the CQ is acknowledged before it is destroyed (the provider
        // goes first among the fields).
        if let Some(e) = &self.events {
            e.release(&*self.provider);
        }
    }
}

impl Cq {
    /// Entries the CQ really has (at least the number asked for).
    pub fn cqe(&self) -> u32 {
        self.inner.provider.cqe()
    }

    /// The backend that polls it, and why.
    pub fn backend(&self) -> &BackendReport {
        &self.inner.report
    }

    /// Whether its completions carry the device clock ([`CqBuilder::timestamps`]).
    pub fn has_timestamps(&self) -> bool {
        self.inner.provider.timestamps()
    }

    /// The context it belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.ctx
    }

    pub(crate) fn engine(&self) -> CqEngine {
        self.inner.provider.engine()
    }

    pub(crate) fn is(&self, other: &Cq) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Entries no QP or SRQ attached to it holds yet: each QP created on it holds one per
    /// receive of its receive queue and one per signaled send it may have outstanding
    /// ([`QpBuilder::max_signaled`](crate::QpBuilder::max_signaled)), each SRQ one per receive.
    pub fn entries_left(&self) -> u32 {
        let held = self.registry().held;
        self.cqe().saturating_sub(held)
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner
            .registry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Holds `n` of its entries for `what` (a QP's receive queue or signaled sends, an SRQ's
    /// receives): every completion that can land in the CQ has an entry of its own, so none is
    /// ever lost to an overrun. Refused, holding nothing, when fewer are left.
    pub(crate) fn hold(&self, n: u32, what: &'static str) -> Result<()> {
        let cqe = self.cqe();
        let mut reg = self.registry();
        if reg.exclusive && n != 0 {
            return Err(Error::InvalidArgument(format!(
                "the CQ serves a striding work queue alone; give {what} a CQ of its own"
            )));
        }
        if reg.sole_receiver && n != 0 {
            return Err(Error::SoleReceiverCq {
                what,
                reason: SERVES_ONE.into(),
            });
        }
        let left = cqe.saturating_sub(reg.held);
        if n > left {
            return Err(Error::CqTooSmall {
                cqe,
                left,
                what,
                needed: n,
            });
        }
        reg.held += n;
        Ok(())
    }

    /// Gives back `n` entries [`Cq::hold`] held.
    pub(crate) fn release(&self, n: u32) {
        let mut reg = self.registry();
        reg.held = reg.held.saturating_sub(n);
    }

    /// Holds every entry for one queue that must complete on the CQ alone (a striding work
    /// queue, whose poll takes every receive completion as its own), after checking that
    /// `n` (its most completions outstanding) fit. Refused when anything else holds entries
    /// or the poller was taken. [`Cq::release_exclusive`] gives them back.
    pub(crate) fn hold_exclusive(&self, n: u32, what: &'static str) -> Result<()> {
        let cqe = self.cqe();
        let mut reg = self.registry();
        if reg.held != 0 || reg.exclusive || reg.sole_receiver || reg.poller_taken {
            return Err(Error::InvalidArgument(format!(
                "{what} needs a CQ of its own: this one serves other queues, or its poller was \
                 taken"
            )));
        }
        if n > cqe {
            return Err(Error::CqTooSmall {
                cqe,
                left: cqe,
                what,
                needed: n,
            });
        }
        reg.held = cqe;
        reg.exclusive = true;
        Ok(())
    }

    /// Gives back what [`Cq::hold_exclusive`] held.
    pub(crate) fn release_exclusive(&self) {
        let mut reg = self.registry();
        reg.held = 0;
        reg.exclusive = false;
    }

    /// Makes the CQ serve one ordinary Ethernet receive queue alone, on the direct poller:
    /// its receive completions name no queue that poller can read (the flow tag where the QP
    /// number would be, libmlx5's user index), so the poller takes each as that queue's
    /// (`CqBinding::SOLE_RECEIVER`). `owner` is the queue's QP or work queue (its address in
    /// the registry), `own` the entries it holds of the CQ, `mark` its flag that the poller's
    /// table reads ([`direct_table`](crate::qp::direct_table)). Refused when anything else
    /// is attached or holds entries; from then on [`Cq::hold`] refuses every other queue.
    /// Asking again for the same queue is a no-op.
    pub(crate) fn claim_sole_receiver(
        &self,
        owner: *const (),
        own: u32,
        mark: &AtomicBool,
        what: &'static str,
    ) -> Result<()> {
        let mut reg = self.registry();
        if mark.load(Ordering::Acquire) {
            return Ok(());
        }
        let other_qp = reg
            .qps
            .iter()
            .filter_map(Weak::upgrade)
            .any(|q| Arc::as_ptr(&q).cast::<()>() != owner);
        let other_wq = reg
            .wqs
            .iter()
            .filter_map(Weak::upgrade)
            .any(|w| Arc::as_ptr(&w).cast::<()>() != owner);
        if reg.exclusive || reg.sole_receiver || other_qp || other_wq || reg.held != own {
            return Err(Error::SoleReceiverCq {
                what,
                reason: format!(
                    "on the direct backend an ordinary Ethernet receive queue's completions name \
                     it only by a user index libmlx5 chose, so its CQ must serve it alone, and \
                     this one serves other queues ({} entries held, {own} of them its own); \
                     create a CQ for it alone (its QP's sends may share it), receive through a \
                     striding work queue (WorkQueue::striding_queue), or poll the CQ with the \
                     verbs backend (CqBuilder::backend)",
                    reg.held
                ),
            });
        }
        reg.sole_receiver = true;
        mark.store(true, Ordering::Release);
        let reached = crate::qp::republish(self, &mut reg);
        drop(reg);
        drop(reached);
        Ok(())
    }

    /// Ends what [`Cq::claim_sole_receiver`] made (its queue goes).
    pub(crate) fn release_sole_receiver(&self) {
        self.registry().sole_receiver = false;
    }
}

/// Why [`Cq::hold`] refuses a queue on a CQ that serves one Ethernet receive queue alone.
const SERVES_ONE: &str = "the CQ completes the receives of an ordinary Ethernet receive queue \
    alone on the direct backend (on an rdma-core device their completions name no queue the \
    direct poller can read, so it takes each as that queue's); create another CQ for this queue";

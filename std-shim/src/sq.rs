//! The send queue: one type for every transport (RC, UD, DC) and both backends.
//!
//! [`SendQueue`] is what [`Qp::send_queue`](crate::Qp::send_queue) and
//! [`Qp::queues`](crate::Qp::queues) hand out. Its operations post spans of buffers the library
//! allocated ([`BufSlice`]) and inline bytes, with no `unsafe` at the call site (see
//! [`safe`](crate::safe) for why that is enough); a UD request names its destination
//! ([`UdTarget`]), a DC request its target ([`SendQueue::to`] with a [`DcPeer`]); a prepared
//! request is built once from checked buffers and posted with only what changes
//! ([`SendQueue::prepare_write`], [`SendQueue::post_prepared`]); and
//! [`SendQueue::post`](PostSend::post) (`unsafe`) takes any [`SendWr`] over memory the caller
//! vouches for.
//!
//! Inside, it holds the typed queue of its backend ([`crate::backend::mlx5::SendQueue`] of the
//! QP's transport, or [`crate::backend::verbs::SendQueue`]) and each post is one `match` on it,
//! straight into that backend's post: the path of one RDMA WRITE is written out in
//! `docs/architecture.md`.

use std::marker::PhantomData;
use std::sync::Arc;

use zverbs_core::{
    BatchError, DcDest, PostError, PostSend, RemoteBuf, SendFlags, SendWr, Sge, SqCaps, UdDest,
};
use zverbs_mlx5dv::{
    Connected, Datagram, Dci, Ethernet, FRAME_HEADERS_MAX, FrameLengths, PreparedRdma, PreparedSend,
};

use crate::dc::DcPeer;
use crate::error::{Result, SafePostError};
use crate::fallback;
use crate::mr::MrBuf;
use crate::pd::Pd;
use crate::qp::{QpData, QpInner};
use crate::queues::{direct, no_entry, qp_ptr};
use crate::safe::BufSlice;
use crate::types::backend::BackendKind;
use crate::ud::{AddressHandle, UdTarget};

/// The send operations, each building its request and handing it to `$submit` (post and ring,
/// or stage): written once for [`SendQueue`], [`Batch`] and [`To`].
macro_rules! send_ops {
    ($what:literal) => {
        #[doc = concat!("RDMA WRITE of `local` to `remote`: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// [`SafePostError::Post`] when the queue refuses it.
        #[inline(always)]
        pub fn write(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge()];
            self.submit(&SendWr::write(wr_id, &sgl, remote).with_flags(flags))
        }

        #[doc = concat!("RDMA WRITE with immediate: ", $what, ". The peer's receive completion carries `imm`, and consumes one of its receive requests: without one posted, the peer answers \"receiver not ready\" and the request fails once the QP's `rnr_retry` is spent (see [`ConnectAttr`](crate::ConnectAttr)).")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::write`].
        #[inline(always)]
        pub fn write_imm(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            imm: u32,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge()];
            self.submit(&SendWr::write_imm(wr_id, &sgl, remote, imm).with_flags(flags))
        }

        #[doc = concat!("RDMA WRITE of `data`, copied into the request (inline): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::write`] (including `InlineTooLarge`).
        #[inline(always)]
        pub fn write_inline(
            &mut self,
            wr_id: u64,
            data: &[u8],
            remote: RemoteBuf,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [Sge::from_slice(data, 0)];
            self.submit(&SendWr::write(wr_id, &sgl, remote).with_flags(flags | SendFlags::INLINE))
        }

        #[doc = concat!("SEND of `local` into the peer's next receive request: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::write`].
        #[inline(always)]
        pub fn send(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge()];
            self.submit(&SendWr::send(wr_id, &sgl).with_flags(flags))
        }

        #[doc = concat!("SEND with immediate: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::write`].
        #[inline(always)]
        pub fn send_imm(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            imm: u32,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge()];
            self.submit(&SendWr::send_imm(wr_id, &sgl, imm).with_flags(flags))
        }

        #[doc = concat!("UD SEND of `local` to `dest` ([`AddressHandle::target`](crate::AddressHandle::target)): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::write`]; [`PostError::WrongTransport`] on an RC QP,
        /// [`PostError::DatagramTooLong`] for more than the path MTU.
        #[inline(always)]
        pub fn send_to(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            dest: &UdTarget,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge()];
            self.submit(&SendWr::send_to(wr_id, &sgl, dest.dest()).with_flags(flags))
        }

        #[doc = concat!("UD SEND with immediate: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::send_to`].
        #[inline(always)]
        pub fn send_to_imm(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            dest: &UdTarget,
            imm: u32,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge()];
            self.submit(&SendWr::send_to_imm(wr_id, &sgl, dest.dest(), imm).with_flags(flags))
        }

        #[doc = concat!("SEND of `data`, copied into the request (inline): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::write_inline`].
        #[inline(always)]
        pub fn send_inline(
            &mut self,
            wr_id: u64,
            data: &[u8],
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [Sge::from_slice(data, 0)];
            self.submit(&SendWr::send(wr_id, &sgl).with_flags(flags | SendFlags::INLINE))
        }

        #[doc = concat!("RDMA READ of `remote` into `local`: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// [`SafePostError::NotWritable`] unless `local`'s buffer has `LOCAL_WRITE`; as
        /// [`SendQueue::write`].
        #[inline(always)]
        pub fn read(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.writable()?];
            self.submit(&SendWr::read(wr_id, &sgl, remote).with_flags(flags))
        }

        #[doc = concat!("Atomic fetch-and-add of `add` at `remote` (8 bytes, 8-byte aligned); the old value lands in `local` (8 bytes): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::read`] (including `AtomicSize`, `AtomicAlignment`).
        #[inline(always)]
        pub fn fetch_add(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            add: u64,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let local = local.writable()?;
            self.submit(&SendWr::fetch_add(wr_id, local, remote, add).with_flags(flags))
        }

        #[doc = concat!("Atomic compare-and-swap at `remote`: `swap` is stored if it holds `compare`; the old value lands in `local` (8 bytes): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SendQueue::fetch_add`].
        #[inline(always)]
        pub fn compare_swap(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            compare: u64,
            swap: u64,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let local = local.writable()?;
            self.submit(&SendWr::compare_swap(wr_id, local, remote, compare, swap).with_flags(flags))
        }
    };
}

/// The typed queue a [`SendQueue`] drives, by backend and transport
/// ([`SendQueue::into_typed`]): for a loop monomorphised for one of them.
#[derive(Debug)]
pub enum TypedSq {
    /// An RC QP's, driven directly.
    Rc(direct::SendQueue<Connected>),
    /// A UD QP's, driven directly.
    Ud(direct::SendQueue<Datagram>),
    /// A DC initiator's, driven directly (each request names its target).
    Dc(direct::SendQueue<Dci>),
    /// A raw packet QP's, driven directly (each SEND one whole Ethernet frame).
    Eth(direct::SendQueue<Ethernet>),
    /// Driven through libibverbs (RC or UD).
    Verbs(fallback::SendQueue),
}

/// A QP's send queue, whichever its transport and backend: RDMA WRITE (with immediate), SEND
/// (with immediate), READ, the atomics, UD sends ([`SendQueue::send_to`]), DC requests
/// ([`SendQueue::to`]), prepared requests ([`SendQueue::prepare_write`]) and, `unsafe`, any
/// [`SendWr`] ([`PostSend::post`]).
///
/// Each operation posts one request **and rings the doorbell**; [`SendQueue::batch`] stages
/// several behind one doorbell. Keeps its QP (and so its CQs, PD and context) alive.
///
/// # Example
///
/// `a` and `b` are two connected QPs, `buf_a` and `buf_b` a buffer on each side (set up as in
/// [`Qp`](crate::Qp)'s example):
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// # let pd = ctx.alloc_pd()?;
/// # let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// # let (a, b) = (pd.qp_builder(&cq_a, &cq_a).build()?, pd.qp_builder(&cq_b, &cq_b).build()?);
/// # zverbs::connect_pair(&a, &b)?;
/// # let buf_a = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// # let buf_b = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// use std::time::{Duration, Instant};
/// use zverbs::{Registered, SendFlags};
///
/// let mut qa = a.queues(&cq_a)?; // `qa.sq` is a `SendQueue`
/// buf_a.write(0, b"written")?;
/// qa.sq.write(1, buf_a.slice(0..7)?, buf_b.remote(64)?, SendFlags::NONE)?; // posted, rung
/// qa.sq.write_inline(2, b"inline", buf_b.remote(128)?, SendFlags::SIGNALED)?; // no buffer needed
/// let mut batch = qa.sq.batch(); // two requests, one doorbell
/// batch.write(3, buf_a.slice(0..7)?, buf_b.remote(256)?, SendFlags::NONE)?;
/// batch.write(4, buf_a.slice(0..7)?, buf_b.remote(320)?, SendFlags::SIGNALED)?;
/// batch.finish();
/// let deadline = Instant::now() + Duration::from_secs(5);
/// for c in qa.cq.wait(2, deadline)? {
///     c.ok()?; // only signaled requests complete: 2 and 4
/// }
/// let mut got = [0; 6];
/// buf_b.read(128, &mut got)?;
/// assert_eq!(&got, b"inline");
/// // A span the device would have to write into a read-only buffer is refused, not posted.
/// let ro = pd.alloc_buf(64, zverbs::AccessFlags::REMOTE_READ)?;
/// assert!(qa.sq.read(5, ro.slice(..)?, buf_b.remote(0)?, SendFlags::SIGNALED).is_err());
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug)]
pub struct SendQueue {
    e: TypedSq,
}

impl SendQueue {
    /// The send queue of `qp`, typed by its backend and transport.
    pub(crate) fn new(qp: &Arc<QpInner>) -> Result<Self> {
        let e = match &qp.data {
            QpData::Direct(d) if qp.qp_type == crate::types::qp::QpType::RawPacket => {
                let (layout, caps, state) = (&d.layout, qp.send_caps(), d.sq_state.clone());
                let min_inline = qp.raw.map_or(18, |r| r.min_inline);
                // SAFETY: as for an RC QP below, for a raw packet QP (its caps' transport is
                // Ethernet); the frames the safe operations post are spans of `MrBuf`s, host
                // memory the CPU reads (the minimum inline bytes are copied from it).
                let q = unsafe {
                    zverbs_mlx5dv::SendQueue::new_eth(
                        layout,
                        caps,
                        min_inline,
                        state,
                        d.register.shared(),
                    )?
                };
                TypedSq::Eth(direct::SendQueue { q, _qp: qp.clone() })
            }
            QpData::Direct(d) if qp.qp_type == crate::types::qp::QpType::Dci => {
                let (layout, caps, state) = (&d.layout, qp.sq_caps, d.sq_state.clone());
                // SAFETY: the layout is the device's for this live DCI, kept alive by the
                // `Arc` held beside the queue (dropped after it); this is the QP's only send
                // queue handle (taken once) and nothing else posts to it; the caps are the
                // QP's; its state is bound to its send CQ's poller only; the QP is new (or
                // reset, which its gate tells the queue); it was created without
                // scatter-to-CQE. The register: as for an RC QP below.
                let q = unsafe {
                    zverbs_mlx5dv::SendQueue::new_dc(layout, caps, state, d.register.shared())?
                };
                TypedSq::Dc(direct::SendQueue { q, _qp: qp.clone() })
            }
            QpData::Direct(d) if qp.send_caps().is_ud() => {
                let (layout, caps, state) = (&d.layout, qp.send_caps(), d.sq_state.clone());
                // SAFETY: as for an RC QP below; the QP is UD and its caps say so.
                let q = unsafe {
                    zverbs_mlx5dv::SendQueue::new_ud(layout, caps, state, d.register.shared())?
                };
                TypedSq::Ud(direct::SendQueue { q, _qp: qp.clone() })
            }
            QpData::Direct(d) => {
                let (layout, caps, state) = (&d.layout, qp.sq_caps, d.sq_state.clone());
                // SAFETY: the layout is libmlx5's for this live QP, kept alive by the `Arc` the
                // handle holds beside the queue (dropped after it); this is the QP's only send
                // queue handle (taken once) and libibverbs never posts to it; the caps are the
                // QP's, its state is bound to its send CQ's poller only; the QP is new; it was
                // created without scatter-to-CQE. The register: the provider vouched that a
                // dedicated one is this QP's alone (and 8-byte doorbells alone cannot tear);
                // every direct QP of this process on a shared one holds the same `SharedBf`
                // (one per address, `blueflame::join`), which the QP, kept alive by the handle,
                // keeps alive.
                let q = unsafe {
                    zverbs_mlx5dv::SendQueue::new(layout, caps, state, d.register.shared())?
                };
                TypedSq::Rc(direct::SendQueue { q, _qp: qp.clone() })
            }
            QpData::Verbs(v) => {
                let ptr = qp_ptr(qp)?;
                // SAFETY: a live QP kept alive by the `Arc` the queue holds; the only send
                // queue handle; the QP's real caps; the state made for it and bound to its send
                // CQ only.
                let q = unsafe {
                    fallback::SendQueue::new(ptr, qp.caps.max_send_wr, qp.send_caps(), v.sq.clone())
                }
                .ok_or_else(|| no_entry("post_send"))?;
                TypedSq::Verbs(q.keep_alive(qp.clone()))
            }
        };
        Ok(Self { e })
    }

    /// The typed queue inside, for a loop monomorphised for its backend and transport.
    pub fn into_typed(self) -> TypedSq {
        self.e
    }

    /// The typed queue inside (counters, BlueFlame).
    pub fn typed(&self) -> &TypedSq {
        &self.e
    }

    /// Which backend drives it.
    pub fn kind(&self) -> BackendKind {
        match self.e {
            TypedSq::Verbs(_) => BackendKind::Verbs,
            _ => BackendKind::Direct,
        }
    }

    /// The limits it enforces (scatter entries, inline bytes, transport).
    pub fn caps(&self) -> SqCaps {
        match &self.e {
            TypedSq::Rc(q) => q.q.caps(),
            TypedSq::Ud(q) => q.q.caps(),
            TypedSq::Dc(q) => q.q.caps(),
            TypedSq::Eth(q) => q.q.caps(),
            TypedSq::Verbs(q) => q.caps(),
        }
    }

    /// The refusal the provider made at the last ring, if any (the libibverbs fallback's: see
    /// [`crate::backend::verbs`]); always `None` on the direct backend.
    pub fn take_ring_error(&mut self) -> Option<fallback::RingError> {
        match &mut self.e {
            TypedSq::Verbs(q) => q.take_ring_error(),
            _ => None,
        }
    }

    /// Rings the doorbell for the requests staged since the last ring (`unsafe`
    /// [`PostSend::stage`], [`SendQueue::stage_to`]); a [`Batch`] rings by itself.
    #[inline(always)]
    pub fn ring(&mut self) {
        PostSend::ring(self)
    }

    /// A batch: the same operations, staged; one doorbell rings for all of them when the batch
    /// is [finished](Batch::finish) or dropped.
    pub fn batch(&mut self) -> Batch<'_> {
        Batch { sq: self }
    }

    /// The DC target `peer` ([`Pd::dc_peer`](crate::Pd::dc_peer)) as the destination of the
    /// operations of the returned handle (the same methods as this queue's): for a DC
    /// initiator's queue; elsewhere each post is refused with [`PostError::WrongTransport`].
    pub fn to<'q, 'p>(&'q mut self, peer: &'p DcPeer) -> To<'q, 'p> {
        To {
            sq: self,
            peer,
            stage: false,
        }
    }

    /// Posts `wr` to the DC target `peer` and rings the doorbell.
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend::post`]: the request's local entries name memory
    /// registered with this device that stays valid (and, for READ and atomic results,
    /// untouched) until the request completes; inline sources are readable.
    ///
    /// # Errors
    ///
    /// As [`PostSend::post`] on an RC QP; [`PostError::WrongTransport`] on a queue that is not
    /// a DC initiator's, or for a datagram SEND. A refused request writes nothing.
    #[inline(always)]
    pub unsafe fn post_to(&mut self, peer: &DcPeer, wr: &SendWr<'_>) -> Result<(), PostError> {
        match &mut self.e {
            // SAFETY: (caller) the posting contract; the peer's address vector is an address
            // handle's, which the peer holds.
            TypedSq::Dc(q) => unsafe { q.q.post_to(peer.dest(), wr) },
            _ => Err(PostError::WrongTransport),
        }
    }

    /// As [`SendQueue::post_to`], without ringing: the next post or [`PostSend::ring`] rings it.
    ///
    /// # Safety
    ///
    /// As [`SendQueue::post_to`].
    ///
    /// # Errors
    ///
    /// As [`SendQueue::post_to`].
    #[inline(always)]
    pub unsafe fn stage_to(&mut self, peer: &DcPeer, wr: &SendWr<'_>) -> Result<(), PostError> {
        match &mut self.e {
            // SAFETY: as in `post_to`.
            TypedSq::Dc(q) => unsafe { q.q.stage_to(peer.dest(), wr) },
            _ => Err(PostError::WrongTransport),
        }
    }

    /// The safe operations' one post, straight into the backend's: the request's local
    /// entries are checked spans of `MrBuf`s or inline bytes.
    #[inline(always)]
    fn submit(&mut self, wr: &SendWr<'_>) -> Result<(), SafePostError> {
        // SAFETY (each arm): every local entry is a bounds-checked span of an `MrBuf` with its
        // own key (see `safe`'s docs: such memory is never referenced by Rust and is
        // deregistered before it is freed); inline sources are `&[u8]` live for this call.
        let r = match &mut self.e {
            // SAFETY: as above.
            TypedSq::Rc(q) => unsafe { q.q.post(wr) },
            // SAFETY: as above.
            TypedSq::Ud(q) => unsafe { q.q.post(wr) },
            TypedSq::Dc(_) => Err(PostError::WrongTransport),
            // SAFETY: as above.
            TypedSq::Eth(q) => unsafe { q.q.post(wr) },
            // SAFETY: as above.
            TypedSq::Verbs(q) => unsafe { q.post(wr) },
        };
        r.map_err(Into::into)
    }

    send_ops!("posted, and the doorbell rung");
}

impl From<TypedSq> for SendQueue {
    fn from(e: TypedSq) -> Self {
        Self { e }
    }
}

impl From<direct::SendQueue<Connected>> for SendQueue {
    fn from(q: direct::SendQueue<Connected>) -> Self {
        Self { e: TypedSq::Rc(q) }
    }
}

impl From<direct::SendQueue<Datagram>> for SendQueue {
    fn from(q: direct::SendQueue<Datagram>) -> Self {
        Self { e: TypedSq::Ud(q) }
    }
}

impl From<direct::SendQueue<Dci>> for SendQueue {
    fn from(q: direct::SendQueue<Dci>) -> Self {
        Self { e: TypedSq::Dc(q) }
    }
}

impl From<direct::SendQueue<Ethernet>> for SendQueue {
    fn from(q: direct::SendQueue<Ethernet>) -> Self {
        Self { e: TypedSq::Eth(q) }
    }
}

impl From<fallback::SendQueue> for SendQueue {
    fn from(q: fallback::SendQueue) -> Self {
        Self {
            e: TypedSq::Verbs(q),
        }
    }
}

/// Every post is one `match` on the typed queue, straight into its backend's post.
impl PostSend for SendQueue {
    #[inline(always)]
    unsafe fn stage(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        match &mut self.e {
            // SAFETY: (caller) the posting contract, the typed queue's.
            TypedSq::Rc(q) => unsafe { q.q.stage(wr) },
            // SAFETY: as above.
            TypedSq::Ud(q) => unsafe { q.q.stage(wr) },
            TypedSq::Dc(_) => Err(PostError::WrongTransport),
            // SAFETY: as above.
            TypedSq::Eth(q) => unsafe { q.q.stage(wr) },
            // SAFETY: as above.
            TypedSq::Verbs(q) => unsafe { q.stage(wr) },
        }
    }

    #[inline(always)]
    fn ring(&mut self) {
        match &mut self.e {
            TypedSq::Rc(q) => q.q.ring(),
            TypedSq::Ud(q) => q.q.ring(),
            TypedSq::Dc(q) => q.q.ring(),
            TypedSq::Eth(q) => q.q.ring(),
            TypedSq::Verbs(q) => q.ring(),
        }
    }

    #[inline(always)]
    unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
        match &mut self.e {
            // SAFETY: (caller) the posting contract, the typed queue's.
            TypedSq::Rc(q) => unsafe { q.q.post_all(wrs) },
            // SAFETY: as above.
            TypedSq::Ud(q) => unsafe { q.q.post_all(wrs) },
            TypedSq::Dc(_) if wrs.is_empty() => Ok(()),
            TypedSq::Dc(_) => Err(BatchError {
                index: 0,
                error: PostError::WrongTransport,
            }),
            // SAFETY: as above.
            TypedSq::Eth(q) => unsafe { q.q.post_all(wrs) },
            // SAFETY: as above.
            TypedSq::Verbs(q) => unsafe { q.post_all(wrs) },
        }
    }

    /// Posts `wr` and rings. On a DC initiator's queue a request needs its target:
    /// [`SendQueue::post_to`]; here it is refused with [`PostError::WrongTransport`].
    #[inline(always)]
    unsafe fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        match &mut self.e {
            // SAFETY: (caller) the posting contract, the typed queue's.
            TypedSq::Rc(q) => unsafe { q.q.post(wr) },
            // SAFETY: as above.
            TypedSq::Ud(q) => unsafe { q.q.post(wr) },
            TypedSq::Dc(_) => Err(PostError::WrongTransport),
            // SAFETY: as above.
            TypedSq::Eth(q) => unsafe { q.q.post(wr) },
            // SAFETY: as above.
            TypedSq::Verbs(q) => unsafe { q.post(wr) },
        }
    }
}

/// A [`SendQueue`]'s operations addressed to one DC target ([`SendQueue::to`],
/// [`Batch::to`]): the same methods, each request carrying the target.
#[derive(Debug)]
pub struct To<'q, 'p> {
    sq: &'q mut SendQueue,
    peer: &'p DcPeer,
    /// Stage (in a batch) rather than post and ring.
    stage: bool,
}

impl<'p> To<'_, 'p> {
    #[inline(always)]
    fn submit(&mut self, wr: &SendWr<'_>) -> Result<(), SafePostError> {
        // SAFETY: as in `SendQueue::submit`: the safe operations' entries are checked spans of
        // `MrBuf`s or inline bytes live for this call.
        let r = unsafe {
            if self.stage {
                self.sq.stage_to(self.peer, wr)
            } else {
                self.sq.post_to(self.peer, wr)
            }
        };
        r.map_err(Into::into)
    }

    send_ops!("posted to the DC target, and the doorbell rung (staged in a batch)");

    /// Prepares an RDMA WRITE of (parts of) `local` to `remote` (and past it) on the DC
    /// target, for [`SendQueue::post_prepared`]: the request carries its target (it borrows
    /// the [`DcPeer`]).
    ///
    /// # Errors
    ///
    /// What posting the request would return for the request itself (the queue's limits);
    /// [`PostError::WrongTransport`] on a queue that is not a DC initiator's;
    /// [`SafePostError::ForeignTarget`] for a peer made in another PD than the queue's QP.
    pub fn prepare_write<'b>(
        &self,
        local: BufSlice<'b>,
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError>
    where
        'p: 'b,
    {
        self.prepare(local.sge(), remote, PrepOp::Write, flags)
    }

    /// Prepares an RDMA WRITE with immediate on the DC target (each post gives its immediate).
    ///
    /// # Errors
    ///
    /// As [`To::prepare_write`].
    pub fn prepare_write_imm<'b>(
        &self,
        local: BufSlice<'b>,
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError>
    where
        'p: 'b,
    {
        self.prepare(local.sge(), remote, PrepOp::WriteImm, flags)
    }

    /// Prepares an RDMA READ of `remote` (and past it) on the DC target into (parts of)
    /// `local`.
    ///
    /// # Errors
    ///
    /// [`SafePostError::NotWritable`] unless `local`'s buffer has `LOCAL_WRITE`; as
    /// [`To::prepare_write`].
    pub fn prepare_read<'b>(
        &self,
        local: BufSlice<'b>,
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError>
    where
        'p: 'b,
    {
        self.prepare(local.writable()?, remote, PrepOp::Read, flags)
    }

    /// Prepares a SEND of (parts of) `local` into the DC target's next receive (from its SRQ).
    ///
    /// # Errors
    ///
    /// As [`To::prepare_write`].
    pub fn prepare_send<'b>(
        &self,
        local: BufSlice<'b>,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError>
    where
        'p: 'b,
    {
        self.prepare(local.sge(), RemoteBuf::new(0, 0), PrepOp::Send, flags)
    }

    /// Prepares a SEND with immediate to the DC target (each post gives its immediate).
    ///
    /// # Errors
    ///
    /// As [`To::prepare_write`].
    pub fn prepare_send_imm<'b>(
        &self,
        local: BufSlice<'b>,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError>
    where
        'p: 'b,
    {
        self.prepare(local.sge(), RemoteBuf::new(0, 0), PrepOp::SendImm, flags)
    }

    fn prepare<'b>(
        &self,
        local: Sge,
        remote: RemoteBuf,
        op: PrepOp,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError>
    where
        'p: 'b,
    {
        let target = Target::Dc(self.peer.dest());
        let ah = self.peer.address_handle();
        self.sq.prepare(local, remote, op, flags, target, Some(ah))
    }
}

/// Requests staged on a [`SendQueue`] behind one doorbell ([`SendQueue::batch`]): the queue's
/// operations under the same names, each staging its request; the doorbell rings once for all
/// of them when the batch is [finished](Batch::finish) or dropped (also when a `?` leaves
/// early: what was staged before the error is rung).
///
/// A batch that is created and not used is a warning (`unused_must_use`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// fn f(sq: &mut zverbs::SendQueue) {
///     sq.batch(); // error: unused `Batch` that must be used
/// }
/// ```
#[must_use = "a batch stages requests and rings when it is finished or dropped; post to it, then \
              call `finish`"]
#[derive(Debug)]
pub struct Batch<'q> {
    sq: &'q mut SendQueue,
}

impl Batch<'_> {
    #[inline(always)]
    fn submit(&mut self, wr: &SendWr<'_>) -> Result<(), SafePostError> {
        // SAFETY: as in `SendQueue::submit`.
        unsafe { PostSend::stage(self.sq, wr) }.map_err(Into::into)
    }

    send_ops!("staged, rung when the batch is finished or dropped");

    /// The DC target `peer` as the destination of requests staged in this batch.
    pub fn to<'b, 'p>(&'b mut self, peer: &'p DcPeer) -> To<'b, 'p> {
        To {
            sq: self.sq,
            peer,
            stage: true,
        }
    }

    /// Rings the doorbell once for every request staged (what dropping the batch does too;
    /// this says so where it happens).
    pub fn finish(self) {}
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        self.sq.ring();
    }
}

/// The operation of a [`Prepared`] request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PrepOp {
    Write,
    WriteImm,
    Read,
    Send,
    SendImm,
}

/// Where a [`Prepared`] request goes.
#[derive(Clone, Copy, Debug)]
enum Target<'b> {
    /// The queue's one peer (RC), or the frame's addresses (raw packet).
    Peer,
    /// A UD destination, borrowed from its [`UdTarget`].
    Ud(&'b UdDest),
    /// A DC target, borrowed from its [`DcPeer`].
    Dc(&'b DcDest),
}

/// What the direct backend built once for a [`Prepared`] request.
#[derive(Clone, Copy, Debug)]
enum Built {
    Rdma(PreparedRdma),
    Send(PreparedSend),
    /// Served by ordinary posts (the fallback, and the transports the direct backend does not
    /// prepare).
    Ordinary,
}

/// A request prepared once from a checked buffer span, then posted any number of times with
/// what changes ([`SendQueue::post_prepared`]): on an RC queue by [`SendQueue::prepare_write`]
/// and the others, on a UD queue by [`SendQueue::prepare_send_to`] (and `_imm`), on a DC
/// initiator's by [`To::prepare_write`] and the others (`sq.to(&peer).prepare_write(..)`).
///
/// On an RC queue driven directly the invariant part of its WQE is built once, in device byte
/// order, and a post converts only what changes (`zverbs_mlx5dv`'s `Prepared`). UD and DC
/// requests on the direct backend, and every request on the fallback, are checked once when
/// prepared and served by the queue's ordinary post with the target (the WQE built by the
/// ordinary path: not cached). Borrows the buffer it was prepared from, so that every post's
/// span lies in a live registration, and the [`UdTarget`] or [`DcPeer`] it goes to, so that
/// the address handle it names lives as long.
///
/// A UD request prepared and posted on the software device:
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// use std::time::{Duration, Instant};
/// use zverbs::{AccessFlags, AhAttr, Changes, Registered, SendFlags, UdAttr};
///
/// let pd = ctx.alloc_pd()?;
/// let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// let a = pd.qp_builder(&cq_a, &cq_a).ud().build()?;
/// let b = pd.qp_builder(&cq_b, &cq_b).ud().build()?;
/// a.ready_ud(&UdAttr::new(0x1111))?;
/// b.ready_ud(&UdAttr::new(0x1111))?;
/// let port = ctx.active_port()?;
/// let ah = pd.create_ah(&AhAttr { dlid: ctx.port(port)?.lid, port, ..AhAttr::default() })?;
/// let to_b = ah.target(b.qpn(), 0x1111);
/// let buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
/// let (mut qa, mut qb) = (a.queues(&cq_a)?, b.queues(&cq_b)?);
/// buf.write(0, b"datagram")?;
/// let p = qa.sq.prepare_send_to(&to_b, buf.slice(0..8)?, SendFlags::SIGNALED)?;
/// qb.rq.post(1, buf.slice(1024..2048)?)?; // 40 bytes for the GRH, then the payload
/// qa.sq.post_prepared(&p, Changes::new(2).local(0, 4))?; // the first 4 bytes
/// let deadline = Instant::now() + Duration::from_secs(5);
/// qa.cq.wait(1, deadline)?[0].ok()?;
/// assert_eq!(qb.cq.wait(1, deadline)?[0].ok()?.byte_len, 40 + 4);
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Prepared<'b> {
    /// The prepared span: every post's local span lies in it.
    local: Sge,
    /// The remote buffer a post's remote offset is added to (RDMA operations).
    remote: RemoteBuf,
    op: PrepOp,
    flags: SendFlags,
    /// The queue it was prepared for (its QP number).
    qpn: u32,
    built: Built,
    target: Target<'b>,
    _buf: PhantomData<&'b MrBuf>,
}

impl Prepared<'_> {
    /// The length of the prepared span: a post may name any part of it.
    pub fn span(&self) -> u32 {
        self.local.length
    }
}

/// What a post of a [`Prepared`] request gives: everything that may change from one post to
/// the next. [`Changes::new`] posts the whole prepared span to the remote buffer's start.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Changes {
    /// Returned unchanged in the request's completion.
    pub wr_id: u64,
    /// Where the local span starts, in the prepared span.
    pub offset: u32,
    /// The local span's length (`None`: to the end of the prepared span).
    pub len: Option<u32>,
    /// Added to the prepared remote address (RDMA operations; ignored by SENDs).
    pub remote_offset: u64,
    /// The immediate (the operations with one; ignored by the others).
    pub imm: u32,
}

impl Changes {
    /// A post of the whole prepared span, to the prepared remote address, as `wr_id`.
    #[inline(always)]
    pub const fn new(wr_id: u64) -> Self {
        Self {
            wr_id,
            offset: 0,
            len: None,
            remote_offset: 0,
            imm: 0,
        }
    }

    /// `len` bytes from `offset` of the prepared span.
    #[inline(always)]
    pub const fn local(mut self, offset: u32, len: u32) -> Self {
        self.offset = offset;
        self.len = Some(len);
        self
    }

    /// `offset` bytes past the prepared remote address.
    #[inline(always)]
    pub const fn remote_offset(mut self, offset: u64) -> Self {
        self.remote_offset = offset;
        self
    }

    /// The immediate value.
    #[inline(always)]
    pub const fn imm(mut self, imm: u32) -> Self {
        self.imm = imm;
        self
    }
}

impl SendQueue {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        match &self.e {
            TypedSq::Rc(q) => q.q.qpn(),
            TypedSq::Ud(q) => q.q.qpn(),
            TypedSq::Dc(q) => q.q.qpn(),
            TypedSq::Eth(q) => q.q.qpn(),
            TypedSq::Verbs(q) => q.qpn(),
        }
    }

    /// Prepares an RDMA WRITE of (parts of) `local` to `remote` (and past it), for
    /// [`SendQueue::post_prepared`]. A DC initiator's requests are prepared to their target
    /// ([`To::prepare_write`]), a UD queue's SENDs to theirs ([`SendQueue::prepare_send_to`]).
    ///
    /// # Errors
    ///
    /// What posting the request would return for the request itself (the queue's limits and
    /// transport: [`PostError::WrongTransport`] on a UD or DC queue).
    pub fn prepare_write<'b>(
        &self,
        local: BufSlice<'b>,
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError> {
        self.prepare(
            local.sge(),
            remote,
            PrepOp::Write,
            flags,
            Target::Peer,
            None,
        )
    }

    /// Prepares an RDMA WRITE with immediate (each post gives its immediate).
    ///
    /// # Errors
    ///
    /// As [`SendQueue::prepare_write`].
    pub fn prepare_write_imm<'b>(
        &self,
        local: BufSlice<'b>,
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError> {
        self.prepare(
            local.sge(),
            remote,
            PrepOp::WriteImm,
            flags,
            Target::Peer,
            None,
        )
    }

    /// Prepares an RDMA READ of `remote` (and past it) into (parts of) `local`.
    ///
    /// # Errors
    ///
    /// [`SafePostError::NotWritable`] unless `local`'s buffer has `LOCAL_WRITE`; as
    /// [`SendQueue::prepare_write`].
    pub fn prepare_read<'b>(
        &self,
        local: BufSlice<'b>,
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError> {
        self.prepare(
            local.writable()?,
            remote,
            PrepOp::Read,
            flags,
            Target::Peer,
            None,
        )
    }

    /// Prepares a SEND of (parts of) `local`.
    ///
    /// # Errors
    ///
    /// As [`SendQueue::prepare_write`].
    pub fn prepare_send<'b>(
        &self,
        local: BufSlice<'b>,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError> {
        let remote = RemoteBuf::new(0, 0);
        self.prepare(local.sge(), remote, PrepOp::Send, flags, Target::Peer, None)
    }

    /// Prepares a SEND with immediate (each post gives its immediate).
    ///
    /// # Errors
    ///
    /// As [`SendQueue::prepare_write`].
    pub fn prepare_send_imm<'b>(
        &self,
        local: BufSlice<'b>,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError> {
        let remote = RemoteBuf::new(0, 0);
        self.prepare(
            local.sge(),
            remote,
            PrepOp::SendImm,
            flags,
            Target::Peer,
            None,
        )
    }

    /// Prepares a UD SEND of (parts of) `local` to `dest` on a UD queue, for
    /// [`SendQueue::post_prepared`]: the request carries its destination (it borrows the
    /// [`UdTarget`], and so its address handle).
    ///
    /// # Errors
    ///
    /// What posting the request would return for the request itself (the queue's limits,
    /// [`PostError::DatagramTooLong`] for a span longer than the path MTU);
    /// [`PostError::WrongTransport`] on a queue that is not UD;
    /// [`SafePostError::ForeignTarget`] for a target whose address handle was made in another
    /// PD than the queue's QP.
    pub fn prepare_send_to<'b>(
        &self,
        dest: &'b UdTarget,
        local: BufSlice<'b>,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError> {
        let (remote, ah) = (RemoteBuf::new(0, 0), Some(dest.address_handle()));
        let target = Target::Ud(dest.dest());
        self.prepare(local.sge(), remote, PrepOp::Send, flags, target, ah)
    }

    /// Prepares a UD SEND with immediate to `dest` (each post gives its immediate).
    ///
    /// # Errors
    ///
    /// As [`SendQueue::prepare_send_to`].
    pub fn prepare_send_to_imm<'b>(
        &self,
        dest: &'b UdTarget,
        local: BufSlice<'b>,
        flags: SendFlags,
    ) -> Result<Prepared<'b>, SafePostError> {
        let (remote, ah) = (RemoteBuf::new(0, 0), Some(dest.address_handle()));
        let target = Target::Ud(dest.dest());
        self.prepare(local.sge(), remote, PrepOp::SendImm, flags, target, ah)
    }

    /// The PD of the queue's QP, when the queue is one this crate made.
    fn pd(&self) -> Option<&Pd> {
        match &self.e {
            TypedSq::Rc(q) => Some(&q._qp._pd),
            TypedSq::Ud(q) => Some(&q._qp._pd),
            TypedSq::Dc(q) => Some(&q._qp._pd),
            TypedSq::Eth(q) => Some(&q._qp._pd),
            TypedSq::Verbs(q) => q
                .owner()
                .and_then(|o| o.downcast_ref::<QpInner>())
                .map(|qp| &qp._pd),
        }
    }

    /// Checks a request for `target` once, as its post would, and builds what does not change:
    /// the WQE's segments for an RC queue driven directly, else the fields of an ordinary post.
    fn prepare<'b>(
        &self,
        local: Sge,
        remote: RemoteBuf,
        op: PrepOp,
        flags: SendFlags,
        target: Target<'b>,
        ah: Option<&AddressHandle>,
    ) -> Result<Prepared<'b>, SafePostError> {
        if flags.contains(SendFlags::INLINE) {
            return Err(PostError::Unsupported.into());
        }
        // A DC initiator takes only requests to a DC target, a UD queue only datagrams.
        let caps = self.caps();
        let dci = matches!(self.e, TypedSq::Dc(_));
        if dci != matches!(target, Target::Dc(_)) || caps.is_ud() != matches!(target, Target::Ud(_))
        {
            return Err(PostError::WrongTransport.into());
        }
        // A queue made over a caller's own QP (`From<backend::verbs::SendQueue>`) has no PD
        // to compare: the caller vouched for that QP.
        if let (Some(ah), Some(pd)) = (ah, self.pd())
            && !ah.pd().is(pd)
        {
            return Err(SafePostError::ForeignTarget);
        }
        let sgl = [local];
        let wr = wr_of(op, 0, &sgl, remote, 0, target).with_flags(flags);
        let built = match &self.e {
            TypedSq::Rc(q) => match op {
                PrepOp::Send | PrepOp::SendImm => Built::Send(q.q.prepare_send(&wr)?),
                _ => Built::Rdma(q.q.prepare_rdma(&wr)?),
            },
            // The fallback posts a datagram through its verbs handle (as its post refuses).
            TypedSq::Verbs(_) if matches!(target, Target::Ud(d) if d.ah == 0) => {
                return Err(PostError::Unsupported.into());
            }
            // A DCI's caps are an RC queue's: its requests are RC requests with a target.
            _ => {
                wr.check(&caps)?;
                Built::Ordinary
            }
        };
        Ok(Prepared {
            local,
            remote,
            op,
            flags,
            qpn: self.qpn(),
            built,
            target,
            _buf: PhantomData,
        })
    }

    /// Posts a prepared request with what changes, and rings: the span `c.offset..` (of
    /// `c.len` bytes, or to the end) of the prepared span, to the prepared remote address plus
    /// `c.remote_offset`.
    ///
    /// # Errors
    ///
    /// [`SafePostError::OutsidePrepared`] for a span outside the prepared one or a remote
    /// address past the end of the address space; [`SafePostError::ForeignPrepared`] for a
    /// request prepared on another queue (a UD or DC one too: its target goes with the queue
    /// it was prepared on); [`SafePostError::Post`] when the queue refuses it (full, the QP
    /// in the error state, ...). Then nothing was written.
    #[inline(always)]
    pub fn post_prepared(&mut self, p: &Prepared<'_>, c: Changes) -> Result<(), SafePostError> {
        let span = p.local.length;
        let len = c.len.unwrap_or(span.wrapping_sub(c.offset));
        let remote_addr = p.remote.addr.checked_add(c.remote_offset);
        let (Some(end), Some(remote_addr)) = (c.offset.checked_add(len), remote_addr) else {
            return Err(outside(c.offset, len, span));
        };
        if end > span {
            return Err(outside(c.offset, len, span));
        }
        if p.qpn != self.qpn() {
            return Err(SafePostError::ForeignPrepared);
        }
        let addr = p.local.addr + u64::from(c.offset);
        let changes = zverbs_mlx5dv::Changes {
            wr_id: c.wr_id,
            addr,
            len,
            remote_addr,
            imm: c.imm,
        };
        // SAFETY (each arm, here and below): the span lies in the prepared span (checked
        // above), a span of an `MrBuf` the prepared request borrows, registered under the
        // prepared key (as for every safe post: `safe`'s docs); a target's address vector is a
        // copy in the `UdTarget` or `DcPeer` the request borrows, which keeps its address
        // handle (the fallback's `ibv_ah`) alive.
        let r = match (&mut self.e, &p.built) {
            // SAFETY: as above.
            (TypedSq::Rc(q), Built::Rdma(b)) => unsafe { q.q.post_prepared(b, changes) },
            // SAFETY: as above.
            (TypedSq::Rc(q), Built::Send(b)) => unsafe { q.q.post_prepared(b, changes) },
            (TypedSq::Rc(_), _) | (_, Built::Rdma(_) | Built::Send(_)) => {
                return Err(SafePostError::ForeignPrepared);
            }
            (_, Built::Ordinary) => {
                return self.post_ordinary(p, c.wr_id, addr, len, c.imm, remote_addr);
            }
        };
        r.map_err(Into::into)
    }

    /// The ordinary post of a prepared request checked by [`SendQueue::post_prepared`]: the
    /// UD and DC queues' (with the request's target) and the fallback's.
    #[inline(always)]
    fn post_ordinary(
        &mut self,
        p: &Prepared<'_>,
        wr_id: u64,
        addr: u64,
        len: u32,
        imm: u32,
        remote_addr: u64,
    ) -> Result<(), SafePostError> {
        let sgl = [Sge {
            addr,
            length: len,
            lkey: p.local.lkey,
        }];
        let remote = RemoteBuf::new(remote_addr, p.remote.rkey);
        let wr = wr_of(p.op, wr_id, &sgl, remote, imm, p.target).with_flags(p.flags);
        match (&mut self.e, p.target) {
            // SAFETY: as in `post_prepared`.
            (TypedSq::Dc(q), Target::Dc(dest)) => unsafe { q.q.post_to(dest, &wr) },
            // SAFETY: as in `post_prepared`.
            (TypedSq::Ud(q), Target::Ud(_)) => unsafe { q.q.post(&wr) },
            // SAFETY: as in `post_prepared`.
            (TypedSq::Eth(q), Target::Peer) => unsafe { q.q.post(&wr) },
            // SAFETY: as in `post_prepared`.
            (TypedSq::Verbs(q), Target::Peer | Target::Ud(_)) => unsafe { q.post(&wr) },
            _ => return Err(SafePostError::ForeignPrepared),
        }
        .map_err(Into::into)
    }
}

/// A raw Ethernet frame whose headers stay the same from post to post, prepared once for one
/// raw packet QP's [`SendQueue`] ([`SendQueue::prepare_frame`]) and posted with a payload each
/// time ([`SendQueue::post_frame`]): the IPv4 total length and the UDP length (those
/// [`FrameLengths`] names) are set for each payload, the checksums left to the device
/// ([`SendFlags::IP_CSUM`]).
///
/// On the direct backend the control and Ethernet segments, with every header byte inlined,
/// are built once (`zverbs_mlx5dv`'s [`PreparedFrame`](zverbs_mlx5dv::PreparedFrame)); on the
/// libibverbs fallback a post is an ordinary inline SEND of two entries, the patched headers
/// and the payload, so the QP needs `max_send_sge` ≥ 2 and the frame must fit its
/// `max_inline_data`.
#[derive(Clone, Copy, Debug)]
pub struct PreparedFrame {
    built: FrameBuilt,
    /// The queue it was prepared for.
    qpn: u32,
}

#[derive(Clone, Copy, Debug)]
enum FrameBuilt {
    Direct(zverbs_mlx5dv::PreparedFrame),
    Ordinary {
        headers: [u8; FRAME_HEADERS_MAX],
        len: usize,
        lengths: FrameLengths,
        flags: SendFlags,
    },
}

impl PreparedFrame {
    /// The header bytes each post sends before its payload.
    pub fn headers_len(&self) -> usize {
        match &self.built {
            FrameBuilt::Direct(p) => p.headers_len(),
            FrameBuilt::Ordinary { len, .. } => *len,
        }
    }
}

impl SendQueue {
    /// Sends one whole Ethernet frame (from the destination MAC on, without the FCS) on a raw
    /// packet QP's queue, and rings: a SEND of `frame` ([`SendFlags::IP_CSUM`] asks the device
    /// for the IPv4 and TCP/UDP checksums).
    ///
    /// # Errors
    ///
    /// As [`SendQueue::send`]; [`PostError::FrameTooShort`] / [`PostError::FrameTooLong`]
    /// for a frame shorter than an Ethernet header or longer than the port's largest;
    /// [`PostError::ChecksumNotAvailable`] for `IP_CSUM` on a queue that is not a raw packet
    /// QP's, or on one whose device computes no checksums ([`RawCaps::ip_csum`]). Nothing was
    /// written.
    ///
    /// [`RawCaps::ip_csum`]: crate::RawCaps::ip_csum
    #[inline(always)]
    pub fn send_frame(
        &mut self,
        wr_id: u64,
        frame: BufSlice<'_>,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        self.send(wr_id, frame, flags)
    }

    /// Prepares a frame whose first bytes are `headers` (an Ethernet header at least, at most
    /// [`FRAME_HEADERS_MAX`] bytes: Ethernet, IPv4 and UDP are 42) for
    /// [`SendQueue::post_frame`]. `flags` as for a SEND on this queue, without
    /// [`SendFlags::INLINE`]; `lengths` the fields each post sets
    /// ([`FrameLengths::IPV4_UDP`] for Ethernet + IPv4 + UDP).
    ///
    /// # Errors
    ///
    /// [`PostError::WrongTransport`] on a queue that is not a raw packet QP's;
    /// [`PostError::FrameTooShort`], [`PostError::InlineTooLarge`],
    /// [`PostError::InlineNotAllowed`], [`PostError::FrameLengthField`] as
    /// `zverbs_mlx5dv`'s `prepare_frame` says; [`PostError::ChecksumNotAvailable`] for
    /// [`SendFlags::IP_CSUM`] on a queue whose device computes no checksums.
    pub fn prepare_frame(
        &self,
        headers: &[u8],
        flags: SendFlags,
        lengths: FrameLengths,
    ) -> Result<PreparedFrame, SafePostError> {
        let built = match &self.e {
            TypedSq::Eth(q) => FrameBuilt::Direct(q.q.prepare_frame(headers, flags, lengths)?),
            TypedSq::Verbs(q) if q.caps().is_ethernet() => {
                if flags.contains(SendFlags::INLINE) {
                    return Err(PostError::InlineNotAllowed.into());
                }
                let h = headers.len();
                if h > FRAME_HEADERS_MAX {
                    return Err(PostError::InlineTooLarge {
                        len: h as u32,
                        max: FRAME_HEADERS_MAX as u32,
                    }
                    .into());
                }
                for (at, before) in [(lengths.ipv4_total_at, 2), (lengths.udp_len_at, 4)] {
                    if let Some(at) = at
                        && (at < before || at + 2 > h)
                    {
                        return Err(PostError::FrameLengthField {
                            at: at as u32,
                            headers: h as u32,
                        }
                        .into());
                    }
                }
                // Each post is an inline SEND of two entries, the headers and the payload:
                // the queue must take two (`max_send_sge`).
                let sgl = [Sge::from_slice(headers, 0), Sge::from_slice(&[], 0)];
                SendWr::send(0, &sgl)
                    .with_flags(flags | SendFlags::INLINE)
                    .check(&q.caps())?;
                let mut copy = [0u8; FRAME_HEADERS_MAX];
                copy[..h].copy_from_slice(headers);
                FrameBuilt::Ordinary {
                    headers: copy,
                    len: h,
                    lengths,
                    flags,
                }
            }
            _ => return Err(PostError::WrongTransport.into()),
        };
        Ok(PreparedFrame {
            built,
            qpn: self.qpn(),
        })
    }

    /// Posts the prepared frame `p` with `payload` after its headers, and rings.
    ///
    /// # Errors
    ///
    /// [`SafePostError::ForeignPrepared`] for a frame prepared on another queue;
    /// [`PostError::FrameTooLong`]; on the fallback [`PostError::InlineTooLarge`] for a frame
    /// longer than the QP's `max_inline_data`; [`PostError::QueueFull`],
    /// [`PostError::CqFull`], [`PostError::NotReady`] as for any post. Nothing was written.
    #[inline(always)]
    pub fn post_frame(
        &mut self,
        p: &PreparedFrame,
        wr_id: u64,
        payload: BufSlice<'_>,
    ) -> Result<(), SafePostError> {
        if p.qpn != self.qpn() {
            return Err(SafePostError::ForeignPrepared);
        }
        let sge = payload.sge();
        match (&mut self.e, &p.built) {
            // SAFETY: the payload is a checked span of an `MrBuf` with its own key (as for
            // every safe post: `safe`'s docs).
            (TypedSq::Eth(q), FrameBuilt::Direct(b)) => unsafe { q.q.post_frame(b, wr_id, sge) },
            (
                TypedSq::Verbs(q),
                FrameBuilt::Ordinary {
                    headers,
                    len,
                    lengths,
                    flags,
                },
            ) => {
                let mut h = *headers;
                let total = (*len as u32).saturating_add(sge.length);
                let mut set = |at: Option<usize>, base: usize| {
                    if let Some(at) = at {
                        let v = (total as usize).saturating_sub(at - base);
                        h[at..at + 2].copy_from_slice(&(v.min(0xffff) as u16).to_be_bytes());
                    }
                };
                // The IPv4 header starts 2 bytes before its total length, UDP 4 before its
                // length; each counts from its header's start to the frame's end.
                set(lengths.ipv4_total_at, 2);
                set(lengths.udp_len_at, 4);
                let sgl = [Sge::from_slice(&h[..*len], 0), sge];
                let wr = SendWr::send(wr_id, &sgl).with_flags(*flags | SendFlags::INLINE);
                // SAFETY: inline: the headers are read from this stack copy at the post, the
                // payload from a checked span of an `MrBuf`.
                unsafe { q.post(&wr) }
            }
            _ => return Err(SafePostError::ForeignPrepared),
        }
        .map_err(Into::into)
    }
}

#[cold]
fn outside(offset: u32, len: u32, span: u32) -> SafePostError {
    SafePostError::OutsidePrepared { offset, len, span }
}

/// The request a prepared operation stands for (a DC request's target goes beside it, to
/// `post_to`).
#[inline(always)]
fn wr_of<'a>(
    op: PrepOp,
    wr_id: u64,
    sgl: &'a [Sge],
    remote: RemoteBuf,
    imm: u32,
    target: Target<'a>,
) -> SendWr<'a> {
    match (op, target) {
        (PrepOp::Send, Target::Ud(dest)) => SendWr::send_to(wr_id, sgl, dest),
        (PrepOp::SendImm, Target::Ud(dest)) => SendWr::send_to_imm(wr_id, sgl, dest, imm),
        (PrepOp::Write, _) => SendWr::write(wr_id, sgl, remote),
        (PrepOp::WriteImm, _) => SendWr::write_imm(wr_id, sgl, remote, imm),
        (PrepOp::Read, _) => SendWr::read(wr_id, sgl, remote),
        (PrepOp::Send, _) => SendWr::send(wr_id, sgl),
        (PrepOp::SendImm, _) => SendWr::send_imm(wr_id, sgl, imm),
    }
}

//! RC queue pairs: creation, capabilities, and the INIT → RTR → RTS transitions.

use std::any::Any;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use zverbs_mlx5dv::{RqSlot, RqState, SqCaps, SqSlot, SqState};

use crate::backend::{
    BackendChoice, BackendKind, BackendReport, BackendRequest, BlueFlame, RequestSource,
};
use crate::bindings::{DirectBinding, DirectTable, Tables, VerbsTable, WqBinding, WqRq};
pub use crate::bindings::{RqStateHandle, SqStateHandle};
use crate::blueflame::{self, SharedRegister};
use crate::cq::{Cq, Registry};
use crate::error::{Error, Result};
use crate::fallback::{self, RqShared, SqShared};
use crate::pd::Pd;
use crate::provider::{QpEngine, QpInit, QpProvider, RegisterOwner};
use crate::srq::Srq;
use crate::types::device::LocalAddress;
use crate::types::endpoint::{Endpoint, random_psn};
use crate::types::eth::RawInfo;
use crate::types::qp::{ConnectAttr, InitAttr, QpCaps, QpState, QpType, RtrAttr, RtsAttr};
use zverbs_ffi::types::{ibv_qp_attr, qp_attr_mask as m};

impl Pd {
    /// A builder for an RC queue pair whose completions go to `send_cq` and `recv_cq` (which
    /// may be the same CQ).
    pub fn qp_builder<'a>(&'a self, send_cq: &'a Cq, recv_cq: &'a Cq) -> QpBuilder<'a> {
        QpBuilder::new(self, send_cq, recv_cq)
    }
}

/// A builder for an RC [`Qp`].
///
/// # Example
///
/// The queues' sizes are minimums: the device may give more, and [`Qp::caps`] says what it
/// gave.
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.cq_builder().cqe(256).build()?;
/// let qp = pd
///     .qp_builder(&cq, &cq) // send CQ, receive CQ
///     .max_send_wr(64)
///     .max_recv_wr(64)
///     .max_inline_data(64)
///     .build()?;
/// let caps = qp.caps();
/// assert!(caps.max_send_wr >= 64 && caps.max_recv_wr >= 64);
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug)]
pub struct QpBuilder<'a> {
    pd: &'a Pd,
    send_cq: &'a Cq,
    recv_cq: &'a Cq,
    caps: QpCaps,
    sig_all: bool,
    max_signaled: Option<u32>,
    backend: Option<BackendRequest>,
    qp_type: QpType,
    srq: Option<&'a Srq>,
    dc_access_key: u64,
    raw_port: u8,
}

impl<'a> QpBuilder<'a> {
    pub(crate) fn new(pd: &'a Pd, send_cq: &'a Cq, recv_cq: &'a Cq) -> Self {
        Self {
            pd,
            send_cq,
            recv_cq,
            caps: QpCaps::default(),
            sig_all: false,
            max_signaled: None,
            backend: None,
            qp_type: QpType::Rc,
            srq: None,
            dc_access_key: 0,
            raw_port: 1,
        }
    }

    /// A raw packet QP on `port` ([`QpType::RawPacket`]): it sends whole Ethernet frames and
    /// receives what flow rules steer to it. Ready it with [`Qp::ready_raw`]
    /// ([`Pd::create_raw_qp`](crate::Pd::create_raw_qp) does both).
    pub fn raw_packet(mut self, port: u8) -> Self {
        self.raw_port = port;
        self.qp_type(QpType::RawPacket)
    }

    /// The transport ([`QpType::Rc`] by default).
    pub fn qp_type(mut self, qp_type: QpType) -> Self {
        self.qp_type = qp_type;
        self
    }

    /// An unreliable-datagram QP: `qp_type(QpType::Ud)`. Ready it with
    /// [`Qp::ready_ud`](crate::Qp::ready_ud).
    pub fn ud(self) -> Self {
        self.qp_type(QpType::Ud)
    }

    /// A DC initiator (DCI, mlx5 only): sends to any DC target, each request naming its
    /// target. It receives nothing (no receive queue). Ready it with
    /// [`Qp::ready_dc`](crate::Qp::ready_dc), post through its
    /// [`Qp::send_queue`](crate::Qp::send_queue) ([`SendQueue::to`](crate::SendQueue::to)).
    pub fn dc_initiator(self) -> Self {
        self.qp_type(QpType::Dci)
    }

    /// A DC target (DCT, mlx5 only) that serves the initiators whose requests carry
    /// `access_key`; it needs an SRQ ([`QpBuilder::srq`]) for the SENDs and WRITEs with
    /// immediate it receives, and has no send queue. Ready it with
    /// [`Qp::ready_dc`](crate::Qp::ready_dc); its address for initiators is
    /// [`Qp::dc_addr`](crate::Qp::dc_addr).
    pub fn dc_target(mut self, access_key: u64) -> Self {
        self.dc_access_key = access_key;
        self.qp_type(QpType::Dct)
    }

    /// Takes the QP's receives from `srq`: the QP has no receive queue of its own
    /// (`max_recv_wr` is 0, and [`Qp::recv_queue`] is refused).
    pub fn srq(mut self, srq: &'a Srq) -> Self {
        self.srq = Some(srq);
        self
    }

    /// The capabilities to ask for (the device may grant more).
    pub fn caps(mut self, caps: QpCaps) -> Self {
        self.caps = caps;
        self
    }

    /// Outstanding send requests.
    pub fn max_send_wr(mut self, n: u32) -> Self {
        self.caps.max_send_wr = n;
        self
    }

    /// Outstanding receive requests (at least 1).
    pub fn max_recv_wr(mut self, n: u32) -> Self {
        self.caps.max_recv_wr = n;
        self
    }

    /// Scatter entries per send request.
    pub fn max_send_sge(mut self, n: u32) -> Self {
        self.caps.max_send_sge = n;
        self
    }

    /// Scatter entries per receive request.
    pub fn max_recv_sge(mut self, n: u32) -> Self {
        self.caps.max_recv_sge = n;
        self
    }

    /// Inline bytes per send request.
    pub fn max_inline_data(mut self, n: u32) -> Self {
        self.caps.max_inline_data = n;
        self
    }

    /// Every send request produces a completion (`sq_sig_all`).
    pub fn sig_all(mut self, on: bool) -> Self {
        self.sig_all = on;
        self
    }

    /// Signaled send requests that may be outstanding: this QP's share of its send CQ, which
    /// holds that many entries for it (as it holds one per receive of the QP's receive
    /// queue), so that no completion can overrun the CQ; a signaled post beyond it is refused
    /// with [`PostError::CqFull`](zverbs_core::PostError). By default as many as the send
    /// queue holds (`max_send_wr`) when the send CQ has that many left
    /// ([`Cq::entries_left`](crate::Cq::entries_left)), else the `max_send_wr` asked for when
    /// it has that many left (a device may round the queue up), else half of what it has left
    /// (and a receive queue the CQ cannot hold whole takes what was asked for, or half of what
    /// is left: see [`Qp::caps`]), so that QPs made after it on the CQ get their part. Set it when several
    /// QPs share a CQ, to give each the part it needs: [`QpBuilder::build`] refuses a QP whose
    /// `max_signaled` the CQ cannot hold any more ([`Error::CqTooSmall`]).
    pub fn max_signaled(mut self, n: u32) -> Self {
        self.max_signaled = Some(n);
        self
    }

    /// The backend, overriding the context's choice. It must match the CQs' backend.
    pub fn backend(mut self, backend: BackendRequest) -> Self {
        self.backend = Some(backend);
        self
    }

    /// Creates the QP, in the RESET state.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `ibv_create_qp` / `mlx5dv_create_qp`; [`Error::Backend`] when the
    /// backend asked for differs from the CQs' or cannot be used; [`Error::InvalidArgument`]
    /// for CQs of another context, or a CQ whose poller was already taken;
    /// [`Error::CqTooSmall`] when the receive CQ cannot hold the QP's receive queue, or the
    /// send CQ its signaled sends (see [`QpBuilder::max_signaled`]).
    pub fn build(self) -> Result<Qp> {
        let ctx = self.pd.context();
        // A raw packet QP: the device and the capability are checked before anything is made.
        let raw = match self.qp_type {
            QpType::RawPacket => {
                let s = ctx.raw_ready(self.raw_port, "ibv_create_qp")?;
                Some(RawInfo {
                    port: self.raw_port,
                    min_inline: s.min_inline,
                    max_frame: s.max_frame,
                    ip_csum: s.caps.ip_csum,
                })
            }
            _ => None,
        };
        for cq in [self.send_cq, self.recv_cq] {
            if !Arc::ptr_eq(&cq.context().inner, &ctx.inner) {
                return Err(Error::InvalidArgument(
                    "the CQ belongs to another context than the PD".into(),
                ));
            }
        }
        let mut caps = self.caps;
        shape(self.qp_type, self.srq.is_some(), &mut caps)?;
        if let Some(srq) = self.srq {
            if !Arc::ptr_eq(&srq.pd().inner, &self.pd.inner) {
                return Err(Error::InvalidArgument(
                    "the SRQ belongs to another protection domain than the QP".into(),
                ));
            }
            caps.max_recv_wr = 0;
            caps.max_recv_sge = 0;
            srq.bind_recv_cq(self.recv_cq)?;
        }
        if (caps.max_recv_wr == 0 && self.srq.is_none() && self.qp_type != QpType::Dci)
            || caps.max_send_wr == 0
        {
            return Err(Error::InvalidArgument(
                "max_send_wr and max_recv_wr must be at least 1".into(),
            ));
        }
        let send_kind = self.send_cq.backend().kind;
        if self.recv_cq.backend().kind != send_kind {
            return Err(Error::Backend {
                requested: send_kind,
                reason: "the send and receive CQs use different backends".into(),
            });
        }
        let choice = match self.backend {
            Some(request) => BackendChoice {
                request,
                source: RequestSource::Caller,
            },
            None => ctx.backend_choice(),
        };
        let wanted = match choice.request {
            BackendRequest::Auto => send_kind,
            BackendRequest::Direct => BackendKind::Direct,
            BackendRequest::Verbs => BackendKind::Verbs,
        };
        if wanted != send_kind {
            return Err(Error::Backend {
                requested: wanted,
                reason: format!(
                    "its CQs are driven by the {send_kind} backend; create them with the same \
                     backend"
                ),
            });
        }
        if let Some(srq) = self.srq
            && srq.backend() != send_kind
        {
            return Err(Error::Backend {
                requested: send_kind,
                reason: format!(
                    "its SRQ is driven by the {} backend; create it with the CQs' backend",
                    srq.backend()
                ),
            });
        }
        let direct = send_kind == BackendKind::Direct;
        let (provider, note) = {
            self.pd.inner.provider.create_qp(&QpInit {
                send_cq: &*self.send_cq.inner.provider,
                recv_cq: &*self.recv_cq.inner.provider,
                caps,
                sig_all: self.sig_all,
                direct,
                qp_type: self.qp_type,
                srq: self.srq.map(|s| &*s.inner.provider),
                dc_access_key: self.dc_access_key,
            })?
        };
        // What the caller asked for: a device may round the queues up (libmlx5 makes a ring of
        // 500 receives 512 long), and a CQ sized for what was asked still holds that.
        let asked = caps;
        let mut caps = provider.caps();
        let shared_cq = self.send_cq.is(self.recv_cq);
        // Every completion that can land in a CQ has an entry held for it (`Cq::hold`): one
        // per receive the receive queue may have outstanding, one per signaled send. A QP takes
        // what it can use (its whole receive ring: on the direct path the ring may hold more
        // than `max_recv_wr`; every signaled send its queue holds, or `max_signaled`) when its
        // CQs have that much left, else what was asked for (`max_recv_wr`, `max_send_wr`) when
        // they have that much left; on a CQ that has neither, it takes half of what is left for its
        // receives and half of the rest for its signaled sends, so that QPs created after it
        // on the same CQ get their part too. Posts beyond a share are refused (`CqFull`); a QP
        // whose explicit `max_signaled`, or one receive and one send, does not fit is refused
        // (and destroyed with `provider`).
        let ring = match provider.engine() {
            QpEngine::Direct(l) => l.rq.wqe_cnt,
            QpEngine::Verbs(_) => 0,
        };
        let sends = self.qp_type != QpType::Dct;
        let send_want = if sends {
            self.max_signaled
                .unwrap_or(caps.max_send_wr)
                .clamp(1, caps.max_send_wr.max(1))
        } else {
            0
        };
        let send_asked = if sends {
            self.max_signaled
                .unwrap_or(asked.max_send_wr)
                .clamp(1, caps.max_send_wr.max(1))
        } else {
            0
        };
        let recv_share = if self.srq.is_some() || self.qp_type == QpType::Dci {
            0
        } else {
            let want = caps.max_recv_wr.max(ring);
            let recv_asked = asked.max_recv_wr.min(want);
            let left = self.recv_cq.entries_left();
            let (beside, beside_asked) = if shared_cq {
                (send_want, send_asked)
            } else {
                (0, 0)
            };
            let share = if want + beside <= left {
                want
            } else if recv_asked + beside_asked <= left {
                recv_asked
            } else {
                want.min(left / 2).max(1)
            };
            caps.max_recv_wr = share;
            share
        };
        self.recv_cq.hold(recv_share, "the QP's receive queue")?;
        let send_share = match self.max_signaled {
            _ if !sends => 0,
            Some(_) => send_want,
            None => {
                let left = self.send_cq.entries_left();
                if send_want <= left {
                    send_want
                } else if send_asked <= left {
                    send_asked
                } else {
                    (left / 2).max(1)
                }
            }
        };
        if let Err(e) = self.send_cq.hold(send_share, "the QP's signaled sends") {
            self.recv_cq.release(recv_share);
            return Err(e);
        }
        let holds = Holds {
            send: send_share,
            recv: recv_share,
        };
        let sq_caps = SqCaps {
            max_send_sge: caps.max_send_sge,
            max_inline_data: caps.max_inline_data,
            sig_all: self.sig_all,
            max_signaled: send_share.max(1),
            transport: match raw {
                Some(r) => zverbs_mlx5dv::Transport::Ethernet {
                    max_frame: r.max_frame,
                    ip_csum: r.ip_csum,
                },
                None => zverbs_mlx5dv::Transport::Rc,
            },
        };
        let mut reason = format!("{}; {}", self.send_cq.backend().reason, note.0);
        let mut blueflame = None;
        let release = |e: Error| {
            self.send_cq.release(holds.send);
            self.recv_cq.release(holds.recv);
            e
        };
        let data = match provider.engine() {
            QpEngine::Direct(layout) => {
                let (register, report, why) =
                    DirectRegister::new(&layout, provider.register()).map_err(release)?;
                reason.push_str(&format!("; {report}{why}"));
                blueflame = Some(report);
                QpData::Direct(DirectData::new(&layout, register).map_err(release)?)
            }
            QpEngine::Verbs(_) => QpData::Verbs(VerbsData {
                sq: Arc::new(SqShared::new(caps.max_send_wr)),
                rq: Arc::new(RqShared::new(caps.max_recv_wr)),
            }),
        };
        let report = BackendReport {
            kind: send_kind,
            choice,
            reason,
            blueflame,
        };
        let inner = Arc::new(QpInner {
            provider,
            data,
            caps,
            sq_caps,
            report,
            qp_type: self.qp_type,
            srq: self.srq.cloned(),
            taken: Mutex::new((false, false)),
            state: AtomicU32::new(QpState::Reset.to_raw()),
            psn: AtomicU32::new(random_psn()),
            drain_marker: std::sync::atomic::AtomicBool::new(false),
            holds,
            sole_receiver: std::sync::atomic::AtomicBool::new(false),
            ud_mtu: AtomicU32::new(0),
            raw,
            send_cq: self.send_cq.clone(),
            recv_cq: self.recv_cq.clone(),
            _pd: self.pd.clone(),
        });
        for cq in [self.send_cq, self.recv_cq] {
            let mut reg = cq.inner.registry.lock().unwrap_or_else(|p| p.into_inner());
            reg.qps.push(Arc::downgrade(
                &(inner.clone() as Arc<dyn Any + Send + Sync>),
            ));
            // A poller already out: it gets the table with this QP before the QP can post.
            let reached = republish(cq, &mut reg);
            drop(reg);
            drop(reached);
            if shared_cq {
                break;
            }
        }
        Ok(Qp { inner })
    }
}

/// How a direct QP holds its BlueFlame register.
#[derive(Debug)]
pub(crate) enum DirectRegister {
    /// No BlueFlame: 8-byte doorbells, nothing to share.
    DoorbellOnly,
    /// Its own: its send queue rings without a lock.
    Dedicated,
    /// One libmlx5 may give to other QPs: its send queue takes the register's lock.
    Shared(Arc<SharedRegister>),
}

impl DirectRegister {
    /// The register of a QP with `layout`, as the provider says it holds it: with what the
    /// report says and why.
    fn new(
        layout: &zverbs_mlx5dv::QpLayout,
        owner: RegisterOwner,
    ) -> Result<(Self, BlueFlame, String)> {
        Ok(match owner {
            _ if layout.bf.size == 0 => {
                (Self::DoorbellOnly, BlueFlame::DoorbellOnly, String::new())
            }
            RegisterOwner::Dedicated(why) => {
                (Self::Dedicated, BlueFlame::Dedicated, format!(" ({why})"))
            }
            RegisterOwner::Assigned => {
                let (r, others) = blueflame::join(layout.bf.reg, layout.bf.size)?;
                (
                    Self::Shared(r),
                    BlueFlame::Shared { others },
                    String::from(" (no thread domain: libmlx5 assigned it)"),
                )
            }
        })
    }

    /// The state its send queue shares with the other QPs on the register, if it is shared.
    pub(crate) fn shared(&self) -> Option<&zverbs_mlx5dv::SharedBf> {
        match self {
            Self::Shared(r) => Some(r.bf()),
            Self::DoorbellOnly | Self::Dedicated => None,
        }
    }

    /// How the QP holds the register now.
    fn report(&self) -> BlueFlame {
        match self {
            Self::DoorbellOnly => BlueFlame::DoorbellOnly,
            Self::Dedicated => BlueFlame::Dedicated,
            Self::Shared(r) => BlueFlame::Shared {
                others: blueflame::others(r),
            },
        }
    }
}

/// The direct backend's per-QP bookkeeping.
#[derive(Debug)]
pub(crate) struct DirectData {
    pub(crate) layout: zverbs_mlx5dv::QpLayout,
    pub(crate) sq_state: SqStateHandle,
    pub(crate) rq_state: RqStateHandle,
    pub(crate) register: DirectRegister,
}

impl DirectData {
    fn new(layout: &zverbs_mlx5dv::QpLayout, register: DirectRegister) -> Result<Self> {
        let sq_slots = (0..layout.sq.wqe_cnt).map(|_| SqSlot::new()).collect();
        // A QP on an SRQ has no receive ring; its (unused) bookkeeping keeps one slot.
        let rq_slots = (0..layout.rq.wqe_cnt.max(1))
            .map(|_| RqSlot::new())
            .collect();
        Ok(Self {
            layout: *layout,
            sq_state: Arc::new(SqState::new(sq_slots)?),
            rq_state: Arc::new(RqState::new(rq_slots)?),
            register,
        })
    }
}

/// The fallback's per-QP bookkeeping, shared as the direct backend's is.
#[derive(Debug)]
pub(crate) struct VerbsData {
    pub(crate) sq: Arc<SqShared>,
    pub(crate) rq: Arc<RqShared>,
}

#[derive(Debug)]
pub(crate) enum QpData {
    Direct(DirectData),
    Verbs(VerbsData),
}

// SAFETY: `DirectData` holds the raw layout (pointers into queue memory that the QP owns) and
// states that are Send + Sync; the layout is only turned into accesses by the queues, each
// owned by one thread.
unsafe impl Send for QpData {}
// SAFETY: as above.
unsafe impl Sync for QpData {}

/// A reliable-connected queue pair. Cloning is cheap.
///
/// # Example
///
/// Two QPs of one device connected to each other (between machines, the [`Endpoint`]s travel
/// over the network: [`crate::connect`]), then their queues:
///
/// [`Endpoint`]: crate::types::endpoint::Endpoint
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// use zverbs::QpState;
///
/// let pd = ctx.alloc_pd()?;
/// let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// let a = pd.qp_builder(&cq_a, &cq_a).build()?;
/// let b = pd.qp_builder(&cq_b, &cq_b).build()?;
/// assert_eq!(a.state(), QpState::Reset);
/// assert!(a.queues(&cq_a).is_err()); // not connected yet: `Error::NotReady`
///
/// a.connect(&b.endpoint()?)?; // INIT, RTR, RTS
/// b.connect(&a.endpoint()?)?;
/// assert_eq!(a.state(), QpState::Rts);
/// let qa = a.queues(&cq_a)?; // send queue, receive queue, the CQ's poller
/// println!("QP {:#x}: {}", a.qpn(), a.backend());
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Clone, Debug)]
pub struct Qp {
    pub(crate) inner: Arc<QpInner>,
}

#[derive(Debug)]
pub(crate) struct QpInner {
    // Field order is drop order: destroy the QP, then its bookkeeping, then release the CQs
    // and the PD.
    pub(crate) provider: Box<dyn QpProvider>,
    pub(crate) data: QpData,
    pub(crate) caps: QpCaps,
    pub(crate) sq_caps: SqCaps,
    pub(crate) report: BackendReport,
    pub(crate) qp_type: QpType,
    /// The SRQ the QP takes its receives from (held alive while the QP lives).
    pub(crate) srq: Option<Srq>,
    /// Whether the send / receive queue handles were taken.
    pub(crate) taken: Mutex<(bool, bool)>,
    /// The state the last successful transition through this handle set (`enum
    /// ibv_qp_state`); [`Qp::state`] asks the device.
    pub(crate) state: AtomicU32,
    /// The first PSN this QP sends from: random at creation and at each reset, then what the
    /// last transition to RTS set (24 bits).
    pub(crate) psn: AtomicU32,
    /// A drain marker was posted to this incarnation (`recovery.rs`).
    pub(crate) drain_marker: std::sync::atomic::AtomicBool,
    /// The entries its CQs hold for it (given back when it goes).
    pub(crate) holds: Holds,
    /// Its receive queue is its receive CQ's one receive queue on the direct poller
    /// ([`Cq::claim_sole_receiver`]): a raw packet QP of an rdma-core device.
    pub(crate) sole_receiver: std::sync::atomic::AtomicBool,
    /// A UD QP's path MTU in bytes (its largest datagram), set by [`Qp::ready_ud`] from its
    /// port; 0 before, and for other QPs.
    pub(crate) ud_mtu: AtomicU32,
    /// A raw packet QP's port and frame limits; `None` for other QPs.
    pub(crate) raw: Option<RawInfo>,
    pub(crate) send_cq: Cq,
    pub(crate) recv_cq: Cq,
    pub(crate) _pd: Pd,
}

/// The entries a QP's CQs hold for it ([`Cq::hold`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Holds {
    /// Signaled sends, on the send CQ.
    pub(crate) send: u32,
    /// Receives, on the receive CQ.
    pub(crate) recv: u32,
}

impl Drop for QpInner {
    /// Leaves the pollers of its CQs (before its fields, the QP first, are dropped): each gets
    /// a table without it; and gives back the entries they held for it.
    fn drop(&mut self) {
        self.send_cq.release(self.holds.send);
        self.recv_cq.release(self.holds.recv);
        if self.sole_receiver.load(Ordering::Acquire) {
            self.recv_cq.release_sole_receiver();
        }
        let cqs = [&self.send_cq, &self.recv_cq];
        for (i, cq) in cqs.into_iter().enumerate() {
            if i == 1 && self.send_cq.is(&self.recv_cq) {
                break;
            }
            let mut reg = cq.inner.registry.lock().unwrap_or_else(|p| p.into_inner());
            let reached = republish(cq, &mut reg);
            drop(reg);
            drop(reached);
        }
    }
}

impl QpInner {
    /// The limits its send queue enforces: a UD QP's transport carries the MTU of the port it
    /// was readied on ([`Qp::ready_ud`]).
    pub(crate) fn send_caps(&self) -> SqCaps {
        let mut caps = self.sq_caps;
        if self.qp_type == QpType::Ud {
            let mtu = self.ud_mtu.load(Ordering::Acquire);
            caps.transport = zverbs_mlx5dv::Transport::Ud {
                mtu: if mtu == 0 { 256 } else { mtu },
            };
        }
        caps
    }
}

impl Qp {
    /// The QP number.
    pub fn qpn(&self) -> u32 {
        self.inner.provider.qpn()
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.inner.qp_type
    }

    /// The shared receive queue the QP takes its receives from, if any.
    pub fn srq(&self) -> Option<&Srq> {
        self.inner.srq.as_ref()
    }

    /// The capabilities the device granted; `max_recv_wr` no more than the receive CQ holds
    /// entries for (see [`QpBuilder::max_signaled`]).
    pub fn caps(&self) -> QpCaps {
        self.inner.caps
    }

    /// The limits the send queue enforces (including its share of the CQ).
    pub fn send_caps(&self) -> SqCaps {
        self.inner.send_caps()
    }

    /// The backend that drives the QP, and why.
    pub fn backend(&self) -> &BackendReport {
        &self.inner.report
    }

    /// For a directly driven QP, how it holds its BlueFlame register now: the count of other
    /// QPs on a shared register changes as QPs are created and dropped. `None` on the
    /// fallback.
    pub fn blueflame(&self) -> Option<BlueFlame> {
        match &self.inner.data {
            QpData::Direct(d) => Some(d.register.report()),
            QpData::Verbs(_) => None,
        }
    }

    /// The QP's state as the device says it is (`ibv_query_qp`): the device moves a QP to the
    /// error state on its own (a failed request of its own, a bad request it received as a
    /// responder, a port that went down), and this says so whether or not this side has
    /// polled a completion about it. Where the device reports only what the library's
    /// transitions set (the software device outside the error state), that; and the error
    /// state once the poller met an error completion of the QP.
    ///
    /// A control-path call: on an rdma-core device it asks the kernel.
    pub fn state(&self) -> QpState {
        let last = self.observed_state(self.inner.state.load(Ordering::Acquire));
        match self.inner.provider.query_state() {
            Ok(Some(raw)) => QpState::from_raw(raw),
            // The device cannot be asked (or knows no more): what the library saw.
            Ok(None) | Err(_) => last,
        }
    }

    /// Refuses a queue handle before the QP reaches `needs` (or after it left the states
    /// that serve it).
    fn ready(&self, queue: &'static str, ok: &[QpState], advice: &'static str) -> Result<()> {
        let state = self.state();
        if ok.contains(&state) {
            return Ok(());
        }
        Err(Error::NotReady {
            queue,
            state,
            needs: ok[0],
            advice,
        })
    }

    /// Refuses the send queue before RTS.
    pub(crate) fn send_queue_ready(&self) -> Result<()> {
        self.ready(
            "send queue",
            &[QpState::Rts],
            "connect the QP first (Qp::connect, or to_init, to_rtr and to_rts)",
        )
    }

    /// Refuses the receive queue before INIT.
    pub(crate) fn recv_ready(&self) -> Result<()> {
        self.ready(
            "receive queue",
            &[QpState::Init, QpState::Rtr, QpState::Rts],
            "move the QP to INIT first (Qp::to_init, or Qp::connect)",
        )
    }

    /// Refuses the send queue before RTS and once taken; marks it taken otherwise (for the
    /// send queue of an RC or UD QP and of a DC initiator alike).
    pub(crate) fn take_send_queue(&self) -> Result<()> {
        self.send_queue_ready()?;
        self.take_once("send queue", |t| &mut t.0)
    }

    /// Marks the queue handle that `which` picks from the taken flags (send, receive) taken,
    /// or refuses with [`Error::AlreadyTaken`] when it already was.
    pub(crate) fn take_once(
        &self,
        queue: &'static str,
        which: impl FnOnce(&mut (bool, bool)) -> &mut bool,
    ) -> Result<()> {
        let mut t = self.inner.taken.lock().unwrap_or_else(|p| p.into_inner());
        let taken = which(&mut t);
        if *taken {
            return Err(Error::AlreadyTaken(queue));
        }
        *taken = true;
        Ok(())
    }

    /// `InvalidArgument` for a QP on an SRQ: it has no receive queue of its own.
    pub(crate) fn own_receives(&self) -> Result<()> {
        if self.inner.srq.is_some() {
            return Err(Error::InvalidArgument(
                "the QP takes its receives from its SRQ; post them there".into(),
            ));
        }
        Ok(())
    }

    /// `ibv_modify_qp`, noting the state it moved to.
    fn modify(&self, attr: &mut ibv_qp_attr, mask: i32) -> Result<()> {
        self.inner.provider.modify(attr, mask)?;
        if mask & m::IBV_QP_SQ_PSN != 0 {
            self.inner
                .psn
                .store(attr.sq_psn & 0xff_ffff, Ordering::Release);
        }
        if mask & m::IBV_QP_STATE != 0 {
            self.inner.state.store(attr.qp_state, Ordering::Release);
            self.gates_after(attr.qp_state);
        }
        Ok(())
    }

    /// RESET → INIT.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `ibv_modify_qp`.
    pub fn to_init(&self, a: &InitAttr) -> Result<()> {
        let mut attr = ibv_qp_attr {
            qp_state: 1,
            pkey_index: a.pkey_index,
            port_num: a.port,
            qp_access_flags: a.access.bits(),
            ..Default::default()
        };
        self.modify(
            &mut attr,
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_ACCESS_FLAGS,
        )
    }

    /// INIT → RTR.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `ibv_modify_qp` (EINVAL often means a wrong GID index or a
    /// missing GRH on RoCE).
    pub fn to_rtr(&self, a: &RtrAttr) -> Result<()> {
        let mut attr = ibv_qp_attr {
            qp_state: 2,
            path_mtu: a.path_mtu as u32,
            dest_qp_num: a.dest_qpn,
            rq_psn: a.rq_psn & 0xff_ffff,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            ..Default::default()
        };
        attr.ah_attr.dlid = a.dlid;
        attr.ah_attr.sl = a.sl;
        attr.ah_attr.port_num = a.port;
        if let Some(g) = &a.grh {
            attr.ah_attr.is_global = 1;
            attr.ah_attr.grh.dgid.raw = g.dgid.0;
            attr.ah_attr.grh.sgid_index = g.sgid_index;
            attr.ah_attr.grh.hop_limit = g.hop_limit;
            attr.ah_attr.grh.traffic_class = g.traffic_class;
            attr.ah_attr.grh.flow_label = g.flow_label;
        }
        self.modify(
            &mut attr,
            m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER,
        )
    }

    /// RTR → RTS.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `ibv_modify_qp`.
    pub fn to_rts(&self, a: &RtsAttr) -> Result<()> {
        let mut attr = ibv_qp_attr {
            qp_state: 3,
            sq_psn: a.sq_psn & 0xff_ffff,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            max_rd_atomic: a.max_rd_atomic,
            ..Default::default()
        };
        self.modify(
            &mut attr,
            m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC,
        )
    }

    /// The packet sequence number this QP sends its first request with (24 bits): chosen at
    /// random when the QP is created, the same at every call, and the one [`Qp::endpoint`]
    /// announces and [`Qp::connect`] sends from. A transition to RTS with another PSN
    /// ([`Qp::connect_with`], [`Qp::to_rts`], or rdma_cm, which chooses its own) replaces it, so
    /// that it always names the PSN in use.
    pub fn psn(&self) -> u32 {
        self.inner.psn.load(Ordering::Acquire)
    }

    /// This side's address for connecting: the device's first active port, its default GID
    /// ([`Context::address`](crate::Context::address) with no index) and the port's MTU.
    fn local_address(&self) -> Result<LocalAddress> {
        let ctx = self.inner._pd.context();
        let port = ctx.active_port()?;
        ctx.address(port, None)
    }

    /// What the peer needs to connect to this QP: the LID, QP number, first PSN
    /// ([`Qp::psn`]) and GID, on the device's first active port with its default GID. Send it
    /// to the peer (for instance in [`exchange::Hello`](crate::connect::exchange::Hello)),
    /// which passes it to its own [`Qp::connect`]. Every call returns the same.
    ///
    /// For another port or GID, build the [`Endpoint`] from
    /// [`Context::address`](crate::Context::address) and [`Qp::psn`], and connect with
    /// [`Qp::connect_with`].
    ///
    /// # Errors
    ///
    /// [`Error::NoActivePort`]; [`Error::Verbs`] from the port query;
    /// [`Error::InvalidArgument`] when a RoCE port has no GID.
    pub fn endpoint(&self) -> Result<Endpoint> {
        let local = self.local_address()?;
        Ok(Endpoint {
            lid: local.lid,
            qpn: self.qpn(),
            psn: self.psn(),
            gid: local.gid,
        })
    }

    /// The attributes [`Qp::connect`] uses to reach `peer`: [`ConnectAttr::new`]'s defaults
    /// on the port and GID [`Qp::endpoint`] announces, sending from [`Qp::psn`], with the
    /// port's active MTU as the path MTU. Adjust them and pass them to [`Qp::connect_with`]:
    ///
    /// ```no_run
    /// # fn f(qp: &zverbs::Qp, peer: &zverbs::connect::Endpoint) -> zverbs::Result<()> {
    /// qp.connect_with(&qp.connect_attr(peer)?.rnr(7, 12).mtu(zverbs::Mtu::M1024))?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Qp::endpoint`].
    pub fn connect_attr(&self, peer: &Endpoint) -> Result<ConnectAttr> {
        let local = self.local_address()?;
        Ok(ConnectAttr::new(local.port, self.psn(), peer, local.gid_index).mtu(local.active_mtu))
    }

    /// Connects this QP to `peer` (the [`Qp::endpoint`] of the QP at the other end): INIT,
    /// RTR (receiving from the peer's PSN) and RTS (sending from this QP's own, announced,
    /// [`Qp::psn`]), with [`Qp::connect_attr`]'s defaults. Both sides call it, each with the
    /// other's endpoint; [`connect_pair`] does both for two QPs of this process.
    ///
    /// The path MTU is this port's active MTU: for a peer whose port has a smaller one, lower
    /// it with [`Qp::connect_attr`] and [`Qp::connect_with`].
    ///
    /// # Errors
    ///
    /// As [`Qp::endpoint`]; [`Error::Verbs`] from the three transitions (EINVAL from RTR often
    /// means a GID the port cannot route to).
    pub fn connect(&self, peer: &Endpoint) -> Result<()> {
        self.connect_with(&self.connect_attr(peer)?)
    }

    /// INIT, RTR and RTS in one go, with attributes chosen by the caller (from
    /// [`Qp::connect_attr`] or [`ConnectAttr::new`]). The PSN it sends from
    /// (`c.rts.sq_psn`) becomes [`Qp::psn`].
    ///
    /// # Errors
    ///
    /// As the three steps.
    pub fn connect_with(&self, c: &ConnectAttr) -> Result<()> {
        self.to_init(&c.init)?;
        self.to_rtr(&c.rtr)?;
        self.to_rts(&c.rts)
    }

    /// `ibv_modify_qp` with attributes computed elsewhere (rdma_cm's `rdma_init_qp_attr`).
    pub(crate) fn modify_raw(&self, attr: &mut ibv_qp_attr, mask: i32) -> Result<()> {
        self.modify(attr, mask)
    }
}

/// The builder's adjustments for a DC QP: a DCI has no receive queue and no SRQ; a DCT needs
/// an SRQ and has no send queue (its send capabilities are the smallest).
pub(crate) fn shape(qp_type: QpType, has_srq: bool, caps: &mut QpCaps) -> Result<()> {
    match qp_type {
        QpType::Dci => {
            if has_srq {
                return Err(Error::InvalidArgument(
                    "a DC initiator receives nothing: it takes no SRQ".into(),
                ));
            }
            caps.max_recv_wr = 0;
            caps.max_recv_sge = 0;
        }
        QpType::Dct => {
            if !has_srq {
                return Err(Error::InvalidArgument(
                    "a DC target takes its receives from an SRQ: QpBuilder::srq".into(),
                ));
            }
            caps.max_send_wr = 1;
            caps.max_send_sge = 1;
            caps.max_inline_data = 0;
        }
        _ => {}
    }
    Ok(())
}

// The tables of the pollers that serve a QP (`bindings.rs`): built here, where a QP's
// states are known, and published when a QP joins or leaves a CQ.

/// The direct table of `cq` for `qps`.
pub(crate) fn direct_table(cq: &Cq, qps: &[Arc<QpInner>], wqs: &[Arc<WqBinding>]) -> DirectTable {
    let mut bindings = Vec::with_capacity(qps.len());
    let mut srqs = Vec::new();
    for qp in qps {
        let QpData::Direct(d) = &qp.data else {
            continue;
        };
        let sq = qp.send_cq.is(cq).then(|| d.sq_state.clone());
        let on_cq = qp.recv_cq.is(cq);
        bindings.push(match qp.srq.as_ref().and_then(|s| s.direct_state()) {
            // Its receives come from the SRQ: this poller frees its WQEs.
            Some(srq) => {
                if on_cq {
                    srqs.extend(
                        qp.srq
                            .as_ref()
                            .map(|s| s.inner.clone() as Arc<dyn Send + Sync>),
                    );
                }
                zverbs_mlx5dv::CqBinding {
                    qpn: qp.provider.qpn(),
                    sq,
                    rq: None,
                    srq: on_cq.then(|| srq.clone()),
                }
            }
            None => zverbs_mlx5dv::CqBinding {
                qpn: qp.provider.qpn(),
                sq,
                rq: on_cq.then(|| d.rq_state.clone()),
                srq: None,
            },
        });
        if on_cq && qp.sole_receiver.load(Ordering::Acquire) {
            // The CQ's one receive queue: its receives name no binding (`Cq::hold` keeps any
            // other queue off the CQ).
            bindings.push(sole_receiver(d.rq_state.clone()));
        }
    }
    for wq in wqs {
        if let WqRq::Direct(rq) = &wq.rq {
            bindings.push(zverbs_mlx5dv::CqBinding {
                qpn: wq.wqn,
                sq: None,
                rq: Some(rq.clone()),
                srq: None,
            });
            if wq.sole_receiver.load(Ordering::Acquire) {
                bindings.push(sole_receiver(rq.clone()));
            }
        }
    }
    DirectTable {
        bindings: bindings.into_boxed_slice(),
        srqs,
    }
}

/// The binding of a CQ's one receive queue, whose receive completions name no binding.
fn sole_receiver(rq: crate::bindings::RqStateHandle) -> DirectBinding {
    zverbs_mlx5dv::CqBinding {
        qpn: DirectBinding::SOLE_RECEIVER,
        sq: None,
        rq: Some(rq),
        srq: None,
    }
}

/// The fallback table of `cq` for `qps`.
pub(crate) fn verbs_table(cq: &Cq, qps: &[Arc<QpInner>], wqs: &[Arc<WqBinding>]) -> VerbsTable {
    let mut bindings = Vec::with_capacity(qps.len());
    for qp in qps {
        let QpData::Verbs(v) = &qp.data else {
            continue;
        };
        let on_cq = qp.recv_cq.is(cq);
        // A raw packet QP's receive completions carry the flow tag where the QP number would
        // be: its receives are found by the key in their `wr_id` (`fallback::RecvQueue::keyed`).
        let raw = qp.qp_type == QpType::RawPacket;
        bindings.push(fallback::Binding {
            qpn: qp.provider.qpn(),
            sq: qp.send_cq.is(cq).then(|| v.sq.clone()),
            rq: (on_cq && qp.srq.is_none() && !raw).then(|| v.rq.clone()),
            srq: on_cq && qp.srq.is_some(),
        });
        if raw && on_cq {
            bindings.push(fallback::Binding::keyed(qp.provider.qpn(), v.rq.clone()));
        }
    }
    for wq in wqs {
        if let WqRq::Verbs(rq) = &wq.rq {
            bindings.push(fallback::Binding::keyed(wq.wqn, rq.clone()));
        }
    }
    bindings.into_boxed_slice()
}

/// After the registry of `cq` changed: when its poller is out, publishes the table of the QPs
/// it has now. Returns the QPs it reached, to be dropped by the caller after the lock (the last
/// handle of one may go with them, and its destruction takes the lock again).
pub(crate) fn republish(cq: &Cq, reg: &mut MutexGuard<'_, Registry>) -> Vec<Arc<QpInner>> {
    reg.qps.retain(|w| w.strong_count() > 0);
    reg.wqs.retain(|w| w.strong_count() > 0);
    if !reg.poller_taken {
        return Vec::new();
    }
    let qps = attached(reg);
    let wqs = attached_wqs(reg);
    match &cq.inner.tables {
        Tables::Direct(h) => h.publish(direct_table(cq, &qps, &wqs)),
        Tables::Verbs(h) => h.publish(verbs_table(cq, &qps, &wqs)),
    }
    qps
}

/// The live receive work queues of a CQ's registry.
pub(crate) fn attached_wqs(reg: &Registry) -> Vec<Arc<WqBinding>> {
    reg.wqs.iter().filter_map(Weak::upgrade).collect()
}

/// The live QPs of a CQ's registry (each a [`QpInner`], kept there as `dyn Any`: the registry's
/// module stands below this one).
pub(crate) fn attached(reg: &Registry) -> Vec<Arc<QpInner>> {
    reg.qps
        .iter()
        .filter_map(Weak::upgrade)
        .filter_map(|qp| qp.downcast::<QpInner>().ok())
        .collect()
}

/// Connects two QPs of this process to each other: each [`Qp::connect`]s to the other's
/// [`Qp::endpoint`]. The QPs may be on one device or on two.
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// let ctx = zverbs::open_device(Some("zverbs_sim0"), &zverbs::ContextOptions::default())?;
/// let pd = ctx.alloc_pd()?;
/// let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// let a = pd.qp_builder(&cq_a, &cq_a).build()?;
/// let b = pd.qp_builder(&cq_b, &cq_b).build()?;
/// zverbs::connect_pair(&a, &b)?; // INIT, RTR, RTS, both ways
/// assert_eq!(a.state(), zverbs::QpState::Rts);
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
///
/// # Errors
///
/// As [`Qp::connect`]; when `b` fails, `a` is already connected (to a peer that is not).
pub fn connect_pair(a: &Qp, b: &Qp) -> Result<()> {
    let (ea, eb) = (a.endpoint()?, b.endpoint()?);
    a.connect(&eb)?;
    b.connect(&ea)
}

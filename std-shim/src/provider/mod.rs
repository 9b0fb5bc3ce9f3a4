//! The seam between the control-path API and what implements a device.
//!
//! The public types ([`Context`](crate::Context), [`Pd`](crate::Pd), [`Cq`](crate::Cq),
//! [`Qp`](crate::Qp), the memory regions) own a boxed provider object each and know nothing
//! of rdma-core. A provider creates the objects and tells, for each CQ and QP, which engine
//! drives its data path:
//!
//! - [`CqEngine::Direct`] / [`QpEngine::Direct`]: the queue memory laid out as libmlx5 lays
//!   it out ([`CqLayout`], [`QpLayout`]), driven by `zverbs-mlx5dv`;
//! - [`CqEngine::Verbs`] / [`QpEngine::Verbs`]: an rdma-core `ibv_cq` / `ibv_qp`, driven by
//!   the libibverbs fallback.
//!
//! The one provider today is rdma-core ([`verbs`]). A device without rdma-core underneath
//! (the software mlx5 device) implements the same traits and answers with `Direct` engines
//! only; the rest of the crate needs no change for it but a device-list entry.

#[cfg(test)]
pub(crate) mod fake;
#[cfg(feature = "sim")]
pub(crate) mod sim;
#[cfg(feature = "sim")]
pub(crate) mod sim_channel;
pub(crate) mod verbs;

use std::any::Any;
use std::fmt::Debug;
use std::ptr::NonNull;

use zverbs_mlx5dv::{CqLayout, QpLayout};

use crate::backend::DirectSupport;
use crate::error::Error;
use crate::error::Result;
use crate::types::access::AccessFlags;
use crate::types::ah::AhAttr;
use crate::types::device::Gid;
use crate::types::device::{DeviceAttr, GidEntry, PortAttr};
use crate::types::eth::{FlowRule, FlowRuleError, RawCaps, RxHash, WqShape};
use crate::types::event::AsyncEvent;
use crate::types::qp::{QpCaps, QpType};
use std::os::fd::BorrowedFd;
use zverbs_ffi::types::{ibv_ah, ibv_cq, ibv_qp, ibv_qp_attr, ibv_srq};

/// What reads a context's events (one per provider).
pub(crate) trait AsyncEventSource: Send + Sync + Debug {
    /// The non-blocking fd, readable while events are pending.
    fn fd(&self) -> BorrowedFd<'_>;
    /// The next event, converted (and acknowledged), if one is pending.
    fn try_next(&self) -> Result<Option<AsyncEvent>>;
}

/// The error of a provider without asynchronous events.
pub(crate) fn unsupported() -> Error {
    Error::Verbs {
        verb: "ibv_get_async_event",
        source: std::io::Error::from(std::io::ErrorKind::Unsupported),
    }
}

/// An open device.
pub(crate) trait ContextProvider: Send + Sync + Debug {
    /// The device's name (`mlx5_0`, `rxe0`, ...).
    fn name(&self) -> &str;
    /// Device attributes.
    fn query_device(&self) -> Result<DeviceAttr>;
    /// Port attributes.
    fn query_port(&self, port: u8) -> Result<PortAttr>;
    /// One GID table entry.
    fn query_gid(&self, port: u8, index: u32) -> Result<GidEntry>;
    /// Whether the direct backend can drive this device's queues.
    fn direct_support(&self) -> DirectSupport;
    /// Whether the device's 8-byte atomics treat memory as big-endian (ConnectX on a
    /// little-endian host: the target and the returned original value are big-endian) rather
    /// than in host order (rxe and most other devices).
    fn atomics_big_endian(&self) -> bool {
        false
    }
    /// Whether this is the software device (whose `SimControl` the
    /// context hands out).
    #[cfg(feature = "sim")]
    fn is_sim(&self) -> bool {
        false
    }
    /// A protection domain.
    fn alloc_pd(&self) -> Result<Box<dyn PdProvider>>;
    /// A completion queue of at least `cqe` entries; `direct` asks for a direct engine.
    fn create_cq(&self, cqe: u32, direct: bool) -> Result<(Box<dyn CqProvider>, EngineNote)>;
    /// A reader of the device's asynchronous events.
    fn async_events(&self) -> Result<Box<dyn crate::provider::AsyncEventSource>> {
        Err(crate::provider::unsupported())
    }
    /// The device clock now (frequency, timestamp mask, timecounter snapshot).
    fn clock(&self) -> Result<crate::types::clock::ClockSnapshot> {
        Err(crate::error::Error::NoTimestamps {
            device: self.name().to_string(),
            reason: "the provider has no device clock".into(),
        })
    }
    /// As [`ContextProvider::create_cq`], for a CQ whose completions carry the device clock
    /// (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`), its events going to `channel` (made by this
    /// provider) when one is given.
    fn create_cq_timestamped(
        &self,
        cqe: u32,
        direct: bool,
        channel: Option<&dyn ChannelProvider>,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        let _ = (cqe, direct, channel);
        Err(crate::error::Error::NoTimestamps {
            device: self.name().to_string(),
            reason: "the provider cannot create CQs with completion timestamps".into(),
        })
    }
    /// What the device does with raw packets on `port`.
    fn raw_support(&self, port: u8) -> Result<RawSupport> {
        let _ = port;
        Err(Error::NoRawPacket {
            device: self.name().to_string(),
            reason: "the provider has no raw packet QPs".into(),
        })
    }
    /// An indirection table over `wqs` (a power of two of them, this provider's).
    fn create_ind_table(&self, wqs: &[&dyn WqProvider]) -> Result<Box<dyn IndTableProvider>> {
        let _ = wqs;
        Err(Error::NoRawPacket {
            device: self.name().to_string(),
            reason: "the provider has no receive work queues".into(),
        })
    }
    /// A completion channel (`ibv_create_comp_channel`).
    fn create_comp_channel(&self) -> Result<Box<dyn ChannelProvider>> {
        Err(crate::error::EventError::Unsupported(self.name().to_owned()).into())
    }
    /// As [`ContextProvider::create_cq`], for a CQ whose events go to `channel` (made by this
    /// provider).
    fn create_cq_on_channel(
        &self,
        cqe: u32,
        direct: bool,
        channel: &dyn ChannelProvider,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        let _ = (cqe, direct, channel);
        Err(crate::error::EventError::Unsupported(self.name().to_owned()).into())
    }
    /// As [`ContextProvider::create_cq`], for a direct CQ whose device compresses CQEs in
    /// `format` ([`crate::CqBuilder::compressed`]), with completion timestamps when
    /// `timestamps` says so and its events going to `channel` when one is given.
    fn create_cq_compressed(
        &self,
        cqe: u32,
        format: zverbs_mlx5dv::prm::mini::MiniCqeFormat,
        timestamps: bool,
        channel: Option<&dyn ChannelProvider>,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        let _ = (cqe, format, timestamps, channel);
        Err(crate::error::Error::NoCqeCompression {
            device: self.name().to_string(),
            reason: "the provider cannot create CQs with compressed CQEs".into(),
        })
    }
}

/// What a device does with raw packets on one of its ports ([`ContextProvider::raw_support`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawSupport {
    /// Its raw packet capabilities.
    pub(crate) caps: RawCaps,
    /// Bytes of each frame a send WQE must carry inline in its Ethernet segment (0 or 18).
    pub(crate) min_inline: u16,
    /// The largest frame the port sends: its MTU, the Ethernet header and one VLAN tag.
    pub(crate) max_frame: u32,
    /// Whether the kernel asks for `CAP_NET_RAW` (an rdma-core device; the software device
    /// runs in the process and has no privileges to ask for).
    pub(crate) needs_cap_net_raw: bool,
}

/// A flow rule, removed when dropped.
pub(crate) trait FlowProvider: Send + Sync + Debug {}

/// A receive work queue (`ibv_create_wq`), destroyed when dropped.
pub(crate) trait WqProvider: Any + Send + Sync + Debug {
    /// The WQ number.
    fn wqn(&self) -> u32;
    /// Receive requests and scatter entries per request it really has.
    fn caps(&self) -> (u32, u32);
    /// Moves it to ready (`ibv_modify_wq` to `IBV_WQS_RDY`): it takes packets from then on.
    fn ready(&self) -> Result<()>;
    /// What drives it.
    fn engine(&self) -> WqEngine;
    /// As [`QpProvider::user_index`], for its receive completions.
    fn user_index(&self) -> Option<u32> {
        None
    }
}

/// A receive work queue's engine.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WqEngine {
    /// Its ring (`mlx5dv_init_obj(MLX5DV_OBJ_RWQ)`) and one-word doorbell record.
    Direct {
        layout: zverbs_mlx5dv::WqLayout,
        dbrec: NonNull<u32>,
    },
    /// An rdma-core `ibv_wq`, posted to with `ibv_post_wq_recv`.
    Verbs(NonNull<zverbs_ffi::eth::ibv_wq>),
}

/// An indirection table over receive work queues, destroyed when dropped (after the RSS QPs
/// over it: they hold it).
pub(crate) trait IndTableProvider: Any + Send + Sync + Debug {}

/// What a flow rule can steer to: a raw packet QP or an RSS QP.
pub(crate) trait FlowTarget: Send + Sync + Debug {
    /// A rule steering what `rule` matches on port `port` to this QP.
    fn create_flow(&self, rule: &FlowRule, port: u8) -> Result<Box<dyn FlowProvider>> {
        let _ = (rule, port);
        Err(FlowRuleError::WrongQp.into())
    }
}

/// An RSS QP (a raw packet QP over an indirection table, `rx_hash_conf`), destroyed when
/// dropped.
pub(crate) trait RssProvider: FlowTarget {}

/// A completion channel: a descriptor that becomes readable when one of its CQs raised an
/// event, and the events themselves.
///
/// A provider recognises the channels it made by their type (`Any`): the software device's
/// CQs take only its own channels.
pub(crate) trait ChannelProvider: Any + Send + Sync + Debug {
    /// The descriptor (non-blocking).
    fn fd(&self) -> std::os::fd::RawFd;
    /// One event, without blocking: the [`event_token`](CqProvider::event_token) of its CQ,
    /// `None` when none is ready. The provider acknowledges nothing: the CQ does, when told
    /// ([`CqProvider::event_taken`]).
    fn take_event(&self) -> Result<Option<usize>>;
    /// The rdma-core channel behind it, if it is one.
    fn verbs_channel(&self) -> Option<*mut zverbs_ffi::types::ibv_comp_channel> {
        None
    }
}

/// A protection domain.
pub(crate) trait PdProvider: Send + Sync + Debug {
    /// Registers `len` bytes at `addr`.
    ///
    /// # Safety
    ///
    /// `addr..addr+len` is mapped memory that stays valid until the returned registration is
    /// dropped.
    unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Box<dyn MrProvider>>;
    /// A queue pair. Its engine kind must match both CQs' (`direct`).
    fn create_qp(&self, init: &QpInit<'_>) -> Result<(Box<dyn QpProvider>, EngineNote)>;
    /// An address handle.
    fn create_ah(&self, attr: &AhAttr) -> Result<Box<dyn AhProvider>>;
    /// A shared receive queue of at least `max_wr` requests of `max_sge` entries; `direct`
    /// asks for its layout.
    fn create_srq(&self, max_wr: u32, max_sge: u32, direct: bool) -> Result<Box<dyn SrqProvider>>;
    /// A receive work queue of at least `max_wr` requests whose completions go to `cq`;
    /// `direct` asks for its layout (a striding one has no other engine).
    fn create_wq(
        &self,
        cq: &dyn CqProvider,
        max_wr: u32,
        shape: WqShape,
        direct: bool,
    ) -> Result<Box<dyn WqProvider>> {
        let _ = (cq, max_wr, shape, direct);
        Err(Error::NoRawPacket {
            device: String::from("this device"),
            reason: "the provider has no receive work queues".into(),
        })
    }
    /// An RSS QP hashing with `hash` over `table` (this provider's).
    fn create_rss_qp(
        &self,
        table: &dyn IndTableProvider,
        hash: &RxHash,
    ) -> Result<Box<dyn RssProvider>> {
        let _ = (table, hash);
        Err(Error::NoRawPacket {
            device: String::from("this device"),
            reason: "the provider has no RSS QPs".into(),
        })
    }
}

/// An address handle.
pub(crate) trait AhProvider: Send + Sync + Debug {
    /// The mlx5 address vector (`struct mlx5_wqe_av`, 48 bytes), where the device has one.
    fn av(&self) -> Option<&[u8; 48]>;
    /// The rdma-core handle, null on a device without rdma-core.
    fn raw(&self) -> *mut ibv_ah;
}

/// A shared receive queue.
pub(crate) trait SrqProvider: Send + Sync + Debug {
    /// The SRQ number, where the device reports it.
    fn srqn(&self) -> Option<u32>;
    /// Receive requests and scatter entries per request it really has.
    fn caps(&self) -> (u32, u32);
    /// Arms the limit event (`ibv_modify_srq` with `IBV_SRQ_LIMIT`); 0 disarms it.
    fn arm(&self, limit: u32) -> Result<()>;
    /// What drives it.
    fn engine(&self) -> SrqEngine;
    /// The rdma-core SRQ behind it, if it is one (QPs of rdma-core devices name it).
    fn verbs_srq(&self) -> Option<*mut ibv_srq> {
        None
    }
    /// What names it in an asynchronous event: the `ibv_srq` address libibverbs reports, or
    /// the device's SRQ number where there is no rdma-core SRQ.
    fn event_id(&self) -> u64 {
        self.verbs_srq().map_or(0, |p| p as u64)
    }
}

/// A shared receive queue's memory as `mlx5dv_init_obj(MLX5DV_OBJ_SRQ)` reports it, for the
/// direct path: the direct backend's own type.
pub use zverbs_mlx5dv::SrqLayout;

/// A shared receive queue's engine.
#[derive(Clone, Copy, Debug)]
pub(crate) enum SrqEngine {
    Direct(SrqLayout),
    Verbs(NonNull<ibv_srq>),
}

/// What a QP is created with.
#[derive(Debug)]
pub(crate) struct QpInit<'a> {
    pub(crate) send_cq: &'a dyn CqProvider,
    pub(crate) recv_cq: &'a dyn CqProvider,
    pub(crate) caps: QpCaps,
    pub(crate) sig_all: bool,
    pub(crate) direct: bool,
    pub(crate) qp_type: QpType,
    /// The shared receive queue the QP takes its receives from.
    pub(crate) srq: Option<&'a dyn SrqProvider>,
    /// A DC target's access key (`dct_access_key`); 0 for other QPs.
    pub(crate) dc_access_key: u64,
}

impl QpInit<'_> {
    /// Whether a directly driven QP is created allowing scatter-to-CQE (small received SENDs
    /// delivered in the CQE, which the direct poller decodes): RC QPs (the kernel never
    /// scatters on UD) with their own receive queue (the poller does not decode scattered
    /// receives of a shared receive queue) whose sends are not all signaled (with
    /// `sq_sig_all` the kernel scatters READ and atomic responses into the send CQE too, which
    /// the poller does not decode either).
    pub(crate) fn scatter_to_cqe(&self) -> bool {
        self.direct && self.qp_type == QpType::Rc && self.srq.is_none() && !self.sig_all
    }
}

/// A registered memory region.
pub(crate) trait MrProvider: Send + Sync + Debug {
    fn lkey(&self) -> u32;
    fn rkey(&self) -> u32;
}

/// A completion queue.
pub(crate) trait CqProvider: Send + Sync + Debug {
    /// Entries the CQ really has.
    fn cqe(&self) -> u32;
    /// What drives it.
    fn engine(&self) -> CqEngine;
    /// The rdma-core CQ behind it, if it is one (QPs of rdma-core devices need it).
    fn verbs_cq(&self) -> Option<*mut ibv_cq> {
        None
    }
    /// What names it in an asynchronous event: the `ibv_cq` address libibverbs reports, or
    /// the device's CQ number where there is no rdma-core CQ.
    fn event_id(&self) -> u64 {
        self.verbs_cq().map_or(0, |p| p as u64)
    }
    /// Whether its completions carry the device clock.
    fn timestamps(&self) -> bool {
        false
    }
    /// The extended rdma-core CQ behind it, if it was created as one (`ibv_create_cq_ex`):
    /// the fallback polls it with `ibv_start_poll` to read timestamps.
    fn verbs_cq_ex(&self) -> Option<*mut zverbs_ffi::types::ibv_cq_ex> {
        None
    }
    /// What names this CQ in its channel's events ([`ChannelProvider::take_event`]).
    fn event_token(&self) -> usize {
        0
    }
    /// The UAR page the direct arm writes (`mlx5dv_cq.cq_uar`), for a direct CQ on a channel.
    fn cq_uar(&self) -> Option<NonNull<u8>> {
        None
    }
    /// Arms the CQ through the provider (`ibv_req_notify_cq`), for a CQ not armed directly.
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        let _ = solicited_only;
        Err(crate::error::EventError::NoChannel.into())
    }
    /// An event of this CQ was taken from its channel: acknowledge it (in batches; every one
    /// before the CQ is destroyed).
    fn event_taken(&self) {}
}

/// A queue pair.
pub(crate) trait QpProvider: FlowTarget {
    fn qpn(&self) -> u32;
    /// The capabilities the QP really has.
    fn caps(&self) -> QpCaps;
    /// `ibv_modify_qp` with `mask` (the attribute struct is the neutral carrier).
    fn modify(&self, attr: &mut ibv_qp_attr, mask: i32) -> Result<()>;
    /// What drives it.
    fn engine(&self) -> QpEngine;
    /// For a direct engine: whether its BlueFlame register is its own.
    fn register(&self) -> RegisterOwner;
    /// `ibv_attach_mcast` (`attach`) or `ibv_detach_mcast`.
    fn mcast(&self, attach: bool, gid: &Gid, lid: u16) -> Result<()>;
    /// A DC target's access key (0 for other QPs).
    fn dc_access_key(&self) -> u64 {
        0
    }
    /// The user index its receive completions carry (`srqn_uidx`, CQE version 1), where the
    /// provider knows it: the direct poller finds an Ethernet receive by it (the QP number's
    /// place holds the flow tag). The software device's is the QP number; libmlx5 chooses its
    /// own and reports it through no verb.
    fn user_index(&self) -> Option<u32> {
        None
    }
    /// The QP's state as the device knows it (`enum ibv_qp_state`, `ibv_query_qp`), or `None`
    /// where the device knows no more than the library's own transitions (the software
    /// device, outside the error state).
    fn query_state(&self) -> Result<Option<u32>>;
}

/// What a provider knows of a direct QP's BlueFlame register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RegisterOwner {
    /// No other QP can be given it; why (a thread domain's UAR, the software device's).
    Dedicated(&'static str),
    /// libmlx5 chose it and may give it to other QPs of the process, now or later.
    Assigned,
}

/// Why an object got the engine it got (for [`BackendReport`](crate::BackendReport)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EngineNote(pub(crate) String);

/// A CQ's data-path engine.
#[derive(Clone, Copy, Debug)]
pub(crate) enum CqEngine {
    Direct(CqLayout),
    Verbs(NonNull<ibv_cq>),
}

/// A QP's data-path engine.
#[derive(Clone, Copy, Debug)]
pub(crate) enum QpEngine {
    Direct(QpLayout),
    Verbs(NonNull<ibv_qp>),
}

impl CqEngine {
    pub(crate) fn is_direct(&self) -> bool {
        matches!(self, CqEngine::Direct(_))
    }
}

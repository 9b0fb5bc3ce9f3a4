//! The software mlx5 device as a provider.
//!
//! One device per process, [`NAME`], created on first use and kept for the life of the process
//! (its queue memory lives as long as it does). Its progress thread runs while a context is
//! open on it: the first [`open`] starts it, dropping the last context (after every object
//! made from it, which keep it alive) stops it and waits for it to exit. [`SimControl`]
//! steps the device by hand instead, injects faults and sets the thread's idle behaviour. Every CQ and QP is
//! a direct engine: the device hands out the layouts `mlx5dv_init_obj` would, and
//! `zverbs-mlx5dv` drives them exactly as on a ConnectX. It has no libibverbs side, so the
//! fallback backend cannot be asked for.
//!
//! A connection is one-sided, as on hardware: at RTR a QP names its peer (`dest_qp_num`, a QP
//! of this process, which may be itself; a destination LID, when given, must be this port's),
//! and traffic flows once both sides name each other. A QP accepts requests only from the QP
//! it named: a third QP that names it gets "transport retry exceeded", and naming a QP that
//! already names another is refused at RTR.
//! Dropping a QP, CQ or SRQ destroys it in the device, which frees the rings, records and
//! registers it allocated for it (its table entry is reused): a process that creates and
//! drops queues for ever holds only what its live queues need.

use std::any::Any;
use std::io;
use std::marker::PhantomData;
use std::sync::{Mutex, MutexGuard, OnceLock};

use zverbs_sim::{self as sim, CqConfig, QpConfig, SimError, SrqConfig};

mod events;

use super::sim_channel::SimChannel;
use super::{
    AhProvider, ContextProvider, CqEngine, CqProvider, EngineNote, FlowProvider, FlowTarget,
    IndTableProvider, MrProvider, PdProvider, QpEngine, QpInit, QpProvider, RawSupport,
    RegisterOwner, RssProvider, SrqEngine, SrqLayout, SrqProvider, WqEngine, WqProvider,
};
use crate::backend::DirectSupport;
use crate::error::{Error, Result};
use crate::types::access::AccessFlags;
use crate::types::ah::AhAttr;
use crate::types::device::{
    DeviceAttr, Gid, GidEntry, GidType, LinkLayer, Mtu, PortAttr, PortState,
};
use crate::types::eth::{FlowRule, FlowRuleError, RawCaps, RxHash, WqShape};
use crate::types::qp::{QpCaps, QpType};
use zverbs_ffi::types::ibv_ah;
use zverbs_ffi::types::{ibv_qp_attr, qp_attr_mask};

/// The software device's name in the device list.
pub(crate) const NAME: &str = crate::types::device::SOFTWARE_DEVICE;

/// Its node GUID.
pub(crate) const GUID: u64 = 0x7a76_6572_6273_0001;

/// The LID of its one port.
const LID: u16 = 1;

/// `IBV_QPS_INIT`, `IBV_QPS_RTR`, `IBV_QPS_RTS` and `IBV_QPS_ERR`.
const QPS_RESET: u32 = 0;
const QPS_INIT: u32 = 1;
const QPS_RTR: u32 = 2;
const QPS_RTS: u32 = 3;
const QPS_ERR: u32 = 6;

/// BlueFlame buffer size the device offers (what a ConnectX offers), unless
/// `MLX5_SHUT_UP_BF=1` asks for doorbell-only queues as it does of libmlx5.
const BF_SIZE: u32 = 256;

/// Who uses the device: the contexts open on it, and whether a caller asked to step it by hand
/// ([`SimControl::set_stepped`]). The progress thread runs while `contexts > 0 && !stepped`.
#[derive(Debug)]
struct Users {
    contexts: usize,
    stepped: bool,
}

static USERS: Mutex<Users> = Mutex::new(Users {
    contexts: 0,
    stepped: false,
});

fn users() -> MutexGuard<'static, Users> {
    USERS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Starts or stops the progress thread as `u` says it should run.
fn apply(u: &Users) {
    if u.contexts > 0 && !u.stepped {
        device().start();
    } else {
        device().stop();
    }
}

/// The process's software device, created on first use (its progress thread is the
/// contexts' business).
fn device() -> &'static sim::Device {
    static DEVICE: OnceLock<sim::Device> = OnceLock::new();
    DEVICE.get_or_init(|| {
        let cfg = sim::DeviceConfig {
            max_qps: 1024,
            max_cqs: 1024,
            max_mrs: 4096,
        };
        // The sizes are within the device's limits: only a failure to allocate its tables
        // (a few hundred kilobytes) can end here, where an allocation would abort anyway.
        match sim::Device::with_config(cfg) {
            Ok(d) => d,
            Err(e) => panic!("{NAME}: {e}"),
        }
    })
}

fn bf_size() -> u32 {
    if crate::backend::shut_up_bf() {
        0
    } else {
        BF_SIZE
    }
}

fn sim_err(op: &'static str, e: SimError) -> Error {
    let kind = match e {
        SimError::TooMany | SimError::OutOfMemory => io::ErrorKind::OutOfMemory,
        SimError::NoSuchQp(_) | SimError::NoSuchCq(_) | SimError::NoSuchMr(_) => {
            io::ErrorKind::NotFound
        }
        SimError::AlreadyConnected(_) => io::ErrorKind::AlreadyExists,
        SimError::PeerTaken { .. } => io::ErrorKind::ResourceBusy,
        _ => io::ErrorKind::InvalidInput,
    };
    Error::Verbs {
        verb: op,
        source: io::Error::new(kind, e.to_string()),
    }
}

/// An open software device: its progress thread runs while one is open (unless stepped).
#[derive(Debug)]
pub(crate) struct SimContext(());

/// Opens the software device, starting its progress thread if it is the first context.
pub(crate) fn open() -> SimContext {
    let mut u = users();
    u.contexts += 1;
    apply(&u);
    SimContext(())
}

impl Drop for SimContext {
    fn drop(&mut self) {
        let mut u = users();
        u.contexts -= 1;
        // The last context gone: the thread stops and is joined before this returns.
        apply(&u);
    }
}

impl ContextProvider for SimContext {
    fn name(&self) -> &str {
        NAME
    }

    fn is_sim(&self) -> bool {
        true
    }

    fn async_events(&self) -> Result<Box<dyn crate::provider::AsyncEventSource>> {
        events::SimEvents::open()
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(DeviceAttr {
            fw_ver: env!("CARGO_PKG_VERSION").into(),
            node_guid: GUID,
            vendor_id: 0,
            vendor_part_id: 0,
            max_mr_size: 1 << 40,
            max_qp: 1024,
            max_qp_wr: 4096,
            max_sge: 30,
            max_cq: 1024,
            max_cqe: 1 << 22,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            atomic_cap: 1,
            phys_port_cnt: 1,
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(Error::from_ret("ibv_query_port", libc::EINVAL));
        }
        Ok(PortAttr {
            state: match device().port_state() {
                sim::PortState::Active => PortState::Active,
                sim::PortState::Down => PortState::Down,
            },
            max_mtu: Mtu::M4096,
            active_mtu: Mtu::M4096,
            lid: LID,
            sm_lid: LID,
            gid_tbl_len: 1,
            max_msg_sz: 1 << 31,
            link_layer: LinkLayer::InfiniBand,
        })
    }

    fn query_gid(&self, port: u8, index: u32) -> Result<GidEntry> {
        if port != 1 || index != 0 {
            return Err(Error::from_ret("ibv_query_gid", libc::EINVAL));
        }
        let mut gid = Gid::default();
        gid.0[..2].copy_from_slice(&[0xfe, 0x80]);
        gid.0[8..].copy_from_slice(&GUID.to_be_bytes());
        Ok(GidEntry {
            gid,
            index,
            port,
            gid_type: GidType::Ib,
        })
    }

    fn direct_support(&self) -> DirectSupport {
        DirectSupport::Yes(format!(
            "{NAME} is the software mlx5 device: its queues are laid out as libmlx5 lays them out"
        ))
    }

    fn alloc_pd(&self) -> Result<Box<dyn PdProvider>> {
        Ok(Box::new(SimPd))
    }

    fn create_cq(&self, cqe: u32, direct: bool) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        if !direct {
            return Err(no_fallback());
        }
        let cq = device()
            .create_cq(CqConfig { cqe })
            .map_err(|e| sim_err("create_cq", e))?;
        Ok((
            Box::new(SimCq(cq)),
            EngineNote(format!("{NAME}: direct CQ of {} CQEs", cq.layout.cqe_cnt)),
        ))
    }

    fn clock(&self) -> Result<crate::types::clock::ClockSnapshot> {
        let page = device().clock().clock_info();
        Ok(crate::types::clock::ClockSnapshot {
            khz: sim::clock::CLOCK_KHZ,
            mask: sim::clock::CLOCK_MASK,
            info: zverbs_mlx5dv::clock::ClockInfo::from_page(&page),
            max_age_ns: page.overflow_period,
        })
    }

    fn create_cq_timestamped(
        &self,
        cqe: u32,
        direct: bool,
        channel: Option<&dyn super::ChannelProvider>,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        let (cq, note) = match channel {
            Some(ch) => self.create_cq_on_channel(cqe, direct, ch)?,
            None => self.create_cq(cqe, direct)?,
        };
        let cqn = match cq.engine() {
            CqEngine::Direct(l) => l.cqn,
            CqEngine::Verbs(_) => return Err(no_fallback()),
        };
        device()
            .enable_cq_timestamps(cqn)
            .map_err(|e| sim_err("create_cq", e))?;
        Ok((
            Box::new(TimedCq(cq)),
            EngineNote(format!("{}, with completion timestamps", note.0)),
        ))
    }

    fn create_comp_channel(&self) -> Result<Box<dyn super::ChannelProvider>> {
        Ok(Box::new(SimChannel::new()?))
    }

    fn raw_support(&self, port: u8) -> Result<RawSupport> {
        if port != 1 {
            return Err(Error::from_ret("ibv_query_port", libc::EINVAL));
        }
        // The device models a ConnectX's Ethernet side on its one port beside the InfiniBand
        // one: raw packet QPs, checksums, flow steering. With no part number it inlines the
        // 18-byte L2 header, the size every ConnectX accepts.
        // Checksum offload as the device is set (`SimControl::set_checksum_offload`).
        let ip_csum = device().checksum_offload();
        Ok(RawSupport {
            caps: RawCaps {
                raw_packet_caps: if ip_csum {
                    zverbs_ffi::eth::IBV_RAW_PACKET_CAP_IP_CSUM
                } else {
                    0
                },
                ip_csum,
                flow_steering: true,
            },
            min_inline: crate::types::eth::min_inline_for_part(0),
            max_frame: sim::eth::DEFAULT_MTU + 18,
            needs_cap_net_raw: false,
        })
    }

    fn create_ind_table(&self, wqs: &[&dyn WqProvider]) -> Result<Box<dyn IndTableProvider>> {
        let wqns = wqs
            .iter()
            .map(|w| {
                (*w as &dyn Any)
                    .downcast_ref::<SimWorkQueue>()
                    .map(|w| w.0.wqn)
                    .ok_or_else(|| {
                        Error::InvalidArgument("the work queue is not the software device's".into())
                    })
            })
            .collect::<Result<Vec<u32>>>()?;
        let handle = device()
            .create_rwq_ind_table(&wqns)
            .map_err(|e| sim_err("ibv_create_rwq_ind_table", e))?;
        Ok(Box::new(SimIndTable(handle)))
    }

    fn create_cq_on_channel(
        &self,
        cqe: u32,
        direct: bool,
        channel: &dyn super::ChannelProvider,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        let ch = (channel as &dyn Any)
            .downcast_ref::<SimChannel>()
            .ok_or_else(|| {
                Error::InvalidArgument("the completion channel is not the software device's".into())
            })?;
        let (cq, note) = self.create_cq(cqe, direct)?;
        let cqn = cq.event_token() as u32;
        device()
            .set_cq_event_handler(cqn, Some(ch.handler()))
            .map_err(|e| sim_err("set_cq_event_handler", e))?;
        Ok((cq, note))
    }

    fn create_cq_compressed(
        &self,
        cqe: u32,
        format: zverbs_mlx5dv::prm::mini::MiniCqeFormat,
        timestamps: bool,
        channel: Option<&dyn super::ChannelProvider>,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        let (cq, note) = match (timestamps, channel) {
            (true, ch) => self.create_cq_timestamped(cqe, true, ch)?,
            (false, Some(ch)) => self.create_cq_on_channel(cqe, true, ch)?,
            (false, None) => self.create_cq(cqe, true)?,
        };
        let cqn = match cq.engine() {
            CqEngine::Direct(l) => l.cqn,
            CqEngine::Verbs(_) => return Err(no_fallback()),
        };
        device()
            .enable_cq_compression(cqn, format)
            .map_err(|e| sim_err("create_cq", e))?;
        Ok((
            cq,
            EngineNote(format!("{}, compressed CQEs ({format:?})", note.0)),
        ))
    }
}

fn no_fallback() -> Error {
    Error::Backend {
        requested: crate::backend::BackendKind::Verbs,
        reason: format!("{NAME} has no libibverbs side; only the direct backend drives it"),
    }
}

/// A protection domain (the device's keys are device-wide).
#[derive(Debug)]
struct SimPd;

impl PdProvider for SimPd {
    unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Box<dyn MrProvider>> {
        // SAFETY: (caller) the memory stays valid until the registration is dropped, which
        // deregisters it first.
        let mr = unsafe { device().reg_mr(addr, len, access.into()) }
            .map_err(|e| sim_err("reg_mr", e))?;
        Ok(Box::new(SimMr(mr)))
    }

    fn create_qp(&self, init: &QpInit<'_>) -> Result<(Box<dyn QpProvider>, EngineNote)> {
        if !init.direct {
            return Err(no_fallback());
        }
        let cqn = |cq: &dyn CqProvider| match cq.engine() {
            CqEngine::Direct(l) => Ok(l.cqn),
            CqEngine::Verbs(_) => Err(no_fallback()),
        };
        let c = init.caps;
        let bf = bf_size();
        let qp_type = match init.qp_type {
            QpType::Rc => sim::QpType::Rc,
            QpType::Ud => sim::QpType::Ud,
            QpType::Dci => sim::QpType::Dci,
            QpType::Dct => sim::QpType::Dct,
            QpType::RawPacket => sim::QpType::RawPacket,
        };
        let srq = init
            .srq
            .map(|s| s.srqn().ok_or_else(no_fallback))
            .transpose()?;
        let qp = device()
            .create_qp_ext(
                QpConfig {
                    send_cq: cqn(init.send_cq)?,
                    recv_cq: cqn(init.recv_cq)?,
                    max_send_wr: c.max_send_wr,
                    max_send_sge: c.max_send_sge,
                    max_inline_data: c.max_inline_data,
                    max_recv_wr: c.max_recv_wr,
                    max_recv_sge: c.max_recv_sge,
                    sig_all: init.sig_all,
                    bf_size: bf,
                    rnr_retry: sim::RNR_RETRY_INFINITE,
                },
                qp_type,
                srq,
            )
            .map_err(|e| sim_err("create_qp", e))?;
        if init.qp_type == QpType::Dct {
            device()
                .set_dct_key(qp.qpn, init.dc_access_key)
                .map_err(|e| sim_err("mlx5dv_create_qp", e))?;
        }
        // As libmlx5 creates a QP on a ConnectX: small SENDs it receives come in the CQE,
        // where the direct poller allows it.
        device()
            .set_scatter_to_cqe(qp.qpn, init.scatter_to_cqe())
            .map_err(|e| sim_err("create_qp", e))?;
        let caps = QpCaps {
            max_send_wr: c.max_send_wr,
            max_recv_wr: qp.layout.rq.wqe_cnt,
            max_send_sge: qp.max_send_sge,
            max_recv_sge: if qp.layout.rq.wqe_cnt == 0 {
                0
            } else {
                qp.max_recv_sge
            },
            max_inline_data: qp.max_inline_data,
        };
        let doorbell = if bf == 0 {
            "doorbell only".to_string()
        } else {
            format!("BlueFlame {bf} B")
        };
        Ok((
            Box::new(SimQp {
                qp,
                caps,
                qp_type: init.qp_type,
                dc_access_key: init.dc_access_key,
            }),
            EngineNote(format!("{NAME}: direct QP, {doorbell}")),
        ))
    }

    fn create_ah(&self, attr: &AhAttr) -> Result<Box<dyn AhProvider>> {
        if attr.port != 1 {
            return Err(Error::from_ret("ibv_create_ah", libc::EINVAL));
        }
        let a = sim::AhAttr {
            dlid: attr.dlid,
            sl: attr.sl,
            src_path_bits: attr.src_path_bits,
            grh: attr.grh.map(|g| sim::Grh {
                dgid: g.dgid.0,
                sgid_index: g.sgid_index,
                flow_label: g.flow_label,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
            }),
            multicast: (0xc000..=0xfffe).contains(&attr.dlid),
        };
        let ah = device()
            .create_ah(&a)
            .map_err(|e| sim_err("ibv_create_ah", e))?;
        Ok(Box::new(SimAh(ah)))
    }

    fn create_wq(
        &self,
        cq: &dyn CqProvider,
        max_wr: u32,
        shape: WqShape,
        direct: bool,
    ) -> Result<Box<dyn WqProvider>> {
        if !direct {
            return Err(no_fallback());
        }
        let CqEngine::Direct(l) = cq.engine() else {
            return Err(no_fallback());
        };
        let (max_sge, striding) = match shape {
            WqShape::Ordinary { max_sge } => (max_sge, None),
            WqShape::Striding(s) => (
                1,
                Some(sim::Striding {
                    log_stride_bytes: u32::from(s.log_stride_size),
                    log_num_strides: u32::from(s.log_num_strides),
                }),
            ),
        };
        let wq = device()
            .create_wq(sim::WqConfig {
                cq: l.cqn,
                max_wr,
                max_sge,
                striding,
                two_byte_shift: false,
            })
            .map_err(|e| sim_err("ibv_create_wq", e))?;
        Ok(Box::new(SimWorkQueue(wq)))
    }

    fn create_rss_qp(
        &self,
        table: &dyn IndTableProvider,
        hash: &RxHash,
    ) -> Result<Box<dyn RssProvider>> {
        let t = (table as &dyn Any)
            .downcast_ref::<SimIndTable>()
            .ok_or_else(|| {
                Error::InvalidArgument("the indirection table is not the software device's".into())
            })?;
        let handle = device()
            .create_rss_qp(sim::RssConfig {
                ind_table: t.0,
                fields: sim::RxHashFields::from_bits_truncate(hash.fields.bits()),
                key: hash.key,
            })
            .map_err(|e| sim_err("ibv_create_qp_ex", e))?;
        Ok(Box::new(SimRss(handle)))
    }

    fn create_srq(&self, max_wr: u32, max_sge: u32, direct: bool) -> Result<Box<dyn SrqProvider>> {
        if !direct {
            return Err(no_fallback());
        }
        let srq = device()
            .create_srq(SrqConfig { max_wr, max_sge })
            .map_err(|e| sim_err("ibv_create_srq", e))?;
        Ok(Box::new(SimSrq(srq)))
    }
}

/// A flow rule of `rule` on port `port` steering to `dest`.
fn sim_flow(rule: &FlowRule, port: u8, dest: sim::FlowDest) -> Result<Box<dyn FlowProvider>> {
    rule.check()?;
    if port != 1 {
        return Err(Error::from_ret("ibv_create_flow", libc::EINVAL));
    }
    let handle = device()
        .create_flow(sim::FlowAttr {
            priority: rule.priority,
            spec: rule.spec,
            dest,
            tag: rule.tag,
        })
        .map_err(|e| match e {
            // Another tag on a rule of the same match: the kernel's EEXIST.
            SimError::InvalidConfig(why) if why.contains("tag") && rule.tag.is_some() => {
                FlowRuleError::ConflictingTag.into()
            }
            e => sim_err("ibv_create_flow", e),
        })?;
    Ok(Box::new(SimFlow(handle)))
}

/// A flow rule, removed on drop.
#[derive(Debug)]
struct SimFlow(u32);

impl FlowProvider for SimFlow {}

impl Drop for SimFlow {
    fn drop(&mut self) {
        // Ours, removed once.
        let _ = device().destroy_flow(self.0);
    }
}

/// A receive work queue, destroyed on drop (after the tables over it: they hold it).
#[derive(Debug)]
struct SimWorkQueue(sim::SimWq);

// SAFETY: as for `SimCq`: the ring and record the device allocated for this WQ are freed
// only by its destruction in this provider's `Drop`, after every queue built from them (they
// hold the WQ alive).
unsafe impl Send for SimWorkQueue {}
// SAFETY: as above.
unsafe impl Sync for SimWorkQueue {}

impl WqProvider for SimWorkQueue {
    fn wqn(&self) -> u32 {
        self.0.wqn
    }
    fn caps(&self) -> (u32, u32) {
        let sge = if self.0.striding.is_some() {
            1
        } else {
            self.0.layout.stride / 16
        };
        (self.0.layout.wqe_cnt, sge)
    }
    fn ready(&self) -> Result<()> {
        device()
            .ready_wq(self.0.wqn)
            .map_err(|e| sim_err("ibv_modify_wq", e))
    }
    fn engine(&self) -> WqEngine {
        WqEngine::Direct {
            layout: self.0.layout,
            dbrec: self.0.dbrec,
        }
    }
    fn user_index(&self) -> Option<u32> {
        // A work queue's CQEs carry its number as the user index.
        Some(self.0.wqn)
    }
}

impl Drop for SimWorkQueue {
    fn drop(&mut self) {
        // Ours, destroyed once; no table names it any more (tables hold their queues).
        let _ = device().destroy_wq(self.0.wqn);
    }
}

/// An indirection table, destroyed on drop.
#[derive(Debug)]
struct SimIndTable(u32);

impl IndTableProvider for SimIndTable {}

impl Drop for SimIndTable {
    fn drop(&mut self) {
        // Ours, destroyed once; no RSS QP uses it any more (they hold their table).
        let _ = device().destroy_rwq_ind_table(self.0);
    }
}

/// An RSS QP, destroyed on drop.
#[derive(Debug)]
struct SimRss(u32);

impl FlowTarget for SimRss {
    fn create_flow(&self, rule: &FlowRule, port: u8) -> Result<Box<dyn FlowProvider>> {
        sim_flow(rule, port, sim::FlowDest::Rss(self.0))
    }
}

impl RssProvider for SimRss {}

impl Drop for SimRss {
    fn drop(&mut self) {
        // Ours, destroyed once; no rule steers to it any more (rules hold their QP).
        let _ = device().destroy_rss_qp(self.0);
    }
}

/// An address handle: the device keeps nothing, the vector is all there is.
#[derive(Debug)]
struct SimAh(sim::SimAh);

impl AhProvider for SimAh {
    fn av(&self) -> Option<&[u8; 48]> {
        Some(&self.0.av)
    }
    fn raw(&self) -> *mut ibv_ah {
        std::ptr::null_mut()
    }
}

/// A shared receive queue, destroyed on drop (after every QP on it: they hold it alive).
#[derive(Debug)]
struct SimSrq(sim::SimSrq);

// SAFETY: as for `SimCq`: the layout points into memory the process-wide device allocated for
// this SRQ and frees only in this provider's `Drop` (the SRQ's destruction).
unsafe impl Send for SimSrq {}
// SAFETY: as above.
unsafe impl Sync for SimSrq {}

impl SrqProvider for SimSrq {
    fn srqn(&self) -> Option<u32> {
        Some(self.0.srqn)
    }
    fn caps(&self) -> (u32, u32) {
        // One WQE stays on the free list, as libmlx5 keeps it.
        (self.0.wqe_cnt - 1, self.0.max_gs)
    }
    fn arm(&self, limit: u32) -> Result<()> {
        device()
            .arm_srq(self.0.srqn, limit)
            .map_err(|e| sim_err("ibv_modify_srq", e))
    }
    fn engine(&self) -> SrqEngine {
        SrqEngine::Direct(SrqLayout {
            buf: self.0.buf,
            dbrec: self.0.dbrec,
            stride: self.0.stride,
            wqe_cnt: self.0.wqe_cnt,
            head: self.0.head,
            tail: self.0.tail,
            srqn: self.0.srqn,
        })
    }
    fn event_id(&self) -> u64 {
        u64::from(self.0.srqn)
    }
}

impl Drop for SimSrq {
    fn drop(&mut self) {
        // Ours, destroyed once, and no QP uses it any more (they hold their SRQ alive).
        let _ = device().destroy_srq(self.0.srqn);
    }
}

/// A registered region, deregistered on drop.
#[derive(Debug)]
struct SimMr(sim::Mr);

impl MrProvider for SimMr {
    fn lkey(&self) -> u32 {
        self.0.lkey
    }
    fn rkey(&self) -> u32 {
        self.0.rkey
    }
}

impl Drop for SimMr {
    fn drop(&mut self) {
        // The key is ours and registered once; failure would mean it was already gone.
        let _ = device().dereg_mr(self.0.lkey);
    }
}

/// A CQ, destroyed on drop (after every QP using it: QPs hold their CQs).
#[derive(Debug)]
struct SimCq(sim::SimCq);

impl Drop for SimCq {
    fn drop(&mut self) {
        // Ours, destroyed once, and no QP uses it any more (they hold their CQs alive).
        let _ = device().destroy_cq(self.0.cqn);
    }
}

// SAFETY: the layout points into memory the process-wide device allocated for this CQ and
// frees only when the CQ is destroyed, which is this provider's `Drop`: valid, wherever the
// provider goes, for as long as it lives (and every queue or poller built from the layout
// holds the `Cq` that holds the provider). The queues built from it take care of their own
// thread-safety.
unsafe impl Send for SimCq {}
// SAFETY: as above; the provider itself is immutable.
unsafe impl Sync for SimCq {}

impl CqProvider for SimCq {
    fn cqe(&self) -> u32 {
        // One entry is kept free, as libmlx5 reports `cqe_cnt - 1`.
        self.0.layout.cqe_cnt - 1
    }
    fn engine(&self) -> CqEngine {
        CqEngine::Direct(self.0.layout)
    }
    fn event_id(&self) -> u64 {
        u64::from(self.0.cqn)
    }
    fn event_token(&self) -> usize {
        self.0.cqn as usize
    }
    fn cq_uar(&self) -> Option<std::ptr::NonNull<u8>> {
        device().cq_uar(self.0.cqn).ok()
    }
}

/// A QP.
#[derive(Debug)]
struct SimQp {
    qp: sim::SimQp,
    caps: QpCaps,
    qp_type: QpType,
    /// A DC target's access key.
    dc_access_key: u64,
}

// SAFETY: as for `SimCq`: the rings, record and register the device allocated for this QP are
// freed only by its destruction in this provider's `Drop`, after every queue built from the
// layout (they hold the QP alive).
unsafe impl Send for SimQp {}
// SAFETY: as above.
unsafe impl Sync for SimQp {}

impl FlowTarget for SimQp {
    fn create_flow(&self, rule: &FlowRule, port: u8) -> Result<Box<dyn FlowProvider>> {
        if self.qp_type != QpType::RawPacket {
            return Err(FlowRuleError::WrongQp.into());
        }
        sim_flow(rule, port, sim::FlowDest::RawQp(self.qp.qpn))
    }
}

impl QpProvider for SimQp {
    fn qpn(&self) -> u32 {
        self.qp.qpn
    }
    fn caps(&self) -> QpCaps {
        self.caps
    }
    fn modify(&self, attr: &mut ibv_qp_attr, mask: i32) -> Result<()> {
        if mask & qp_attr_mask::IBV_QP_STATE == 0 {
            return Ok(());
        }
        if self.qp_type == QpType::Ud {
            let e = |e| sim_err("ibv_modify_qp", e);
            return match attr.qp_state {
                QPS_INIT => {
                    if mask & qp_attr_mask::IBV_QP_QKEY == 0 {
                        return Err(Error::from_ret("ibv_modify_qp", libc::EINVAL));
                    }
                    device()
                        .init_ud(self.qp.qpn, attr.qkey, attr.pkey_index)
                        .map_err(e)
                }
                // A UD QP has no peer: the device serves it from RTS on.
                QPS_RTR => Ok(()),
                QPS_RTS => device().ready_ud(self.qp.qpn).map_err(e),
                QPS_ERR => device().set_error(self.qp.qpn).map_err(e),
                QPS_RESET => device().reset_qp(self.qp.qpn).map(drop).map_err(e),
                _ => Ok(()),
            };
        }
        if self.qp_type == QpType::RawPacket {
            let e = |e| sim_err("ibv_modify_qp", e);
            return match attr.qp_state {
                // The port is required at INIT (the kernel's rule for raw packet QPs).
                QPS_INIT if mask & qp_attr_mask::IBV_QP_PORT == 0 || attr.port_num != 1 => {
                    Err(Error::from_ret("ibv_modify_qp", libc::EINVAL))
                }
                // Its receive queue takes frames from creation, as a ConnectX's does from
                // INIT; RTR changes nothing.
                QPS_INIT | QPS_RTR => Ok(()),
                QPS_RTS => device().ready_raw(self.qp.qpn).map_err(e),
                QPS_ERR => device().set_error(self.qp.qpn).map_err(e),
                QPS_RESET => device().reset_qp(self.qp.qpn).map(drop).map_err(e),
                _ => Ok(()),
            };
        }
        if matches!(self.qp_type, QpType::Dci | QpType::Dct) {
            let e = |e| sim_err("ibv_modify_qp", e);
            let (dev, qpn) = (device(), self.qp.qpn);
            return match (attr.qp_state, self.qp_type) {
                // No remote QP: a target serves from RTR on, an initiator sends from RTS.
                (QPS_RTR, QpType::Dct) => dev.ready_dct(qpn).map_err(e),
                (QPS_RTS, QpType::Dci) => dev.ready_dci(qpn).map_err(e),
                // A DC target goes no further than RTR (the kernel refuses RTS).
                (QPS_RTS, _) => Err(Error::from_ret("ibv_modify_qp", libc::EINVAL)),
                (QPS_ERR, _) => dev.set_error(qpn).map_err(e),
                (QPS_RESET, _) => dev.reset_qp(qpn).map(drop).map_err(e),
                _ => Ok(()),
            };
        }
        match attr.qp_state {
            QPS_RTR => {
                if mask & qp_attr_mask::IBV_QP_DEST_QPN == 0 {
                    return Err(Error::from_ret("ibv_modify_qp", libc::EINVAL));
                }
                let dlid = attr.ah_attr.dlid;
                if mask & qp_attr_mask::IBV_QP_AV != 0 && dlid != 0 && dlid != LID {
                    return Err(Error::Verbs {
                        verb: "ibv_modify_qp",
                        source: io::Error::new(
                            io::ErrorKind::InvalidInput,
                            format!(
                                "{NAME} connects only QPs of this process (LID {LID}); the \
                                 destination LID is {dlid}"
                            ),
                        ),
                    });
                }
                let d = device();
                d.connect_to(self.qp.qpn, sim::Peer::Local(attr.dest_qp_num))
                    .map_err(|e| sim_err("ibv_modify_qp", e))?;
                // The device carries out only the requests with the PSN it expects.
                if mask & qp_attr_mask::IBV_QP_RQ_PSN != 0 {
                    d.set_rq_psn(self.qp.qpn, attr.rq_psn & 0xff_ffff)
                        .map_err(|e| sim_err("ibv_modify_qp", e))?;
                }
                if mask & qp_attr_mask::IBV_QP_MIN_RNR_TIMER != 0 {
                    d.set_min_rnr_timer(self.qp.qpn, attr.min_rnr_timer & 0x1f)
                        .map_err(|e| sim_err("ibv_modify_qp", e))?;
                }
                Ok(())
            }
            QPS_RTS => {
                let d = device();
                let e = |e| sim_err("ibv_modify_qp", e);
                if mask & qp_attr_mask::IBV_QP_RNR_RETRY != 0 && attr.rnr_retry > 7 {
                    return Err(Error::from_ret("ibv_modify_qp", libc::EINVAL));
                }
                if mask & qp_attr_mask::IBV_QP_RETRY_CNT != 0 && attr.retry_cnt > 7 {
                    return Err(Error::from_ret("ibv_modify_qp", libc::EINVAL));
                }
                if mask & qp_attr_mask::IBV_QP_SQ_PSN != 0 {
                    d.set_sq_psn(self.qp.qpn, attr.sq_psn & 0xff_ffff)
                        .map_err(e)?;
                }
                if mask & qp_attr_mask::IBV_QP_RETRY_CNT != 0 {
                    d.set_retry_cnt(self.qp.qpn, attr.retry_cnt).map_err(e)?;
                }
                if mask & qp_attr_mask::IBV_QP_TIMEOUT != 0 {
                    d.set_timeout(self.qp.qpn, attr.timeout & 0x1f).map_err(e)?;
                }
                if mask & qp_attr_mask::IBV_QP_RNR_RETRY != 0 {
                    d.set_rnr_retry(self.qp.qpn, attr.rnr_retry).map_err(e)?;
                }
                Ok(())
            }
            QPS_ERR => device()
                .set_error(self.qp.qpn)
                .map_err(|e| sim_err("ibv_modify_qp", e)),
            QPS_RESET => device()
                .reset_qp(self.qp.qpn)
                .map(drop)
                .map_err(|e| sim_err("ibv_modify_qp", e)),
            // INIT needs nothing from the device: it connects QPs at RTR.
            _ => Ok(()),
        }
    }
    fn engine(&self) -> QpEngine {
        QpEngine::Direct(self.qp.layout)
    }
    fn register(&self) -> RegisterOwner {
        RegisterOwner::Dedicated("the software device gives each QP its own")
    }
    fn mcast(&self, attach: bool, gid: &Gid, lid: u16) -> Result<()> {
        let d = device();
        if attach {
            d.attach_mcast(self.qp.qpn, gid.0, lid)
                .map_err(|e| sim_err("ibv_attach_mcast", e))
        } else {
            d.detach_mcast(self.qp.qpn, gid.0, lid)
                .map_err(|e| sim_err("ibv_detach_mcast", e))
        }
    }
    fn dc_access_key(&self) -> u64 {
        self.dc_access_key
    }
    fn user_index(&self) -> Option<u32> {
        // The device's CQEs carry the QP number as the user index unless told otherwise.
        Some(self.qp.qpn)
    }
    fn query_state(&self) -> Result<Option<u32>> {
        // The device tells its states apart from the library's transitions only in the
        // error state, which it may enter on its own (a failed request, a responder error,
        // a port that went down, an injected fault).
        match device()
            .qp_status(self.qp.qpn)
            .map_err(|e| sim_err("ibv_query_qp", e))?
        {
            sim::QpStatus::Error => Ok(Some(QPS_ERR)),
            sim::QpStatus::Init | sim::QpStatus::Rts => Ok(None),
        }
    }
}

impl Drop for SimQp {
    fn drop(&mut self) {
        // From here on the device never touches the QP (its queues, which borrow it, are
        // gone: they hold the QP alive).
        let _ = device().destroy_qp(self.qp.qpn);
    }
}

/// Control of the software device from a [`Context`](crate::Context) open on it
/// ([`Context::sim`](crate::Context::sim)): step it by hand, inject faults, choose what its
/// progress thread does when idle.
///
/// The device is one per process: what is set here holds for every context and queue on it.
/// A QP is named by its number ([`Qp::qpn`](crate::Qp::qpn)).
///
/// ```no_run
/// # fn main() -> zverbs::Result<()> {
/// let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &Default::default())?;
/// let sim = ctx.sim().expect("the software device");
/// sim.set_stepped(true); // no progress thread: nothing moves until a step
/// // ... post work requests and ring ...
/// sim.run_until_idle(); // the device does all it can, deterministically
/// // ... poll the completions ...
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct SimControl<'a> {
    /// Borrowed from the context's provider, as long as the context.
    _ctx: PhantomData<&'a dyn ContextProvider>,
}

impl SimControl<'_> {
    pub(crate) fn new() -> Self {
        Self { _ctx: PhantomData }
    }

    /// Stops the progress thread (`true`) and waits for it to exit, so that nothing happens
    /// until [`step`](Self::step) or [`run_until_idle`](Self::run_until_idle): deterministic,
    /// for tests. `false` starts it again (if a context is open). Contexts opened meanwhile do
    /// not start it.
    pub fn set_stepped(&self, on: bool) {
        let mut u = users();
        u.stepped = on;
        apply(&u);
    }

    /// Whether the device is stepped by hand ([`set_stepped`](Self::set_stepped)).
    pub fn is_stepped(&self) -> bool {
        users().stepped
    }

    /// Whether the device's progress thread runs (it does while a context is open and the
    /// device is not stepped).
    pub fn progress_running(&self) -> bool {
        device().is_running()
    }

    /// One pass over the device: writes due CQEs, flushes, and takes at most one send WQE per
    /// QP. Returns the work done (0: nothing can happen until software acts). With the
    /// progress thread running this works too, but the two interleave.
    pub fn step(&self) -> usize {
        device().step()
    }

    /// Steps until a step does nothing; returns the work done.
    pub fn run_until_idle(&self) -> usize {
        device().run_until_idle()
    }

    /// What the progress thread does when the device has nothing to do: spin, yield or sleep
    /// between passes over the doorbells ([`Idle`](zverbs_sim::Idle); adaptive by default).
    pub fn set_idle(&self, idle: sim::Idle) {
        device().set_idle(idle);
    }

    /// The device's counters.
    pub fn stats(&self) -> sim::Stats {
        device().stats()
    }

    /// Whether the device computes IPv4 and TCP/UDP checksums on send (on by default): off, it
    /// reports no checksum offload ([`Context::raw_caps`](crate::Context::raw_caps)), raw packet
    /// QPs created from then on refuse [`SendFlags::IP_CSUM`](crate::SendFlags::IP_CSUM)
    /// ([`PostError::ChecksumNotAvailable`](crate::PostError::ChecksumNotAvailable)), and the
    /// device computes none. The device is one per process: set it back when done.
    pub fn set_checksum_offload(&self, on: bool) {
        device().set_checksum_offload(on);
    }

    /// A frame arriving at the device's Ethernet port from outside, from the destination MAC
    /// to the end of the payload (no FCS): steered by the flow rules into receive queues, or
    /// dropped and counted ([`Stats`](sim::Stats)'s `eth_*`).
    pub fn receive_frame(&self, frame: &[u8]) {
        device().receive_frame(frame);
    }

    /// Connects the Ethernet port to `port`, which gets every frame a raw packet QP sends
    /// (loopback turns off); `None` disconnects it (loopback back on: the state the device
    /// starts in, where one process sends to itself).
    pub fn attach_port(&self, port: Option<std::sync::Arc<dyn sim::EthPort>>) {
        device().attach_port(port);
    }

    /// Whether frames the device sends are also offered to its own flow rules (on by default
    /// with no port attached).
    pub fn set_loopback(&self, on: bool) {
        device().set_loopback(on);
    }

    /// Fails the next send WQE of QP `qpn` with the mlx5 `syndrome` (the error CQE's, e.g.
    /// 0x15 for transport retry exceeded; vendor syndrome `zverbs::sim::vendor::INJECTED`);
    /// the QP enters the error state and its other WQEs are flushed.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] (not found) for a QP the device does not have.
    pub fn fail_next_wqe(&self, qpn: u32, syndrome: u8) -> Result<()> {
        device()
            .fail_next_wqe(qpn, syndrome)
            .map_err(|e| sim_err("fail_next_wqe", e))
    }

    /// Makes the next message that needs a receive at QP `qpn` find none: its requester gets
    /// an RNR NAK and retries (or fails, per its `rnr_retry`).
    ///
    /// # Errors
    ///
    /// As [`fail_next_wqe`](Self::fail_next_wqe).
    pub fn drop_next_recv(&self, qpn: u32) -> Result<()> {
        device()
            .drop_next_recv(qpn)
            .map_err(|e| sim_err("drop_next_recv", e))
    }

    /// Loses the acknowledgement of the next request QP `qpn` sends: the request is carried
    /// out, sent again (one transport retry) and taken for a duplicate by the responder, which
    /// does not carry it out again.
    ///
    /// # Errors
    ///
    /// As [`fail_next_wqe`](Self::fail_next_wqe).
    pub fn lose_next_ack(&self, qpn: u32) -> Result<()> {
        device()
            .lose_next_ack(qpn)
            .map_err(|e| sim_err("lose_next_ack", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The name the device list and `ZVERBS_DEVICE` use is the device crate's.
    #[test]
    fn the_software_device_is_named_as_its_crate_names_it() {
        assert_eq!(NAME, sim::DEVICE_NAME);
    }

    /// Every right reaches the device as the same right, and nothing else does.
    #[test]
    fn access_flags_convert_bit_for_bit() {
        let pairs = [
            (AccessFlags::LOCAL_WRITE, sim::Access::LOCAL_WRITE),
            (AccessFlags::REMOTE_WRITE, sim::Access::REMOTE_WRITE),
            (AccessFlags::REMOTE_READ, sim::Access::REMOTE_READ),
            (AccessFlags::REMOTE_ATOMIC, sim::Access::REMOTE_ATOMIC),
            (AccessFlags::ALL, sim::Access::ALL),
        ];
        for (ours, device) in pairs {
            assert_eq!(sim::Access::from(ours), device, "{ours:?}");
        }
        let read_only = AccessFlags::REMOTE_READ | AccessFlags::LOCAL_WRITE;
        assert_eq!(
            sim::Access::from(read_only),
            sim::Access::REMOTE_READ | sim::Access::LOCAL_WRITE
        );
    }
}

/// A CQ whose CQEs the device stamps with its clock: the CQ it wraps, as it is in all else
/// (its channel and arm included).
#[derive(Debug)]
struct TimedCq(Box<dyn CqProvider>);

impl CqProvider for TimedCq {
    fn cqe(&self) -> u32 {
        self.0.cqe()
    }
    fn engine(&self) -> CqEngine {
        self.0.engine()
    }
    fn timestamps(&self) -> bool {
        true
    }
    fn event_id(&self) -> u64 {
        self.0.event_id()
    }
    fn event_token(&self) -> usize {
        self.0.event_token()
    }
    fn cq_uar(&self) -> Option<std::ptr::NonNull<u8>> {
        self.0.cq_uar()
    }
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        self.0.req_notify(solicited_only)
    }
    fn event_taken(&self) {
        self.0.event_taken();
    }
}

//! The software mlx5 device as a provider.
//!
//! One device per process, [`NAME`], started on first use with its progress thread and kept
//! for the life of the process (its queue memory lives as long as it does). Every CQ and QP is
//! a direct engine: the device hands out the layouts `mlx5dv_init_obj` would, and
//! `zverbs-mlx5dv` drives them exactly as on a ConnectX. It has no libibverbs side, so the
//! fallback backend cannot be asked for.
//!
//! A connection is one-sided, as on hardware: at RTR a QP names its peer (`dest_qp_num`, a QP
//! of this process, which may be itself; a destination LID, when given, must be this port's),
//! and traffic flows once both sides name each other. A QP accepts requests only from the QP
//! it named: a third QP that names it gets "transport retry exceeded", and naming a QP that
//! already names another is refused at RTR.
//! Dropping a QP or CQ destroys it in the device (its table entry is reused; the ring memory
//! the device allocated stays with the device).

use std::io;
use std::sync::OnceLock;

use zverbs_sim::{self as sim, CqConfig, QpConfig, SimError};

use super::{
    ContextProvider, CqEngine, CqProvider, EngineNote, MrProvider, PdProvider, QpEngine, QpInit,
    QpProvider, RegisterOwner,
};
use crate::backend::DirectSupport;
use crate::device::{DeviceAttr, Gid, GidEntry, GidType, LinkLayer, Mtu, PortAttr, PortState};
use crate::error::{Error, Result};
use crate::ffi::types::{ibv_qp_attr, qp_attr_mask};
use crate::mr::AccessFlags;
use crate::qp::QpCaps;

/// The software device's name in the device list.
pub(crate) const NAME: &str = crate::device::SOFTWARE_DEVICE;

/// Its node GUID.
pub(crate) const GUID: u64 = 0x7a76_6572_6273_0001;

/// The LID of its one port.
const LID: u16 = 1;

/// `IBV_QPS_RTR`, `IBV_QPS_RTS` and `IBV_QPS_ERR`.
const QPS_RTR: u32 = 2;
const QPS_RTS: u32 = 3;
const QPS_ERR: u32 = 6;

/// BlueFlame buffer size the device offers (what a ConnectX offers), unless
/// `MLX5_SHUT_UP_BF=1` asks for doorbell-only queues as it does of libmlx5.
const BF_SIZE: u32 = 256;

/// The process's software device, started on first use.
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
        let mut d = match sim::Device::with_config(cfg) {
            Ok(d) => d,
            Err(e) => panic!("{NAME}: {e}"),
        };
        d.start();
        d
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

/// An open software device.
#[derive(Debug)]
pub(crate) struct SimContext;

/// Opens the software device.
pub(crate) fn open() -> SimContext {
    device();
    SimContext
}

impl ContextProvider for SimContext {
    fn name(&self) -> &str {
        NAME
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
            state: PortState::Active,
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
        let qp = device()
            .create_qp(QpConfig {
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
            })
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
            Box::new(SimQp { qp, caps }),
            EngineNote(format!("{NAME}: direct QP, {doorbell}")),
        ))
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

// SAFETY: the layout points into memory the process-wide device owns and never frees; the
// queues built from it take care of their own thread-safety.
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
}

/// A QP.
#[derive(Debug)]
struct SimQp {
    qp: sim::SimQp,
    caps: QpCaps,
}

// SAFETY: as for `SimCq`.
unsafe impl Send for SimQp {}
// SAFETY: as above.
unsafe impl Sync for SimQp {}

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
                device()
                    .connect_to(self.qp.qpn, sim::Peer::Local(attr.dest_qp_num))
                    .map_err(|e| sim_err("ibv_modify_qp", e))
            }
            QPS_RTS if mask & qp_attr_mask::IBV_QP_RNR_RETRY != 0 => device()
                .set_rnr_retry(self.qp.qpn, attr.rnr_retry)
                .map_err(|e| sim_err("ibv_modify_qp", e)),
            QPS_ERR => device()
                .set_error(self.qp.qpn)
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
}

impl Drop for SimQp {
    fn drop(&mut self) {
        // From here on the device never touches the QP (its queues, which borrow it, are
        // gone: they hold the QP alive).
        let _ = device().destroy_qp(self.qp.qpn);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

//! A provider for unit tests: the control path over the recording fake `ibv_context` of
//! `fallback::fake`, logging every object's creation and destruction.

use std::sync::{Arc, Mutex};

use super::{
    ContextProvider, CqEngine, CqProvider, EngineNote, MrProvider, PdProvider, QpEngine, QpInit,
    QpProvider,
};
use crate::backend::DirectSupport;
use crate::device::{DeviceAttr, Gid, GidEntry, GidType, LinkLayer, Mtu, PortAttr, PortState};
use crate::error::{Error, Result};
use crate::fallback::fake::FakeDevice;
use crate::ffi::types::{ibv_cq, ibv_qp_attr};
use crate::mr::AccessFlags;
use crate::qp::QpCaps;

/// What happened, in order.
pub(crate) type Log = Arc<Mutex<Vec<String>>>;

struct Dev(FakeDevice);
// SAFETY: test-only; the fake device is plain memory used by one test at a time.
unsafe impl Send for Dev {}
// SAFETY: as above.
unsafe impl Sync for Dev {}

impl std::fmt::Debug for Dev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FakeDevice")
    }
}

fn note(log: &Log, s: impl Into<String>) {
    log.lock().unwrap().push(s.into());
}

#[derive(Debug)]
pub(crate) struct FakeContext {
    dev: Arc<Dev>,
    log: Log,
    /// Ports and their states.
    pub(crate) ports: Vec<PortState>,
    /// Make `reg_mr` fail with this errno.
    pub(crate) reg_fail: Option<i32>,
}

impl FakeContext {
    pub(crate) fn new(log: &Log) -> Self {
        note(log, "open");
        Self {
            dev: Arc::new(Dev(FakeDevice::new())),
            log: log.clone(),
            ports: vec![PortState::Active],
            reg_fail: None,
        }
    }
}

impl Drop for FakeContext {
    fn drop(&mut self) {
        note(&self.log, "close");
    }
}

impl ContextProvider for FakeContext {
    fn name(&self) -> &str {
        "fake0"
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(DeviceAttr {
            fw_ver: "0".into(),
            node_guid: 1,
            vendor_id: 0,
            vendor_part_id: 0,
            max_mr_size: 1 << 40,
            max_qp: 16,
            max_qp_wr: 1024,
            max_sge: 4,
            max_cq: 16,
            max_cqe: 4096,
            max_qp_rd_atom: 16,
            max_qp_init_rd_atom: 16,
            atomic_cap: 1,
            phys_port_cnt: self.ports.len() as u8,
        })
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        let state = *self
            .ports
            .get(usize::from(port).wrapping_sub(1))
            .ok_or_else(|| Error::from_ret("ibv_query_port", libc::EINVAL))?;
        Ok(PortAttr {
            state,
            max_mtu: Mtu::M4096,
            active_mtu: Mtu::M1024,
            lid: 0,
            sm_lid: 0,
            gid_tbl_len: 2,
            max_msg_sz: 1 << 31,
            link_layer: LinkLayer::Ethernet,
        })
    }
    fn query_gid(&self, port: u8, index: u32) -> Result<GidEntry> {
        let mut g = Gid::default();
        let gid_type = if index == 0 {
            g.0[..2].copy_from_slice(&[0xfe, 0x80]);
            g.0[15] = 1;
            GidType::RoceV1
        } else {
            g.0[10..].copy_from_slice(&[0xff, 0xff, 192, 168, 7, 1]);
            GidType::RoceV2
        };
        Ok(GidEntry {
            gid: g,
            index,
            port,
            gid_type,
        })
    }
    fn direct_support(&self) -> DirectSupport {
        DirectSupport::No("the provider of fake0 is not mlx5".into())
    }
    fn alloc_pd(&self) -> Result<Box<dyn PdProvider>> {
        note(&self.log, "alloc_pd");
        Ok(Box::new(FakePd {
            dev: self.dev.clone(),
            log: self.log.clone(),
            reg_fail: self.reg_fail,
        }))
    }
    fn create_cq(&self, cqe: u32, direct: bool) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        assert!(!direct, "the fake device has no direct engine");
        note(&self.log, "create_cq");
        Ok((
            Box::new(FakeCq {
                dev: self.dev.clone(),
                log: self.log.clone(),
                cqe,
            }),
            EngineNote("fake ibv_poll_cq".into()),
        ))
    }
}

#[derive(Debug)]
struct FakePd {
    dev: Arc<Dev>,
    log: Log,
    reg_fail: Option<i32>,
}

impl Drop for FakePd {
    fn drop(&mut self) {
        note(&self.log, "dealloc_pd");
    }
}

impl PdProvider for FakePd {
    unsafe fn reg_mr(
        &self,
        _addr: *mut u8,
        len: usize,
        _access: AccessFlags,
    ) -> Result<Box<dyn MrProvider>> {
        if let Some(errno) = self.reg_fail {
            return Err(super::verbs::reg_mr_error(errno, len, Some(65536)));
        }
        note(&self.log, "reg_mr");
        Ok(Box::new(FakeMr {
            log: self.log.clone(),
        }))
    }
    fn create_qp(&self, init: &QpInit<'_>) -> Result<(Box<dyn QpProvider>, EngineNote)> {
        assert!(!init.direct);
        note(&self.log, "create_qp");
        Ok((
            Box::new(FakeQp {
                dev: self.dev.clone(),
                log: self.log.clone(),
                caps: init.caps,
            }),
            EngineNote("fake ibv_post_send".into()),
        ))
    }
}

#[derive(Debug)]
struct FakeMr {
    log: Log,
}

impl MrProvider for FakeMr {
    fn lkey(&self) -> u32 {
        0x1111
    }
    fn rkey(&self) -> u32 {
        0x2222
    }
}

impl Drop for FakeMr {
    fn drop(&mut self) {
        note(&self.log, "dereg_mr");
    }
}

#[derive(Debug)]
struct FakeCq {
    dev: Arc<Dev>,
    log: Log,
    cqe: u32,
}

impl CqProvider for FakeCq {
    fn cqe(&self) -> u32 {
        self.cqe
    }
    fn engine(&self) -> CqEngine {
        CqEngine::Verbs(std::ptr::NonNull::new(self.dev.0.cq()).unwrap())
    }
    fn verbs_cq(&self) -> Option<*mut ibv_cq> {
        Some(self.dev.0.cq())
    }
}

impl Drop for FakeCq {
    fn drop(&mut self) {
        note(&self.log, "destroy_cq");
    }
}

#[derive(Debug)]
struct FakeQp {
    dev: Arc<Dev>,
    log: Log,
    caps: QpCaps,
}

impl QpProvider for FakeQp {
    fn qpn(&self) -> u32 {
        crate::fallback::fake::QPN
    }
    fn caps(&self) -> QpCaps {
        self.caps
    }
    fn modify(&self, attr: &mut ibv_qp_attr, mask: i32) -> Result<()> {
        note(
            &self.log,
            format!("modify state={} mask={mask:#x}", attr.qp_state),
        );
        Ok(())
    }
    fn engine(&self) -> QpEngine {
        QpEngine::Verbs(std::ptr::NonNull::new(self.dev.0.qp()).unwrap())
    }
}

impl Drop for FakeQp {
    fn drop(&mut self) {
        note(&self.log, "destroy_qp");
    }
}

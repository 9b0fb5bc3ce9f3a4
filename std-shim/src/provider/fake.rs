//! A provider for unit tests: the control path over the recording fake `ibv_context` of
//! `fallback::fake`, logging every object's creation and destruction.

use std::sync::{Arc, Mutex};

use super::{
    ContextProvider, CqEngine, CqProvider, EngineNote, MrProvider, PdProvider, QpEngine, QpInit,
    QpProvider, RegisterOwner,
};
use crate::backend::DirectSupport;
use crate::error::{Error, Result};
use crate::fallback::fake::FakeDevice;
use crate::fallback::raw::RawArray;
use crate::types::access::AccessFlags;
use crate::types::device::{
    DeviceAttr, Gid, GidEntry, GidType, LinkLayer, Mtu, PortAttr, PortState,
};
use crate::types::qp::QpCaps;
use zverbs_ffi::types::{ibv_ah, ibv_cq, ibv_qp_attr};

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
    /// Offer direct engines over ordinary memory laid out as libmlx5 lays it out (the shape
    /// of a device that is not rdma-core underneath, like the software mlx5 device).
    pub(crate) direct: bool,
    /// Where the direct engines' memory is, for the tests to play the device.
    pub(crate) mem: Arc<Mutex<Vec<DirectMem>>>,
    /// The direct QPs' BlueFlame registers.
    pub(crate) blueflame: FakeBf,
    /// Make address handles without a verbs handle (as the software device's are).
    pub(crate) ah_without_handle: bool,
}

/// What BlueFlame registers the fake's direct QPs get.
#[derive(Clone, Debug, Default)]
pub(crate) enum FakeBf {
    /// None: doorbell only.
    #[default]
    None,
    /// One of its own per QP, with buffers of this size.
    Own(u32),
    /// All on the one register given (buffers of this size), assigned as libmlx5 assigns one
    /// it may share.
    Shared(u32, Arc<SharedMem>),
}

/// A BlueFlame register several fake QPs write, 64-byte aligned as a BlueFlame buffer is in
/// its UAR page (a queue refuses a register that is not 16-byte aligned).
pub(crate) struct SharedMem(RawArray<Block>);

impl SharedMem {
    /// A register of `len` bytes (whole blocks: rounded up to a multiple of 64).
    pub(crate) fn new(len: usize) -> Self {
        Self(RawArray::new(len.div_ceil(64), Block([0; 64])))
    }

    /// Pointer to the register's 64-bit word `i` (`i < len / 8`).
    pub(crate) fn word(&self, i: usize) -> *mut u64 {
        self.0.at(i / 8).cast::<u64>().wrapping_add(i % 8)
    }
}

impl std::fmt::Debug for SharedMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedMem")
    }
}

// SAFETY: test-only plain memory.
unsafe impl Send for SharedMem {}
// SAFETY: as above.
unsafe impl Sync for SharedMem {}

/// A 64-byte aligned block of queue memory.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Block(pub(crate) [u8; 64]);

/// Queue memory of one direct CQ or QP.
pub(crate) struct DirectMem {
    pub(crate) ring: RawArray<Block>,
    pub(crate) dbrec: RawArray<u32>,
    /// The BlueFlame register (the 8-byte doorbell without BlueFlame): whole blocks, 64-byte
    /// aligned as a BlueFlame buffer is in its UAR page.
    pub(crate) bf: RawArray<Block>,
    pub(crate) rq: RawArray<Block>,
}

impl std::fmt::Debug for DirectMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirectMem")
    }
}

// SAFETY: test-only plain memory.
unsafe impl Sync for DirectMem {}

impl DirectMem {
    fn new(blocks: usize, rq_blocks: usize, init: u8, bf_size: u32) -> Self {
        let mut b = Block([0; 64]);
        b.0[63] = init;
        Self {
            ring: RawArray::new(blocks, b),
            dbrec: RawArray::new(2, 0),
            bf: RawArray::new((2 * bf_size as usize).div_ceil(64), Block([0; 64])),
            rq: RawArray::new(rq_blocks, Block([0; 64])),
        }
    }
    fn nn<T>(p: *mut T) -> std::ptr::NonNull<T> {
        std::ptr::NonNull::new(p).expect("RawArray pointers are not null")
    }
}

impl FakeContext {
    pub(crate) fn new(log: &Log) -> Self {
        note(log, "open");
        Self {
            dev: Arc::new(Dev(FakeDevice::new())),
            log: log.clone(),
            ports: vec![PortState::Active],
            reg_fail: None,
            direct: false,
            mem: Arc::default(),
            blueflame: FakeBf::None,
            ah_without_handle: false,
        }
    }
}

impl FakeContext {
    /// Makes the fake verbs QP a UD QP: the fallback's sends are read through `wr.ud`.
    pub(crate) fn set_ud(&self) {
        self.dev.0.set_ud();
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
    /// An rdma-core device with raw packet QPs: the kernel asks for `CAP_NET_RAW`.
    fn raw_support(&self, _port: u8) -> Result<super::RawSupport> {
        Ok(super::RawSupport {
            caps: crate::types::eth::RawCaps {
                raw_packet_caps: 0,
                ip_csum: false,
                flow_steering: true,
            },
            min_inline: 18,
            max_frame: 1518,
            needs_cap_net_raw: true,
        })
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
        if self.direct {
            DirectSupport::Yes("fake0 lays its queues out as mlx5 does".into())
        } else {
            DirectSupport::No("the provider of fake0 is not mlx5".into())
        }
    }
    fn alloc_pd(&self) -> Result<Box<dyn PdProvider>> {
        note(&self.log, "alloc_pd");
        Ok(Box::new(FakePd {
            dev: self.dev.clone(),
            log: self.log.clone(),
            reg_fail: self.reg_fail,
            mem: self.mem.clone(),
            blueflame: self.blueflame.clone(),
            ah_without_handle: self.ah_without_handle,
        }))
    }
    fn create_cq(&self, cqe: u32, direct: bool) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        note(&self.log, "create_cq");
        let mut layout = None;
        if direct {
            let n = cqe.next_power_of_two();
            // Invalid opcode, owner 1: nothing for software on the first pass.
            let m = DirectMem::new(n as usize, 1, 0xf1, 0);
            layout = Some(zverbs_mlx5dv::CqLayout {
                buf: DirectMem::nn(m.ring.at(0)).cast(),
                dbrec: DirectMem::nn(m.dbrec.at(0)),
                cqe_cnt: n,
                cqe_size: 64,
                cqn: 7,
            });
            self.mem.lock().unwrap().push(m);
        }
        Ok((
            Box::new(FakeCq {
                dev: self.dev.clone(),
                log: self.log.clone(),
                cqe,
                layout,
            }),
            EngineNote(
                if direct {
                    "fake direct CQ"
                } else {
                    "fake ibv_poll_cq"
                }
                .into(),
            ),
        ))
    }
}

#[derive(Debug)]
struct FakePd {
    dev: Arc<Dev>,
    log: Log,
    reg_fail: Option<i32>,
    mem: Arc<Mutex<Vec<DirectMem>>>,
    blueflame: FakeBf,
    ah_without_handle: bool,
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
        note(&self.log, "create_qp");
        let mut layout = None;
        let mut caps = init.caps;
        if init.direct {
            let sq_blocks = (caps.max_send_wr * 4).next_power_of_two();
            let rq_entries = caps.max_recv_wr.next_power_of_two();
            let stride = 16 * caps.max_recv_sge.max(1).next_power_of_two();
            caps.max_recv_wr = rq_entries;
            caps.max_recv_sge = stride / 16;
            let own = match self.blueflame {
                FakeBf::Own(size) => size,
                _ => 0,
            };
            let m = DirectMem::new(
                sq_blocks as usize,
                (rq_entries * stride).div_ceil(64) as usize,
                0,
                own,
            );
            let (reg, size) = match &self.blueflame {
                FakeBf::None => (DirectMem::nn(m.bf.at(0)).cast::<u8>(), 0),
                FakeBf::Own(size) => (DirectMem::nn(m.bf.at(0)).cast::<u8>(), *size),
                FakeBf::Shared(size, shared) => (DirectMem::nn(shared.word(0)).cast::<u8>(), *size),
            };
            layout = Some(zverbs_mlx5dv::QpLayout {
                qpn: crate::fallback::fake::QPN,
                dbrec: DirectMem::nn(m.dbrec.at(0)),
                sq: zverbs_mlx5dv::WqLayout {
                    buf: DirectMem::nn(m.ring.at(0)).cast(),
                    wqe_cnt: sq_blocks,
                    stride: 64,
                },
                rq: zverbs_mlx5dv::WqLayout {
                    buf: DirectMem::nn(m.rq.at(0)).cast(),
                    wqe_cnt: rq_entries,
                    stride,
                },
                bf: zverbs_mlx5dv::BfLayout { reg, size },
            });
            self.mem.lock().unwrap().push(m);
        }
        Ok((
            Box::new(FakeQp {
                dev: self.dev.clone(),
                log: self.log.clone(),
                caps,
                layout,
                register: match self.blueflame {
                    FakeBf::Shared(..) => RegisterOwner::Assigned,
                    _ => RegisterOwner::Dedicated("the fake's per-QP register"),
                },
            }),
            EngineNote(
                if init.direct {
                    "fake direct QP"
                } else {
                    "fake ibv_post_send"
                }
                .into(),
            ),
        ))
    }
    fn create_ah(&self, attr: &crate::types::ah::AhAttr) -> Result<Box<dyn super::AhProvider>> {
        note(&self.log, format!("create_ah {attr:?}"));
        let handle = ibv_ah {
            context: std::ptr::null_mut(),
            pd: std::ptr::null_mut(),
            handle: 0,
        };
        Ok(Box::new(FakeAh(
            (!self.ah_without_handle).then(|| Box::new(handle)),
        )))
    }
    fn create_srq(
        &self,
        _max_wr: u32,
        _max_sge: u32,
        _direct: bool,
    ) -> Result<Box<dyn super::SrqProvider>> {
        Err(Error::from_ret("ibv_create_srq", libc::EOPNOTSUPP))
    }
}

/// An address handle with a verbs handle of its own (which the fake provider only records)
/// and no address vector.
#[derive(Debug)]
struct FakeAh(Option<Box<ibv_ah>>);

// SAFETY: test-only; the handle is plain memory nothing writes after it is made.
unsafe impl Send for FakeAh {}
// SAFETY: as above.
unsafe impl Sync for FakeAh {}

impl super::AhProvider for FakeAh {
    fn av(&self) -> Option<&[u8; 48]> {
        None
    }
    fn raw(&self) -> *mut ibv_ah {
        self.0
            .as_deref()
            .map_or(std::ptr::null_mut(), |h| std::ptr::from_ref(h).cast_mut())
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
    layout: Option<zverbs_mlx5dv::CqLayout>,
}

// SAFETY: test-only; the layout points into memory the context keeps.
unsafe impl Send for FakeCq {}
// SAFETY: as above.
unsafe impl Sync for FakeCq {}

impl CqProvider for FakeCq {
    fn cqe(&self) -> u32 {
        self.cqe
    }
    fn engine(&self) -> CqEngine {
        match self.layout {
            Some(l) => CqEngine::Direct(l),
            None => CqEngine::Verbs(std::ptr::NonNull::new(self.dev.0.cq()).unwrap()),
        }
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
    layout: Option<zverbs_mlx5dv::QpLayout>,
    register: RegisterOwner,
}

// SAFETY: test-only; the layout points into memory the context keeps.
unsafe impl Send for FakeQp {}
// SAFETY: as above.
unsafe impl Sync for FakeQp {}

impl super::FlowTarget for FakeQp {}

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
        match self.layout {
            Some(l) => QpEngine::Direct(l),
            None => QpEngine::Verbs(std::ptr::NonNull::new(self.dev.0.qp()).unwrap()),
        }
    }
    fn register(&self) -> RegisterOwner {
        self.register
    }
    fn mcast(&self, attach: bool, gid: &Gid, lid: u16) -> Result<()> {
        note(
            &self.log,
            format!("mcast attach={attach} gid={:02x?} lid={lid:#x}", gid.0),
        );
        Ok(())
    }
    fn query_state(&self) -> Result<Option<u32>> {
        // The fake device does nothing on its own: its state is the last transition's.
        Ok(None)
    }
}

impl Drop for FakeQp {
    fn drop(&mut self) {
        note(&self.log, "destroy_qp");
    }
}

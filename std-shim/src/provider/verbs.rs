//! The rdma-core provider: devices found and driven by libibverbs (and libmlx5 for the
//! direct engine).

mod events;

use std::any::Any;
use std::ffi::CStr;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use super::{
    AhProvider, ContextProvider, CqEngine, CqProvider, EngineNote, MrProvider, PdProvider,
    QpEngine, QpInit, QpProvider, RegisterOwner, SrqEngine, SrqLayout, SrqProvider,
};
use crate::backend::DirectSupport;
use crate::error::{Error, Result};
use crate::types::access::AccessFlags;
use crate::types::ah::AhAttr;
use crate::types::device::{
    DeviceAttr, Gid, GidEntry, GidType, LinkLayer, Mtu, PortAttr, PortState,
};
use crate::types::qp::{QpCaps, QpType};
use zverbs_ffi::load::{self, Verbs};
use zverbs_ffi::types::*;
mod channel;
mod compressed;
mod eth;

use zverbs_mlx5dv::prm::dv::{MLX5DV_SRQ_MASK_SRQN, mlx5dv_ah, mlx5dv_cq, mlx5dv_qp, mlx5dv_srq};

/// A libibverbs device list, freed when the last device of it is dropped.
#[derive(Debug)]
pub(crate) struct DeviceList {
    ptr: *mut *mut ibv_device,
    len: usize,
    verbs: &'static Verbs,
}

// SAFETY: the list is immutable after `ibv_get_device_list`; libibverbs' device objects are
// safe to use from any thread.
unsafe impl Send for DeviceList {}
// SAFETY: as above.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    pub(crate) fn get() -> Result<Self> {
        let verbs = load::verbs()?;
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        let ptr = unsafe { (verbs.ibv_get_device_list)(&mut n) };
        if ptr.is_null() {
            let e = Error::last_os("ibv_get_device_list");
            // ENOSYS: the kernel has no RDMA support at all; that is "no device".
            if e.errno() == Some(libc::ENOSYS) {
                return Ok(Self { ptr, len: 0, verbs });
            }
            return Err(e);
        }
        Ok(Self {
            ptr,
            len: n.max(0) as usize,
            verbs,
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn device(&self, i: usize) -> *mut ibv_device {
        debug_assert!(i < self.len);
        // SAFETY: the list holds `len` device pointers.
        unsafe { *self.ptr.add(i) }
    }

    pub(crate) fn name(&self, i: usize) -> String {
        // SAFETY: a live device; libibverbs returns a NUL-terminated name it owns.
        let p = unsafe { (self.verbs.ibv_get_device_name)(self.device(i)) };
        if p.is_null() {
            return String::from("?");
        }
        // SAFETY: non-null, NUL-terminated, lives as long as the device.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    pub(crate) fn guid(&self, i: usize) -> u64 {
        // SAFETY: a live device.
        u64::from_be(unsafe { (self.verbs.ibv_get_device_guid)(self.device(i)) })
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: the list came from `ibv_get_device_list` and is freed once.
            unsafe { (self.verbs.ibv_free_device_list)(self.ptr) };
        }
    }
}

/// Why libibverbs lists no device, as far as the machine tells, and what to do.
pub(crate) fn no_device_hint() -> String {
    let Ok(dir) = std::fs::read_dir("/sys/class/infiniband") else {
        return String::from(
            "the kernel exposes no RDMA device (/sys/class/infiniband is missing): load the \
             driver (mlx5_ib for ConnectX, rdma_rxe for soft-RoCE) and ib_uverbs",
        );
    };
    let names: Vec<String> = dir
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    if names.is_empty() {
        return String::from(
            "the kernel has no RDMA device: load a driver, or create a soft-RoCE device \
             (`rdma link add rxe0 type rxe netdev <if>`)",
        );
    }
    format!(
        "the kernel has RDMA devices ({}) but libibverbs found none: install the \
         `ibverbs-providers` package, and check /dev/infiniband permissions",
        names.join(", ")
    )
}

/// Whether libmlx5 drives `dev`.
fn direct_support(dev: *mut ibv_device, name: &str) -> DirectSupport {
    match load::mlx5() {
        Err(e) => DirectSupport::No(format!("libmlx5 unavailable: {e}")),
        // SAFETY: a live device.
        Ok(m) if unsafe { (m.mlx5dv_is_supported)(dev) } => {
            DirectSupport::Yes(format!("{name} is driven by the mlx5 provider"))
        }
        Ok(_) => DirectSupport::No(format!("the provider of {name} is not mlx5")),
    }
}

/// An open rdma-core device context.
#[derive(Debug)]
pub(crate) struct VerbsContext {
    ctx: *mut ibv_context,
    name: String,
    direct: DirectSupport,
    verbs: &'static Verbs,
    /// Close the context on drop (false for contexts librdmacm owns).
    owned: bool,
    /// Keeps what the context depends on alive (the device list, or the rdma_cm id).
    _keep: Option<Arc<dyn Any + Send + Sync>>,
}

// SAFETY: libibverbs contexts may be used from any thread; the fields are immutable.
unsafe impl Send for VerbsContext {}
// SAFETY: as above.
unsafe impl Sync for VerbsContext {}

/// Opens device `index` of `list`.
pub(crate) fn open(list: &Arc<DeviceList>, index: usize) -> Result<VerbsContext> {
    let dev = list.device(index);
    let name = list.name(index);
    // SAFETY: a live device of a live list.
    let ctx = unsafe { (list.verbs.ibv_open_device)(dev) };
    if ctx.is_null() {
        return Err(Error::last_os("ibv_open_device"));
    }
    Ok(VerbsContext {
        ctx,
        direct: direct_support(dev, &name),
        name,
        verbs: list.verbs,
        owned: true,
        _keep: Some(list.clone()),
    })
}

/// Wraps a context that librdmacm opened (not closed on drop); `keep` holds what keeps it
/// open.
///
/// # Safety
///
/// `ctx` is a live context that stays open while `keep` lives.
#[cfg(feature = "rdma_cm")]
pub(crate) unsafe fn borrow_context(
    ctx: *mut ibv_context,
    keep: Arc<dyn Any + Send + Sync>,
) -> Result<VerbsContext> {
    let verbs = load::verbs()?;
    // SAFETY: (caller) a live context; its device pointer is live with it.
    let dev = unsafe { (*ctx).device };
    // SAFETY: as above; the name is NUL-terminated and owned by libibverbs.
    let p = unsafe { (verbs.ibv_get_device_name)(dev) };
    let name = if p.is_null() {
        String::from("?")
    } else {
        // SAFETY: non-null and NUL-terminated.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    };
    Ok(VerbsContext {
        ctx,
        direct: direct_support(dev, &name),
        name,
        verbs,
        owned: false,
        _keep: Some(keep),
    })
}

impl Drop for VerbsContext {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: opened by us, closed once; every child object holds this context
            // alive, so none is left.
            unsafe { (self.verbs.ibv_close_device)(self.ctx) };
        }
    }
}

fn c_chars_to_string(chars: &[core::ffi::c_char]) -> String {
    let bytes: Vec<u8> = chars
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl ContextProvider for VerbsContext {
    fn name(&self) -> &str {
        &self.name
    }

    fn async_events(&self) -> Result<Box<dyn crate::provider::AsyncEventSource>> {
        // SAFETY: a live context; the reader is dropped before it (`AsyncEvents` holds the
        // context after the reader).
        unsafe { events::VerbsEvents::open(self.ctx, self.verbs) }
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        // SAFETY: all-zero bytes are a valid `ibv_device_attr`.
        let mut a: ibv_device_attr = unsafe { core::mem::zeroed() };
        // SAFETY: a live context and a valid out-pointer.
        let ret = unsafe { (self.verbs.ibv_query_device)(self.ctx, &mut a) };
        if ret != 0 {
            return Err(Error::from_ret("ibv_query_device", ret));
        }
        Ok(DeviceAttr {
            fw_ver: c_chars_to_string(&a.fw_ver),
            node_guid: u64::from_be(a.node_guid),
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            max_mr_size: a.max_mr_size,
            max_qp: a.max_qp.max(0) as u32,
            max_qp_wr: a.max_qp_wr.max(0) as u32,
            max_sge: a.max_sge.max(0) as u32,
            max_cq: a.max_cq.max(0) as u32,
            max_cqe: a.max_cqe.max(0) as u32,
            max_qp_rd_atom: a.max_qp_rd_atom.max(0) as u32,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom.max(0) as u32,
            atomic_cap: a.atomic_cap,
            phys_port_cnt: a.phys_port_cnt,
        })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        let mut a = ibv_port_attr::default();
        // SAFETY: a live context and a valid out-pointer. The exported `ibv_query_port`
        // fills the fields up to `flags`; the rest stays zero.
        let ret = unsafe { (self.verbs.ibv_query_port)(self.ctx, port, &mut a) };
        if ret != 0 {
            return Err(Error::from_ret("ibv_query_port", ret));
        }
        Ok(PortAttr {
            state: PortState::from_raw(a.state),
            max_mtu: Mtu::from_raw(a.max_mtu).unwrap_or_default(),
            active_mtu: Mtu::from_raw(a.active_mtu).unwrap_or_default(),
            lid: a.lid,
            sm_lid: a.sm_lid,
            gid_tbl_len: a.gid_tbl_len.max(0) as u32,
            max_msg_sz: a.max_msg_sz,
            link_layer: match a.link_layer {
                IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
                IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
                _ => LinkLayer::Unspecified,
            },
        })
    }

    fn query_gid(&self, port: u8, index: u32) -> Result<GidEntry> {
        if let Some(f) = self.verbs._ibv_query_gid_ex {
            let mut e = ibv_gid_entry::default();
            // SAFETY: a live context, a valid out-pointer and its size.
            let ret = unsafe {
                f(
                    self.ctx,
                    u32::from(port),
                    index,
                    &mut e,
                    0,
                    core::mem::size_of::<ibv_gid_entry>(),
                )
            };
            if ret == libc::ENODATA {
                // An empty entry.
                return Ok(GidEntry {
                    gid: Gid::default(),
                    index,
                    port,
                    gid_type: GidType::Ib,
                });
            }
            if ret != 0 {
                return Err(Error::from_ret("ibv_query_gid_ex", ret));
            }
            return Ok(GidEntry {
                gid: Gid(e.gid.raw),
                index,
                port,
                gid_type: GidType::from_raw(e.gid_type),
            });
        }
        let mut g = ibv_gid::default();
        // SAFETY: a live context and a valid out-pointer.
        let ret = unsafe { (self.verbs.ibv_query_gid)(self.ctx, port, index as i32, &mut g) };
        if ret != 0 {
            return Err(Error::from_ret("ibv_query_gid", ret));
        }
        Ok(GidEntry {
            gid: Gid(g.raw),
            index,
            port,
            gid_type: GidType::Unknown(u32::MAX),
        })
    }

    fn direct_support(&self) -> DirectSupport {
        self.direct.clone()
    }

    fn atomics_big_endian(&self) -> bool {
        // A Mellanox/NVIDIA HCA (PCI vendors 0x02c9, 0x15b3) runs 8-byte atomics on big-endian
        // values unless the driver could set it to host endianness; the mlx5 driver advertises
        // IBV_ATOMIC_HCA exactly when it did, IBV_ATOMIC_NONE otherwise.
        cfg!(target_endian = "little")
            && self
                .query_device()
                .is_ok_and(|a| matches!(a.vendor_id, 0x02c9 | 0x15b3) && a.atomic_cap == 0)
    }

    fn alloc_pd(&self) -> Result<Box<dyn PdProvider>> {
        // SAFETY: a live context.
        let pd = unsafe { (self.verbs.ibv_alloc_pd)(self.ctx) };
        if pd.is_null() {
            return Err(Error::last_os("ibv_alloc_pd"));
        }
        Ok(Box::new(VerbsPd {
            pd,
            ctx: self.ctx,
            verbs: self.verbs,
            mlx5: matches!(self.direct, DirectSupport::Yes(_)),
        }))
    }

    fn create_cq(&self, cqe: u32, direct: bool) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        let n = i32::try_from(cqe.max(1))
            .map_err(|_| Error::InvalidArgument(format!("CQ of {cqe} entries")))?;
        // SAFETY: a live context; no channel, vector 0.
        let cq =
            unsafe { (self.verbs.ibv_create_cq)(self.ctx, n, ptr::null_mut(), ptr::null_mut(), 0) };
        let Some(cq) = NonNull::new(cq) else {
            return Err(Error::last_os("ibv_create_cq"));
        };
        let mut out = VerbsCq {
            cq,
            verbs: self.verbs,
            layout: None,
            cq_ex: None,
        };
        let note = if direct {
            match init_cq(cq) {
                Ok(l) => {
                    let note = format!(
                        "mlx5dv_init_obj: CQ {:#x}, {} CQEs of {} bytes",
                        l.cqn, l.cqe_cnt, l.cqe_size
                    );
                    out.layout = Some(l);
                    note
                }
                Err(why) => why,
            }
        } else {
            String::from("libibverbs ibv_poll_cq")
        };
        Ok((Box::new(out), EngineNote(note)))
    }

    fn clock(&self) -> Result<crate::types::clock::ClockSnapshot> {
        let (khz, mask) = self.timestamp_caps()?;
        let info = self.clock_info(khz, mask)?;
        let max_ticks = (mask / 2).min(u64::MAX / u64::from(info.mult.max(1)));
        let max_age_ns =
            zverbs_mlx5dv::clock::TickRate::from_khz(khz).map_or(0, |r| r.ticks_to_ns(max_ticks));
        Ok(crate::types::clock::ClockSnapshot {
            khz,
            mask,
            info,
            max_age_ns,
        })
    }

    fn create_cq_timestamped(
        &self,
        cqe: u32,
        direct: bool,
        channel: Option<&dyn super::ChannelProvider>,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        self.timestamp_caps()?;
        if let Some(ch) = channel {
            return channel::create_cq(self, cqe, direct, ch, true);
        }
        let ex = self.create_cq_ex(cqe, ptr::null_mut())?;
        // `ibv_cq_ex_to_cq`: an extended CQ starts as `struct ibv_cq`.
        let cq = ex.cast::<ibv_cq>();
        let mut out = VerbsCq {
            cq,
            verbs: self.verbs,
            layout: None,
            cq_ex: Some(ex),
        };
        let note = if direct {
            match init_cq(cq) {
                Ok(l) => {
                    out.layout = Some(l);
                    format!(
                        "ibv_create_cq_ex with completion timestamps; mlx5dv_init_obj: CQ {:#x}, \
                         {} CQEs of {} bytes",
                        l.cqn, l.cqe_cnt, l.cqe_size
                    )
                }
                Err(why) => why,
            }
        } else {
            String::from("libibverbs ibv_start_poll, with completion timestamps")
        };
        Ok((Box::new(out), EngineNote(note)))
    }

    fn raw_support(&self, port: u8) -> Result<super::RawSupport> {
        eth::raw_support(self, port)
    }

    fn create_ind_table(
        &self,
        wqs: &[&dyn super::WqProvider],
    ) -> Result<Box<dyn super::IndTableProvider>> {
        eth::create_ind_table(self, wqs)
    }

    fn create_comp_channel(&self) -> Result<Box<dyn super::ChannelProvider>> {
        Ok(Box::new(channel::VerbsChannel::new(self)?))
    }

    fn create_cq_on_channel(
        &self,
        cqe: u32,
        direct: bool,
        ch: &dyn super::ChannelProvider,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        channel::create_cq(self, cqe, direct, ch, false)
    }

    fn create_cq_compressed(
        &self,
        cqe: u32,
        format: zverbs_mlx5dv::prm::mini::MiniCqeFormat,
        timestamps: bool,
        channel: Option<&dyn super::ChannelProvider>,
    ) -> Result<(Box<dyn CqProvider>, EngineNote)> {
        compressed::create_cq(self, cqe, format, timestamps, channel)
    }
}

impl VerbsContext {
    /// `ibv_create_cq_ex` of at least `cqe` entries with the standard fields and the
    /// completion timestamp, its events going to `channel` (null: none).
    fn create_cq_ex(&self, cqe: u32, channel: *mut ibv_comp_channel) -> Result<NonNull<ibv_cq_ex>> {
        let mut attr = ibv_cq_init_attr_ex {
            cqe: cqe.max(1),
            cq_context: ptr::null_mut(),
            channel,
            comp_vector: 0,
            wc_flags: wc_ex_flags::IBV_WC_STANDARD_FLAGS
                | wc_ex_flags::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP,
            comp_mask: 0,
            flags: 0,
            parent_domain: ptr::null_mut(),
        };
        // SAFETY: a live context, a valid attribute struct, and a channel of the context or
        // null.
        let ex = unsafe { zverbs_ffi::ibv_create_cq_ex(self.ctx, &mut attr) };
        NonNull::new(ex).ok_or_else(|| Error::last_os("ibv_create_cq_ex"))
    }
}

impl VerbsContext {
    /// `hca_core_clock` (kHz) and `completion_timestamp_mask` from `ibv_query_device_ex`, or
    /// why the device cannot timestamp completions.
    fn timestamp_caps(&self) -> Result<(u64, u64)> {
        let none = |reason: String| Error::NoTimestamps {
            device: self.name.clone(),
            reason,
        };
        // SAFETY: all-zero bytes are a valid `ibv_device_attr_ex`.
        let mut a: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
        // SAFETY: a live context and a writable struct of the size the call passes.
        let ret = unsafe { zverbs_ffi::ibv_query_device_ex(self.ctx, &mut a) };
        match ret {
            0 => {}
            libc::EOPNOTSUPP | libc::ENOSYS => {
                return Err(none("the provider has no ibv_query_device_ex".into()));
            }
            e => return Err(Error::from_ret("ibv_query_device_ex", e)),
        }
        if a.completion_timestamp_mask == 0 || a.hca_core_clock == 0 {
            return Err(none(format!(
                "ibv_query_device_ex reports completion_timestamp_mask {:#x}, hca_core_clock {} kHz",
                a.completion_timestamp_mask, a.hca_core_clock
            )));
        }
        Ok((a.hca_core_clock, a.completion_timestamp_mask))
    }

    /// The timecounter over the device clock: `mlx5dv_get_clock_info` on an mlx5 device whose
    /// context mapped the clock-info page, else the counter from `ibv_query_rt_values_ex`
    /// read beside `CLOCK_REALTIME`.
    fn clock_info(&self, khz: u64, mask: u64) -> Result<zverbs_mlx5dv::clock::ClockInfo> {
        use zverbs_mlx5dv::clock::ClockInfo;
        if matches!(self.direct, DirectSupport::Yes(_))
            && let Some(get) = load::mlx5().ok().and_then(|m| m.mlx5dv_get_clock_info)
        {
            let mut ci = zverbs_mlx5dv::prm::clock::mlx5dv_clock_info::default();
            // SAFETY: a live mlx5 context and a writable `struct mlx5dv_clock_info`.
            if unsafe { get(self.ctx, (&raw mut ci).cast()) } == 0 {
                return Ok(ClockInfo::from_dv(&ci));
            }
        }
        let mut v = ibv_values_ex {
            comp_mask: IBV_VALUES_MASK_RAW_CLOCK,
            raw_clock: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        // SAFETY: a live context and a writable struct.
        let ret = unsafe { zverbs_ffi::ibv_query_rt_values_ex(self.ctx, &mut v) };
        let now = crate::types::clock::wall_now_ns();
        if ret != 0 {
            return Err(Error::from_ret("ibv_query_rt_values_ex", ret));
        }
        if v.comp_mask & IBV_VALUES_MASK_RAW_CLOCK == 0 {
            return Err(Error::NoTimestamps {
                device: self.name.clone(),
                reason: "ibv_query_rt_values_ex reports no raw clock".into(),
            });
        }
        // The counter is in `tv_nsec` (libmlx5 sets `tv_sec` 0).
        let cycles = (v.raw_clock.tv_sec as u64)
            .wrapping_mul(1_000_000_000)
            .wrapping_add(v.raw_clock.tv_nsec as u64);
        let hour = khz.saturating_mul(1000 * 3600);
        let (mult, shift) = crate::types::clock::mult_shift(khz, hour.min(mask / 2));
        Ok(ClockInfo {
            nsec: now,
            last_cycles: cycles & mask,
            frac: 0,
            mult,
            shift,
            mask,
        })
    }
}

/// `mlx5dv_init_obj` for the one object whose entry `fill` points at the object and at its
/// out-struct; `ty` is its `MLX5DV_OBJ_*` bit.
///
/// # Safety
///
/// `fill` sets the entry of `ty` to a live object of an mlx5 context and a valid out-struct.
unsafe fn init_obj(
    ty: u64,
    fill: impl FnOnce(&mut mlx5dv_obj<mlx5dv_qp, mlx5dv_cq>),
) -> Result<()> {
    let m = load::mlx5()?;
    let mut obj = mlx5dv_obj::<mlx5dv_qp, mlx5dv_cq>::EMPTY;
    fill(&mut obj);
    // SAFETY: (caller) the entry of `ty` names a live object and a valid out-struct; the other
    // entries are unused (the opaque form of `obj` has the same layout: its out-structs are
    // behind pointers).
    let ret = unsafe { (m.mlx5dv_init_obj)((&raw mut obj).cast(), ty) };
    if ret != 0 {
        return Err(Error::from_ret("mlx5dv_init_obj", ret));
    }
    Ok(())
}

/// `mlx5dv_init_obj` for a CQ.
fn init_cq(cq: NonNull<ibv_cq>) -> std::result::Result<zverbs_mlx5dv::CqLayout, String> {
    let mut dv = mlx5dv_cq::default();
    // SAFETY: a live CQ of an mlx5 context, and `dv` is a valid out-struct.
    unsafe {
        init_obj(MLX5DV_OBJ_CQ, |obj| {
            obj.cq.r#in = cq.as_ptr();
            obj.cq.out = &mut dv;
        })
    }
    .map_err(|e| format!("CQ: {e}"))?;
    dv.layout()
        .ok_or_else(|| String::from("mlx5dv_init_obj(CQ) reported a null buffer"))
}

/// The error of a QP creation that returned null: for a raw packet QP, the kernel's EPERM
/// is the missing `CAP_NET_RAW`.
fn create_qp_error(verb: &'static str, qp_type: QpType) -> Error {
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    match qp_type {
        QpType::RawPacket => Error::raw_verb(verb, errno),
        _ => Error::from_ret(verb, errno),
    }
}

#[derive(Debug)]
struct VerbsPd {
    pd: *mut ibv_pd,
    ctx: *mut ibv_context,
    verbs: &'static Verbs,
    /// The device is driven by libmlx5 (`mlx5dv_init_obj` answers for its objects).
    mlx5: bool,
}

// SAFETY: libibverbs objects may be used from any thread; the fields are immutable.
unsafe impl Send for VerbsPd {}
// SAFETY: as above.
unsafe impl Sync for VerbsPd {}

impl Drop for VerbsPd {
    fn drop(&mut self) {
        // SAFETY: allocated by us, freed once; children hold the PD alive, so none is left.
        unsafe { (self.verbs.ibv_dealloc_pd)(self.pd) };
    }
}

/// The error for a failed `ibv_reg_mr` of `len` bytes with `errno`: a memlock error when the
/// limit is finite and the errno is what the kernel returns for it.
pub(crate) fn reg_mr_error(errno: i32, len: usize, memlock: Option<u64>) -> Error {
    let source = std::io::Error::from_raw_os_error(errno);
    match (errno, memlock) {
        (libc::ENOMEM | libc::EPERM | libc::EAGAIN, Some(limit)) => Error::MemlockLimit {
            requested: len,
            limit: Some(limit),
            source,
        },
        _ => Error::Verbs {
            verb: "ibv_reg_mr",
            source,
        },
    }
}

/// The soft `RLIMIT_MEMLOCK`, or `None` when unlimited.
pub(crate) fn memlock_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) } != 0 {
        return None;
    }
    (r.rlim_cur != libc::RLIM_INFINITY).then_some(r.rlim_cur)
}

impl PdProvider for VerbsPd {
    unsafe fn reg_mr(
        &self,
        addr: *mut u8,
        len: usize,
        access: AccessFlags,
    ) -> Result<Box<dyn MrProvider>> {
        // SAFETY: a live PD; (caller) the memory stays mapped while registered.
        let mr =
            unsafe { (self.verbs.ibv_reg_mr)(self.pd, addr.cast(), len, access.bits() as i32) };
        if mr.is_null() {
            let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
            return Err(reg_mr_error(errno, len, memlock_limit()));
        }
        Ok(Box::new(VerbsMr {
            mr,
            verbs: self.verbs,
        }))
    }

    fn create_qp(&self, init: &QpInit<'_>) -> Result<(Box<dyn QpProvider>, EngineNote)> {
        let foreign = || Error::InvalidArgument("the CQ belongs to another kind of device".into());
        let send_cq = init.send_cq.verbs_cq().ok_or_else(foreign)?;
        let recv_cq = init.recv_cq.verbs_cq().ok_or_else(foreign)?;
        let srq = match init.srq {
            Some(s) => s.verbs_srq().ok_or_else(foreign)?,
            None => ptr::null_mut(),
        };
        let qp_type = init.qp_type.to_raw();
        let dc = match init.qp_type {
            QpType::Dci => Some(MLX5DV_DCTYPE_DCI),
            QpType::Dct => Some(MLX5DV_DCTYPE_DCT),
            _ => None,
        };
        if dc.is_some() && !init.direct {
            // libibverbs has no DC: only mlx5dv_create_qp makes one.
            return Err(Error::Backend {
                requested: crate::types::backend::BackendKind::Verbs,
                reason: String::from(
                    "the dynamically connected transport (DCI/DCT) exists only on mlx5 devices \
                     driven directly (mlx5dv_create_qp); libibverbs has no DC",
                ),
            });
        }
        let cap = ibv_qp_cap {
            max_send_wr: init.caps.max_send_wr,
            max_recv_wr: init.caps.max_recv_wr,
            max_send_sge: init.caps.max_send_sge,
            max_recv_sge: init.caps.max_recv_sge,
            max_inline_data: init.caps.max_inline_data,
        };
        // ibv_create_qp and mlx5dv_create_qp write the granted capabilities back into the
        // attributes' `cap` (verbs.h: "updated with the actual QP values").
        let (mut domain, mut no_domain) = (None, None);
        let (qp, granted) = if init.direct {
            let m = load::mlx5()?;
            // A register of the QP's own where the device has one to give: a thread domain
            // (libmlx5 attaches a dedicated UAR to it) under a parent domain of this PD.
            // A DC target has no send queue, so no register to own.
            if dc != Some(MLX5DV_DCTYPE_DCT) {
                match ThreadDomain::new(self.ctx, self.pd, self.verbs) {
                    Ok(d) => domain = Some(d),
                    Err(why) => no_domain = Some(why),
                }
            }
            let mut attr = ibv_qp_init_attr_ex {
                qp_context: ptr::null_mut(),
                send_cq,
                recv_cq,
                srq: srq.cast(),
                cap,
                qp_type,
                sq_sig_all: i32::from(init.sig_all),
                comp_mask: IBV_QP_INIT_ATTR_PD,
                pd: domain.as_ref().map_or(self.pd, |d| d.parent),
                xrcd: ptr::null_mut(),
                create_flags: 0,
                max_tso_header: 0,
                rwq_ind_tbl: ptr::null_mut(),
                rx_hash_conf: ibv_rx_hash_conf {
                    rx_hash_function: 0,
                    rx_hash_key_len: 0,
                    rx_hash_key: ptr::null_mut(),
                    rx_hash_fields_mask: 0,
                },
                source_qpn: 0,
                send_ops_flags: 0,
            };
            // Scatter-to-CQE is a responder feature of connected QPs: a UD QP is created
            // without create flags. The direct poller decodes receives scattered into the
            // CQE (`zverbs-mlx5dv`'s `cq/scatter.rs`): an RC QP keeps libmlx5's default
            // (scatter allowed) where `QpInit::scatter_to_cqe` says, and is created with it
            // disabled otherwise.
            let rc = init.qp_type == QpType::Rc;
            let scatter = init.scatter_to_cqe();
            let mut dv = mlx5dv_qp_init_attr {
                comp_mask: if rc || dc.is_some() {
                    MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS
                } else {
                    0
                },
                create_flags: if scatter {
                    0
                } else {
                    MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE
                },
                dc_init_attr: mlx5dv_dc_init_attr {
                    dc_type: dc.unwrap_or(0),
                    u: mlx5dv_dc_init_attr_u {
                        dct_access_key: init.dc_access_key,
                    },
                },
                send_ops_flags: 0,
            };
            if dc.is_some() {
                dv.comp_mask |= MLX5DV_QP_INIT_ATTR_MASK_DC;
            }
            // SAFETY: a live context and PD; valid attribute structs.
            let qp = unsafe { (m.mlx5dv_create_qp)(self.ctx, &mut attr, &mut dv) };
            if qp.is_null() {
                return Err(create_qp_error("mlx5dv_create_qp", init.qp_type));
            }
            (qp, attr.cap)
        } else {
            let mut attr = ibv_qp_init_attr {
                qp_context: ptr::null_mut(),
                send_cq,
                recv_cq,
                srq: srq.cast(),
                cap,
                qp_type,
                sq_sig_all: i32::from(init.sig_all),
            };
            // SAFETY: a live PD and CQs; a valid attribute struct.
            let qp = unsafe { (self.verbs.ibv_create_qp)(self.pd, &mut attr) };
            if qp.is_null() {
                return Err(create_qp_error("ibv_create_qp", init.qp_type));
            }
            (qp, attr.cap)
        };
        // SAFETY: non-null (checked).
        let qp = unsafe { NonNull::new_unchecked(qp) };
        let mut out = VerbsQp {
            qp,
            domain,
            verbs: self.verbs,
            caps: QpCaps {
                max_send_wr: granted.max_send_wr,
                max_recv_wr: granted.max_recv_wr,
                max_send_sge: granted.max_send_sge,
                max_recv_sge: granted.max_recv_sge,
                max_inline_data: granted.max_inline_data,
            },
            layout: None,
            dc_access_key: init.dc_access_key,
            dct_mem: None,
        };
        if dc == Some(MLX5DV_DCTYPE_DCT) {
            // A DC target has no rings of its own (mlx5dv_init_obj has none to report): its
            // layout gives the poller the number its receive completions carry, over memory
            // of its own that the device never sees (one idle block and a doorbell record,
            // which a reset clears); a target's send queue is refused.
            let mem = out.dct_mem.insert(Box::new([0u64; 9]));
            let base = NonNull::from(&mut mem[..]).cast::<u8>();
            // SAFETY: 72 bytes: the block at 0..64, the record at 64..72, 8-aligned.
            let dbrec = unsafe { base.add(64) }.cast::<u32>();
            out.layout = Some(zverbs_mlx5dv::QpLayout {
                // SAFETY: a live QP.
                qpn: unsafe { (*qp.as_ptr()).qp_num },
                dbrec,
                sq: zverbs_mlx5dv::WqLayout {
                    buf: base,
                    wqe_cnt: 1,
                    stride: 64,
                },
                rq: zverbs_mlx5dv::WqLayout {
                    buf: base,
                    wqe_cnt: 0,
                    stride: 16,
                },
                bf: zverbs_mlx5dv::BfLayout { reg: base, size: 0 },
            });
            return Ok((
                Box::new(out),
                EngineNote(String::from("mlx5dv_create_qp: DC target (no send queue)")),
            ));
        }
        let note = if init.direct {
            let mut l = init_qp(qp)?;
            let reported = l.bf.size;
            if reported != 0 && crate::backend::shut_up_bf() {
                // The user asked libmlx5 for no BlueFlame; the direct path obeys it too and
                // rings the 8-byte doorbell at the same register.
                l.bf.size = 0;
            }
            let note = format!(
                "mlx5dv_init_obj: QP {:#x}, send ring {} blocks, {}{}",
                l.qpn,
                l.sq.wqe_cnt,
                if l.bf.size != 0 {
                    format!("BlueFlame {} bytes", l.bf.size)
                } else if reported != 0 {
                    String::from("doorbell only (MLX5_SHUT_UP_BF)")
                } else {
                    String::from("doorbell only (no BlueFlame)")
                },
                match &no_domain {
                    Some(why) => format!("; no thread domain ({why})"),
                    None => String::new(),
                }
            );
            out.layout = Some(l);
            note
        } else {
            String::from("libibverbs ibv_post_send/ibv_post_recv")
        };
        Ok((Box::new(out), EngineNote(note)))
    }

    fn create_ah(&self, attr: &AhAttr) -> Result<Box<dyn AhProvider>> {
        VerbsPd::create_ah(self, attr)
    }

    fn create_srq(&self, max_wr: u32, max_sge: u32, direct: bool) -> Result<Box<dyn SrqProvider>> {
        VerbsPd::create_srq(self, max_wr, max_sge, direct)
    }
    fn create_wq(
        &self,
        cq: &dyn CqProvider,
        max_wr: u32,
        shape: crate::types::eth::WqShape,
        direct: bool,
    ) -> Result<Box<dyn super::WqProvider>> {
        eth::create_wq(self, cq, max_wr, shape, direct)
    }
    fn create_rss_qp(
        &self,
        table: &dyn super::IndTableProvider,
        hash: &crate::types::eth::RxHash,
    ) -> Result<Box<dyn super::RssProvider>> {
        eth::create_rss_qp(self, table, hash)
    }
}

impl VerbsPd {
    fn create_ah(&self, attr: &AhAttr) -> Result<Box<dyn AhProvider>> {
        let mut a = attr.to_verbs();
        // SAFETY: a live PD and a valid attribute struct.
        let ah = unsafe { (self.verbs.ibv_create_ah)(self.pd, &mut a) };
        let Some(ah) = NonNull::new(ah) else {
            return Err(Error::last_os("ibv_create_ah"));
        };
        let mut out = VerbsAh {
            ah,
            av: None,
            verbs: self.verbs,
        };
        if self.mlx5 {
            let mut dv = mlx5dv_ah {
                av: ptr::null_mut(),
                comp_mask: 0,
            };
            // SAFETY: a live AH of an mlx5 context, and `dv` is a valid out-struct.
            unsafe {
                init_obj(MLX5DV_OBJ_AH, |obj| {
                    obj.ah.r#in = ah.as_ptr().cast();
                    obj.ah.out = (&raw mut dv).cast();
                })
            }?;
            out.av = NonNull::new(dv.av.cast::<[u8; 48]>());
            if out.av.is_none() {
                return Err(Error::Backend {
                    requested: crate::types::backend::BackendKind::Direct,
                    reason: String::from("mlx5dv_init_obj(AH) reported no address vector"),
                });
            }
        }
        Ok(Box::new(out))
    }

    fn create_srq(&self, max_wr: u32, max_sge: u32, direct: bool) -> Result<Box<dyn SrqProvider>> {
        let mut attr = ibv_srq_init_attr {
            srq_context: ptr::null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD and a valid attribute struct; the granted sizes are written back.
        let srq = unsafe { (self.verbs.ibv_create_srq)(self.pd, &mut attr) };
        let Some(srq) = NonNull::new(srq) else {
            return Err(Error::last_os("ibv_create_srq"));
        };
        let mut out = VerbsSrq {
            srq,
            caps: (attr.attr.max_wr, attr.attr.max_sge),
            layout: None,
            verbs: self.verbs,
        };
        if direct && self.mlx5 {
            let mut dv = mlx5dv_srq {
                buf: ptr::null_mut(),
                dbrec: ptr::null_mut(),
                stride: 0,
                head: 0,
                tail: 0,
                comp_mask: MLX5DV_SRQ_MASK_SRQN,
                srqn: 0,
            };
            // SAFETY: a live SRQ of an mlx5 context, and `dv` is a valid out-struct.
            unsafe {
                init_obj(MLX5DV_OBJ_SRQ, |obj| {
                    obj.srq.r#in = srq.as_ptr().cast();
                    obj.srq.out = (&raw mut dv).cast();
                })
            }?;
            out.layout = Some(srq_layout(&dv)?);
        }
        Ok(Box::new(out))
    }
}

/// The direct path's view of `mlx5dv_init_obj(MLX5DV_OBJ_SRQ)`'s answer. libmlx5 creates the
/// free list from `head` 0 to `tail`, the last WQE, so the ring holds `tail + 1` WQEs.
fn srq_layout(dv: &mlx5dv_srq) -> Result<SrqLayout> {
    let bad = |why: &str| Error::Backend {
        requested: crate::types::backend::BackendKind::Direct,
        reason: format!("mlx5dv_init_obj(SRQ): {why}"),
    };
    let buf = NonNull::new(dv.buf.cast::<u8>()).ok_or_else(|| bad("null ring"))?;
    let dbrec = NonNull::new(dv.dbrec).ok_or_else(|| bad("null doorbell record"))?;
    if dv.comp_mask & MLX5DV_SRQ_MASK_SRQN == 0 {
        return Err(bad("no SRQ number"));
    }
    let wqe_cnt = dv.tail.wrapping_add(1);
    if !wqe_cnt.is_power_of_two() || !dv.stride.is_power_of_two() || dv.head != 0 {
        return Err(bad("a free list the direct path does not know"));
    }
    Ok(SrqLayout {
        buf,
        dbrec,
        stride: dv.stride,
        wqe_cnt,
        head: dv.head,
        tail: dv.tail,
        srqn: dv.srqn,
    })
}

#[derive(Debug)]
struct VerbsAh {
    ah: NonNull<ibv_ah>,
    /// The address vector inside libmlx5's AH (mlx5 devices).
    av: Option<NonNull<[u8; 48]>>,
    verbs: &'static Verbs,
}

// SAFETY: an immutable rdma-core AH handle; its address vector is never written after
// creation.
unsafe impl Send for VerbsAh {}
// SAFETY: as above.
unsafe impl Sync for VerbsAh {}

impl AhProvider for VerbsAh {
    fn av(&self) -> Option<&[u8; 48]> {
        // SAFETY: libmlx5's AH holds the 48-byte vector until `ibv_destroy_ah`, which runs
        // only when this value drops.
        self.av.map(|p| unsafe { p.as_ref() })
    }
    fn raw(&self) -> *mut ibv_ah {
        self.ah.as_ptr()
    }
}

impl Drop for VerbsAh {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once.
        unsafe { (self.verbs.ibv_destroy_ah)(self.ah.as_ptr()) };
    }
}

#[derive(Debug)]
struct VerbsSrq {
    srq: NonNull<ibv_srq>,
    caps: (u32, u32),
    layout: Option<SrqLayout>,
    verbs: &'static Verbs,
}

// SAFETY: an rdma-core SRQ handle; `ibv_modify_srq` may be called from any thread, and the
// queues that post to it take `&mut` of their own handles.
unsafe impl Send for VerbsSrq {}
// SAFETY: as above.
unsafe impl Sync for VerbsSrq {}

impl SrqProvider for VerbsSrq {
    fn srqn(&self) -> Option<u32> {
        self.layout.map(|l| l.srqn)
    }
    fn caps(&self) -> (u32, u32) {
        self.caps
    }
    fn arm(&self, limit: u32) -> Result<()> {
        let mut a = ibv_srq_attr {
            max_wr: 0,
            max_sge: 0,
            srq_limit: limit,
        };
        // SAFETY: a live SRQ and a valid attribute struct.
        let ret = unsafe { (self.verbs.ibv_modify_srq)(self.srq.as_ptr(), &mut a, IBV_SRQ_LIMIT) };
        if ret != 0 {
            return Err(Error::from_ret("ibv_modify_srq", ret));
        }
        Ok(())
    }
    fn engine(&self) -> SrqEngine {
        match self.layout {
            Some(l) => SrqEngine::Direct(l),
            None => SrqEngine::Verbs(self.srq),
        }
    }
    fn verbs_srq(&self) -> Option<*mut ibv_srq> {
        Some(self.srq.as_ptr())
    }
}

impl Drop for VerbsSrq {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once, after every QP on it (they hold it alive).
        unsafe { (self.verbs.ibv_destroy_srq)(self.srq.as_ptr()) };
    }
}

/// `mlx5dv_init_obj` for a QP.
fn init_qp(qp: NonNull<ibv_qp>) -> Result<zverbs_mlx5dv::QpLayout> {
    let mut dv = mlx5dv_qp::default();
    // SAFETY: a live QP of an mlx5 context, and `dv` is a valid out-struct (comp_mask 0: only
    // the base fields).
    unsafe {
        init_obj(MLX5DV_OBJ_QP, |obj| {
            obj.qp.r#in = qp.as_ptr();
            obj.qp.out = &mut dv;
        })
    }?;
    // SAFETY: a live QP.
    let qpn = unsafe { (*qp.as_ptr()).qp_num };
    dv.layout(qpn).ok_or_else(|| Error::Backend {
        requested: crate::types::backend::BackendKind::Direct,
        reason: String::from("mlx5dv_init_obj(QP) reported a null ring or register"),
    })
}

#[derive(Debug)]
struct VerbsMr {
    mr: *mut ibv_mr,
    verbs: &'static Verbs,
}

// SAFETY: an immutable handle to an rdma-core object usable from any thread.
unsafe impl Send for VerbsMr {}
// SAFETY: as above.
unsafe impl Sync for VerbsMr {}

impl MrProvider for VerbsMr {
    fn lkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).lkey }
    }
    fn rkey(&self) -> u32 {
        // SAFETY: a live MR.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for VerbsMr {
    fn drop(&mut self) {
        // SAFETY: registered by us, deregistered once.
        unsafe { (self.verbs.ibv_dereg_mr)(self.mr) };
    }
}

#[derive(Debug)]
struct VerbsCq {
    cq: NonNull<ibv_cq>,
    verbs: &'static Verbs,
    layout: Option<zverbs_mlx5dv::CqLayout>,
    /// The same CQ as an extended CQ, when it was created with completion timestamps.
    cq_ex: Option<NonNull<ibv_cq_ex>>,
}

// SAFETY: an rdma-core CQ handle; the data path that polls it takes `&mut` of its poller.
unsafe impl Send for VerbsCq {}
// SAFETY: as above; the fields are immutable.
unsafe impl Sync for VerbsCq {}

impl CqProvider for VerbsCq {
    fn cqe(&self) -> u32 {
        // SAFETY: a live CQ.
        unsafe { (*self.cq.as_ptr()).cqe.max(0) as u32 }
    }
    fn engine(&self) -> CqEngine {
        match self.layout {
            Some(l) => CqEngine::Direct(l),
            None => CqEngine::Verbs(self.cq),
        }
    }
    fn verbs_cq(&self) -> Option<*mut ibv_cq> {
        Some(self.cq.as_ptr())
    }
    fn timestamps(&self) -> bool {
        self.cq_ex.is_some()
    }
    fn verbs_cq_ex(&self) -> Option<*mut ibv_cq_ex> {
        self.cq_ex.map(NonNull::as_ptr)
    }
}

impl Drop for VerbsCq {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once, after every QP using it (they hold it alive).
        unsafe { (self.verbs.ibv_destroy_cq)(self.cq.as_ptr()) };
    }
}

/// A thread domain and the parent domain over a PD that carries it. A QP created on the
/// parent domain writes the thread domain's BlueFlame register: a dedicated UAR libmlx5
/// allocates for the domain (`mlx5_attach_dedicated_uar`) and gives to no other, so the direct
/// path rings it without a lock. One per QP: the library cannot know which thread will post,
/// and a send queue may move between threads.
#[derive(Debug)]
struct ThreadDomain {
    td: *mut ibv_td,
    parent: *mut ibv_pd,
    verbs: &'static Verbs,
}

impl ThreadDomain {
    /// A thread domain of `ctx` and a parent domain of `pd` carrying it; why not, when the
    /// device has no register left to dedicate (no dynamic UARs) or the provider has no thread
    /// domains.
    fn new(
        ctx: *mut ibv_context,
        pd: *mut ibv_pd,
        verbs: &'static Verbs,
    ) -> std::result::Result<Self, String> {
        let mut attr = ibv_td_init_attr::default();
        // SAFETY: a live context and a valid attribute struct.
        let td = unsafe { zverbs_ffi::ibv_alloc_td(ctx, &mut attr) };
        if td.is_null() {
            return Err(format!("ibv_alloc_td: {}", std::io::Error::last_os_error()));
        }
        let mut pattr = ibv_parent_domain_init_attr {
            pd,
            td,
            comp_mask: 0,
            alloc: None,
            free: None,
            pd_context: ptr::null_mut(),
        };
        // SAFETY: a live context, and a PD and thread domain of it.
        let parent = unsafe { zverbs_ffi::ibv_alloc_parent_domain(ctx, &mut pattr) };
        if parent.is_null() {
            let e = std::io::Error::last_os_error();
            // SAFETY: allocated above, used by nothing.
            unsafe { zverbs_ffi::ibv_dealloc_td(td) };
            return Err(format!("ibv_alloc_parent_domain: {e}"));
        }
        Ok(Self { td, parent, verbs })
    }
}

impl Drop for ThreadDomain {
    fn drop(&mut self) {
        // SAFETY: allocated by us and freed once, parent first (it holds the thread domain),
        // after the QP created on it (`VerbsQp` destroys the QP before its fields drop).
        unsafe {
            (self.verbs.ibv_dealloc_pd)(self.parent);
            zverbs_ffi::ibv_dealloc_td(self.td);
        }
    }
}

#[derive(Debug)]
struct VerbsQp {
    qp: NonNull<ibv_qp>,
    /// The thread domain whose register the QP writes, if it has one.
    domain: Option<ThreadDomain>,
    verbs: &'static Verbs,
    caps: QpCaps,
    layout: Option<zverbs_mlx5dv::QpLayout>,
    /// A DC target's access key (0 for other QPs).
    dc_access_key: u64,
    /// A DC target's stand-in rings (see `create_qp`).
    dct_mem: Option<Box<[u64; 9]>>,
}

// SAFETY: an rdma-core QP handle; `ibv_modify_qp` may be called from any thread, and the data
// path's queues take `&mut` of their own handles.
unsafe impl Send for VerbsQp {}
// SAFETY: as above.
unsafe impl Sync for VerbsQp {}

impl QpProvider for VerbsQp {
    fn qpn(&self) -> u32 {
        // SAFETY: a live QP.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }
    fn caps(&self) -> QpCaps {
        self.caps
    }
    fn modify(&self, attr: &mut ibv_qp_attr, mask: i32) -> Result<()> {
        // SAFETY: a live QP and a valid attribute struct.
        let ret = unsafe { (self.verbs.ibv_modify_qp)(self.qp.as_ptr(), attr, mask) };
        if ret != 0 {
            return Err(Error::from_ret("ibv_modify_qp", ret));
        }
        Ok(())
    }
    fn engine(&self) -> QpEngine {
        match self.layout {
            Some(l) => QpEngine::Direct(l),
            None => QpEngine::Verbs(self.qp),
        }
    }
    fn register(&self) -> RegisterOwner {
        match self.domain {
            Some(_) => RegisterOwner::Dedicated("thread domain"),
            None => RegisterOwner::Assigned,
        }
    }
    fn mcast(&self, attach: bool, gid: &Gid, lid: u16) -> Result<()> {
        let g = ibv_gid { raw: gid.0 };
        let (f, verb) = if attach {
            (self.verbs.ibv_attach_mcast, "ibv_attach_mcast")
        } else {
            (self.verbs.ibv_detach_mcast, "ibv_detach_mcast")
        };
        // SAFETY: a live QP and a valid GID.
        let ret = unsafe { f(self.qp.as_ptr(), &g, lid) };
        if ret != 0 {
            return Err(Error::from_ret(verb, ret));
        }
        Ok(())
    }
    fn dc_access_key(&self) -> u64 {
        self.dc_access_key
    }
    fn query_state(&self) -> Result<Option<u32>> {
        let mut attr = ibv_qp_attr::default();
        // SAFETY: an all-zero `ibv_qp_init_attr` is valid (null pointers, zero counts); the
        // call writes into it.
        let mut init: zverbs_ffi::types::ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: a live QP and attribute structs the call fills.
        let ret = unsafe {
            (self.verbs.ibv_query_qp)(
                self.qp.as_ptr(),
                &mut attr,
                zverbs_ffi::types::qp_attr_mask::IBV_QP_STATE,
                &mut init,
            )
        };
        if ret != 0 {
            return Err(Error::from_ret("ibv_query_qp", ret));
        }
        Ok(Some(attr.qp_state))
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once; its queues hold it alive, so none is left.
        // Its thread domain, if any, is freed after this (field drop).
        unsafe { (self.verbs.ibv_destroy_qp)(self.qp.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reg_mr_enomem_with_finite_memlock_says_ulimit() {
        let e = reg_mr_error(libc::ENOMEM, 1 << 20, Some(8 << 20));
        assert!(matches!(e, Error::MemlockLimit { .. }), "{e:?}");
        assert!(e.to_string().contains("ulimit -l"));
        let e = reg_mr_error(libc::ENOMEM, 1 << 20, None);
        assert!(
            matches!(
                e,
                Error::Verbs {
                    verb: "ibv_reg_mr",
                    ..
                }
            ),
            "{e:?}"
        );
        let e = reg_mr_error(libc::EINVAL, 1 << 20, Some(8 << 20));
        assert!(matches!(e, Error::Verbs { .. }), "{e:?}");
    }
}

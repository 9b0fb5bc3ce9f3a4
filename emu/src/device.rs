//! The emulated ConnectX-6 behind the shim: the uverbs commands, answered as the kernel's
//! mlx5 driver answers them, with the software device as the NIC.
//!
//! One instance per process (all contexts opened in the process share it). The kernel's part
//! is reduced to bookkeeping: handles for the objects, QP and CQ numbers, the answers libmlx5
//! expects in the driver data. The NIC's part is the software device
//! ([`zverbs_sim::Device`], on its progress thread): every CQ and QP whose rings and
//! doorbell records libmlx5 allocates and passes in the create command is handed to it
//! ([`Device::create_cq_external`], [`Device::create_qp_external`]), every registered region
//! too, so WQEs libmlx5 (or any driver writing the same rings) posts are executed and CQEs
//! appear in libmlx5's own CQ buffers.
//!
//! Connections: at RTR a QP is pointed at `(dlid, dest_qp_num)`. A `dlid` equal to this
//! instance's LID (or 0) is a QP of this process; any other LID is the instance of another
//! process, reached through the [`Fabric`]. Connections are one-sided, as on hardware: a QP
//! accepts requests only from the QP (and LID) its own RTR named ([`Device::connect_to`]).

use std::collections::HashMap;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use zverbs_mlx5dv::prm::mini::MiniCqeFormat;
use zverbs_mlx5dv::{BfLayout, CqLayout, QpLayout, WqLayout};
use zverbs_sim::{Access, Device, DeviceConfig, Peer, QpType, RNR_RETRY_INFINITE, SimError};

use crate::abi::{self, cmd, errno, ex, get, mask, put, qps};
use crate::fabric::{self, Fabric, Listener};
use crate::uar::{Bfreg, Mapping, Uctx};

mod dc;
mod eth;

/// The vendor, part and firmware a ConnectX-6 reports (the part ID libmlx5 matches, 0x101b,
/// is also in the fake sysfs tree's modalias).
const VENDOR_ID: u32 = 0x02c9;
const VENDOR_PART_ID: u32 = 4123;
const FW_VER: u64 = (20 << 32) | (31 << 16) | 1000;
/// The node GUID, the same in the sysfs tree's GID.
pub const NODE_GUID: u64 = 0x0c42_a103_00aa_bbcc;

/// The node GUID of the Ethernet function (the InfiniBand one's plus one, as a ConnectX's
/// functions number theirs).
pub const ETH_NODE_GUID: u64 = NODE_GUID + 1;
/// First CQ and QP numbers.
const CQN_BASE: u32 = 0x400;
const QPN_BASE: u32 = 0x100;

/// What the emulator remembers of a QP.
#[derive(Clone, Copy, Debug, Default)]
struct Qp {
    qpn: u32,
    /// A UD QP (else RC).
    ud: bool,
    qkey: u32,
    pkey_index: u16,
    send_cq: u32,
    recv_cq: u32,
    /// Capabilities as created (echoed by QUERY_QP).
    caps: [u32; 5],
    sq_sig_all: u8,
    state: u8,
    dlid: u16,
    port: u8,
    dest_qpn: u32,
    access: u32,
    rq_psn: u32,
    sq_psn: u32,
    path_mtu: u8,
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    min_rnr_timer: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    connected: bool,
    /// The user context (its descriptor) and the bfreg the QP rings.
    fd: i32,
    bfreg: Option<Bfreg>,
    /// A DC initiator's or target's kind (`None` for RC and UD).
    dc: Option<QpType>,
    /// A raw packet QP or an RSS QP of the Ethernet function.
    raw: Option<eth::Raw>,
}

/// The kernel's bookkeeping.
#[derive(Debug, Default)]
struct Ctl {
    next_handle: u32,
    next_cqn: u32,
    next_qpn: u32,
    /// `mr_handle` → lkey.
    mrs: HashMap<u32, u32>,
    /// `cq_handle` → CQN.
    cqs: HashMap<u32, u32>,
    qps: HashMap<u32, Qp>,
    /// `srq_handle` → SRQN.
    srqs: HashMap<u32, u32>,
    /// Each user context's bfregs and UAR pages, by its descriptor.
    uctx: HashMap<i32, Uctx>,
    /// Each DC target's stand-in rings and doorbell record, by its number: the device
    /// watches them and never finds them rung (a target has no send queue).
    dct_mem: HashMap<u32, Box<[u64; 9]>>,
    /// `flow_handle` → the software device's flow rule.
    flows: HashMap<u32, u32>,
    /// `wq_handle` → WQN.
    wqs: HashMap<u32, u32>,
    /// `ind_tbl_handle` → the software device's indirection table.
    ind_tables: HashMap<u32, u32>,
}

impl Ctl {
    fn handle(&mut self) -> u32 {
        self.next_handle += 1;
        self.next_handle
    }
}

/// The emulated device of this process.
#[derive(Debug)]
pub struct Emu {
    dev: Device,
    lid: u16,
    ctl: Mutex<Ctl>,
}

static EMU: OnceLock<Result<Emu, String>> = OnceLock::new();

impl Emu {
    /// This process's instance, created (device, progress thread, listener) on first use.
    ///
    /// # Errors
    ///
    /// When the listener cannot be bound or a thread cannot be started.
    pub fn get() -> Result<&'static Emu, &'static str> {
        match EMU.get_or_init(Self::create) {
            Ok(e) => {
                e.start();
                Ok(e)
            }
            Err(why) => Err(why.as_str()),
        }
    }

    fn create() -> Result<Emu, String> {
        let dev = Device::with_config(DeviceConfig {
            max_qps: 4096,
            max_cqs: 4096,
            max_mrs: 16384,
        })
        .map_err(|e| format!("cannot create the software device: {e}"))?;
        // The device's progress thread serves the doorbells from now on; when idle it sleeps
        // (`ZVERBS_EMU_IDLE_US`, default 20 µs) rather than compete for the CPU with the
        // programs polling their CQs.
        let idle_us = std::env::var("ZVERBS_EMU_IDLE_US")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(20);
        dev.set_idle_sleep(std::time::Duration::from_micros(idle_us));
        // Atomics in host order: the requester mode the Linux mlx5 driver sets whenever the
        // firmware offers it (it then advertises IBV_ATOMIC_HCA). ZVERBS_EMU_ATOMICS=be gives
        // the big-endian mode of a device without it (advertised as IBV_ATOMIC_NONE).
        dev.set_atomic_host_endian(!atomics_big_endian());
        with_realtime(|| dev.start());
        let first = 1 + (std::process::id() % u32::from(0xbffe_u16)) as u16;
        let key = fabric::hello::Key::from_env();
        let (fabric, listener) = Fabric::bind(&fabric::namespace(), first, key)
            .map_err(|e| format!("cannot bind the emulator's socket: {e}"))?;
        let lid = fabric.lid();
        dev.set_wire(Arc::new(fabric), lid);
        crate::log(format_args!(
            "device instance of pid {} at LID {lid}",
            std::process::id()
        ));
        let emu = Emu {
            dev,
            lid,
            ctl: Mutex::new(Ctl {
                next_cqn: CQN_BASE,
                next_qpn: QPN_BASE,
                ..Ctl::default()
            }),
        };
        // The listener starts once the instance is in its static (see `start`).
        LISTENER
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .replace(listener);
        Ok(emu)
    }

    /// This process's instance if it was created (without creating it).
    pub fn running() -> Option<&'static Emu> {
        EMU.get().and_then(|r| r.as_ref().ok())
    }

    /// Starts serving the listener (once), now that `self` is `'static`.
    fn start(&'static self) {
        crate::async_events::start(&self.dev);
        let l = LISTENER.lock().unwrap_or_else(|p| p.into_inner()).take();
        let dev = &self.dev;
        if let Some(l) = l
            && let Err(e) = with_realtime(|| l.serve(move |msg| dev.deliver(msg)))
        {
            crate::log(format_args!("cannot serve peers: {e}"));
        }
    }

    /// The LID of this instance (in QUERY_PORT).
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The software device.
    pub fn device(&self) -> &Device {
        &self.dev
    }

    fn ctl(&self) -> MutexGuard<'_, Ctl> {
        self.ctl.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Answers one uverbs command on the context of descriptor `fd`: `command` as the write
    /// ABI numbers it (with [`abi::CMD_FLAG_EXTENDED`] for extended ones), the core and driver
    /// (`uhw`) buffers as the kernel receives them. Returns 0 or an errno.
    pub fn command(
        &self,
        fd: i32,
        command: u32,
        core_in: &[u8],
        drv_in: &[u8],
        core_out: &mut [u8],
        drv_out: &mut [u8],
    ) -> i32 {
        core_out.fill(0);
        drv_out.fill(0);
        let extended = command & abi::CMD_FLAG_EXTENDED != 0;
        let c = command & abi::CMD_COMMAND_MASK;
        crate::log(format_args!(
            "{}command {c} in {}+{} out {}+{}",
            if extended { "extended " } else { "" },
            core_in.len(),
            drv_in.len(),
            core_out.len(),
            drv_out.len()
        ));
        let r = match (extended, c) {
            (false, cmd::GET_CONTEXT) if Self::ethernet(fd) => Self::eth_context_request(drv_in)
                .and_then(|()| self.get_context(fd, drv_in, core_out, drv_out))
                .and_then(|()| self.eth_context_answer(drv_out)),
            (false, cmd::GET_CONTEXT) => self.get_context(fd, drv_in, core_out, drv_out),
            (false, cmd::QUERY_DEVICE) => {
                query_device(core_out);
                if Self::ethernet(fd) {
                    Self::eth_query_device(core_out, drv_out, false);
                }
                Ok(())
            }
            (true, ex::QUERY_DEVICE) => {
                query_device(core_out);
                put::<4>(core_out, 180, core_out.len().min(304) as u64);
                // timestamp_mask and hca_core_clock: the software device's clock.
                put::<8>(core_out, 208, zverbs_sim::clock::CLOCK_MASK);
                put::<8>(core_out, 216, zverbs_sim::clock::CLOCK_KHZ);
                put::<4>(drv_out, 4, drv_out.len() as u64);
                // cqe_comp_caps: the software device compresses CQEs, in every format.
                use abi::mlx5_query_device as q;
                if drv_out.len() >= q::CQE_COMP_SUPPORTED_FORMAT + 4 {
                    put::<4>(
                        drv_out,
                        q::CQE_COMP_MAX_NUM,
                        u64::from(zverbs_sim::compress::MAX_SESSION),
                    );
                    put::<4>(
                        drv_out,
                        q::CQE_COMP_SUPPORTED_FORMAT,
                        u64::from(zverbs_sim::compress::SUPPORTED_FORMATS),
                    );
                }
                if Self::ethernet(fd) {
                    Self::eth_query_device(core_out, drv_out, true);
                }
                Ok(())
            }
            (false, cmd::QUERY_PORT) if Self::ethernet(fd) => {
                self.eth_query_port(core_out);
                Ok(())
            }
            (false, cmd::QUERY_PORT) => {
                self.query_port(core_out);
                Ok(())
            }
            (false, cmd::ALLOC_PD) => {
                let h = self.ctl().handle();
                put::<4>(core_out, 0, u64::from(h));
                put::<4>(drv_out, 0, u64::from(h));
                Ok(())
            }
            (false, cmd::DEALLOC_PD) => Ok(()),
            (false, cmd::REG_MR) => self.reg_mr(core_in, core_out),
            (false, cmd::DEREG_MR) => self.dereg_mr(core_in),
            (false, cmd::CREATE_CQ) => self.create_cq(core_in, false, drv_in, core_out, drv_out),
            (true, ex::CREATE_CQ) => self.create_cq(core_in, true, drv_in, core_out, drv_out),
            (false, cmd::DESTROY_CQ) => {
                let r = self.destroy_cq(core_in);
                // `comp_events_reported`: the events read from the CQ's channel.
                if r.is_ok() {
                    let h = get::<4>(core_in, 8) as u32;
                    put::<4>(core_out, 0, u64::from(crate::channel::destroyed(h)));
                }
                r
            }
            (false, cmd::CREATE_COMP_CHANNEL) => crate::channel::create().map(|fd| {
                put::<4>(core_out, 0, fd as u64);
            }),
            (false, cmd::CREATE_QP) => {
                self.create_qp(fd, core_in, false, drv_in, core_out, drv_out)
            }
            (true, ex::CREATE_QP) => self.create_qp(fd, core_in, true, drv_in, core_out, drv_out),
            (false, cmd::MODIFY_QP) => self.modify_qp(core_in),
            (true, ex::MODIFY_QP) => {
                let r = self.modify_qp(core_in);
                put::<4>(core_out, 4, core_out.len() as u64);
                if r.is_ok() {
                    self.dct_modify_answer(core_in, drv_out);
                }
                r
            }
            (false, cmd::QUERY_QP) => self.query_qp(core_in, core_out),
            (false, cmd::DESTROY_QP) => self.destroy_qp(core_in),
            (false, cmd::CREATE_SRQ) => self.create_srq(core_in, drv_in, core_out, drv_out),
            (false, cmd::MODIFY_SRQ) => self.modify_srq(core_in),
            (false, cmd::DESTROY_SRQ) => self.destroy_srq(core_in),
            (false, cmd::ATTACH_MCAST) => self.mcast(core_in, true),
            (false, cmd::DETACH_MCAST) => self.mcast(core_in, false),
            (true, ex::CREATE_FLOW) => self.create_flow(fd, core_in, core_out),
            (true, ex::DESTROY_FLOW) => self.destroy_flow(core_in),
            (true, ex::CREATE_WQ) => self.create_wq(fd, core_in, drv_in, core_out, drv_out),
            (true, ex::MODIFY_WQ) => self.modify_wq(core_in, drv_in),
            (true, ex::DESTROY_WQ) => self.destroy_wq(core_in, core_out),
            (true, ex::CREATE_RWQ_IND_TBL) => self.create_ind_table(core_in, core_out),
            (true, ex::DESTROY_RWQ_IND_TBL) => self.destroy_ind_table(core_in),
            _ => Err(errno::EOPNOTSUPP),
        };
        if r.is_ok() {
            crate::async_events::after_command(fd, command, core_in, core_out, drv_out);
        }
        match r {
            Ok(()) => 0,
            Err(e) => {
                crate::log(format_args!("  -> errno {e}"));
                e
            }
        }
    }

    fn get_context(&self, fd: i32, drv_in: &[u8], core_out: &mut [u8], drv_out: &mut [u8]) -> Res {
        // struct mlx5_ib_alloc_ucontext_req_v2: total_num_bfregs, num_low_latency_bfregs.
        let total = get::<4>(drv_in, 0) as u32;
        let low = get::<4>(drv_in, 4) as u32;
        // bf_reg_size: two BlueFlame buffers of 256 bytes; 0 with ZVERBS_EMU_BF=0, a device
        // without BlueFlame (as when the kernel's write-combining test fails): libmlx5 then
        // rings 8-byte doorbells and `mlx5dv_init_obj` reports `bf.size` 0.
        let bf = std::env::var_os("ZVERBS_EMU_BF").is_none_or(|v| v != "0");
        let bf_reg_size = if bf { 512 } else { 0 };
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u32;
        let uars_per_page = page / 4096;
        let uctx = Uctx::new(total, low, uars_per_page, dyn_bfregs(), bf_reg_size)?;
        // SAFETY: plain eventfd creation; the fd is handed to libibverbs as the async fd,
        // blocking as the kernel's is, counting the events queued (`async_events`).
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
        if efd < 0 {
            return Err(errno::ENOMEM);
        }
        put::<4>(core_out, 0, efd as u64);
        put::<4>(core_out, 4, 1); // num_comp_vectors
        // struct mlx5_ib_alloc_ucontext_resp.
        put::<4>(drv_out, 0, 1 << 18); // qp_tab_size
        put::<4>(drv_out, 4, u64::from(bf_reg_size));
        // A non-zero tot_bfregs puts libmlx5 in the static UAR scheme: it maps its UAR pages
        // at context creation and takes each QP's bfreg from the create-QP answer.
        put::<4>(drv_out, 8, u64::from(uctx.tot_bfregs()));
        put::<4>(drv_out, 12, 64); // cache_line_size
        put::<2>(drv_out, 16, 512); // max_sq_desc_sz
        put::<2>(drv_out, 18, 512); // max_rq_desc_sz
        put::<4>(drv_out, 20, 1 << 15); // max_send_wqebb
        put::<4>(drv_out, 24, 1 << 15); // max_recv_wr
        put::<4>(drv_out, 28, 1 << 15); // max_srq_recv_wr
        put::<2>(drv_out, 32, 1); // num_ports
        put::<4>(drv_out, 40, drv_out.len() as u64); // response_length
        put::<1>(drv_out, 44, 1); // cqe_version 1: CQEs name their QP by user index
        // cmds_supp_uhw: QUERY_DEVICE | CREATE_AH take driver data.
        put::<1>(drv_out, 45, 0b11);
        put::<4>(drv_out, 56, 12); // log_uar_size: 4 KiB UARs
        put::<4>(drv_out, 60, u64::from(uars_per_page)); // num_uars_per_page
        put::<4>(drv_out, 64, u64::from(uctx.num_dyn_bfregs())); // num_dyn_bfregs
        // clock_info_versions: the clock-info page, version 1, which libmlx5 maps for
        // `mlx5dv_get_clock_info`.
        put::<1>(
            drv_out,
            47,
            1 << zverbs_mlx5dv::prm::clock::MLX5_IB_CLOCK_INFO_V1,
        );
        crate::log(format_args!(
            "  context fd {fd}: {} static bfregs ({low} low latency), {} dynamic",
            uctx.tot_bfregs(),
            uctx.num_dyn_bfregs()
        ));
        self.ctl().uctx.insert(fd, uctx);
        Ok(())
    }

    /// Checks an mmap of the context of `fd` (at offset `off`, `len` bytes) as the kernel
    /// does; on success the caller maps the page and reports it with [`Emu::mapped`].
    ///
    /// # Errors
    ///
    /// The errno the kernel's mmap would return.
    pub fn mmap(&self, fd: i32, off: u64, len: u64) -> Result<Mapping, i32> {
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as u64;
        match self.ctl().uctx.get_mut(&fd) {
            Some(u) => u.mmap(off, len, page),
            None => Err(errno::EINVAL),
        }
    }

    /// Records where a page [`Emu::mmap`] allowed was mapped.
    pub fn mapped(&self, fd: i32, m: Mapping, addr: usize) {
        if let Some(u) = self.ctl().uctx.get_mut(&fd) {
            u.mapped(m, addr);
        }
    }

    /// Forgets UAR pages in `addr..addr + len`, which the program unmapped.
    pub fn unmapped(&self, addr: usize, len: usize) {
        for u in self.ctl().uctx.values_mut() {
            u.unmapped(addr, len);
        }
    }

    /// The device clock's clock-info page now (`struct ib_uverbs_clock_info`), for the page
    /// libmlx5 maps.
    pub fn clock_info(&self) -> zverbs_mlx5dv::prm::clock::ib_uverbs_clock_info {
        self.dev.clock().clock_info()
    }

    /// Forgets the context of a closed descriptor.
    pub fn closed(&self, fd: i32) {
        if Self::ethernet(fd) {
            self.eth_report();
        }
        crate::async_events::context_closed(fd);
        self.ctl().uctx.remove(&fd);
    }

    fn query_port(&self, o: &mut [u8]) {
        put::<4>(o, 0, 0x2651_e848); // port_cap_flags
        put::<4>(o, 4, 1 << 30); // max_msg_sz
        put::<4>(o, 16, 1); // gid_tbl_len: the one GID in the sysfs tree
        put::<2>(o, 20, 128); // pkey_tbl_len
        put::<2>(o, 22, u64::from(self.lid)); // lid
        put::<2>(o, 24, 1); // sm_lid
        let down = self.dev.port_state() == zverbs_sim::PortState::Down;
        put::<1>(o, 26, if down { 1 } else { 4 }); // state: IBV_PORT_DOWN or IBV_PORT_ACTIVE
        put::<1>(o, 27, 5); // max_mtu: 4096
        put::<1>(o, 28, 5); // active_mtu
        put::<1>(o, 30, 4); // max_vl_num
        put::<1>(o, 32, 18); // subnet_timeout
        put::<1>(o, 34, 2); // active_width: 4X
        put::<1>(o, 35, 64); // active_speed: HDR
        put::<1>(o, 36, if down { 3 } else { 5 }); // phys_state: Disabled or LinkUp
        put::<1>(o, 37, 1); // link_layer: InfiniBand
    }

    fn reg_mr(&self, i: &[u8], o: &mut [u8]) -> Res {
        let start = get::<8>(i, abi::reg_mr::START);
        let len = get::<8>(i, abi::reg_mr::LENGTH);
        let va = get::<8>(i, abi::reg_mr::HCA_VA);
        let access = get::<4>(i, abi::reg_mr::ACCESS_FLAGS) as u32;
        if va != start || start == 0 {
            // The device addresses memory by its virtual address: an IOVA that differs from
            // it cannot be served.
            return Err(errno::EOPNOTSUPP);
        }
        // SAFETY: as on hardware, the caller keeps the region mapped while it is registered;
        // libibverbs deregisters it before freeing.
        let mr = unsafe {
            self.dev.reg_mr(
                start as *const u8,
                len as usize,
                Access::from_bits_truncate(access),
            )
        }
        .map_err(sim_errno)?;
        let mut ctl = self.ctl();
        let h = ctl.handle();
        ctl.mrs.insert(h, mr.lkey);
        put::<4>(o, abi::reg_mr::R_HANDLE, u64::from(h));
        put::<4>(o, abi::reg_mr::R_LKEY, u64::from(mr.lkey));
        put::<4>(o, abi::reg_mr::R_RKEY, u64::from(mr.rkey));
        Ok(())
    }

    fn dereg_mr(&self, i: &[u8]) -> Res {
        let h = get::<4>(i, 0) as u32;
        let lkey = self.ctl().mrs.remove(&h).ok_or(errno::EINVAL)?;
        self.dev.dereg_mr(lkey).map_err(sim_errno)
    }

    fn create_cq(&self, i: &[u8], extended: bool, d: &[u8], o: &mut [u8], dout: &mut [u8]) -> Res {
        let at = if extended {
            abi::create_cq::EX_CQE
        } else {
            abi::create_cq::CQE
        };
        let cqe = get::<4>(i, at) as u32;
        let buf = get::<8>(d, abi::mlx5_create_cq::BUF_ADDR);
        let db = get::<8>(d, abi::mlx5_create_cq::DB_ADDR);
        let cqe_size = get::<4>(d, abi::mlx5_create_cq::CQE_SIZE) as u32;
        let (Some(buf), Some(dbrec)) = (ptr(buf), ptr(db)) else {
            return Err(errno::EINVAL);
        };
        // CQE compression (`cqe_comp_en`), in one format, as the kernel's mlx5 driver checks
        // it: a combination of formats is invalid, and only 64-byte CQEs are compressed here.
        let compress = if d.len() > abi::mlx5_create_cq::CQE_COMP_RES_FORMAT
            && d[abi::mlx5_create_cq::CQE_COMP_EN] != 0
        {
            let f = MiniCqeFormat::from_raw(d[abi::mlx5_create_cq::CQE_COMP_RES_FORMAT])
                .ok_or(errno::EINVAL)?;
            if cqe_size != 64 {
                return Err(errno::EOPNOTSUPP);
            }
            Some(f)
        } else {
            None
        };
        let mut ctl = self.ctl();
        let cqn = ctl.next_cqn;
        let layout = CqLayout {
            buf,
            dbrec: dbrec.cast(),
            cqe_cnt: cqe.checked_add(1).ok_or(errno::EINVAL)?,
            cqe_size,
            cqn,
        };
        // SAFETY: libmlx5 allocated the ring (cqe + 1 CQEs, initialised invalid) and the
        // doorbell record for this CQ and frees them only after DESTROY_CQ, after which the
        // device forgets them.
        unsafe { self.dev.create_cq_external(&layout) }.map_err(sim_errno)?;
        // A ConnectX writes the device clock into every CQE: the kernel's mlx5 driver needs
        // no flag for it, and libibverbs leaves `IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION` out of
        // the command when the provider says it may (libmlx5 does: the legacy command then
        // creates the CQ). The flag, when it comes, changes nothing.
        self.dev.enable_cq_timestamps(cqn).map_err(sim_errno)?;
        if let Some(f) = compress {
            self.dev.enable_cq_compression(cqn, f).map_err(sim_errno)?;
        }
        ctl.next_cqn += 1;
        let h = ctl.handle();
        ctl.cqs.insert(h, cqn);
        // Its completion channel (`comp_channel`, -1 for none), whose events carry the
        // `user_handle` libibverbs gave.
        let (uh, ch) = if extended { (0, 16) } else { (8, 24) };
        let channel = get::<4>(i, ch) as u32 as i32;
        if channel >= 0 {
            let handler = crate::channel::handler(channel, h, get::<8>(i, uh));
            if handler.is_none() {
                ctl.cqs.remove(&h);
                let _ = self.dev.destroy_cq(cqn);
                return Err(errno::EINVAL);
            }
            self.dev
                .set_cq_event_handler(cqn, handler)
                .map_err(sim_errno)?;
        }
        put::<4>(o, 0, u64::from(h));
        put::<4>(o, 4, u64::from(cqe));
        if extended {
            put::<4>(o, abi::create_cq::EX_R_RESPONSE_LENGTH, o.len() as u64);
        }
        put::<4>(dout, 0, u64::from(cqn));
        crate::log(format_args!(
            "  CQ {cqn:#x}: {} CQEs of {cqe_size} bytes at {buf:p}{}",
            cqe + 1,
            match compress {
                Some(f) => format!(", compressed CQEs ({f:?})"),
                None => String::new(),
            }
        ));
        Ok(())
    }

    fn destroy_cq(&self, i: &[u8]) -> Res {
        let h = get::<4>(i, 8) as u32;
        let mut ctl = self.ctl();
        let cqn = *ctl.cqs.get(&h).ok_or(errno::EINVAL)?;
        self.dev.destroy_cq(cqn).map_err(|e| match e {
            SimError::InvalidConfig(_) => errno::EBUSY,
            e => sim_errno(e),
        })?;
        ctl.cqs.remove(&h);
        Ok(())
    }

    fn create_qp(
        &self,
        fd: i32,
        i: &[u8],
        extended: bool,
        d: &[u8],
        o: &mut [u8],
        dout: &mut [u8],
    ) -> Res {
        use abi::create_qp as f;
        use abi::mlx5_create_qp as m;
        let at = |off: usize| if extended { off - f::EX_SHIFT } else { off };
        let (ud, dc, raw) = match get::<1>(i, at(f::QP_TYPE)) as u8 {
            abi::QPT_RC => (false, None, false),
            abi::QPT_UD => (true, None, false),
            abi::QPT_DRIVER => (false, Some(dc::kind(get::<4>(d, m::FLAGS) as u32)?), false),
            abi::QPT_RAW_PACKET => {
                if Self::raw_qp_request(fd, i, extended)? {
                    return self.create_rss_qp(fd, i, d, o);
                }
                (false, None, true)
            }
            _ => return Err(errno::EOPNOTSUPP),
        };
        if dc == Some(QpType::Dct) {
            return self.create_dct(fd, i, extended, d, o);
        }
        let srq_h = (get::<1>(i, at(f::IS_SRQ)) != 0).then(|| get::<4>(i, at(f::SRQ)) as u32);
        let caps = [
            f::MAX_SEND_WR,
            f::MAX_RECV_WR,
            f::MAX_SEND_SGE,
            f::MAX_RECV_SGE,
            f::MAX_INLINE,
        ]
        .map(|off| get::<4>(i, at(off)) as u32);
        let send_h = get::<4>(i, at(f::SEND_CQ)) as u32;
        let recv_h = get::<4>(i, at(f::RECV_CQ)) as u32;
        let buf = get::<8>(d, m::BUF_ADDR);
        let db = get::<8>(d, m::DB_ADDR);
        let sq_cnt = get::<4>(d, m::SQ_WQE_COUNT) as u32;
        let rq_cnt = get::<4>(d, m::RQ_WQE_COUNT) as u32;
        let rq_shift = get::<4>(d, m::RQ_WQE_SHIFT) as u32;
        let uidx = get::<4>(d, m::UIDX) as u32;
        let Some(dbrec) = ptr(db) else {
            return Err(errno::EINVAL);
        };
        if rq_shift >= 16 {
            return Err(errno::EINVAL);
        }
        // A raw QP without a receive (or send) ring has no buffer for it: the device never
        // reads a ring of no WQEs, which stands at the doorbell record then.
        let rq_buf = match ptr(buf) {
            Some(b) => b,
            None if raw && rq_cnt == 0 => dbrec,
            None => return Err(errno::EINVAL),
        };
        // libmlx5 puts the receive ring first in the QP buffer and the send ring after it; a
        // raw packet QP's send ring is a buffer of its own, as the kernel sizes two umems.
        let rq_bytes = u64::from(rq_cnt) << rq_shift;
        let sq_buf = if raw {
            match ptr(Self::raw_sq_buf(d)) {
                Some(b) => b,
                None if sq_cnt == 0 => dbrec,
                None => return Err(errno::EINVAL),
            }
        } else {
            buf.checked_add(rq_bytes)
                .and_then(ptr)
                .ok_or(errno::EINVAL)?
        };
        let mut ctl = self.ctl();
        let (Some(&send_cq), Some(&recv_cq)) = (ctl.cqs.get(&send_h), ctl.cqs.get(&recv_h)) else {
            return Err(errno::EINVAL);
        };
        let srqn = match srq_h {
            Some(h) => Some(*ctl.srqs.get(&h).ok_or(errno::EINVAL)?),
            None => None,
        };
        // The bfreg: the dynamic one the command names (a thread domain's), checked; else one
        // the kernel picks. A UAR object's page cannot be named: this kernel has none.
        let flags = get::<4>(d, m::FLAGS) as u32;
        let uctx = ctl.uctx.get(&fd).ok_or(errno::EINVAL)?;
        let named = match flags & (m::FLAG_BFREG_INDEX | m::FLAG_UAR_PAGE_INDEX) {
            0 => None,
            m::FLAG_BFREG_INDEX => {
                let n = get::<4>(d, m::BFREG_INDEX) as u32;
                uctx.check_dyn_bfreg(n)?;
                Some(Bfreg::Dynamic(n))
            }
            _ => return Err(errno::EINVAL),
        };
        let qpn = ctl.next_qpn;
        let layout = QpLayout {
            qpn,
            dbrec: dbrec.cast(),
            sq: WqLayout {
                buf: sq_buf,
                wqe_cnt: sq_cnt,
                stride: 64,
            },
            rq: WqLayout {
                buf: rq_buf,
                wqe_cnt: rq_cnt,
                stride: 1 << rq_shift,
            },
            // The device takes WQEs from the ring, never from the BlueFlame register (which
            // libmlx5 finds in the UAR pages it mapped); the field is not read.
            bf: BfLayout {
                reg: dbrec,
                size: 0,
            },
        };
        let qp_type = match (ud, dc) {
            (_, Some(kind)) => kind,
            (true, None) => QpType::Ud,
            (false, None) if raw => QpType::RawPacket,
            (false, None) => QpType::Rc,
        };
        // SAFETY: libmlx5 allocated the rings and doorbell record for this QP and frees them
        // only after DESTROY_QP, after which the device forgets them. RNR retries are served
        // for ever (rnr_retry 7, what perftest and most programs ask for).
        unsafe {
            self.dev.create_qp_external_ext(
                &layout,
                send_cq,
                recv_cq,
                RNR_RETRY_INFINITE,
                qp_type,
                srqn,
            )
        }
        .map_err(sim_errno)?;
        self.dev.set_user_index(qpn, uidx).map_err(sim_errno)?;
        // As the kernel configures the QP's responder (`cs_res`): receives scattered into the
        // CQE, 32 or 64 bytes by the receive CQ's CQE size, on connected QPs only. (The
        // requester's `cs_req`, READ and atomic responses in the send CQE, is not modelled.)
        let scatter = flags & m::FLAG_SCATTER_CQE != 0 && !ud && !raw;
        self.dev
            .set_scatter_to_cqe(qpn, scatter)
            .map_err(sim_errno)?;
        ctl.next_qpn += 1;
        let bfreg = match named {
            Some(b) => b,
            None => Bfreg::Static(ctl.uctx.get_mut(&fd).ok_or(errno::EINVAL)?.alloc_bfreg()),
        };
        let h = ctl.handle();
        ctl.qps.insert(
            h,
            Qp {
                qpn,
                ud,
                send_cq,
                recv_cq,
                caps,
                sq_sig_all: get::<1>(i, at(f::SQ_SIG_ALL)) as u8,
                state: qps::RESET,
                fd,
                bfreg: Some(bfreg),
                dc,
                raw: raw.then_some(eth::Raw::Qp),
                ..Qp::default()
            },
        );
        put::<4>(dout, 0, u64::from(Uctx::answer(bfreg)));
        if let Some(u) = ctl.uctx.get(&fd) {
            // The device watches BlueFlame writes (when asked to) knowing which QPs each
            // register serves and where their rings are.
            if let Some((reg, bf_size)) = u.register(bfreg) {
                crate::watch::qp_on_register(qpn, reg, bf_size, sq_buf.as_ptr() as usize, sq_cnt);
            }
            crate::log(format_args!(
                "  QP {qpn:#x}: bfreg {bfreg:?}{} at {:#x?}",
                if u.shared_class(bfreg) {
                    " (shared class: libmlx5 locks it)"
                } else {
                    ""
                },
                u.register(bfreg).map(|r| r.0)
            ));
        }
        put::<4>(o, 0, u64::from(h));
        put::<4>(o, 4, u64::from(qpn));
        for (k, v) in caps.iter().enumerate() {
            put::<4>(o, 8 + 4 * k, u64::from(*v));
        }
        if extended {
            put::<4>(o, f::EX_R_RESPONSE_LENGTH, o.len() as u64);
        }
        crate::log(format_args!(
            "  {qp_type:?} QP {qpn:#x} uidx {uidx}: SQ {sq_cnt}×64 at {sq_buf:p}, {}",
            match srqn {
                Some(n) => format!("SRQ {n:#x}"),
                None => format!("RQ {rq_cnt}×{} at {rq_buf:p}", 1u32 << rq_shift),
            }
        ));
        Ok(())
    }

    fn modify_qp(&self, i: &[u8]) -> Res {
        use abi::modify_qp as f;
        let h = get::<4>(i, f::QP_HANDLE) as u32;
        let m = get::<4>(i, f::ATTR_MASK) as u32;
        let mut ctl = self.ctl();
        let qp = ctl.qps.get_mut(&h).ok_or(errno::EINVAL)?;
        let prev = qp.state;
        let b = |off| get::<1>(i, off) as u8;
        if m & mask::AV != 0 {
            qp.dlid = get::<2>(i, f::DLID) as u16;
        }
        if m & mask::PORT != 0 {
            qp.port = b(f::PORT_NUM);
        } else if m & mask::AV != 0 && qp.port == 0 {
            qp.port = b(f::PORT_NUM_AV);
        }
        if m & mask::DEST_QPN != 0 {
            qp.dest_qpn = get::<4>(i, f::DEST_QP_NUM) as u32;
        }
        let fields: [(u32, &mut u8, usize); 8] = [
            (mask::PATH_MTU, &mut qp.path_mtu, f::PATH_MTU),
            (
                mask::MAX_QP_RD_ATOMIC,
                &mut qp.max_rd_atomic,
                f::MAX_RD_ATOMIC,
            ),
            (
                mask::MAX_DEST_RD_ATOMIC,
                &mut qp.max_dest_rd_atomic,
                f::MAX_DEST_RD_ATOMIC,
            ),
            (mask::MIN_RNR_TIMER, &mut qp.min_rnr_timer, f::MIN_RNR_TIMER),
            (mask::TIMEOUT, &mut qp.timeout, f::TIMEOUT),
            (mask::RETRY_CNT, &mut qp.retry_cnt, f::RETRY_CNT),
            (mask::RNR_RETRY, &mut qp.rnr_retry, f::RNR_RETRY),
            (mask::STATE, &mut qp.state, f::QP_STATE),
        ];
        for (bit, field, off) in fields {
            if m & bit != 0 {
                *field = b(off);
            }
        }
        if m & mask::ACCESS_FLAGS != 0 {
            qp.access = get::<4>(i, f::ACCESS_FLAGS) as u32;
        }
        if m & mask::RQ_PSN != 0 {
            qp.rq_psn = get::<4>(i, f::RQ_PSN) as u32;
        }
        if m & mask::QKEY != 0 {
            qp.qkey = get::<4>(i, f::QKEY) as u32;
        }
        if m & mask::PKEY_INDEX != 0 {
            qp.pkey_index = get::<2>(i, f::PKEY_INDEX) as u16;
        }
        if m & mask::SQ_PSN != 0 {
            qp.sq_psn = get::<4>(i, f::SQ_PSN) as u32;
        }
        if qp.ud {
            return self.modify_ud(qp, m);
        }
        if qp.raw.is_some() {
            return self.modify_raw(qp, m, prev);
        }
        if let Some(kind) = qp.dc {
            return self.modify_dc(qp, m, kind);
        }
        if m & mask::STATE == 0 {
            return Ok(());
        }
        match qp.state {
            qps::RTR | qps::RTS if !qp.connected => {
                let peer = if qp.dlid == self.lid || qp.dlid == 0 {
                    Peer::Local(qp.dest_qpn)
                } else {
                    Peer::Remote {
                        lid: qp.dlid,
                        qpn: qp.dest_qpn,
                    }
                };
                match self.dev.connect_to(qp.qpn, peer) {
                    Ok(()) => qp.connected = true,
                    // A peer QP of this process that does not exist (yet): the kernel would
                    // accept the number; requests to it fail as to an unreachable QP.
                    Err(SimError::NoSuchQp(n)) if n != qp.qpn => {
                        crate::log(format_args!("  QP {:#x}: no local QP {n:#x}", qp.qpn));
                    }
                    Err(e) => return Err(sim_errno(e)),
                }
                crate::log(format_args!("  QP {:#x} -> {peer:?}", qp.qpn));
            }
            qps::ERR => self.dev.set_error(qp.qpn).map_err(sim_errno)?,
            // A ConnectX restarts the QP's counters and forgets its peer; libmlx5 clears the
            // doorbell record and its own indices (and leaves a CQ it handed to a direct user
            // alone). The QP is connected again from RTR on.
            qps::RESET => {
                let dropped = self.dev.reset_qp(qp.qpn).map_err(sim_errno)?;
                qp.connected = false;
                crate::log(format_args!(
                    "  QP {:#x} reset ({dropped} held CQEs dropped)",
                    qp.qpn
                ));
            }
            _ => {}
        }
        // The device checks PSNs as a ConnectX does: the requester's from `sq_psn` (RTS), the
        // responder's expected one from `rq_psn` (RTR); it retries an unanswered request after
        // the transport timer (`timeout`) up to `retry_cnt` times, and a request NAKed for
        // want of a receive after the responder's RNR timer (its `min_rnr_timer`) up to
        // `rnr_retry` times (7: for ever).
        if qp.connected && matches!(qp.state, qps::RTR | qps::RTS) {
            if m & mask::MIN_RNR_TIMER != 0 {
                self.dev
                    .set_min_rnr_timer(qp.qpn, qp.min_rnr_timer & 0x1f)
                    .map_err(sim_errno)?;
            }
            if m & mask::TIMEOUT != 0 {
                self.dev
                    .set_timeout(qp.qpn, qp.timeout & 0x1f)
                    .map_err(sim_errno)?;
            }
            if m & mask::RNR_RETRY != 0 {
                self.dev
                    .set_rnr_retry(qp.qpn, qp.rnr_retry.min(RNR_RETRY_INFINITE))
                    .map_err(sim_errno)?;
            }
            if m & mask::RQ_PSN != 0 {
                self.dev
                    .set_rq_psn(qp.qpn, qp.rq_psn & 0xff_ffff)
                    .map_err(sim_errno)?;
            }
            if m & mask::SQ_PSN != 0 {
                self.dev
                    .set_sq_psn(qp.qpn, qp.sq_psn & 0xff_ffff)
                    .map_err(sim_errno)?;
            }
            if m & mask::RETRY_CNT != 0 {
                self.dev
                    .set_retry_cnt(qp.qpn, qp.retry_cnt.min(7))
                    .map_err(sim_errno)?;
            }
        }
        Ok(())
    }

    /// A UD QP's transitions, after `modify_qp` recorded the attributes: INIT gives the
    /// device the Q_Key and P_Key index, RTR lets it receive and send (the device has no
    /// state between: a UD QP at RTR that is sent nothing behaves as at RTS), RTS changes
    /// nothing more (a UD QP has no peer, and its PSN is not checked).
    fn modify_ud(&self, qp: &mut Qp, m: u32) -> Res {
        if m & mask::QKEY != 0 && !(m & mask::STATE != 0 && qp.state == qps::INIT) {
            // A Q_Key changed after INIT: the device takes it only at INIT.
            return Err(errno::EOPNOTSUPP);
        }
        if m & mask::STATE == 0 {
            return Ok(());
        }
        match qp.state {
            qps::INIT => self
                .dev
                .init_ud(qp.qpn, qp.qkey, qp.pkey_index)
                .map_err(sim_errno),
            qps::RTR => self.dev.ready_ud(qp.qpn).map_err(sim_errno),
            qps::RTS => Ok(()),
            qps::ERR => self.dev.set_error(qp.qpn).map_err(sim_errno),
            qps::RESET => self.dev.reset_qp(qp.qpn).map(drop).map_err(sim_errno),
            _ => Err(errno::EOPNOTSUPP),
        }
    }

    fn query_qp(&self, i: &[u8], o: &mut [u8]) -> Res {
        let h = get::<4>(i, 8) as u32;
        let ctl = self.ctl();
        let qp = ctl.qps.get(&h).ok_or(errno::EINVAL)?;
        let state = match self.dev.qp_status(qp.qpn) {
            Ok(zverbs_sim::QpStatus::Error) => qps::ERR,
            _ => qp.state,
        };
        put::<2>(o, 20, u64::from(qp.dlid));
        put::<1>(o, 31, u64::from(qp.port));
        for (k, v) in qp.caps.iter().enumerate() {
            put::<4>(o, 64 + 4 * k, u64::from(*v));
        }
        put::<4>(o, 84, u64::from(qp.qkey));
        put::<4>(o, 88, u64::from(qp.rq_psn));
        put::<4>(o, 92, u64::from(qp.sq_psn));
        put::<4>(o, 96, u64::from(qp.dest_qpn));
        put::<4>(o, 100, u64::from(qp.access));
        put::<2>(o, 104, u64::from(qp.pkey_index));
        put::<1>(o, 108, u64::from(state));
        put::<1>(o, 109, u64::from(state));
        put::<1>(o, 110, u64::from(qp.path_mtu));
        put::<1>(o, 113, u64::from(qp.max_rd_atomic));
        put::<1>(o, 114, u64::from(qp.max_dest_rd_atomic));
        put::<1>(o, 115, u64::from(qp.min_rnr_timer));
        put::<1>(o, 116, u64::from(qp.port));
        put::<1>(o, 117, u64::from(qp.timeout));
        put::<1>(o, 118, u64::from(qp.retry_cnt));
        put::<1>(o, 119, u64::from(qp.rnr_retry));
        put::<1>(o, 122, u64::from(qp.sq_sig_all));
        Ok(())
    }

    fn destroy_qp(&self, i: &[u8]) -> Res {
        let h = get::<4>(i, 8) as u32;
        let raw = self.ctl().qps.get(&h).copied().filter(|q| q.raw.is_some());
        if let Some(qp) = raw {
            self.destroy_raw(h, qp)?;
            let mut ctl = self.ctl();
            if let (Some(Bfreg::Static(n)), Some(u)) = (qp.bfreg, ctl.uctx.get_mut(&qp.fd)) {
                u.free_bfreg(n);
            }
            crate::watch::qp_gone(qp.qpn);
            return Ok(());
        }
        let mut ctl = self.ctl();
        let qp = ctl.qps.remove(&h).ok_or(errno::EINVAL)?;
        let _ = (qp.send_cq, qp.recv_cq);
        if let (Some(Bfreg::Static(n)), Some(u)) = (qp.bfreg, ctl.uctx.get_mut(&qp.fd)) {
            u.free_bfreg(n);
        }
        crate::watch::qp_gone(qp.qpn);
        let r = self.dev.destroy_qp(qp.qpn).map_err(sim_errno);
        // A DC target's stand-in rings, once the device has forgotten them.
        ctl.dct_mem.remove(&qp.qpn);
        r
    }

    fn create_srq(&self, i: &[u8], d: &[u8], o: &mut [u8], dout: &mut [u8]) -> Res {
        use abi::create_srq as f;
        // libmlx5 sizes the ring (WQE count `max_wr + 1`, both powers of two, and a stride of
        // the next segment and `max_sge` data segments) and links its free list; the kernel
        // derives the same two numbers from the command, as here.
        let max_wr = get::<4>(i, f::MAX_WR) as u32;
        let max_sge = get::<4>(i, f::MAX_SGE) as u32;
        let limit = get::<4>(i, f::SRQ_LIMIT) as u32;
        if max_wr == 0 || max_wr >= 1 << 15 || max_sge > 63 {
            return Err(errno::EINVAL);
        }
        let cnt = (max_wr + 1).next_power_of_two();
        let stride = (16 + 16 * max_sge).max(32).next_power_of_two();
        let (Some(buf), Some(dbrec)) =
            (ptr(get::<8>(d, f::BUF_ADDR)), ptr(get::<8>(d, f::DB_ADDR)))
        else {
            return Err(errno::EINVAL);
        };
        let flags = get::<4>(d, f::FLAGS) as u32;
        if flags & !f::FLAG_SIGNATURE != 0 {
            return Err(errno::EINVAL);
        }
        // SAFETY: libmlx5 allocated the ring (`cnt` WQEs of `stride` bytes, linked) and the
        // doorbell record for this SRQ and frees them only after DESTROY_SRQ, after which the
        // device forgets them.
        let srqn = unsafe { self.dev.create_srq_external(buf, dbrec.cast(), cnt, stride) }
            .map_err(sim_errno)?;
        if limit != 0
            && let Err(e) = self.dev.arm_srq(srqn, limit)
        {
            let _ = self.dev.destroy_srq(srqn);
            return Err(sim_errno(e));
        }
        let mut ctl = self.ctl();
        let h = ctl.handle();
        ctl.srqs.insert(h, srqn);
        put::<4>(o, f::R_HANDLE, u64::from(h));
        put::<4>(o, f::R_MAX_WR, u64::from(cnt - 1));
        put::<4>(o, f::R_MAX_SGE, u64::from((stride - 16) / 16));
        put::<4>(o, f::R_SRQN, u64::from(srqn));
        put::<4>(dout, f::D_SRQN, u64::from(srqn));
        crate::log(format_args!(
            "  SRQ {srqn:#x}: {cnt}×{stride} at {buf:p}, doorbell at {dbrec:p}"
        ));
        Ok(())
    }

    fn srqn(&self, h: u32) -> Result<u32, i32> {
        self.ctl().srqs.get(&h).copied().ok_or(errno::EINVAL)
    }

    fn modify_srq(&self, i: &[u8]) -> Res {
        use abi::modify_srq as f;
        let srqn = self.srqn(get::<4>(i, f::HANDLE) as u32)?;
        let m = get::<4>(i, f::ATTR_MASK) as u32;
        if m & f::MASK_MAX_WR != 0 {
            // mlx5 does not resize an SRQ.
            return Err(errno::EINVAL);
        }
        if m & f::MASK_LIMIT != 0 {
            let limit = get::<4>(i, f::SRQ_LIMIT) as u32;
            self.dev.arm_srq(srqn, limit).map_err(sim_errno)?;
        }
        Ok(())
    }

    fn destroy_srq(&self, i: &[u8]) -> Res {
        let h = get::<4>(i, 8) as u32;
        let srqn = self.srqn(h)?;
        self.dev.destroy_srq(srqn).map_err(|e| match e {
            SimError::InvalidConfig(_) => errno::EBUSY,
            e => sim_errno(e),
        })?;
        self.ctl().srqs.remove(&h);
        Ok(())
    }

    fn mcast(&self, i: &[u8], attach: bool) -> Res {
        use abi::mcast as f;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(i.get(f::GID..f::GID + 16).ok_or(errno::EINVAL)?);
        let h = get::<4>(i, f::QP_HANDLE) as u32;
        let mlid = get::<2>(i, f::MLID) as u16;
        let qpn = self.ctl().qps.get(&h).ok_or(errno::EINVAL)?.qpn;
        let r = if attach {
            self.dev.attach_mcast(qpn, gid, mlid)
        } else {
            self.dev.detach_mcast(qpn, gid, mlid)
        };
        r.map_err(sim_errno)?;
        crate::log(format_args!(
            "  QP {qpn:#x} {} group {:x?} LID {mlid:#x}",
            if attach { "joins" } else { "leaves" },
            gid
        ));
        Ok(())
    }
}

/// Runs `f` with the calling thread in `SCHED_FIFO` at the lowest priority when
/// `ZVERBS_EMU_RT=1` (and the process may), so that the threads `f` starts (the device's
/// progress thread, the channel's threads, and the threads those start) inherit it; then
/// restores the calling thread's policy. Device threads that preempt the program's busy-polling
/// threads at once, as a NIC needs no CPU time slice, make latency figures mean something on a
/// small machine; they are still bounded by the kernel's real-time throttling, and the device
/// threads sleep when idle.
pub(crate) fn with_realtime<R>(f: impl FnOnce() -> R) -> R {
    let wanted = std::env::var_os("ZVERBS_EMU_RT").is_some_and(|v| v == "1");
    if !wanted {
        return f();
    }
    // SAFETY: reading and setting the calling thread's own scheduling parameters.
    unsafe {
        let me = libc::pthread_self();
        let mut policy = 0;
        let mut old = core::mem::zeroed::<libc::sched_param>();
        let saved = libc::pthread_getschedparam(me, &mut policy, &mut old) == 0;
        let rt = libc::sched_param { sched_priority: 1 };
        let set = libc::pthread_setschedparam(me, libc::SCHED_FIFO, &rt) == 0;
        if !set {
            crate::log(format_args!(
                "ZVERBS_EMU_RT=1: SCHED_FIFO refused; normal scheduling"
            ));
        }
        let r = f();
        if set && saved {
            libc::pthread_setschedparam(me, policy, &old);
        }
        r
    }
}

/// The listener bound in [`Emu::create`], served once the instance is `'static`.
static LISTENER: Mutex<Option<Listener>> = Mutex::new(None);

type Res = Result<(), i32>;

fn ptr(addr: u64) -> Option<NonNull<u8>> {
    NonNull::new(addr as usize as *mut u8)
}

fn sim_errno(e: SimError) -> i32 {
    crate::log(format_args!("  device: {e}"));
    match e {
        SimError::TooMany | SimError::OutOfMemory => errno::ENOMEM,
        _ => errno::EINVAL,
    }
}

/// Dynamic bfregs a context gets: `ZVERBS_EMU_DYN_BFREGS`, or the kernel's 1024
/// (`MLX5_MAX_DYN_BFREGS`); 0 leaves no register for thread domains.
fn dyn_bfregs() -> u32 {
    std::env::var("ZVERBS_EMU_DYN_BFREGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024)
}

/// Whether `ZVERBS_EMU_ATOMICS=be` asks for big-endian atomics.
fn atomics_big_endian() -> bool {
    std::env::var_os("ZVERBS_EMU_ATOMICS").is_some_and(|v| v == "be")
}

/// `struct ib_uverbs_query_device_resp` of a ConnectX-6.
fn query_device(o: &mut [u8]) {
    put::<8>(o, 0, FW_VER);
    put::<8>(o, 8, NODE_GUID.swap_bytes()); // node_guid, big-endian
    put::<8>(o, 16, NODE_GUID.swap_bytes()); // sys_image_guid
    put::<8>(o, 24, u64::MAX); // max_mr_size
    put::<8>(o, 32, 0xffff_ffff_ffff_f000); // page_size_cap
    let words: [(usize, u32); 27] = [
        (40, VENDOR_ID),
        (44, VENDOR_PART_ID),
        (52, 1 << 18),                                   // max_qp
        (56, 1 << 15),                                   // max_qp_wr
        (60, 0x2536_1c36),                               // device_cap_flags
        (64, 30),                                        // max_sge
        (68, 30),                                        // max_sge_rd
        (72, 1 << 24),                                   // max_cq
        (76, (1 << 22) - 1),                             // max_cqe
        (80, 1 << 24),                                   // max_mr
        (84, 1 << 24),                                   // max_pd
        (88, 16),                                        // max_qp_rd_atom
        (96, 16 << 18),                                  // max_res_rd_atom
        (100, 16),                                       // max_qp_init_rd_atom
        (108, if atomics_big_endian() { 0 } else { 1 }), // atomic_cap: NONE or HCA
        (120, 1 << 24),                                  // max_mw
        (132, 1 << 21),                                  // max_mcast_grp
        (136, 240),                                      // max_mcast_qp_attach
        (140, 240 << 21),                                // max_total_mcast_qp_attach
        (144, 0x7fff_ffff),                              // max_ah
        (156, 1 << 23),                                  // max_srq
        (160, (1 << 15) - 1),                            // max_srq_wr
        (164, 31),                                       // max_srq_sge
        (48, 0),                                         // hw_ver
        (92, 0),                                         // max_ee_rd_atom
        (104, 0),                                        // max_ee_init_rd_atom
        (112, 0),                                        // max_ee
    ];
    for (at, v) in words {
        put::<4>(o, at, u64::from(v));
    }
    put::<2>(o, 168, 128); // max_pkeys
    put::<1>(o, 170, 16); // local_ca_ack_delay
    put::<1>(o, 171, 1); // phys_port_cnt
}

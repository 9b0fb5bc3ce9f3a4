//! A small client of libibverbs and libmlx5 for the emulator's own checks: the differential
//! test (libmlx5's WQEs and CQE decoding against the direct path's). It opens the device,
//! creates RC and UD QPs, address handles and SRQs through libmlx5, connects or readies the
//! QPs, reveals their memory with `mlx5dv_init_obj`, and posts and polls with `ibv_post_send`,
//! `ibv_post_recv`, `ibv_post_srq_recv` and `ibv_poll_cq`.
//!
//! Everything goes through zverbs' one rdma-core binding, [`zverbs_ffi`]: its libraries,
//! loaded at run time, its structs (checked against rdma-core's headers by `zverbs-abi`), and
//! its copies of `verbs.h`'s inline calls, which reach the provider through `ctx->ops`. The
//! out-structs of `mlx5dv_init_obj` are the direct path's own (`zverbs_mlx5dv::prm::dv`), turned
//! into layouts as the `zverbs` control path turns them.

use core::ffi::c_int;
use core::ptr::{NonNull, null_mut};
use std::ffi::CStr;

use zverbs_ffi::load::{self, Mlx5, Verbs};
use zverbs_ffi::types::{
    IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_ATOMIC, IBV_ACCESS_REMOTE_READ,
    IBV_ACCESS_REMOTE_WRITE, IBV_MTU_4096, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS, IBV_QPT_RC,
    IBV_QPT_UD, MLX5DV_OBJ_AH, MLX5DV_OBJ_CQ, MLX5DV_OBJ_QP, MLX5DV_OBJ_SRQ, ibv_ah, ibv_ah_attr,
    ibv_context, ibv_cq, ibv_pd, ibv_port_attr, ibv_qp, ibv_qp_attr, ibv_qp_cap, ibv_qp_init_attr,
    ibv_recv_wr, ibv_send_wr, ibv_srq, ibv_srq_attr, ibv_srq_init_attr, ibv_wc, mlx5dv_obj,
    qp_attr_mask as m,
};
use zverbs_mlx5dv::prm::dv::{MLX5DV_SRQ_MASK_SRQN, mlx5dv_ah, mlx5dv_cq, mlx5dv_qp, mlx5dv_srq};
use zverbs_mlx5dv::{CqLayout, QpLayout, SrqLayout};

mod dc;
pub use dc::DciWr;

/// Every right: local write, remote write, remote read and remote atomic.
pub const ACCESS_ALL: c_int = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC;

/// An opened device with one protection domain.
#[derive(Debug)]
pub struct Context {
    verbs: &'static Verbs,
    mlx5: &'static Mlx5,
    ctx: NonNull<ibv_context>,
    pd: NonNull<ibv_pd>,
    /// The port's LID.
    pub lid: u16,
}

// SAFETY: libibverbs objects may be used from any thread; the checks use them from one.
unsafe impl Send for Context {}

/// A registered region.
#[derive(Clone, Copy, Debug)]
pub struct Mr {
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// A CQ created through libmlx5.
#[derive(Clone, Copy, Debug)]
pub struct Cq {
    /// `struct ibv_cq *`.
    pub raw: NonNull<ibv_cq>,
}

/// An address handle created through libmlx5, with the address vector libmlx5 built for it.
#[derive(Clone, Copy, Debug)]
pub struct Ah {
    /// `struct ibv_ah *`.
    pub raw: NonNull<ibv_ah>,
    /// The 48-byte `struct mlx5_wqe_av` (`mlx5dv_ah.av`), copied.
    pub av: [u8; 48],
}

/// An SRQ created through libmlx5.
#[derive(Clone, Copy, Debug)]
pub struct Srq {
    /// `struct ibv_srq *`.
    pub raw: NonNull<ibv_srq>,
    /// The attributes libmlx5 granted.
    pub attr: ibv_srq_attr,
}

/// A QP (RC or UD) created through libmlx5.
#[derive(Clone, Copy, Debug)]
pub struct Qp {
    /// `struct ibv_qp *`.
    pub raw: NonNull<ibv_qp>,
    /// Its number.
    pub qpn: u32,
    /// The capabilities libmlx5 granted.
    pub cap: ibv_qp_cap,
}

impl Qp {
    /// The QP `raw` that a create call returned (null: it failed), with the capabilities it
    /// granted.
    ///
    /// # Safety
    ///
    /// `raw` is null or a live `struct ibv_qp`.
    unsafe fn created(raw: *mut ibv_qp, cap: ibv_qp_cap) -> Option<Self> {
        let raw = NonNull::new(raw)?;
        // SAFETY: (caller) a live `struct ibv_qp`.
        let qpn = unsafe { (*raw.as_ptr()).qp_num };
        Some(Self { raw, qpn, cap })
    }
}

impl Context {
    /// Opens the first device (the emulated `mlx5_0`), allocates a PD and reads the LID.
    ///
    /// # Errors
    ///
    /// When rdma-core is missing or a verb fails.
    pub fn open() -> Result<Self, String> {
        let verbs = load::verbs().map_err(|e| e.to_string())?;
        let mlx5 = load::mlx5().map_err(|e| e.to_string())?;
        let mut n = 0;
        // SAFETY: `n` receives the count.
        let list = unsafe { (verbs.ibv_get_device_list)(&mut n) };
        if list.is_null() || n < 1 {
            return Err("no RDMA device (is the emulator preloaded?)".into());
        }
        // SAFETY: the list holds `n >= 1` devices.
        let dev = unsafe { *list };
        // SAFETY: a listed device; its name is a NUL-terminated string.
        let name = unsafe { CStr::from_ptr((verbs.ibv_get_device_name)(dev)) };
        // SAFETY: a listed device.
        let ctx = NonNull::new(unsafe { (verbs.ibv_open_device)(dev) })
            .ok_or_else(|| format!("ibv_open_device({name:?}) failed"));
        // SAFETY: the list from `ibv_get_device_list`, freed once; an opened context outlives
        // it.
        unsafe { (verbs.ibv_free_device_list)(list) };
        let ctx = ctx?;
        // SAFETY: an open context.
        let pd = NonNull::new(unsafe { (verbs.ibv_alloc_pd)(ctx.as_ptr()) })
            .ok_or("ibv_alloc_pd failed")?;
        let mut port = ibv_port_attr::default();
        // SAFETY: an open context and a writable `struct ibv_port_attr`.
        if unsafe { (verbs.ibv_query_port)(ctx.as_ptr(), 1, &mut port) } != 0 {
            return Err("ibv_query_port failed".into());
        }
        Ok(Self {
            verbs,
            mlx5,
            ctx,
            pd,
            lid: port.lid,
        })
    }

    /// Registers `len` bytes at `addr` with every right.
    ///
    /// # Safety
    ///
    /// The memory stays valid while the device may use it (the process's life here).
    ///
    /// # Errors
    ///
    /// When `ibv_reg_mr` fails.
    pub unsafe fn reg_mr(&self, addr: *mut u8, len: usize) -> Result<Mr, String> {
        // SAFETY: (caller) the memory is valid; the PD is live.
        let mr = unsafe { (self.verbs.ibv_reg_mr)(self.pd.as_ptr(), addr.cast(), len, ACCESS_ALL) };
        if mr.is_null() {
            return Err("ibv_reg_mr failed".into());
        }
        // SAFETY: a live `struct ibv_mr`.
        let (lkey, rkey) = unsafe { ((*mr).lkey, (*mr).rkey) };
        Ok(Mr { lkey, rkey })
    }

    /// Creates a CQ of at least `cqe` entries.
    ///
    /// # Errors
    ///
    /// When `ibv_create_cq` fails.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq, String> {
        // SAFETY: a live context; no channel.
        let cq = unsafe {
            (self.verbs.ibv_create_cq)(self.ctx.as_ptr(), cqe as c_int, null_mut(), null_mut(), 0)
        };
        NonNull::new(cq)
            .map(|raw| Cq { raw })
            .ok_or_else(|| "ibv_create_cq failed".into())
    }

    /// Creates an RC QP on `cq` (send and receive) asking for `caps`.
    ///
    /// # Errors
    ///
    /// When `ibv_create_qp` fails.
    pub fn create_qp(&self, cq: Cq, caps: ibv_qp_cap) -> Result<Qp, String> {
        self.create_qp_of(cq, caps, IBV_QPT_RC, None)
    }

    /// Creates a UD QP on `cq` asking for `caps`, its receives from `srq` if given.
    ///
    /// # Errors
    ///
    /// When `ibv_create_qp` fails.
    pub fn create_ud_qp(&self, cq: Cq, caps: ibv_qp_cap, srq: Option<Srq>) -> Result<Qp, String> {
        self.create_qp_of(cq, caps, IBV_QPT_UD, srq)
    }

    fn create_qp_of(
        &self,
        cq: Cq,
        caps: ibv_qp_cap,
        qp_type: u32,
        srq: Option<Srq>,
    ) -> Result<Qp, String> {
        let mut attr = ibv_qp_init_attr {
            qp_context: null_mut(),
            send_cq: cq.raw.as_ptr(),
            recv_cq: cq.raw.as_ptr(),
            srq: srq.map_or(null_mut(), |s| s.raw.as_ptr().cast()),
            cap: caps,
            qp_type,
            sq_sig_all: 0,
        };
        // SAFETY: a live PD and an initialised attribute struct.
        let qp = unsafe { (self.verbs.ibv_create_qp)(self.pd.as_ptr(), &mut attr) };
        // SAFETY: what `ibv_create_qp` returned, with the capabilities it granted.
        unsafe { Qp::created(qp, attr.cap) }.ok_or_else(|| "ibv_create_qp failed".into())
    }

    /// `ibv_modify_qp` of `qp` to the state `what` names.
    fn modify(&self, qp: Qp, mut a: ibv_qp_attr, mask: c_int, what: &str) -> Result<(), String> {
        // SAFETY: a live QP and an initialised attribute struct.
        let r = unsafe { (self.verbs.ibv_modify_qp)(qp.raw.as_ptr(), &mut a, mask) };
        if r == 0 {
            Ok(())
        } else {
            Err(format!("ibv_modify_qp to {what} failed: {r}"))
        }
    }

    /// RTR → RTS for a QP that sends with the reliable transport (RC, a DC initiator): PSN 0,
    /// 16 reads in flight, transport timeout 14 (4.096 µs · 2^14, about 67 ms) and seven retries
    /// of each kind.
    fn to_rts(&self, qp: Qp) -> Result<(), String> {
        let rts = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            sq_psn: 0,
            max_rd_atomic: 16,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            ..ibv_qp_attr::default()
        };
        self.modify(
            qp,
            rts,
            m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC,
            "RTS",
        )
    }

    /// Moves `qp` through INIT, RTR and RTS towards `dest_qpn` at `dlid`.
    ///
    /// # Errors
    ///
    /// When a transition fails.
    pub fn connect(&self, qp: Qp, dlid: u16, dest_qpn: u32) -> Result<(), String> {
        let step = |a, mask, what| self.modify(qp, a, mask, what);
        let init = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            qp_access_flags: ACCESS_ALL as u32,
            pkey_index: 0,
            port_num: 1,
            ..ibv_qp_attr::default()
        };
        step(
            init,
            m::IBV_QP_STATE | m::IBV_QP_ACCESS_FLAGS | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT,
            "INIT",
        )?;
        let mut rtr = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            path_mtu: IBV_MTU_4096,
            dest_qp_num: dest_qpn,
            rq_psn: 0,
            max_dest_rd_atomic: 16,
            min_rnr_timer: 12,
            ..ibv_qp_attr::default()
        };
        rtr.ah_attr.dlid = dlid;
        rtr.ah_attr.port_num = 1;
        step(
            rtr,
            m::IBV_QP_STATE
                | m::IBV_QP_AV
                | m::IBV_QP_PATH_MTU
                | m::IBV_QP_DEST_QPN
                | m::IBV_QP_RQ_PSN
                | m::IBV_QP_MAX_DEST_RD_ATOMIC
                | m::IBV_QP_MIN_RNR_TIMER,
            "RTR",
        )?;
        self.to_rts(qp)
    }

    /// Moves the UD QP `qp` through INIT (P_Key index 0, port 1, `qkey`), RTR and RTS.
    ///
    /// # Errors
    ///
    /// When a transition fails.
    pub fn ready_ud(&self, qp: Qp, qkey: u32) -> Result<(), String> {
        let step = |a, mask, what| self.modify(qp, a, mask, what);
        let init = ibv_qp_attr {
            qp_state: IBV_QPS_INIT,
            pkey_index: 0,
            port_num: 1,
            qkey,
            ..ibv_qp_attr::default()
        };
        step(
            init,
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_QKEY,
            "INIT",
        )?;
        let rtr = ibv_qp_attr {
            qp_state: IBV_QPS_RTR,
            ..ibv_qp_attr::default()
        };
        step(rtr, m::IBV_QP_STATE, "RTR")?;
        let rts = ibv_qp_attr {
            qp_state: IBV_QPS_RTS,
            sq_psn: 0,
            ..ibv_qp_attr::default()
        };
        step(rts, m::IBV_QP_STATE | m::IBV_QP_SQ_PSN, "RTS")
    }

    /// Creates an address handle for `attr` and reads the address vector libmlx5 built for it
    /// (`mlx5dv_init_obj(MLX5DV_OBJ_AH)`).
    ///
    /// # Errors
    ///
    /// When `ibv_create_ah` or `mlx5dv_init_obj` fails.
    pub fn create_ah(&self, mut attr: ibv_ah_attr) -> Result<Ah, String> {
        // SAFETY: a live PD and an initialised attribute struct.
        let ah = unsafe { (self.verbs.ibv_create_ah)(self.pd.as_ptr(), &mut attr) };
        let raw = NonNull::new(ah).ok_or("ibv_create_ah failed")?;
        let mut da = mlx5dv_ah::default();
        let mut obj = mlx5dv_obj::<mlx5dv_qp, mlx5dv_cq>::EMPTY;
        obj.ah.r#in = raw.as_ptr().cast();
        obj.ah.out = (&raw mut da).cast();
        // SAFETY: a live AH of this mlx5 context and a valid out-struct.
        let r = unsafe { (self.mlx5.mlx5dv_init_obj)((&raw mut obj).cast(), MLX5DV_OBJ_AH) };
        if r != 0 {
            return Err(format!("mlx5dv_init_obj(AH) failed: {r}"));
        }
        let av = da.av().ok_or("null address vector from mlx5dv_init_obj")?;
        // SAFETY: libmlx5's AV, 48 bytes inside the live AH.
        let av = unsafe { av.as_ptr().read() };
        Ok(Ah { raw, av })
    }

    /// Creates an SRQ of at least `max_wr` receives of `max_sge` entries.
    ///
    /// # Errors
    ///
    /// When `ibv_create_srq` fails.
    pub fn create_srq(&self, max_wr: u32, max_sge: u32) -> Result<Srq, String> {
        let mut init = ibv_srq_init_attr {
            srq_context: null_mut(),
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: a live PD and an initialised attribute struct.
        let srq = unsafe { (self.verbs.ibv_create_srq)(self.pd.as_ptr(), &mut init) };
        let raw = NonNull::new(srq).ok_or("ibv_create_srq failed")?;
        Ok(Srq {
            raw,
            attr: init.attr,
        })
    }

    /// The layout `mlx5dv_init_obj(MLX5DV_OBJ_SRQ)` reports for `srq` (its WQE count
    /// `tail + 1`: libmlx5's free list runs from WQE 0 to the last).
    ///
    /// # Errors
    ///
    /// When `mlx5dv_init_obj` fails or reports null pointers or no SRQ number.
    pub fn srq_layout(&self, srq: Srq) -> Result<SrqLayout, String> {
        let mut ds = mlx5dv_srq {
            comp_mask: MLX5DV_SRQ_MASK_SRQN,
            ..mlx5dv_srq::default()
        };
        let mut obj = mlx5dv_obj::<mlx5dv_qp, mlx5dv_cq>::EMPTY;
        obj.srq.r#in = srq.raw.as_ptr().cast();
        obj.srq.out = (&raw mut ds).cast();
        // SAFETY: a live SRQ of this mlx5 context and a valid out-struct.
        let r = unsafe { (self.mlx5.mlx5dv_init_obj)((&raw mut obj).cast(), MLX5DV_OBJ_SRQ) };
        if r != 0 {
            return Err(format!("mlx5dv_init_obj(SRQ) failed: {r}"));
        }
        if ds.comp_mask & MLX5DV_SRQ_MASK_SRQN == 0 {
            return Err("mlx5dv_init_obj(SRQ) gave no SRQ number".into());
        }
        let null = "null pointer from mlx5dv_init_obj(SRQ)";
        Ok(SrqLayout {
            srqn: ds.srqn,
            buf: NonNull::new(ds.buf.cast()).ok_or(null)?,
            dbrec: NonNull::new(ds.dbrec).ok_or(null)?,
            stride: ds.stride,
            wqe_cnt: ds.tail.wrapping_add(1),
            head: ds.head,
            tail: ds.tail,
        })
    }

    /// The layouts `mlx5dv_init_obj` reports for `qp` and `cq`.
    ///
    /// # Errors
    ///
    /// When `mlx5dv_init_obj` fails or reports null pointers.
    pub fn dv(&self, qp: Qp, cq: Cq) -> Result<(QpLayout, CqLayout), String> {
        let mut dq = mlx5dv_qp::default();
        let mut dc = mlx5dv_cq::default();
        let mut obj = mlx5dv_obj::<mlx5dv_qp, mlx5dv_cq>::EMPTY;
        obj.qp.r#in = qp.raw.as_ptr();
        obj.qp.out = &mut dq;
        obj.cq.r#in = cq.raw.as_ptr();
        obj.cq.out = &mut dc;
        // SAFETY: a live QP and CQ of this mlx5 context and valid out-structs (the opaque form
        // of `obj` has the same layout: its out-structs are behind pointers).
        let r = unsafe {
            (self.mlx5.mlx5dv_init_obj)((&raw mut obj).cast(), MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ)
        };
        if r != 0 {
            return Err(format!("mlx5dv_init_obj failed: {r}"));
        }
        let null = "null pointer from mlx5dv_init_obj";
        Ok((dq.layout(qp.qpn).ok_or(null)?, dc.layout().ok_or(null)?))
    }

    /// `ibv_post_send(qp, wr, &bad)`; 0 or the error.
    ///
    /// # Safety
    ///
    /// `wr` (and its chain and gather lists) is valid; the memory it names is registered.
    pub unsafe fn post_send(&self, qp: Qp, wr: &mut ibv_send_wr) -> c_int {
        let mut bad = null_mut();
        // SAFETY: (caller) a valid request on a live QP of this context.
        unsafe { zverbs_ffi::ibv_post_send(qp.raw.as_ptr(), wr, &mut bad) }
    }

    /// `ibv_post_recv(qp, wr, &bad)`; 0 or the error.
    ///
    /// # Safety
    ///
    /// As [`Context::post_send`].
    pub unsafe fn post_recv(&self, qp: Qp, wr: &mut ibv_recv_wr) -> c_int {
        let mut bad = null_mut();
        // SAFETY: (caller) a valid request on a live QP of this context.
        unsafe { zverbs_ffi::ibv_post_recv(qp.raw.as_ptr(), wr, &mut bad) }
    }

    /// `ibv_post_srq_recv(srq, wr, &bad)`; 0 or the error.
    ///
    /// # Safety
    ///
    /// As [`Context::post_send`].
    pub unsafe fn post_srq_recv(&self, srq: Srq, wr: &mut ibv_recv_wr) -> c_int {
        let mut bad = null_mut();
        // SAFETY: (caller) a valid request on a live SRQ of this context.
        unsafe { zverbs_ffi::ibv_post_srq_recv(srq.raw.as_ptr(), wr, &mut bad) }
    }

    /// `ibv_poll_cq(cq, out.len(), out)`: completions written, or a negative error.
    pub fn poll_cq(&self, cq: Cq, out: &mut [ibv_wc]) -> c_int {
        let n = c_int::try_from(out.len()).unwrap_or(c_int::MAX);
        // SAFETY: a live CQ of this context and room for `n` completions.
        unsafe { zverbs_ffi::ibv_poll_cq(cq.raw.as_ptr(), n, out.as_mut_ptr()) }
    }
}

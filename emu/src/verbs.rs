//! A minimal binding of libibverbs and libmlx5, loaded at run time, for the emulator's own
//! checks: the differential test (libmlx5's WQEs and CQE decoding against the direct path's)
//! and the direct-path latency tool. It opens the device, creates RC QPs through libmlx5,
//! connects them, reveals their memory with `mlx5dv_init_obj`, and reaches `ibv_post_send`,
//! `ibv_post_recv` and `ibv_poll_cq` through `ctx->ops`, as libibverbs' inline functions do.
//!
//! Structures are handled as byte arrays at the offsets of rdma-core 44's `<infiniband/verbs.h>`
//! and `<infiniband/mlx5dv.h>` on LP64 Linux (each offset named below).

use core::ffi::{c_char, c_int, c_void};
use core::ptr::{NonNull, null_mut};
use std::ffi::CStr;

use zverbs_mlx5dv::{BfLayout, CqLayout, QpLayout, WqLayout};

/// `struct ibv_context`: `ops` at 8; in `struct ibv_context_ops`: `poll_cq` at 88,
/// `post_send` at 200, `post_recv` at 208.
const OPS_POLL_CQ: usize = 8 + 88;
const OPS_POST_SEND: usize = 8 + 200;
const OPS_POST_RECV: usize = 8 + 208;
/// `struct ibv_qp`: `qp_num` at 52. `struct ibv_mr`: `lkey` at 36, `rkey` at 40.
const QP_NUM: usize = 52;
const MR_LKEY: usize = 36;
const MR_RKEY: usize = 40;

/// `IBV_ACCESS_LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC`.
pub const ACCESS_ALL: c_int = 0xf;

/// `struct ibv_sge`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct IbvSge {
    /// Address.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// `struct ibv_send_wr` (128 bytes): the fields up to `imm_data`, then the `wr` union (and
/// what follows it) as words: `rdma` = {remote_addr @40, rkey @48}, `atomic` = {remote_addr
/// @40, compare_add @48, swap @56, rkey @64}.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct IbvSendWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// `next`.
    pub next: *mut IbvSendWr,
    /// `sg_list`.
    pub sg_list: *mut IbvSge,
    /// `num_sge`.
    pub num_sge: c_int,
    /// `opcode` (`enum ibv_wr_opcode`).
    pub opcode: u32,
    /// `send_flags`.
    pub send_flags: u32,
    /// `imm_data`, big-endian.
    pub imm_data: u32,
    /// The `wr` union and the rest, as 8-byte words from offset 40.
    pub wr: [u64; 11],
}

impl Default for IbvSendWr {
    fn default() -> Self {
        Self {
            wr_id: 0,
            next: null_mut(),
            sg_list: null_mut(),
            num_sge: 0,
            opcode: 0,
            send_flags: 0,
            imm_data: 0,
            wr: [0; 11],
        }
    }
}

/// `enum ibv_wr_opcode` and `enum ibv_send_flags`.
pub mod wr {
    /// `IBV_WR_RDMA_WRITE`.
    pub const RDMA_WRITE: u32 = 0;
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`.
    pub const RDMA_WRITE_WITH_IMM: u32 = 1;
    /// `IBV_WR_SEND`.
    pub const SEND: u32 = 2;
    /// `IBV_WR_SEND_WITH_IMM`.
    pub const SEND_WITH_IMM: u32 = 3;
    /// `IBV_WR_RDMA_READ`.
    pub const RDMA_READ: u32 = 4;
    /// `IBV_WR_ATOMIC_CMP_AND_SWP`.
    pub const ATOMIC_CMP_AND_SWP: u32 = 5;
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
    pub const ATOMIC_FETCH_AND_ADD: u32 = 6;
    /// `IBV_SEND_FENCE`.
    pub const FENCE: u32 = 1;
    /// `IBV_SEND_SIGNALED`.
    pub const SIGNALED: u32 = 2;
    /// `IBV_SEND_SOLICITED`.
    pub const SOLICITED: u32 = 4;
    /// `IBV_SEND_INLINE`.
    pub const INLINE: u32 = 8;
}

/// `struct ibv_recv_wr`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct IbvRecvWr {
    /// `wr_id`.
    pub wr_id: u64,
    /// `next`.
    pub next: *mut IbvRecvWr,
    /// `sg_list`.
    pub sg_list: *mut IbvSge,
    /// `num_sge`.
    pub num_sge: c_int,
}

/// `struct ibv_wc` (48 bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct IbvWc {
    /// `wr_id`.
    pub wr_id: u64,
    /// `status`.
    pub status: u32,
    /// `opcode`.
    pub opcode: u32,
    /// `vendor_err`.
    pub vendor_err: u32,
    /// `byte_len`.
    pub byte_len: u32,
    /// `imm_data` (big-endian).
    pub imm_data: u32,
    /// `qp_num`.
    pub qp_num: u32,
    /// `src_qp`.
    pub src_qp: u32,
    /// `wc_flags`.
    pub wc_flags: u32,
    /// `pkey_index`.
    pub pkey_index: u16,
    /// `slid`.
    pub slid: u16,
    /// `sl`.
    pub sl: u8,
    /// `dlid_path_bits`.
    pub dlid_path_bits: u8,
    /// Padding to 48 bytes.
    pub pad: [u8; 2],
}

// The sizes of the C structs (x86-64 and arm64); a mismatch reports both sizes.
static_assertions::assert_eq_size!(IbvSendWr, [u8; 128]);
static_assertions::assert_eq_size!(IbvRecvWr, [u8; 32]);
static_assertions::assert_eq_size!(IbvWc, [u8; 48]);
static_assertions::assert_eq_size!(IbvSge, [u8; 16]);

type P = *mut c_void;

/// The functions of libibverbs and libmlx5 the checks use.
#[allow(clippy::type_complexity)]
#[derive(Debug)]
struct Lib {
    get_device_list: unsafe extern "C" fn(*mut c_int) -> *mut P,
    get_device_name: unsafe extern "C" fn(P) -> *const c_char,
    open_device: unsafe extern "C" fn(P) -> P,
    alloc_pd: unsafe extern "C" fn(P) -> P,
    reg_mr: unsafe extern "C" fn(P, P, usize, c_int) -> P,
    create_cq: unsafe extern "C" fn(P, c_int, P, P, c_int) -> P,
    create_qp: unsafe extern "C" fn(P, *mut u8) -> P,
    modify_qp: unsafe extern "C" fn(P, *mut u8, c_int) -> c_int,
    query_port: unsafe extern "C" fn(P, u8, *mut u8) -> c_int,
    init_obj: unsafe extern "C" fn(*mut u8, u64) -> c_int,
}

/// Resolves `name` in `handle`.
///
/// # Safety
///
/// `handle` is a live `dlopen` handle and `T` is the function's type.
unsafe fn sym<T: Copy>(handle: P, name: &CStr) -> Result<T, String> {
    // SAFETY: (caller) a live handle; the name is NUL-terminated.
    let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
    if p.is_null() {
        return Err(format!("{} not found", name.to_string_lossy()));
    }
    debug_assert_eq!(core::mem::size_of::<T>(), core::mem::size_of::<P>());
    // SAFETY: (caller) `T` is a function pointer type matching the symbol.
    Ok(unsafe { core::mem::transmute_copy::<P, T>(&p) })
}

impl Lib {
    fn load() -> Result<Self, String> {
        // SAFETY: dlopen of system libraries by name.
        let (v, m) = unsafe {
            (
                libc::dlopen(
                    c"libibverbs.so.1".as_ptr(),
                    libc::RTLD_NOW | libc::RTLD_GLOBAL,
                ),
                libc::dlopen(c"libmlx5.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL),
            )
        };
        if v.is_null() || m.is_null() {
            return Err(
                "libibverbs.so.1 / libmlx5.so.1 not found (Debian: ibverbs-providers)".into(),
            );
        }
        // SAFETY: live handles; each type is the C prototype of the symbol in rdma-core 44.
        unsafe {
            Ok(Self {
                get_device_list: sym(v, c"ibv_get_device_list")?,
                get_device_name: sym(v, c"ibv_get_device_name")?,
                open_device: sym(v, c"ibv_open_device")?,
                alloc_pd: sym(v, c"ibv_alloc_pd")?,
                reg_mr: sym(v, c"ibv_reg_mr")?,
                create_cq: sym(v, c"ibv_create_cq")?,
                create_qp: sym(v, c"ibv_create_qp")?,
                modify_qp: sym(v, c"ibv_modify_qp")?,
                query_port: sym(v, c"ibv_query_port")?,
                init_obj: sym(m, c"mlx5dv_init_obj")?,
            })
        }
    }
}

/// An opened device with one protection domain.
#[derive(Debug)]
pub struct Context {
    lib: Lib,
    ctx: NonNull<c_void>,
    pd: NonNull<c_void>,
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
    pub raw: NonNull<c_void>,
}

/// An RC QP created through libmlx5.
#[derive(Clone, Copy, Debug)]
pub struct Qp {
    /// `struct ibv_qp *`.
    pub raw: NonNull<c_void>,
    /// Its number.
    pub qpn: u32,
    /// The capabilities libmlx5 granted: max_send_wr, max_recv_wr, max_send_sge,
    /// max_recv_sge, max_inline_data.
    pub cap: [u32; 5],
}

/// Capabilities to ask for.
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    /// `max_send_wr`.
    pub max_send_wr: u32,
    /// `max_recv_wr`.
    pub max_recv_wr: u32,
    /// `max_send_sge`.
    pub max_send_sge: u32,
    /// `max_recv_sge`.
    pub max_recv_sge: u32,
    /// `max_inline_data`.
    pub max_inline_data: u32,
}

impl Context {
    /// Opens the first device (the emulated `mlx5_0`), allocates a PD and reads the LID.
    ///
    /// # Errors
    ///
    /// When rdma-core is missing or a verb fails.
    pub fn open() -> Result<Self, String> {
        let lib = Lib::load()?;
        let mut n = 0;
        // SAFETY: `n` receives the count.
        let list = unsafe { (lib.get_device_list)(&mut n) };
        if list.is_null() || n < 1 {
            return Err("no RDMA device (is the emulator preloaded?)".into());
        }
        // SAFETY: the list holds `n` devices.
        let dev = unsafe { *list };
        // SAFETY: a listed device.
        let name = unsafe { CStr::from_ptr((lib.get_device_name)(dev)) };
        // SAFETY: a listed device.
        let ctx = NonNull::new(unsafe { (lib.open_device)(dev) })
            .ok_or_else(|| format!("ibv_open_device({name:?}) failed"))?;
        // SAFETY: an open context.
        let pd =
            NonNull::new(unsafe { (lib.alloc_pd)(ctx.as_ptr()) }).ok_or("ibv_alloc_pd failed")?;
        let mut port = [0u8; 256];
        // SAFETY: `port` is larger than `struct ibv_port_attr`.
        if unsafe { (lib.query_port)(ctx.as_ptr(), 1, port.as_mut_ptr()) } != 0 {
            return Err("ibv_query_port failed".into());
        }
        // `struct ibv_port_attr`: `lid` at 34.
        let lid = u16::from_ne_bytes([port[34], port[35]]);
        Ok(Self { lib, ctx, pd, lid })
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
        let mr = unsafe { (self.lib.reg_mr)(self.pd.as_ptr(), addr.cast(), len, ACCESS_ALL) };
        if mr.is_null() {
            return Err("ibv_reg_mr failed".into());
        }
        // SAFETY: a live `struct ibv_mr`.
        unsafe {
            let m = mr.cast::<u8>();
            Ok(Mr {
                lkey: m.add(MR_LKEY).cast::<u32>().read(),
                rkey: m.add(MR_RKEY).cast::<u32>().read(),
            })
        }
    }

    /// Creates a CQ of at least `cqe` entries.
    ///
    /// # Errors
    ///
    /// When `ibv_create_cq` fails.
    pub fn create_cq(&self, cqe: u32) -> Result<Cq, String> {
        // SAFETY: a live context; no channel.
        let cq = unsafe {
            (self.lib.create_cq)(self.ctx.as_ptr(), cqe as c_int, null_mut(), null_mut(), 0)
        };
        NonNull::new(cq)
            .map(|raw| Cq { raw })
            .ok_or_else(|| "ibv_create_cq failed".into())
    }

    /// Creates an RC QP on `cq` (send and receive).
    ///
    /// # Errors
    ///
    /// When `ibv_create_qp` fails.
    pub fn create_qp(&self, cq: Cq, caps: QpCaps) -> Result<Qp, String> {
        // `struct ibv_qp_init_attr`: send_cq @8, recv_cq @16, cap @32 (five u32), qp_type @52.
        let mut a = [0u8; 64];
        a[8..16].copy_from_slice(&(cq.raw.as_ptr() as u64).to_ne_bytes());
        a[16..24].copy_from_slice(&(cq.raw.as_ptr() as u64).to_ne_bytes());
        let c = [
            caps.max_send_wr,
            caps.max_recv_wr,
            caps.max_send_sge,
            caps.max_recv_sge,
            caps.max_inline_data,
        ];
        for (k, v) in c.iter().enumerate() {
            a[32 + 4 * k..36 + 4 * k].copy_from_slice(&v.to_ne_bytes());
        }
        a[52..56].copy_from_slice(&2u32.to_ne_bytes()); // IBV_QPT_RC
        // SAFETY: a live PD and an initialised attribute struct.
        let qp = unsafe { (self.lib.create_qp)(self.pd.as_ptr(), a.as_mut_ptr()) };
        let raw = NonNull::new(qp).ok_or("ibv_create_qp failed")?;
        let mut cap = [0u32; 5];
        for (k, v) in cap.iter_mut().enumerate() {
            *v = u32::from_ne_bytes(a[32 + 4 * k..36 + 4 * k].try_into().unwrap_or([0; 4]));
        }
        // SAFETY: a live `struct ibv_qp`.
        let qpn = unsafe { raw.as_ptr().cast::<u8>().add(QP_NUM).cast::<u32>().read() };
        Ok(Qp { raw, qpn, cap })
    }

    /// Moves `qp` through INIT, RTR and RTS towards `dest_qpn` at `dlid`.
    ///
    /// # Errors
    ///
    /// When a transition fails.
    pub fn connect(&self, qp: Qp, dlid: u16, dest_qpn: u32) -> Result<(), String> {
        // `struct ibv_qp_attr` (144 bytes): qp_state @0, path_mtu @8, rq_psn @20, sq_psn @24,
        // dest_qp_num @28, qp_access_flags @32, ah_attr.dlid @80, ah_attr.port_num @86,
        // max_rd_atomic @126, max_dest_rd_atomic @127, min_rnr_timer @128, port_num @129,
        // timeout @130, retry_cnt @131, rnr_retry @132.
        let step = |f: &dyn Fn(&mut [u8; 144]), mask: c_int, what: &str| {
            let mut a = [0u8; 144];
            f(&mut a);
            // SAFETY: a live QP and an initialised attribute struct.
            let r = unsafe { (self.lib.modify_qp)(qp.raw.as_ptr(), a.as_mut_ptr(), mask) };
            if r == 0 {
                Ok(())
            } else {
                Err(format!("ibv_modify_qp to {what} failed: {r}"))
            }
        };
        step(
            &|a| {
                a[0] = 1;
                a[32..36].copy_from_slice(&(ACCESS_ALL as u32).to_ne_bytes());
                a[129] = 1;
            },
            1 | 8 | 16 | 32,
            "INIT",
        )?;
        step(
            &|a| {
                a[0] = 2;
                a[8] = 5;
                a[28..32].copy_from_slice(&dest_qpn.to_ne_bytes());
                a[80..82].copy_from_slice(&dlid.to_ne_bytes());
                a[86] = 1;
                a[127] = 16;
                a[128] = 12;
            },
            1 | 128 | 256 | (1 << 20) | (1 << 12) | (1 << 17) | (1 << 15),
            "RTR",
        )?;
        step(
            &|a| {
                a[0] = 3;
                a[126] = 16;
                a[130] = 14;
                a[131] = 7;
                a[132] = 7;
            },
            1 | 512 | 1024 | 2048 | (1 << 16) | (1 << 13),
            "RTS",
        )
    }

    /// The layouts `mlx5dv_init_obj` reports for `qp` and `cq`.
    ///
    /// # Errors
    ///
    /// When `mlx5dv_init_obj` fails or reports null pointers.
    pub fn dv(&self, qp: Qp, cq: Cq) -> Result<(QpLayout, CqLayout), String> {
        let mut dq = [0u8; 96];
        let mut dc = [0u8; 48];
        // `struct mlx5dv_obj`: qp.in @0, qp.out @8, cq.in @16, cq.out @24 (112 bytes).
        let mut obj = [0u8; 112];
        let put = |o: &mut [u8], at: usize, v: u64| o[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        put(&mut obj, 0, qp.raw.as_ptr() as u64);
        put(&mut obj, 8, dq.as_mut_ptr() as u64);
        put(&mut obj, 16, cq.raw.as_ptr() as u64);
        put(&mut obj, 24, dc.as_mut_ptr() as u64);
        // SAFETY: live objects and output structs of the header's sizes.
        let r = unsafe { (self.lib.init_obj)(obj.as_mut_ptr(), 0b11) };
        if r != 0 {
            return Err(format!("mlx5dv_init_obj failed: {r}"));
        }
        let u64at =
            |b: &[u8], at: usize| u64::from_ne_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]));
        let u32at =
            |b: &[u8], at: usize| u32::from_ne_bytes(b[at..at + 4].try_into().unwrap_or([0; 4]));
        let nn =
            |a: u64| NonNull::new(a as usize as *mut u8).ok_or("null pointer from mlx5dv_init_obj");
        // `struct mlx5dv_qp`: dbrec @0, sq {buf @8, wqe_cnt @16, stride @20}, rq {buf @24,
        // wqe_cnt @32, stride @36}, bf {reg @40, size @48}.
        let ql = QpLayout {
            qpn: qp.qpn,
            dbrec: nn(u64at(&dq, 0))?.cast(),
            sq: WqLayout {
                buf: nn(u64at(&dq, 8))?,
                wqe_cnt: u32at(&dq, 16),
                stride: u32at(&dq, 20),
            },
            rq: WqLayout {
                buf: nn(u64at(&dq, 24))?,
                wqe_cnt: u32at(&dq, 32),
                stride: u32at(&dq, 36),
            },
            bf: BfLayout {
                reg: nn(u64at(&dq, 40))?,
                size: u32at(&dq, 48),
            },
        };
        // `struct mlx5dv_cq`: buf @0, dbrec @8, cqe_cnt @16, cqe_size @20, cqn @32.
        let cl = CqLayout {
            buf: nn(u64at(&dc, 0))?,
            dbrec: nn(u64at(&dc, 8))?.cast(),
            cqe_cnt: u32at(&dc, 16),
            cqe_size: u32at(&dc, 20),
            cqn: u32at(&dc, 32),
        };
        Ok((ql, cl))
    }

    /// `ibv_post_send(qp, wr, &bad)`; 0 or the error.
    ///
    /// # Safety
    ///
    /// `wr` (and its chain and gather lists) is valid; the memory it names is registered.
    pub unsafe fn post_send(&self, qp: Qp, wr: &mut IbvSendWr) -> c_int {
        type F = unsafe extern "C" fn(P, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
        // SAFETY: the context's ops table holds libmlx5's post_send at this offset.
        let f: F = unsafe {
            self.ctx
                .as_ptr()
                .cast::<u8>()
                .add(OPS_POST_SEND)
                .cast::<F>()
                .read()
        };
        let mut bad = null_mut();
        // SAFETY: (caller) a valid request on a live QP.
        unsafe { f(qp.raw.as_ptr(), wr, &mut bad) }
    }

    /// `ibv_post_recv(qp, wr, &bad)`; 0 or the error.
    ///
    /// # Safety
    ///
    /// As [`Context::post_send`].
    pub unsafe fn post_recv(&self, qp: Qp, wr: &mut IbvRecvWr) -> c_int {
        type F = unsafe extern "C" fn(P, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
        // SAFETY: as `post_send`.
        let f: F = unsafe {
            self.ctx
                .as_ptr()
                .cast::<u8>()
                .add(OPS_POST_RECV)
                .cast::<F>()
                .read()
        };
        let mut bad = null_mut();
        // SAFETY: (caller) a valid request on a live QP.
        unsafe { f(qp.raw.as_ptr(), wr, &mut bad) }
    }

    /// `ibv_poll_cq(cq, out.len(), out)`: completions written, or a negative error.
    pub fn poll_cq(&self, cq: Cq, out: &mut [IbvWc]) -> c_int {
        type F = unsafe extern "C" fn(P, c_int, *mut IbvWc) -> c_int;
        // SAFETY: the context's ops table holds libmlx5's poll_cq at this offset.
        let f: F = unsafe {
            self.ctx
                .as_ptr()
                .cast::<u8>()
                .add(OPS_POLL_CQ)
                .cast::<F>()
                .read()
        };
        // SAFETY: a live CQ and room for `out.len()` completions.
        unsafe { f(cq.raw.as_ptr(), out.len() as c_int, out.as_mut_ptr()) }
    }
}

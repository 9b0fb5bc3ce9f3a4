//! `repr(C)` mirrors of the libibverbs and mlx5dv structs zverbs uses, field for field as in
//! rdma-core 44's `<infiniband/verbs.h>` and `<infiniband/mlx5dv.h>`, and the constants used with
//! them. The workspace's `zverbs-abi` crate checks every size, alignment, offset and value
//! against the headers.
// Every struct, field and constant here carries the name it has in `<infiniband/verbs.h>` or
// `<infiniband/mlx5dv.h>`, where its meaning is documented; repeating each field's header
// comment would add nothing.
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_char, c_int, c_uint, c_void};

/// `struct ibv_sge`: one scatter/gather entry.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ibv_sge {
    pub addr: u64,
    pub length: u32,
    pub lkey: u32,
}

/// `struct ibv_device`: opaque here; only pointers to it are handled.
#[repr(C)]
pub struct ibv_device {
    _opaque: [u8; 0],
}

/// `union ibv_gid`: 16 raw bytes (the `global` view of two `__be64` is the same bytes, and
/// gives the union its 8-byte alignment).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C, align(8))]
pub struct ibv_gid {
    pub raw: [u8; 16],
}

/// `struct ibv_gid_entry`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_gid_entry {
    pub gid: ibv_gid,
    pub gid_index: u32,
    pub port_num: u32,
    pub gid_type: u32,
    pub ndev_ifindex: u32,
}

/// `struct ibv_device_attr`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_device_attr {
    pub fw_ver: [c_char; 64],
    pub node_guid: u64,
    pub sys_image_guid: u64,
    pub max_mr_size: u64,
    pub page_size_cap: u64,
    pub vendor_id: u32,
    pub vendor_part_id: u32,
    pub hw_ver: u32,
    pub max_qp: c_int,
    pub max_qp_wr: c_int,
    pub device_cap_flags: c_uint,
    pub max_sge: c_int,
    pub max_sge_rd: c_int,
    pub max_cq: c_int,
    pub max_cqe: c_int,
    pub max_mr: c_int,
    pub max_pd: c_int,
    pub max_qp_rd_atom: c_int,
    pub max_ee_rd_atom: c_int,
    pub max_res_rd_atom: c_int,
    pub max_qp_init_rd_atom: c_int,
    pub max_ee_init_rd_atom: c_int,
    pub atomic_cap: c_uint,
    pub max_ee: c_int,
    pub max_rdd: c_int,
    pub max_mw: c_int,
    pub max_raw_ipv6_qp: c_int,
    pub max_raw_ethy_qp: c_int,
    pub max_mcast_grp: c_int,
    pub max_mcast_qp_attach: c_int,
    pub max_total_mcast_qp_attach: c_int,
    pub max_ah: c_int,
    pub max_fmr: c_int,
    pub max_map_per_fmr: c_int,
    pub max_srq: c_int,
    pub max_srq_wr: c_int,
    pub max_srq_sge: c_int,
    pub max_pkeys: u16,
    pub local_ca_ack_delay: u8,
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_port_attr {
    pub state: c_uint,
    pub max_mtu: c_uint,
    pub active_mtu: c_uint,
    pub gid_tbl_len: c_int,
    pub port_cap_flags: u32,
    pub max_msg_sz: u32,
    pub bad_pkey_cntr: u32,
    pub qkey_viol_cntr: u32,
    pub pkey_tbl_len: u16,
    pub lid: u16,
    pub sm_lid: u16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub link_layer: u8,
    pub flags: u8,
    pub port_cap_flags2: u16,
}

/// `struct ibv_wc`. `imm_data` is the union with `invalidated_rkey` (same size and place).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_wc {
    pub wr_id: u64,
    pub status: c_uint,
    pub opcode: c_uint,
    pub vendor_err: u32,
    pub byte_len: u32,
    /// Big-endian immediate data when `wc_flags & IBV_WC_WITH_IMM`.
    pub imm_data: u32,
    pub qp_num: u32,
    pub src_qp: u32,
    pub wc_flags: c_uint,
    pub pkey_index: u16,
    pub slid: u16,
    pub sl: u8,
    pub dlid_path_bits: u8,
}

/// `struct ibv_pd`.
#[repr(C)]
pub struct ibv_pd {
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
pub struct ibv_mr {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub addr: *mut c_void,
    pub length: usize,
    pub handle: u32,
    pub lkey: u32,
    pub rkey: u32,
}

/// `struct ibv_global_route`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_global_route {
    pub dgid: ibv_gid,
    pub flow_label: u32,
    pub sgid_index: u8,
    pub hop_limit: u8,
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_ah_attr {
    pub grh: ibv_global_route,
    pub dlid: u16,
    pub sl: u8,
    pub src_path_bits: u8,
    pub static_rate: u8,
    pub is_global: u8,
    pub port_num: u8,
}

/// `struct ibv_ah`: an address handle (`ibv_create_ah`).
#[derive(Debug)]
#[repr(C)]
pub struct ibv_ah {
    pub context: *mut ibv_context,
    pub pd: *mut ibv_pd,
    pub handle: u32,
}

/// `struct ibv_srq_attr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ibv_srq_attr {
    pub max_wr: u32,
    pub max_sge: u32,
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`, the argument of `ibv_create_srq`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_srq_init_attr {
    pub srq_context: *mut c_void,
    pub attr: ibv_srq_attr,
}

/// `struct ibv_srq`: a shared receive queue (`ibv_create_srq`).
#[repr(C)]
pub struct ibv_srq {
    pub context: *mut ibv_context,
    pub srq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub handle: u32,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

impl core::fmt::Debug for ibv_srq {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ibv_srq")
            .field("context", &self.context)
            .field("handle", &self.handle)
            .finish_non_exhaustive()
    }
}

/// `IBV_SRQ_MAX_WR`, a bit of `enum ibv_srq_attr_mask`.
pub const IBV_SRQ_MAX_WR: c_int = 1 << 0;
/// `IBV_SRQ_LIMIT`, a bit of `enum ibv_srq_attr_mask`.
pub const IBV_SRQ_LIMIT: c_int = 1 << 1;

/// `struct ibv_qp_cap`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ibv_qp_cap {
    pub max_send_wr: u32,
    pub max_recv_wr: u32,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
pub struct ibv_qp_init_attr {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
}

/// `struct ibv_rx_hash_conf`.
#[repr(C)]
pub struct ibv_rx_hash_conf {
    pub rx_hash_function: u8,
    pub rx_hash_key_len: u8,
    pub rx_hash_key: *mut u8,
    pub rx_hash_fields_mask: u64,
}

/// `struct ibv_qp_init_attr_ex` (for `mlx5dv_create_qp`).
#[repr(C)]
pub struct ibv_qp_init_attr_ex {
    pub qp_context: *mut c_void,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub cap: ibv_qp_cap,
    pub qp_type: c_uint,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut ibv_pd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    pub rx_hash_conf: ibv_rx_hash_conf,
    pub source_qpn: u32,
    pub send_ops_flags: u64,
}

/// `struct ibv_qp_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_qp_attr {
    pub qp_state: c_uint,
    pub cur_qp_state: c_uint,
    pub path_mtu: c_uint,
    pub path_mig_state: c_uint,
    pub qkey: u32,
    pub rq_psn: u32,
    pub sq_psn: u32,
    pub dest_qp_num: u32,
    pub qp_access_flags: c_uint,
    pub cap: ibv_qp_cap,
    pub ah_attr: ibv_ah_attr,
    pub alt_ah_attr: ibv_ah_attr,
    pub pkey_index: u16,
    pub alt_pkey_index: u16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub rate_limit: u32,
}

/// `struct ibv_send_wr`'s `wr.rdma`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_send_wr_rdma {
    pub remote_addr: u64,
    pub rkey: u32,
}

/// `struct ibv_send_wr`'s `wr.atomic`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_send_wr_atomic {
    pub remote_addr: u64,
    pub compare_add: u64,
    pub swap: u64,
    pub rkey: u32,
}

/// `struct ibv_send_wr`'s `wr.ud`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_send_wr_ud {
    pub ah: *mut c_void,
    pub remote_qpn: u32,
    pub remote_qkey: u32,
}

/// `struct ibv_send_wr`'s `wr` union.
#[derive(Clone, Copy)]
#[repr(C)]
pub union ibv_send_wr_wr {
    pub rdma: ibv_send_wr_rdma,
    pub atomic: ibv_send_wr_atomic,
    pub ud: ibv_send_wr_ud,
}

/// `struct ibv_send_wr`'s `qp_type` union (`xrc.remote_srqn`).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_send_wr_qp_type {
    pub remote_srqn: u32,
}

/// `struct ibv_mw_bind_info`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_mw_bind_info {
    pub mr: *mut ibv_mr,
    pub addr: u64,
    pub length: u64,
    pub mw_access_flags: c_uint,
}

/// `struct ibv_send_wr`'s `bind_mw` member.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_send_wr_bind_mw {
    pub mw: *mut c_void,
    pub rkey: u32,
    pub bind_info: ibv_mw_bind_info,
}

/// `struct ibv_send_wr`'s `tso` member.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_send_wr_tso {
    pub hdr: *mut c_void,
    pub hdr_sz: u16,
    pub mss: u16,
}

/// `struct ibv_send_wr`'s anonymous `bind_mw` / `tso` union.
#[derive(Clone, Copy)]
#[repr(C)]
pub union ibv_send_wr_ext {
    pub bind_mw: ibv_send_wr_bind_mw,
    pub tso: ibv_send_wr_tso,
}

/// `struct ibv_send_wr`. `imm_data` is the union with `invalidate_rkey`.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ibv_send_wr {
    pub wr_id: u64,
    pub next: *mut ibv_send_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
    pub opcode: c_uint,
    pub send_flags: c_uint,
    /// Big-endian immediate data for the `*_WITH_IMM` opcodes.
    pub imm_data: u32,
    pub wr: ibv_send_wr_wr,
    pub qp_type: ibv_send_wr_qp_type,
    pub ext: ibv_send_wr_ext,
}

impl core::fmt::Debug for ibv_send_wr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ibv_send_wr")
            .field("wr_id", &self.wr_id)
            .field("opcode", &self.opcode)
            .field("num_sge", &self.num_sge)
            .field("send_flags", &self.send_flags)
            .finish_non_exhaustive()
    }
}

impl ibv_send_wr {
    /// An all-zero request (null pointers, zero counts).
    pub const ZERO: Self = Self {
        wr_id: 0,
        next: core::ptr::null_mut(),
        sg_list: core::ptr::null_mut(),
        num_sge: 0,
        opcode: 0,
        send_flags: 0,
        imm_data: 0,
        wr: ibv_send_wr_wr {
            atomic: ibv_send_wr_atomic {
                remote_addr: 0,
                compare_add: 0,
                swap: 0,
                rkey: 0,
            },
        },
        qp_type: ibv_send_wr_qp_type { remote_srqn: 0 },
        ext: ibv_send_wr_ext {
            bind_mw: ibv_send_wr_bind_mw {
                mw: core::ptr::null_mut(),
                rkey: 0,
                bind_info: ibv_mw_bind_info {
                    mr: core::ptr::null_mut(),
                    addr: 0,
                    length: 0,
                    mw_access_flags: 0,
                },
            },
        },
    };
}

/// `struct ibv_recv_wr`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_recv_wr {
    pub wr_id: u64,
    pub next: *mut ibv_recv_wr,
    pub sg_list: *mut ibv_sge,
    pub num_sge: c_int,
}

impl ibv_recv_wr {
    /// An all-zero request.
    pub const ZERO: Self = Self {
        wr_id: 0,
        next: core::ptr::null_mut(),
        sg_list: core::ptr::null_mut(),
        num_sge: 0,
    };
}

/// `struct ibv_comp_channel`.
#[repr(C)]
pub struct ibv_comp_channel {
    pub context: *mut ibv_context,
    pub fd: c_int,
    pub refcnt: c_int,
}

/// `struct ibv_cq`.
#[repr(C)]
pub struct ibv_cq {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct ibv_qp {
    pub context: *mut ibv_context,
    pub qp_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub send_cq: *mut ibv_cq,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub handle: u32,
    pub qp_num: u32,
    pub state: c_uint,
    pub qp_type: c_uint,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
}

/// A `struct ibv_qp_ex` member: a work-request builder call (`ibv_wr_*`) whose arguments
/// zverbs does not bind (the type of every member it does not call).
pub type WrFn = Option<unsafe extern "C" fn()>;

/// `struct ibv_qp_ex`: a QP with the work-request builder API (`ibv_wr_start`, an opcode call,
/// the setters, `ibv_wr_complete`), from `ibv_qp_to_qp_ex` on a QP created with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`. Only the members zverbs calls have their C types.
#[repr(C)]
pub struct ibv_qp_ex {
    pub qp_base: ibv_qp,
    pub comp_mask: u64,
    pub wr_id: u64,
    pub wr_flags: c_uint,
    pub wr_atomic_cmp_swp: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64, u64)>,
    pub wr_atomic_fetch_add: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u64)>,
    pub wr_bind_mw: WrFn,
    pub wr_local_inv: WrFn,
    pub wr_rdma_read: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64)>,
    pub wr_rdma_write_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_send: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_send_imm: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32)>,
    pub wr_send_inv: WrFn,
    pub wr_send_tso: WrFn,
    pub wr_set_ud_addr: WrFn,
    pub wr_set_xrc_srqn: WrFn,
    pub wr_set_inline_data: Option<unsafe extern "C" fn(*mut ibv_qp_ex, *mut c_void, usize)>,
    pub wr_set_inline_data_list:
        Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_data_buf)>,
    pub wr_set_sge: Option<unsafe extern "C" fn(*mut ibv_qp_ex, u32, u64, u32)>,
    pub wr_set_sge_list: Option<unsafe extern "C" fn(*mut ibv_qp_ex, usize, *const ibv_sge)>,
    pub wr_start: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_complete: Option<unsafe extern "C" fn(*mut ibv_qp_ex) -> c_int>,
    pub wr_abort: Option<unsafe extern "C" fn(*mut ibv_qp_ex)>,
    pub wr_atomic_write: WrFn,
}

/// `struct ibv_data_buf`: one inline source of `ibv_wr_set_inline_data_list`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_data_buf {
    pub addr: *mut c_void,
    pub length: usize,
}

/// `struct mlx5dv_qp_ex`: mlx5's work-request builder calls, from
/// `mlx5dv_qp_ex_from_ibv_qp_ex`. Only the members zverbs calls have their C types.
#[repr(C)]
pub struct mlx5dv_qp_ex {
    pub comp_mask: u64,
    /// `mlx5dv_wr_set_dc_addr`: the DC target (address handle, DCT number, access key) of
    /// the work request being built.
    pub wr_set_dc_addr: Option<unsafe extern "C" fn(*mut mlx5dv_qp_ex, *mut ibv_ah, u32, u64)>,
    pub wr_mr_interleaved: WrFn,
    pub wr_mr_list: WrFn,
    pub wr_mkey_configure: WrFn,
    pub wr_set_mkey_access_flags: WrFn,
    pub wr_set_mkey_layout_list: WrFn,
    pub wr_set_mkey_layout_interleaved: WrFn,
    pub wr_set_mkey_sig_block: WrFn,
    pub wr_raw_wqe: WrFn,
    pub wr_set_dc_addr_stream: WrFn,
    pub wr_memcpy: WrFn,
    pub wr_set_mkey_crypto: WrFn,
}

/// `ibv_context_ops.post_send`.
pub type PostSendFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_send_wr, *mut *mut ibv_send_wr) -> c_int;
/// `ibv_context_ops.post_recv`.
pub type PostRecvFn =
    unsafe extern "C" fn(*mut ibv_qp, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// `ibv_context_ops.poll_cq`.
pub type PollCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int, *mut ibv_wc) -> c_int;
/// `ibv_context_ops.req_notify_cq`.
pub type ReqNotifyCqFn = unsafe extern "C" fn(*mut ibv_cq, c_int) -> c_int;
/// `ibv_context_ops.post_srq_recv`.
pub type PostSrqRecvFn =
    unsafe extern "C" fn(*mut ibv_srq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;
/// A slot of `ibv_context_ops` this crate never calls.
pub type UnusedOp = Option<unsafe extern "C" fn()>;

/// `struct ibv_context_ops`: the provider's function table. Only the data-path entries that
/// `verbs.h` calls from its static inline functions are typed; the rest keep their places.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ibv_context_ops {
    pub _compat_query_device: UnusedOp,
    pub _compat_query_port: UnusedOp,
    pub _compat_alloc_pd: UnusedOp,
    pub _compat_dealloc_pd: UnusedOp,
    pub _compat_reg_mr: UnusedOp,
    pub _compat_rereg_mr: UnusedOp,
    pub _compat_dereg_mr: UnusedOp,
    pub alloc_mw: UnusedOp,
    pub bind_mw: UnusedOp,
    pub dealloc_mw: UnusedOp,
    pub _compat_create_cq: UnusedOp,
    pub poll_cq: Option<PollCqFn>,
    pub req_notify_cq: Option<ReqNotifyCqFn>,
    pub _compat_cq_event: UnusedOp,
    pub _compat_resize_cq: UnusedOp,
    pub _compat_destroy_cq: UnusedOp,
    pub _compat_create_srq: UnusedOp,
    pub _compat_modify_srq: UnusedOp,
    pub _compat_query_srq: UnusedOp,
    pub _compat_destroy_srq: UnusedOp,
    pub post_srq_recv: Option<PostSrqRecvFn>,
    pub _compat_create_qp: UnusedOp,
    pub _compat_query_qp: UnusedOp,
    pub _compat_modify_qp: UnusedOp,
    pub _compat_destroy_qp: UnusedOp,
    pub post_send: Option<PostSendFn>,
    pub post_recv: Option<PostRecvFn>,
    pub _compat_create_ah: UnusedOp,
    pub _compat_destroy_ah: UnusedOp,
    pub _compat_attach_mcast: UnusedOp,
    pub _compat_detach_mcast: UnusedOp,
    pub _compat_async_event: UnusedOp,
}

/// `struct ibv_context`.
#[repr(C)]
pub struct ibv_context {
    pub device: *mut ibv_device,
    pub ops: ibv_context_ops,
    pub cmd_fd: c_int,
    pub async_fd: c_int,
    pub num_comp_vectors: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub abi_compat: *mut c_void,
}

/// `__VERBS_ABI_IS_EXTENDED`: `ibv_context.abi_compat` of a context embedded in a
/// `struct verbs_context` (every context of a current provider).
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `verbs_context.alloc_td`.
pub type AllocTdFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_td_init_attr) -> *mut ibv_td;
/// `verbs_context.dealloc_td`.
pub type DeallocTdFn = unsafe extern "C" fn(*mut ibv_td) -> c_int;
/// `verbs_context.alloc_parent_domain`.
pub type AllocParentDomainFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_parent_domain_init_attr) -> *mut ibv_pd;

/// `struct verbs_context`: the extended function table a provider's context is embedded in,
/// which `verbs.h`'s static inline `ibv_alloc_td`, `ibv_dealloc_td` and
/// `ibv_alloc_parent_domain` call through. It grows at the front (newer libibverbs add
/// fields before these), so it is found from its last field, `context`, backwards, and `sz`
/// says how far the provider's copy reaches. Only the entries this crate calls are typed.
#[allow(non_snake_case)]
#[repr(C)]
pub struct verbs_context {
    pub query_port: UnusedOp,
    pub advise_mr: UnusedOp,
    pub alloc_null_mr: UnusedOp,
    pub read_counters: UnusedOp,
    pub attach_counters_point_flow: UnusedOp,
    pub create_counters: UnusedOp,
    pub destroy_counters: UnusedOp,
    pub reg_dm_mr: UnusedOp,
    pub alloc_dm: UnusedOp,
    pub free_dm: UnusedOp,
    pub modify_flow_action_esp: UnusedOp,
    pub destroy_flow_action: UnusedOp,
    pub create_flow_action_esp: UnusedOp,
    pub modify_qp_rate_limit: UnusedOp,
    pub alloc_parent_domain: Option<AllocParentDomainFn>,
    pub dealloc_td: Option<DeallocTdFn>,
    pub alloc_td: Option<AllocTdFn>,
    pub modify_cq: UnusedOp,
    pub post_srq_ops: UnusedOp,
    pub destroy_rwq_ind_table: Option<DestroyRwqIndTableFn>,
    pub create_rwq_ind_table: Option<CreateRwqIndTableFn>,
    pub destroy_wq: Option<DestroyWqFn>,
    pub modify_wq: Option<ModifyWqFn>,
    pub create_wq: Option<CreateWqFn>,
    pub query_rt_values: Option<QueryRtValuesFn>,
    pub create_cq_ex: Option<CreateCqExFn>,
    pub r#priv: *mut c_void,
    pub query_device_ex: Option<QueryDeviceExFn>,
    pub ibv_destroy_flow: Option<DestroyFlowFn>,
    pub ABI_placeholder2: UnusedOp,
    pub ibv_create_flow: Option<CreateFlowFn>,
    pub ABI_placeholder1: UnusedOp,
    pub open_qp: UnusedOp,
    pub create_qp_ex: Option<CreateQpExFn>,
    pub get_srq_num: UnusedOp,
    pub create_srq_ex: UnusedOp,
    pub open_xrcd: UnusedOp,
    pub close_xrcd: UnusedOp,
    pub _ABI_placeholder3: u64,
    pub sz: usize,
    pub context: ibv_context,
}

/// `struct ibv_td_init_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_td_init_attr {
    pub comp_mask: u32,
}

/// `struct ibv_td`: a thread domain.
#[repr(C)]
pub struct ibv_td {
    pub context: *mut ibv_context,
}

/// `struct ibv_parent_domain_init_attr`.
#[repr(C)]
pub struct ibv_parent_domain_init_attr {
    pub pd: *mut ibv_pd,
    pub td: *mut ibv_td,
    pub comp_mask: u32,
    pub alloc:
        Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, usize, usize, u64) -> *mut c_void>,
    pub free: Option<unsafe extern "C" fn(*mut ibv_pd, *mut c_void, *mut c_void, u64)>,
    pub pd_context: *mut c_void,
}

/// `struct mlx5dv_obj`'s `{in, out}` pairs.
#[repr(C)]
pub struct mlx5dv_obj_pair<I, O> {
    pub r#in: *mut I,
    pub out: *mut O,
}

/// `struct mlx5dv_obj`, the argument of `mlx5dv_init_obj`; only `qp` and `cq` are used.
///
/// `Q` and `C` are the out-structs `struct mlx5dv_qp` and `struct mlx5dv_cq`, which the mlx5
/// direct path that reads them declares (in zverbs, `zverbs_mlx5dv::prm::dv`); only pointers
/// to them are held here, so the layout is the same whatever they are. The table's
/// `mlx5dv_init_obj` takes the opaque form, `mlx5dv_obj<c_void, c_void>`: cast the pointer.
#[repr(C)]
pub struct mlx5dv_obj<Q = c_void, C = c_void> {
    pub qp: mlx5dv_obj_pair<ibv_qp, Q>,
    pub cq: mlx5dv_obj_pair<ibv_cq, C>,
    pub srq: mlx5dv_obj_pair<c_void, c_void>,
    pub rwq: mlx5dv_obj_pair<c_void, c_void>,
    pub dm: mlx5dv_obj_pair<c_void, c_void>,
    pub ah: mlx5dv_obj_pair<c_void, c_void>,
    pub pd: mlx5dv_obj_pair<c_void, c_void>,
}

impl<Q, C> mlx5dv_obj<Q, C> {
    /// Every pointer null: no object asked for.
    pub const EMPTY: Self = Self {
        qp: mlx5dv_obj_pair::NULL,
        cq: mlx5dv_obj_pair::NULL,
        srq: mlx5dv_obj_pair::NULL,
        rwq: mlx5dv_obj_pair::NULL,
        dm: mlx5dv_obj_pair::NULL,
        ah: mlx5dv_obj_pair::NULL,
        pd: mlx5dv_obj_pair::NULL,
    };
}

impl<I, O> mlx5dv_obj_pair<I, O> {
    /// Both pointers null.
    pub const NULL: Self = Self {
        r#in: core::ptr::null_mut(),
        out: core::ptr::null_mut(),
    };
}

/// `struct mlx5dv_dci_streams`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5dv_dci_streams {
    pub log_num_concurent: u8,
    pub log_num_errored: u8,
}

/// `struct mlx5dv_dc_init_attr`'s union.
#[derive(Clone, Copy)]
#[repr(C)]
pub union mlx5dv_dc_init_attr_u {
    pub dct_access_key: u64,
    pub dci_streams: mlx5dv_dci_streams,
}

/// `struct mlx5dv_dc_init_attr`.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct mlx5dv_dc_init_attr {
    pub dc_type: c_uint,
    pub u: mlx5dv_dc_init_attr_u,
}

/// `struct mlx5dv_qp_init_attr`.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct mlx5dv_qp_init_attr {
    pub comp_mask: u64,
    pub create_flags: u32,
    pub dc_init_attr: mlx5dv_dc_init_attr,
    pub send_ops_flags: u64,
}

// Constants, named as in the headers.

/// `IBV_WR_RDMA_WRITE`.
pub const IBV_WR_RDMA_WRITE: c_uint = 0;
/// `IBV_WR_RDMA_WRITE_WITH_IMM`.
pub const IBV_WR_RDMA_WRITE_WITH_IMM: c_uint = 1;
/// `IBV_WR_SEND`.
pub const IBV_WR_SEND: c_uint = 2;
/// `IBV_WR_SEND_WITH_IMM`.
pub const IBV_WR_SEND_WITH_IMM: c_uint = 3;
/// `IBV_WR_RDMA_READ`.
pub const IBV_WR_RDMA_READ: c_uint = 4;
/// `IBV_WR_ATOMIC_CMP_AND_SWP`.
pub const IBV_WR_ATOMIC_CMP_AND_SWP: c_uint = 5;
/// `IBV_WR_ATOMIC_FETCH_AND_ADD`.
pub const IBV_WR_ATOMIC_FETCH_AND_ADD: c_uint = 6;

/// `IBV_SEND_FENCE`.
pub const IBV_SEND_FENCE: c_uint = 1 << 0;
/// `IBV_SEND_SIGNALED`.
pub const IBV_SEND_SIGNALED: c_uint = 1 << 1;
/// `IBV_SEND_SOLICITED`.
pub const IBV_SEND_SOLICITED: c_uint = 1 << 2;
/// `IBV_SEND_INLINE`.
pub const IBV_SEND_INLINE: c_uint = 1 << 3;
/// `IBV_SEND_IP_CSUM`: the device computes the IPv4 header and TCP/UDP checksums of a raw
/// packet send.
pub const IBV_SEND_IP_CSUM: c_uint = 1 << 4;

/// `IBV_ACCESS_LOCAL_WRITE`.
pub const IBV_ACCESS_LOCAL_WRITE: c_int = 1 << 0;
/// `IBV_ACCESS_REMOTE_WRITE`.
pub const IBV_ACCESS_REMOTE_WRITE: c_int = 1 << 1;
/// `IBV_ACCESS_REMOTE_READ`.
pub const IBV_ACCESS_REMOTE_READ: c_int = 1 << 2;
/// `IBV_ACCESS_REMOTE_ATOMIC`.
pub const IBV_ACCESS_REMOTE_ATOMIC: c_int = 1 << 3;

/// `IBV_QPS_RESET`.
pub const IBV_QPS_RESET: c_uint = 0;
/// `IBV_QPS_INIT`.
pub const IBV_QPS_INIT: c_uint = 1;
/// `IBV_QPS_RTR`.
pub const IBV_QPS_RTR: c_uint = 2;
/// `IBV_QPS_RTS`.
pub const IBV_QPS_RTS: c_uint = 3;
/// `IBV_QPS_SQD`.
pub const IBV_QPS_SQD: c_uint = 4;
/// `IBV_QPS_SQE`.
pub const IBV_QPS_SQE: c_uint = 5;
/// `IBV_QPS_ERR`.
pub const IBV_QPS_ERR: c_uint = 6;

/// `IBV_MTU_256`.
pub const IBV_MTU_256: c_uint = 1;
/// `IBV_MTU_512`.
pub const IBV_MTU_512: c_uint = 2;
/// `IBV_MTU_1024`.
pub const IBV_MTU_1024: c_uint = 3;
/// `IBV_MTU_2048`.
pub const IBV_MTU_2048: c_uint = 4;
/// `IBV_MTU_4096`.
pub const IBV_MTU_4096: c_uint = 5;

/// `IBV_QPT_RC`.
pub const IBV_QPT_RC: c_uint = 2;
/// `IBV_QPT_UD`.
pub const IBV_QPT_UD: c_uint = 4;
/// `IBV_QPT_RAW_PACKET`.
pub const IBV_QPT_RAW_PACKET: c_uint = 8;
/// `IBV_QPT_DRIVER`: a provider's own QP type (mlx5: the DC initiator and target).
pub const IBV_QPT_DRIVER: c_uint = 0xff;
/// `MLX5DV_QP_INIT_ATTR_MASK_DC`.
pub const MLX5DV_QP_INIT_ATTR_MASK_DC: u64 = 1 << 1;
/// `MLX5DV_DCTYPE_DCT`.
pub const MLX5DV_DCTYPE_DCT: c_uint = 1;
/// `MLX5DV_DCTYPE_DCI`.
pub const MLX5DV_DCTYPE_DCI: c_uint = 2;

/// `IBV_QP_INIT_ATTR_PD`.
pub const IBV_QP_INIT_ATTR_PD: u32 = 1 << 0;
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`: `send_ops_flags` names the `ibv_wr_*` opcodes used.
pub const IBV_QP_INIT_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
/// `MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS`.
pub const MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS: u64 = 1 << 0;
/// `MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE`.
pub const MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE: u32 = 1 << 3;
/// `MLX5DV_OBJ_QP`.
pub const MLX5DV_OBJ_QP: u64 = 1 << 0;
/// `MLX5DV_OBJ_CQ`.
pub const MLX5DV_OBJ_CQ: u64 = 1 << 1;
/// `MLX5DV_OBJ_SRQ`.
pub const MLX5DV_OBJ_SRQ: u64 = 1 << 2;
/// `MLX5DV_OBJ_RWQ`.
pub const MLX5DV_OBJ_RWQ: u64 = 1 << 3;
/// `MLX5DV_OBJ_AH`.
pub const MLX5DV_OBJ_AH: u64 = 1 << 5;

/// `IBV_LINK_LAYER_INFINIBAND`.
pub const IBV_LINK_LAYER_INFINIBAND: u8 = 1;
/// `IBV_LINK_LAYER_ETHERNET`.
pub const IBV_LINK_LAYER_ETHERNET: u8 = 2;

/// `IBV_GID_TYPE_IB`.
pub const IBV_GID_TYPE_IB: u32 = 0;
/// `IBV_GID_TYPE_ROCE_V1`.
pub const IBV_GID_TYPE_ROCE_V1: u32 = 1;
/// `IBV_GID_TYPE_ROCE_V2`.
pub const IBV_GID_TYPE_ROCE_V2: u32 = 2;

/// `IBV_QP_STATE` and the other `enum ibv_qp_attr_mask` bits.
pub mod qp_attr_mask {
    pub const IBV_QP_STATE: i32 = 1 << 0;
    pub const IBV_QP_ACCESS_FLAGS: i32 = 1 << 3;
    pub const IBV_QP_PKEY_INDEX: i32 = 1 << 4;
    pub const IBV_QP_PORT: i32 = 1 << 5;
    pub const IBV_QP_QKEY: i32 = 1 << 6;
    pub const IBV_QP_AV: i32 = 1 << 7;
    pub const IBV_QP_PATH_MTU: i32 = 1 << 8;
    pub const IBV_QP_TIMEOUT: i32 = 1 << 9;
    pub const IBV_QP_RETRY_CNT: i32 = 1 << 10;
    pub const IBV_QP_RNR_RETRY: i32 = 1 << 11;
    pub const IBV_QP_RQ_PSN: i32 = 1 << 12;
    pub const IBV_QP_MAX_QP_RD_ATOMIC: i32 = 1 << 13;
    pub const IBV_QP_MIN_RNR_TIMER: i32 = 1 << 15;
    pub const IBV_QP_SQ_PSN: i32 = 1 << 16;
    pub const IBV_QP_MAX_DEST_RD_ATOMIC: i32 = 1 << 17;
    pub const IBV_QP_CAP: i32 = 1 << 19;
    pub const IBV_QP_DEST_QPN: i32 = 1 << 20;
}

/// `union` of `struct ibv_async_event`: the object the event concerns, by its kind.
#[repr(C)]
#[derive(Clone, Copy)]
pub union ibv_async_event_element {
    pub cq: *mut ibv_cq,
    pub qp: *mut ibv_qp,
    pub srq: *mut ibv_srq,
    pub wq: *mut c_void,
    pub port_num: c_int,
}

/// `struct ibv_async_event`, filled by `ibv_get_async_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ibv_async_event {
    pub element: ibv_async_event_element,
    /// `enum ibv_event_type`.
    pub event_type: c_uint,
}

impl ibv_async_event {
    /// An event with every field zero, for `ibv_get_async_event` to fill.
    pub fn zeroed() -> Self {
        Self {
            element: ibv_async_event_element { port_num: 0 },
            event_type: 0,
        }
    }
}

impl core::fmt::Debug for ibv_async_event {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ibv_async_event")
            .field("event_type", &self.event_type)
            .finish_non_exhaustive()
    }
}

/// `enum ibv_event_type`.
pub mod ibv_event_type {
    pub const IBV_EVENT_CQ_ERR: u32 = 0;
    pub const IBV_EVENT_QP_FATAL: u32 = 1;
    pub const IBV_EVENT_QP_REQ_ERR: u32 = 2;
    pub const IBV_EVENT_QP_ACCESS_ERR: u32 = 3;
    pub const IBV_EVENT_COMM_EST: u32 = 4;
    pub const IBV_EVENT_SQ_DRAINED: u32 = 5;
    pub const IBV_EVENT_PATH_MIG: u32 = 6;
    pub const IBV_EVENT_PATH_MIG_ERR: u32 = 7;
    pub const IBV_EVENT_DEVICE_FATAL: u32 = 8;
    pub const IBV_EVENT_PORT_ACTIVE: u32 = 9;
    pub const IBV_EVENT_PORT_ERR: u32 = 10;
    pub const IBV_EVENT_LID_CHANGE: u32 = 11;
    pub const IBV_EVENT_PKEY_CHANGE: u32 = 12;
    pub const IBV_EVENT_SM_CHANGE: u32 = 13;
    pub const IBV_EVENT_SRQ_ERR: u32 = 14;
    pub const IBV_EVENT_SRQ_LIMIT_REACHED: u32 = 15;
    pub const IBV_EVENT_QP_LAST_WQE_REACHED: u32 = 16;
    pub const IBV_EVENT_CLIENT_REREGISTER: u32 = 17;
    pub const IBV_EVENT_GID_CHANGE: u32 = 18;
    pub const IBV_EVENT_WQ_FATAL: u32 = 19;
}

/// `verbs_context.query_rt_values`.
pub type QueryRtValuesFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_values_ex) -> c_int;
/// `verbs_context.create_cq_ex`.
pub type CreateCqExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_cq_init_attr_ex) -> *mut ibv_cq_ex;
/// `verbs_context.query_device_ex`.
pub type QueryDeviceExFn = unsafe extern "C" fn(
    *mut ibv_context,
    *const ibv_query_device_ex_input,
    *mut ibv_device_attr_ex,
    usize,
) -> c_int;

/// `struct ibv_query_device_ex_input`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_query_device_ex_input {
    pub comp_mask: u32,
}

/// `struct ibv_odp_caps`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_odp_caps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_device_attr_ex`: the fields up to `device_cap_flags_ex` typed, the rest kept
/// as bytes (the provider fills them; nothing here reads them).
#[derive(Clone, Copy)]
#[repr(C)]
pub struct ibv_device_attr_ex {
    pub orig_attr: ibv_device_attr,
    pub comp_mask: u32,
    pub odp_caps: ibv_odp_caps,
    /// The mask of the CQE timestamp's valid bits; 0 on a device without completion
    /// timestamps.
    pub completion_timestamp_mask: u64,
    /// The frequency of the device clock in kHz.
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `struct ibv_tso_caps` (`max_tso`, `supported_qpts`).
    pub tso_caps: [u32; 2],
    /// `struct ibv_rss_caps`.
    pub rss_caps: ibv_rss_caps,
    pub max_wq_type_rq: u32,
    /// `struct ibv_packet_pacing_caps` (`qp_rate_limit_min`, `_max`, `supported_qpts`).
    pub packet_pacing_caps: [u32; 3],
    /// `enum ibv_raw_packet_caps` bits.
    pub raw_packet_caps: u32,
    pub _rest: [u32; 13],
}

/// `struct ibv_values_ex`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_values_ex {
    pub comp_mask: u32,
    /// With `IBV_VALUES_MASK_RAW_CLOCK`: the device clock's counter, in `tv_nsec`.
    pub raw_clock: libc::timespec,
}

/// `IBV_VALUES_MASK_RAW_CLOCK`.
pub const IBV_VALUES_MASK_RAW_CLOCK: u32 = 1 << 0;

/// `struct ibv_cq_init_attr_ex`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_cq_init_attr_ex {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut ibv_comp_channel,
    pub comp_vector: u32,
    /// `enum ibv_create_cq_wc_flags` bits.
    pub wc_flags: u64,
    pub comp_mask: u32,
    pub flags: u32,
    pub parent_domain: *mut ibv_pd,
}

/// `enum ibv_create_cq_wc_flags`: the fields an extended CQ reports.
pub mod wc_ex_flags {
    pub const IBV_WC_EX_WITH_BYTE_LEN: u64 = 1 << 0;
    pub const IBV_WC_EX_WITH_IMM: u64 = 1 << 1;
    pub const IBV_WC_EX_WITH_QP_NUM: u64 = 1 << 2;
    pub const IBV_WC_EX_WITH_SRC_QP: u64 = 1 << 3;
    pub const IBV_WC_EX_WITH_SLID: u64 = 1 << 4;
    pub const IBV_WC_EX_WITH_SL: u64 = 1 << 5;
    pub const IBV_WC_EX_WITH_DLID_PATH_BITS: u64 = 1 << 6;
    pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP: u64 = 1 << 7;
    pub const IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK: u64 = 1 << 11;
    /// `IBV_WC_STANDARD_FLAGS`.
    pub const IBV_WC_STANDARD_FLAGS: u64 = IBV_WC_EX_WITH_BYTE_LEN
        | IBV_WC_EX_WITH_IMM
        | IBV_WC_EX_WITH_QP_NUM
        | IBV_WC_EX_WITH_SRC_QP
        | IBV_WC_EX_WITH_SLID
        | IBV_WC_EX_WITH_SL
        | IBV_WC_EX_WITH_DLID_PATH_BITS;
}

/// `struct ibv_poll_cq_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_poll_cq_attr {
    pub comp_mask: u32,
}

/// An `ibv_cq_ex` reader returning `u32`.
pub type CqExReadU32 = unsafe extern "C" fn(*mut ibv_cq_ex) -> u32;
/// An `ibv_cq_ex` reader returning `u8`.
pub type CqExReadU8 = unsafe extern "C" fn(*mut ibv_cq_ex) -> u8;

/// `struct ibv_cq_ex`: a CQ polled one completion at a time (`ibv_start_poll`,
/// `ibv_next_poll`, `ibv_end_poll`) with a reader per field. Starts as `struct ibv_cq` does
/// (`ibv_cq_ex_to_cq` is a cast).
#[repr(C)]
pub struct ibv_cq_ex {
    pub context: *mut ibv_context,
    pub channel: *mut ibv_comp_channel,
    pub cq_context: *mut c_void,
    pub handle: u32,
    pub cqe: c_int,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub comp_events_completed: u32,
    pub async_events_completed: u32,
    pub comp_mask: u32,
    /// The current completion's status (after `start_poll` / `next_poll`).
    pub status: u32,
    /// The current completion's `wr_id`.
    pub wr_id: u64,
    pub start_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex, *mut ibv_poll_cq_attr) -> c_int>,
    pub next_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> c_int>,
    pub end_poll: Option<unsafe extern "C" fn(*mut ibv_cq_ex)>,
    pub read_opcode: Option<CqExReadU32>,
    pub read_vendor_err: Option<CqExReadU32>,
    pub read_byte_len: Option<CqExReadU32>,
    /// Big-endian, as `ibv_wc.imm_data`.
    pub read_imm_data: Option<CqExReadU32>,
    pub read_qp_num: Option<CqExReadU32>,
    pub read_src_qp: Option<CqExReadU32>,
    pub read_wc_flags: Option<CqExReadU32>,
    pub read_slid: Option<CqExReadU32>,
    pub read_sl: Option<CqExReadU8>,
    pub read_dlid_path_bits: Option<CqExReadU8>,
    pub read_completion_ts: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
    pub read_cvlan: UnusedOp,
    pub read_flow_tag: UnusedOp,
    pub read_tm_info: UnusedOp,
    pub read_completion_wallclock_ns: Option<unsafe extern "C" fn(*mut ibv_cq_ex) -> u64>,
}

/// `struct mlx5dv_cq_init_attr` (`mlx5dv_create_cq`'s vendor attributes).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5dv_cq_init_attr {
    /// `enum mlx5dv_cq_init_attr_mask` bits.
    pub comp_mask: u64,
    /// `enum mlx5dv_cqe_comp_res_format`: exactly one bit.
    pub cqe_comp_res_format: u8,
    /// `enum mlx5dv_cq_init_attr_flags` bits.
    pub flags: u32,
    /// CQE size, with `MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE`.
    pub cqe_size: u16,
}

/// `MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE`.
pub const MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE: u64 = 1 << 0;

/// `struct mlx5dv_cqe_comp_caps`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct mlx5dv_cqe_comp_caps {
    /// The most CQEs one compressed session carries (0: no compression).
    pub max_num: u32,
    /// `enum mlx5dv_cqe_comp_res_format` bits the device supports.
    pub supported_format: u32,
}

/// The head of `struct mlx5dv_context`, up to `cqe_comp_caps`: what `mlx5dv_query_device`
/// writes when `comp_mask` asks for `MLX5DV_CONTEXT_MASK_CQE_COMPRESION` alone. Pass it at
/// the start of a buffer of [`MLX5DV_CONTEXT_ROOM`] bytes (the whole struct grows with
/// rdma-core).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5dv_context_head {
    /// `version`.
    pub version: u8,
    /// `flags`.
    pub flags: u64,
    /// `comp_mask`: in, the fields asked for; out, those filled.
    pub comp_mask: u64,
    /// `cqe_comp_caps`.
    pub cqe_comp_caps: mlx5dv_cqe_comp_caps,
}

/// Bytes to give `mlx5dv_query_device` for its `struct mlx5dv_context` (152 in rdma-core 44;
/// room for later versions).
pub const MLX5DV_CONTEXT_ROOM: usize = 512;

/// `MLX5DV_CONTEXT_MASK_CQE_COMPRESION` (sic).
pub const MLX5DV_CONTEXT_MASK_CQE_COMPRESION: u64 = 1 << 0;

// Layouts checked against rdma-core 44's `mlx5dv.h` (gcc, x86_64).
const _: () = assert!(size_of::<mlx5dv_cq_init_attr>() == 24);
const _: () = assert!(core::mem::offset_of!(mlx5dv_cq_init_attr, cqe_comp_res_format) == 8);
const _: () = assert!(core::mem::offset_of!(mlx5dv_cq_init_attr, flags) == 12);
const _: () = assert!(core::mem::offset_of!(mlx5dv_cq_init_attr, cqe_size) == 16);
const _: () = assert!(core::mem::offset_of!(mlx5dv_context_head, cqe_comp_caps) == 24);
const _: () = assert!(size_of::<mlx5dv_context_head>() <= MLX5DV_CONTEXT_ROOM);

// Raw Ethernet: receive work queues, indirection tables, RSS QPs and flow rules (the
// calls that reach them are in `eth.rs`).

/// `struct ibv_rss_caps`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_rss_caps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `IBV_DEVICE_RAW_IP_CSUM` (in `ibv_device_attr.device_cap_flags`).
pub const IBV_DEVICE_RAW_IP_CSUM: u32 = 1 << 26;
/// `IBV_DEVICE_MANAGED_FLOW_STEERING`.
pub const IBV_DEVICE_MANAGED_FLOW_STEERING: u32 = 1 << 29;
/// `IBV_RAW_PACKET_CAP_IP_CSUM`.
pub const IBV_RAW_PACKET_CAP_IP_CSUM: u32 = 1 << 2;

/// `IBV_QP_INIT_ATTR_IND_TABLE`.
pub const IBV_QP_INIT_ATTR_IND_TABLE: u32 = 1 << 4;
/// `IBV_QP_INIT_ATTR_RX_HASH`.
pub const IBV_QP_INIT_ATTR_RX_HASH: u32 = 1 << 5;
/// `IBV_RX_HASH_FUNC_TOEPLITZ`.
pub const IBV_RX_HASH_FUNC_TOEPLITZ: u8 = 1 << 0;

/// `IBV_WQT_RQ`.
pub const IBV_WQT_RQ: c_uint = 0;
/// `IBV_WQS_RESET`.
pub const IBV_WQS_RESET: c_uint = 0;
/// `IBV_WQS_RDY`.
pub const IBV_WQS_RDY: c_uint = 1;
/// `IBV_WQ_ATTR_STATE`.
pub const IBV_WQ_ATTR_STATE: u32 = 1 << 0;
/// `MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ`.
pub const MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ: u64 = 1 << 0;

/// `struct ibv_wq`.
#[repr(C)]
pub struct ibv_wq {
    pub context: *mut ibv_context,
    pub wq_context: *mut c_void,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub wq_num: u32,
    pub handle: u32,
    pub state: c_uint,
    pub wq_type: c_uint,
    pub post_recv: Option<WqPostRecvFn>,
    pub mutex: libc::pthread_mutex_t,
    pub cond: libc::pthread_cond_t,
    pub events_completed: u32,
    pub comp_mask: u32,
}

/// `ibv_wq.post_recv`.
pub type WqPostRecvFn =
    unsafe extern "C" fn(*mut ibv_wq, *mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int;

/// `struct ibv_wq_init_attr`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_wq_init_attr {
    pub wq_context: *mut c_void,
    pub wq_type: c_uint,
    pub max_wr: u32,
    pub max_sge: u32,
    pub pd: *mut ibv_pd,
    pub cq: *mut ibv_cq,
    pub comp_mask: u32,
    pub create_flags: u32,
}

/// `struct ibv_wq_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_wq_attr {
    pub attr_mask: u32,
    pub wq_state: c_uint,
    pub curr_wq_state: c_uint,
    pub flags: u32,
    pub flags_mask: u32,
}

/// `struct ibv_rwq_ind_table`.
#[repr(C)]
pub struct ibv_rwq_ind_table {
    pub context: *mut ibv_context,
    pub ind_tbl_handle: c_int,
    pub ind_tbl_num: c_int,
    pub comp_mask: u32,
}

/// `struct ibv_rwq_ind_table_init_attr`.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct ibv_rwq_ind_table_init_attr {
    pub log_ind_tbl_size: u32,
    pub ind_tbl: *mut *mut ibv_wq,
    pub comp_mask: u32,
}

/// `struct mlx5dv_striding_rq_init_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5dv_striding_rq_init_attr {
    pub single_stride_log_num_of_bytes: u32,
    pub single_wqe_log_num_of_strides: u32,
    pub two_byte_shift_en: u8,
}

/// `struct mlx5dv_wq_init_attr`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct mlx5dv_wq_init_attr {
    pub comp_mask: u64,
    pub striding_rq_attrs: mlx5dv_striding_rq_init_attr,
}

/// `struct mlx5dv_rwq`: what `mlx5dv_init_obj(MLX5DV_OBJ_RWQ)` reports of a work queue.
#[derive(Clone, Copy, Debug)]
#[repr(C)]
pub struct mlx5dv_rwq {
    pub buf: *mut c_void,
    pub dbrec: *mut u32,
    pub wqe_cnt: u32,
    pub stride: u32,
    pub comp_mask: u64,
}

/// `struct ibv_flow_attr`; the specs follow it in memory.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_flow_attr {
    pub comp_mask: u32,
    pub r#type: c_uint,
    pub size: u16,
    pub priority: u16,
    pub num_of_specs: u8,
    pub port: u8,
    pub flags: u32,
}

/// `IBV_FLOW_ATTR_NORMAL`.
pub const IBV_FLOW_ATTR_NORMAL: c_uint = 0;
/// `IBV_FLOW_SPEC_ETH`.
pub const IBV_FLOW_SPEC_ETH: c_uint = 0x20;
/// `IBV_FLOW_SPEC_IPV4_EXT`.
pub const IBV_FLOW_SPEC_IPV4_EXT: c_uint = 0x32;
/// `IBV_FLOW_SPEC_TCP`.
pub const IBV_FLOW_SPEC_TCP: c_uint = 0x40;
/// `IBV_FLOW_SPEC_UDP`.
pub const IBV_FLOW_SPEC_UDP: c_uint = 0x41;
/// `IBV_FLOW_SPEC_ACTION_TAG`.
pub const IBV_FLOW_SPEC_ACTION_TAG: c_uint = 0x1000;

/// `struct ibv_flow_eth_filter` (network byte order).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_flow_eth_filter {
    pub dst_mac: [u8; 6],
    pub src_mac: [u8; 6],
    pub ether_type: u16,
    pub vlan_tag: u16,
}

/// `struct ibv_flow_spec_eth`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_flow_spec_eth {
    pub r#type: c_uint,
    pub size: u16,
    pub val: ibv_flow_eth_filter,
    pub mask: ibv_flow_eth_filter,
}

/// `struct ibv_flow_ipv4_ext_filter` (network byte order).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_flow_ipv4_ext_filter {
    pub src_ip: u32,
    pub dst_ip: u32,
    pub proto: u8,
    pub tos: u8,
    pub ttl: u8,
    pub flags: u8,
}

/// `struct ibv_flow_spec_ipv4_ext`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_flow_spec_ipv4_ext {
    pub r#type: c_uint,
    pub size: u16,
    pub val: ibv_flow_ipv4_ext_filter,
    pub mask: ibv_flow_ipv4_ext_filter,
}

/// `struct ibv_flow_tcp_udp_filter` (network byte order).
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_flow_tcp_udp_filter {
    pub dst_port: u16,
    pub src_port: u16,
}

/// `struct ibv_flow_spec_tcp_udp`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_flow_spec_tcp_udp {
    pub r#type: c_uint,
    pub size: u16,
    pub val: ibv_flow_tcp_udp_filter,
    pub mask: ibv_flow_tcp_udp_filter,
}

/// `struct ibv_flow_spec_action_tag`.
#[derive(Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct ibv_flow_spec_action_tag {
    pub r#type: c_uint,
    pub size: u16,
    pub tag_id: u32,
}

/// `struct ibv_flow`.
#[repr(C)]
pub struct ibv_flow {
    pub comp_mask: u32,
    pub context: *mut ibv_context,
    pub handle: u32,
}

/// `verbs_context.create_wq`.
pub type CreateWqFn = unsafe extern "C" fn(*mut ibv_context, *mut ibv_wq_init_attr) -> *mut ibv_wq;
/// `verbs_context.modify_wq`.
pub type ModifyWqFn = unsafe extern "C" fn(*mut ibv_wq, *mut ibv_wq_attr) -> c_int;
/// `verbs_context.destroy_wq`.
pub type DestroyWqFn = unsafe extern "C" fn(*mut ibv_wq) -> c_int;
/// `verbs_context.create_rwq_ind_table`.
pub type CreateRwqIndTableFn = unsafe extern "C" fn(
    *mut ibv_context,
    *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table;
/// `verbs_context.destroy_rwq_ind_table`.
pub type DestroyRwqIndTableFn = unsafe extern "C" fn(*mut ibv_rwq_ind_table) -> c_int;
/// `verbs_context.ibv_create_flow`.
pub type CreateFlowFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_flow_attr) -> *mut ibv_flow;
/// `verbs_context.ibv_destroy_flow`.
pub type DestroyFlowFn = unsafe extern "C" fn(*mut ibv_flow) -> c_int;
/// `verbs_context.create_qp_ex`.
pub type CreateQpExFn =
    unsafe extern "C" fn(*mut ibv_context, *mut ibv_qp_init_attr_ex) -> *mut ibv_qp;

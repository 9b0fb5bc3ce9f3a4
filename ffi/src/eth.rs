//! Raw Ethernet in libibverbs and libmlx5: receive work queues (`ibv_create_wq`,
//! `mlx5dv_create_wq` with striding parameters), indirection tables, RSS QPs
//! (`ibv_create_qp_ex` with `rx_hash_conf`) and flow rules (`ibv_create_flow`), with the
//! static inline calls of `verbs.h` that reach them through `struct verbs_context`, written
//! the way the header writes them.
// Every struct, field and constant here carries the name it has in `<infiniband/verbs.h>` or
// `<infiniband/mlx5dv.h>`, where its meaning is documented.
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_int, c_uint, c_void};

use crate::types::{
    ibv_context, ibv_cq, ibv_pd, ibv_qp, ibv_qp_init_attr_ex, ibv_recv_wr, verbs_context,
};

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

/// The entry of `ctx`'s `struct verbs_context` that `pick` reads, at byte `op_offset`, when
/// the provider's copy reaches it (`verbs_get_ctx_op`).
///
/// # Safety
///
/// `ctx` is a live context.
unsafe fn ctx_op<F>(
    ctx: *mut ibv_context,
    op_offset: usize,
    pick: impl FnOnce(&verbs_context) -> Option<F>,
) -> Option<F> {
    // SAFETY: (caller) a live context; the entry is read only when the provider has it.
    unsafe { crate::verbs_ctx(ctx, op_offset).and_then(|v| pick(&*v)) }
}

/// Sets the calling thread's `errno`.
fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// `ibv_create_wq` as `verbs.h` defines it (it also initialises the WQ's event mutex and
/// condition, which libibverbs' `ibv_destroy_wq` path expects): null with `errno` set on
/// failure, `EOPNOTSUPP` when the provider has no entry.
///
/// # Safety
///
/// `ctx` is a live context; `attr` is valid.
pub unsafe fn ibv_create_wq(ctx: *mut ibv_context, attr: *mut ibv_wq_init_attr) -> *mut ibv_wq {
    // SAFETY: (caller) a live context.
    let f = unsafe {
        ctx_op(ctx, core::mem::offset_of!(verbs_context, create_wq), |v| {
            v.create_wq
        })
    };
    let Some(f) = f else {
        set_errno(libc::EOPNOTSUPP);
        return core::ptr::null_mut();
    };
    // SAFETY: the provider's entry, with the arguments the caller vouched for.
    let wq = unsafe { f(ctx, attr) };
    if !wq.is_null() {
        // SAFETY: a WQ the provider just made; `attr` is valid (caller).
        unsafe { init_wq_events(wq, (*attr).wq_context) };
    }
    wq
}

/// What `verbs.h`'s `ibv_create_wq` does to a new WQ, also for one `mlx5dv_create_wq` made.
///
/// # Safety
///
/// `wq` is a WQ just created, not yet shared.
pub unsafe fn init_wq_events(wq: *mut ibv_wq, wq_context: *mut c_void) {
    // SAFETY: (caller) a fresh WQ, ours alone.
    unsafe {
        (*wq).wq_context = wq_context;
        (*wq).events_completed = 0;
        libc::pthread_mutex_init(&raw mut (*wq).mutex, core::ptr::null());
        libc::pthread_cond_init(&raw mut (*wq).cond, core::ptr::null());
    }
}

/// `ibv_modify_wq` as `verbs.h` defines it.
///
/// # Safety
///
/// `wq` is a live WQ; `attr` is valid.
pub unsafe fn ibv_modify_wq(wq: *mut ibv_wq, attr: *mut ibv_wq_attr) -> c_int {
    // SAFETY: (caller) a live WQ of a live context.
    let f = unsafe {
        ctx_op(
            (*wq).context,
            core::mem::offset_of!(verbs_context, modify_wq),
            |v| v.modify_wq,
        )
    };
    match f {
        // SAFETY: the provider's entry, with the arguments the caller vouched for.
        Some(f) => unsafe { f(wq, attr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_destroy_wq` as `verbs.h` defines it.
///
/// # Safety
///
/// `wq` is a live WQ that nothing uses any more; it is gone after a successful call.
pub unsafe fn ibv_destroy_wq(wq: *mut ibv_wq) -> c_int {
    // SAFETY: (caller) a live WQ of a live context.
    let f = unsafe {
        ctx_op(
            (*wq).context,
            core::mem::offset_of!(verbs_context, destroy_wq),
            |v| v.destroy_wq,
        )
    };
    match f {
        // SAFETY: the provider's entry, with the WQ the caller vouched for.
        Some(f) => unsafe { f(wq) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_wq_recv` as `verbs.h` defines it: `wq->post_recv(wq, wr, bad_wr)`.
///
/// # Safety
///
/// `wq` is a live WQ; `wr` a valid chain whose scatter lists are valid; `bad_wr` writable.
#[inline(always)]
pub unsafe fn ibv_post_wq_recv(
    wq: *mut ibv_wq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: (caller) a live WQ.
    match unsafe { (*wq).post_recv } {
        // SAFETY: the provider's entry, with the arguments the caller vouched for.
        Some(f) => unsafe { f(wq, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_create_rwq_ind_table` as `verbs.h` defines it.
///
/// # Safety
///
/// `ctx` is a live context; `attr` is valid and names `2^log_ind_tbl_size` live WQs.
pub unsafe fn ibv_create_rwq_ind_table(
    ctx: *mut ibv_context,
    attr: *mut ibv_rwq_ind_table_init_attr,
) -> *mut ibv_rwq_ind_table {
    // SAFETY: (caller) a live context.
    let f = unsafe {
        ctx_op(
            ctx,
            core::mem::offset_of!(verbs_context, create_rwq_ind_table),
            |v| v.create_rwq_ind_table,
        )
    };
    match f {
        // SAFETY: the provider's entry, with the arguments the caller vouched for.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            core::ptr::null_mut()
        }
    }
}

/// `ibv_destroy_rwq_ind_table` as `verbs.h` defines it.
///
/// # Safety
///
/// `t` is a live table no QP uses any more.
pub unsafe fn ibv_destroy_rwq_ind_table(t: *mut ibv_rwq_ind_table) -> c_int {
    // SAFETY: (caller) a live table of a live context.
    let f = unsafe {
        ctx_op(
            (*t).context,
            core::mem::offset_of!(verbs_context, destroy_rwq_ind_table),
            |v| v.destroy_rwq_ind_table,
        )
    };
    match f {
        // SAFETY: the provider's entry, with the table the caller vouched for.
        Some(f) => unsafe { f(t) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_create_qp_ex` as `verbs.h` defines it, for the attributes that need the extended
/// entry (an indirection table, a hash): the provider's `create_qp_ex`.
///
/// # Safety
///
/// `ctx` is a live context; `attr` is valid.
pub unsafe fn ibv_create_qp_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: (caller) a live context.
    let f = unsafe {
        ctx_op(
            ctx,
            core::mem::offset_of!(verbs_context, create_qp_ex),
            |v| v.create_qp_ex,
        )
    };
    match f {
        // SAFETY: the provider's entry, with the arguments the caller vouched for.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            core::ptr::null_mut()
        }
    }
}

/// `ibv_create_flow` as `verbs.h` defines it: `attr` is followed in memory by its
/// `num_of_specs` specs, `attr.size` bytes in all.
///
/// # Safety
///
/// `qp` is a live QP; `attr` points to the attribute and its specs.
pub unsafe fn ibv_create_flow(qp: *mut ibv_qp, attr: *mut ibv_flow_attr) -> *mut ibv_flow {
    // SAFETY: (caller) a live QP of a live context.
    let f = unsafe {
        ctx_op(
            (*qp).context,
            core::mem::offset_of!(verbs_context, ibv_create_flow),
            |v| v.ibv_create_flow,
        )
    };
    match f {
        // SAFETY: the provider's entry, with the arguments the caller vouched for.
        Some(f) => unsafe { f(qp, attr) },
        None => {
            set_errno(libc::EOPNOTSUPP);
            core::ptr::null_mut()
        }
    }
}

/// `ibv_destroy_flow` as `verbs.h` defines it.
///
/// # Safety
///
/// `flow` is a live rule, gone after a successful call.
pub unsafe fn ibv_destroy_flow(flow: *mut ibv_flow) -> c_int {
    // SAFETY: (caller) a live rule of a live context.
    let f = unsafe {
        ctx_op(
            (*flow).context,
            core::mem::offset_of!(verbs_context, ibv_destroy_flow),
            |v| v.ibv_destroy_flow,
        )
    };
    match f {
        // SAFETY: the provider's entry, with the rule the caller vouched for.
        Some(f) => unsafe { f(flow) },
        None => libc::EOPNOTSUPP,
    }
}

const _: () = {
    use core::mem::{offset_of, size_of};
    // The sizes and offsets of rdma-core 44 on 64-bit Linux (also checked by `zverbs-abi`).
    assert!(size_of::<ibv_wq>() == 152 && offset_of!(ibv_wq, post_recv) == 48);
    assert!(size_of::<ibv_wq_init_attr>() == 48 && offset_of!(ibv_wq_init_attr, pd) == 24);
    assert!(size_of::<ibv_wq_attr>() == 20);
    assert!(size_of::<ibv_rwq_ind_table_init_attr>() == 24);
    assert!(size_of::<ibv_flow_attr>() == 20);
    assert!(size_of::<ibv_flow_spec_eth>() == 40 && offset_of!(ibv_flow_spec_eth, mask) == 22);
    assert!(size_of::<ibv_flow_spec_ipv4_ext>() == 32);
    assert!(offset_of!(ibv_flow_spec_ipv4_ext, mask) == 20);
    assert!(
        size_of::<ibv_flow_spec_tcp_udp>() == 16 && offset_of!(ibv_flow_spec_tcp_udp, mask) == 10
    );
    assert!(size_of::<ibv_flow_spec_action_tag>() == 12);
    assert!(size_of::<mlx5dv_wq_init_attr>() == 24 && size_of::<mlx5dv_rwq>() == 32);
    assert!(size_of::<ibv_rss_caps>() == 32);
};

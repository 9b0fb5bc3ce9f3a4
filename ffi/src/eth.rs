//! Raw Ethernet in libibverbs and libmlx5: receive work queues (`ibv_create_wq`,
//! `mlx5dv_create_wq` with striding parameters), indirection tables, RSS QPs
//! (`ibv_create_qp_ex` with `rx_hash_conf`) and flow rules (`ibv_create_flow`), with the
//! static inline calls of `verbs.h` that reach them through `struct verbs_context`, written
//! the way the header writes them.
// Every struct, field and constant here carries the name it has in `<infiniband/verbs.h>` or
// `<infiniband/mlx5dv.h>`, where its meaning is documented.
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_int, c_void};

pub use crate::types::{
    CreateFlowFn, CreateQpExFn, CreateRwqIndTableFn, CreateWqFn, DestroyFlowFn,
    DestroyRwqIndTableFn, DestroyWqFn, IBV_DEVICE_MANAGED_FLOW_STEERING, IBV_DEVICE_RAW_IP_CSUM,
    IBV_FLOW_ATTR_NORMAL, IBV_FLOW_SPEC_ACTION_TAG, IBV_FLOW_SPEC_ETH, IBV_FLOW_SPEC_IPV4_EXT,
    IBV_FLOW_SPEC_TCP, IBV_FLOW_SPEC_UDP, IBV_QP_INIT_ATTR_IND_TABLE, IBV_QP_INIT_ATTR_RX_HASH,
    IBV_RAW_PACKET_CAP_IP_CSUM, IBV_RX_HASH_FUNC_TOEPLITZ, IBV_WQ_ATTR_STATE, IBV_WQS_RDY,
    IBV_WQS_RESET, IBV_WQT_RQ, MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ, ModifyWqFn, WqPostRecvFn,
    ibv_flow, ibv_flow_attr, ibv_flow_eth_filter, ibv_flow_ipv4_ext_filter,
    ibv_flow_spec_action_tag, ibv_flow_spec_eth, ibv_flow_spec_ipv4_ext, ibv_flow_spec_tcp_udp,
    ibv_flow_tcp_udp_filter, ibv_rss_caps, ibv_rwq_ind_table, ibv_rwq_ind_table_init_attr, ibv_wq,
    ibv_wq_attr, ibv_wq_init_attr, mlx5dv_rwq, mlx5dv_striding_rq_init_attr, mlx5dv_wq_init_attr,
};
use crate::types::{ibv_context, ibv_qp, ibv_qp_init_attr_ex, ibv_recv_wr, verbs_context};

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

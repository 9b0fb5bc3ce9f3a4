//! The foreign interface to rdma-core: hand-written `repr(C)` declarations ([`types`], [`cm`])
//! and the libraries loaded at run time ([`lib`]).
//!
//! Nothing here links against rdma-core: `libibverbs.so.1`, `libmlx5.so.1` and
//! `librdmacm.so.1` are opened with `dlopen` on first use, so the crate builds and its
//! software paths run on machines without them. The data-path calls that `verbs.h` defines
//! as static inline functions (`ibv_post_send`, `ibv_post_recv`, `ibv_poll_cq`,
//! `ibv_req_notify_cq`) are reproduced here the way the header writes them: through the
//! function table in `ibv_context.ops`.
//!
//! This module is the crate's FFI leaf: its declarations are `pub` for the ABI probe (crate
//! `zverbs-abi`), not for applications.
#![allow(unsafe_code)]

pub mod cm;
pub mod lib;
pub mod types;

use core::ffi::c_int;

use types::{ibv_cq, ibv_qp, ibv_recv_wr, ibv_send_wr, ibv_wc};

/// `ibv_post_send` as `verbs.h` defines it: `qp->context->ops.post_send(qp, wr, bad_wr)`.
///
/// Returns `EOPNOTSUPP` if the provider left the entry empty.
///
/// # Safety
///
/// `qp` is a live QP whose `context` points to a live `ibv_context`; `wr` is a valid chain of
/// requests whose scatter lists are valid; `bad_wr` is writable.
#[inline(always)]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: (caller) `qp` and its context are live.
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the provider's entry, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_post_recv` as `verbs.h` defines it: `qp->context->ops.post_recv(qp, wr, bad_wr)`.
///
/// # Safety
///
/// As [`ibv_post_send`].
#[inline(always)]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: (caller) `qp` and its context are live.
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the provider's entry, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(qp, wr, bad_wr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_poll_cq` as `verbs.h` defines it: `cq->context->ops.poll_cq(cq, num_entries, wc)`.
/// Returns the number of completions, or a negative value on error.
///
/// # Safety
///
/// `cq` is a live CQ whose context is live; `wc` has room for `num_entries` entries.
#[inline(always)]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: (caller) `cq` and its context are live.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the provider's entry, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(cq, num_entries, wc) },
        None => -libc::EOPNOTSUPP,
    }
}

/// `ibv_req_notify_cq` as `verbs.h` defines it: `cq->context->ops.req_notify_cq(cq, solicited)`.
///
/// # Safety
///
/// `cq` is a live CQ whose context is live.
#[inline]
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: (caller) `cq` and its context are live.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: the provider's entry, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(cq, solicited_only) },
        None => libc::EOPNOTSUPP,
    }
}

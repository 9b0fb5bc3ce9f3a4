//! # zverbs-ffi: rdma-core, bound by hand and loaded at run time
//!
//! The parts of rdma-core that zverbs uses, declared by hand: libibverbs
//! (`<infiniband/verbs.h>`), the mlx5 provider's direct verbs (`<infiniband/mlx5dv.h>`) and
//! librdmacm (`<rdma/rdma_cma.h>`). One binding serves the `zverbs` library (control path and
//! libibverbs fallback), its emulated ConnectX (`zverbs-emu`) and its benchmarks.
//!
//! - [`types`]: `repr(C)` mirrors of the verbs and mlx5dv structs, field for field as in
//!   rdma-core 44, and the constants used with them;
//! - [`cm`]: the same for librdmacm;
//! - [`load`]: `libibverbs.so.1`, `libmlx5.so.1` and `librdmacm.so.1`, each opened with
//!   `dlopen` on first use and resolved into a table of function pointers;
//! - [`pmix`]: the PMIx client library (`libpmix.so.2`, `<pmix.h>`), opened the same way, for
//!   jobs whose processes a launcher such as `mpirun` started;
//! - at the crate root, the calls that `verbs.h` defines as static inline functions
//!   ([`ibv_post_send`], [`ibv_post_recv`], [`ibv_post_srq_recv`], [`ibv_poll_cq`], [`ibv_req_notify_cq`],
//!   [`ibv_alloc_td`], [`ibv_dealloc_td`], [`ibv_alloc_parent_domain`]), written the way the
//!   header writes them: through the provider's function tables in `ibv_context.ops` and
//!   `struct verbs_context`.
//!
//! Nothing here links against rdma-core, and there is no build script: a program that depends
//! on this crate builds on any machine, and a library that is not installed is a
//! [`load::LoadError`] naming the Debian package that provides it, not a link failure.
//!
//! ## Quick start
//!
//! ```no_run
//! use zverbs_ffi::load;
//!
//! let verbs = load::verbs()?;
//! let mut n = 0;
//! // SAFETY: `n` receives the number of devices; the list is freed below.
//! let list = unsafe { (verbs.ibv_get_device_list)(&mut n) };
//! for i in 0..usize::try_from(n).unwrap_or(0) {
//!     // SAFETY: the list holds `n` devices; the name is a NUL-terminated string.
//!     let name = unsafe { core::ffi::CStr::from_ptr((verbs.ibv_get_device_name)(*list.add(i))) };
//!     println!("{}", name.to_string_lossy());
//! }
//! if !list.is_null() {
//!     // SAFETY: the list from `ibv_get_device_list`, freed once.
//!     unsafe { (verbs.ibv_free_device_list)(list) };
//! }
//! # Ok::<(), load::LoadError>(())
//! ```
//!
//! ## What is declared, and how it is checked
//!
//! Only what zverbs uses: about twenty functions of libibverbs, three of libmlx5, the
//! connection manager's calls, and the structs they take. Names are the headers' own (hence
//! `non_camel_case_types`); a field or constant is documented by its header. Every size,
//! alignment and field offset, and every constant's value, is compared with what a C compiler
//! computes from the installed headers by the workspace's `zverbs-abi` crate
//! (`cargo run -p zverbs-abi`). The declarations follow rdma-core 44 (Debian 12) on 64-bit
//! Linux.
//!
//! The out-structs of `mlx5dv_init_obj` (`struct mlx5dv_qp`, `struct mlx5dv_cq`) belong to the
//! mlx5 direct path that reads them, not to this binding: [`types::mlx5dv_obj`] takes them as
//! type parameters.
//!
//! ## Stability
//!
//! This is a raw binding: its items follow the C headers, not the evolution of a Rust API.
//! Declarations are added when zverbs needs them, and a layout changes if the headers' does.
//! Applications use the safe API of the `zverbs` crate, which re-exports this crate as
//! `zverbs::ffi` for code that needs a raw handle.
//!
//! ## Thread safety
//!
//! The library tables ([`load::Verbs`], [`load::Mlx5`], [`load::Rdmacm`]) are opened once per
//! process and shared as `&'static` references; their function pointers may be called from
//! any thread, with the thread-safety rules of rdma-core itself.
//!
//! ## Minimum supported Rust version
//!
//! Rust 1.95: the manifest's `rust-version`, checked in CI by building the published crates
//! with the 1.95.0 toolchain (`cargo xtask test`, stage `crates`).

/// The README's example, compiled and run as a doc-test so that it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub mod cm;
pub mod eth;
pub mod load;
pub mod pmix;
pub mod types;

use core::ffi::c_int;

use types::{
    VERBS_ABI_IS_EXTENDED, ibv_context, ibv_cq, ibv_cq_ex, ibv_cq_init_attr_ex, ibv_device_attr_ex,
    ibv_parent_domain_init_attr, ibv_pd, ibv_qp, ibv_recv_wr, ibv_send_wr, ibv_srq, ibv_td,
    ibv_td_init_attr, ibv_values_ex, ibv_wc, verbs_context,
};

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

/// `ibv_post_srq_recv` as `verbs.h` defines it:
/// `srq->context->ops.post_srq_recv(srq, wr, bad_wr)`.
///
/// # Safety
///
/// `srq` is a live SRQ whose `context` points to a live `ibv_context`; `wr` is a valid chain
/// of requests whose scatter lists are valid; `bad_wr` is writable.
#[inline(always)]
pub unsafe fn ibv_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: (caller) `srq` and its context are live.
    match unsafe { (*(*srq).context).ops.post_srq_recv } {
        // SAFETY: the provider's entry, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(srq, wr, bad_wr) },
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

/// `verbs_get_ctx_op(ctx, op)` as `verbs.h` defines it: the `struct verbs_context` that
/// `ctx` is embedded in, if it is one and the provider's copy reaches the entry at byte
/// `op_offset` (its `offset_of!` in [`verbs_context`]).
///
/// # Safety
///
/// `ctx` is a live context.
unsafe fn verbs_ctx(ctx: *mut ibv_context, op_offset: usize) -> Option<*mut verbs_context> {
    // SAFETY: (caller) a live context.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    let at = core::mem::offset_of!(verbs_context, context);
    // SAFETY: an extended context is the last field of a `verbs_context` (verbs.h), so the
    // struct starts `at` bytes before it.
    let vctx = unsafe { ctx.cast::<u8>().sub(at) }.cast::<verbs_context>();
    // SAFETY: `sz` is the field just before `context`, present in every version.
    let sz = unsafe { (*vctx).sz };
    (sz >= core::mem::size_of::<verbs_context>() - op_offset).then_some(vctx)
}

/// `ibv_query_device_ex` as `verbs.h` defines it, without its fall-back to
/// `ibv_query_device`: the provider's `query_device_ex`, or `EOPNOTSUPP`.
///
/// # Safety
///
/// `ctx` is a live context; `attr` is writable.
pub unsafe fn ibv_query_device_ex(ctx: *mut ibv_context, attr: *mut ibv_device_attr_ex) -> c_int {
    // SAFETY: (caller) a live context; the entry is read only when the provider has it.
    let f = unsafe {
        verbs_ctx(ctx, core::mem::offset_of!(verbs_context, query_device_ex))
            .and_then(|v| (*v).query_device_ex)
    };
    match f {
        // SAFETY: the provider's entry, with a writable struct of the size it is told.
        Some(f) => unsafe {
            f(
                ctx,
                core::ptr::null(),
                attr,
                core::mem::size_of::<ibv_device_attr_ex>(),
            )
        },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_query_rt_values_ex` as `verbs.h` defines it: the provider's `query_rt_values`, or
/// `EOPNOTSUPP`.
///
/// # Safety
///
/// `ctx` is a live context; `values` is writable.
pub unsafe fn ibv_query_rt_values_ex(ctx: *mut ibv_context, values: *mut ibv_values_ex) -> c_int {
    // SAFETY: (caller) a live context; the entry is read only when the provider has it.
    let f = unsafe {
        verbs_ctx(ctx, core::mem::offset_of!(verbs_context, query_rt_values))
            .and_then(|v| (*v).query_rt_values)
    };
    match f {
        // SAFETY: the provider's entry, with a writable struct.
        Some(f) => unsafe { f(ctx, values) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_create_cq_ex` as `verbs.h` defines it: the provider's `create_cq_ex`, or null with
/// `errno` `EOPNOTSUPP` (also when `attr` asks for a field the header's version rejects).
///
/// # Safety
///
/// `ctx` is a live context; `attr` is valid.
pub unsafe fn ibv_create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: (caller) a live context; the entry is read only when the provider has it.
    let f = unsafe {
        verbs_ctx(ctx, core::mem::offset_of!(verbs_context, create_cq_ex))
            .and_then(|v| (*v).create_cq_ex)
    };
    match f {
        // SAFETY: the provider's entry, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            // SAFETY: the calling thread's errno.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            core::ptr::null_mut()
        }
    }
}

/// `ibv_alloc_td` as `verbs.h` defines it: the provider's `alloc_td`, or null with `errno`
/// `EOPNOTSUPP` when it has none.
///
/// # Safety
///
/// `ctx` is a live context; `attr` is a valid attribute struct.
pub unsafe fn ibv_alloc_td(ctx: *mut ibv_context, attr: *mut ibv_td_init_attr) -> *mut ibv_td {
    // SAFETY: (caller) a live context; the entry is read only when the provider's struct has
    // it.
    let f = unsafe {
        verbs_ctx(ctx, core::mem::offset_of!(verbs_context, alloc_td)).and_then(|v| (*v).alloc_td)
    };
    match f {
        // SAFETY: the provider's entry, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            // SAFETY: the calling thread's errno.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            core::ptr::null_mut()
        }
    }
}

/// `ibv_dealloc_td` as `verbs.h` defines it.
///
/// # Safety
///
/// `td` is a live thread domain no parent domain uses any more.
pub unsafe fn ibv_dealloc_td(td: *mut ibv_td) -> c_int {
    // SAFETY: (caller) a live thread domain of a live context.
    let f = unsafe {
        verbs_ctx(
            (*td).context,
            core::mem::offset_of!(verbs_context, dealloc_td),
        )
        .and_then(|v| (*v).dealloc_td)
    };
    match f {
        // SAFETY: the provider's entry, called with the argument the caller vouched for.
        Some(f) => unsafe { f(td) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_alloc_parent_domain` as `verbs.h` defines it: the provider's `alloc_parent_domain`,
/// or null with `errno` `EOPNOTSUPP`. The parent domain is freed with `ibv_dealloc_pd`.
///
/// # Safety
///
/// `ctx` is a live context; `attr` is valid and names a live PD (and thread domain) of it.
pub unsafe fn ibv_alloc_parent_domain(
    ctx: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    // SAFETY: (caller) a live context; the entry is read only when the provider has it.
    let f = unsafe {
        verbs_ctx(
            ctx,
            core::mem::offset_of!(verbs_context, alloc_parent_domain),
        )
        .and_then(|v| (*v).alloc_parent_domain)
    };
    match f {
        // SAFETY: the provider's entry, called with the arguments the caller vouched for.
        Some(f) => unsafe { f(ctx, attr) },
        None => {
            // SAFETY: the calling thread's errno.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            core::ptr::null_mut()
        }
    }
}

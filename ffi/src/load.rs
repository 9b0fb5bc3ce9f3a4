//! rdma-core's libraries, opened at run time.
//!
//! Each library is opened once, on first use, and its symbols are resolved into a table of
//! function pointers that lives for the rest of the process. A library that cannot be opened is
//! remembered as a [`LoadError`] naming the Debian package that provides it.

use core::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use libloading::Library;

use crate::cm::{rdma_cm_event, rdma_cm_id, rdma_conn_param, rdma_event_channel};
use crate::types::*;

/// A library of rdma-core that could not be opened or lacks a symbol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot load {library} ({detail}); install the `{package}` package (rdma-core)")]
pub struct LoadError {
    /// The file that was opened (`libibverbs.so.1`, ...).
    pub library: &'static str,
    /// The Debian/Ubuntu package that installs it.
    pub package: &'static str,
    /// What the dynamic loader said.
    pub detail: String,
}

macro_rules! table {
    (
        $(#[$meta:meta])*
        $name:ident, $file:literal, $package:literal {
            $( $sym:ident : fn($($arg:ty),*) $(-> $ret:ty)? ; )*
        }
        optional {
            $( $osym:ident : fn($($oarg:ty),*) $(-> $oret:ty)? ; )*
        }
    ) => {
        $(#[$meta])*
        #[allow(missing_docs)]
        pub struct $name {
            _lib: Library,
            $( pub $sym: unsafe extern "C" fn($($arg),*) $(-> $ret)?, )*
            $( pub $osym: Option<unsafe extern "C" fn($($oarg),*) $(-> $oret)?>, )*
        }

        impl $name {
            /// The library file.
            pub const FILE: &'static str = $file;
            /// The Debian package providing it.
            pub const PACKAGE: &'static str = $package;

            /// Opens `file` and resolves every symbol.
            pub(crate) fn open(file: &'static str) -> Result<Self, LoadError> {
                let err = |detail: String| LoadError { library: file, package: $package, detail };
                // SAFETY: opening an rdma-core library runs its initialisers, which only set up
                // the library's own state.
                let lib = unsafe { Library::new(file) }.map_err(|e| err(e.to_string()))?;
                $(
                    // SAFETY: the symbol is declared with the C prototype of rdma-core 44's
                    // headers (checked by the ABI probe); the pointer is copied out and used
                    // only while `_lib` keeps the library mapped.
                    let $sym = *unsafe {
                        lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(
                            concat!(stringify!($sym), "\0").as_bytes(),
                        )
                    }
                    .map_err(|e| err(format!("{}: {e}", stringify!($sym))))?;
                )*
                $(
                    // SAFETY: as above; a missing optional symbol is `None`.
                    let $osym = unsafe {
                        lib.get::<unsafe extern "C" fn($($oarg),*) $(-> $oret)?>(
                            concat!(stringify!($osym), "\0").as_bytes(),
                        )
                    }
                    .ok()
                    .map(|s| *s);
                )*
                Ok(Self { _lib: lib, $($sym,)* $($osym,)* })
            }
        }

        impl core::fmt::Debug for $name {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(concat!(stringify!($name), "(", $file, ")"))
            }
        }
    };
}

table! {
    /// `libibverbs.so.1`.
    Verbs, "libibverbs.so.1", "libibverbs1" {
        ibv_get_device_list: fn(*mut c_int) -> *mut *mut ibv_device;
        ibv_free_device_list: fn(*mut *mut ibv_device);
        ibv_get_device_name: fn(*mut ibv_device) -> *const c_char;
        ibv_get_device_guid: fn(*mut ibv_device) -> u64;
        ibv_open_device: fn(*mut ibv_device) -> *mut ibv_context;
        ibv_close_device: fn(*mut ibv_context) -> c_int;
        ibv_query_device: fn(*mut ibv_context, *mut ibv_device_attr) -> c_int;
        ibv_query_port: fn(*mut ibv_context, u8, *mut ibv_port_attr) -> c_int;
        ibv_query_gid: fn(*mut ibv_context, u8, c_int, *mut ibv_gid) -> c_int;
        ibv_alloc_pd: fn(*mut ibv_context) -> *mut ibv_pd;
        ibv_dealloc_pd: fn(*mut ibv_pd) -> c_int;
        ibv_reg_mr: fn(*mut ibv_pd, *mut c_void, usize, c_int) -> *mut ibv_mr;
        ibv_dereg_mr: fn(*mut ibv_mr) -> c_int;
        ibv_create_cq: fn(*mut ibv_context, c_int, *mut c_void, *mut ibv_comp_channel, c_int)
            -> *mut ibv_cq;
        ibv_destroy_cq: fn(*mut ibv_cq) -> c_int;
        ibv_create_qp: fn(*mut ibv_pd, *mut ibv_qp_init_attr) -> *mut ibv_qp;
        ibv_modify_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int) -> c_int;
        ibv_query_qp: fn(*mut ibv_qp, *mut ibv_qp_attr, c_int, *mut ibv_qp_init_attr) -> c_int;
        ibv_destroy_qp: fn(*mut ibv_qp) -> c_int;
        ibv_create_ah: fn(*mut ibv_pd, *mut ibv_ah_attr) -> *mut ibv_ah;
        ibv_destroy_ah: fn(*mut ibv_ah) -> c_int;
        ibv_create_srq: fn(*mut ibv_pd, *mut ibv_srq_init_attr) -> *mut ibv_srq;
        ibv_modify_srq: fn(*mut ibv_srq, *mut ibv_srq_attr, c_int) -> c_int;
        ibv_destroy_srq: fn(*mut ibv_srq) -> c_int;
        ibv_attach_mcast: fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int;
        ibv_detach_mcast: fn(*mut ibv_qp, *const ibv_gid, u16) -> c_int;
        ibv_get_async_event: fn(*mut ibv_context, *mut ibv_async_event) -> c_int;
        ibv_ack_async_event: fn(*mut ibv_async_event);
        ibv_create_comp_channel: fn(*mut ibv_context) -> *mut ibv_comp_channel;
        ibv_destroy_comp_channel: fn(*mut ibv_comp_channel) -> c_int;
        ibv_get_cq_event: fn(*mut ibv_comp_channel, *mut *mut ibv_cq, *mut *mut c_void) -> c_int;
        ibv_ack_cq_events: fn(*mut ibv_cq, u32);
    }
    optional {
        _ibv_query_gid_ex: fn(*mut ibv_context, u32, u32, *mut ibv_gid_entry, u32, usize) -> c_int;
        ibv_qp_to_qp_ex: fn(*mut ibv_qp) -> *mut ibv_qp_ex;
    }
}

table! {
    /// `libmlx5.so.1`: the mlx5 provider's direct-verbs entry points.
    Mlx5, "libmlx5.so.1", "ibverbs-providers" {
        mlx5dv_init_obj: fn(*mut mlx5dv_obj, u64) -> c_int;
        mlx5dv_is_supported: fn(*mut ibv_device) -> bool;
        mlx5dv_create_qp: fn(*mut ibv_context, *mut ibv_qp_init_attr_ex, *mut mlx5dv_qp_init_attr)
            -> *mut ibv_qp;
    }
    optional {
        // The out-struct is `struct mlx5dv_clock_info`, which the direct path declares
        // (`zverbs_mlx5dv::prm::clock`): cast the pointer.
        mlx5dv_get_clock_info: fn(*mut ibv_context, *mut c_void) -> c_int;
        mlx5dv_qp_ex_from_ibv_qp_ex: fn(*mut ibv_qp_ex) -> *mut mlx5dv_qp_ex;
        mlx5dv_create_cq: fn(*mut ibv_context, *mut ibv_cq_init_attr_ex, *mut mlx5dv_cq_init_attr)
            -> *mut ibv_cq_ex;
        // The out-struct is a `struct mlx5dv_context` (`mlx5dv_context_head` at the start of
        // `MLX5DV_CONTEXT_ROOM` bytes).
        mlx5dv_query_device: fn(*mut ibv_context, *mut c_void) -> c_int;
        mlx5dv_create_wq: fn(*mut ibv_context, *mut crate::eth::ibv_wq_init_attr,
            *mut crate::eth::mlx5dv_wq_init_attr) -> *mut crate::eth::ibv_wq;
    }
}

table! {
    /// `librdmacm.so.1`.
    Rdmacm, "librdmacm.so.1", "librdmacm1" {
        rdma_create_event_channel: fn() -> *mut rdma_event_channel;
        rdma_destroy_event_channel: fn(*mut rdma_event_channel);
        rdma_create_id: fn(*mut rdma_event_channel, *mut *mut rdma_cm_id, *mut c_void, c_uint)
            -> c_int;
        rdma_destroy_id: fn(*mut rdma_cm_id) -> c_int;
        rdma_bind_addr: fn(*mut rdma_cm_id, *mut libc::sockaddr) -> c_int;
        rdma_listen: fn(*mut rdma_cm_id, c_int) -> c_int;
        rdma_resolve_addr: fn(*mut rdma_cm_id, *mut libc::sockaddr, *mut libc::sockaddr, c_int)
            -> c_int;
        rdma_resolve_route: fn(*mut rdma_cm_id, c_int) -> c_int;
        rdma_connect: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
        rdma_accept: fn(*mut rdma_cm_id, *mut rdma_conn_param) -> c_int;
        rdma_reject: fn(*mut rdma_cm_id, *const c_void, u8) -> c_int;
        rdma_establish: fn(*mut rdma_cm_id) -> c_int;
        rdma_disconnect: fn(*mut rdma_cm_id) -> c_int;
        rdma_get_cm_event: fn(*mut rdma_event_channel, *mut *mut rdma_cm_event) -> c_int;
        rdma_ack_cm_event: fn(*mut rdma_cm_event) -> c_int;
        rdma_event_str: fn(c_uint) -> *const c_char;
        rdma_init_qp_attr: fn(*mut rdma_cm_id, *mut ibv_qp_attr, *mut c_int) -> c_int;
        rdma_join_multicast: fn(*mut rdma_cm_id, *mut libc::sockaddr, *mut c_void) -> c_int;
        rdma_leave_multicast: fn(*mut rdma_cm_id, *mut libc::sockaddr) -> c_int;
    }
    optional {}
}

static VERBS: OnceLock<Result<Verbs, LoadError>> = OnceLock::new();
static MLX5: OnceLock<Result<Mlx5, LoadError>> = OnceLock::new();
static RDMACM: OnceLock<Result<Rdmacm, LoadError>> = OnceLock::new();

/// libibverbs, opened on first use.
///
/// # Errors
///
/// A [`LoadError`] naming `libibverbs1` when the library is not installed.
pub fn verbs() -> Result<&'static Verbs, LoadError> {
    VERBS
        .get_or_init(|| Verbs::open(Verbs::FILE))
        .as_ref()
        .map_err(Clone::clone)
}

/// libmlx5, opened on first use.
///
/// # Errors
///
/// A [`LoadError`] naming `ibverbs-providers` when the library is not installed.
pub fn mlx5() -> Result<&'static Mlx5, LoadError> {
    MLX5.get_or_init(|| Mlx5::open(Mlx5::FILE))
        .as_ref()
        .map_err(Clone::clone)
}

/// librdmacm, opened on first use.
///
/// # Errors
///
/// A [`LoadError`] naming `librdmacm1` when the library is not installed.
pub fn rdmacm() -> Result<&'static Rdmacm, LoadError> {
    RDMACM
        .get_or_init(|| Rdmacm::open(Rdmacm::FILE))
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "dlopen: Miri calls no C library")]
    fn missing_library_names_its_package() {
        let e = Verbs::open("libibverbs-does-not-exist.so.1").unwrap_err();
        assert_eq!(e.package, "libibverbs1");
        let msg = e.to_string();
        assert!(msg.contains("libibverbs-does-not-exist.so.1"), "{msg}");
        assert!(msg.contains("install the `libibverbs1` package"), "{msg}");
        let e = Mlx5::open("libmlx5-does-not-exist.so.1").unwrap_err();
        assert!(e.to_string().contains("`ibverbs-providers`"));
        let e = Rdmacm::open("librdmacm-does-not-exist.so.1").unwrap_err();
        assert!(e.to_string().contains("`librdmacm1`"));
    }

    #[test]
    #[cfg_attr(miri, ignore = "dlopen: Miri calls no C library")]
    fn library_without_a_symbol_is_refused() {
        // libc opens, but has none of the verbs symbols.
        let e = Verbs::open("libc.so.6").unwrap_err();
        assert!(e.detail.contains("ibv_get_device_list"), "{}", e.detail);
    }
}

//! The PMIx client library (`libpmix.so.2`), bound by hand and opened at run time.
//!
//! PMIx is how a job launcher (Open MPI's `mpirun`, Slurm's `srun --mpi=pmix`, PRRTE's
//! `prterun`) tells each process who it is (its namespace and rank), how large the job is,
//! and lets the processes publish small records to each other: `PMIx_Put` and `PMIx_Commit`
//! publish, `PMIx_Fence` with data collection is the barrier after which every process may
//! `PMIx_Get` every other's records. Only that much is declared here: the client calls of
//! `<pmix.h>` and the few structs of `<pmix_common.h>` they take, as in PMIx 4.2 (Debian 12's
//! `libpmix-dev`, whose headers are under `/usr/lib/<triplet>/pmix2/include`). The
//! workspace's `zverbs-abi` crate checks every size, offset and constant against the header.
//!
//! Nothing links against libpmix: [`pmix`] opens it on first use, and a machine without it is
//! a [`PmixLoadError`] naming the Debian package `libpmix2`.
// Every struct, field and constant here carries the name it has in `<pmix_common.h>`, where
// its meaning is documented; repeating each field's header comment would add nothing.
#![allow(non_camel_case_types, non_snake_case, missing_docs)]

use core::ffi::{c_char, c_int, c_void};
use std::sync::OnceLock;

use libloading::Library;

/// `PMIX_MAX_NSLEN`: a namespace is at most this many bytes, NUL excluded.
pub const PMIX_MAX_NSLEN: usize = 255;
/// `PMIX_MAX_KEYLEN`: a key is at most this many bytes, NUL excluded.
pub const PMIX_MAX_KEYLEN: usize = 511;

/// `pmix_status_t`.
pub type pmix_status_t = c_int;
/// `pmix_rank_t`.
pub type pmix_rank_t = u32;
/// `pmix_data_type_t`.
pub type pmix_data_type_t = u16;
/// `pmix_scope_t`.
pub type pmix_scope_t = u8;
/// `pmix_info_directives_t`.
pub type pmix_info_directives_t = u32;

/// `PMIX_SUCCESS`.
pub const PMIX_SUCCESS: pmix_status_t = 0;
/// `PMIX_ERR_TIMEOUT`.
pub const PMIX_ERR_TIMEOUT: pmix_status_t = -24;
/// `PMIX_ERR_UNREACH`: no server to talk to.
pub const PMIX_ERR_UNREACH: pmix_status_t = -25;
/// `PMIX_ERR_INIT`.
pub const PMIX_ERR_INIT: pmix_status_t = -31;
/// `PMIX_ERR_NOT_FOUND`.
pub const PMIX_ERR_NOT_FOUND: pmix_status_t = -46;

/// `PMIX_RANK_WILDCARD`: the job as a whole (its attributes, such as `PMIX_JOB_SIZE`).
pub const PMIX_RANK_WILDCARD: pmix_rank_t = u32::MAX - 1;

/// `PMIX_BOOL`.
pub const PMIX_BOOL: pmix_data_type_t = 1;
/// `PMIX_INT`.
pub const PMIX_INT: pmix_data_type_t = 6;
/// `PMIX_UINT32`.
pub const PMIX_UINT32: pmix_data_type_t = 14;
/// `PMIX_BYTE_OBJECT`.
pub const PMIX_BYTE_OBJECT: pmix_data_type_t = 27;

/// `PMIX_GLOBAL`: shared with every process of the job, on this node and the others.
pub const PMIX_GLOBAL: pmix_scope_t = 3;

/// `PMIX_INFO_REQD`: the directive must be honoured.
pub const PMIX_INFO_REQD: pmix_info_directives_t = 1;

/// `PMIX_JOB_SIZE` (`uint32_t`): the number of processes in the job.
pub const PMIX_JOB_SIZE: &core::ffi::CStr = c"pmix.job.size";
/// `PMIX_COLLECT_DATA` (`bool`): a fence that collects what each process committed.
pub const PMIX_COLLECT_DATA: &core::ffi::CStr = c"pmix.collect";
/// `PMIX_TIMEOUT` (`int`): seconds before the call gives up with `PMIX_ERR_TIMEOUT` (0: never).
pub const PMIX_TIMEOUT: &core::ffi::CStr = c"pmix.timeout";

/// `pmix_proc_t`: a process, by namespace and rank.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct pmix_proc_t {
    pub nspace: [c_char; PMIX_MAX_NSLEN + 1],
    pub rank: pmix_rank_t,
}

/// `pmix_byte_object_t`.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct pmix_byte_object_t {
    pub bytes: *mut c_char,
    pub size: usize,
}

/// `pmix_value_t`'s `data` union: the members zverbs reads and writes, and the largest one's
/// size (`pmix_envar_t`: two pointers and a `char`), so that the union has the header's size.
#[derive(Clone, Copy)]
#[repr(C)]
pub union pmix_value_data {
    pub flag: bool,
    pub integer: c_int,
    pub uint32: u32,
    pub bo: pmix_byte_object_t,
    pub ptr: *mut c_void,
    pub _envar: [usize; 3],
}

/// `pmix_value_t`: a typed value.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct pmix_value_t {
    pub r#type: pmix_data_type_t,
    pub data: pmix_value_data,
}

/// `pmix_info_t`: a key, directives and a value.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct pmix_info_t {
    pub key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub flags: pmix_info_directives_t,
    pub value: pmix_value_t,
}

/// libpmix could not be opened, or lacks a symbol.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "cannot load {library} ({detail}); install the `{package}` package (PMIx client library: \
     apt-get install {package})"
)]
pub struct PmixLoadError {
    /// The file that was opened.
    pub library: &'static str,
    /// The Debian package that installs it.
    pub package: &'static str,
    /// What the dynamic loader said.
    pub detail: String,
}

/// `libpmix.so.2`'s client calls.
#[allow(missing_docs)]
pub struct Pmix {
    _lib: Library,
    pub PMIx_Init: unsafe extern "C" fn(*mut pmix_proc_t, *mut pmix_info_t, usize) -> pmix_status_t,
    pub PMIx_Finalize: unsafe extern "C" fn(*const pmix_info_t, usize) -> pmix_status_t,
    pub PMIx_Put:
        unsafe extern "C" fn(pmix_scope_t, *const c_char, *mut pmix_value_t) -> pmix_status_t,
    pub PMIx_Commit: unsafe extern "C" fn() -> pmix_status_t,
    pub PMIx_Fence:
        unsafe extern "C" fn(*const pmix_proc_t, usize, *const pmix_info_t, usize) -> pmix_status_t,
    pub PMIx_Get: unsafe extern "C" fn(
        *const pmix_proc_t,
        *const c_char,
        *const pmix_info_t,
        usize,
        *mut *mut pmix_value_t,
    ) -> pmix_status_t,
    pub PMIx_Value_destruct: unsafe extern "C" fn(*mut pmix_value_t),
    pub PMIx_Error_string: unsafe extern "C" fn(pmix_status_t) -> *const c_char,
}

impl Pmix {
    /// The library file: PMIx's client library, soname `libpmix.so.2` (PMIx 3 and 4), which
    /// Debian's `libpmix2` installs in the library path.
    pub const FILE: &'static str = "libpmix.so.2";
    /// The Debian package providing it.
    pub const PACKAGE: &'static str = "libpmix2";

    /// Opens `file` and resolves every symbol.
    ///
    /// # Errors
    ///
    /// A [`PmixLoadError`] naming [`Pmix::PACKAGE`] when the library cannot be opened or lacks
    /// a symbol.
    pub fn open(file: &'static str) -> Result<Self, PmixLoadError> {
        let err = |detail: String| PmixLoadError {
            library: file,
            package: Self::PACKAGE,
            detail,
        };
        // SAFETY: opening libpmix runs its initialisers, which only set up the library's own
        // state (the client connects to a server only in `PMIx_Init`).
        let lib = unsafe { Library::new(file) }.map_err(|e| err(e.to_string()))?;
        macro_rules! sym {
            ($name:ident) => {
                // SAFETY: each field is declared with `<pmix.h>`'s prototype of the symbol of
                // its name (PMIx 4.2); the pointer is copied out and used only while `_lib`
                // keeps the library mapped.
                unsafe { resolve(&lib, concat!(stringify!($name), "\0")) }
                    .map_err(|e| err(format!("{}: {e}", stringify!($name))))?
            };
        }
        Ok(Self {
            PMIx_Init: sym!(PMIx_Init),
            PMIx_Finalize: sym!(PMIx_Finalize),
            PMIx_Put: sym!(PMIx_Put),
            PMIx_Commit: sym!(PMIx_Commit),
            PMIx_Fence: sym!(PMIx_Fence),
            PMIx_Get: sym!(PMIx_Get),
            PMIx_Value_destruct: sym!(PMIx_Value_destruct),
            PMIx_Error_string: sym!(PMIx_Error_string),
            _lib: lib,
        })
    }
}

/// The symbol `name` (NUL-terminated) of `lib`, as a `T`.
///
/// # Safety
///
/// `T` is the function pointer type of the symbol's C prototype, and the pointer is used only
/// while `lib` stays open.
unsafe fn resolve<T: Copy>(lib: &Library, name: &str) -> Result<T, libloading::Error> {
    // SAFETY: (caller) `T` is the symbol's type.
    unsafe { lib.get::<T>(name.as_bytes()) }.map(|s| *s)
}

impl core::fmt::Debug for Pmix {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "Pmix({})", Self::FILE)
    }
}

static PMIX: OnceLock<Result<Pmix, PmixLoadError>> = OnceLock::new();

/// libpmix, opened on first use.
///
/// # Errors
///
/// A [`PmixLoadError`] naming `libpmix2` when the library is not installed.
pub fn pmix() -> Result<&'static Pmix, PmixLoadError> {
    PMIX.get_or_init(|| Pmix::open(Pmix::FILE))
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "dlopen: Miri calls no C library")]
    fn missing_library_names_its_package() {
        let e = Pmix::open("libpmix-does-not-exist.so.2").unwrap_err();
        assert_eq!(e.package, "libpmix2");
        let msg = e.to_string();
        assert!(msg.contains("libpmix-does-not-exist.so.2"), "{msg}");
        assert!(msg.contains("apt-get install libpmix2"), "{msg}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "dlopen: Miri calls no C library")]
    fn library_without_a_symbol_is_refused() {
        let e = Pmix::open("libc.so.6").unwrap_err();
        assert!(e.detail.contains("PMIx_Init"), "{}", e.detail);
    }
}

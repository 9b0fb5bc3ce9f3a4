//! Checks on the uverbs device nodes: `access`, `faccessat`, `euidaccess`/`eaccess`, `lstat`
//! and `fstatat` of `/dev/infiniband/uverbs*` see what [`stat`](super::stat) sees, the backing
//! `/dev/null`; `fstat` of a descriptor opened for one (a memory file, see
//! [`open_fake`](super::open_fake)) sees it too, the character device the sysfs tree names.
//!
//! On a host with a ConnectX, rdma-core's udev rules make the uverbs nodes character devices
//! that every user may read and write (mode 0666), which is what `/dev/null` is too. A program
//! that checks a node before it opens it (UCX lists a device only when `stat` says it is a
//! character device and `access(R_OK | W_OK)` allows it) gets the answer it would get there.
//! Every other path goes to libc unchanged.

use core::ffi::{c_char, c_int};
use core::sync::atomic::{AtomicUsize, Ordering};

use super::{BACKING, is_uverbs};
use crate::fds::is_fake;

type AccessFn = unsafe extern "C" fn(*const c_char, c_int) -> c_int;
type FaccessatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, c_int) -> c_int;
type StatFn = unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;
type FstatatFn = unsafe extern "C" fn(c_int, *const c_char, *mut libc::stat, c_int) -> c_int;
type FstatFn = unsafe extern "C" fn(c_int, *mut libc::stat) -> c_int;

/// The backing device's path for a uverbs path, else `path` itself.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
unsafe fn backed(path: *const c_char) -> *const c_char {
    // SAFETY: (caller) null or NUL-terminated.
    if unsafe { is_uverbs(path) } {
        BACKING.as_ptr()
    } else {
        path
    }
}

/// `access(2)`.
///
/// # Safety
///
/// As libc's `access`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    match real!("access", AccessFn) {
        // SAFETY: forwarded (with the backing path for a uverbs device).
        Some(f) => unsafe { f(backed(path), mode) },
        None => -1,
    }
}

/// `faccessat(2)`. A uverbs path is absolute, so `dirfd` does not apply to it.
///
/// # Safety
///
/// As libc's `faccessat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn faccessat(
    dirfd: c_int,
    path: *const c_char,
    mode: c_int,
    flags: c_int,
) -> c_int {
    match real!("faccessat", FaccessatFn) {
        // SAFETY: forwarded (with the backing path for a uverbs device).
        Some(f) => unsafe { f(dirfd, backed(path), mode, flags) },
        None => -1,
    }
}

/// `euidaccess(3)`.
///
/// # Safety
///
/// As libc's `euidaccess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn euidaccess(path: *const c_char, mode: c_int) -> c_int {
    match real!("euidaccess", AccessFn) {
        // SAFETY: forwarded (with the backing path for a uverbs device).
        Some(f) => unsafe { f(backed(path), mode) },
        None => -1,
    }
}

/// `eaccess(3)`, the same as [`euidaccess`].
///
/// # Safety
///
/// As libc's `eaccess`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn eaccess(path: *const c_char, mode: c_int) -> c_int {
    // SAFETY: (caller) as `euidaccess`.
    unsafe { euidaccess(path, mode) }
}

/// `lstat(2)`: a device node is no symbolic link, so the same as `stat` for it.
///
/// # Safety
///
/// As libc's `lstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn lstat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    match real!("lstat", StatFn) {
        // SAFETY: forwarded (with the backing path for a uverbs device).
        Some(f) => unsafe { f(backed(path), buf) },
        None => -1,
    }
}

/// `fstatat(2)`. A uverbs path is absolute, so `dirfd` does not apply to it.
///
/// # Safety
///
/// As libc's `fstatat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstatat(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut libc::stat,
    flags: c_int,
) -> c_int {
    match real!("fstatat", FstatatFn) {
        // SAFETY: forwarded (with the backing path for a uverbs device).
        Some(f) => unsafe { f(dirfd, backed(path), buf, flags) },
        None => -1,
    }
}

/// `fstat(2)`: a uverbs descriptor is the character device it was opened as.
///
/// # Safety
///
/// As libc's `fstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat(fd: c_int, buf: *mut libc::stat) -> c_int {
    if is_fake(fd) {
        return match real!("stat", StatFn) {
            // SAFETY: (caller) `buf` is valid for the result; the path is NUL-terminated.
            Some(f) => unsafe { f(BACKING.as_ptr(), buf) },
            None => -1,
        };
    }
    match real!("fstat", FstatFn) {
        // SAFETY: forwarded as received.
        Some(f) => unsafe { f(fd, buf) },
        None => -1,
    }
}

/// `fstat64`, the same as [`fstat`] on 64-bit Linux.
///
/// # Safety
///
/// As libc's `fstat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fstat64(fd: c_int, buf: *mut libc::stat) -> c_int {
    // SAFETY: (caller) as `fstat`.
    unsafe { fstat(fd, buf) }
}

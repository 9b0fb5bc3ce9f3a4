//! The libc functions the shim interposes (loaded with `LD_PRELOAD`), and the uverbs
//! command transport: the write ABI and the `RDMA_VERBS_IOCTL` ioctl.
//!
//! Only calls on `/dev/infiniband/uverbs*` and on the descriptors opened for them are served
//! here; every other call goes straight to the next definition (libc's), found with
//! `dlsym(RTLD_NEXT)`.
//!
//! - `open`/`openat` of a uverbs path open a memory file instead (`memfd`, whose pages the
//!   kernel maps at any UAR offset, also for a program whose `mmap` bypasses this shim); its
//!   `fstat` reports `/dev/null`, a character device whose `major:minor` (1:3) the fake sysfs
//!   tree gives as the uverbs device's `dev`, so libibverbs' check of the opened descriptor
//!   (`fstat`, `S_ISCHR`, `st_rdev`) passes; the descriptor is remembered. `stat` of a uverbs
//!   path stats `/dev/null`, and so do `lstat`, `fstatat`, `access`, `faccessat` and
//!   `euidaccess` (module `paths`).
//! - `ioctl(RDMA_VERBS_IOCTL)` on such a descriptor serves `UVERBS_METHOD_INVOKE_WRITE` (the
//!   write ABI carried by an ioctl, which libibverbs prefers when the kernel has it): the probe
//!   libibverbs sends first (QUERY_DEVICE with no input) gets `ENOSPC`, as from a kernel that
//!   has it; every native method gets `EPROTONOSUPPORT`, so libibverbs falls back to the write
//!   command of that verb. With `ZVERBS_EMU_ABI=write` every ioctl gets `ENOTTY` and
//!   libibverbs uses `write()` throughout, which is served too.
//! - `mmap` of such a descriptor (UAR pages: doorbells and BlueFlame registers) is checked as
//!   the kernel checks it (page indices, dynamic pages once each) and maps the memory file at
//!   that offset, ordinary shared memory; the software device takes WQEs from the rings, and reads the UAR pages only when
//!   it watches BlueFlame writes ([`crate::watch`]: then they are mapped read-only and every
//!   store is performed by the fault handler). `munmap` of such a page forgets it.
//! - `close` forgets the descriptor.
//!
//! The interposed functions are declared with their fixed arguments only. `open`, `openat`
//! and `ioctl` are variadic in C; on the Linux ABIs this crate builds for (x86-64 System V
//! and AArch64 AAPCS64) a variadic integer or pointer argument travels where a fixed one
//! would, so reading it as a fixed argument is what the C library itself does.

use core::ffi::{c_char, c_int, c_ulong, c_void};
use core::sync::atomic::{AtomicUsize, Ordering};
use std::ffi::CStr;

use crate::abi::{self, attr, get, ioctl_hdr as h, put};
use crate::device::Emu;
use crate::fds;
use crate::uar::Mapping;

/// The uverbs character devices' path prefix.
const UVERBS: &[u8] = b"/dev/infiniband/uverbs";
/// What a uverbs descriptor really is.
const BACKING: &CStr = c"/dev/null";

/// # Safety
///
/// `path` is null or a NUL-terminated string.
unsafe fn is_ethernet_path(path: *const c_char) -> bool {
    // SAFETY: (caller) NUL-terminated when not null.
    !path.is_null()
        && unsafe { CStr::from_ptr(path) }.to_bytes()
            == format!("/dev/infiniband/{}", crate::sysfs::ETH_UVERBS).as_bytes()
}

/// # Safety
///
/// `path` is null or a NUL-terminated string.
unsafe fn is_uverbs(path: *const c_char) -> bool {
    // SAFETY: (caller) NUL-terminated when not null.
    !path.is_null()
        && unsafe { CStr::from_ptr(path) }
            .to_bytes()
            .starts_with(UVERBS)
}

/// Resolves the next definition of `name` once and caches it.
macro_rules! real {
    ($name:literal, $ty:ty) => {{
        static CACHE: AtomicUsize = AtomicUsize::new(0);
        let mut f = CACHE.load(Ordering::Relaxed);
        if f == 0 {
            // SAFETY: `dlsym` with a NUL-terminated name; RTLD_NEXT finds libc's definition.
            f = unsafe { libc::dlsym(libc::RTLD_NEXT, concat!($name, "\0").as_ptr().cast()) }
                as usize;
            CACHE.store(f, Ordering::Relaxed);
        }
        if f == 0 {
            None
        } else {
            // SAFETY: `f` is the address of libc's function of this name, whose C prototype
            // `$ty` matches.
            Some(unsafe { core::mem::transmute::<usize, $ty>(f) })
        }
    }};
}

type OpenFn = unsafe extern "C" fn(*const c_char, c_int, libc::mode_t) -> c_int;
type OpenatFn = unsafe extern "C" fn(c_int, *const c_char, c_int, libc::mode_t) -> c_int;
type StatFn = unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;
type IoctlFn = unsafe extern "C" fn(c_int, c_ulong, *mut c_void) -> c_int;
type WriteFn = unsafe extern "C" fn(c_int, *const c_void, usize) -> isize;
type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, usize) -> isize;
type MmapFn = crate::watch::MmapFn;
type MunmapFn = unsafe extern "C" fn(*mut c_void, usize) -> c_int;

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// The size of a uverbs descriptor's memory file: every mmap offset the mlx5 driver decodes
/// (command and page index, 24 bits of page number) falls inside it. Sparse: only the pages
/// mapped and written take memory.
const UAR_FILE_SIZE: i64 = 1 << 36;

/// Opens a memory file for a uverbs path and remembers the descriptor.
///
/// The descriptor is a `memfd` of [`UAR_FILE_SIZE`] bytes, so that the UAR pages a program
/// maps from it are pages the kernel itself maps, whichever way the `mmap` reaches it: through
/// [`mmap`] below (checked as the driver checks it) or around it (a raw system call, as the
/// memory hooks of UCX make). [`fstat`](paths::fstat) reports the character device the sysfs
/// tree names (the backing `/dev/null`).
fn open_fake(flags: c_int, ethernet: bool) -> c_int {
    let mfd_flags = if flags & libc::O_CLOEXEC != 0 {
        libc::MFD_CLOEXEC
    } else {
        0
    };
    // SAFETY: plain memfd creation with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"zverbs-emu-uverbs".as_ptr(), mfd_flags) };
    if fd < 0 {
        return fd;
    }
    // SAFETY: sizing the memory file just created.
    if unsafe { libc::ftruncate(fd, UAR_FILE_SIZE) } != 0 {
        // SAFETY: `errno` of the failed call, read before `close` may change it.
        let e = unsafe { *libc::__errno_location() };
        // SAFETY: closing the descriptor created above.
        unsafe { libc::close(fd) };
        set_errno(e);
        return -1;
    }
    write_clock_info(fd);
    match fds::mark(fd, ethernet) {
        true => {
            crate::log(format_args!(
                "uverbs device opened as fd {fd}{}",
                if ethernet { " (Ethernet function)" } else { "" }
            ));
        }
        false if fd >= 0 => crate::log(format_args!("fd {fd} too high to serve uverbs on")),
        false => {}
    }
    fd
}

/// Writes the device clock's clock-info page into a new uverbs memory file at the page's
/// offset, so that the page reads as the kernel's does however it is mapped ([`mmap`] writes
/// it afresh when it maps it).
fn write_clock_info(fd: c_int) {
    use zverbs_mlx5dv::prm::clock::{MLX5_IB_CLOCK_INFO_V1, MLX5_IB_MMAP_CLOCK_INFO};
    let Ok(emu) = Emu::get() else {
        return;
    };
    let ci = emu.clock_info();
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as i64;
    let off = (((MLX5_IB_MMAP_CLOCK_INFO << 8) | MLX5_IB_CLOCK_INFO_V1) as i64) * page;
    // SAFETY: writes the bytes of a plain C struct of ours to the descriptor.
    let n = unsafe { libc::pwrite(fd, (&raw const ci).cast(), core::mem::size_of_val(&ci), off) };
    if n < 0 {
        crate::log(format_args!("clock-info page not written to fd {fd}"));
    }
}

/// When `path` is the sysfs file of the port's GID and this process's device instance
/// exists, a descriptor reading that instance's own GID (see [`crate::sysfs`]); else `None`.
///
/// # Safety
///
/// `path` is null or a NUL-terminated string.
unsafe fn open_gid(path: *const c_char) -> Option<c_int> {
    if path.is_null() {
        return None;
    }
    // SAFETY: (caller) NUL-terminated.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    let file = crate::sysfs::GID_FILE.as_bytes();
    if !(p.ends_with(file) && p.len() > file.len() && p[p.len() - file.len() - 1] == b'/') {
        return None;
    }
    let emu = Emu::running()?;
    let text = format!("{}\n", crate::sysfs::gid_text(emu.device().gid()));
    // SAFETY: plain memfd creation with a NUL-terminated name.
    let fd = unsafe { libc::memfd_create(c"zverbs-emu-gid".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: writing `text`'s bytes to the new descriptor, then rewinding it for the reader.
    let ok = unsafe {
        libc::write(fd, text.as_ptr().cast(), text.len()) == text.len() as isize
            && libc::lseek(fd, 0, libc::SEEK_SET) == 0
    };
    if !ok {
        // SAFETY: closing the descriptor created above.
        unsafe { libc::close(fd) };
        return None;
    }
    Some(fd)
}

/// `open(2)`.
///
/// # Safety
///
/// As libc's `open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    // SAFETY: (caller) `path` is a C string.
    if unsafe { is_uverbs(path) } {
        // SAFETY: (caller) `path` is a C string.
        return open_fake(flags, unsafe { is_ethernet_path(path) });
    }
    // SAFETY: (caller) `path` is a C string.
    if let Some(fd) = unsafe { open_gid(path) } {
        return fd;
    }
    match real!("open", OpenFn) {
        // SAFETY: forwarded as received.
        Some(f) => unsafe { f(path, flags, mode) },
        None => -1,
    }
}

/// `open64`, the same as [`open`] on 64-bit Linux.
///
/// # Safety
///
/// As libc's `open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn open64(path: *const c_char, flags: c_int, mode: libc::mode_t) -> c_int {
    // SAFETY: (caller) as `open`.
    unsafe { open(path, flags, mode) }
}

/// `openat(2)`.
///
/// # Safety
///
/// As libc's `openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    // SAFETY: (caller) `path` is a C string.
    if unsafe { is_uverbs(path) } {
        // SAFETY: (caller) `path` is a C string.
        return open_fake(flags, unsafe { is_ethernet_path(path) });
    }
    // SAFETY: (caller) `path` is a C string.
    if let Some(fd) = unsafe { open_gid(path) } {
        return fd;
    }
    match real!("openat", OpenatFn) {
        // SAFETY: forwarded as received.
        Some(f) => unsafe { f(dirfd, path, flags, mode) },
        None => -1,
    }
}

/// `openat64`, the same as [`openat`] on 64-bit Linux.
///
/// # Safety
///
/// As libc's `openat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn openat64(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: libc::mode_t,
) -> c_int {
    // SAFETY: (caller) as `openat`.
    unsafe { openat(dirfd, path, flags, mode) }
}

/// `stat(2)`.
///
/// # Safety
///
/// As libc's `stat`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn stat(path: *const c_char, buf: *mut libc::stat) -> c_int {
    // SAFETY: (caller) `path` is a C string.
    let path = if unsafe { is_uverbs(path) } {
        BACKING.as_ptr()
    } else {
        path
    };
    match real!("stat", StatFn) {
        // SAFETY: forwarded (with the backing path for a uverbs device).
        Some(f) => unsafe { f(path, buf) },
        None => -1,
    }
}

/// `close(2)`.
///
/// # Safety
///
/// As libc's `close`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if fds::forget(fd) {
        crate::log(format_args!("uverbs fd {fd} closed"));
        if let Some(e) = Emu::running() {
            e.closed(fd);
        }
    }
    crate::async_events::fd_closed(fd);
    crate::channel::closed(fd);
    match real!("close", CloseFn) {
        // SAFETY: forwarded as received.
        Some(f) => unsafe { f(fd) },
        None => -1,
    }
}

/// `mmap(2)`.
///
/// # Safety
///
/// As libc's `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    let Some(real) = real!("mmap", MmapFn) else {
        return libc::MAP_FAILED;
    };
    if fds::is_fake(fd) {
        // A UAR page: doorbell and BlueFlame registers, here ordinary shared memory, if the
        // kernel would map it.
        let _ = prot;
        let Ok(emu) = Emu::get() else {
            set_errno(libc::ENODEV);
            return libc::MAP_FAILED;
        };
        let m = match emu.mmap(fd, off as u64, len as u64) {
            Ok(m) => m,
            Err(e) => {
                crate::log(format_args!(
                    "UAR mmap at offset {off:#x} refused: errno {e}"
                ));
                set_errno(e);
                return libc::MAP_FAILED;
            }
        };
        let p = if crate::watch::enabled() && m != Mapping::ClockInfo {
            // SAFETY: as libc's mmap; `real` is libc's.
            unsafe { crate::watch::map(real, addr, len, flags) }
        } else {
            let flags = libc::MAP_SHARED | (flags & libc::MAP_FIXED);
            // SAFETY: a shared mapping of the descriptor's memory file at the caller's hint.
            unsafe {
                real(
                    addr,
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    flags,
                    fd,
                    off,
                )
            }
        };
        if p != libc::MAP_FAILED {
            emu.mapped(fd, m, p as usize);
            if m == Mapping::ClockInfo {
                let ci = emu.clock_info();
                // SAFETY: a fresh page of ours, readable and writable, at least as large and
                // as aligned as the struct; the kernel's page is written by it alone, and
                // this one once, before the library sees it.
                unsafe {
                    p.cast::<zverbs_mlx5dv::prm::clock::ib_uverbs_clock_info>()
                        .write(ci)
                };
            }
        }
        crate::log(format_args!(
            "UAR page at offset {off:#x} ({m:?}): {len} bytes at {p:p}"
        ));
        return p;
    }
    // SAFETY: forwarded as received.
    unsafe { real(addr, len, prot, flags, fd, off) }
}

/// `munmap(2)`: forgets UAR pages (the kernel's bookkeeping, the watcher's) in the range.
///
/// # Safety
///
/// As libc's `munmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: usize) -> c_int {
    let Some(real) = real!("munmap", MunmapFn) else {
        set_errno(libc::ENOSYS);
        return -1;
    };
    if let Some(e) = Emu::running() {
        e.unmapped(addr as usize, len);
        crate::watch::unmapped(addr as usize, len);
    }
    // SAFETY: forwarded as received.
    unsafe { real(addr, len) }
}

/// `mmap64`, the same as [`mmap`] on 64-bit Linux.
///
/// # Safety
///
/// As libc's `mmap`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: libc::off_t,
) -> *mut c_void {
    // SAFETY: (caller) as `mmap`.
    unsafe { mmap(addr, len, prot, flags, fd, off) }
}

/// Whether commands go through `write()` only (`ZVERBS_EMU_ABI=write`).
fn write_abi_only() -> bool {
    static MODE: AtomicUsize = AtomicUsize::new(0);
    match MODE.load(Ordering::Relaxed) {
        0 => {
            let w = std::env::var_os("ZVERBS_EMU_ABI").is_some_and(|v| v == "write");
            MODE.store(if w { 2 } else { 1 }, Ordering::Relaxed);
            w
        }
        m => m == 2,
    }
}

/// Runs a command on this process's emulated device, for the context of descriptor `fd`; 0
/// or an errno.
fn run(
    fd: c_int,
    command: u32,
    core_in: &[u8],
    drv_in: &[u8],
    core_out: &mut [u8],
    drv_out: &mut [u8],
) -> i32 {
    match Emu::get() {
        Ok(e) => e.command(fd, command, core_in, drv_in, core_out, drv_out),
        Err(why) => {
            crate::log(format_args!("{why}"));
            libc::ENODEV
        }
    }
}

/// A byte slice from a user pointer; empty for null or zero length.
///
/// # Safety
///
/// `p..p+len` is valid for reads for the returned lifetime (libibverbs' command buffers).
unsafe fn bytes<'a>(p: u64, len: usize) -> &'a [u8] {
    if p == 0 || len == 0 {
        return &[];
    }
    // SAFETY: (caller) valid for reads.
    unsafe { core::slice::from_raw_parts(p as usize as *const u8, len) }
}

/// As [`bytes`], writable.
///
/// # Safety
///
/// `p..p+len` is valid for writes and not otherwise referenced for the returned lifetime.
unsafe fn bytes_mut<'a>(p: u64, len: usize) -> &'a mut [u8] {
    if p == 0 || len == 0 {
        return &mut [];
    }
    // SAFETY: (caller) valid for writes, unaliased.
    unsafe { core::slice::from_raw_parts_mut(p as usize as *mut u8, len) }
}

/// Serves `ioctl(fd, RDMA_VERBS_IOCTL, hdr)`; 0 or an errno.
///
/// # Safety
///
/// `hdr` points at a `struct ib_uverbs_ioctl_hdr` with its attributes, whose pointers are valid
/// as the uverbs ABI describes them.
unsafe fn verbs_ioctl(fd: c_int, hdr: *mut u8) -> i32 {
    // SAFETY: (caller) the header is valid.
    let head = unsafe { bytes(hdr as u64, h::SIZE) };
    let object = get::<2>(head, h::OBJECT_ID) as u16;
    let method = get::<2>(head, h::METHOD_ID) as u16;
    let n = get::<2>(head, h::NUM_ATTRS) as usize;
    if object != abi::UVERBS_OBJECT_DEVICE || method != abi::UVERBS_METHOD_INVOKE_WRITE {
        // A native method: decline, so libibverbs uses the write command of that verb.
        return libc::EPROTONOSUPPORT;
    }
    // SAFETY: (caller) `n` attributes follow the header.
    let attrs = unsafe { bytes_mut(hdr.add(h::SIZE) as u64, n * h::ATTR_SIZE) };
    let mut command = None;
    // Inputs are copied: an input of at most 8 bytes lives in the attribute itself, whose
    // flags are written below.
    let (mut core_in, mut drv_in) = (Vec::new(), Vec::new());
    let (mut core_out, mut drv_out) = ((0u64, 0usize), (0u64, 0usize));
    for a in attrs.chunks(h::ATTR_SIZE) {
        let id = get::<2>(a, h::ATTR_ID) as u16;
        let len = get::<2>(a, h::ATTR_LEN) as usize;
        let data = get::<8>(a, h::ATTR_DATA);
        // An input of at most 8 bytes travels inside `data`.
        let inp = |a: &[u8]| -> Vec<u8> {
            if len <= 8 {
                a.get(h::ATTR_DATA..h::ATTR_DATA + len)
                    .unwrap_or(&[])
                    .to_vec()
            } else {
                // SAFETY: (caller) an input attribute's pointer covers `len` bytes.
                unsafe { bytes(data, len) }.to_vec()
            }
        };
        match id {
            attr::WRITE_CMD => command = Some(data as u32),
            attr::CORE_IN => core_in = inp(a),
            attr::UHW_IN => drv_in = inp(a),
            attr::CORE_OUT => core_out = (data, len),
            attr::UHW_OUT => drv_out = (data, len),
            _ => {}
        }
    }
    let Some(command) = command else {
        return libc::EINVAL;
    };
    if core_in.is_empty() && command == abi::cmd::QUERY_DEVICE {
        // libibverbs' probe for INVOKE_WRITE: a kernel that has it answers ENOSPC.
        return libc::ENOSPC;
    }
    // SAFETY: (caller) the output attributes' pointers cover their lengths, and nothing else
    // refers to them during the call.
    let (co, dout) = unsafe {
        (
            bytes_mut(core_out.0, core_out.1),
            bytes_mut(drv_out.0, drv_out.1),
        )
    };
    let r = run(fd, command, &core_in, &drv_in, co, dout);
    if r == 0 {
        for a in attrs.chunks_mut(h::ATTR_SIZE) {
            let id = get::<2>(a, h::ATTR_ID) as u16;
            if id == attr::CORE_OUT || id == attr::UHW_OUT {
                let flags = get::<2>(a, h::ATTR_FLAGS) as u16 | abi::UVERBS_ATTR_F_VALID_OUTPUT;
                put::<2>(a, h::ATTR_FLAGS, u64::from(flags));
            }
        }
    }
    r
}

/// `ioctl(2)`.
///
/// # Safety
///
/// As libc's `ioctl`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ioctl(fd: c_int, req: c_ulong, arg: *mut c_void) -> c_int {
    if fds::is_fake(fd) {
        // `c_ulong` is `u64` on the LP64 targets this builds for; the conversion keeps it so
        // should it not be.
        #[allow(clippy::useless_conversion)]
        let req = u64::from(req);
        let r = if write_abi_only() || req != abi::RDMA_VERBS_IOCTL {
            libc::ENOTTY
        } else {
            // SAFETY: (caller) the argument of RDMA_VERBS_IOCTL is its header.
            unsafe { verbs_ioctl(fd, arg.cast()) }
        };
        if r == 0 {
            return 0;
        }
        set_errno(r);
        return -1;
    }
    match real!("ioctl", IoctlFn) {
        // SAFETY: forwarded as received.
        Some(f) => unsafe { f(fd, req, arg) },
        None => -1,
    }
}

/// Serves a write-ABI command; 0 or an errno.
///
/// # Safety
///
/// `buf..buf+count` holds a uverbs command whose response pointer is valid as the ABI
/// describes.
unsafe fn verbs_write(fd: c_int, buf: *const u8, count: usize) -> i32 {
    // SAFETY: (caller) `count` bytes at `buf`.
    let all = unsafe { bytes(buf as u64, count) };
    let command = get::<4>(all, 0) as u32;
    let in_words = get::<2>(all, 4) as usize;
    let out_words = get::<2>(all, 6) as usize;
    if command & abi::CMD_FLAG_EXTENDED != 0 {
        // struct ib_uverbs_cmd_hdr, struct ib_uverbs_ex_cmd_hdr, core input, driver input;
        // the response (core, then driver) at ex_hdr.response. Sizes count 8-byte words.
        let response = get::<8>(all, 8);
        let drv_in_words = get::<2>(all, 16) as usize;
        let drv_out_words = get::<2>(all, 18) as usize;
        let core = all.get(24..).unwrap_or(&[]);
        let (ci, rest) = core.split_at(core.len().min(in_words * 8));
        let di = &rest[..rest.len().min(drv_in_words * 8)];
        // SAFETY: (caller) the response buffer covers the output words.
        let out = unsafe { bytes_mut(response, (out_words + drv_out_words) * 8) };
        let (co, dout) = out.split_at_mut(out.len().min(out_words * 8));
        return run(fd, command, ci, di, co, dout);
    }
    // Legacy: sizes count 4-byte words, the input's include the header; core and driver parts
    // split at the kernel's size of the core struct.
    let body = all.get(8..(in_words * 4).min(count)).unwrap_or(&[]);
    let (core_in_len, core_out_len) = abi::legacy_sizes(command);
    let (ci, di) = body.split_at(body.len().min(core_in_len));
    let response = if abi::legacy_has_response(command) && out_words > 0 {
        get::<8>(body, 0)
    } else {
        0
    };
    // SAFETY: (caller) the response buffer covers the output words.
    let out = unsafe { bytes_mut(response, out_words * 4) };
    let (co, dout) = out.split_at_mut(out.len().min(core_out_len));
    run(fd, command, ci, di, co, dout)
}

/// `write(2)`.
///
/// # Safety
///
/// As libc's `write`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, count: usize) -> isize {
    if fds::is_fake(fd) {
        // SAFETY: (caller) a uverbs command.
        let r = unsafe { verbs_write(fd, buf.cast(), count) };
        if r == 0 {
            return count as isize;
        }
        set_errno(r);
        return -1;
    }
    match real!("write", WriteFn) {
        // SAFETY: forwarded as received.
        Some(f) => unsafe { f(fd, buf, count) },
        None => -1,
    }
}

/// `read(2)`: a completion channel's descriptor is read as the kernel's is (one
/// `struct ib_uverbs_comp_event_desc` per event: [`crate::channel`]); a context's async fd
/// gives the next event record (see [`async_events`](crate::async_events)); any other
/// descriptor is libc's.
///
/// # Safety
///
/// As libc's `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: usize) -> isize {
    let Some(real) = real!("read", ReadFn) else {
        return -1;
    };
    if crate::channel::is_channel(fd) {
        // SAFETY: (caller) `buf` is valid for `count` bytes; `real` is libc's `read`.
        return unsafe { crate::channel::read(fd, buf.cast(), count, real) };
    }
    if !crate::async_events::is_async_fd(fd) {
        // SAFETY: forwarded as received.
        return unsafe { real(fd, buf, count) };
    }
    // SAFETY: (caller) `buf` holds `count` bytes; the counter is read into 8 bytes of ours.
    match unsafe { crate::async_events::read(fd, buf.cast(), count, |p| real(fd, p.cast(), 8)) } {
        Ok(n) => n as isize,
        Err(e) => {
            set_errno(e);
            -1
        }
    }
}

mod paths;

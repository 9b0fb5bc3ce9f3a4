//! The software device's counters, for tests of programs on the emulator: what it did behind
//! libmlx5's back (messages it delivered in the CQE, for one).

use std::ffi::{c_int, c_void};

use zverbs_sim::Stats;

/// What the device serving this process counted: this copy's device if this copy of the
/// emulator serves libibverbs (its `open` is the one the process calls), else that of the copy
/// that does (a test binary linking this crate runs with the shim preloaded too). `None` when
/// no emulator serves this process.
pub fn device_stats() -> Option<Stats> {
    let me = zverbs_emu_device_stats as unsafe extern "C" fn(*mut Stats) -> c_int;
    // SAFETY: looking up NUL-terminated names; `dladdr` fills `info` for an address; the
    // symbol found is `zverbs_emu_device_stats` of the same crate (and build), of this
    // prototype.
    unsafe {
        let serving = libc::dlsym(libc::RTLD_DEFAULT, c"open".as_ptr());
        let mut theirs: libc::Dl_info = core::mem::zeroed();
        let mut ours: libc::Dl_info = core::mem::zeroed();
        if serving.is_null()
            || libc::dladdr(serving, &mut theirs) == 0
            || libc::dladdr(me as *const c_void, &mut ours) == 0
        {
            return None;
        }
        let mut s = Stats::default();
        if theirs.dli_fbase == ours.dli_fbase {
            return (me(&mut s) == 1).then_some(s);
        }
        let handle = libc::dlopen(theirs.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return None;
        }
        let f = libc::dlsym(handle, c"zverbs_emu_device_stats".as_ptr());
        let got = !f.is_null() && {
            let f: unsafe extern "C" fn(*mut Stats) -> c_int = core::mem::transmute(f);
            f(&mut s) == 1
        };
        libc::dlclose(handle);
        got.then_some(s)
    }
}

/// The device's counters, for programs on the emulator (found with `dlsym`): writes them to
/// `out` and returns 1, or returns 0 when no device runs in this process.
///
/// # Safety
///
/// `out` is null or valid for writing a [`Stats`] of this build of the crate.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zverbs_emu_device_stats(out: *mut Stats) -> c_int {
    let Some(emu) = crate::device::Emu::running() else {
        return 0;
    };
    if !out.is_null() {
        // SAFETY: (caller) valid for writing.
        unsafe { out.write(emu.device().stats()) };
    }
    1
}

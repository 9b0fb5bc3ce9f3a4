//! The `SIGSEGV` handler that performs the program's stores to watched UAR pages (x86-64).

use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, Ordering};
use std::cell::UnsafeCell;

use super::x86::{self, Source};

/// The handler that was installed before ours (Rust's stack-overflow handler, or the default).
struct Previous(UnsafeCell<libc::sigaction>);
// SAFETY: written once by `install` before the handler that reads it is installed.
unsafe impl Sync for Previous {}

static PREVIOUS: Previous = Previous(UnsafeCell::new(
    // SAFETY: all-zero bytes are a valid `sigaction` (SIG_DFL, no flags, empty mask).
    unsafe { core::mem::zeroed() },
));
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// Installs the handler (once), keeping the previous one for faults that are not ours.
pub(super) fn install() {
    if INSTALLED.swap(true, Ordering::AcqRel) {
        return;
    }
    // SAFETY: a fully initialised action; `PREVIOUS` is written here only, before our handler
    // (its only reader) can run.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction =
            on_segv as extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) as usize;
        sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGSEGV, &sa, PREVIOUS.0.get());
    }
}

/// The value of `source`, `width` bytes, in memory order, from the interrupted context.
///
/// # Safety
///
/// `uc` is the context the kernel passed to the handler.
unsafe fn value(uc: *const libc::ucontext_t, source: Source, width: usize) -> [u8; 16] {
    let mut out = [0u8; 16];
    // SAFETY: (caller) a valid context; `fpregs` points into the signal frame when not null.
    unsafe {
        let gregs = &(*uc).uc_mcontext.gregs;
        match source {
            Source::Gpr { n, high_byte } => {
                // x86 register numbers to the context's slots.
                const SLOT: [c_int; 16] = [
                    libc::REG_RAX,
                    libc::REG_RCX,
                    libc::REG_RDX,
                    libc::REG_RBX,
                    libc::REG_RSP,
                    libc::REG_RBP,
                    libc::REG_RSI,
                    libc::REG_RDI,
                    libc::REG_R8,
                    libc::REG_R9,
                    libc::REG_R10,
                    libc::REG_R11,
                    libc::REG_R12,
                    libc::REG_R13,
                    libc::REG_R14,
                    libc::REG_R15,
                ];
                let mut v = gregs[SLOT[usize::from(n & 15)] as usize] as u64;
                if high_byte {
                    v >>= 8;
                }
                out[..8].copy_from_slice(&v.to_le_bytes());
            }
            Source::Imm(v) => out[..8].copy_from_slice(&v.to_le_bytes()),
            Source::Xmm { n, from } => {
                let fp = (*uc).uc_mcontext.fpregs;
                if !fp.is_null() {
                    let x = (*fp)._xmm[usize::from(n & 15)].element;
                    let mut all = [0u8; 16];
                    for (k, e) in x.iter().enumerate() {
                        all[4 * k..4 * k + 4].copy_from_slice(&e.to_le_bytes());
                    }
                    let from = usize::from(from);
                    out[..16 - from].copy_from_slice(&all[from..]);
                }
            }
        }
    }
    let _ = width;
    out
}

/// Writes `msg` to stderr without allocating (async-signal-safe).
fn say(msg: &[u8]) {
    // SAFETY: a valid buffer and length.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

extern "C" fn on_segv(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo and context to an SA_SIGINFO handler.
    let addr = unsafe { (*info).si_addr() } as usize;
    let uc = ctx.cast::<libc::ucontext_t>();
    if super::page_of(addr).is_some() {
        // SAFETY: a valid context; RIP points at the faulting instruction, whose bytes are
        // readable code, read one by one only as far as the instruction goes.
        let rip = unsafe { (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] } as usize;
        // SAFETY: as above.
        let store = x86::decode(|i| unsafe { *((rip + i) as *const u8) });
        let Some(store) = store else {
            say(b"zverbs-emu: a store to a watched UAR page by an instruction the watcher cannot decode; stopping\n");
            // SAFETY: no preconditions.
            unsafe { libc::abort() };
        };
        let width = usize::from(store.width);
        // SAFETY: a valid context.
        let bytes = unsafe { value(uc, store.source, width) };
        // SAFETY: the thread's own id.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        if super::store(addr, &bytes[..width], tid) {
            // SAFETY: a valid, writable context: resume after the instruction just performed.
            unsafe {
                (*uc).uc_mcontext.gregs[libc::REG_RIP as usize] += i64::from(store.len);
            }
            // Another thread waits to store: it goes next, so that the stores of threads
            // storing at the same time interleave one by one, as other CPUs' would, wherever
            // the program does not keep them apart.
            if super::others_waiting() {
                // SAFETY: no arguments; async-signal-safe.
                unsafe { libc::sched_yield() };
            }
            return;
        }
    }
    // Not ours: what the previous handler would have done.
    // SAFETY: `PREVIOUS` was written by `install` before this handler was installed.
    let prev = unsafe { &*PREVIOUS.0.get() };
    if prev.sa_flags & libc::SA_SIGINFO != 0 && prev.sa_sigaction > 1 {
        // SAFETY: the previous handler's entry, with the arguments it expects.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void) =
            unsafe { core::mem::transmute(prev.sa_sigaction) };
        f(sig, info, ctx);
    } else if prev.sa_sigaction > 1 {
        // SAFETY: as above, a one-argument handler.
        let f: extern "C" fn(c_int) = unsafe { core::mem::transmute(prev.sa_sigaction) };
        f(sig);
    } else {
        // The default: uninstall and return, so the instruction faults again and ends the
        // process as it would have.
        // SAFETY: a valid action.
        unsafe {
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(libc::SIGSEGV, &sa, core::ptr::null_mut());
        }
    }
}

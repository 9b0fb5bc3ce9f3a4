//! The device's view of BlueFlame writes: every store into a UAR page, in the order the
//! device receives them, so that torn BlueFlame copies are caught (`ZVERBS_EMU_BF_WATCH=1`).
//!
//! A real UAR is device memory: the NIC sees each store the CPUs make to it. Here a UAR page is
//! ordinary memory, which nobody sees being written, so with watching on it is mapped
//! read-only where the program writes it and writable at a second address (a `memfd` mapped
//! twice). Each store the program makes faults; the `SIGSEGV` handler decodes the storing
//! instruction ([`x86`]), performs the store through the second mapping, hands it to the
//! watcher in a global order (one lock around the whole), and resumes the program after the
//! instruction, yielding the CPU first when another thread waits to store: stores of threads
//! that store at the same time interleave one by one, as other CPUs' would. Nothing in the
//! program changes but its speed (a fault per 8-byte store).
//!
//! What the watcher checks, knowing from the create-QP commands which QPs each BlueFlame
//! register serves and where their send rings are ([`qp_on_register`]):
//!
//! - **Torn copies.** A BlueFlame write (a copy, or the 8-byte doorbell) begins with a store at
//!   the first byte of one of the register's two buffers and continues upwards, store after
//!   store, from the same thread (the same CPU's write-combining buffer). A store that
//!   continues a copy after another thread stored into that buffer is a torn write: the device
//!   would take a WQE made of two (`torn`).
//! - **The QP.** The control segment a write begins with must name a QP on that register
//!   (`foreign`).
//! - **The contents.** A copy that reaches the size its control segment gives (`ds`) must equal
//!   the WQE in the QP's ring at the index it carries (`copies`, or `mismatched`).
//! - **The toggle.** Consecutive writes to one register use alternate buffers (`toggle` counts
//!   those that do not): each writer's toggle, or the one its sharers share, flips per write.
//!
//! x86-64 only (the instruction decoder); elsewhere watching is refused with a log line.
// Elsewhere nothing calls the fault handler's side of the watcher.
#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]

#[cfg(target_arch = "x86_64")]
mod handler;
pub mod x86;

use core::cell::UnsafeCell;
use core::ffi::{c_int, c_void};
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};

/// What the watcher counted, since the process started (`repr(C)`: read by programs through
/// the exported [`zverbs_emu_bf_watch`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct WatchStats {
    /// Stores into UAR pages.
    pub stores: u64,
    /// Of which into a BlueFlame register of a QP.
    pub register_stores: u64,
    /// BlueFlame writes begun (copies and 8-byte doorbells).
    pub writes: u64,
    /// Copies completed, equal to the WQE in the ring.
    pub copies: u64,
    /// Stores that continued a copy after another thread's store into the same buffer.
    pub torn: u64,
    /// Writes whose control segment names a QP that is not on the register.
    pub foreign: u64,
    /// Completed copies that differ from the WQE in the ring.
    pub mismatched: u64,
    /// Writes into the same buffer as the register's previous write.
    pub toggle: u64,
}

/// Whether `ZVERBS_EMU_BF_WATCH=1` asks for watching (checked once).
pub fn enabled() -> bool {
    static ON: AtomicU8 = AtomicU8::new(0);
    match ON.load(Ordering::Relaxed) {
        0 => {
            let asked = std::env::var_os("ZVERBS_EMU_BF_WATCH").is_some_and(|v| v == "1");
            let on = asked && cfg!(target_arch = "x86_64");
            if asked && !on {
                crate::log(format_args!(
                    "ZVERBS_EMU_BF_WATCH=1: BlueFlame watching needs x86-64; not watching"
                ));
            }
            ON.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            on
        }
        v => v == 2,
    }
}

/// A watched UAR mapping: where the program sees it (read-only) and where the stores go.
struct Page {
    user: AtomicUsize,
    alias: AtomicUsize,
    /// 0: a free slot (or unmapped).
    len: AtomicUsize,
}

const MAX_PAGES: usize = 4096;
static PAGES: [Page; MAX_PAGES] = [const {
    Page {
        user: AtomicUsize::new(0),
        alias: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
    }
}; MAX_PAGES];
/// Slots of `PAGES` ever used.
static USED: AtomicUsize = AtomicUsize::new(0);

/// libc's `mmap`.
pub type MmapFn =
    unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, c_int, libc::off_t) -> *mut c_void;

/// Maps `len` bytes of UAR for watching, at `addr` if `flags` has `MAP_FIXED` (a hint
/// otherwise), through libc's `mmap` (`real`): read-only where the program writes, writable
/// at a second address. Returns the program's address, or `MAP_FAILED` with `errno` set.
///
/// # Safety
///
/// As libc's `mmap` with these arguments; `real` is libc's `mmap`.
pub unsafe fn map(real: MmapFn, addr: *mut c_void, len: usize, flags: c_int) -> *mut c_void {
    #[cfg(target_arch = "x86_64")]
    handler::install();
    // SAFETY: a name and flags; the descriptor is closed below.
    let fd = unsafe { libc::memfd_create(c"zverbs-emu-uar".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return libc::MAP_FAILED;
    }
    let fixed = flags & libc::MAP_FIXED;
    // SAFETY: a descriptor of ours, sized before it is mapped twice (shared: one memory).
    let (user, alias) = unsafe {
        if libc::ftruncate(fd, len as libc::off_t) != 0 {
            libc::close(fd);
            return libc::MAP_FAILED;
        }
        let user = real(addr, len, libc::PROT_READ, libc::MAP_SHARED | fixed, fd, 0);
        let alias = real(
            core::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        );
        libc::close(fd);
        (user, alias)
    };
    if user == libc::MAP_FAILED || alias == libc::MAP_FAILED {
        for p in [user, alias] {
            if p != libc::MAP_FAILED {
                // SAFETY: mapped just above, used by nothing.
                unsafe { libc::munmap(p, len) };
            }
        }
        return libc::MAP_FAILED;
    }
    // A free slot (len 0), filled before its length publishes it to the handler.
    let slot = PAGES
        .iter()
        .take(USED.load(Ordering::Acquire))
        .position(|p| p.len.load(Ordering::Acquire) == 0)
        .unwrap_or_else(|| USED.fetch_add(1, Ordering::AcqRel));
    let Some(p) = PAGES.get(slot) else {
        crate::log(format_args!(
            "too many watched UAR pages; not watching this one"
        ));
        // SAFETY: the alias is ours; the program's view becomes an ordinary writable page.
        unsafe {
            libc::munmap(alias, len);
            libc::mprotect(user, len, libc::PROT_READ | libc::PROT_WRITE);
        }
        return user;
    };
    p.user.store(user as usize, Ordering::Relaxed);
    p.alias.store(alias as usize, Ordering::Relaxed);
    p.len.store(len, Ordering::Release);
    crate::log(format_args!(
        "watching UAR page {user:p} ({len} bytes, stores land at {alias:p})"
    ));
    user
}

/// The program unmapped `addr..addr + len`: stops watching the pages in it.
pub fn unmapped(addr: usize, len: usize) {
    for p in PAGES.iter().take(USED.load(Ordering::Acquire)) {
        let user = p.user.load(Ordering::Relaxed);
        let plen = p.len.load(Ordering::Acquire);
        if plen != 0 && user >= addr && user < addr.saturating_add(len) {
            p.len.store(0, Ordering::Release);
            // SAFETY: the alias mapping is ours and nothing uses it once its page is unmapped.
            unsafe { libc::munmap(p.alias.load(Ordering::Relaxed) as *mut c_void, plen) };
        }
    }
}

/// The page (program address, store address, length) holding `addr`.
fn page_of(addr: usize) -> Option<(usize, usize)> {
    PAGES
        .iter()
        .take(USED.load(Ordering::Acquire))
        .find_map(|p| {
            let len = p.len.load(Ordering::Acquire);
            let user = p.user.load(Ordering::Relaxed);
            (len != 0 && addr >= user && addr < user + len)
                .then(|| (user, p.alias.load(Ordering::Relaxed)))
        })
}

/// One QP the watcher knows.
#[derive(Clone, Copy, Debug, Default)]
struct QpInfo {
    qpn: u32,
    /// Its BlueFlame register (program address).
    reg: usize,
    /// Its send ring and its size in basic blocks.
    ring: usize,
    blocks: u32,
}

/// A BlueFlame write in progress in one buffer.
#[derive(Clone, Copy, Debug, Default)]
struct Run {
    /// The thread storing it.
    tid: u32,
    /// The byte (from the buffer's start) its next store goes to.
    next: u32,
    /// Interleaved with another writer's stores: not checked further.
    broken: bool,
    /// The control segment was read.
    checked: bool,
    /// From the control segment: the QP, the WQE index and the WQE's size in bytes.
    qpn: u32,
    index: u16,
    len: u32,
}

/// One BlueFlame register: two buffers of `bf_size` bytes at `base`.
#[derive(Clone, Copy, Debug, Default)]
struct Reg {
    base: usize,
    bf_size: u32,
    runs: [Run; 2],
    /// The buffer the last write began in (2: none yet).
    last: u8,
}

const MAX_REGS: usize = 2048;
const MAX_QPS: usize = 4096;

/// The watcher's state, under [`LOCK`].
struct State {
    regs: [Reg; MAX_REGS],
    nregs: usize,
    qps: [QpInfo; MAX_QPS],
    nqps: usize,
    stats: WatchStats,
}

struct Locked(UnsafeCell<State>);
// SAFETY: the state is accessed only while `LOCK` is held (`with_state`).
unsafe impl Sync for Locked {}

static STATE: Locked = Locked(UnsafeCell::new(State {
    regs: [Reg {
        base: 0,
        bf_size: 0,
        runs: [Run {
            tid: 0,
            next: 0,
            broken: false,
            checked: false,
            qpn: 0,
            index: 0,
            len: 0,
        }; 2],
        last: 2,
    }; MAX_REGS],
    nregs: 0,
    qps: [QpInfo {
        qpn: 0,
        reg: 0,
        ring: 0,
        blocks: 0,
    }; MAX_QPS],
    nqps: 0,
    stats: WatchStats {
        stores: 0,
        register_stores: 0,
        writes: 0,
        copies: 0,
        torn: 0,
        foreign: 0,
        mismatched: 0,
        toggle: 0,
    },
}));
/// Held while the state is used: by the fault handler for each store (which orders the stores
/// of all threads), and by the control path.
static LOCK: AtomicBool = AtomicBool::new(false);

/// Threads waiting for [`LOCK`].
static WAITING: AtomicUsize = AtomicUsize::new(0);

/// Whether another thread waits to store (then the fault handler lets it go first).
pub(crate) fn others_waiting() -> bool {
    WAITING.load(Ordering::Relaxed) != 0
}

/// Runs `f` with the state, holding [`LOCK`]. Async-signal-safe: a spin lock that yields the
/// CPU while another thread holds it.
fn with_state<R>(f: impl FnOnce(&mut State) -> R) -> R {
    let mut spins = 0u32;
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        if spins == 0 {
            WAITING.fetch_add(1, Ordering::Relaxed);
        }
        spins += 1;
        if spins.is_multiple_of(64) {
            // SAFETY: no arguments; async-signal-safe.
            unsafe { libc::sched_yield() };
        } else {
            core::hint::spin_loop();
        }
    }
    if spins != 0 {
        WAITING.fetch_sub(1, Ordering::Relaxed);
    }
    // SAFETY: the lock is held: this is the only access to the state. The state is never
    // used by code that can fault on a watched page (which would re-enter this lock).
    let r = f(unsafe { &mut *STATE.0.get() });
    LOCK.store(false, Ordering::Release);
    r
}

/// QP `qpn` rings the BlueFlame register at `reg` (buffers of `bf_size` bytes); its send ring
/// of `blocks` basic blocks is at `ring`. From the create-QP command.
pub fn qp_on_register(qpn: u32, reg: usize, bf_size: u32, ring: usize, blocks: u32) {
    if !enabled() {
        return;
    }
    with_state(|s| {
        let info = QpInfo {
            qpn,
            reg,
            ring,
            blocks,
        };
        match s.qps[..s.nqps].iter_mut().find(|q| q.qpn == qpn) {
            Some(q) => *q = info,
            None if s.nqps < MAX_QPS => {
                s.qps[s.nqps] = info;
                s.nqps += 1;
            }
            None => crate::log(format_args!("too many QPs to watch")),
        }
        if !s.regs[..s.nregs].iter().any(|r| r.base == reg) && s.nregs < MAX_REGS {
            s.regs[s.nregs] = Reg {
                base: reg,
                bf_size,
                last: 2,
                ..Reg::default()
            };
            s.nregs += 1;
        }
    });
}

/// QP `qpn` was destroyed.
pub fn qp_gone(qpn: u32) {
    if !enabled() {
        return;
    }
    with_state(|s| {
        if let Some(i) = s.qps[..s.nqps].iter().position(|q| q.qpn == qpn) {
            s.qps[i] = s.qps[s.nqps - 1];
            s.nqps -= 1;
        }
    });
}

/// What the watcher counted so far.
pub fn stats() -> WatchStats {
    with_state(|s| s.stats)
}

/// What the device of this process counted, when it watches: this copy's counts if this copy
/// of the emulator is the one serving (its `mmap` is the one libmlx5 calls), else those of the
/// copy that is (a test binary linking this crate runs with the shim preloaded too: one of
/// the two interposes).
pub fn active_stats() -> Option<WatchStats> {
    // The `mmap` libraries get, and the object it is in; then ours.
    // SAFETY: looking up a NUL-terminated name; `dladdr` fills `info` for an address.
    unsafe {
        let serving = libc::dlsym(libc::RTLD_DEFAULT, c"mmap".as_ptr());
        let mut theirs: libc::Dl_info = core::mem::zeroed();
        let mut ours: libc::Dl_info = core::mem::zeroed();
        let me = zverbs_emu_bf_watch as unsafe extern "C" fn(*mut WatchStats) -> c_int;
        if serving.is_null()
            || libc::dladdr(serving, &mut theirs) == 0
            || libc::dladdr(me as *const c_void, &mut ours) == 0
        {
            return None;
        }
        if theirs.dli_fbase == ours.dli_fbase {
            return enabled().then(stats);
        }
        let handle = libc::dlopen(theirs.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return None;
        }
        let f = libc::dlsym(handle, c"zverbs_emu_bf_watch".as_ptr());
        let mut s = WatchStats::default();
        let on = !f.is_null() && {
            let f: unsafe extern "C" fn(*mut WatchStats) -> c_int = core::mem::transmute(f);
            f(&mut s) == 1
        };
        libc::dlclose(handle);
        on.then_some(s)
    }
}

/// What the watcher counted so far, for programs on the emulator (found with
/// `dlsym(RTLD_DEFAULT, "zverbs_emu_bf_watch")`): writes the counts to `out` and returns 1
/// when watching is on, 0 (and writes nothing) when it is off.
///
/// # Safety
///
/// `out` is null or valid for writing a [`WatchStats`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zverbs_emu_bf_watch(out: *mut WatchStats) -> c_int {
    if !enabled() {
        return 0;
    }
    if !out.is_null() {
        // SAFETY: (caller) valid for writing.
        unsafe { out.write(stats()) };
    }
    1
}

/// One store the program made: `bytes[..width]` at program address `addr`, by thread `tid`.
/// Performs it on the page's writable mapping and lets the watcher see it. Returns false when
/// `addr` is in no watched page (not a store of ours).
fn store(addr: usize, bytes: &[u8], tid: u32) -> bool {
    let Some((user, alias)) = page_of(addr) else {
        return false;
    };
    with_state(|s| {
        let at = alias + (addr - user);
        // SAFETY: `at..at + len` lies in the writable mapping of the page (a store never
        // crosses the end of a UAR page: it is at most 16 aligned bytes), which stays mapped
        // while the page is watched; the program reads it only through its read-only view.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), at as *mut u8, bytes.len()) };
        s.observe(addr, bytes.len() as u32, tid, |a| a - user + alias);
    });
    true
}

impl State {
    /// The device's view of one store of `width` bytes at program address `addr` (already
    /// performed); `to_alias` turns a program address of the same page into the address its
    /// bytes can be read at.
    fn observe(&mut self, addr: usize, width: u32, tid: u32, to_alias: impl Fn(usize) -> usize) {
        self.stats.stores += 1;
        let Some(ri) = self.regs[..self.nregs]
            .iter()
            .position(|r| addr >= r.base && addr < r.base + 2 * r.bf_size as usize)
        else {
            return;
        };
        self.stats.register_stores += 1;
        let reg = self.regs[ri];
        let b = (addr - reg.base) / reg.bf_size as usize;
        let off = ((addr - reg.base) % reg.bf_size as usize) as u32;
        let buf_addr = reg.base + b * reg.bf_size as usize;
        let mut run = reg.runs[b];
        if off == 0 {
            // A new write: the previous one (in either buffer) is over.
            self.stats.writes += 1;
            if usize::from(reg.last) == b {
                self.stats.toggle += 1;
            }
            self.regs[ri].last = b as u8;
            run = Run {
                tid,
                next: width,
                ..Run::default()
            };
        } else if run.tid == tid && run.next == off {
            run.next += width;
        } else {
            // This store continues a copy into a buffer another thread stored into meanwhile
            // (or never began there): the device takes a mixture.
            self.stats.torn += 1;
            run = Run {
                tid,
                next: off + width,
                broken: true,
                ..Run::default()
            };
        }
        if !run.broken && !run.checked && run.next >= 8 {
            // SAFETY: the buffer's first 8 bytes are in the watched page, written.
            let head = unsafe { core::ptr::read_unaligned(to_alias(buf_addr) as *const [u8; 8]) };
            let opmod_idx_opcode = u32::from_be_bytes([head[0], head[1], head[2], head[3]]);
            let qpn_ds = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
            run.checked = true;
            run.qpn = qpn_ds >> 8;
            run.index = (opmod_idx_opcode >> 8) as u16;
            run.len = (qpn_ds & 0x3f).div_ceil(4) * 64;
            let ours = self.qps[..self.nqps]
                .iter()
                .any(|q| q.qpn == run.qpn && q.reg == reg.base);
            if !ours {
                self.stats.foreign += 1;
                run.broken = true;
            }
        }
        if !run.broken && run.checked && run.len > 0 && run.next == run.len {
            let same = self.qps[..self.nqps]
                .iter()
                .find(|q| q.qpn == run.qpn)
                .is_some_and(|q| {
                    (0..run.len / 64).all(|k| {
                        let slot = (u32::from(run.index) + k) % q.blocks.max(1);
                        let wqe = q.ring + slot as usize * 64;
                        let copy = to_alias(buf_addr + k as usize * 64);
                        // SAFETY: block `k` of the buffer is in the watched page; the ring
                        // block is the QP's (its owner is the thread being served, stopped in
                        // this handler, and the device only reads it).
                        unsafe {
                            core::ptr::read_unaligned(copy as *const [u8; 64])
                                == core::ptr::read_unaligned(wqe as *const [u8; 64])
                        }
                    })
                });
            if same {
                self.stats.copies += 1;
            } else {
                self.stats.mismatched += 1;
            }
        }
        self.regs[ri].runs[b] = run;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A register of two 64-byte buffers in ordinary memory, a QP on it with a 2-block ring,
    /// and the watcher's state (a fresh one, not the process's).
    struct Bench {
        mem: Box<[u64; 16]>,
        ring: Box<[u8; 128]>,
        s: Box<State>,
    }

    const QPN: u32 = 0x123;

    impl Bench {
        fn new() -> Self {
            let mem = Box::new([0u64; 16]);
            let mut ring = Box::new([0u8; 128]);
            for (slot, byte) in [(0usize, 0xa0u8), (1, 0xb0)] {
                let w = &mut ring[slot * 64..slot * 64 + 64];
                w.fill(byte);
                w[..4].copy_from_slice(&((slot as u32) << 8 | 0x0a).to_be_bytes());
                w[4..8].copy_from_slice(&(QPN << 8 | 2).to_be_bytes());
            }
            // SAFETY: all-zero bytes are a valid state (empty tables, zero counts).
            let mut s: Box<State> = Box::new(unsafe { core::mem::zeroed() });
            s.regs[0] = Reg {
                base: mem.as_ptr() as usize,
                bf_size: 64,
                last: 2,
                ..Reg::default()
            };
            s.nregs = 1;
            s.qps[0] = QpInfo {
                qpn: QPN,
                reg: mem.as_ptr() as usize,
                ring: ring.as_ptr() as usize,
                blocks: 2,
            };
            s.nqps = 1;
            Bench { mem, ring, s }
        }

        /// Thread `tid` stores word `w` of the WQE in ring slot `slot` into buffer `b`.
        fn put(&mut self, tid: u32, b: usize, slot: usize, w: usize) {
            let v = u64::from_ne_bytes(self.ring[slot * 64 + 8 * w..][..8].try_into().unwrap());
            let addr = self.mem.as_mut_ptr().wrapping_add(8 * b + w);
            // SAFETY: `addr` is word `8b + w < 16` of `mem`.
            unsafe { addr.write(v) };
            self.s.observe(addr as usize, 8, tid, |a| a);
        }

        fn copy(&mut self, tid: u32, b: usize, slot: usize) {
            for w in 0..8 {
                self.put(tid, b, slot, w);
            }
        }
    }

    #[test]
    fn whole_copies_in_alternate_buffers_are_clean() {
        let mut t = Bench::new();
        t.copy(1, 0, 0);
        t.copy(2, 1, 1);
        t.copy(1, 0, 1);
        // An 8-byte doorbell (the first word only) in the other buffer.
        t.put(2, 1, 0, 0);
        let s = t.s.stats;
        assert_eq!((s.writes, s.copies, s.register_stores), (4, 3, 25));
        assert_eq!((s.torn, s.foreign, s.mismatched, s.toggle), (0, 0, 0, 0));
    }

    #[test]
    fn interleaved_copies_are_torn() {
        let mut t = Bench::new();
        // Two threads copy into the same buffer at once (each with its own toggle).
        for w in 0..8 {
            t.put(1, 0, 0, w);
            t.put(2, 0, 1, w);
        }
        let s = t.s.stats;
        assert!(s.torn >= 7, "{s:?}");
        assert_eq!(s.copies, 0, "{s:?}");
        assert_eq!(s.toggle, 1, "both began in buffer 0");
        // One copy interrupted half-way by another's whole copy.
        let mut t = Bench::new();
        for w in 0..4 {
            t.put(1, 0, 0, w);
        }
        t.copy(2, 1, 1);
        t.copy(3, 0, 1);
        for w in 4..8 {
            t.put(1, 0, 0, w);
        }
        assert_eq!(t.s.stats.torn, 1, "{:?}", t.s.stats);
    }

    #[test]
    fn wrong_qp_and_wrong_bytes_are_caught() {
        let mut t = Bench::new();
        t.ring[64 + 4..64 + 8].copy_from_slice(&(0x999u32 << 8 | 2).to_be_bytes());
        t.copy(1, 0, 1);
        assert_eq!(t.s.stats.foreign, 1);
        let mut t = Bench::new();
        t.put(1, 0, 0, 0);
        t.put(1, 0, 0, 1);
        t.ring[12] ^= 0xff; // the ring now differs from the word copied
        for w in 2..8 {
            t.put(1, 0, 0, w);
        }
        assert_eq!((t.s.stats.mismatched, t.s.stats.copies), (1, 0));
        // Outside the register: counted as a store, nothing else.
        let mut t = Bench::new();
        let x = 7u64;
        t.s.observe(&x as *const u64 as usize, 8, 1, |a| a);
        assert_eq!((t.s.stats.stores, t.s.stats.register_stores), (1, 0));
    }
}

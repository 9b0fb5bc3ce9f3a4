//! The async event fd of the emulated ConnectX, and fault injection.
//!
//! libibverbs takes a context's async fd from the `GET_CONTEXT` answer (`async_fd`) and
//! `ibv_get_async_event` reads one `struct ib_uverbs_async_event_desc` from it (16 bytes:
//! `element`, `event_type`, reserved), where `element` is the `user_handle` the create command
//! of the CQ, QP or SRQ carried (libibverbs' own object pointer) or a port number. As the
//! kernel does, the emulator:
//!
//! - gives each context a descriptor of its own, readable while events are pending (an eventfd
//!   in semaphore mode counting them, blocking unless the program makes it non-blocking, so
//!   `poll`, `epoll` and a blocking `read` behave as on the kernel's);
//! - queues each event of the software device ([`zverbs_sim::DeviceEvent`]) for the context
//!   that owns its object, and events of the port or the device for every context;
//! - serves `read` on that descriptor (the shim intercepts it) with the next record, and
//!   counts each record read against its object: the destroy command's answer reports that
//!   count (`events_reported`), for which libibverbs' destroy waits until the program has
//!   acknowledged as many (`ibv_ack_async_event`). Records of an object not yet read when it
//!   is destroyed are dropped, as the kernel drops them.
//!
//! Faults are injected into the device of this process with [`inject`] (a test in the
//! program that runs under the emulator), or from outside through [`send_fault`] (the
//! process's control socket, which `zverbs-emu inject PID FAULT` writes to). The control
//! socket admits a connection as the fabric's listeners do ([`crate::fabric::hello`]): the
//! same user, a hello with the fabric's key; it serves one connection at a time, each for at
//! most [`CONTROL_WAIT`].

use std::collections::{HashMap, VecDeque};
use std::ffi::c_int;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use zverbs_sim::{Device, DeviceEvent, EventSubscription, PortState};

use crate::abi::{self, cmd, ex, get, put};
use crate::fabric::hello::{self, HELLO_LEN, Hello, Key, Role};

/// How long a control connection may take to send its fault, and its sender to read the
/// answer.
pub const CONTROL_WAIT: Duration = Duration::from_secs(2);
/// The longest fault text read.
const FAULT_MAX: usize = 128;

/// `enum ibv_event_type` values the device raises.
mod ty {
    pub const CQ_ERR: u32 = 0;
    pub const QP_FATAL: u32 = 1;
    pub const QP_REQ_ERR: u32 = 2;
    pub const QP_ACCESS_ERR: u32 = 3;
    pub const DEVICE_FATAL: u32 = 8;
    pub const PORT_ACTIVE: u32 = 9;
    pub const PORT_ERR: u32 = 10;
    pub const SRQ_ERR: u32 = 14;
    pub const SRQ_LIMIT_REACHED: u32 = 15;
    pub const QP_LAST_WQE_REACHED: u32 = 16;
}

/// A fault to inject into the emulated device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Port 1 goes down (`IBV_EVENT_PORT_ERR`; RC requests fail with retry exceeded).
    PortDown,
    /// Port 1 comes up (`IBV_EVENT_PORT_ACTIVE`).
    PortUp,
    /// The QP of this number fails (`IBV_EVENT_QP_FATAL`).
    QpFatal(u32),
    /// The device fails (`IBV_EVENT_DEVICE_FATAL`).
    DeviceFatal,
}

impl Fault {
    /// Parses `port-down`, `port-up`, `qp-fatal QPN` (decimal or 0x hex), `device-fatal`.
    pub fn parse(s: &str) -> Option<Fault> {
        let mut w = s.split_whitespace();
        let f = match w.next()? {
            "port-down" => Fault::PortDown,
            "port-up" => Fault::PortUp,
            "device-fatal" => Fault::DeviceFatal,
            "qp-fatal" => {
                let n = w.next()?;
                let qpn = match n.strip_prefix("0x") {
                    Some(h) => u32::from_str_radix(h, 16).ok()?,
                    None => n.parse().ok()?,
                };
                Fault::QpFatal(qpn)
            }
            _ => return None,
        };
        w.next().is_none().then_some(f)
    }

    fn code(self) -> (c_int, u32) {
        match self {
            Fault::PortDown => (1, 0),
            Fault::PortUp => (2, 0),
            Fault::QpFatal(n) => (3, n),
            Fault::DeviceFatal => (4, 0),
        }
    }

    fn of_code(kind: c_int, arg: u32) -> Option<Fault> {
        Some(match kind {
            1 => Fault::PortDown,
            2 => Fault::PortUp,
            3 => Fault::QpFatal(arg),
            4 => Fault::DeviceFatal,
            _ => return None,
        })
    }

    /// Applies the fault to `dev`.
    fn apply(self, dev: &Device) -> Result<(), zverbs_sim::SimError> {
        match self {
            Fault::PortDown => dev.set_port_state(1, PortState::Down),
            Fault::PortUp => dev.set_port_state(1, PortState::Active),
            Fault::QpFatal(qpn) => dev.inject_qp_fatal(qpn),
            Fault::DeviceFatal => {
                dev.inject_device_fatal();
                Ok(())
            }
        }
    }
}

/// Async fds below 4096, one bit each (checked on every `read` of the process).
static ASYNC_FDS: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

fn fd_bit(fd: c_int) -> Option<(usize, u64)> {
    let fd = usize::try_from(fd).ok()?;
    (fd < 64 * 64).then(|| (fd / 64, 1u64 << (fd % 64)))
}

/// Whether `fd` is the async fd of a context of the emulated device.
pub(crate) fn is_async_fd(fd: c_int) -> bool {
    fd_bit(fd).is_some_and(|(w, b)| ASYNC_FDS[w].load(Ordering::Relaxed) & b != 0)
}

/// Forgets `fd` as an async fd (it was closed).
pub(crate) fn fd_closed(fd: c_int) {
    if let Some((w, b)) = fd_bit(fd) {
        ASYNC_FDS[w].fetch_and(!b, Ordering::Relaxed);
    }
}

/// What the kernel keeps of an object with events.
#[derive(Debug)]
struct Obj {
    /// The context (its command descriptor) that created it.
    ctx: c_int,
    user_handle: u64,
    /// Records of it read from the async fd.
    reported: u32,
}

/// A record queued and not yet read.
#[derive(Debug)]
struct Pending {
    /// The object's uverbs handle, for an object's event.
    handle: Option<u32>,
    element: u64,
    event_type: u32,
}

#[derive(Debug)]
struct Ctx {
    /// The async fd (an eventfd in semaphore mode, counting the records queued).
    efd: c_int,
    queue: VecDeque<Pending>,
}

#[derive(Debug, Default)]
struct State {
    /// By command descriptor.
    ctxs: HashMap<c_int, Ctx>,
    /// By uverbs handle (unique for the process's life, over every kind).
    objs: HashMap<u32, Obj>,
    /// `(kind, number)` → handle; kinds: 0 CQ, 1 QP, 2 SRQ.
    by_number: HashMap<(u8, u32), u32>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| Mutex::new(State::default()));

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// The device's subscription, read by its waker.
static SUB: OnceLock<EventSubscription> = OnceLock::new();

/// The device faults are injected into, once [`start`] has run.
static DEVICE: OnceLock<&'static Device> = OnceLock::new();

/// Subscribes to `dev`'s events (once) and serves the control socket.
pub(crate) fn start(dev: &'static Device) {
    DEVICE.get_or_init(|| dev);
    SUB.get_or_init(|| {
        // Called with the device's lock held: takes only this module's lock, which is never
        // held while the device is called.
        dev.subscribe_events(Box::new(|| {
            if let Some(sub) = SUB.get() {
                while let Some(ev) = sub.try_next() {
                    dispatch(ev);
                }
            }
        }))
    });
    serve_control(&crate::fabric::namespace(), Key::from_env(), dev);
}

/// Queues `ev` for the contexts it concerns and makes their async fds readable.
fn dispatch(ev: DeviceEvent) {
    let (event_type, object) = match ev {
        DeviceEvent::PortActive { port } => (ty::PORT_ACTIVE, Err(u64::from(port))),
        DeviceEvent::PortError { port } => (ty::PORT_ERR, Err(u64::from(port))),
        DeviceEvent::DeviceFatal => (ty::DEVICE_FATAL, Err(0)),
        DeviceEvent::QpFatal { qpn } => (ty::QP_FATAL, Ok((1, qpn))),
        DeviceEvent::QpRequestError { qpn } => (ty::QP_REQ_ERR, Ok((1, qpn))),
        DeviceEvent::QpAccessError { qpn } => (ty::QP_ACCESS_ERR, Ok((1, qpn))),
        DeviceEvent::QpLastWqeReached { qpn } => (ty::QP_LAST_WQE_REACHED, Ok((1, qpn))),
        DeviceEvent::CqError { cqn } => (ty::CQ_ERR, Ok((0, cqn))),
        DeviceEvent::SrqLimitReached { srqn } => (ty::SRQ_LIMIT_REACHED, Ok((2, srqn))),
        DeviceEvent::SrqError { srqn } => (ty::SRQ_ERR, Ok((2, srqn))),
        _ => return,
    };
    let mut st = state();
    let st = &mut *st;
    let mut wake = Vec::new();
    match object {
        Err(element) => {
            for c in st.ctxs.values_mut() {
                c.queue.push_back(Pending {
                    handle: None,
                    element,
                    event_type,
                });
                wake.push(c.efd);
            }
        }
        Ok(key) => {
            let Some(&h) = st.by_number.get(&key) else {
                return;
            };
            let Some(o) = st.objs.get(&h) else { return };
            let Some(c) = st.ctxs.get_mut(&o.ctx) else {
                return;
            };
            c.queue.push_back(Pending {
                handle: Some(h),
                element: o.user_handle,
                event_type,
            });
            wake.push(c.efd);
        }
    }
    crate::log(format_args!("async event {event_type} ({ev:?})"));
    for efd in wake {
        let one = 1u64;
        // SAFETY: writing 8 bytes to the context's eventfd, which stays open while the
        // context is registered (this lock is held).
        unsafe { libc::write(efd, (&raw const one).cast(), 8) };
    }
}

/// Serves `read(fd, buf, count)` on an async fd: the next record, 16 bytes.
/// `real_read` reads the 8-byte counter of the eventfd with libc's `read` (blocking or not as
/// the descriptor is).
///
/// # Safety
///
/// `buf` is valid for `count` bytes of writes.
pub(crate) unsafe fn read(
    fd: c_int,
    buf: *mut u8,
    count: usize,
    real_read: impl Fn(*mut u8) -> isize,
) -> Result<usize, c_int> {
    if count < 16 {
        return Err(libc::EINVAL);
    }
    loop {
        let mut n = 0u64;
        let r = real_read((&raw mut n).cast());
        if r != 8 {
            // SAFETY: reading this thread's errno.
            return Err(unsafe { *libc::__errno_location() });
        }
        let mut st = state();
        let st = &mut *st;
        let ctx = st.ctxs.values_mut().find(|c| c.efd == fd);
        let Some(p) = ctx.and_then(|c| c.queue.pop_front()) else {
            // A count left by records dropped at a destroy: wait for the next one.
            continue;
        };
        if let Some(o) = p.handle.and_then(|h| st.objs.get_mut(&h)) {
            o.reported += 1;
        }
        let mut rec = [0u8; 16];
        put::<8>(&mut rec, 0, p.element);
        put::<4>(&mut rec, 8, u64::from(p.event_type));
        // SAFETY: (caller) `buf` holds at least 16 bytes.
        unsafe { core::ptr::copy_nonoverlapping(rec.as_ptr(), buf, 16) };
        return Ok(16);
    }
}

/// Bookkeeping after a command of the context of descriptor `fd` succeeded: contexts and
/// their async fds, objects and their user handles, and the `events_reported` of destroys.
pub(crate) fn after_command(
    fd: c_int,
    command: u32,
    core_in: &[u8],
    core_out: &mut [u8],
    drv_out: &[u8],
) {
    let extended = command & abi::CMD_FLAG_EXTENDED != 0;
    let c = command & abi::CMD_COMMAND_MASK;
    let mut st = state();
    let created = |st: &mut State, kind: u8, handle: u64, number: u64, uh: u64| {
        st.objs.insert(
            handle as u32,
            Obj {
                ctx: fd,
                user_handle: uh,
                reported: 0,
            },
        );
        st.by_number.insert((kind, number as u32), handle as u32);
    };
    let destroyed = |st: &mut State, handle: u64| -> u32 {
        let h = handle as u32;
        st.by_number.retain(|_, v| *v != h);
        for c in st.ctxs.values_mut() {
            c.queue.retain(|p| p.handle != Some(h));
        }
        st.objs.remove(&h).map_or(0, |o| o.reported)
    };
    match (extended, c) {
        (false, cmd::GET_CONTEXT) => {
            let efd = get::<4>(core_out, 0) as c_int;
            if let Some((w, b)) = fd_bit(efd) {
                ASYNC_FDS[w].fetch_or(b, Ordering::Relaxed);
            }
            st.ctxs.insert(
                fd,
                Ctx {
                    efd,
                    queue: VecDeque::new(),
                },
            );
        }
        (false, cmd::CREATE_CQ) => created(
            &mut st,
            0,
            get::<4>(core_out, 0),
            get::<4>(drv_out, 0),
            get::<8>(core_in, 8),
        ),
        (true, ex::CREATE_CQ) => created(
            &mut st,
            0,
            get::<4>(core_out, 0),
            get::<4>(drv_out, 0),
            get::<8>(core_in, 0),
        ),
        (false, cmd::CREATE_QP) => created(
            &mut st,
            1,
            get::<4>(core_out, 0),
            get::<4>(core_out, 4),
            get::<8>(core_in, 8),
        ),
        (true, ex::CREATE_QP) => created(
            &mut st,
            1,
            get::<4>(core_out, 0),
            get::<4>(core_out, 4),
            get::<8>(core_in, 0),
        ),
        (false, cmd::CREATE_SRQ) => created(
            &mut st,
            2,
            get::<4>(core_out, abi::create_srq::R_HANDLE),
            get::<4>(core_out, abi::create_srq::R_SRQN),
            get::<8>(core_in, 8),
        ),
        (false, cmd::DESTROY_CQ) => {
            // struct ib_uverbs_destroy_cq_resp: comp_events_reported, async_events_reported.
            let n = destroyed(&mut st, get::<4>(core_in, 8));
            put::<4>(core_out, 4, u64::from(n));
        }
        (false, cmd::DESTROY_QP | cmd::DESTROY_SRQ) => {
            // struct ib_uverbs_destroy_{qp,srq}_resp: events_reported.
            let n = destroyed(&mut st, get::<4>(core_in, 8));
            put::<4>(core_out, 0, u64::from(n));
        }
        _ => {}
    }
}

/// Forgets the context of a closed command descriptor (libibverbs closes its async fd
/// itself).
pub(crate) fn context_closed(fd: c_int) {
    let mut st = state();
    if let Some(c) = st.ctxs.remove(&fd)
        && let Some((w, b)) = fd_bit(c.efd)
    {
        ASYNC_FDS[w].fetch_and(!b, Ordering::Relaxed);
    }
    st.objs.retain(|_, o| o.ctx != fd);
    let live: std::collections::HashSet<u32> = st.objs.keys().copied().collect();
    st.by_number.retain(|_, h| live.contains(h));
}

/// Injects `f` into the device of the emulator instance of this process, the one the shim
/// serves libibverbs with (found by its exported entry point, so that a test binary that
/// links this crate reaches the preloaded copy, not its own).
///
/// # Errors
///
/// When no emulator serves this process, or the device refuses (no such QP).
pub fn inject(f: Fault) -> Result<(), String> {
    let (kind, arg) = f.code();
    let me = zverbs_emu_inject as unsafe extern "C" fn(c_int, u32) -> c_int;
    // The copy that serves libibverbs is the one whose `open` the process calls: the preloaded
    // shim, or this binary when it links the crate and exports its own.
    // SAFETY: looking up NUL-terminated names; `dladdr` fills `info` for an address; the
    // symbol found is `zverbs_emu_inject` of the same crate, of this prototype.
    let r = unsafe {
        let serving = libc::dlsym(libc::RTLD_DEFAULT, c"open".as_ptr());
        let mut theirs: libc::Dl_info = core::mem::zeroed();
        let mut ours: libc::Dl_info = core::mem::zeroed();
        if serving.is_null()
            || libc::dladdr(serving, &mut theirs) == 0
            || libc::dladdr(me as *const libc::c_void, &mut ours) == 0
        {
            return Err("cannot find the emulator serving this process".into());
        }
        if theirs.dli_fbase == ours.dli_fbase {
            me(kind, arg)
        } else {
            let handle = libc::dlopen(theirs.dli_fname, libc::RTLD_NOW | libc::RTLD_NOLOAD);
            let sym = if handle.is_null() {
                core::ptr::null_mut()
            } else {
                libc::dlsym(handle, c"zverbs_emu_inject".as_ptr())
            };
            if sym.is_null() {
                return Err("no emulator in this process (libzverbs_emu.so not preloaded)".into());
            }
            let f: unsafe extern "C" fn(c_int, u32) -> c_int = core::mem::transmute(sym);
            f(kind, arg)
        }
    };
    match r {
        0 => Ok(()),
        e => Err(format!("the emulator refused {f:?} (errno {e})")),
    }
}

/// The shim's entry point for [`inject`]: 0, or an errno (`ENODEV` when the device was not
/// created yet, `EINVAL` for an unknown fault or QP).
///
/// # Safety
///
/// Plain values; safe to call from any thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn zverbs_emu_inject(kind: c_int, arg: u32) -> c_int {
    let Some(f) = Fault::of_code(kind, arg) else {
        return libc::EINVAL;
    };
    let Some(dev) = DEVICE.get() else {
        return libc::ENODEV;
    };
    match f.apply(dev) {
        Ok(()) => 0,
        Err(_) => libc::EINVAL,
    }
}

/// The abstract name of process `pid`'s control socket in namespace `ns`.
fn control_name(ns: &str, pid: u32) -> String {
    format!("zverbs-emu/{ns}/inject/{pid}")
}

/// Binds this process's control socket in namespace `ns` and serves it on a thread, admitting
/// the connections of this fabric (`key`): each brings one fault ([`Fault::parse`]), applied
/// to `dev` and answered `ok` or `error: why`. Once per process.
pub fn serve_control(ns: &str, key: Key, dev: &'static Device) {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let name = control_name(ns, std::process::id());
        let sock = SocketAddr::from_abstract_name(name.as_bytes())
            .and_then(|a| UnixListener::bind_addr(&a));
        let sock = match sock {
            Ok(s) => s,
            Err(e) => {
                crate::log(format_args!("no fault control socket {name}: {e}"));
                return;
            }
        };
        let spawned = std::thread::Builder::new()
            .name("zverbs-emu-inject".into())
            .spawn(move || {
                for s in sock.incoming() {
                    let Ok(mut s) = s else {
                        // Out of descriptors, say: try again later rather than spin.
                        std::thread::sleep(Duration::from_millis(10));
                        continue;
                    };
                    let answer = match control_request(&mut s, &key) {
                        Ok(f) => {
                            let r = f.apply(dev);
                            crate::log(format_args!("injected {f:?}: {r:?}"));
                            match r {
                                Ok(()) => "ok\n".to_string(),
                                Err(e) => format!("error: {e}\n"),
                            }
                        }
                        Err(Refusal::Stranger(why)) => {
                            // Nothing is said to a stranger.
                            crate::log(format_args!("control connection refused: {why}"));
                            continue;
                        }
                        Err(Refusal::Member(why)) => format!("error: {why}\n"),
                    };
                    let _ = s.write_all(answer.as_bytes());
                }
            });
        if let Err(e) = spawned {
            crate::log(format_args!("no fault control thread: {e}"));
        }
    });
}

/// Why a control connection brings no fault.
enum Refusal {
    /// Not of this fabric: closed without an answer.
    Stranger(String),
    /// Of this fabric, with something that is no fault: answered.
    Member(String),
}

/// Reads one control connection: its hello, then a fault up to a newline or the end.
fn control_request(s: &mut UnixStream, key: &Key) -> Result<Fault, Refusal> {
    let stranger = |why: String| Refusal::Stranger(why);
    let cred = hello::peer_cred(s.as_fd()).map_err(|e| stranger(e.to_string()))?;
    if cred.uid != hello::my_uid() {
        return Err(stranger(format!(
            "process {} of user {}: another user",
            cred.pid, cred.uid
        )));
    }
    s.set_read_timeout(Some(CONTROL_WAIT))
        .and_then(|()| s.set_write_timeout(Some(CONTROL_WAIT)))
        .map_err(|e| stranger(e.to_string()))?;
    let mut h = [0u8; HELLO_LEN];
    s.read_exact(&mut h)
        .map_err(|e| stranger(format!("process {}: no hello ({e})", cred.pid)))?;
    match Hello::decode(&h) {
        Some(h) if h.role == Role::Control && h.key.matches(key) => {}
        _ => {
            return Err(stranger(format!(
                "process {}: not a control hello of this fabric",
                cred.pid
            )));
        }
    }
    let mut text = Vec::new();
    let mut b = [0u8; 1];
    while text.len() < FAULT_MAX {
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(_) if b[0] == b'\n' => break,
            Ok(_) => text.push(b[0]),
            Err(e) => return Err(Refusal::Member(format!("reading the fault: {e}"))),
        }
    }
    let text = String::from_utf8_lossy(&text);
    Fault::parse(&text).ok_or_else(|| Refusal::Member(format!("unknown fault {text:?}")))
}

/// Sends `fault` (as [`Fault::parse`] reads it) to the emulator of process `pid` in namespace
/// `ns` (`ZVERBS_EMU_NS`, `default` without it), as a member of the fabric of `key` (the one
/// in the sysfs tree of `SYSFS_PATH`: [`Key::from_env`]), and waits for its answer.
///
/// # Errors
///
/// When the text is no fault, the process has no control socket (or another process holds
/// its name), refuses the connection (another fabric) or the fault (no such QP).
pub fn send_fault(ns: &str, key: Key, pid: u32, fault: &str) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    if Fault::parse(fault).is_none() {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("not a fault: {fault:?} (port-down, port-up, qp-fatal QPN, device-fatal)"),
        ));
    }
    let hello = Hello {
        role: Role::Control,
        lid: 0,
        key,
    };
    let (mut s, cred) = hello::open(&control_name(ns, pid), &hello)?;
    if u32::try_from(cred.pid) != Ok(pid) {
        return Err(Error::new(
            ErrorKind::PermissionDenied,
            format!(
                "the control socket of process {pid} is held by process {}",
                cred.pid
            ),
        ));
    }
    s.set_read_timeout(Some(CONTROL_WAIT))?;
    match s.write_all(format!("{fault}\n").as_bytes()) {
        // Closed after the hello: refused.
        Err(e) if matches!(e.kind(), ErrorKind::BrokenPipe | ErrorKind::ConnectionReset) => {
            return Err(unanswered(pid));
        }
        r => r?,
    }
    let mut answer = String::new();
    match s.read_to_string(&mut answer) {
        Ok(_) if answer.trim() == "ok" => Ok(()),
        // Closed with the fault unread (a reset), or after reading it: unanswered either way.
        Ok(0) => Err(unanswered(pid)),
        Err(e) if e.kind() == ErrorKind::ConnectionReset => Err(unanswered(pid)),
        Ok(_) => Err(Error::other(format!(
            "process {pid}: {}",
            answer.trim().trim_start_matches("error: ")
        ))),
        Err(e) => Err(e),
    }
}

/// The error of a control connection closed without an answer.
fn unanswered(pid: u32) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!(
            "process {pid} closed the connection unanswered: it is of another emulated fabric \
             (SYSFS_PATH must name the sysfs tree it runs with)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_and_round_trip_through_their_codes() {
        for (text, f) in [
            ("port-down", Fault::PortDown),
            ("port-up", Fault::PortUp),
            ("device-fatal", Fault::DeviceFatal),
            ("qp-fatal 257", Fault::QpFatal(257)),
            ("qp-fatal 0x101", Fault::QpFatal(0x101)),
        ] {
            assert_eq!(Fault::parse(text), Some(f), "{text}");
            let (k, a) = f.code();
            assert_eq!(Fault::of_code(k, a), Some(f));
        }
        for bad in ["", "port", "qp-fatal", "qp-fatal x", "port-down now"] {
            assert_eq!(Fault::parse(bad), None, "{bad}");
        }
    }
}

//! Completion channels, as the kernel's uverbs keeps them: `CREATE_COMP_CHANNEL` answers a
//! descriptor; a CQ created on it (its `comp_channel`) queues one event per completion event
//! the device raises (`zverbs_sim::arm`: libmlx5's `mlx5_arm_cq` writes the arm word the
//! device reads); a `read` of the descriptor returns the oldest as a
//! `struct ib_uverbs_comp_event_desc` (the CQ's `user_handle`, which libibverbs' create-CQ
//! command set to its `struct ibv_cq`), blocking or not as the descriptor is; `DESTROY_CQ`
//! drops the CQ's unread events and answers how many were read (`comp_events_reported`),
//! which `ibv_destroy_cq` waits to see acknowledged.
//!
//! The descriptor is an `eventfd` (`EFD_SEMAPHORE`): its counter is the number of events
//! queued, so `poll`/`epoll` see it readable exactly while one is. The shim's `read` takes one
//! count from it (with the descriptor's own blocking mode), then the oldest event; an event
//! dropped by `DESTROY_CQ` leaves a count behind, which a reader takes and skips.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use core::sync::atomic::{AtomicUsize, Ordering};

/// An event queued on a channel: the CQ's handle and its `user_handle`.
#[derive(Clone, Copy, Debug)]
struct Event {
    cq: u32,
    user_handle: u64,
}

#[derive(Debug, Default)]
struct Registry {
    /// Channels by descriptor.
    channels: HashMap<i32, VecDeque<Event>>,
    /// Events read, by CQ handle.
    reported: HashMap<u32, u32>,
}

static REGISTRY: Mutex<Option<Registry>> = Mutex::new(None);
/// Channels open (a `read` of any other descriptor then looks nothing up).
static OPEN: AtomicUsize = AtomicUsize::new(0);

fn registry() -> MutexGuard<'static, Option<Registry>> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// `CREATE_COMP_CHANNEL`: a new channel's descriptor, or an errno.
pub fn create() -> Result<i32, i32> {
    // SAFETY: no pointers; a new descriptor or -1.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOMEM));
    }
    registry()
        .get_or_insert_with(Registry::default)
        .channels
        .insert(fd, VecDeque::new());
    OPEN.fetch_add(1, Ordering::Relaxed);
    Ok(fd)
}

/// What the device calls for each event of CQ `cq` (handle), created on channel `fd` with
/// `user_handle`; `None` when `fd` is no channel.
pub fn handler(fd: i32, cq: u32, user_handle: u64) -> Option<zverbs_sim::arm::EventHandler> {
    let known = registry()
        .as_ref()
        .is_some_and(|r| r.channels.contains_key(&fd));
    known.then(|| -> zverbs_sim::arm::EventHandler {
        Arc::new(move |_cqn| {
            let mut reg = registry();
            let Some(q) = reg.as_mut().and_then(|r| r.channels.get_mut(&fd)) else {
                return;
            };
            q.push_back(Event { cq, user_handle });
            let one = 1u64;
            // SAFETY: 8 readable bytes to the channel's eventfd (the shim forwards a write to
            // a descriptor that is not a uverbs one as is).
            unsafe { libc::write(fd, (&raw const one).cast(), 8) };
        })
    })
}

/// `DESTROY_CQ` of CQ `cq` (handle): drops its unread events; returns the events read.
pub fn destroyed(cq: u32) -> u32 {
    let mut reg = registry();
    let Some(r) = reg.as_mut() else {
        return 0;
    };
    for q in r.channels.values_mut() {
        q.retain(|e| e.cq != cq);
    }
    r.reported.remove(&cq).unwrap_or(0)
}

/// The program closed descriptor `fd`: if it was a channel, it is forgotten.
pub fn closed(fd: i32) {
    if OPEN.load(Ordering::Relaxed) == 0 {
        return;
    }
    if let Some(r) = registry().as_mut()
        && r.channels.remove(&fd).is_some()
    {
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Whether `fd` is a channel.
pub fn is_channel(fd: i32) -> bool {
    OPEN.load(Ordering::Relaxed) > 0
        && registry()
            .as_ref()
            .is_some_and(|r| r.channels.contains_key(&fd))
}

/// A `read` of channel `fd` into `buf` (`count` bytes), with `real` libc's `read`: one event
/// as a `struct ib_uverbs_comp_event_desc`, or -1 with `errno` (`EAGAIN` when the descriptor
/// is non-blocking and no event is queued; `EINVAL` for a buffer under 8 bytes).
///
/// # Safety
///
/// `buf` is valid for `count` bytes of writes; `real` is libc's `read`.
pub unsafe fn read(
    fd: i32,
    buf: *mut u8,
    count: usize,
    real: unsafe extern "C" fn(i32, *mut libc::c_void, usize) -> isize,
) -> isize {
    if count < 8 {
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::EINVAL };
        return -1;
    }
    loop {
        let mut v = 0u64;
        // SAFETY: 8 writable bytes; the descriptor's own blocking mode applies.
        let r = unsafe { real(fd, (&raw mut v).cast(), 8) };
        if r != 8 {
            return -1;
        }
        let mut reg = registry();
        let Some(r) = reg.as_mut() else {
            continue;
        };
        let Some(e) = r.channels.get_mut(&fd).and_then(VecDeque::pop_front) else {
            // The count of an event DESTROY_CQ dropped: skip it.
            continue;
        };
        *r.reported.entry(e.cq).or_insert(0) += 1;
        // SAFETY: (caller) `buf` holds at least 8 bytes.
        unsafe { buf.cast::<u64>().write_unaligned(e.user_handle) };
        return 8;
    }
}

//! The software device's completion channel: an `eventfd` that counts the events queued, and
//! the queue of the CQ numbers they are for.
//!
//! The device calls the channel's handler on its own thread when an armed CQ raises its event
//! (`zverbs_sim::arm`): the CQ number is queued and the `eventfd` incremented, under one lock,
//! so the descriptor is readable exactly while events are queued. Taking an event pops one
//! and decrements the counter (`EFD_SEMAPHORE`), under the same lock.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};

use super::ChannelProvider;
use crate::error::{Error, Result};

/// What the channel and the device's handler share.
#[derive(Debug)]
struct Shared {
    efd: OwnedFd,
    queue: Mutex<VecDeque<u32>>,
}

/// The software device's completion channel.
#[derive(Debug, Clone)]
pub(crate) struct SimChannel(Arc<Shared>);

impl SimChannel {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: no pointers; a new descriptor or -1.
        let fd = unsafe {
            libc::eventfd(
                0,
                libc::EFD_NONBLOCK | libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE,
            )
        };
        if fd < 0 {
            return Err(Error::last_os("eventfd"));
        }
        Ok(Self(Arc::new(Shared {
            // SAFETY: a descriptor just created, owned by nothing else.
            efd: unsafe { OwnedFd::from_raw_fd(fd) },
            queue: Mutex::new(VecDeque::new()),
        })))
    }

    /// The handler the device calls for each event of a CQ on this channel.
    pub(crate) fn handler(&self) -> zverbs_sim::arm::EventHandler {
        let shared = Arc::clone(&self.0);
        Arc::new(move |cqn| {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            q.push_back(cqn);
            let one = 1u64;
            // SAFETY: 8 readable bytes. The counter cannot overflow (one per queued event),
            // so the write does not fail.
            unsafe { libc::write(shared.efd.as_raw_fd(), (&raw const one).cast(), 8) };
        })
    }
}

impl ChannelProvider for SimChannel {
    fn fd(&self) -> RawFd {
        self.0.efd.as_raw_fd()
    }

    fn take_event(&self) -> Result<Option<usize>> {
        let mut q = self.0.queue.lock().unwrap_or_else(|p| p.into_inner());
        let Some(cqn) = q.pop_front() else {
            return Ok(None);
        };
        let mut v = 0u64;
        // SAFETY: 8 writable bytes. The counter is at least 1 (an event is queued), so the
        // non-blocking read takes one.
        let r = unsafe { libc::read(self.0.efd.as_raw_fd(), (&raw mut v).cast(), 8) };
        if r != 8 {
            return Err(Error::Verbs {
                verb: "read(eventfd)",
                source: io::Error::last_os_error(),
            });
        }
        Ok(Some(cqn as usize))
    }
}

//! The traits both backends implement: posting sends and receives, polling completions.
//!
//! Generic code written against these traits compiles to static dispatch for whichever backend
//! it is instantiated with.

use crate::error::{BatchError, PostError};
use crate::wc::Completion;
use crate::wr::{RecvWr, SendWr};

/// The send side of a queue pair.
///
/// Posting writes a request into the queue and nothing else; [`PostSend::ring`] makes
/// everything written since the previous ring visible to the device with one doorbell.
///
/// # Safety contract of posting
///
/// The device reads and writes memory by address, outside Rust's knowledge. The caller of the
/// `unsafe` post methods promises, for every request:
///
/// 1. each local entry that the device **writes** (the destination of an RDMA READ, the result
///    of an atomic) lies in a registered memory region whose key is given, and no Rust
///    reference to those bytes is used until the request's completion has been polled (or the
///    queue pair destroyed);
/// 2. each local entry that the device **reads** (WRITE and SEND payloads) stays registered
///    and unmodified until the completion, if the caller cares about the bytes sent;
/// 3. with [`SendFlags::INLINE`](crate::SendFlags::INLINE), every entry's `addr..addr+length`
///    is valid for reads by this thread during the call (the CPU copies it; no registration is
///    needed, and the memory may be reused as soon as the call returns).
pub trait PostSend {
    /// Writes one request into the send queue without ringing the doorbell.
    ///
    /// # Safety
    ///
    /// See the trait's safety contract.
    ///
    /// # Errors
    ///
    /// A [`PostError`] when the request is invalid for this queue or does not fit now; the
    /// queue is left exactly as it was.
    unsafe fn post_send(&mut self, wr: &SendWr<'_>) -> Result<(), PostError>;

    /// Tells the device about every request written since the last ring (one doorbell).
    /// Does nothing when nothing was written.
    fn ring(&mut self);

    /// Writes every request of `wrs` and rings once, or writes nothing at all.
    ///
    /// # Safety
    ///
    /// See the trait's safety contract; it applies to every request of the batch.
    ///
    /// # Errors
    ///
    /// A [`BatchError`] naming the first request that is invalid or does not fit; then nothing
    /// of the batch was written (requests posted earlier and not yet rung are still pending).
    unsafe fn post_send_batch(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError>;

    /// Writes one request and rings at once: the lowest-latency way to send one message.
    ///
    /// # Safety
    ///
    /// See the trait's safety contract.
    ///
    /// # Errors
    ///
    /// As [`PostSend::post_send`]; on error nothing is rung.
    #[inline]
    unsafe fn send(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        // SAFETY: the caller upholds the trait's contract for `wr`.
        unsafe { self.post_send(wr)? };
        self.ring();
        Ok(())
    }
}

/// The receive side of a queue pair.
///
/// A receive request is visible to the device as soon as the post returns.
///
/// # Safety contract of posting
///
/// The device writes incoming messages into the request's entries: they must lie in registered
/// memory with local-write access, and no Rust reference to them may be used until the
/// request's completion has been polled (or the queue pair destroyed).
pub trait PostRecv {
    /// Posts one receive request.
    ///
    /// # Safety
    ///
    /// See the trait's safety contract.
    ///
    /// # Errors
    ///
    /// [`PostError::QueueFull`] or [`PostError::TooManySges`]; nothing is written.
    unsafe fn post_recv(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError>;

    /// Posts every request of `wrs` with one doorbell-record update, or none of them.
    ///
    /// # Safety
    ///
    /// See the trait's safety contract; it applies to every request of the batch.
    ///
    /// # Errors
    ///
    /// A [`BatchError`] naming the first request that is invalid or does not fit; nothing of
    /// the batch was written.
    unsafe fn post_recv_batch(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError>;
}

/// A completion queue.
pub trait PollCq {
    /// Moves up to `out.len()` completions into `out`, oldest first, and returns how many.
    /// Never blocks; returns 0 when no completion is ready.
    fn poll(&mut self, out: &mut [Completion]) -> usize;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SendFlags, Sge};

    /// A queue that records what it was asked to do, to check the provided `send`.
    #[derive(Default)]
    struct Recorder {
        posted: u32,
        rung: u32,
        refuse: bool,
    }

    impl PostSend for Recorder {
        unsafe fn post_send(&mut self, _wr: &SendWr<'_>) -> Result<(), PostError> {
            if self.refuse {
                return Err(PostError::QueueFull { needed: 1, free: 0 });
            }
            self.posted += 1;
            Ok(())
        }
        fn ring(&mut self) {
            self.rung += 1;
        }
        unsafe fn post_send_batch(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
            self.posted += wrs.len() as u32;
            self.ring();
            Ok(())
        }
    }

    #[test]
    fn send_posts_then_rings_and_not_on_error() {
        let sgl = [Sge::new(0, 0, 0)];
        let wr = SendWr::send(1, &sgl).with_flags(SendFlags::SIGNALED);
        let mut q = Recorder::default();
        // SAFETY: the recorder touches no memory.
        unsafe { q.send(&wr) }.unwrap();
        assert_eq!((q.posted, q.rung), (1, 1));
        q.refuse = true;
        // SAFETY: as above.
        assert!(unsafe { q.send(&wr) }.is_err());
        assert_eq!((q.posted, q.rung), (1, 1));
    }
}

//! The traits both backends implement: posting sends and receives, polling completions.
//!
//! Generic code written against these traits compiles to static dispatch for whichever backend
//! it is instantiated with.
//!
//! One name per operation:
//!
//! | to | call | the device sees it |
//! |---|---|---|
//! | post one send request | [`PostSend::post`] | at once (it rings) |
//! | post several, all or none | [`PostSend::post_all`] | at once, one doorbell |
//! | stage several, one doorbell for all | [`PostSend::batch`], then [`SendBatch::post`] | when the batch is finished or dropped |
//! | post one receive request | [`PostRecv::post`] | at once |
//! | post several receives, all or none | [`PostRecv::post_all`] | at once |
//! | take completions | [`PollCq::poll_into`] (the filled part) or [`PollCq::poll`] (a count) | |
//!
//! [`PostSend::stage`] and [`PostSend::ring`] are the two halves every backend implements and
//! the batch is made of; calling them directly is for code that keeps its own batch.

use crate::brief::BriefCompletion;
use crate::error::{BatchError, PostError};
use crate::wc::Completion;
use crate::wr::{RecvWr, SendWr};

/// The send side of a queue pair.
///
/// [`PostSend::post`] writes one request and rings the doorbell: the device sees it when the
/// call returns. To put several requests behind one doorbell, stage them in a
/// [`PostSend::batch`], which rings when it is finished or dropped, or post them all at once
/// with [`PostSend::post_all`].
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
///
/// # Example
///
/// What a backend implements is [`PostSend::stage`], [`PostSend::ring`] and
/// [`PostSend::post_all`]; [`PostSend::post`] and [`PostSend::batch`] come with the trait.
/// Here a queue of four slots that only counts, and code generic over the trait (the
/// `zverbs` crate's documentation of `PostSend` shows the same calls on a device):
///
/// ```
/// use zverbs_core::{BatchError, PostError, PostSend, RemoteBuf, SendWr, Sge};
///
/// /// Four slots; a request stays in its slot for ever (there is no CQ here).
/// #[derive(Default)]
/// struct Counting { staged: u32, rung: u32, doorbells: u32 }
///
/// impl PostSend for Counting {
///     unsafe fn stage(&mut self, _wr: &SendWr<'_>) -> Result<(), PostError> {
///         if self.staged == 4 {
///             return Err(PostError::QueueFull { needed: 1, free: 0 });
///         }
///         self.staged += 1;
///         Ok(())
///     }
///     fn ring(&mut self) {
///         if self.rung < self.staged {
///             (self.rung, self.doorbells) = (self.staged, self.doorbells + 1);
///         }
///     }
///     unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
///         let free = 4 - self.staged as usize;
///         if wrs.len() > free {
///             let error = PostError::QueueFull { needed: 1, free: 0 };
///             return Err(BatchError { index: free, error });
///         }
///         self.staged += wrs.len() as u32;
///         self.ring();
///         Ok(())
///     }
/// }
///
/// /// Generic code: compiled for whichever queue it is given.
/// fn write_twice(sq: &mut impl PostSend, wr: &SendWr<'_>) -> Result<(), PostError> {
///     let mut batch = sq.batch();
///     // SAFETY: the requests name no memory this program can touch (`Counting` reads none).
///     unsafe {
///         batch.post(wr)?;
///         batch.post(wr)?;
///     }
///     batch.finish(); // one doorbell for both
///     Ok(())
/// }
///
/// let mut sq = Counting::default();
/// let sgl = [Sge::new(0x1000, 64, 0x11)];
/// let wr = SendWr::write(1, &sgl, RemoteBuf::new(0x2000, 0x22)).signaled();
/// write_twice(&mut sq, &wr).unwrap();
/// // SAFETY: as above.
/// unsafe { sq.post(&wr) }.unwrap(); // posts and rings
/// assert_eq!((sq.staged, sq.doorbells), (3, 2));
/// // The fourth fits, the fifth does not: refused, and nothing changed.
/// let err = unsafe { sq.post_all(&[wr, wr]) }.unwrap_err();
/// assert_eq!((err.index, sq.staged), (1, 3));
/// ```
pub trait PostSend {
    /// Writes one request into the send queue **without** ringing the doorbell: the device
    /// does not see it until [`PostSend::ring`]. The half of a batch that backends implement;
    /// use [`PostSend::post`], or stage through [`PostSend::batch`], which rings for you.
    ///
    /// # Safety
    ///
    /// See the trait's safety contract.
    ///
    /// # Errors
    ///
    /// A [`PostError`] when the request is invalid for this queue or does not fit now; the
    /// queue is left exactly as it was.
    unsafe fn stage(&mut self, wr: &SendWr<'_>) -> Result<(), PostError>;

    /// Tells the device about every request staged since the last ring (one doorbell).
    /// Does nothing when nothing was staged.
    fn ring(&mut self);

    /// Writes every request of `wrs` and rings once, or writes nothing at all.
    ///
    /// "Nothing written" means nothing the device may read: a refused batch leaves the doorbell
    /// record, the doorbell register (BlueFlame), the queue's counters (producer, consumer,
    /// signaled requests outstanding) and its ring below the producer counter as they were,
    /// and requests staged earlier stay staged. A backend may check and write each request in
    /// turn and roll its producer counter back at a refused one (the direct mlx5 backend does):
    /// then the free part of its ring, from the producer counter on, and the bookkeeping of
    /// those free entries may hold the refused batch's requests. That part is scratch, which
    /// the device never reads before a later doorbell covers it, and the next post writes
    /// over.
    ///
    /// # Safety
    ///
    /// See the trait's safety contract; it applies to every request of the batch.
    ///
    /// # Errors
    ///
    /// A [`BatchError`] naming the first request that is invalid or does not fit; then nothing
    /// of the batch was written, in the sense above (requests staged earlier and not yet rung
    /// stay staged).
    unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError>;

    /// Writes one request and rings at once: the device sees it when the call returns. The
    /// lowest-latency way to send one message.
    ///
    /// # Safety
    ///
    /// See the trait's safety contract.
    ///
    /// # Errors
    ///
    /// As [`PostSend::stage`]; on error nothing is rung.
    #[inline]
    unsafe fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        // SAFETY: the caller upholds the trait's contract for `wr`.
        unsafe { self.stage(wr)? };
        self.ring();
        Ok(())
    }

    /// A batch: requests posted to it are staged, and one doorbell rings for all of them
    /// when it is [finished](SendBatch::finish) or dropped (also when a `?` leaves early: what
    /// was staged before the error is rung).
    #[inline]
    fn batch(&mut self) -> SendBatch<'_, Self> {
        SendBatch { q: self }
    }
}

/// Send requests staged behind one doorbell ([`PostSend::batch`]).
///
/// Requests posted to a batch are written into the queue but not yet visible to the device;
/// [`SendBatch::finish`] rings the doorbell once for all of them, and so does dropping the
/// batch. It borrows the queue mutably, so nothing else posts to it meanwhile.
///
/// ```
/// # use zverbs_core::{PostSend, PostError, SendWr};
/// # unsafe fn f(sq: &mut impl PostSend, a: &SendWr<'_>, b: &SendWr<'_>) -> Result<(), PostError> {
/// let mut batch = sq.batch();
/// // SAFETY: (caller) the posting contract for both requests.
/// unsafe {
///     batch.post(a)?;
///     batch.post(b)?;
/// }
/// batch.finish(); // one doorbell for both
/// # Ok(()) }
/// ```
#[must_use = "a batch rings when it is finished or dropped; post to it, then call `finish`"]
#[derive(Debug)]
pub struct SendBatch<'q, Q: PostSend + ?Sized> {
    q: &'q mut Q,
}

impl<Q: PostSend + ?Sized> SendBatch<'_, Q> {
    /// Stages one request (see [`PostSend::stage`]); the device sees it when the batch rings.
    ///
    /// # Safety
    ///
    /// The posting contract of [`PostSend`].
    ///
    /// # Errors
    ///
    /// As [`PostSend::stage`]: the request is refused and nothing is written; the requests
    /// staged before it stay in the batch.
    #[inline(always)]
    pub unsafe fn post(&mut self, wr: &SendWr<'_>) -> Result<(), PostError> {
        // SAFETY: (caller) the posting contract.
        unsafe { self.q.stage(wr) }
    }

    /// Rings the doorbell once for every request staged in the batch (what dropping it does
    /// too; this says so where it happens).
    #[inline(always)]
    pub fn finish(self) {}
}

impl<Q: PostSend + ?Sized> Drop for SendBatch<'_, Q> {
    #[inline(always)]
    fn drop(&mut self) {
        self.q.ring();
    }
}

/// The receive side of a queue pair.
///
/// A receive request is visible to the device as soon as the post returns: there is no
/// doorbell to ring.
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
    unsafe fn post(&mut self, wr: &RecvWr<'_>) -> Result<(), PostError>;

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
    unsafe fn post_all(&mut self, wrs: &[RecvWr<'_>]) -> Result<(), BatchError>;
}

/// A completion queue.
///
/// # Example
///
/// A CQ whose completions are already there, and code generic over the trait that takes
/// completions until none is ready, stopping at the first failed one:
///
/// ```
/// use zverbs_core::{Completion, PollCq, WcError, WcStatus};
///
/// struct Ready<'a>(&'a [Completion]);
///
/// impl PollCq for Ready<'_> {
///     fn poll(&mut self, out: &mut [Completion]) -> usize {
///         let n = out.len().min(self.0.len());
///         out[..n].copy_from_slice(&self.0[..n]);
///         self.0 = &self.0[n..];
///         n
///     }
/// }
///
/// fn drain(cq: &mut impl PollCq) -> Result<usize, WcError> {
///     let mut wc = [Completion::EMPTY; 4]; // the caller's buffer: polling never allocates
///     let mut n = 0;
///     loop {
///         let ready = cq.poll_into(&mut wc);
///         if ready.is_empty() {
///             return Ok(n);
///         }
///         for c in ready.iter() {
///             c.ok()?;
///             n += 1;
///         }
///     }
/// }
///
/// let done = Completion { wr_id: 1, ..Completion::EMPTY };
/// let failed = Completion { wr_id: 2, status: WcStatus::RemAccessErr, ..Completion::EMPTY };
/// assert_eq!(drain(&mut Ready(&[done; 6])), Ok(6));
/// assert_eq!(drain(&mut Ready(&[done, failed, done])).unwrap_err().wr_id, 2);
/// ```
pub trait PollCq {
    /// Moves up to `out.len()` completions into `out`, oldest first, and returns how many.
    /// Never blocks; returns 0 when no completion is ready.
    fn poll(&mut self, out: &mut [Completion]) -> usize;

    /// As [`PollCq::poll`], returning the filled part of `out` (empty when no completion is
    /// ready): `for wc in cq.poll_into(&mut buf) { wc.ok()?; }`.
    #[inline]
    fn poll_into<'o>(&mut self, out: &'o mut [Completion]) -> &'o mut [Completion] {
        let n = self.poll(out).min(out.len());
        &mut out[..n]
    }

    /// As [`PollCq::poll`], writing only the fields most loops read ([`BriefCompletion`]:
    /// `wr_id`, status, opcode, `byte_len`, and the vendor syndrome of a failure): for a loop
    /// that matches completions to its requests by `wr_id` and reads nothing else of them.
    /// The mlx5 direct poller then reads nothing else of the CQE; the provided method polls
    /// full completions (16 at a time, on the stack) and keeps the brief part of each.
    #[inline]
    fn poll_brief(&mut self, out: &mut [BriefCompletion]) -> usize {
        crate::brief::poll_brief_via_poll(self, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{SendFlags, Sge};

    /// A queue that records what it was asked to do, to check the provided methods.
    #[derive(Default)]
    struct Recorder {
        staged: u32,
        rung: u32,
        /// Requests staged when the doorbell last rang.
        seen: u32,
        refuse: bool,
    }

    impl PostSend for Recorder {
        unsafe fn stage(&mut self, _wr: &SendWr<'_>) -> Result<(), PostError> {
            if self.refuse {
                return Err(PostError::QueueFull { needed: 1, free: 0 });
            }
            self.staged += 1;
            Ok(())
        }
        fn ring(&mut self) {
            self.rung += 1;
            self.seen = self.staged;
        }
        unsafe fn post_all(&mut self, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
            self.staged += wrs.len() as u32;
            self.ring();
            Ok(())
        }
    }

    fn wr(sgl: &[Sge]) -> SendWr<'_> {
        SendWr::send(1, sgl).with_flags(SendFlags::SIGNALED)
    }

    #[test]
    fn post_stages_then_rings_and_not_on_error() {
        let sgl = [Sge::new(0, 0, 0)];
        let mut q = Recorder::default();
        // SAFETY: the recorder touches no memory.
        unsafe { q.post(&wr(&sgl)) }.unwrap();
        assert_eq!((q.staged, q.rung, q.seen), (1, 1, 1));
        q.refuse = true;
        // SAFETY: as above.
        assert!(unsafe { q.post(&wr(&sgl)) }.is_err());
        assert_eq!((q.staged, q.rung), (1, 1));
    }

    #[test]
    fn a_batch_rings_once_when_finished() {
        let sgl = [Sge::new(0, 0, 0)];
        let mut q = Recorder::default();
        let mut b = q.batch();
        for _ in 0..3 {
            // SAFETY: the recorder touches no memory.
            unsafe { b.post(&wr(&sgl)) }.unwrap();
        }
        b.finish();
        assert_eq!((q.staged, q.rung, q.seen), (3, 1, 3));
    }

    #[test]
    fn a_dropped_batch_rings_what_it_staged() {
        fn two_then_fail(q: &mut Recorder, sgl: &[Sge]) -> Result<(), PostError> {
            let mut b = q.batch();
            // SAFETY: the recorder touches no memory.
            unsafe {
                b.post(&wr(sgl))?;
                b.post(&wr(sgl))?;
                b.q.refuse = true;
                b.post(&wr(sgl))?;
            }
            b.finish();
            Ok(())
        }
        let sgl = [Sge::new(0, 0, 0)];
        let mut q = Recorder::default();
        assert!(two_then_fail(&mut q, &sgl).is_err());
        // The `?` left early: the two staged requests were still rung, once.
        assert_eq!((q.staged, q.rung, q.seen), (2, 1, 2));
        drop(q.batch());
        assert_eq!(q.rung, 2);
    }

    /// A CQ that reports `ready` completions, numbered from 0, whatever room it is given.
    struct Ready(usize);

    impl PollCq for Ready {
        fn poll(&mut self, out: &mut [Completion]) -> usize {
            let n = self.0.min(out.len());
            for (i, c) in out[..n].iter_mut().enumerate() {
                c.wr_id = i as u64;
            }
            self.0 -= n;
            n
        }
    }

    #[test]
    fn poll_into_returns_the_filled_part() {
        let mut out = [Completion::EMPTY; 4];
        assert!(Ready(0).poll_into(&mut out).is_empty());
        let got = Ready(2).poll_into(&mut out);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].wr_id, got[1].wr_id), (0, 1));
        assert_eq!(Ready(9).poll_into(&mut out).len(), 4);
    }
}

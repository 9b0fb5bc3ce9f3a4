//! The convenient layer: posting without `unsafe`, posts that ring, waits with deadlines.
//!
//! The [`PostSend`] / [`PostRecv`] methods are `unsafe` because the device touches memory by
//! address. Here every local buffer is a [`BufSlice`] of an [`MrBuf`]: bounds-checked against
//! the buffer, with the buffer's own key. That is enough for memory safety:
//!
//! - Rust code never holds a reference into an [`MrBuf`] (it copies in and out, with atomic
//!   accesses: see its memory model), so the device writing at any time can neither break an
//!   aliasing guarantee nor race with a read;
//! - an `MrBuf` is deregistered before its memory is freed, and after deregistration the device
//!   no longer accesses it: dropping a buffer while a request still uses it makes that request
//!   fail with a protection error, never a write into freed memory;
//! - inline payloads are plain `&[u8]`, copied during the call.
//!
//! Remote addresses are the peer's memory, protected by its keys on the peer's side.
//!
//! What stays the caller's business is meaning, not safety: reading a buffer before the
//! completion of the request that fills it gives whatever bytes have landed so far.
//!
//! # Nothing is silently left undone
//!
//! - Every method of [`SafeSendQueue`] posts one request **and rings the doorbell**: when it
//!   returns `Ok`, the device has the request. To put several requests behind one doorbell,
//!   stage them in a [`SafeSendQueue::batch`] (the same method names), which rings once when it
//!   is finished or dropped:
//!
//!   ```no_run
//!   # use zverbs::{MrBuf, RemoteBuf, SendFlags, safe::SafeSendQueue, AnySendQueue};
//!   # fn f(sq: &mut SafeSendQueue<AnySendQueue>, buf: &MrBuf, peer: RemoteBuf) -> zverbs::Result<()> {
//!   let mut b = sq.batch();
//!   b.write(1, buf.slice(0..64), peer, SendFlags::NONE)?;
//!   b.send(2, buf.slice(64..128), SendFlags::SIGNALED)?;
//!   b.finish(); // one doorbell for both
//!   # Ok(()) }
//!   ```
//!
//! - [`SafePoller::wait`] spins for a number of completions until a deadline, and says so
//!   when the deadline passes ([`WaitError::Timeout`]); [`Completion::ok`] turns a failed
//!   completion into an error ([`zverbs_core::WcError`]).
//! - Every error here converts into [`crate::Error`], so `?` works across set-up, posting and
//!   waiting in one function.
//!
//! The layer is thin: a post through [`SafeSendQueue`] is the bounds and access check its
//! [`BufSlice`] already passed, and the queue's own [`PostSend::post`]; [`SafePoller`] copies
//! completions into a buffer of its own, allocated once.

use std::ops::RangeBounds;
use std::time::Instant;

use zverbs_core::{
    Completion, PollCq, PostRecv, PostSend, RecvWr, RemoteBuf, SendBatch, SendFlags, SendWr, Sge,
};

#[cfg(doc)]
use zverbs_core::PostError;

pub use crate::error::{SafePostError, WaitError};
use crate::mr::MrBuf;
use crate::queues::{AnyPoller, AnyRecvQueue, AnySendQueue};
use crate::types::access::AccessFlags;
use crate::types::buf::{BufError, or_panic};
use crate::ud::UdTarget;

/// A bounds-checked span of an [`MrBuf`] ([`MrBuf::slice`]).
#[derive(Clone, Copy, Debug)]
pub struct BufSlice<'a> {
    buf: &'a MrBuf,
    sge: Sge,
}

impl MrBuf {
    /// The span `range` of the buffer, to post: `buf.slice(..)`, `buf.slice(64..128)`,
    /// `buf.slice(8..)`.
    ///
    /// # Panics
    ///
    /// As slicing `&s[range]` does, if the range is reversed or reaches past the end of the
    /// buffer, and if it is longer than a scatter entry can carry (4 GiB − 1 bytes): the
    /// message names the range and the buffer's length. [`MrBuf::try_slice`] returns the
    /// error instead.
    #[track_caller]
    pub fn slice(&self, range: impl RangeBounds<usize>) -> BufSlice<'_> {
        or_panic(self.try_slice(range))
    }

    /// As [`MrBuf::slice`].
    ///
    /// # Errors
    ///
    /// [`BufError::ReversedRange`], [`BufError::OutOfBounds`], or [`BufError::TooLong`] for a
    /// span longer than `u32::MAX` bytes.
    pub fn try_slice(&self, range: impl RangeBounds<usize>) -> Result<BufSlice<'_>, BufError> {
        Ok(BufSlice {
            buf: self,
            sge: self.try_sge(range)?,
        })
    }
}

impl BufSlice<'_> {
    /// The scatter entry it stands for.
    pub fn sge(&self) -> Sge {
        self.sge
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.sge.length as usize
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.sge.length == 0
    }

    fn writable(&self) -> Result<Sge, SafePostError> {
        if self.buf.access().contains(AccessFlags::LOCAL_WRITE) {
            Ok(self.sge)
        } else {
            Err(SafePostError::NotWritable)
        }
    }
}

/// The send operations, each building its request and handing it to `$submit` (post and ring,
/// or stage): written once for [`SafeSendQueue`] and [`SafeSendBatch`].
macro_rules! send_ops {
    ($what:literal) => {
        #[doc = concat!("RDMA WRITE of `local` to `remote`: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// [`SafePostError::Post`] when the queue refuses it.
        #[inline(always)]
        pub fn write(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge];
            self.submit(&SendWr::write(wr_id, &sgl, remote).with_flags(flags))
        }

        #[doc = concat!("RDMA WRITE with immediate: ", $what, ". The peer's receive completion carries `imm`, and consumes one of its receive requests: without one posted, the peer answers \"receiver not ready\" and the request fails once the QP's `rnr_retry` is spent (see [`ConnectAttr`](crate::ConnectAttr)).")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::write`].
        #[inline(always)]
        pub fn write_imm(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            imm: u32,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge];
            self.submit(&SendWr::write_imm(wr_id, &sgl, remote, imm).with_flags(flags))
        }

        #[doc = concat!("RDMA WRITE of `data`, copied into the request (inline): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::write`] (including `InlineTooLarge`).
        #[inline(always)]
        pub fn write_inline(
            &mut self,
            wr_id: u64,
            data: &[u8],
            remote: RemoteBuf,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [Sge::from_slice(data, 0)];
            self.submit(&SendWr::write(wr_id, &sgl, remote).with_flags(flags | SendFlags::INLINE))
        }

        #[doc = concat!("SEND of `local` into the peer's next receive request: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::write`].
        #[inline(always)]
        pub fn send(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge];
            self.submit(&SendWr::send(wr_id, &sgl).with_flags(flags))
        }

        #[doc = concat!("SEND with immediate: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::write`].
        #[inline(always)]
        pub fn send_imm(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            imm: u32,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge];
            self.submit(&SendWr::send_imm(wr_id, &sgl, imm).with_flags(flags))
        }

        #[doc = concat!("UD SEND of `local` to `dest` ([`AddressHandle::target`](crate::AddressHandle::target)): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::write`]; [`PostError::WrongTransport`] on an RC QP,
        /// [`PostError::DatagramTooLong`] for more than the path MTU.
        #[inline(always)]
        pub fn send_to(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            dest: &UdTarget,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge];
            self.submit(&SendWr::send_to(wr_id, &sgl, dest.dest()).with_flags(flags))
        }

        #[doc = concat!("UD SEND with immediate: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::send_to`].
        #[inline(always)]
        pub fn send_to_imm(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            dest: &UdTarget,
            imm: u32,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.sge];
            self.submit(&SendWr::send_to_imm(wr_id, &sgl, dest.dest(), imm).with_flags(flags))
        }

        #[doc = concat!("SEND of `data`, copied into the request (inline): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::write_inline`].
        #[inline(always)]
        pub fn send_inline(
            &mut self,
            wr_id: u64,
            data: &[u8],
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [Sge::from_slice(data, 0)];
            self.submit(&SendWr::send(wr_id, &sgl).with_flags(flags | SendFlags::INLINE))
        }

        #[doc = concat!("RDMA READ of `remote` into `local`: ", $what, ".")]
        ///
        /// # Errors
        ///
        /// [`SafePostError::NotWritable`] unless `local`'s buffer has `LOCAL_WRITE`; as
        /// [`SafeSendQueue::write`].
        #[inline(always)]
        pub fn read(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let sgl = [local.writable()?];
            self.submit(&SendWr::read(wr_id, &sgl, remote).with_flags(flags))
        }

        #[doc = concat!("Atomic fetch-and-add of `add` at `remote` (8 bytes, 8-byte aligned); the old value lands in `local` (8 bytes): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::read`] (including `AtomicSize`, `AtomicAlignment`).
        #[inline(always)]
        pub fn fetch_add(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            add: u64,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let local = local.writable()?;
            self.submit(&SendWr::fetch_add(wr_id, local, remote, add).with_flags(flags))
        }

        #[doc = concat!("Atomic compare-and-swap at `remote`: `swap` is stored if it holds `compare`; the old value lands in `local` (8 bytes): ", $what, ".")]
        ///
        /// # Errors
        ///
        /// As [`SafeSendQueue::fetch_add`].
        #[inline(always)]
        pub fn compare_swap(
            &mut self,
            wr_id: u64,
            local: BufSlice<'_>,
            remote: RemoteBuf,
            compare: u64,
            swap: u64,
            flags: SendFlags,
        ) -> Result<(), SafePostError> {
            let local = local.writable()?;
            self.submit(&SendWr::compare_swap(wr_id, local, remote, compare, swap).with_flags(flags))
        }
    };
}

/// A send queue that posts only [`BufSlice`]s and inline bytes. Each method posts one request
/// and rings the doorbell; [`SafeSendQueue::batch`] stages several behind one doorbell.
///
/// # Example
///
/// `a` and `b` are two connected QPs, `buf_a` and `buf_b` a buffer on each side (set up as in
/// [`Qp`](crate::Qp)'s example):
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// # let pd = ctx.alloc_pd()?;
/// # let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// # let (a, b) = (pd.qp_builder(&cq_a, &cq_a).build()?, pd.qp_builder(&cq_b, &cq_b).build()?);
/// # zverbs::connect_pair(&a, &b)?;
/// # let buf_a = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// # let buf_b = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// use std::time::{Duration, Instant};
/// use zverbs::SendFlags;
///
/// let mut qa = a.queues(&cq_a)?; // `qa.sq` is a `SafeSendQueue`
/// buf_a.write(0, b"written");
/// qa.sq.write(1, buf_a.slice(0..7), buf_b.remote(64), SendFlags::NONE)?; // posted, rung
/// qa.sq.write_inline(2, b"inline", buf_b.remote(128), SendFlags::SIGNALED)?; // no buffer needed
/// let mut batch = qa.sq.batch(); // two requests, one doorbell
/// batch.write(3, buf_a.slice(0..7), buf_b.remote(256), SendFlags::NONE)?;
/// batch.write(4, buf_a.slice(0..7), buf_b.remote(320), SendFlags::SIGNALED)?;
/// batch.finish();
/// let deadline = Instant::now() + Duration::from_secs(5);
/// for c in qa.cq.wait(2, deadline)? {
///     c.ok()?; // only signaled requests complete: 2 and 4
/// }
/// let mut got = [0; 6];
/// buf_b.read(128, &mut got);
/// assert_eq!(&got, b"inline");
/// // A span the device would have to write into a read-only buffer is refused, not posted.
/// let ro = pd.alloc_buf(64, zverbs::AccessFlags::REMOTE_READ)?;
/// assert!(qa.sq.read(5, ro.slice(..), buf_b.remote(0), SendFlags::SIGNALED).is_err());
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug)]
pub struct SafeSendQueue<Q> {
    q: Q,
}

impl<Q: PostSend> SafeSendQueue<Q> {
    /// Wraps a send queue of either backend.
    pub fn new(q: Q) -> Self {
        Self { q }
    }

    /// The wrapped queue (posting through it directly is `unsafe`).
    pub fn get_mut(&mut self) -> &mut Q {
        &mut self.q
    }

    /// The wrapped queue.
    pub fn into_inner(self) -> Q {
        self.q
    }

    /// A batch: the same operations, staged; one doorbell rings for all of them when the batch
    /// is [finished](SafeSendBatch::finish) or dropped.
    pub fn batch(&mut self) -> SafeSendBatch<'_, Q> {
        SafeSendBatch { b: self.q.batch() }
    }

    #[inline(always)]
    fn submit(&mut self, wr: &SendWr<'_>) -> Result<(), SafePostError> {
        // SAFETY: every local entry is a bounds-checked span of an `MrBuf` with its own key
        // (see the module docs: such memory is never referenced by Rust and is deregistered
        // before it is freed); inline sources are `&[u8]` live for this call.
        unsafe { self.q.post(wr) }.map_err(Into::into)
    }

    send_ops!("posted, and the doorbell rung");
}

/// Requests staged on a [`SafeSendQueue`] behind one doorbell ([`SafeSendQueue::batch`]): the
/// queue's operations under the same names, each staging its request; the doorbell rings once
/// for all of them when the batch is [finished](SafeSendBatch::finish) or dropped (also when a
/// `?` leaves early: what was staged before the error is rung).
///
/// A batch that is created and not used is a warning (`unused_must_use`):
///
/// ```compile_fail
/// #![deny(unused_must_use)]
/// # use zverbs::{AnySendQueue, safe::SafeSendQueue};
/// fn f(sq: &mut SafeSendQueue<AnySendQueue>) {
///     sq.batch(); // error: unused `SafeSendBatch` that must be used
/// }
/// ```
#[must_use = "a batch stages requests and rings when it is finished or dropped; post to it, then \
              call `finish`"]
#[derive(Debug)]
pub struct SafeSendBatch<'q, Q: PostSend> {
    b: SendBatch<'q, Q>,
}

impl<Q: PostSend> SafeSendBatch<'_, Q> {
    #[inline(always)]
    fn submit(&mut self, wr: &SendWr<'_>) -> Result<(), SafePostError> {
        // SAFETY: as in `SafeSendQueue::submit`.
        unsafe { self.b.post(wr) }.map_err(Into::into)
    }

    send_ops!("staged, rung when the batch is finished or dropped");

    /// Rings the doorbell once for every request staged (what dropping the batch does too;
    /// this says so where it happens).
    pub fn finish(self) {
        self.b.finish();
    }
}

/// A receive queue that posts only [`BufSlice`]s of writable buffers.
///
/// # Example
///
/// Post a receive, and a SEND from the peer lands in it:
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// # let pd = ctx.alloc_pd()?;
/// # let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// # let (a, b) = (pd.qp_builder(&cq_a, &cq_a).build()?, pd.qp_builder(&cq_b, &cq_b).build()?);
/// # zverbs::connect_pair(&a, &b)?;
/// # let buf_a = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// # let buf_b = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// use std::time::{Duration, Instant};
/// use zverbs::{SendFlags, WcOpcode};
///
/// let (mut qa, mut qb) = (a.queues(&cq_a)?, b.queues(&cq_b)?);
/// qb.rq.post(7, buf_b.slice(2048..))?; // `qb.rq` is a `SafeRecvQueue`; visible at once
/// buf_a.write(0, b"a message");
/// qa.sq.send_imm(1, buf_a.slice(0..9), 0xcafe, SendFlags::NONE)?;
/// let deadline = Instant::now() + Duration::from_secs(5);
/// let c = *qb.cq.wait(1, deadline)?[0].ok()?;
/// assert_eq!((c.wr_id, c.opcode, c.byte_len, c.imm()), (7, WcOpcode::Recv, 9, Some(0xcafe)));
/// let mut got = [0; 9];
/// buf_b.read(2048, &mut got);
/// assert_eq!(&got, b"a message");
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug)]
pub struct SafeRecvQueue<Q> {
    q: Q,
}

impl<Q: PostRecv> SafeRecvQueue<Q> {
    /// Wraps a receive queue of either backend.
    pub fn new(q: Q) -> Self {
        Self { q }
    }

    /// The wrapped queue (posting through it directly is `unsafe`).
    pub fn get_mut(&mut self) -> &mut Q {
        &mut self.q
    }

    /// The wrapped queue.
    pub fn into_inner(self) -> Q {
        self.q
    }

    /// Posts a receive into `local`; the device may fill it as soon as this returns.
    ///
    /// # Errors
    ///
    /// [`SafePostError::NotWritable`] unless the buffer has `LOCAL_WRITE`;
    /// [`SafePostError::Post`] when the queue refuses it.
    pub fn post(&mut self, wr_id: u64, local: BufSlice<'_>) -> Result<(), SafePostError> {
        let sgl = [local.writable()?];
        // SAFETY: a bounds-checked span of an `MrBuf` with its own key (module docs).
        unsafe { self.q.post(&RecvWr::new(wr_id, &sgl)) }.map_err(Into::into)
    }
}

/// How many times [`SafePoller::wait`] polls between two readings of the clock.
const POLLS_PER_CLOCK_READ: u32 = 64;

/// A CQ poller with a buffer of its own (allocated once), for waiting: [`SafePoller::wait`]
/// returns a number of completions or an error at a deadline, never waiting for ever.
///
/// It spins: each call keeps the core busy until its completions are in or the deadline has
/// passed (it reads the clock once every 64 polls, so it returns soon after the deadline rather
/// than exactly at it). How it waits is not part of its contract: when completion channels
/// exist, a poller that sleeps on one will answer the same calls.
///
/// # Example
///
/// `poll` takes what is ready, `wait` waits until a deadline:
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
/// # let pd = ctx.alloc_pd()?;
/// # let (cq_a, cq_b) = (ctx.cq_builder().build()?, ctx.cq_builder().build()?);
/// # let (a, b) = (pd.qp_builder(&cq_a, &cq_a).build()?, pd.qp_builder(&cq_b, &cq_b).build()?);
/// # zverbs::connect_pair(&a, &b)?;
/// # let buf_a = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// # let buf_b = pd.alloc_buf(4096, zverbs::AccessFlags::ALL)?;
/// use std::time::{Duration, Instant};
/// use zverbs::SendFlags;
/// use zverbs::safe::WaitError;
///
/// let mut qa = a.queues(&cq_a)?; // `qa.cq` is a `SafePoller`
/// assert!(qa.cq.poll().is_empty()); // nothing yet; never blocks
/// let soon = Instant::now() + Duration::from_millis(1);
/// assert!(matches!(qa.cq.wait(1, soon), Err(WaitError::Timeout { wanted: 1, got: 0 })));
///
/// qa.sq.write(1, buf_a.slice(0..8), buf_b.remote(0), SendFlags::SIGNALED)?;
/// qa.sq.write(2, buf_a.slice(0..8), buf_b.remote(8), SendFlags::SIGNALED)?;
/// let deadline = Instant::now() + Duration::from_secs(5);
/// let done = qa.cq.wait(2, deadline)?;
/// assert_eq!([done[0].ok()?.wr_id, done[1].ok()?.wr_id], [1, 2]); // in posting order
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug)]
pub struct SafePoller<C> {
    cq: C,
    buf: Box<[Completion]>,
    /// Completions polled and not yet returned: `buf[start..end]`.
    start: usize,
    end: usize,
}

impl<C: PollCq> SafePoller<C> {
    /// Wraps `cq` with room for `capacity` completions (at least 1).
    pub fn new(cq: C, capacity: usize) -> Self {
        Self {
            cq,
            buf: vec![Completion::EMPTY; capacity.max(1)].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// The most completions one call returns.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// The wrapped poller. Completions kept from a timed-out [`SafePoller::wait`] stay here
    /// until the next [`SafePoller::poll`] or `wait`.
    pub fn get_mut(&mut self) -> &mut C {
        &mut self.cq
    }

    /// Moves the completions kept from earlier calls to the front of the buffer; returns how
    /// many there are.
    fn compact(&mut self) -> usize {
        if self.start != 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        self.end
    }

    /// The completions ready now (up to [`SafePoller::capacity`]), oldest first, after any kept
    /// from a timed-out wait; empty when there are none. Never blocks.
    pub fn poll(&mut self) -> &[Completion] {
        let have = self.compact();
        let got = have + self.cq.poll(&mut self.buf[have..]);
        self.start = 0;
        self.end = 0;
        &self.buf[..got]
    }

    /// Waits for `count` completions, oldest first, until `deadline`.
    ///
    /// Each completion still has to be checked: [`Completion::ok`] turns a failed one into an
    /// error (`for c in cq.wait(2, deadline)? { c.ok()?; }`).
    ///
    /// # Errors
    ///
    /// [`WaitError::Timeout`] when the deadline passes first (the completions that arrived are
    /// kept for the next call); [`WaitError::TooMany`] when `count` exceeds
    /// [`SafePoller::capacity`].
    pub fn wait(&mut self, count: usize, deadline: Instant) -> Result<&[Completion], WaitError> {
        let capacity = self.buf.len();
        if count > capacity {
            return Err(WaitError::TooMany { count, capacity });
        }
        let mut got = self.compact();
        'wait: while got < count {
            for _ in 0..POLLS_PER_CLOCK_READ {
                got += self.cq.poll(&mut self.buf[got..count]);
                if got == count {
                    break 'wait;
                }
            }
            if Instant::now() >= deadline {
                self.end = got;
                return Err(WaitError::Timeout { wanted: count, got });
            }
        }
        self.start = count;
        self.end = got;
        Ok(&self.buf[..count])
    }
}

/// A QP's send and receive queues and the poller of its CQ, in this layer ([`Qp::queues`]):
/// each backend's handles behind one type, chosen at run time ([`crate::queues`] says what that
/// costs: nothing measurable).
///
/// [`Qp::queues`]: crate::Qp::queues
#[derive(Debug)]
pub struct SafeQueues {
    /// The send queue: each post rings.
    pub sq: SafeSendQueue<AnySendQueue>,
    /// The receive queue.
    pub rq: SafeRecvQueue<AnyRecvQueue>,
    /// The CQ's poller, with room for as many completions as the CQ holds.
    pub cq: SafePoller<AnyPoller>,
}

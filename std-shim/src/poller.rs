//! The poller: one type for both backends, polling, spinning until a deadline, or sleeping on
//! the CQ's completion channel until the same deadline, with the same error.

use std::time::Instant;

use zverbs_core::{BriefCompletion, Completion, PollCq, PollCqTimed, TimedCompletion};

use crate::error::WaitError;
use crate::queues::AnyPoller;
use crate::types::backend::BackendKind;

/// How many times [`Poller::wait`] polls between two readings of the clock.
const POLLS_PER_CLOCK_READ: u32 = 64;

/// A CQ's poller ([`Cq::poller`](crate::Cq::poller)), whichever backend polls it, with a buffer
/// of its own (allocated once, as many completions as the CQ holds).
///
/// - [`PollCq`] (`poll(&mut out)`, `poll_brief`, ...) takes what is ready into the caller's
///   array, for hot loops; [`Poller::ready`] returns it from the poller's buffer.
/// - [`Poller::wait`] spins until `count` completions are in or the deadline passes (reading
///   the clock once every 64 polls); [`Poller::wait_blocking`] does the same asleep on the
///   CQ's completion channel ([`CqBuilder::channel`](crate::CqBuilder::channel)): the same
///   arguments, the same [`WaitError`], the completions that arrived kept for the next call.
///
/// # Example
///
/// `ready` takes what is there, `wait` waits until a deadline:
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
/// use zverbs::{Registered, SendFlags};
/// use zverbs::safe::WaitError;
///
/// let mut qa = a.queues(&cq_a)?; // `qa.cq` is a `Poller`
/// assert!(qa.cq.ready().is_empty()); // nothing yet; never blocks
/// let soon = Instant::now() + Duration::from_millis(1);
/// assert!(matches!(qa.cq.wait(1, soon), Err(WaitError::Timeout { wanted: 1, got: 0 })));
///
/// qa.sq.write(1, buf_a.slice(0..8)?, buf_b.remote(0)?, SendFlags::SIGNALED)?;
/// qa.sq.write(2, buf_a.slice(0..8)?, buf_b.remote(8)?, SendFlags::SIGNALED)?;
/// let deadline = Instant::now() + Duration::from_secs(5);
/// let done = qa.cq.wait(2, deadline)?;
/// assert_eq!([done[0].ok()?.wr_id, done[1].ok()?.wr_id], [1, 2]); // in posting order
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Debug)]
pub struct Poller {
    pub(crate) p: AnyPoller,
    buf: Box<[Completion]>,
    /// Completions polled and not yet returned: `buf[start..end]`.
    start: usize,
    end: usize,
}

impl Poller {
    /// `p` with room for `capacity` completions (at least 1).
    pub(crate) fn new(p: AnyPoller, capacity: usize) -> Self {
        Self {
            p,
            buf: vec![Completion::EMPTY; capacity.max(1)].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// The typed poller inside, for a loop monomorphised for its backend (completions kept
    /// from a timed-out wait are dropped).
    pub fn into_typed(self) -> AnyPoller {
        self.p
    }

    /// The most completions one call returns.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Which backend polls it.
    pub fn kind(&self) -> BackendKind {
        self.p.kind()
    }

    /// Whether the poller serves QP `qpn` now: QPs created after it was taken join it (by
    /// the time they can post), destroyed ones leave it (at the latest at a poll that finds
    /// nothing).
    pub fn serves(&self, qpn: u32) -> bool {
        self.p.serves(qpn)
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

    /// The completions ready now (up to [`Poller::capacity`]), oldest first, after any kept
    /// from a timed-out wait; empty when there are none. Never blocks.
    pub fn ready(&mut self) -> &[Completion] {
        let have = self.compact();
        let got = have + self.p.poll(&mut self.buf[have..]);
        self.start = 0;
        self.end = 0;
        &self.buf[..got]
    }

    /// Waits for `count` completions, oldest first, until `deadline`, spinning.
    ///
    /// Each completion still has to be checked: [`Completion::ok`] turns a failed one into an
    /// error (`for c in cq.wait(2, deadline)? { c.ok()?; }`).
    ///
    /// # Errors
    ///
    /// [`WaitError::Timeout`] when the deadline passes first (the completions that arrived are
    /// kept for the next call); [`WaitError::TooMany`] when `count` exceeds
    /// [`Poller::capacity`].
    pub fn wait(&mut self, count: usize, deadline: Instant) -> Result<&[Completion], WaitError> {
        let capacity = self.buf.len();
        if count > capacity {
            return Err(WaitError::TooMany { count, capacity });
        }
        let mut got = self.compact();
        'wait: while got < count {
            for _ in 0..POLLS_PER_CLOCK_READ {
                got += self.p.poll(&mut self.buf[got..count]);
                if got == count {
                    break 'wait;
                }
            }
            if Instant::now() >= deadline {
                self.end = got;
                return Err(WaitError::Timeout { wanted: count, got });
            }
        }
        Ok(self.done(count, got))
    }

    /// [`Poller::wait`], asleep on the CQ's completion channel between polls: polls, arms, polls
    /// again, and sleeps only when that poll is empty, so a completion that arrives meanwhile is
    /// never missed.
    ///
    /// # Errors
    ///
    /// As [`Poller::wait`]; [`WaitError::NoChannel`] for a CQ created without a channel;
    /// [`WaitError::Channel`] when arming or sleeping fails.
    pub fn wait_blocking(
        &mut self,
        count: usize,
        deadline: Instant,
    ) -> Result<&[Completion], WaitError> {
        self.sleep_for(count, deadline, false)
    }

    /// [`Poller::wait_blocking`], woken only by solicited (or error) completions: the others
    /// are returned with the next one that wakes it.
    ///
    /// # Errors
    ///
    /// As [`Poller::wait_blocking`].
    pub fn wait_solicited(
        &mut self,
        count: usize,
        deadline: Instant,
    ) -> Result<&[Completion], WaitError> {
        self.sleep_for(count, deadline, true)
    }

    fn sleep_for(
        &mut self,
        count: usize,
        deadline: Instant,
        solicited_only: bool,
    ) -> Result<&[Completion], WaitError> {
        let capacity = self.buf.len();
        if count > capacity {
            return Err(WaitError::TooMany { count, capacity });
        }
        let mut got = self.compact();
        // The buffer is lent to the sleeping rounds (which poll through `self`); an empty box
        // stands in meanwhile (no allocation), and nothing is kept in it.
        let mut buf = std::mem::take(&mut self.buf);
        self.end = 0;
        let mut result = Ok(());
        while got < count {
            match self.sleep_round(&mut buf[got..count], Some(deadline), solicited_only) {
                Ok(n) => got += n,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        self.buf = buf;
        match result {
            Ok(()) => Ok(self.done(count, got)),
            Err(e) => {
                self.end = got;
                Err(match e {
                    crate::Error::Event(crate::EventError::Timeout(_)) => {
                        WaitError::Timeout { wanted: count, got }
                    }
                    e => WaitError::of(e),
                })
            }
        }
    }

    /// `count` completions are in `buf[..count]`, and `got - count` more after them (kept).
    fn done(&mut self, count: usize, got: usize) -> &[Completion] {
        self.start = count;
        self.end = got;
        &self.buf[..count]
    }
}

impl PollCq for Poller {
    /// Polls into `out`, after handing over any completions kept from a timed-out wait.
    #[inline(always)]
    fn poll(&mut self, out: &mut [Completion]) -> usize {
        if self.end != self.start {
            return self.kept(out);
        }
        self.p.poll(out)
    }

    #[inline(always)]
    fn poll_brief(&mut self, out: &mut [BriefCompletion]) -> usize {
        self.p.poll_brief(out)
    }
}

impl Poller {
    #[cold]
    fn kept(&mut self, out: &mut [Completion]) -> usize {
        let n = (self.end - self.start).min(out.len());
        out[..n].copy_from_slice(&self.buf[self.start..self.start + n]);
        self.start += n;
        n
    }
}

impl PollCqTimed for Poller {
    #[inline(always)]
    fn poll_timed(&mut self, out: &mut [TimedCompletion]) -> usize {
        self.p.poll_timed(out)
    }
}

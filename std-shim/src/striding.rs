//! The striding receive queue: a striding work queue's packets, polled in place on the direct
//! backend (`zverbs_mlx5dv`'s [`StridingRq`]).
//!
//! A [`StridingQueue`] owns the work queue's ring (every WQE written and posted once), its
//! stride buffer (allocated and registered here, `wqe_cnt ×` [`Strides::wqe_bytes`]) and its
//! CQ's poller: the CQ serves this queue alone ([`Pd::create_wq`](crate::Pd::create_wq) made
//! sure of it), as DPDK arranges its receive queues. A poll hands out [`Packet`]s that borrow
//! their strides in the buffer, never copied; each gives its strides back when dropped, and a
//! WQE whose strides are all back is posted again.
//!
//! Thread safety: the queue is `Send` and polled by one thread at a time; its packets borrow
//! it and stay on that thread.

use crate::mr::Registered;
use std::cell::RefCell;
use std::ptr::NonNull;
use std::sync::Arc;

use zverbs_mlx5dv::{StrideBuffer, StrideConfig, StrideSlot, StridingRq, StridingState};

use crate::error::{Error, Result};
use crate::mr::MrBuf;
use crate::provider::WqEngine;
use crate::queues::{AnyPoller, direct};
use crate::types::access::AccessFlags;
use crate::types::eth::{Strides, WqShape};
use crate::wq::{WorkQueue, WqInner};

pub use zverbs_mlx5dv::Packet;

/// The bookkeeping of the direct striding queue: its own (single-owner cells).
type State = Box<StridingState<Box<[StrideSlot]>>>;

/// A striding work queue's packets, polled in place (direct backend only). Keeps its work
/// queue (and so its CQ, PD and context) alive.
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// use std::net::Ipv4Addr;
/// use zverbs::{FlowRule, RxHash, Strides, WqShape};
///
/// let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &Default::default())?;
/// let pd = ctx.alloc_pd()?;
/// let strides = Strides { log_num_strides: 6, log_stride_size: 7 }; // 64 strides of 128 B
/// // One completion per packet, and a packet may take one stride: 8 WQEs x 64 strides.
/// let cq = ctx.cq_builder().cqe(512).timestamps(true).build()?;
/// let wq = pd.create_wq(&cq, 8, WqShape::Striding(strides))?;
/// let rss = pd.create_rss_qp(1, &[&wq], &RxHash::default())?;
/// let _rule = rss.create_flow(&FlowRule::multicast(Ipv4Addr::new(239, 1, 1, 1), 30001))?;
/// let rx = wq.striding_queue()?;
/// let n = rx.poll_packets(16, |p| {
///     // `p.bytes()` is the frame in place; `p.timestamp()` the device clock at arrival.
///     println!("{} bytes, tag {}", p.len(), p.flow_tag());
/// }); // each packet's strides go back when it is dropped
/// assert_eq!(n, 0); // nothing was sent
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
pub struct StridingQueue {
    // Field order is drop order: the queue and the poller before the buffer the packets are
    // in and the work queue whose ring the queue writes.
    q: StridingRq<State>,
    cq: RefCell<direct::Poller>,
    _buf: MrBuf,
    _wq: Arc<WqInner>,
}

impl std::fmt::Debug for StridingQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StridingQueue")
            .field("strides", &self.q.strides())
            .field("entries", &self.q.entries())
            .finish()
    }
}

impl WorkQueue {
    /// The packets of a striding work queue, on the direct backend: allocates and registers
    /// its stride buffer, writes and posts every WQE, and takes its CQ's poller (once).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an ordinary work queue (its receives are posted through
    /// [`WorkQueue::recv_queue`]); [`Error::StridingNeedsDirect`] on the fallback;
    /// [`Error::AlreadyTaken`]; [`Error::Verbs`] from the buffer's registration;
    /// [`Error::Layout`] when the direct backend rejects the ring.
    pub fn striding_queue(&self) -> Result<StridingQueue> {
        let WqShape::Striding(strides) = self.shape() else {
            return Err(Error::InvalidArgument(
                "an ordinary work queue is posted to through WorkQueue::recv_queue".into(),
            ));
        };
        let WqEngine::Direct { layout, dbrec } = self.inner.provider.engine() else {
            return Err(Error::StridingNeedsDirect(
                "the work queue is driven by libibverbs".into(),
            ));
        };
        self.take()?;
        let poller = match self.inner.cq.poller()?.into_typed() {
            AnyPoller::Direct(p) => p,
            AnyPoller::Verbs(_) => {
                return Err(Error::StridingNeedsDirect(
                    "its CQ is polled through libibverbs".into(),
                ));
            }
        };
        let config = stride_config(strides);
        let len = layout.wqe_cnt as usize * config.wqe_bytes() as usize;
        let buf = self.inner.pd.alloc_buf(len, AccessFlags::LOCAL_WRITE)?;
        let buffer = StrideBuffer {
            addr: NonNull::new(buf.addr() as *mut u8).ok_or_else(|| {
                Error::InvalidArgument("the stride buffer has a null address".into())
            })?,
            len,
            lkey: buf.lkey(),
        };
        let slots: Box<[StrideSlot]> = (0..layout.wqe_cnt).map(|_| StrideSlot::new()).collect();
        let state = Box::new(StridingState::new(slots)?);
        // SAFETY: the ring and record are the device's for this live, ready, new work queue
        // (created with these strides, kept alive by `_wq`, dropped after the queue), to which
        // nothing else posts (taken once; the fallback never drives it); the buffer is an
        // `MrBuf` of the WQ's PD registered under `lkey`, which no one but the device and this
        // queue's packets reads (the queue owns it and hands out no other access), valid while
        // the queue lives (`_buf`, dropped after it); the CQ polled with it is the WQ's, whose
        // poller the queue holds.
        let q = unsafe { StridingRq::new(&layout, dbrec, config, buffer, state)? };
        Ok(StridingQueue {
            q,
            cq: RefCell::new(poller),
            _buf: buf,
            _wq: self.inner.clone(),
        })
    }
}

/// The direct backend's stride layout for `s`.
fn stride_config(s: Strides) -> StrideConfig {
    StrideConfig {
        log_num_strides: u32::from(s.log_num_strides),
        log_stride_size: u32::from(s.log_stride_size),
    }
}

impl StridingQueue {
    /// Polls up to `max` packets, handing each to `f` in place; each gives its strides back
    /// when `f` drops it (or releases it). Returns how many were handed out. Never blocks,
    /// allocates or makes a system call. A call from inside `f` returns 0.
    #[inline]
    pub fn poll_packets<'a>(&'a self, max: usize, f: impl FnMut(Packet<'a>)) -> usize {
        let Ok(mut cq) = self.cq.try_borrow_mut() else {
            return 0;
        };
        self.q.poll_packets(&mut cq.q, max, f)
    }

    /// Polls packets into `out` (up to its length): a burst the caller keeps until it is done
    /// with each (dropping a packet, or setting its place to `None`, gives its strides back).
    /// Returns how many places were written, from the first. Keep fewer packets than a ring's
    /// worth of strides: a WQE is posted again only once all its strides are back.
    #[inline]
    pub fn poll_burst<'a>(&'a self, out: &mut [Option<Packet<'a>>]) -> usize {
        let Ok(mut cq) = self.cq.try_borrow_mut() else {
            return 0;
        };
        self.q.poll_burst(&mut cq.q, out)
    }

    /// The strides of each WQE.
    pub fn strides(&self) -> Strides {
        let s = self.q.strides();
        Strides {
            log_num_strides: s.log_num_strides as u8,
            log_stride_size: s.log_stride_size as u8,
        }
    }

    /// WQEs in the ring.
    pub fn entries(&self) -> u32 {
        self.q.entries()
    }

    /// The first receive error the device reported (its status and vendor syndrome): the
    /// work queue places nothing more after one.
    pub fn error(&self) -> Option<(zverbs_core::WcStatus, u32)> {
        self.q.error()
    }

    /// Completions that named strides outside their WQE or a length longer than their
    /// strides (counted and skipped; none on a sound device).
    pub fn malformed(&self) -> u32 {
        self.q.malformed()
    }

    /// The underlying direct queue, for its counters.
    pub fn raw(&self) -> &StridingRq<State> {
        &self.q
    }
}

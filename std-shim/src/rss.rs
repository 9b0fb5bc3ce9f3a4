//! RSS QPs: a raw packet QP over an indirection table of receive work queues, which spreads
//! the frames its flow rules take over the queues by a Toeplitz hash of their addresses and
//! ports (`ibv_create_rwq_ind_table`, then `ibv_create_qp_ex` with `rx_hash_conf`): the
//! standard raw Ethernet receive set-up (brief §4).
//!
//! An RSS QP has no queues of its own and never changes state (libmlx5 refuses to modify one;
//! the kernel reports QPN 0 for every one): it exists to be the target of flow rules
//! ([`RssQp::create_flow`]). Its frames complete on each work queue's CQ.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::flow::Flow;
use crate::pd::Pd;
use crate::provider::{IndTableProvider, RssProvider, WqProvider};
use crate::types::eth::{FlowRule, RxHash};
use crate::wq::WorkQueue;

/// An RSS QP and its indirection table, destroyed when the last handle (and every flow rule
/// steering to it) is gone; it keeps its work queues alive. Cloning is cheap.
#[derive(Clone, Debug)]
pub struct RssQp {
    inner: Arc<RssInner>,
}

#[derive(Debug)]
struct RssInner {
    // Field order is drop order: the QP, then its table, then the work queues.
    provider: Box<dyn RssProvider>,
    _table: Box<dyn IndTableProvider>,
    hash: RxHash,
    port: u8,
    wqs: Vec<WorkQueue>,
    _pd: Pd,
}

impl Pd {
    /// An RSS QP on `port` over the work queues `wqs` (a power of two of them, at most 2^13,
    /// repeats allowed: the indirection table), hashing with `hash`. Checked first, as for
    /// [`Pd::create_raw_qp`]: the device has raw packet QPs on the port, the process holds
    /// `CAP_NET_RAW` where the kernel asks for it.
    ///
    /// # Errors
    ///
    /// [`Error::NoRawPacket`], [`Error::NeedsCapNetRaw`]; [`Error::InvalidArgument`] for a
    /// table that is not a power of two long, work queues of another PD, or a hash the device
    /// cannot make (the ports of both transports; no field over more than one queue);
    /// [`Error::Verbs`] from `ibv_create_rwq_ind_table` and `ibv_create_qp_ex`.
    pub fn create_rss_qp(&self, port: u8, wqs: &[&WorkQueue], hash: &RxHash) -> Result<RssQp> {
        let ctx = self.context();
        ctx.raw_ready(port, "ibv_create_qp_ex")?;
        if !wqs.len().is_power_of_two() || wqs.len() > 1 << 13 {
            return Err(Error::InvalidArgument(format!(
                "an indirection table holds a power of two of work queues, at most 8192, not {}",
                wqs.len()
            )));
        }
        if wqs
            .iter()
            .any(|w| !Arc::ptr_eq(&w.inner.pd.inner, &self.inner))
        {
            return Err(Error::InvalidArgument(
                "a work queue belongs to another protection domain".into(),
            ));
        }
        hash.check(wqs.len())
            .map_err(|why| Error::InvalidArgument(why.into()))?;
        let providers: Vec<&dyn WqProvider> = wqs.iter().map(|w| &*w.inner.provider).collect();
        let table = ctx.inner.provider.create_ind_table(&providers)?;
        let provider = self.inner.provider.create_rss_qp(&*table, hash)?;
        Ok(RssQp {
            inner: Arc::new(RssInner {
                provider,
                _table: table,
                hash: *hash,
                port,
                wqs: wqs.iter().map(|w| (*w).clone()).collect(),
                _pd: self.clone(),
            }),
        })
    }
}

impl RssQp {
    /// A flow rule steering the frames `rule` matches on the QP's port to it (spread over its
    /// work queues); removed when the returned [`Flow`] is dropped.
    ///
    /// # Errors
    ///
    /// As [`Qp::create_flow`](crate::Qp::create_flow).
    pub fn create_flow(&self, rule: &FlowRule) -> Result<Flow> {
        self.inner
            ._pd
            .context()
            .raw_ready(self.inner.port, "ibv_create_flow")?;
        Flow::new(
            &*self.inner.provider,
            rule,
            self.inner.port,
            self.inner.clone() as Arc<dyn std::fmt::Debug + Send + Sync>,
        )
    }

    /// The hash it spreads frames by.
    pub fn hash(&self) -> &RxHash {
        &self.inner.hash
    }

    /// Its work queues, in the order of its indirection table.
    pub fn work_queues(&self) -> &[WorkQueue] {
        &self.inner.wqs
    }

    /// The port its rules match on.
    pub fn port(&self) -> u8 {
        self.inner.port
    }
}

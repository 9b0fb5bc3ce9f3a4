//! Flow steering: a [`Flow`] is one rule (`ibv_create_flow`) that steers the frames it
//! matches to a raw packet QP or an RSS QP, removed when the handle is dropped
//! (`ibv_destroy_flow`).
//!
//! A frame no rule takes is not delivered to any raw packet QP (on a ConnectX it goes on to
//! the kernel's own netdev). Rules are looked at by priority, lower first; a multicast-only
//! rule sits in the device's multicast table, after the others, whatever its priority. Two
//! subscribers with the very same rule each get a copy of every frame it matches (a ConnectX
//! shares one flow-table entry between them).

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::provider::{FlowProvider, FlowTarget};
use crate::qp::Qp;
use crate::types::eth::{FlowRule, FlowRuleError};
use crate::types::qp::QpType;

/// A flow steering rule, in force while this handle (or a clone) lives: dropping the last
/// one removes it, after which the frames it matched are no longer delivered to its QP. The
/// handle keeps the QP it steers to alive.
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// use std::net::Ipv4Addr;
/// use zverbs::FlowRule;
///
/// let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &Default::default())?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.cq_builder().cqe(256).build()?;
/// let qp = pd.create_raw_qp(1, &cq, &cq, zverbs::QpCaps::default())?;
/// let flow = qp.create_flow(&FlowRule::multicast(Ipv4Addr::new(239, 1, 2, 3), 31000))?;
/// assert!(qp.create_flow(&FlowRule::ANY.priority(16)).is_err()); // a typed error
/// drop(flow); // the rule is removed
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Clone, Debug)]
pub struct Flow {
    inner: Arc<FlowInner>,
}

#[derive(Debug)]
struct FlowInner {
    // Field order is drop order: the rule goes before the QP it steers to.
    _provider: Box<dyn FlowProvider>,
    rule: FlowRule,
    _target: Arc<dyn std::fmt::Debug + Send + Sync>,
}

impl Flow {
    /// A rule steering `rule` to `target`, on `port`, keeping `keep` (the target's owner)
    /// alive.
    pub(crate) fn new(
        target: &dyn FlowTarget,
        rule: &FlowRule,
        port: u8,
        keep: Arc<dyn std::fmt::Debug + Send + Sync>,
    ) -> Result<Self> {
        rule.check()?;
        Ok(Self {
            inner: Arc::new(FlowInner {
                _provider: target.create_flow(rule, port)?,
                rule: *rule,
                _target: keep,
            }),
        })
    }

    /// The rule.
    pub fn rule(&self) -> &FlowRule {
        &self.inner.rule
    }
}

impl Qp {
    /// A flow rule steering the frames `rule` matches on this raw packet QP's port to its
    /// receive queue; removed when the returned [`Flow`] is dropped.
    ///
    /// # Errors
    ///
    /// [`Error::FlowRule`] for a rule the device cannot take (checked before the device is
    /// asked: a priority above 15, a port without its transport, a tag of more than 24 bits;
    /// by the kernel: another tag on the same match, a match it cannot make) and for a QP that
    /// is not a raw packet QP; [`Error::NeedsCapNetRaw`]; [`Error::Verbs`] from
    /// `ibv_create_flow`.
    pub fn create_flow(&self, rule: &FlowRule) -> Result<Flow> {
        let (QpType::RawPacket, Some(raw)) = (self.qp_type(), self.inner.raw) else {
            return Err(Error::FlowRule(FlowRuleError::WrongQp));
        };
        self.context().raw_ready(raw.port, "ibv_create_flow")?;
        Flow::new(
            &*self.inner.provider,
            rule,
            raw.port,
            self.inner.clone() as Arc<dyn std::fmt::Debug + Send + Sync>,
        )
    }

    /// The context the QP belongs to.
    pub(crate) fn context(&self) -> &crate::device::Context {
        self.inner._pd.context()
    }
}

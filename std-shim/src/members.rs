//! The queue pairs a CQ's poller serves, when they change after the poller was taken.
//!
//! The poller owns its table of queue pairs (QPN → the states of their queues) and never
//! takes a lock. A QP created on a CQ whose poller is out, or destroyed, changes the CQ's
//! registry (under its mutex, on the control path); the control path then builds the new
//! table and hands it over through `zverbs_core::handover` (an epoch the poller acknowledges:
//! `docs/architecture.md`, "Queue pairs joining and leaving a poller"). The poller adopts it
//! when a completion names a QP its table lacks (a new QP's table is published before the QP
//! can post, so it is there by then) and when a poll finds nothing (so a destroyed QP's states
//! are let go); the tables it gives back are freed here, on the control path, at the next
//! change, or when the CQ goes.

use std::ops::Deref;
use std::sync::{Arc, MutexGuard};

use zverbs_core::handover::{Handover, Node};

use crate::cq::{Cq, Registry};
use crate::fallback;
use crate::qp::{QpData, QpInner, RqStateHandle, SqStateHandle};
use crate::srq::{Srq, SrqStateHandle};

/// One binding of the direct poller.
pub(crate) type DirectBinding =
    zverbs_mlx5dv::CqBinding<SqStateHandle, RqStateHandle, SrqStateHandle>;

/// The direct poller's table: its bindings, and the SRQs whose rings the poller writes when
/// it frees their WQEs (kept alive as long as the table, which may outlive their QPs).
#[derive(Debug)]
pub(crate) struct DirectTable {
    bindings: Box<[DirectBinding]>,
    _srqs: Vec<Srq>,
}

impl Deref for DirectTable {
    type Target = [DirectBinding];
    fn deref(&self) -> &[DirectBinding] {
        &self.bindings
    }
}

// SAFETY: the target is the boxed slice, which does not move when the table moves.
unsafe impl stable_deref_trait::StableDeref for DirectTable {}

/// The fallback poller's table.
pub(crate) type VerbsTable = Box<[fallback::Binding]>;

/// A hand-over point that frees, when dropped, every table still in it.
#[derive(Debug)]
pub(crate) struct Hand<T>(pub(crate) Handover<T>);

impl<T> Default for Hand<T> {
    fn default() -> Self {
        Self(Handover::new())
    }
}

impl<T> Hand<T> {
    /// Publishes `table` for the poller and frees what the poller gave back. The caller holds
    /// the CQ's registry lock (publications are serialised by it).
    fn publish(&self, table: T) {
        let node = Box::into_raw(Box::new(Node::new(table)));
        // SAFETY: a fresh node; the registry lock serialises publications; nodes are freed
        // only as they come back from `publish` and `reclaim`.
        let replaced = unsafe { self.0.publish(node) };
        free(replaced);
        free(self.0.reclaim());
    }
}

impl<T> Drop for Hand<T> {
    fn drop(&mut self) {
        // No poller is left (it holds the hand-over alive).
        free(self.0.reclaim());
        free(self.0.take_unadopted());
    }
}

/// Frees a list of nodes that came back from the hand-over.
fn free<T>(mut node: *mut Node<T>) {
    while !node.is_null() {
        // SAFETY: a node that came back from the hand-over, the caller's, freed once.
        let next = unsafe { Node::next_reclaimed(node) };
        // SAFETY: allocated with `Box::into_raw` in `publish`.
        drop(unsafe { Box::from_raw(node) });
        node = next;
    }
}

/// A CQ's hand-over, of its backend's table type.
#[derive(Debug)]
pub(crate) enum Members {
    /// Polled directly.
    Direct(Arc<Hand<DirectTable>>),
    /// Polled through libibverbs.
    Verbs(Arc<Hand<VerbsTable>>),
}

/// The direct table of `cq` for `qps`.
pub(crate) fn direct_table(cq: &Cq, qps: &[Arc<QpInner>]) -> DirectTable {
    let mut bindings = Vec::with_capacity(qps.len());
    let mut srqs = Vec::new();
    for qp in qps {
        let QpData::Direct(d) = &qp.data else {
            continue;
        };
        let sq = qp.send_cq.is(cq).then(|| d.sq_state.clone());
        let on_cq = qp.recv_cq.is(cq);
        bindings.push(match qp.srq.as_ref().and_then(|s| s.direct_state()) {
            // Its receives come from the SRQ: this poller frees its WQEs.
            Some(srq) => {
                if on_cq {
                    srqs.extend(qp.srq.clone());
                }
                zverbs_mlx5dv::CqBinding {
                    qpn: qp.provider.qpn(),
                    sq,
                    rq: None,
                    srq: on_cq.then(|| srq.clone()),
                }
            }
            None => zverbs_mlx5dv::CqBinding {
                qpn: qp.provider.qpn(),
                sq,
                rq: on_cq.then(|| d.rq_state.clone()),
                srq: None,
            },
        });
    }
    DirectTable {
        bindings: bindings.into_boxed_slice(),
        _srqs: srqs,
    }
}

/// The fallback table of `cq` for `qps`.
pub(crate) fn verbs_table(cq: &Cq, qps: &[Arc<QpInner>]) -> VerbsTable {
    let mut bindings = Vec::with_capacity(qps.len());
    for qp in qps {
        let QpData::Verbs(v) = &qp.data else {
            continue;
        };
        let on_cq = qp.recv_cq.is(cq);
        bindings.push(fallback::Binding {
            qpn: qp.provider.qpn(),
            sq: qp.send_cq.is(cq).then(|| v.sq.clone()),
            rq: (on_cq && qp.srq.is_none()).then(|| v.rq.clone()),
            srq: on_cq && qp.srq.is_some(),
        });
    }
    bindings.into_boxed_slice()
}

/// After the registry of `cq` changed: when its poller is out, publishes the table of the QPs
/// it has now. Returns the QPs it reached, to be dropped by the caller after the lock (the last
/// handle of one may go with them, and its destruction takes the lock again).
pub(crate) fn republish(cq: &Cq, reg: &mut MutexGuard<'_, Registry>) -> Vec<Arc<QpInner>> {
    reg.qps.retain(|w| w.strong_count() > 0);
    if !reg.poller_taken {
        return Vec::new();
    }
    let qps: Vec<Arc<QpInner>> = reg
        .qps
        .iter()
        .filter_map(std::sync::Weak::upgrade)
        .collect();
    match &cq.inner.members {
        Members::Direct(h) => h.publish(direct_table(cq, &qps)),
        Members::Verbs(h) => h.publish(verbs_table(cq, &qps)),
    }
    qps
}

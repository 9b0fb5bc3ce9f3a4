//! The queue pairs a CQ's poller serves (its bindings), and how a new table of them reaches
//! the poller when they change after it was taken.
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

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

use zverbs_core::handover::{Handover, Node};

use zverbs_mlx5dv::{RqSlot, RqState, SqSlot, SqState, SrqSlot, SrqState};

use crate::fallback;

/// A direct send queue's bookkeeping, shared by the queue and the poller that serves it; each
/// holds a clone, so it lives as long as the longer-lived of the two.
pub type SqStateHandle = Arc<SqState<Box<[SqSlot]>>>;

/// A direct receive queue's bookkeeping, shared as [`SqStateHandle`] is.
pub type RqStateHandle = Arc<RqState<Box<[RqSlot]>>>;

/// A direct shared receive queue's bookkeeping, shared by its queue handle and the pollers of
/// the CQ its QPs complete their receives on.
pub type SrqStateHandle = Arc<SrqState<Box<[SrqSlot]>>>;

/// A receive work queue's part in its CQ's poller: its number (what its receives are found
/// by) and its bookkeeping, on the backend that drives it. Held by the work queue; the CQ's
/// registry holds it weakly.
#[derive(Debug)]
pub(crate) struct WqBinding {
    pub(crate) wqn: u32,
    pub(crate) rq: WqRq,
    /// It is its CQ's one receive queue on the direct poller (`Cq::claim_sole_receiver`):
    /// an ordinary work queue of an rdma-core device.
    pub(crate) sole_receiver: std::sync::atomic::AtomicBool,
}

/// A work queue's receive bookkeeping.
#[derive(Debug)]
pub(crate) enum WqRq {
    Direct(RqStateHandle),
    Verbs(Arc<fallback::RqShared>),
}

/// One binding of the direct poller.
pub(crate) type DirectBinding =
    zverbs_mlx5dv::CqBinding<SqStateHandle, RqStateHandle, SrqStateHandle>;

/// The direct poller's table: its bindings, and the SRQs whose rings the poller writes when
/// it frees their WQEs (kept alive as long as the table, which may outlive their QPs; held by
/// their shared part, whose type stands above this module).
pub(crate) struct DirectTable {
    pub(crate) bindings: Box<[DirectBinding]>,
    pub(crate) srqs: Vec<Arc<dyn Send + Sync>>,
}

impl fmt::Debug for DirectTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DirectTable")
            .field("bindings", &self.bindings)
            .field("srqs", &self.srqs.len())
            .finish()
    }
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
pub(crate) struct Publisher<T>(pub(crate) Handover<T>);

impl<T> Default for Publisher<T> {
    fn default() -> Self {
        Self(Handover::new())
    }
}

impl<T> Publisher<T> {
    /// Publishes `table` for the poller and frees what the poller gave back. The caller holds
    /// the CQ's registry lock (publications are serialised by it).
    pub(crate) fn publish(&self, table: T) {
        let node = Box::into_raw(Box::new(Node::new(table)));
        // SAFETY: a fresh node; the registry lock serialises publications; nodes are freed
        // only as they come back from `publish` and `reclaim`.
        let replaced = unsafe { self.0.publish(node) };
        free(replaced);
        free(self.0.reclaim());
    }
}

impl<T> Drop for Publisher<T> {
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

/// A CQ's publisher of tables, of its backend's table type.
#[derive(Debug)]
pub(crate) enum Tables {
    /// Polled directly.
    Direct(Arc<Publisher<DirectTable>>),
    /// Polled through libibverbs.
    Verbs(Arc<Publisher<VerbsTable>>),
}

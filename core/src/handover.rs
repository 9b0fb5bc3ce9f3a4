//! Hands a poller a new table of the queues it serves while it polls, without a lock on the
//! poll path.
//!
//! A completion queue's poller looks up the queue a completion belongs to in a table it owns.
//! Queue pairs created after the poller was taken join that table, and destroyed ones leave
//! it; the control path, on another thread, builds each new table and hands it over here. The
//! poller must not wait for the control path (no lock, no system call), and the control path
//! must not free a table the poller may still read. The protocol is an epoch the poller
//! acknowledges:
//!
//! - **publish** (control path, one at a time: its caller serialises them): the new table, in
//!   a [`Node`] the caller allocated, is swapped into `next` with `Release`. A node it
//!   replaces was never taken by the poller (the poller takes with a swap too), so it goes
//!   straight back to the caller to free.
//! - **poll** (poller, every poll): one `Relaxed` load of `next` and a compare with null
//!   ([`Handover::pending`]). Nothing else while no table waits.
//! - **adopt** (poller, out of line, when a table waits): swaps `next` with null (`Acquire`,
//!   pairing with the publication), swaps the table into its own place (the node now holds the
//!   old table), then hands the node back on the `retired` list (`Release`): that push is the
//!   acknowledgment that the poller no longer reads the old table.
//! - **reclaim** (control path): takes the whole `retired` list (`Acquire`, pairing with the
//!   push) and frees it: only tables the poller acknowledged.
//!
//! The `retired` list has one pusher (the poller) and one taker (the control path, which takes
//! all of it at once), so the push is a compare-and-swap loop that only the taker can make
//! retry, with no ABA: a node is pushed once and reused by no one. `loom-tests` models it with
//! the mutant `early_retire` (the acknowledgment before the poller is done with the old table),
//! which the model rejects.

use core::marker::PhantomData;
use core::ptr;

use crate::sync::atomic::{AtomicPtr, Ordering};
use crate::sync::cell::UnsafeCell;

/// A table in transit, allocated by the control path (this crate does not allocate).
#[derive(Debug)]
pub struct Node<T> {
    table: UnsafeCell<T>,
    /// The next node of the `retired` list.
    link: UnsafeCell<*mut Node<T>>,
}

impl<T> Node<T> {
    /// A node holding `table`.
    pub fn new(table: T) -> Self {
        Self {
            table: UnsafeCell::new(table),
            link: UnsafeCell::new(ptr::null_mut()),
        }
    }

    /// The next node of a reclaimed list (null at its end).
    ///
    /// # Safety
    ///
    /// `node` came from [`Handover::reclaim`] (or a `next` of such a node) and is not freed.
    pub unsafe fn next_reclaimed(node: *mut Self) -> *mut Self {
        // SAFETY: (caller) the node is the control path's now; the poller wrote the link
        // before its `Release` push, which the reclaim's `Acquire` pairs with.
        unsafe { (*node).link.with(|p| *p) }
    }

    /// The table, consuming the node.
    pub fn into_table(self) -> T {
        // A write access of the cell (no instruction): under loom, taking the table back is
        // checked against the poller's last access, as freeing it would be.
        self.table.with_mut(|_| ());
        self.table.into_inner()
    }
}

/// The hand-over point between the control path and one poller.
#[derive(Debug)]
pub struct Handover<T> {
    /// The table published and not yet adopted, or null.
    next: AtomicPtr<Node<T>>,
    /// Nodes the poller is done with, linked through `link`: the control path's to free.
    retired: AtomicPtr<Node<T>>,
    /// Tables go from one thread to another through it: `Send` and `Sync` only when they are.
    _tables: PhantomData<T>,
}

impl<T> Default for Handover<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Handover<T> {
    /// Nothing published, nothing retired.
    pub fn new() -> Self {
        Self {
            next: AtomicPtr::new(ptr::null_mut()),
            retired: AtomicPtr::new(ptr::null_mut()),
            _tables: PhantomData,
        }
    }

    /// Poller: whether a table waits to be adopted. One `Relaxed` load and a compare: the
    /// check every poll makes.
    #[inline(always)]
    pub fn pending(&self) -> bool {
        !self.next.load(Ordering::Relaxed).is_null()
    }

    /// Poller: adopts the waiting table, if any: `swap` is called with the node's table to
    /// exchange with the poller's own (after it, the node must hold the old table, which the
    /// poller no longer reads). Returns whether a table was adopted. Out of line.
    ///
    /// # Safety
    ///
    /// Only the one poller of this hand-over calls it.
    #[cold]
    #[inline(never)]
    pub unsafe fn adopt(&self, swap: impl FnOnce(&mut T)) -> bool {
        let node = self.next.swap(ptr::null_mut(), Ordering::Acquire);
        if node.is_null() {
            return false;
        }
        if cfg!(zverbs_mutant = "early_retire") {
            // SAFETY: as below (the mutant acknowledges first: the control path may free the
            // node while the poller still swaps with it, which the model must reject).
            unsafe { self.retire(node) };
        }
        // SAFETY: the control path published the node with `Release` and never touches it
        // again until it is retired; the `Acquire` swap made it this poller's alone.
        unsafe { (*node).table.with_mut(|t| swap(&mut *t)) };
        if !cfg!(zverbs_mutant = "early_retire") {
            // SAFETY: the node is this poller's, and it is done with the table in it.
            unsafe { self.retire(node) };
        }
        true
    }

    /// Poller: pushes `node` on the `retired` list (`Release`: the acknowledgment).
    ///
    /// # Safety
    ///
    /// `node` is the poller's, and it never touches it again.
    unsafe fn retire(&self, node: *mut Node<T>) {
        let mut head = self.retired.load(Ordering::Relaxed);
        loop {
            // SAFETY: (caller) the node is the poller's until the push succeeds.
            unsafe { (*node).link.with_mut(|p| *p = head) };
            match self
                .retired
                .compare_exchange(head, node, Ordering::Release, Ordering::Relaxed)
            {
                Ok(_) => return,
                Err(now) => head = now,
            }
        }
    }

    /// Control path: publishes `node` for the poller. Returns the node it replaces (published
    /// earlier and never adopted: the poller will not see it), or null; it is the caller's to
    /// free.
    ///
    /// # Safety
    ///
    /// `node` is valid and the caller's; publications are not concurrent (the caller
    /// serialises them); the node is freed only after it comes back from this call or
    /// [`Handover::reclaim`].
    pub unsafe fn publish(&self, node: *mut Node<T>) -> *mut Node<T> {
        self.next.swap(node, Ordering::AcqRel)
    }

    /// Control path: the nodes the poller acknowledged, as a list (walk it with
    /// [`Node::next_reclaimed`]; null when empty); the caller's to free.
    pub fn reclaim(&self) -> *mut Node<T> {
        self.retired.swap(ptr::null_mut(), Ordering::Acquire)
    }

    /// With no poller left (its owner is being dropped): the published node not adopted, or
    /// null; the caller's to free, as [`Handover::reclaim`]'s list.
    pub fn take_unadopted(&self) -> *mut Node<T> {
        self.next.swap(ptr::null_mut(), Ordering::Acquire)
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    extern crate std;

    use std::boxed::Box;
    use std::vec::Vec;

    use super::*;

    fn reclaimed(h: &Handover<u32>) -> Vec<u32> {
        let mut out = Vec::new();
        let mut n = h.reclaim();
        while !n.is_null() {
            // SAFETY: from `reclaim`, freed once below.
            let next = unsafe { Node::next_reclaimed(n) };
            // SAFETY: allocated by `Box::into_raw` in the test.
            out.push(unsafe { Box::from_raw(n) }.into_table());
            n = next;
        }
        out
    }

    #[test]
    fn adopted_tables_come_back_once_acknowledged() {
        let h = Handover::new();
        let mut current = 0u32;
        assert!(!h.pending());
        // SAFETY: one poller (this thread).
        assert!(!unsafe { h.adopt(|t| core::mem::swap(t, &mut current)) });
        // SAFETY: a fresh node, publications serialised.
        let replaced = unsafe { h.publish(Box::into_raw(Box::new(Node::new(1)))) };
        assert!(replaced.is_null());
        // A second publication replaces the first, never adopted: it comes back at once.
        // SAFETY: as above.
        let replaced = unsafe { h.publish(Box::into_raw(Box::new(Node::new(2)))) };
        // SAFETY: returned by `publish`, the caller's.
        assert_eq!(unsafe { Box::from_raw(replaced) }.into_table(), 1);
        assert!(h.pending());
        assert!(reclaimed(&h).is_empty(), "nothing acknowledged yet");
        // SAFETY: one poller.
        assert!(unsafe { h.adopt(|t| core::mem::swap(t, &mut current)) });
        assert_eq!(current, 2);
        assert!(!h.pending());
        // SAFETY: as above.
        unsafe { h.publish(Box::into_raw(Box::new(Node::new(3)))) };
        // SAFETY: one poller.
        assert!(unsafe { h.adopt(|t| core::mem::swap(t, &mut current)) });
        assert_eq!(current, 3);
        // The old tables, acknowledged, newest first.
        assert_eq!(reclaimed(&h), [2, 0]);
        assert!(h.take_unadopted().is_null());
    }
}

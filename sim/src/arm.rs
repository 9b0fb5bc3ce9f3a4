//! Completion events: a CQ's arm, and the one event an armed CQ raises.
//!
//! A driver arms a CQ with libmlx5's sequence (`mlx5_arm_cq`, the direct path's
//! `zverbs_mlx5dv::CqArm`): the arm word into the doorbell record's second word
//! (`dbrec[MLX5_CQ_ARM_DB]`: sequence number, command, consumer index), then the 64-bit CQ
//! doorbell into the UAR. A ConnectX acts on the UAR write; this device reads the arm word,
//! which the same sequence stores just before (its UAR pages are ordinary memory nobody sees
//! written, as its BlueFlame pages are). The record's arm word starts at [`NO_ARM`], a value
//! no arm writes, so that every arm is a change the device notices, the first one (sequence
//! 0, any completion, consumer index 0: the word 0) included.
//!
//! Armed, the CQ raises one event at the next CQE written (for a solicited-only arm: the next
//! CQE with the solicited bit, or an error CQE) and disarms. A CQE written before the arm
//! raises nothing, as the verbs contract says: a waiter polls again after arming (perftest's
//! `-e` loop, which re-arms a CQ before polling the CQE that woke it, counts on that too).
//! The device orders each CQE write before its look at the arm word with a `SeqCst` fence, as
//! the driver orders its arm before its next poll ([`zverbs_mlx5dv::CqArm::arm`]): either the
//! poll after the arm sees the CQE, or the device sees the arm.
//!
//! The event goes to the CQ's [`EventHandler`] (its completion channel), if it has one, and is
//! counted either way.

use core::ptr::NonNull;
use std::sync::Arc;

use zverbs_core::sync::atomic::{AtomicU32, Ordering};
use zverbs_mlx5dv::prm::CQ_ARM_DB;
use zverbs_mlx5dv::prm::cq_arm;
use zverbs_mlx5dv::prm::cqe::{Cqe64, OPCODE_SHIFT, op};

/// The arm word the device writes into a CQ's doorbell record at creation: never an arm
/// (bits 30..31 are 0 in every arm word).
pub const NO_ARM: u32 = 0xffff_ffff;

/// What receives a CQ's events: called with the CQ number, on the device's thread, with the
/// device busy (it must not call back into the device).
pub type EventHandler = Arc<dyn Fn(u32) + Send + Sync>;

/// A CQ's arm as the device keeps it.
#[derive(Default)]
pub(crate) struct ArmState {
    /// The arm word seen last (`NO_ARM` before the first arm).
    seen: u32,
    /// Armed: for solicited and error completions only (`Some(true)`), or any (`Some(false)`).
    armed: Option<bool>,
    /// Events raised.
    pub(crate) events: u64,
    pub(crate) handler: Option<EventHandler>,
}

impl core::fmt::Debug for ArmState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("ArmState")
            .field("seen", &self.seen)
            .field("armed", &self.armed)
            .field("events", &self.events)
            .field("handler", &self.handler.is_some())
            .finish()
    }
}

impl ArmState {
    /// The state of a new CQ whose doorbell record is `dbrec`: writes [`NO_ARM`] into its arm
    /// word.
    ///
    /// # Safety
    ///
    /// `dbrec` points to the CQ's two-word doorbell record, valid for the CQ's life.
    pub(crate) unsafe fn new(dbrec: NonNull<u32>) -> Self {
        // SAFETY: (caller) word 1 of the record is valid; `AtomicU32` has the layout of `u32`.
        unsafe { AtomicU32::from_ptr(dbrec.as_ptr().add(CQ_ARM_DB)) }
            .store(NO_ARM, Ordering::Relaxed);
        Self {
            seen: NO_ARM,
            ..Self::default()
        }
    }

    /// Takes a new arm from the record's arm word, if the driver wrote one.
    ///
    /// # Safety
    ///
    /// As [`ArmState::new`].
    pub(crate) unsafe fn check(&mut self, dbrec: NonNull<u32>) {
        // SAFETY: (caller) as in `new`. Acquire: pairs with the driver's store of the arm
        // word, after its poll published the consumer index.
        let word = u32::from_be(
            unsafe { AtomicU32::from_ptr(dbrec.as_ptr().add(CQ_ARM_DB)) }.load(Ordering::Acquire),
        );
        if word == self.seen || word == NO_ARM {
            return;
        }
        self.seen = word;
        let (_sn, solicited, _ci) = cq_arm::decode(word);
        self.armed = Some(solicited);
    }

    /// After CQE `cqe` was written: raises the event if the arm asks for it.
    pub(crate) fn written(&mut self, cqn: u32, cqe: &[u8; 64]) {
        let Some(solicited) = self.armed else {
            return;
        };
        let c = Cqe64::new_unchecked(cqe);
        let opcode = c.op_own() >> OPCODE_SHIFT;
        if !solicited || c.se() != 0 || opcode == op::REQ_ERR || opcode == op::RESP_ERR {
            self.fire(cqn);
        }
    }

    fn fire(&mut self, cqn: u32) {
        self.armed = None;
        self.events += 1;
        if let Some(h) = &self.handler {
            h(cqn);
        }
    }
}

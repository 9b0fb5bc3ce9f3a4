//! Arming a completion queue: asking the device for one completion event.
//!
//! The sequence is libmlx5's `mlx5_arm_cq`, step by step:
//!
//! 1. compose the arm word: the arm sequence number (events seen, modulo 4) in bits 28..29,
//!    the command (any completion, or solicited and error completions only) in bits 24..27,
//!    the consumer index in bits 0..23 ([`cq_arm::word`]);
//! 2. store it in the CQ doorbell record's arm word (`dbrec[MLX5_CQ_ARM_DB]`);
//! 3. [`wc_start`](barrier::wc_start): the record is written before the doorbell below;
//! 4. write the 64-bit CQ doorbell (arm word, CQ number; big-endian) into the UAR at
//!    `MLX5_CQ_DOORBELL`;
//! 5. [`wc_flush`](barrier::wc_flush);
//! 6. a `SeqCst` fence, so the poll a waiter makes after arming is ordered after the arm
//!    (not on the poll path: once per sleep).
//!
//! The device then raises one event on the CQ's completion channel at the next CQE it writes
//! (for a solicited-only arm: a CQE with the solicited bit, or an error), and disarms. A CQE
//! written before the arm may raise nothing: poll again after arming
//! ([`zverbs_core::event::poll_arm_poll`]). Each event received advances the sequence number
//! ([`CqArm::event`], as `ibv_get_cq_event` makes libmlx5 do in `mlx5_cq_event`), so the
//! next arm names the next event.
//!
//! Arming is not on the poll path: a [`CompletionQueue`](crate::CompletionQueue) does not
//! change when it is armed; the arm takes the poller's consumer index
//! ([`consumer`](crate::CompletionQueue::consumer)) as an argument.

use core::ptr::NonNull;

use zverbs_core::barrier;
use zverbs_core::mmio::MmioRegion;
use zverbs_core::sync::order;

use crate::devmem::DbrecWord;
use crate::layout::CqLayout;
use crate::prm::{CQ_ARM_DB, CQ_DOORBELL, cq_arm};

/// What arms one CQ: its doorbell record's arm word, its UAR's CQ doorbell and the arm
/// sequence number. `Send`, not `Sync`: one thread arms (the one that polls and waits).
#[derive(Debug)]
pub struct CqArm {
    arm_db: DbrecWord,
    doorbell: MmioRegion,
    cqn: u32,
    sn: u32,
}

// SAFETY: the arm word and the UAR doorbell are written only through `&mut self`; moving the
// value moves the right to write them, as for a queue's doorbell.
unsafe impl Send for CqArm {}

impl CqArm {
    /// Arms the CQ that `layout` describes through the UAR page at `cq_uar`
    /// (`mlx5dv_cq.cq_uar`).
    ///
    /// # Safety
    ///
    /// - `layout` is what `mlx5dv_init_obj` reported for a live CQ (or the software device's
    ///   equivalent); its doorbell record stays valid while this value lives and nothing else
    ///   writes its arm word (no `ibv_req_notify_cq` on the CQ);
    /// - `cq_uar` is that CQ's UAR page (or, for the software device, memory of at least
    ///   `MLX5_CQ_DOORBELL + 8` bytes), mapped and writable with 8-byte stores while this value
    ///   lives, and never accessed through references;
    /// - under `cfg(zverbs_loom)` the doorbell record is made of loom atomics.
    pub unsafe fn new(layout: &CqLayout, cq_uar: NonNull<u8>) -> Self {
        // SAFETY: (caller) the record is valid and its arm word is ours to write; the UAR page
        // is mapped and writable at `CQ_DOORBELL..+8`.
        let (arm_db, doorbell) = unsafe {
            (
                DbrecWord::new(layout.dbrec, CQ_ARM_DB),
                MmioRegion::new(cq_uar.add(CQ_DOORBELL), 8),
            )
        };
        Self {
            arm_db,
            doorbell,
            cqn: layout.cqn,
            sn: 0,
        }
    }

    /// Asks for one event: for the next completion at or past consumer index `consumer` (the
    /// poller's [`consumer`](crate::CompletionQueue::consumer)), or with `solicited_only` for
    /// the next solicited or error completion. Arming again before the event replaces the
    /// request. Not a syscall: two stores and the barriers between them.
    #[inline]
    pub fn arm(&mut self, consumer: u32, solicited_only: bool) {
        // 1. The arm word.
        let word = cq_arm::word(self.sn, solicited_only, consumer);
        // 2. The doorbell record's copy. Release: the consumer index published before (by the
        //    poll) is seen by whoever sees this word (the software device reads it).
        self.arm_db.publish(word, order::CQ_ARM_RELEASE);
        // 3. The record is written before the doorbell.
        barrier::wc_start();
        // 4. The CQ doorbell, big-endian: arm word, then CQ number.
        // SAFETY: word 0 of the 8-byte region made in `new`.
        unsafe {
            self.doorbell
                .write_u64(0, cq_arm::doorbell(word, self.cqn).to_be())
        };
        // 5. Flush it towards the device.
        barrier::wc_flush();
        // 6. The arm before the poll that follows it (a waiter polls again after arming): a
        //    device that looks at the arm word after writing a CQE (the software device)
        //    then either raises the event or has its CQE seen by that poll.
        order::arm_fence();
    }

    /// Counts one event received for this CQ: the next arm carries the next sequence number.
    #[inline]
    pub fn event(&mut self) {
        self.sn = self.sn.wrapping_add(1);
    }

    /// The arm sequence number the next arm carries (events counted, modulo 4).
    #[inline]
    pub fn sn(&self) -> u32 {
        self.sn & cq_arm::SN_MASK
    }

    /// The CQ number.
    #[inline]
    pub fn cqn(&self) -> u32 {
        self.cqn
    }
}

#[cfg(all(test, not(zverbs_loom)))]
mod tests {
    use super::*;

    /// The record's arm word and the doorbell's bytes, for each command, across the sequence
    /// number's wrap.
    #[test]
    fn arm_writes_the_record_then_the_doorbell() {
        let mut dbrec = [0u32; 2];
        let mut uar = [0u64; 8];
        // The arm writes through these pointers; the test reads through them too (not
        // through the arrays: under Tree Borrows a read through the array would take the
        // pointers' write permission away before the second arm).
        let rec = NonNull::new(dbrec.as_mut_ptr()).unwrap();
        let db = NonNull::new(uar.as_mut_ptr()).unwrap();
        let layout = CqLayout {
            buf: NonNull::dangling(),
            dbrec: rec,
            cqe_cnt: 4,
            cqe_size: 64,
            cqn: 0x0004_0a0b,
        };
        // SAFETY: both arrays outlive the arm; nothing else writes them meanwhile.
        let mut arm = unsafe { CqArm::new(&layout, db.cast()) };
        // SAFETY: in bounds of the arrays, which outlive the test; no write runs meanwhile.
        let rec_word = |i: usize| unsafe { rec.as_ptr().add(i).read_volatile() };
        // SAFETY: as above.
        let db_word = |i: usize| unsafe { db.as_ptr().add(i).read_volatile() };
        arm.arm(0x0123_4567, false);
        assert_eq!(rec_word(1).to_ne_bytes(), [0x00, 0x23, 0x45, 0x67]);
        assert_eq!(rec_word(0), 0, "the consumer index word is the poller's");
        assert_eq!(
            db_word(4).to_ne_bytes(),
            [0x00, 0x23, 0x45, 0x67, 0x00, 0x04, 0x0a, 0x0b],
            "MLX5_CQ_DOORBELL is 0x20: word 4"
        );
        for _ in 0..5 {
            arm.event();
        }
        assert_eq!(arm.sn(), 1);
        arm.arm(7, true);
        assert_eq!(rec_word(1).to_ne_bytes(), [0x11, 0x00, 0x00, 0x07]);
        assert_eq!(db_word(4).to_ne_bytes()[..4], [0x11, 0x00, 0x00, 0x07]);
        assert_eq!(cq_arm::decode(0x1100_0007), (1, true, 7));
    }
}

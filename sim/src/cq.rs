//! The device side of a completion queue: writing CQEs ([`crate::cqe`]) with owner bits.
//!
//! A CQE goes to slot `pi & (cqe_cnt - 1)` with owner bit `(pi >> log2(cqe_cnt)) & 1`: the body
//! first, then `op_own` alone with `Release`, so a poller that sees the new owner bit (and
//! issues its `from_device` barrier) reads a complete CQE. Before writing, the device reads
//! the consumer counter from the CQ doorbell record (`Acquire`, pairing with the poller's
//! `Release` store): when `pi - ci == cqe_cnt` the CQ is full and the CQE is not written (a CQ
//! overrun: counted, never a silent overwrite).
//!
//! CQEs can be held back (fault injection): for a number of steps, or until released. Held CQEs
//! wait, in order, in a queue sized at creation; nothing is allocated per completion.

use core::ptr::NonNull;
use std::collections::VecDeque;

use zverbs_core::sync::atomic::{AtomicU8, Ordering};
use zverbs_mlx5dv::prm::cqe::{Cqe64, field};

use crate::config::SimError;
use crate::mem::{Region, load_be32_acquire};

pub(crate) use crate::cqe::{RawCqe, UdInfo, err, op, req, resp, set_ud};

#[derive(Clone, Copy, Debug)]
struct Held {
    due: u64,
    cqe: RawCqe,
    /// The first half of a 128-byte entry: 64 bytes of data scattered before the CQE.
    head: Option<[u8; 64]>,
}

/// A CQ as the device drives it.
#[derive(Debug)]
pub(crate) struct DevCq {
    pub(crate) cqn: u32,
    buf: Region,
    dbrec: NonNull<u32>,
    cnt: u32,
    log2: u32,
    /// Producer counter (free-running).
    pi: u32,
    held: VecDeque<Held>,
    /// CQEs written from now on wait this many steps.
    delay: u64,
    /// CQEs wait until released.
    holding: bool,
    pub(crate) overruns: u64,
    /// Its overrun was reported (one CQ error event per CQ).
    pub(crate) overrun_reported: bool,
    /// Destroyed: no CQE is written any more.
    pub(crate) dead: bool,
    /// The clock that stamps each CQE as it is written, for a CQ created with completion
    /// timestamps.
    pub(crate) stamp: Option<crate::clock::DeviceClock>,
    /// The arm and the events raised.
    pub(crate) arm: crate::arm::ArmState,
    /// The CQ doorbell's UAR (a 64-byte stand-in), for CQs whose memory the device owns.
    pub(crate) uar: Option<NonNull<u8>>,
    /// Bytes per entry: 64, or 128 with the 64-byte CQE in the second half.
    stride: usize,
    /// CQE compression, in this mini-CQE format ([`crate::compress`]).
    pub(crate) compress: Option<zverbs_mlx5dv::prm::mini::MiniCqeFormat>,
    /// The CQEs of the current step, waiting to be written (compressed where they can be).
    staged: Vec<RawCqe>,
    /// Compressed sessions written.
    pub(crate) sessions: u64,
    /// A CQE was staged during the current step.
    pub(crate) staged_now: bool,
    /// Timestamps in the real-time format (`seconds << 32 | nanoseconds`) instead of the
    /// free-running counter.
    pub(crate) real_time: bool,
    /// A striding receive work queue completes here: compressed sessions carry each
    /// completion's stride index ([`crate::compress`]).
    pub(crate) strided: bool,
}

impl DevCq {
    /// A CQ over `buf` (`cnt` entries of `stride` bytes, 64 or 128, already initialised) and
    /// its doorbell record.
    pub(crate) fn new(cqn: u32, buf: Region, dbrec: NonNull<u32>, cnt: u32, stride: usize) -> Self {
        debug_assert!(stride == 64 || stride == 128);
        debug_assert!(cnt.is_power_of_two() && buf.len >= cnt as usize * stride);
        Self {
            cqn,
            buf,
            dbrec,
            cnt,
            log2: cnt.trailing_zeros(),
            pi: 0,
            // Sized when holding or delaying is first asked for (a control call), so CQs
            // that never hold CQEs cost nothing.
            held: VecDeque::new(),
            delay: 0,
            holding: false,
            overruns: 0,
            overrun_reported: false,
            dead: false,
            stamp: None,
            // SAFETY: the record is valid for the CQ's life (the constructor's contract).
            arm: unsafe { crate::arm::ArmState::new(dbrec) },
            uar: None,
            stride,
            compress: None,
            staged: Vec::new(),
            sessions: 0,
            staged_now: false,
            real_time: false,
            strided: false,
        }
    }

    /// The timestamp a CQE written now carries, for a CQ that stamps them.
    fn stamp_now(&self) -> Option<u64> {
        self.stamp.as_ref().map(|clock| {
            if self.real_time {
                clock.real_time()
            } else {
                clock.ticks()
            }
        })
    }

    /// Bytes per entry (64 or 128).
    pub(crate) fn cqe_size(&self) -> usize {
        self.stride
    }

    /// Forgets the CQEs held back (not yet written) for QP `qpn`: it was reset, and its old
    /// incarnation's completions must not reach the new one.
    pub(crate) fn forget_held(&mut self, qpn: u32) -> usize {
        let before = self.held.len();
        self.held.retain(|h| {
            u32::from_be_bytes([h.cqe[56], h.cqe[57], h.cqe[58], h.cqe[59]]) & 0xff_ffff != qpn
        });
        before - self.held.len()
    }

    /// Number of CQEs.
    pub(crate) fn cnt(&self) -> u32 {
        self.cnt
    }

    pub(crate) fn set_delay(&mut self, steps: u64) -> Result<(), SimError> {
        self.reserve()?;
        self.delay = steps;
        Ok(())
    }

    pub(crate) fn hold(&mut self) -> Result<(), SimError> {
        self.reserve()?;
        self.holding = true;
        Ok(())
    }

    /// Room for a ring's worth of held CQEs, so holding never allocates per completion.
    fn reserve(&mut self) -> Result<(), SimError> {
        self.held
            .try_reserve_exact((self.cnt as usize).saturating_sub(self.held.len()))
            .map_err(|_| SimError::OutOfMemory)
    }

    /// Releases every held CQE now; returns how many were written.
    pub(crate) fn release(&mut self, stats_cqes: &mut u64) -> usize {
        self.holding = false;
        let mut n = 0;
        while let Some(h) = self.held.pop_front() {
            n += usize::from(self.write(&h.cqe, h.head.as_ref(), stats_cqes));
        }
        n
    }

    /// Compresses the CQEs written from now on, in `format` (room for a ring's worth of
    /// staged CQEs is allocated here, so staging never allocates per completion).
    pub(crate) fn enable_compression(
        &mut self,
        format: zverbs_mlx5dv::prm::mini::MiniCqeFormat,
    ) -> Result<(), SimError> {
        self.staged
            .try_reserve_exact(self.cnt as usize)
            .map_err(|_| SimError::OutOfMemory)?;
        self.compress = Some(format);
        Ok(())
    }

    /// Whether CQEs wait to be written.
    pub(crate) fn has_staged(&self) -> bool {
        !self.staged.is_empty()
    }

    /// Writes the staged CQEs: each run a session can carry as one session, the others one by
    /// one ([`crate::compress`]).
    pub(crate) fn flush(&mut self, stats_cqes: &mut u64) {
        let Some(format) = self.compress else {
            return;
        };
        let mut staged = core::mem::take(&mut self.staged);
        let mut at = 0;
        while at < staged.len() {
            // SAFETY: the doorbell record is valid for the device's life (creation contract).
            let ci = unsafe { load_be32_acquire(self.dbrec) } & 0x00ff_ffff;
            let used = (self.pi & 0x00ff_ffff).wrapping_sub(ci) & 0x00ff_ffff;
            let room = self.cnt.saturating_sub(used);
            let max = crate::compress::MAX_SESSION.min(room);
            let n = crate::compress::run_len(&staged[at..], max, format, self.strided);
            if n >= 2 {
                self.write_session(&staged[at..at + n], format, stats_cqes);
            } else {
                self.write(&staged[at], None, stats_cqes);
            }
            at += n.max(1);
        }
        staged.clear();
        self.staged = staged;
    }

    /// Writes `run` (at least two CQEs, with room for all) as one compressed session.
    fn write_session(
        &mut self,
        run: &[RawCqe],
        format: zverbs_mlx5dv::prm::mini::MiniCqeFormat,
        stats_cqes: &mut u64,
    ) {
        let n = run.len() as u32;
        for (k, entry) in crate::compress::arrays(n) {
            let a = crate::compress::array(run, k, format, self.strided);
            let slot = (self.pi.wrapping_add(entry) & (self.cnt - 1)) as usize;
            // SAFETY: `slot < cnt`; the entry is the device's (the session has room), and no
            // poller reads it before the title's owner byte below says the session is there.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    a.as_ptr(),
                    self.buf
                        .ptr
                        .add(slot * self.stride + (self.stride - 64))
                        .as_ptr(),
                    64,
                )
            };
        }
        let mut title = crate::compress::title(run);
        let slot = (self.pi & (self.cnt - 1)) as usize;
        let owner = ((self.pi >> self.log2) & 1) as u8;
        Cqe64::new_unchecked(&mut title).set_owner(owner);
        if let Some(ts) = self.stamp_now() {
            Cqe64::new_unchecked(&mut title).set_timestamp(ts);
        }
        // SAFETY: as in `write`.
        let p = unsafe { self.buf.ptr.add(slot * self.stride + (self.stride - 64)) };
        // SAFETY: as in `write`.
        unsafe { core::ptr::copy_nonoverlapping(title.as_ptr(), p.as_ptr(), field::OP_OWN) };
        // SAFETY: as in `write`; Release orders the arrays and the body before it.
        unsafe { AtomicU8::from_ptr(p.as_ptr().add(field::OP_OWN)) }
            .store(title[field::OP_OWN], Ordering::Release);
        self.pi = self.pi.wrapping_add(n);
        *stats_cqes += u64::from(n);
        self.sessions += 1;
        zverbs_core::sync::atomic::fence(Ordering::SeqCst);
        // SAFETY: as in `write`.
        unsafe { self.arm.check(self.dbrec) };
        self.arm.written(self.cqn, &title);
    }

    /// Queues or writes `cqe` at step `now`, with `head` in the first half of its 128-byte
    /// entry if given (data scattered there).
    pub(crate) fn push_with_head(
        &mut self,
        now: u64,
        cqe: RawCqe,
        head: Option<[u8; 64]>,
        stats_cqes: &mut u64,
    ) {
        if self.holding || self.delay > 0 || !self.held.is_empty() {
            if self.held.len() < self.cnt as usize {
                let due = if self.holding {
                    u64::MAX
                } else {
                    now.saturating_add(self.delay)
                };
                self.held.push_back(Held { due, cqe, head });
            } else {
                self.overruns += 1;
            }
            return;
        }
        if self.compress.is_some() {
            if head.is_none() {
                if self.staged.len() == self.staged.capacity() {
                    // A ring's worth staged already: none of them could wait for room anyway.
                    self.flush(stats_cqes);
                }
                self.staged.push(cqe);
                self.staged_now = true;
                return;
            }
            // Data in the entry's first half is never compressed: what was staged goes first.
            self.flush(stats_cqes);
        }
        self.write(&cqe, head.as_ref(), stats_cqes);
    }

    /// Writes the held CQEs that are due at step `now`; returns the work done (CQEs written,
    /// or 1 while CQEs wait for a step that will come).
    pub(crate) fn tick(&mut self, now: u64, stats_cqes: &mut u64) -> usize {
        // SAFETY: the doorbell record is valid for the device's life (creation contract).
        unsafe { self.arm.check(self.dbrec) };
        if self.holding {
            return 0;
        }
        let mut n = 0;
        while let Some(h) = self.held.front() {
            if h.due > now {
                return n.max(1);
            }
            let (cqe, head) = (h.cqe, h.head);
            self.held.pop_front();
            n += usize::from(self.write(&cqe, head.as_ref(), stats_cqes));
        }
        n
    }

    /// Writes one CQE at the producer counter, or counts an overrun when the CQ is full.
    fn write(&mut self, cqe: &RawCqe, head: Option<&[u8; 64]>, stats_cqes: &mut u64) -> bool {
        // SAFETY: the doorbell record is valid for the device's life (creation contract).
        let ci = unsafe { load_be32_acquire(self.dbrec) } & 0x00ff_ffff;
        if (self.pi & 0x00ff_ffff).wrapping_sub(ci) & 0x00ff_ffff >= self.cnt {
            self.overruns += 1;
            return false;
        }
        let slot = (self.pi & (self.cnt - 1)) as usize;
        let owner = ((self.pi >> self.log2) & 1) as u8;
        // SAFETY: `slot < cnt` and the ring holds `cnt` entries of `stride` bytes, each with
        // its 64-byte CQE in the last 64 bytes.
        let entry = unsafe { self.buf.ptr.add(slot * self.stride) };
        // SAFETY: as above.
        let p = unsafe { entry.add(self.stride - 64) };
        if let Some(head) = head
            && self.stride == 128
        {
            // SAFETY: the entry's first half, the device's as the CQE is (below), written
            // before the owner byte's `Release`.
            unsafe { core::ptr::copy_nonoverlapping(head.as_ptr(), entry.as_ptr(), 64) };
        }
        let mut cqe = *cqe;
        Cqe64::new_unchecked(&mut cqe).set_owner(owner);
        let opcode = cqe[field::OP_OWN] >> 4;
        if let Some(ts) = self.stamp_now()
            && opcode != op::REQ_ERR
            && opcode != op::RESP_ERR
        {
            // As a ConnectX: the device clock when the CQE is written. An error CQE has no
            // timestamp: its syndrome and vendor syndrome are in those bytes.
            Cqe64::new_unchecked(&mut cqe).set_timestamp(ts);
        }
        // SAFETY: the CQE is the device's (the consumer counter is past it), so the poller does
        // not read its body now; it reads only `op_own`, which is not written here.
        unsafe { core::ptr::copy_nonoverlapping(cqe.as_ptr(), p.as_ptr(), field::OP_OWN) };
        // SAFETY: `op_own`, the CQE's last byte, valid; `AtomicU8` has the layout of `u8`.
        // Release orders the body before it.
        unsafe { AtomicU8::from_ptr(p.as_ptr().add(field::OP_OWN)) }
            .store(Cqe64::new_unchecked(&cqe).op_own(), Ordering::Release);
        self.pi = self.pi.wrapping_add(1);
        *stats_cqes += 1;
        // The CQE before the look at the arm word (the driver's arm is before its next poll:
        // one of the two sees the other's store).
        zverbs_core::sync::atomic::fence(Ordering::SeqCst);
        // SAFETY: as above.
        unsafe { self.arm.check(self.dbrec) };
        self.arm.written(self.cqn, &cqe);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requester_cqe_bytes() {
        let c = req(0x000102, 0x000102, 0x10, 0xbeef, 0x40);
        let mut want = [0u8; 64];
        want[32..36].copy_from_slice(&[0, 0, 1, 2]);
        want[44..48].copy_from_slice(&[0, 0, 0, 0x40]);
        want[56..60].copy_from_slice(&[0x10, 0, 1, 2]);
        want[60..62].copy_from_slice(&[0xbe, 0xef]);
        want[63] = 0x00;
        assert_eq!(c, want);
    }

    #[test]
    fn responder_and_error_cqe_bytes() {
        let c = resp(
            0x103,
            0x103,
            op::RESP_SEND_IMM,
            7,
            5,
            [0xca, 0xfe, 0xba, 0xbe],
            true,
        );
        assert_eq!(&c[36..40], &[0xca, 0xfe, 0xba, 0xbe]);
        assert_eq!(&c[44..48], &[0, 0, 0, 5]);
        assert_eq!(&c[56..60], &[0, 0, 1, 3]);
        assert_eq!(&c[60..62], &[0, 7]);
        assert_eq!(c[63], 0x32, "RESP_SEND_IMM with the solicited bit");
        assert_eq!(&c[24..28], &[0, 0, 0, 0], "flags_rqpn: no GRH");
        let e = err(0x103, 0x103, op::REQ_ERR, 0x0a, 9, 0x13, 0x31);
        assert_eq!((e[54], e[55], e[63]), (0x31, 0x13, 0xd0));
        assert_eq!(&e[56..60], &[0x0a, 0, 1, 3]);
    }

    /// A CQ over a local ring: owner bits by pass, and overrun instead of overwrite.
    #[test]
    fn owner_bits_and_overrun() {
        let mut ring = [[0u8; 64]; 2];
        for c in &mut ring {
            c[63] = 0xf0;
        }
        let mut dbrec = [0u32; 2];
        let region = Region {
            ptr: NonNull::new(ring.as_mut_ptr().cast::<u8>()).unwrap(),
            len: 128,
        };
        let db = NonNull::new(dbrec.as_mut_ptr()).unwrap();
        let mut cq = DevCq::new(1, region, db, 2, 64);
        let mut written = 0;
        cq.push_with_head(0, req(1, 1, 0, 0, 0), None, &mut written);
        cq.push_with_head(0, req(1, 1, 0, 1, 0), None, &mut written);
        cq.push_with_head(0, req(1, 1, 0, 2, 0), None, &mut written);
        assert_eq!(
            (written, cq.overruns),
            (2, 1),
            "the third finds the CQ full"
        );
        // The poller consumed both.
        // SAFETY: word 0 of the local doorbell record, written through the device's pointer.
        unsafe { db.as_ptr().write(2u32.to_be()) };
        cq.push_with_head(0, req(1, 1, 0, 3, 0), None, &mut written);
        assert_eq!(ring[0][63], 0x01, "second pass: owner 1");
        assert_eq!(ring[1][63], 0x00);
        assert_eq!(&ring[0][60..62], &[0, 3]);
    }
}

//! Shared receive queues: the rings several QPs take their receives from.
//!
//! Contract: an SRQ is a ring of `wqe_cnt` WQEs of `stride` bytes laid out as libmlx5 lays
//! one out, each beginning with a `mlx5_wqe_srq_next_seg` whose `next_wqe_index` links the
//! list of free WQEs, and a one-word doorbell record (big-endian) counting the receives
//! posted. The driver posts at the head of the free list and raises the counter; the device
//! consumes in the order of the list — from its own head, which starts at WQE 0 and follows
//! each consumed WQE's link — one WQE per message, whichever QP the message arrives on. The
//! counter is compared in 16 bits with the device's consumer count, as a ConnectX compares
//! it. A counter that claims more than the ring, or a link outside the ring, is the driver's
//! error: the SRQ enters the error state (an [`SrqEvent::Error`] for the control path) and
//! serves no message any more; nothing outside the ring is read. An armed limit fires
//! [`SrqEvent::LimitReached`] once, when a consumption leaves fewer posted WQEs than the
//! limit, and disarms. The device allocates nothing here after creation.

use core::ptr::NonNull;

use zverbs_mlx5dv::prm::wqe::{SrqNextSeg, srq_max_gs};

use super::responder::Nak;
use super::{Engine, Fault, Owner, REM_OP};
use crate::config::{SimError, SimSrq, SrqConfig, SrqEvent};
use crate::mem::{Region, load_be32_acquire};
use crate::vendor;
use crate::wqe::SrqRing;

/// The first SRQ number the device hands out.
const SRQN_BASE: u32 = 0x80;
/// The most WQEs an SRQ ring holds.
const MAX_SRQ_WQES: u32 = 1 << 15;
/// The most scatter entries of a shared receive WQE (a 1024-byte stride).
const MAX_SRQ_SGE: u32 = 63;

/// A shared receive queue as the device drives it.
#[derive(Debug)]
pub(crate) struct DevSrq {
    pub(crate) srqn: u32,
    pub(super) ring: SrqRing,
    dbrec: NonNull<u32>,
    /// Receives consumed (free-running).
    ci: u32,
    /// The WQE the next message takes: the head of the device's free list.
    head: u32,
    /// The armed limit (0: not armed).
    limit: u32,
    /// Events raised and not yet read by the control path.
    limit_event: bool,
    error_event: bool,
    /// In the error state: serves no message.
    error: bool,
    pub(super) dead: bool,
}

impl DevSrq {
    /// Receives posted and not yet consumed, as the doorbell record says (16 bits).
    fn posted(&self) -> u32 {
        // SAFETY: the doorbell record is valid for the engine's life (creation contract).
        let counter = unsafe { load_be32_acquire(self.dbrec) } as u16;
        u32::from(counter.wrapping_sub(self.ci as u16))
    }
}

impl Engine {
    pub(crate) fn srq_index(&self, srqn: u32) -> Result<usize, SimError> {
        self.srqs
            .iter()
            .position(|s| s.srqn == srqn && !s.dead)
            .ok_or(SimError::NoSuchSrq(srqn))
    }

    pub(crate) fn create_srq(&mut self, cfg: SrqConfig) -> Result<SimSrq, SimError> {
        if cfg.max_wr == 0 || cfg.max_wr >= MAX_SRQ_WQES {
            return Err(SimError::InvalidConfig("SRQ max_wr must be in 1..32768"));
        }
        if cfg.max_sge > MAX_SRQ_SGE {
            return Err(SimError::InvalidConfig("SRQ max_sge above 63"));
        }
        let slot = self.free_srq_slot()?;
        // As libmlx5 sizes it (without its wait queue): the next segment and the scatter
        // entries, at least 32 bytes, to a power of two; one WQE more than asked for, to a
        // power of two, so the free list never runs dry while `max_wr` are posted.
        let stride = (16 + 16 * cfg.max_sge).max(32).next_power_of_two();
        let cnt = (cfg.max_wr + 1).next_power_of_two();
        let owner = Owner::Srq(SRQN_BASE + slot as u32);
        let buf = match self.alloc(owner, cnt as usize * stride as usize) {
            Ok(b) => b,
            Err(e) => {
                self.free_owned(owner);
                return Err(e);
            }
        };
        for i in 0..cnt - 1 {
            // SAFETY: WQE `i`'s next segment, inside the new ring (`(i + 1) * stride` bytes
            // at most); nothing else uses the ring yet.
            let seg = unsafe {
                &mut *buf
                    .ptr
                    .add(i as usize * stride as usize)
                    .as_ptr()
                    .cast::<[u8; 16]>()
            };
            SrqNextSeg::new_unchecked(seg).set_next_wqe_index((i + 1) as u16);
        }
        let dbrec = match self.alloc(owner, 8) {
            Ok(r) => r.ptr.cast::<u32>(),
            Err(e) => {
                self.free_owned(owner);
                return Err(e);
            }
        };
        // SAFETY: the ring and record were just allocated and linked, and live until the SRQ
        // is destroyed.
        let srqn = unsafe { self.add_srq(slot, buf, dbrec, cnt, stride) };
        Ok(SimSrq {
            srqn,
            buf: buf.ptr,
            dbrec,
            stride,
            wqe_cnt: cnt,
            head: 0,
            tail: cnt - 1,
            max_gs: srq_max_gs(stride as usize) as u32,
        })
    }

    /// Drives an SRQ whose ring (`cnt` WQEs of `stride` bytes, its free list already linked by
    /// the driver) and doorbell record someone else allocated; returns its number.
    ///
    /// # Safety
    ///
    /// The ring and the record are valid for reads and writes for the engine's life and are
    /// written only as an mlx5 driver writes them.
    pub(crate) unsafe fn add_srq_external(
        &mut self,
        buf: NonNull<u8>,
        dbrec: NonNull<u32>,
        cnt: u32,
        stride: u32,
    ) -> Result<u32, SimError> {
        if !cnt.is_power_of_two() || cnt > MAX_SRQ_WQES {
            return Err(SimError::InvalidConfig(
                "SRQ: power-of-two WQE count, at most 32768",
            ));
        }
        if !stride.is_power_of_two() || !(32..=16 + 16 * MAX_SRQ_SGE).contains(&stride) {
            return Err(SimError::InvalidConfig(
                "SRQ: power-of-two stride of 32 to 1024 bytes",
            ));
        }
        let slot = self.free_srq_slot()?;
        let region = Region {
            ptr: buf,
            len: cnt as usize * stride as usize,
        };
        // SAFETY: (caller) the memory is valid for the engine's life.
        Ok(unsafe { self.add_srq(slot, region, dbrec, cnt, stride) })
    }

    fn free_srq_slot(&self) -> Result<usize, SimError> {
        match self.srqs.iter().position(|s| s.dead) {
            Some(i) => Ok(i),
            None if self.srqs.len() < self.cfg.max_qps as usize => Ok(self.srqs.len()),
            None => Err(SimError::TooMany),
        }
    }

    /// Puts an SRQ over `ring` and `dbrec` into table slot `slot`; returns its number.
    ///
    /// # Safety
    ///
    /// As [`Engine::add_srq_external`].
    unsafe fn add_srq(
        &mut self,
        slot: usize,
        buf: Region,
        dbrec: NonNull<u32>,
        cnt: u32,
        stride: u32,
    ) -> u32 {
        let srq = DevSrq {
            srqn: SRQN_BASE + slot as u32,
            ring: SrqRing {
                region: buf,
                cnt,
                stride,
            },
            dbrec,
            ci: 0,
            head: 0,
            limit: 0,
            limit_event: false,
            error_event: false,
            error: false,
            dead: false,
        };
        let srqn = srq.srqn;
        if slot == self.srqs.len() {
            self.srqs.push(srq);
        } else {
            self.srqs[slot] = srq;
        }
        srqn
    }

    /// Forgets SRQ `srqn`; refused while a live QP takes its receives from it.
    pub(crate) fn destroy_srq(&mut self, srqn: u32) -> Result<(), SimError> {
        let s = self.srq_index(srqn)?;
        if self.qps.iter().any(|q| !q.dead && q.srq == Some(s)) {
            return Err(SimError::InvalidConfig("SRQ in use by a QP"));
        }
        self.srqs[s].dead = true;
        self.free_owned(Owner::Srq(srqn));
        Ok(())
    }

    /// Arms SRQ `srqn`'s limit (`ibv_modify_srq` with `IBV_SRQ_LIMIT`); 0 disarms it.
    pub(crate) fn arm_srq(&mut self, srqn: u32, limit: u32) -> Result<(), SimError> {
        let s = self.srq_index(srqn)?;
        if limit >= self.srqs[s].ring.cnt {
            return Err(SimError::InvalidConfig(
                "SRQ limit at or above its WQE count",
            ));
        }
        self.srqs[s].limit = limit;
        Ok(())
    }

    /// The oldest event of SRQ `srqn` not yet read (the error before the limit), cleared.
    pub(crate) fn take_srq_event(&mut self, srqn: u32) -> Result<Option<SrqEvent>, SimError> {
        let s = self.srq_index(srqn)?;
        let srq = &mut self.srqs[s];
        Ok(if core::mem::take(&mut srq.error_event) {
            Some(SrqEvent::Error)
        } else if core::mem::take(&mut srq.limit_event) {
            Some(SrqEvent::LimitReached)
        } else {
            None
        })
    }

    /// The WQE index the next message to SRQ `s` takes. None posted is an RNR NAK; an SRQ in
    /// the error state, or one whose ring is found malformed now (it enters the error state),
    /// refuses the message with "remote operation error".
    pub(super) fn srq_peek(&mut self, s: usize) -> Result<u16, Nak> {
        let srq = &self.srqs[s];
        if srq.error {
            return Err(Fault::new(REM_OP, vendor::SRQ_ERROR).into());
        }
        let posted = srq.posted();
        if posted == 0 {
            return Err(Nak::Rnr);
        }
        let malformed = posted > srq.ring.cnt || u32::from(srq.ring.next(srq.head)) >= srq.ring.cnt;
        if malformed {
            self.stats.bad_doorbells += u64::from(posted > srq.ring.cnt);
            let srq = &mut self.srqs[s];
            srq.error = true;
            srq.error_event = true;
            let srqn = srq.srqn;
            self.faults
                .raise(crate::faults::DeviceEvent::SrqError { srqn });
            return Err(Fault::new(REM_OP, vendor::SRQ_ERROR).into());
        }
        Ok(srq.head as u16)
    }

    /// Consumes WQE `index` of SRQ `s` (the one [`Engine::srq_peek`] gave): the head moves to
    /// its link, and the limit fires if fewer WQEs than it stay posted.
    pub(super) fn srq_consume(&mut self, s: usize, index: u16) {
        let srq = &mut self.srqs[s];
        debug_assert_eq!(u32::from(index), srq.head);
        srq.head = u32::from(srq.ring.next(u32::from(index)));
        srq.ci = srq.ci.wrapping_add(1);
        if srq.limit != 0 && srq.posted() < srq.limit {
            srq.limit = 0;
            srq.limit_event = true;
            let srqn = srq.srqn;
            self.faults
                .raise(crate::faults::DeviceEvent::SrqLimitReached { srqn });
        }
    }
}

//! The device engine: its tables, one step of work, and RC execution.
//!
//! One [`Engine::step`] looks at every QP once, in creation order: it writes CQEs whose delay
//! has run out, flushes receives of QPs in the error state, and takes at most one send WQE per
//! QP — executing it against the peer QP (RC semantics) or flushing it. The responder side of a
//! request runs within the same step, so a stepped device is deterministic.
//!
//! Execution is in order, one WQE at a time per QP, and a WQE is complete (its data placed,
//! its READ response or atomic result written back) before the next one starts: a fenced WQE
//! (`fm_ce_se` FENCE, `IBV_SEND_FENCE`), which on hardware waits for earlier READs and atomics
//! of its QP, therefore needs nothing more here.
//!
//! A whole request is checked (keys, bounds, rights, lengths, the receive it consumes) before
//! any byte moves, so a failed request writes nothing; real hardware may have placed part of a
//! message when it detects an error.
//!
//! Requester and responder talk through [`Engine::execute`] alone, with the peer named by its
//! index; a later channel between processes carries the same requests and answers.

use core::ptr::NonNull;
use std::vec::Vec;

use zverbs_core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use super::config::{
    Access, CqConfig, DeviceConfig, Mr, QpConfig, QpStatus, RNR_RETRY_INFINITE, SimCq, SimError,
    SimQp, Stats,
};
use super::cq::{self, DevCq, op};
use super::mem::{DevBuf, Region, load_be32_acquire};
use super::mr::{MrFault, MrTable};
use super::vendor;
use super::wqe::{DataEntry, MAX_SEGS, Payload, RqRing, SqRing, Wqe};
use crate::layout::{BfLayout, CqLayout, QpLayout, WqLayout};
use crate::prm::cqe::Syndrome;
use crate::prm::wqe::inline_ds;
use crate::prm::{MAX_DS, RCV_DBR, SND_DBR, fm_ce_se, opcode};

/// The first QP number the device hands out.
pub(crate) const QPN_BASE: u32 = 0x100;
/// The first CQ number the device hands out.
pub(crate) const CQN_BASE: u32 = 0x40;
/// The largest message (2 GiB).
const MAX_MSG: u64 = 1 << 31;

const LOC_LEN: u8 = Syndrome::LocalLengthErr.to_raw();
const LOC_QP_OP: u8 = Syndrome::LocalQpOpErr.to_raw();
const LOC_PROT: u8 = Syndrome::LocalProtErr.to_raw();
const FLUSH: u8 = Syndrome::WrFlushErr.to_raw();
const REM_INV_REQ: u8 = Syndrome::RemoteInvalReqErr.to_raw();
const REM_ACCESS: u8 = Syndrome::RemoteAccessErr.to_raw();
const REM_OP: u8 = Syndrome::RemoteOpErr.to_raw();
const RETRY_EXC: u8 = Syndrome::TransportRetryExcErr.to_raw();
const RNR_EXC: u8 = Syndrome::RnrRetryExcErr.to_raw();

/// A QP's memory as the device sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QpMem {
    pub(crate) sq: SqRing,
    pub(crate) rq: Option<RqRing>,
    pub(crate) dbrec: NonNull<u32>,
}

/// A QP as the device drives it.
#[derive(Debug)]
pub(crate) struct DevQp {
    pub(crate) qpn: u32,
    mem: QpMem,
    send_cq: usize,
    recv_cq: usize,
    peer: Option<usize>,
    pub(crate) status: QpStatus,
    /// Send consumer counter in basic blocks (free-running).
    sq_ci: u32,
    /// Receive consumer counter (free-running).
    rq_ci: u32,
    rnr_retry: u8,
    /// RNR retries left for the WQE at `sq_ci`, once it has met an RNR NAK.
    rnr_left: Option<u8>,
    /// Injected: fail the next WQE with (syndrome, vendor syndrome).
    fail_next: Option<(u8, u8)>,
    /// Injected: the next message that needs a receive finds none.
    drop_next_recv: bool,
}

/// Spans of memory: (address, length).
type Span = (u64, u64);

/// A fixed-capacity list of spans (no allocation).
#[derive(Clone, Copy, Debug)]
struct Spans {
    v: [Span; MAX_SEGS],
    n: usize,
}

impl Spans {
    const fn new() -> Self {
        Self {
            v: [(0, 0); MAX_SEGS],
            n: 0,
        }
    }
    fn push(&mut self, s: Span) {
        if s.1 != 0 && self.n < MAX_SEGS {
            self.v[self.n] = s;
            self.n += 1;
        }
    }
    fn as_slice(&self) -> &[Span] {
        &self.v[..self.n]
    }
}

/// How a send WQE ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    /// Success; the requester CQE's byte count.
    Done(u32),
    /// The peer had no receive: retry later.
    Rnr,
    /// Failed with (syndrome, vendor syndrome).
    Fail(u8, u8),
}

/// The receive a message will consume.
enum Recv {
    /// Receive counter `ci` is posted.
    Posted(u32),
    /// Nothing posted (or the receive was dropped by injection).
    None,
    /// The doorbell record claims more than a ring.
    Bogus,
}

/// The device's state. Accessed under the device's lock, by callers and the progress thread.
#[derive(Debug)]
pub(crate) struct Engine {
    qps: Vec<DevQp>,
    cqs: Vec<DevCq>,
    mrs: MrTable,
    owned: Vec<DevBuf>,
    now: u64,
    pub(crate) stats: Stats,
    cfg: DeviceConfig,
}

// SAFETY: the engine holds raw pointers to device buffers it owns and to memory whose validity
// for the device's life its creators guaranteed (registered regions, external queues). It may
// run on any thread; it is only ever used under the device's mutex.
unsafe impl Send for Engine {}

fn mr_vendor(f: MrFault, key: u8, bounds: u8, access: u8) -> u8 {
    match f {
        MrFault::Key => key,
        MrFault::Bounds => bounds,
        MrFault::Access => access,
    }
}

/// Copies `len` bytes from the spans `src` to the spans `dst`, in order. The last byte is
/// stored with `Release`, so a program that polls the last byte of a buffer (as `ib_write_lat`
/// does) with an `Acquire` load sees the whole message once it sees that byte.
///
/// # Safety
///
/// Every span is valid for the access (checked against registered regions or inside the
/// device's own rings), and together each side covers at least `len` bytes.
unsafe fn copy_spans(src: &[Span], dst: &[Span], len: u64) {
    let (mut i, mut si) = (0usize, 0u64);
    let (mut j, mut dj) = (0usize, 0u64);
    let mut left = len;
    while left > 0 && i < src.len() && j < dst.len() {
        let n = (src[i].1 - si).min(dst[j].1 - dj).min(left);
        let s = (src[i].0 + si) as usize as *const u8;
        let d = (dst[j].0 + dj) as usize as *mut u8;
        let plain = if n == left { n - 1 } else { n };
        // SAFETY: (caller) `s..s+n` and `d..d+n` are valid; `copy` allows overlap.
        unsafe { core::ptr::copy(s, d, plain as usize) };
        if n == left {
            // SAFETY: as above, for the last byte; `AtomicU8` has the layout of `u8`.
            unsafe {
                let b = s.add(plain as usize).read();
                AtomicU8::from_ptr(d.add(plain as usize)).store(b, Ordering::Release);
            }
        }
        left -= n;
        si += n;
        dj += n;
        if si == src[i].1 {
            i += 1;
            si = 0;
        }
        if dj == dst[j].1 {
            j += 1;
            dj = 0;
        }
    }
}

impl Engine {
    pub(crate) fn new(cfg: DeviceConfig) -> Self {
        Self {
            qps: Vec::with_capacity(cfg.max_qps as usize),
            cqs: Vec::with_capacity(cfg.max_cqs as usize),
            mrs: MrTable::new(cfg.max_mrs),
            owned: Vec::new(),
            now: 0,
            stats: Stats::default(),
            cfg,
        }
    }

    fn alloc(&mut self, len: usize) -> Result<Region, SimError> {
        let b = DevBuf::new(len).ok_or(SimError::OutOfMemory)?;
        let r = b.region();
        self.owned.push(b);
        Ok(r)
    }

    /// Whether the guard bytes around every device buffer are intact.
    pub(crate) fn guards_intact(&self) -> bool {
        self.owned.iter().all(DevBuf::guards_intact)
    }

    pub(crate) fn qp_index(&self, qpn: u32) -> Result<usize, SimError> {
        self.qps
            .iter()
            .position(|q| q.qpn == qpn)
            .ok_or(SimError::NoSuchQp(qpn))
    }

    pub(crate) fn cq_index(&self, cqn: u32) -> Result<usize, SimError> {
        self.cqs
            .iter()
            .position(|c| c.cqn == cqn)
            .ok_or(SimError::NoSuchCq(cqn))
    }

    pub(crate) fn qp_mut(&mut self, qpn: u32) -> Result<&mut DevQp, SimError> {
        let i = self.qp_index(qpn)?;
        Ok(&mut self.qps[i])
    }

    pub(crate) fn cq_mut(&mut self, cqn: u32) -> Result<&mut DevCq, SimError> {
        let i = self.cq_index(cqn)?;
        Ok(&mut self.cqs[i])
    }

    // ----- creation -----

    pub(crate) fn create_cq(&mut self, cfg: CqConfig) -> Result<SimCq, SimError> {
        if cfg.cqe == 0 || cfg.cqe >= 1 << 22 {
            return Err(SimError::InvalidConfig("cqe must be in 1..2^22"));
        }
        if self.cqs.len() >= self.cfg.max_cqs as usize {
            return Err(SimError::TooMany);
        }
        let cnt = (cfg.cqe + 1).next_power_of_two();
        let buf = self.alloc(cnt as usize * 64)?;
        for i in 0..cnt as usize {
            // SAFETY: byte 63 of CQE `i`, inside the new buffer. libmlx5 initialises every CQE
            // as invalid (opcode 15, owner 0).
            unsafe { buf.ptr.add(i * 64 + 63).write(op::INVALID << 4) };
        }
        let dbrec = self.alloc(8)?.ptr.cast::<u32>();
        let layout = CqLayout {
            buf: buf.ptr,
            dbrec,
            cqe_cnt: cnt,
            cqe_size: 64,
            cqn: CQN_BASE + self.cqs.len() as u32,
        };
        // SAFETY: the buffers were just allocated for this CQ and live as long as the engine.
        unsafe { self.add_cq(&layout) }?;
        Ok(SimCq {
            cqn: layout.cqn,
            layout,
        })
    }

    /// Drives a CQ laid out as `layout` (its `cqn` is the CQ's number).
    ///
    /// # Safety
    ///
    /// The ring (`cqe_cnt` initialised 64-byte CQEs) and doorbell record are valid for the
    /// engine's life and accessed only as an mlx5 CQ is (by one poller).
    pub(crate) unsafe fn add_cq(&mut self, layout: &CqLayout) -> Result<(), SimError> {
        if !layout.cqe_cnt.is_power_of_two() || layout.cqe_size != 64 {
            return Err(SimError::InvalidConfig(
                "CQ: power-of-two count of 64-byte CQEs",
            ));
        }
        if self.cqs.len() >= self.cfg.max_cqs as usize {
            return Err(SimError::TooMany);
        }
        if self.cqs.iter().any(|c| c.cqn == layout.cqn) {
            return Err(SimError::InvalidConfig("CQ number in use"));
        }
        let buf = Region {
            ptr: layout.buf,
            len: layout.cqe_cnt as usize * 64,
        };
        self.cqs
            .push(DevCq::new(layout.cqn, buf, layout.dbrec, layout.cqe_cnt));
        Ok(())
    }

    pub(crate) fn create_qp(&mut self, cfg: QpConfig) -> Result<SimQp, SimError> {
        if cfg.max_send_wr == 0 {
            return Err(SimError::InvalidConfig("max_send_wr must be at least 1"));
        }
        if cfg.max_recv_sge > MAX_SEGS as u32 {
            return Err(SimError::InvalidConfig("max_recv_sge above 64"));
        }
        if !cfg.bf_size.is_multiple_of(64) || cfg.bf_size > 4096 {
            return Err(SimError::InvalidConfig(
                "bf_size must be a multiple of 64, ≤ 4096",
            ));
        }
        if cfg.rnr_retry > RNR_RETRY_INFINITE {
            return Err(SimError::InvalidConfig("rnr_retry above 7"));
        }
        let send_cq = self.cq_index(cfg.send_cq)?;
        self.cq_index(cfg.recv_cq)?;
        // The largest WQE: control + remote address + the larger of the gather list and the
        // inline segment (atomics fit one block), in whole basic blocks, as libmlx5 sizes it.
        let segs = 2 + (cfg.max_send_sge as usize).max(inline_ds(cfg.max_inline_data as usize));
        if segs > MAX_DS {
            return Err(SimError::InvalidConfig("largest WQE above 63 segments"));
        }
        let wqe_bytes = (segs * 16).next_multiple_of(64) as u64;
        let max_ds = ((wqe_bytes / 16) as usize).min(MAX_DS);
        let sq_cnt = (u64::from(cfg.max_send_wr) * wqe_bytes / 64).next_power_of_two();
        if sq_cnt > 1 << 15 {
            return Err(SimError::InvalidConfig(
                "send ring above 32768 basic blocks",
            ));
        }
        let sq_cnt = sq_cnt as u32;
        let (rq_cnt, stride) = if cfg.max_recv_wr == 0 {
            (0, 16)
        } else {
            let c = cfg.max_recv_wr.next_power_of_two();
            if c > 1 << 15 {
                return Err(SimError::InvalidConfig("receive ring above 32768 entries"));
            }
            (c, 16 * cfg.max_recv_sge.max(1).next_power_of_two())
        };
        if self.qps.len() >= self.cfg.max_qps as usize {
            return Err(SimError::TooMany);
        }
        let sq = self.alloc(sq_cnt as usize * 64)?;
        let rq = self.alloc((rq_cnt * stride) as usize)?;
        let dbrec = self.alloc(8)?.ptr.cast::<u32>();
        let bf_len = if cfg.bf_size == 0 {
            8
        } else {
            2 * cfg.bf_size as usize
        };
        let bf = self.alloc(bf_len)?;
        let layout = QpLayout {
            qpn: QPN_BASE + self.qps.len() as u32,
            dbrec,
            sq: WqLayout {
                buf: sq.ptr,
                wqe_cnt: sq_cnt,
                stride: 64,
            },
            rq: WqLayout {
                buf: rq.ptr,
                wqe_cnt: rq_cnt,
                stride,
            },
            bf: BfLayout {
                reg: bf.ptr,
                size: cfg.bf_size,
            },
        };
        // SAFETY: the buffers were just allocated for this QP and live as long as the engine.
        unsafe { self.add_qp(&layout, cfg.send_cq, cfg.recv_cq, cfg.rnr_retry) }?;
        Ok(SimQp {
            qpn: layout.qpn,
            layout,
            max_send_sge: cfg.max_send_sge,
            max_inline_data: (max_ds as u32 - 2) * 16 - 4,
            max_recv_sge: stride / 16,
            sig_all: cfg.sig_all,
            send_cqe_cnt: self.cqs[send_cq].cnt(),
        })
    }

    /// Drives a QP laid out as `layout`.
    ///
    /// # Safety
    ///
    /// The rings and the doorbell record are valid for the engine's life and are written only
    /// as an mlx5 driver writes them.
    pub(crate) unsafe fn add_qp(
        &mut self,
        layout: &QpLayout,
        send_cq: u32,
        recv_cq: u32,
        rnr_retry: u8,
    ) -> Result<(), SimError> {
        let sq_cnt = layout.sq.wqe_cnt;
        if !sq_cnt.is_power_of_two() || sq_cnt > 1 << 15 || layout.sq.stride != 64 {
            return Err(SimError::InvalidConfig(
                "SQ: power-of-two count of 64-byte blocks",
            ));
        }
        let rq_cnt = layout.rq.wqe_cnt;
        let stride = layout.rq.stride;
        if rq_cnt != 0
            && (!rq_cnt.is_power_of_two()
                || rq_cnt > 1 << 15
                || stride < 16
                || !stride.is_power_of_two())
        {
            return Err(SimError::InvalidConfig("RQ: power-of-two count and stride"));
        }
        if self.qps.len() >= self.cfg.max_qps as usize {
            return Err(SimError::TooMany);
        }
        if self.qps.iter().any(|q| q.qpn == layout.qpn) || layout.qpn > 0xff_ffff {
            return Err(SimError::InvalidConfig("QP number in use or above 24 bits"));
        }
        let send_cq = self.cq_index(send_cq)?;
        let recv_cq = self.cq_index(recv_cq)?;
        let rq = (rq_cnt != 0).then_some(RqRing {
            region: Region {
                ptr: layout.rq.buf,
                len: (rq_cnt * stride) as usize,
            },
            cnt: rq_cnt,
            stride,
        });
        self.qps.push(DevQp {
            qpn: layout.qpn,
            mem: QpMem {
                sq: SqRing {
                    region: Region {
                        ptr: layout.sq.buf,
                        len: sq_cnt as usize * 64,
                    },
                    blocks: sq_cnt,
                },
                rq,
                dbrec: layout.dbrec,
            },
            send_cq,
            recv_cq,
            peer: None,
            status: QpStatus::Init,
            sq_ci: 0,
            rq_ci: 0,
            rnr_retry,
            rnr_left: None,
            fail_next: None,
            drop_next_recv: false,
        });
        Ok(())
    }

    pub(crate) fn connect(&mut self, a: u32, b: u32) -> Result<(), SimError> {
        let ia = self.qp_index(a)?;
        let ib = self.qp_index(b)?;
        for (i, n) in [(ia, a), (ib, b)] {
            if self.qps[i].peer.is_some() || self.qps[i].status != QpStatus::Init {
                return Err(SimError::AlreadyConnected(n));
            }
        }
        self.qps[ia].peer = Some(ib);
        self.qps[ia].status = QpStatus::Rts;
        self.qps[ib].peer = Some(ia);
        self.qps[ib].status = QpStatus::Rts;
        Ok(())
    }

    pub(crate) fn reg_mr(&mut self, addr: u64, len: u64, access: Access) -> Result<Mr, SimError> {
        self.mrs.register(addr, len, access)
    }

    pub(crate) fn dereg_mr(&mut self, lkey: u32) -> Result<(), SimError> {
        self.mrs.deregister(lkey)
    }

    // ----- stepping -----

    /// One pass over the device; returns the work done (0: nothing to do now).
    pub(crate) fn step(&mut self) -> usize {
        self.now += 1;
        self.stats.steps += 1;
        let now = self.now;
        let mut work = 0;
        for c in self.cqs.iter_mut() {
            work += c.tick(now, &mut self.stats.cqes);
        }
        for q in 0..self.qps.len() {
            work += self.service_rq(q);
            work += self.service_sq(q);
        }
        work
    }

    pub(crate) fn release_cq(&mut self, cqn: u32) -> Result<usize, SimError> {
        let i = self.cq_index(cqn)?;
        Ok(self.cqs[i].release(&mut self.stats.cqes))
    }

    pub(crate) fn cq_overruns(&self) -> u64 {
        self.cqs.iter().map(|c| c.overruns).sum()
    }

    fn push_cqe(&mut self, cq: usize, cqe: cq::RawCqe) {
        let now = self.now;
        let c = &mut self.cqs[cq];
        let before = c.overruns;
        c.push(now, cqe, &mut self.stats.cqes);
        self.stats.cq_overruns += c.overruns - before;
    }

    fn sq_doorbell(&self, q: usize) -> u32 {
        let qp = &self.qps[q];
        // SAFETY: the doorbell record is valid for the engine's life (creation contract).
        let pi = unsafe { load_be32_acquire(qp.mem.dbrec.add(SND_DBR)) } as u16;
        u32::from(pi.wrapping_sub(qp.sq_ci as u16))
    }

    fn rq_doorbell(&self, q: usize) -> u32 {
        let qp = &self.qps[q];
        // SAFETY: as above.
        let head = unsafe { load_be32_acquire(qp.mem.dbrec.add(RCV_DBR)) } as u16;
        u32::from(head.wrapping_sub(qp.rq_ci as u16))
    }

    /// In the error state, flushes every published receive.
    fn service_rq(&mut self, q: usize) -> usize {
        let Some(rq) = self.qps[q].mem.rq else {
            return 0;
        };
        if self.qps[q].status != QpStatus::Error {
            return 0;
        }
        let avail = self.rq_doorbell(q);
        if avail > rq.cnt {
            return 0;
        }
        for _ in 0..avail {
            let qp = &mut self.qps[q];
            let cqe = cq::err(
                qp.qpn,
                op::RESP_ERR,
                0,
                qp.rq_ci as u16,
                FLUSH,
                vendor::FLUSH,
            );
            qp.rq_ci = qp.rq_ci.wrapping_add(1);
            let cqn = qp.recv_cq;
            self.push_cqe(cqn, cqe);
            self.stats.flushed += 1;
        }
        avail as usize
    }

    /// Executes or flushes the next published send WQE.
    fn service_sq(&mut self, q: usize) -> usize {
        if self.qps[q].status == QpStatus::Init {
            return 0;
        }
        let avail = self.sq_doorbell(q);
        if avail == 0 {
            return 0;
        }
        let qp = &self.qps[q];
        let sq = qp.mem.sq;
        if avail > sq.blocks {
            if qp.status == QpStatus::Error {
                return 0;
            }
            self.stats.bad_doorbells += 1;
            let op = sq.opcode_at(qp.sq_ci);
            self.fail(q, LOC_QP_OP, vendor::DOORBELL, op, 0);
            return 1;
        }
        let parsed = sq.parse(qp.sq_ci, avail, qp.qpn);
        if qp.status == QpStatus::Error {
            let (op, blocks) = match parsed {
                Ok(w) => (w.opcode, w.blocks),
                Err(b) => (b.opcode, b.blocks),
            };
            let cqe = cq::err(
                qp.qpn,
                op::REQ_ERR,
                op,
                qp.sq_ci as u16,
                FLUSH,
                vendor::FLUSH,
            );
            let cqn = qp.send_cq;
            self.push_cqe(cqn, cqe);
            self.stats.flushed += 1;
            let qp = &mut self.qps[q];
            qp.sq_ci = qp.sq_ci.wrapping_add(blocks);
            return 1;
        }
        let w = match parsed {
            Ok(w) => w,
            Err(b) => {
                self.fail(q, LOC_QP_OP, b.vendor, b.opcode, b.blocks);
                return 1;
            }
        };
        if let Some((s, v)) = self.qps[q].fail_next.take() {
            self.fail(q, s, v, w.opcode, w.blocks);
            return 1;
        }
        match self.execute(q, &w) {
            Outcome::Done(byte_cnt) => {
                let qp = &mut self.qps[q];
                let cqe = cq::req(qp.qpn, w.opcode, qp.sq_ci as u16, byte_cnt);
                qp.sq_ci = qp.sq_ci.wrapping_add(w.blocks);
                qp.rnr_left = None;
                let cqn = qp.send_cq;
                if w.fm_ce_se & fm_ce_se::CQ_UPDATE != 0 {
                    self.push_cqe(cqn, cqe);
                }
                self.stats.wqes_ok += 1;
                1
            }
            Outcome::Rnr => {
                self.stats.rnr_naks += 1;
                let qp = &mut self.qps[q];
                if qp.rnr_retry == RNR_RETRY_INFINITE {
                    return 0;
                }
                let left = qp.rnr_left.unwrap_or(qp.rnr_retry);
                if left == 0 {
                    self.fail(q, RNR_EXC, vendor::RNR, w.opcode, w.blocks);
                } else {
                    qp.rnr_left = Some(left - 1);
                }
                1
            }
            Outcome::Fail(s, v) => {
                self.fail(q, s, v, w.opcode, w.blocks);
                1
            }
        }
    }

    /// Completes the WQE at the send consumer counter with an error and moves the QP to the
    /// error state.
    fn fail(&mut self, q: usize, syndrome: u8, vendor: u8, wqe_opcode: u8, blocks: u32) {
        let qp = &mut self.qps[q];
        let cqe = cq::err(
            qp.qpn,
            op::REQ_ERR,
            wqe_opcode,
            qp.sq_ci as u16,
            syndrome,
            vendor,
        );
        qp.sq_ci = qp.sq_ci.wrapping_add(blocks);
        qp.status = QpStatus::Error;
        qp.rnr_left = None;
        let cqn = qp.send_cq;
        self.push_cqe(cqn, cqe);
        self.stats.wqes_failed += 1;
    }

    /// Moves QP `q` to the error state (a responder-detected error of class C).
    fn peer_to_error(&mut self, p: usize) {
        self.qps[p].status = QpStatus::Error;
    }

    /// Completes the receive at `p`'s receive counter with an error; the QP enters the error
    /// state.
    fn recv_fail(&mut self, p: usize, syndrome: u8, vendor: u8) {
        let qp = &mut self.qps[p];
        let cqe = cq::err(qp.qpn, op::RESP_ERR, 0, qp.rq_ci as u16, syndrome, vendor);
        qp.rq_ci = qp.rq_ci.wrapping_add(1);
        qp.status = QpStatus::Error;
        let cqn = qp.recv_cq;
        self.push_cqe(cqn, cqe);
    }

    /// The receive the next inbound message at `p` consumes.
    fn next_recv(&mut self, p: usize) -> Recv {
        let Some(rq) = self.qps[p].mem.rq else {
            return Recv::None;
        };
        if core::mem::take(&mut self.qps[p].drop_next_recv) {
            return Recv::None;
        }
        let avail = self.rq_doorbell(p);
        if avail == 0 {
            Recv::None
        } else if avail > rq.cnt {
            self.stats.bad_doorbells += 1;
            Recv::Bogus
        } else {
            Recv::Posted(self.qps[p].rq_ci)
        }
    }

    /// The local spans of a WRITE or SEND payload (`need`: rights on each, none to read) or of
    /// a READ destination.
    fn local_spans(&self, q: usize, w: &Wqe, need: Access) -> Result<(Spans, u64), Outcome> {
        let mut spans = Spans::new();
        match w.payload {
            Payload::Inline { seg, len } => {
                for s in self.qps[q].mem.sq.inline_spans(seg, len) {
                    spans.push(s);
                }
                Ok((spans, u64::from(len)))
            }
            Payload::Sges(n) => {
                let sges = &w.sges[..n];
                let total: u64 = sges.iter().map(|e| e.len).sum();
                if total > MAX_MSG {
                    return Err(Outcome::Fail(LOC_LEN, vendor::MSG_TOO_LONG));
                }
                for e in sges {
                    self.mrs
                        .check_local(e.lkey, e.addr, e.len, need)
                        .map_err(|f| {
                            let v = mr_vendor(
                                f,
                                vendor::LKEY,
                                vendor::LOCAL_BOUNDS,
                                vendor::LOCAL_ACCESS,
                            );
                            Outcome::Fail(LOC_PROT, v)
                        })?;
                    spans.push((e.addr, e.len));
                }
                Ok((spans, total))
            }
        }
    }

    /// Checks the remote span of a WRITE, READ or atomic; on failure the responder enters the
    /// error state (class C).
    fn remote_check(&mut self, p: usize, w: &Wqe, len: u64, need: Access) -> Result<(), Outcome> {
        self.mrs
            .check_remote(w.rkey, w.raddr, len, need)
            .map_err(|f| {
                let v = mr_vendor(
                    f,
                    vendor::RKEY,
                    vendor::REMOTE_BOUNDS,
                    vendor::REMOTE_ACCESS,
                );
                Outcome::Fail(REM_ACCESS, v)
            })
            .inspect_err(|_| self.peer_to_error(p))
    }

    fn execute(&mut self, q: usize, w: &Wqe) -> Outcome {
        match self.try_execute(q, w) {
            Ok(o) | Err(o) => o,
        }
    }

    fn try_execute(&mut self, q: usize, w: &Wqe) -> Result<Outcome, Outcome> {
        let Some(p) = self.qps[q].peer else {
            return Err(Outcome::Fail(RETRY_EXC, vendor::PEER_DOWN));
        };
        if self.qps[p].status != QpStatus::Rts {
            return Err(Outcome::Fail(RETRY_EXC, vendor::PEER_DOWN));
        }
        let solicited = w.fm_ce_se & fm_ce_se::SOLICITED != 0;
        match w.opcode {
            opcode::NOP => Ok(Outcome::Done(0)),
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
                let (src, len) = self.local_spans(q, w, Access::NONE)?;
                // A zero-length RDMA WRITE needs no valid remote key (IBA C9-88).
                if len > 0 {
                    self.remote_check(p, w, len, Access::REMOTE_WRITE)?;
                }
                let imm = w.opcode == opcode::RDMA_WRITE_IMM;
                let rci = if imm {
                    match self.next_recv(p) {
                        Recv::Posted(ci) => Some(ci),
                        Recv::None => return Ok(Outcome::Rnr),
                        Recv::Bogus => {
                            self.recv_fail(p, LOC_QP_OP, vendor::DOORBELL);
                            return Err(Outcome::Fail(REM_OP, vendor::REMOTE_RECV));
                        }
                    }
                } else {
                    None
                };
                // SAFETY: the source spans were checked against registered regions (or lie in
                // the send ring), the destination against the peer's region with remote write.
                unsafe { copy_spans(src.as_slice(), &[(w.raddr, len)], len) };
                self.stats.bytes += len;
                if let Some(ci) = rci {
                    let peer = &mut self.qps[p];
                    peer.rq_ci = ci.wrapping_add(1);
                    let cqe = cq::resp(
                        peer.qpn,
                        op::RESP_WR_IMM,
                        ci as u16,
                        len as u32,
                        w.imm,
                        solicited,
                    );
                    let cqn = peer.recv_cq;
                    self.push_cqe(cqn, cqe);
                    self.stats.recvs += 1;
                }
                Ok(Outcome::Done(0))
            }
            opcode::SEND | opcode::SEND_IMM => {
                let (src, len) = self.local_spans(q, w, Access::NONE)?;
                let ci = match self.next_recv(p) {
                    Recv::Posted(ci) => ci,
                    Recv::None => return Ok(Outcome::Rnr),
                    Recv::Bogus => {
                        self.recv_fail(p, LOC_QP_OP, vendor::DOORBELL);
                        return Err(Outcome::Fail(REM_OP, vendor::REMOTE_RECV));
                    }
                };
                let dst = self.recv_spans(p, ci, len)?;
                // SAFETY: the source spans were checked (or lie in the send ring), the
                // destination spans against the peer's regions with local write.
                unsafe { copy_spans(src.as_slice(), dst.as_slice(), len) };
                self.stats.bytes += len;
                self.stats.recvs += 1;
                let peer = &mut self.qps[p];
                peer.rq_ci = ci.wrapping_add(1);
                let (resp_op, imm) = if w.opcode == opcode::SEND_IMM {
                    (op::RESP_SEND_IMM, w.imm)
                } else {
                    (op::RESP_SEND, [0; 4])
                };
                let cqe = cq::resp(peer.qpn, resp_op, ci as u16, len as u32, imm, solicited);
                let cqn = peer.recv_cq;
                self.push_cqe(cqn, cqe);
                Ok(Outcome::Done(0))
            }
            opcode::RDMA_READ => {
                let (dst, len) = self.local_spans(q, w, Access::LOCAL_WRITE)?;
                if len > 0 {
                    self.remote_check(p, w, len, Access::REMOTE_READ)?;
                }
                // SAFETY: the remote span was checked against the peer's region with remote
                // read, the local spans against regions with local write.
                unsafe { copy_spans(&[(w.raddr, len)], dst.as_slice(), len) };
                self.stats.bytes += len;
                Ok(Outcome::Done(len as u32))
            }
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                let local = w.sges[0];
                self.mrs
                    .check_local(local.lkey, local.addr, 8, Access::LOCAL_WRITE)
                    .map_err(|f| {
                        let v =
                            mr_vendor(f, vendor::LKEY, vendor::LOCAL_BOUNDS, vendor::LOCAL_ACCESS);
                        Outcome::Fail(LOC_PROT, v)
                    })?;
                if !w.raddr.is_multiple_of(8) {
                    self.peer_to_error(p);
                    return Err(Outcome::Fail(REM_INV_REQ, vendor::ATOMIC_ALIGN));
                }
                self.remote_check(p, w, 8, Access::REMOTE_ATOMIC)?;
                // SAFETY: the 8 aligned bytes lie in the peer's region with remote atomic
                // access; `AtomicU64` has the layout of `u64`. The value in memory is
                // big-endian, as ConnectX treats it.
                let target = unsafe { AtomicU64::from_ptr(w.raddr as usize as *mut u64) };
                let orig = if w.opcode == opcode::ATOMIC_CS {
                    match target.compare_exchange(
                        w.compare.to_be(),
                        w.swap_add.to_be(),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(v) | Err(v) => v,
                    }
                } else {
                    match target.fetch_update(Ordering::AcqRel, Ordering::Acquire, |raw| {
                        Some(u64::from_be(raw).wrapping_add(w.swap_add).to_be())
                    }) {
                        Ok(v) | Err(v) => v,
                    }
                };
                let src = [(&orig as *const u64 as u64, 8)];
                // SAFETY: the source is the local `orig`, the destination was checked against
                // a region with local write.
                unsafe { copy_spans(&src, &[(local.addr, 8)], 8) };
                self.stats.bytes += 8;
                Ok(Outcome::Done(8))
            }
            _ => Err(Outcome::Fail(LOC_QP_OP, vendor::OPCODE)),
        }
    }

    /// The spans of receive `ci` at `p` that a message of `len` bytes fills, checked. On a
    /// failure the receive completes with an error at the responder, which enters the error
    /// state, and the requester's failure is returned.
    fn recv_spans(&mut self, p: usize, ci: u32, len: u64) -> Result<Spans, Outcome> {
        let Some(rq) = self.qps[p].mem.rq else {
            return Err(Outcome::Rnr);
        };
        let mut entries = [DataEntry::default(); MAX_SEGS];
        let n = rq.entries(ci, &mut entries);
        let capacity: u64 = entries[..n].iter().map(|e| e.len).sum();
        if capacity < len {
            // The responder reports a local length error on the receive; the requester sees
            // the NAK as "remote invalid request" (as on mlx5 and rxe).
            self.recv_fail(p, LOC_LEN, vendor::RECV_TOO_SHORT);
            return Err(Outcome::Fail(REM_INV_REQ, vendor::RECV_TOO_SHORT));
        }
        let mut spans = Spans::new();
        let mut left = len;
        for e in &entries[..n] {
            if left == 0 {
                break;
            }
            let used = e.len.min(left);
            if let Err(f) = self
                .mrs
                .check_local(e.lkey, e.addr, used, Access::LOCAL_WRITE)
            {
                let v = mr_vendor(
                    f,
                    vendor::RECV_LKEY,
                    vendor::RECV_BOUNDS,
                    vendor::RECV_ACCESS,
                );
                self.recv_fail(p, LOC_PROT, v);
                return Err(Outcome::Fail(REM_OP, vendor::REMOTE_RECV));
            }
            spans.push((e.addr, used));
            left -= used;
        }
        Ok(spans)
    }

    // ----- faults and control -----

    pub(crate) fn set_error(&mut self, qpn: u32) -> Result<(), SimError> {
        self.qp_mut(qpn)?.status = QpStatus::Error;
        Ok(())
    }

    pub(crate) fn fail_next(&mut self, qpn: u32, syndrome: u8, vendor: u8) -> Result<(), SimError> {
        self.qp_mut(qpn)?.fail_next = Some((syndrome, vendor));
        Ok(())
    }

    pub(crate) fn drop_next_recv(&mut self, qpn: u32) -> Result<(), SimError> {
        self.qp_mut(qpn)?.drop_next_recv = true;
        Ok(())
    }
}

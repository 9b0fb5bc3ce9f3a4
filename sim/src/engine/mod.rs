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
//! Requester and responder meet in [`Engine::respond`]: the requester checks its own side
//! (keys, bounds and rights of its gather list or READ destination), the responder does its
//! work on its own memory, receive queue and CQs and answers with an [`Answer`], which the
//! requester turns into its completion. A peer in the same device is called directly; a peer
//! in another process is reached through the [`Wire`]: the same request goes out as a
//! [`Request`] message, the peer's device runs [`Engine::respond`] on it, and its answer comes
//! back as a [`Response`]. Such a QP keeps one request in flight.
//!
//! Before either, the responder must recognise the requester as its peer: the QP its own
//! connection names (`peer` for a QP of this device, `remote` — LID and QPN — for one in
//! another process). A request from anyone else never reaches [`Engine::respond`].

use core::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zverbs_core::shared::SharedMem;
use zverbs_core::sync::atomic::{AtomicU64, Ordering};

use crate::config::{
    Access, CqConfig, DeviceConfig, Mr, QpConfig, QpStatus, RNR_RETRY_INFINITE, SimCq, SimError,
    SimQp, Stats,
};
use crate::cq::{self, DevCq, op};
use crate::mem::{DevBuf, Region, load_be32_acquire};
use crate::mr::{MrFault, MrTable};
use crate::vendor;
use crate::wire::{Message, Request, Response, Status, Wire};
use crate::wqe::{DataEntry, MAX_SEGS, Payload, RqRing, SqRing, Wqe};
use zverbs_mlx5dv::prm::cqe::Syndrome;
use zverbs_mlx5dv::prm::wqe::inline_ds;
use zverbs_mlx5dv::prm::{MAX_DS, RCV_DBR, SND_DBR, fm_ce_se, opcode};
use zverbs_mlx5dv::{BfLayout, CqLayout, QpLayout, WqLayout};

/// The first QP number the device hands out.
pub(crate) const QPN_BASE: u32 = 0x100;
/// The first CQ number the device hands out.
pub(crate) const CQN_BASE: u32 = 0x40;
/// The largest message (2 GiB).
const MAX_MSG: u64 = 1 << 31;
/// The most QPs a device can have: their numbers, from [`QPN_BASE`], are 24 bits.
const MAX_QPS: u32 = (1 << 24) - QPN_BASE;
/// The most CQs a device can have: their numbers, from [`CQN_BASE`], are 24 bits.
const MAX_CQS: u32 = (1 << 24) - CQN_BASE;
/// The most basic blocks of a send ring and entries of a receive ring.
const MAX_RING: u32 = 1 << 15;
/// The largest receive stride: [`MAX_SEGS`] scatter entries of 16 bytes.
const MAX_RQ_STRIDE: u32 = 16 * MAX_SEGS as u32;
/// The most CQEs of a CQ (a ConnectX's `max_cqe` + 1).
const MAX_CQE_CNT: u32 = 1 << 22;
/// Gather entries in the largest WQE, beside its control and remote-address segments.
const MAX_SEND_SGE: u32 = MAX_DS as u32 - 2;
/// Inline bytes in the largest WQE: its segments after control and remote address, less the
/// inline header.
const MAX_INLINE: u32 = (MAX_DS as u32 - 2) * 16 - 4;

const LOC_LEN: u8 = Syndrome::LocalLengthErr.to_raw();
const LOC_QP_OP: u8 = Syndrome::LocalQpOpErr.to_raw();
const LOC_PROT: u8 = Syndrome::LocalProtErr.to_raw();
const FLUSH: u8 = Syndrome::WrFlushErr.to_raw();
const REM_INV_REQ: u8 = Syndrome::RemoteInvalReqErr.to_raw();
const REM_ACCESS: u8 = Syndrome::RemoteAccessErr.to_raw();
const REM_OP: u8 = Syndrome::RemoteOpErr.to_raw();
const RETRY_EXC: u8 = Syndrome::TransportRetryExcErr.to_raw();
const RNR_EXC: u8 = Syndrome::RnrRetryExcErr.to_raw();
/// How long a request to another process waits after an RNR NAK before it is sent again.
const RNR_BACKOFF: Duration = Duration::from_micros(50);

/// Where a QP's requests go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// A QP of the same device, by QPN.
    Local(u32),
    /// A QP of the device instance at `lid` in another process, reached through the [`Wire`].
    Remote {
        /// The LID of the peer's device instance.
        lid: u16,
        /// The peer QP's number.
        qpn: u32,
    },
}

/// A request in flight to another process.
#[derive(Clone, Copy, Debug)]
struct Pending {
    seq: u32,
    wqe: Wqe,
}

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
    /// The user index CQEs carry in `srqn_uidx` (the QPN unless the driver chose one).
    uidx: u32,
    send_cq: usize,
    recv_cq: usize,
    /// The QP of this device that this one names as its peer: where its requests go, and the
    /// only QP whose requests it serves.
    peer: Option<usize>,
    /// A peer in another process, as (LID, QPN) (then `peer` is `None`): where its requests
    /// go, and the only source whose requests it serves and whose responses it takes.
    remote: Option<(u16, u32)>,
    /// The request in flight to the remote peer.
    pending: Option<Pending>,
    /// After an RNR NAK from a remote peer: send again at this time.
    resend_at: Option<Instant>,
    /// Destroyed: skipped, and never found by number again.
    dead: bool,
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

/// Converts an atomic operand to or from its order in memory.
type ByteOrder = fn(u64) -> u64;

impl DevQp {
    /// Sets the RNR retry count for the requests from now on.
    pub(crate) fn set_rnr_retry(&mut self, rnr_retry: u8) {
        self.rnr_retry = rnr_retry;
    }
}

/// `len` bytes at `addr` that the device moves, and the memory they lie in, `(base, length)`:
/// the registered region they were checked against, or the span itself for the device's own
/// rings and a message's bytes. The device accesses them through a [`SharedMem`] of that
/// memory, which reads and writes the region's whole 8-byte words atomically (the rule of
/// `zverbs_core::shared`): a program that reads or writes a registered buffer through a view
/// of the same region (as `zverbs::MrBuf` does) while the device works never races with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    addr: u64,
    len: u64,
    mem: (u64, u64),
}

impl Span {
    const EMPTY: Self = Self::own(0, 0);

    /// Bytes of memory that is not registered: the device's rings, a local value, a message.
    const fn own(addr: u64, len: u64) -> Self {
        Self {
            addr,
            len,
            mem: (addr, len),
        }
    }

    /// Bytes of the registered region `mr` (checked to lie in it).
    const fn of(mr: &Mr, addr: u64, len: u64) -> Self {
        Self {
            addr,
            len,
            mem: (mr.addr, mr.len),
        }
    }

    /// The memory the span lies in, and the span's offset in it (`None` for memory at address
    /// 0, which no span has).
    ///
    /// # Safety
    ///
    /// The memory is valid for reads, and for writes if the view is written, while the view is
    /// used (the region's registration contract, or the device's own memory).
    unsafe fn view(&self) -> Option<(SharedMem<'static>, usize)> {
        let base = NonNull::new(core::ptr::with_exposed_provenance_mut::<u8>(
            self.mem.0 as usize,
        ))?;
        // SAFETY: (caller) valid; the device accesses registered memory only through views of
        // its region, the program through its own views (`Device::reg_mr`'s contract).
        let mem = unsafe { SharedMem::new(base, self.mem.1 as usize) };
        Some((mem, (self.addr - self.mem.0) as usize))
    }
}

/// A fixed-capacity list of spans (no allocation).
#[derive(Clone, Copy, Debug)]
struct Spans {
    v: [Span; MAX_SEGS],
    n: usize,
}

impl Spans {
    const fn new() -> Self {
        Self {
            v: [Span::EMPTY; MAX_SEGS],
            n: 0,
        }
    }
    fn push(&mut self, s: Span) {
        if s.len != 0 && self.n < MAX_SEGS {
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

/// What a requester asks of a responder, apart from the payload bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ask {
    opcode: u8,
    solicited: bool,
    raddr: u64,
    rkey: u32,
    imm: [u8; 4],
    len: u64,
    swap_add: u64,
    compare: u64,
}

impl Ask {
    fn of(w: &Wqe, len: u64) -> Self {
        Self {
            opcode: w.opcode,
            solicited: w.fm_ce_se & fm_ce_se::SOLICITED != 0,
            raddr: w.raddr,
            rkey: w.rkey,
            imm: w.imm,
            len,
            swap_add: w.swap_add,
            compare: w.compare,
        }
    }
}

/// A responder's answer to an [`Ask`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Done (WRITE, SEND).
    Ack,
    /// READ: the checked span of the responder's memory to read.
    Read(Span),
    /// Atomic: the original 8 bytes as they were in memory.
    Atomic(u64),
    /// No receive posted.
    Rnr,
    /// Refused: (syndrome, vendor syndrome) for the requester.
    Nak(u8, u8),
}

/// The device's state. Accessed under the device's lock, by callers and the progress thread.
pub(crate) struct Engine {
    qps: Vec<DevQp>,
    cqs: Vec<DevCq>,
    mrs: MrTable,
    owned: Vec<DevBuf>,
    now: u64,
    pub(crate) stats: Stats,
    cfg: DeviceConfig,
    /// The transport to device instances in other processes, and this instance's LID.
    wire: Option<(Arc<dyn Wire>, u16)>,
    /// Tag of the next request sent through the wire.
    next_seq: u32,
    /// Atomics treat memory as host-endian instead of big-endian.
    pub(crate) atomic_host_endian: bool,
}

impl core::fmt::Debug for Engine {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Engine")
            .field("qps", &self.qps.len())
            .field("cqs", &self.cqs.len())
            .field("now", &self.now)
            .field("stats", &self.stats)
            .field("lid", &self.wire.as_ref().map(|w| w.1))
            .finish_non_exhaustive()
    }
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

/// Copies `len` bytes from the spans `src` to the spans `dst`, in order, as `memmove` would
/// where a source and a destination overlap, with atomic accesses only (see [`Span`]). The
/// last byte is stored last, with `Release`, so a program that polls the last byte of a
/// buffer (as `ib_write_lat` does) with an `Acquire` load sees the whole message once it sees
/// that byte.
///
/// # Safety
///
/// Every span lies in its memory, which is valid for the access (checked against registered
/// regions, or the device's own rings and buffers), and together each side covers at least
/// `len` bytes.
unsafe fn copy_spans(src: &[Span], dst: &[Span], len: u64) {
    let (mut i, mut si) = (0usize, 0u64);
    let (mut j, mut dj) = (0usize, 0u64);
    let mut left = len;
    while left > 0 && i < src.len() && j < dst.len() {
        let n = (src[i].len - si).min(dst[j].len - dj).min(left);
        // SAFETY: (caller) both memories are valid for the access.
        let views = unsafe { (src[i].view(), dst[j].view()) };
        if let (Some((s, so)), Some((d, dof))) = views {
            let (so, dof, n) = (so + si as usize, dof + dj as usize, n as usize);
            let ok = if n as u64 == left {
                // The last byte, read before the rest can overwrite it, stored after it.
                let plain = n - 1;
                s.load_u8(so + plain).is_ok_and(|b| {
                    d.copy_from(dof, &s, so, plain).is_ok()
                        && d.store_u8_release(dof + plain, b).is_ok()
                })
            } else {
                d.copy_from(dof, &s, so, n).is_ok()
            };
            debug_assert!(ok, "a span outside its memory");
        }
        left -= n;
        si += n;
        dj += n;
        if si == src[i].len {
            i += 1;
            si = 0;
        }
        if dj == dst[j].len {
            j += 1;
            dj = 0;
        }
    }
}

impl Engine {
    /// An engine with tables for `cfg`, or why `cfg` cannot be served.
    pub(crate) fn new(cfg: DeviceConfig) -> Result<Self, SimError> {
        if cfg.max_qps > MAX_QPS {
            return Err(SimError::InvalidConfig(
                "max_qps above 2^24 - 256 (QP numbers are 24 bits, from 0x100)",
            ));
        }
        if cfg.max_cqs > MAX_CQS {
            return Err(SimError::InvalidConfig(
                "max_cqs above 2^24 - 64 (CQ numbers are 24 bits, from 0x40)",
            ));
        }
        let mrs = MrTable::new(cfg.max_mrs)?;
        let (mut qps, mut cqs) = (Vec::new(), Vec::new());
        qps.try_reserve_exact(cfg.max_qps as usize)
            .map_err(|_| SimError::OutOfMemory)?;
        cqs.try_reserve_exact(cfg.max_cqs as usize)
            .map_err(|_| SimError::OutOfMemory)?;
        Ok(Self {
            qps,
            cqs,
            mrs,
            owned: Vec::new(),
            now: 0,
            stats: Stats::default(),
            cfg,
            wire: None,
            next_seq: 0,
            atomic_host_endian: true,
        })
    }

    pub(crate) fn set_wire(&mut self, wire: Arc<dyn Wire>, lid: u16) {
        self.wire = Some((wire, lid));
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
            .position(|q| q.qpn == qpn && !q.dead)
            .ok_or(SimError::NoSuchQp(qpn))
    }

    pub(crate) fn cq_index(&self, cqn: u32) -> Result<usize, SimError> {
        self.cqs
            .iter()
            .position(|c| c.cqn == cqn && !c.dead)
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

    /// The table entry a new CQ takes: the first destroyed one, else a new one, else none.
    fn free_cq_slot(&self) -> Result<usize, SimError> {
        match self.cqs.iter().position(|c| c.dead) {
            Some(i) => Ok(i),
            None if self.cqs.len() < self.cfg.max_cqs as usize => Ok(self.cqs.len()),
            None => Err(SimError::TooMany),
        }
    }

    /// The table entry a new QP takes: the first destroyed one, else a new one, else none.
    fn free_qp_slot(&self) -> Result<usize, SimError> {
        match self.qps.iter().position(|q| q.dead) {
            Some(i) => Ok(i),
            None if self.qps.len() < self.cfg.max_qps as usize => Ok(self.qps.len()),
            None => Err(SimError::TooMany),
        }
    }

    pub(crate) fn create_cq(&mut self, cfg: CqConfig) -> Result<SimCq, SimError> {
        if cfg.cqe == 0 || cfg.cqe >= MAX_CQE_CNT {
            return Err(SimError::InvalidConfig("cqe must be in 1..2^22"));
        }
        let slot = self.free_cq_slot()?;
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
            cqn: CQN_BASE + slot as u32,
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
        if layout.cqe_cnt > MAX_CQE_CNT {
            return Err(SimError::InvalidConfig("CQ above 2^22 CQEs"));
        }
        let slot = self.free_cq_slot()?;
        if self.cqs.iter().any(|c| c.cqn == layout.cqn && !c.dead) {
            return Err(SimError::InvalidConfig("CQ number in use"));
        }
        let buf = Region {
            ptr: layout.buf,
            len: layout.cqe_cnt as usize * 64,
        };
        let cq = DevCq::new(layout.cqn, buf, layout.dbrec, layout.cqe_cnt);
        if slot == self.cqs.len() {
            self.cqs.push(cq);
        } else {
            // A destroyed CQ's entry: no live QP refers to it (destruction was refused while
            // one did).
            self.cqs[slot] = cq;
        }
        Ok(())
    }

    pub(crate) fn create_qp(&mut self, cfg: QpConfig) -> Result<SimQp, SimError> {
        // Every caller-supplied size is bounded first, so the arithmetic below cannot
        // overflow.
        if cfg.max_send_wr == 0 {
            return Err(SimError::InvalidConfig("max_send_wr must be at least 1"));
        }
        if cfg.max_send_wr > MAX_RING {
            return Err(SimError::InvalidConfig(
                "max_send_wr above 32768 (the send ring's limit)",
            ));
        }
        if cfg.max_send_sge > MAX_SEND_SGE {
            return Err(SimError::InvalidConfig(
                "max_send_sge above 61 (a WQE has at most 63 segments)",
            ));
        }
        if cfg.max_inline_data > MAX_INLINE {
            return Err(SimError::InvalidConfig(
                "max_inline_data above 972 bytes (a WQE has at most 63 segments)",
            ));
        }
        if cfg.max_recv_wr > MAX_RING {
            return Err(SimError::InvalidConfig(
                "max_recv_wr above 32768 (the receive ring's limit)",
            ));
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
        // inline segment (atomics fit one block), in whole basic blocks, as libmlx5 sizes it:
        // at most 63 segments, by the bounds above.
        let segs = 2 + (cfg.max_send_sge as usize).max(inline_ds(cfg.max_inline_data as usize));
        debug_assert!(segs <= MAX_DS);
        let wqe_bytes = (segs * 16).next_multiple_of(64) as u64;
        let max_ds = ((wqe_bytes / 16) as usize).min(MAX_DS);
        // At most 2^15 WQEs of 16 blocks: 2^19 blocks before the check.
        let sq_cnt = (u64::from(cfg.max_send_wr) * wqe_bytes / 64).next_power_of_two();
        if sq_cnt > u64::from(MAX_RING) {
            return Err(SimError::InvalidConfig(
                "send ring above 32768 basic blocks",
            ));
        }
        let sq_cnt = sq_cnt as u32;
        let (rq_cnt, stride) = if cfg.max_recv_wr == 0 {
            (0, 16)
        } else {
            (
                cfg.max_recv_wr.next_power_of_two(),
                16 * cfg.max_recv_sge.max(1).next_power_of_two(),
            )
        };
        let slot = self.free_qp_slot()?;
        let sq = self.alloc(sq_cnt as usize * 64)?;
        let rq = self.alloc(rq_cnt as usize * stride as usize)?;
        let dbrec = self.alloc(8)?.ptr.cast::<u32>();
        let bf_len = if cfg.bf_size == 0 {
            8
        } else {
            2 * cfg.bf_size as usize
        };
        let bf = self.alloc(bf_len)?;
        let layout = QpLayout {
            qpn: QPN_BASE + slot as u32,
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
        if !sq_cnt.is_power_of_two() || sq_cnt > MAX_RING || layout.sq.stride != 64 {
            return Err(SimError::InvalidConfig(
                "SQ: power-of-two count, at most 32768, of 64-byte blocks",
            ));
        }
        let rq_cnt = layout.rq.wqe_cnt;
        let stride = layout.rq.stride;
        if rq_cnt != 0 && (!rq_cnt.is_power_of_two() || rq_cnt > MAX_RING) {
            return Err(SimError::InvalidConfig(
                "RQ: power-of-two count, at most 32768",
            ));
        }
        if rq_cnt != 0 && (!stride.is_power_of_two() || !(16..=MAX_RQ_STRIDE).contains(&stride)) {
            return Err(SimError::InvalidConfig(
                "RQ: power-of-two stride of 16 to 1024 bytes (64 scatter entries)",
            ));
        }
        let slot = self.free_qp_slot()?;
        if self.qps.iter().any(|q| q.qpn == layout.qpn && !q.dead) || layout.qpn > 0xff_ffff {
            return Err(SimError::InvalidConfig("QP number in use or above 24 bits"));
        }
        let send_cq = self.cq_index(send_cq)?;
        let recv_cq = self.cq_index(recv_cq)?;
        let rq = (rq_cnt != 0).then_some(RqRing {
            region: Region {
                ptr: layout.rq.buf,
                len: rq_cnt as usize * stride as usize,
            },
            cnt: rq_cnt,
            stride,
        });
        let qp = DevQp {
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
            uidx: layout.qpn,
            send_cq,
            recv_cq,
            peer: None,
            remote: None,
            pending: None,
            resend_at: None,
            dead: false,
            status: QpStatus::Init,
            sq_ci: 0,
            rq_ci: 0,
            rnr_retry,
            rnr_left: None,
            fail_next: None,
            drop_next_recv: false,
        };
        if slot == self.qps.len() {
            self.qps.push(qp);
        } else {
            // A destroyed QP's entry: nothing points at it any more (destruction cut its
            // peers' links).
            self.qps[slot] = qp;
        }
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

    /// Points QP `qpn`'s requests at `peer` (one-sided, as `ibv_modify_qp` to RTR does) and
    /// moves it to RTS. Traffic flows once the peer names `qpn` in turn: a responder accepts
    /// requests only from the QP its own connection names. A local peer that already names
    /// another QP is refused here, since it would never accept a request from `qpn`.
    pub(crate) fn connect_to(&mut self, qpn: u32, peer: Peer) -> Result<(), SimError> {
        let q = self.qp_index(qpn)?;
        let (local, remote) = match peer {
            Peer::Local(p) => (Some(self.qp_index(p)?), None),
            Peer::Remote { lid, qpn } => (None, Some((lid, qpn))),
        };
        if self.qps[q].status != QpStatus::Init {
            return Err(SimError::AlreadyConnected(qpn));
        }
        if let Some(p) = local {
            let theirs = &self.qps[p];
            if theirs.remote.is_some() || theirs.peer.is_some_and(|x| x != q) {
                return Err(SimError::PeerTaken {
                    qpn,
                    peer: theirs.qpn,
                });
            }
        }
        let qp = &mut self.qps[q];
        qp.peer = local;
        qp.remote = remote;
        qp.status = QpStatus::Rts;
        Ok(())
    }

    pub(crate) fn set_user_index(&mut self, qpn: u32, uidx: u32) -> Result<(), SimError> {
        self.qp_mut(qpn)?.uidx = uidx;
        Ok(())
    }

    /// Forgets QP `qpn`: the device never touches its memory again. Local peers pointing at it
    /// see a QP in the error state.
    pub(crate) fn destroy_qp(&mut self, qpn: u32) -> Result<(), SimError> {
        let q = self.qp_index(qpn)?;
        let qp = &mut self.qps[q];
        qp.dead = true;
        qp.status = QpStatus::Error;
        qp.pending = None;
        qp.peer = None;
        // Its table entry may be reused by a new QP: local peers pointing at it now point
        // nowhere (their requests fail with "transport retry exceeded", as on a wire whose
        // far end has gone).
        for other in &mut self.qps {
            if other.peer == Some(q) {
                other.peer = None;
            }
        }
        Ok(())
    }

    /// Forgets CQ `cqn`; refused while a live QP uses it.
    pub(crate) fn destroy_cq(&mut self, cqn: u32) -> Result<(), SimError> {
        let c = self.cq_index(cqn)?;
        if self
            .qps
            .iter()
            .any(|q| !q.dead && (q.send_cq == c || q.recv_cq == c))
        {
            return Err(SimError::InvalidConfig("CQ in use by a QP"));
        }
        self.cqs[c].dead = true;
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
        for c in self.cqs.iter_mut().filter(|c| !c.dead) {
            work += c.tick(now, &mut self.stats.cqes);
        }
        for q in 0..self.qps.len() {
            if self.qps[q].dead {
                continue;
            }
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
        if c.dead {
            return;
        }
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
                qp.uidx,
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
        if self.qps[q].status == QpStatus::Init || self.qps[q].pending.is_some() {
            return 0;
        }
        if let Some(at) = self.qps[q].resend_at {
            if self.qps[q].status != QpStatus::Error && Instant::now() < at {
                return 0;
            }
            self.qps[q].resend_at = None;
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
                qp.uidx,
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
        if let Some((lid, qpn)) = self.qps[q].remote {
            if w.opcode == opcode::NOP {
                return self.finish(q, &w, Outcome::Done(0));
            }
            return self.send_remote(q, &w, lid, qpn);
        }
        let outcome = self.execute(q, &w);
        self.finish(q, &w, outcome)
    }

    /// Completes the WQE at the send consumer counter with `outcome`; returns the work done.
    fn finish(&mut self, q: usize, w: &Wqe, outcome: Outcome) -> usize {
        match outcome {
            Outcome::Done(byte_cnt) => {
                let qp = &mut self.qps[q];
                let cqe = cq::req(qp.uidx, qp.qpn, w.opcode, qp.sq_ci as u16, byte_cnt);
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
                if qp.remote.is_some() {
                    qp.resend_at = Some(Instant::now() + RNR_BACKOFF);
                }
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
            qp.uidx,
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
        let cqe = cq::err(
            qp.uidx,
            qp.qpn,
            op::RESP_ERR,
            0,
            qp.rq_ci as u16,
            syndrome,
            vendor,
        );
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
                for (addr, n) in self.qps[q].mem.sq.inline_spans(seg, len) {
                    spans.push(Span::own(addr, n));
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
                    let mr = self
                        .mrs
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
                    spans.push(Span::of(&mr, e.addr, e.len));
                }
                Ok((spans, total))
            }
        }
    }

    /// The requester's own checks of `w`: the spans it reads (WRITE, SEND) or writes (READ,
    /// the atomic's result), and the message length.
    fn requester_spans(&self, q: usize, w: &Wqe) -> Result<(Spans, u64), Outcome> {
        match w.opcode {
            opcode::RDMA_READ => self.local_spans(q, w, Access::LOCAL_WRITE),
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                let local = w.sges[0];
                let mr = self
                    .mrs
                    .check_local(local.lkey, local.addr, 8, Access::LOCAL_WRITE)
                    .map_err(|f| {
                        let v =
                            mr_vendor(f, vendor::LKEY, vendor::LOCAL_BOUNDS, vendor::LOCAL_ACCESS);
                        Outcome::Fail(LOC_PROT, v)
                    })?;
                let mut s = Spans::new();
                s.push(Span::of(&mr, local.addr, 8));
                Ok((s, 8))
            }
            _ => self.local_spans(q, w, Access::NONE),
        }
    }

    /// Turns a responder's answer into the requester's outcome, placing READ data and atomic
    /// results (`data`: the bytes of a remote answer) into the local spans.
    ///
    /// # Safety
    ///
    /// `spans` were checked by [`Engine::requester_spans`] for this WQE; a `Read` span lies in
    /// memory the responder checked for remote read.
    unsafe fn conclude(&mut self, answer: Answer, spans: &Spans, len: u64) -> Outcome {
        match answer {
            Answer::Ack => Outcome::Done(0),
            Answer::Read(src) => {
                // SAFETY: (caller) the source was checked by the responder, the destination
                // spans by the requester (local write).
                unsafe { copy_spans(&[src], spans.as_slice(), len) };
                self.stats.bytes += len;
                Outcome::Done(len as u32)
            }
            Answer::Atomic(mut orig) => {
                // A writable place: the copy reads its sources through atomic words, which
                // need memory they could write.
                let src = [Span::own(
                    core::ptr::from_mut(&mut orig).expose_provenance() as u64,
                    8,
                )];
                // SAFETY: the source is the local `orig`, the destination was checked against
                // a region with local write.
                unsafe { copy_spans(&src, spans.as_slice(), 8) };
                self.stats.bytes += 8;
                Outcome::Done(8)
            }
            Answer::Rnr => Outcome::Rnr,
            Answer::Nak(s, v) => Outcome::Fail(s, v),
        }
    }

    /// Executes `w` against a peer in this device.
    fn execute(&mut self, q: usize, w: &Wqe) -> Outcome {
        let Some(p) = self.qps[q].peer else {
            return Outcome::Fail(RETRY_EXC, vendor::PEER_DOWN);
        };
        let responder = &self.qps[p];
        if responder.status == QpStatus::Init {
            return Outcome::Fail(RETRY_EXC, vendor::PEER_DOWN);
        }
        if responder.peer != Some(q) {
            // The responder's connection names another QP: it drops the request.
            self.stats.not_peer += 1;
            return Outcome::Fail(RETRY_EXC, vendor::NOT_PEER);
        }
        if responder.status != QpStatus::Rts {
            return Outcome::Fail(RETRY_EXC, vendor::PEER_DOWN);
        }
        if w.opcode == opcode::NOP {
            return Outcome::Done(0);
        }
        let (spans, len) = match self.requester_spans(q, w) {
            Ok(x) => x,
            Err(o) => return o,
        };
        let src = if matches!(
            w.opcode,
            opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA
        ) {
            Spans::new()
        } else {
            spans
        };
        // SAFETY: the payload spans were checked against registered regions (or lie in the
        // send ring).
        let answer = unsafe { self.respond(p, &Ask::of(w, len), src.as_slice()) };
        // SAFETY: `spans` come from `requester_spans`; a READ span was checked by `respond`.
        unsafe { self.conclude(answer, &spans, len) }
    }

    /// Sends `w` to the peer QP `qpn` in the device instance at `lid`.
    fn send_remote(&mut self, q: usize, w: &Wqe, lid: u16, qpn: u32) -> usize {
        let (spans, len) = match self.requester_spans(q, w) {
            Ok(x) => x,
            Err(o) => return self.finish(q, w, o),
        };
        let Some((wire, my_lid)) = self.wire.clone() else {
            return self.finish(q, w, Outcome::Fail(RETRY_EXC, vendor::PEER_DOWN));
        };
        let mut payload = Vec::new();
        if matches!(
            w.opcode,
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::SEND | opcode::SEND_IMM
        ) {
            payload.resize(len as usize, 0);
            // SAFETY: the spans were checked (or lie in the send ring); the destination is the
            // new buffer of `len` bytes.
            let dst = [Span::own(payload.as_mut_ptr() as u64, len)];
            // SAFETY: as above.
            unsafe { copy_spans(spans.as_slice(), &dst, len) };
        }
        let ask = Ask::of(w, len);
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let qp = &mut self.qps[q];
        qp.pending = Some(Pending { seq, wqe: *w });
        let req = Request {
            src_lid: my_lid,
            src_qpn: qp.qpn,
            dst_qpn: qpn,
            seq,
            opcode: ask.opcode,
            solicited: ask.solicited,
            raddr: ask.raddr,
            rkey: ask.rkey,
            imm: ask.imm,
            len: ask.len,
            swap_add: ask.swap_add,
            compare: ask.compare,
            payload,
        };
        wire.send(lid, Message::Request(req).encode());
        1
    }

    /// Handles a message from another device instance.
    pub(crate) fn deliver(&mut self, msg: &[u8]) {
        match Message::decode(msg) {
            Some(Message::Request(r)) => self.serve(&r),
            Some(Message::Response(r)) => self.complete_remote(&r),
            None => self.stats.bad_messages += 1,
        }
    }

    /// The responder's side of a request from another process; the answer goes back through
    /// the wire.
    fn serve(&mut self, r: &Request) {
        let ask = Ask {
            opcode: r.opcode,
            solicited: r.solicited,
            raddr: r.raddr,
            rkey: r.rkey,
            imm: r.imm,
            len: r.len,
            swap_add: r.swap_add,
            compare: r.compare,
        };
        let writes = matches!(
            r.opcode,
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::SEND | opcode::SEND_IMM
        );
        let answer = match self.qp_index(r.dst_qpn) {
            Err(_) => Answer::Nak(RETRY_EXC, vendor::PEER_DOWN),
            Ok(p) if self.qps[p].status == QpStatus::Init => {
                Answer::Nak(RETRY_EXC, vendor::PEER_DOWN)
            }
            Ok(p) if self.qps[p].remote != Some((r.src_lid, r.src_qpn)) => {
                // Not the responder's peer (another QP, at another LID, or a guessed QPN):
                // the request never reaches the QP. Hardware drops it and the requester's
                // retries run out; the answer says so at once.
                self.stats.not_peer += 1;
                Answer::Nak(RETRY_EXC, vendor::NOT_PEER)
            }
            Ok(_) if writes && r.payload.len() as u64 != r.len => {
                Answer::Nak(REM_INV_REQ, vendor::LAYOUT)
            }
            Ok(p) => {
                let src = [Span::own(r.payload.as_ptr() as u64, r.payload.len() as u64)];
                // SAFETY: the payload is the message's own bytes.
                unsafe { self.respond(p, &ask, if writes { &src } else { &[] }) }
            }
        };
        let (status, data) = match answer {
            Answer::Ack => (Status::Ack, Vec::new()),
            Answer::Read(span) => {
                let mut v = std::vec![0u8; span.len as usize];
                let dst = [Span::own(v.as_mut_ptr() as u64, span.len)];
                // SAFETY: `respond` checked the span for remote read; the destination is the
                // new buffer.
                unsafe { copy_spans(&[span], &dst, span.len) };
                self.stats.bytes += span.len;
                (Status::Ack, v)
            }
            Answer::Atomic(orig) => (Status::Ack, orig.to_ne_bytes().to_vec()),
            Answer::Rnr => (Status::Rnr, Vec::new()),
            Answer::Nak(s, v) => (Status::Nak(s, v), Vec::new()),
        };
        if let Some((wire, my_lid)) = &self.wire {
            let resp = Response {
                src_lid: *my_lid,
                src_qpn: r.dst_qpn,
                dst_qpn: r.src_qpn,
                seq: r.seq,
                status,
                data,
            };
            wire.send(r.src_lid, Message::Response(resp).encode());
        }
    }

    /// The requester's side of an answer from another process.
    fn complete_remote(&mut self, r: &Response) {
        let Ok(q) = self.qp_index(r.dst_qpn) else {
            return;
        };
        if self.qps[q].remote != Some((r.src_lid, r.src_qpn)) {
            self.stats.not_peer += 1;
            return;
        }
        match self.qps[q].pending {
            Some(p) if p.seq == r.seq => {}
            _ => {
                self.stats.bad_messages += 1;
                return;
            }
        }
        let Some(Pending { wqe: w, .. }) = self.qps[q].pending.take() else {
            return;
        };
        if self.qps[q].status == QpStatus::Error {
            // Moved to the error state meanwhile: the WQE is flushed by the next step.
            return;
        }
        let outcome = match self.requester_spans(q, &w) {
            Err(o) => o,
            Ok((spans, len)) => {
                let answer = match r.status {
                    Status::Ack => match w.opcode {
                        opcode::RDMA_READ if r.data.len() as u64 == len => {
                            Answer::Read(Span::own(r.data.as_ptr() as u64, len))
                        }
                        opcode::ATOMIC_CS | opcode::ATOMIC_FA => match r.data.as_slice().try_into()
                        {
                            Ok(b) => Answer::Atomic(u64::from_ne_bytes(b)),
                            Err(_) => Answer::Nak(LOC_QP_OP, vendor::LAYOUT),
                        },
                        opcode::RDMA_READ => Answer::Nak(LOC_QP_OP, vendor::LAYOUT),
                        _ => Answer::Ack,
                    },
                    Status::Rnr => Answer::Rnr,
                    Status::Nak(s, v) => Answer::Nak(s, v),
                };
                // SAFETY: `spans` come from `requester_spans`; READ data is the response's own
                // bytes, of the length asked.
                unsafe { self.conclude(answer, &spans, len) }
            }
        };
        self.finish(q, &w, outcome);
    }

    /// The responder's work for `ask` at QP `p`: checks, data placement, the receive it
    /// consumes and its CQE; on a class C error the responder enters the error state.
    ///
    /// # Safety
    ///
    /// `src` (the payload of a WRITE or SEND, covering `ask.len` bytes) is valid for reads.
    unsafe fn respond(&mut self, p: usize, ask: &Ask, src: &[Span]) -> Answer {
        match self.try_respond(p, ask, src) {
            Ok(a) | Err(a) => a,
        }
    }

    fn try_respond(&mut self, p: usize, ask: &Ask, src: &[Span]) -> Result<Answer, Answer> {
        if self.qps[p].status != QpStatus::Rts {
            return Err(Answer::Nak(RETRY_EXC, vendor::PEER_DOWN));
        }
        let len = ask.len;
        if len > MAX_MSG {
            // Only a request from another process can claim this (a local requester checks
            // its own length); its READ would be answered with more than a message can hold.
            self.peer_to_error(p);
            return Err(Answer::Nak(REM_INV_REQ, vendor::MSG_TOO_LONG));
        }
        match ask.opcode {
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => {
                // A zero-length RDMA WRITE needs no valid remote key (IBA C9-88).
                let dst = if len > 0 {
                    let mr = self.remote_check(p, ask, len, Access::REMOTE_WRITE)?;
                    Span::of(&mr, ask.raddr, len)
                } else {
                    Span::own(ask.raddr, 0)
                };
                let imm = ask.opcode == opcode::RDMA_WRITE_IMM;
                let rci = if imm {
                    match self.next_recv(p) {
                        Recv::Posted(ci) => Some(ci),
                        Recv::None => return Ok(Answer::Rnr),
                        Recv::Bogus => {
                            self.recv_fail(p, LOC_QP_OP, vendor::DOORBELL);
                            return Err(Answer::Nak(REM_OP, vendor::REMOTE_RECV));
                        }
                    }
                } else {
                    None
                };
                // SAFETY: the source spans are valid (caller), the destination was checked
                // against the responder's region with remote write.
                unsafe { copy_spans(src, &[dst], len) };
                self.stats.bytes += len;
                if let Some(ci) = rci {
                    let peer = &mut self.qps[p];
                    peer.rq_ci = ci.wrapping_add(1);
                    let cqe = cq::resp(
                        peer.uidx,
                        peer.qpn,
                        op::RESP_WR_IMM,
                        ci as u16,
                        len as u32,
                        ask.imm,
                        ask.solicited,
                    );
                    let cqn = peer.recv_cq;
                    self.push_cqe(cqn, cqe);
                    self.stats.recvs += 1;
                }
                Ok(Answer::Ack)
            }
            opcode::SEND | opcode::SEND_IMM => {
                let ci = match self.next_recv(p) {
                    Recv::Posted(ci) => ci,
                    Recv::None => return Ok(Answer::Rnr),
                    Recv::Bogus => {
                        self.recv_fail(p, LOC_QP_OP, vendor::DOORBELL);
                        return Err(Answer::Nak(REM_OP, vendor::REMOTE_RECV));
                    }
                };
                let dst = self.recv_spans(p, ci, len)?;
                // SAFETY: the source spans are valid (caller), the destination spans were
                // checked against the responder's regions with local write.
                unsafe { copy_spans(src, dst.as_slice(), len) };
                self.stats.bytes += len;
                self.stats.recvs += 1;
                let peer = &mut self.qps[p];
                peer.rq_ci = ci.wrapping_add(1);
                let (resp_op, imm) = if ask.opcode == opcode::SEND_IMM {
                    (op::RESP_SEND_IMM, ask.imm)
                } else {
                    (op::RESP_SEND, [0; 4])
                };
                let cqe = cq::resp(
                    peer.uidx,
                    peer.qpn,
                    resp_op,
                    ci as u16,
                    len as u32,
                    imm,
                    ask.solicited,
                );
                let cqn = peer.recv_cq;
                self.push_cqe(cqn, cqe);
                Ok(Answer::Ack)
            }
            opcode::RDMA_READ => {
                if len > 0 {
                    let mr = self.remote_check(p, ask, len, Access::REMOTE_READ)?;
                    return Ok(Answer::Read(Span::of(&mr, ask.raddr, len)));
                }
                Ok(Answer::Read(Span::own(ask.raddr, 0)))
            }
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => {
                if !ask.raddr.is_multiple_of(8) {
                    self.peer_to_error(p);
                    return Err(Answer::Nak(REM_INV_REQ, vendor::ATOMIC_ALIGN));
                }
                self.remote_check(p, ask, 8, Access::REMOTE_ATOMIC)?;
                // SAFETY: the 8 aligned bytes lie in the responder's region with remote atomic
                // access; `AtomicU64` has the layout of `u64`. The value in memory is
                // big-endian (a ConnectX in its big-endian requester mode), or host-endian
                // when the device was set so (the mode the Linux driver configures when the
                // firmware offers it, and then advertises IBV_ATOMIC_HCA).
                let target = unsafe {
                    AtomicU64::from_ptr(std::ptr::with_exposed_provenance_mut(ask.raddr as usize))
                };
                let (to_mem, from_mem): (ByteOrder, ByteOrder) = if self.atomic_host_endian {
                    (|v| v, |v| v)
                } else {
                    (u64::to_be, u64::from_be)
                };
                let orig = if ask.opcode == opcode::ATOMIC_CS {
                    match target.compare_exchange(
                        to_mem(ask.compare),
                        to_mem(ask.swap_add),
                        Ordering::AcqRel,
                        Ordering::Acquire,
                    ) {
                        Ok(v) | Err(v) => v,
                    }
                } else {
                    match target.fetch_update(Ordering::AcqRel, Ordering::Acquire, |raw| {
                        Some(to_mem(from_mem(raw).wrapping_add(ask.swap_add)))
                    }) {
                        Ok(v) | Err(v) => v,
                    }
                };
                Ok(Answer::Atomic(orig))
            }
            _ => Err(Answer::Nak(LOC_QP_OP, vendor::OPCODE)),
        }
    }

    /// Checks the remote span of a WRITE, READ or atomic; on failure the responder enters the
    /// error state (class C).
    fn remote_check(&mut self, p: usize, ask: &Ask, len: u64, need: Access) -> Result<Mr, Answer> {
        self.mrs
            .check_remote(ask.rkey, ask.raddr, len, need)
            .map_err(|f| {
                let v = mr_vendor(
                    f,
                    vendor::RKEY,
                    vendor::REMOTE_BOUNDS,
                    vendor::REMOTE_ACCESS,
                );
                Answer::Nak(REM_ACCESS, v)
            })
            .inspect_err(|_| self.peer_to_error(p))
    }

    /// The spans of receive `ci` at `p` that a message of `len` bytes fills, checked. On a
    /// failure the receive completes with an error at the responder, which enters the error
    /// state, and the requester's failure is returned.
    fn recv_spans(&mut self, p: usize, ci: u32, len: u64) -> Result<Spans, Answer> {
        let Some(rq) = self.qps[p].mem.rq else {
            return Err(Answer::Rnr);
        };
        let mut entries = [DataEntry::default(); MAX_SEGS];
        let n = rq.entries(ci, &mut entries);
        let capacity: u64 = entries[..n].iter().map(|e| e.len).sum();
        if capacity < len {
            // The responder reports a local length error on the receive; the requester sees
            // the NAK as "remote invalid request" (as on mlx5 and rxe).
            self.recv_fail(p, LOC_LEN, vendor::RECV_TOO_SHORT);
            return Err(Answer::Nak(REM_INV_REQ, vendor::RECV_TOO_SHORT));
        }
        let mut spans = Spans::new();
        let mut left = len;
        for e in &entries[..n] {
            if left == 0 {
                break;
            }
            let used = e.len.min(left);
            let mr = match self
                .mrs
                .check_local(e.lkey, e.addr, used, Access::LOCAL_WRITE)
            {
                Ok(mr) => mr,
                Err(f) => {
                    let v = mr_vendor(
                        f,
                        vendor::RECV_LKEY,
                        vendor::RECV_BOUNDS,
                        vendor::RECV_ACCESS,
                    );
                    self.recv_fail(p, LOC_PROT, v);
                    return Err(Answer::Nak(REM_OP, vendor::REMOTE_RECV));
                }
            };
            spans.push(Span::of(&mr, e.addr, used));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// 8-byte aligned memory, accessed only through views while the threads run.
    fn words(bytes: usize) -> Vec<u64> {
        std::vec![0; bytes / 8]
    }

    fn region(w: &mut [u64]) -> Mr {
        Mr {
            addr: w.as_mut_ptr() as u64,
            len: (w.len() * 8) as u64,
            lkey: 0,
            rkey: 0,
            access: Access::ALL,
        }
    }

    fn pattern(n: usize, seed: u8) -> Vec<u8> {
        (0..n)
            .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
            .collect()
    }

    /// The device copies messages into a registered region, partial words at both ends,
    /// while a program thread reads the region and writes bytes that share those words,
    /// through a view of the region (as `zverbs::MrBuf` does). Miri checks that no access
    /// pair races; afterwards both sides' bytes are there.
    #[test]
    fn device_copies_race_with_no_program_access() {
        let rounds = if cfg!(miri) { 3 } else { 500 };
        let mut dst = words(256);
        let mr = region(&mut dst);
        let src = pattern(61, 9);
        let base = NonNull::new(mr.addr as usize as *mut u8).unwrap();
        // SAFETY: the region is live for the scope, and accessed only through views of it.
        let prog = unsafe { SharedMem::new(base, 256) };
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut got = [0; 80];
                for r in 0..rounds {
                    prog.read(0, &mut got).unwrap();
                    prog.store_u8(3, r as u8).unwrap();
                    prog.write(66, &[r as u8; 5]).unwrap();
                    let _ = prog.load_u8_acquire(65).unwrap();
                }
            });
            for _ in 0..rounds {
                let d = [Span::of(&mr, mr.addr + 5, 61)];
                // SAFETY: the source is the local vector, the destination lies in the region.
                unsafe { copy_spans(&[Span::own(src.as_ptr() as u64, 61)], &d, 61) };
            }
        });
        let mut got = [0; 72];
        prog.read(0, &mut got).unwrap();
        assert_eq!(got[5..66], src[..]);
        assert_eq!(got[3], (rounds - 1) as u8);
        assert_eq!(got[66..71], [(rounds - 1) as u8; 5]);
    }

    /// A program that sees a message's last byte change with an `Acquire` load sees the whole
    /// message: the device stores the last byte last, with `Release`.
    #[test]
    fn the_last_byte_publishes_the_message() {
        let rounds = if cfg!(miri) { 2 } else { 200 };
        let mut dst = words(128);
        let mr = region(&mut dst);
        let base = NonNull::new(mr.addr as usize as *mut u8).unwrap();
        // SAFETY: as above.
        let prog = unsafe { SharedMem::new(base, 128) };
        for r in 1..=rounds {
            let mut msg = pattern(43, r as u8);
            msg[42] = r as u8;
            std::thread::scope(|s| {
                s.spawn(|| {
                    let d = [Span::of(&mr, mr.addr + 3, 43)];
                    // SAFETY: as above.
                    unsafe { copy_spans(&[Span::own(msg.as_ptr() as u64, 43)], &d, 43) };
                });
                while prog.load_u8_acquire(45).unwrap() != r as u8 {
                    std::hint::spin_loop();
                }
                let mut got = [0; 43];
                prog.read(3, &mut got).unwrap();
                assert_eq!(got[..], msg[..]);
            });
        }
    }

    /// Overlapping source and destination in one region copy as `memmove` does, including the
    /// last byte, which is read before the rest can overwrite it.
    #[test]
    fn overlapping_copies_are_memmove() {
        for (from, to) in [(0u64, 1u64), (1, 0), (3, 12), (12, 3)] {
            let mut mem = words(64);
            let mr = region(&mut mem);
            let init = pattern(64, 1);
            let base = NonNull::new(mr.addr as usize as *mut u8).unwrap();
            // SAFETY: as above.
            let view = unsafe { SharedMem::new(base, 64) };
            view.write(0, &init).unwrap();
            let s = [Span::of(&mr, mr.addr + from, 40)];
            let d = [Span::of(&mr, mr.addr + to, 40)];
            // SAFETY: both spans lie in the region.
            unsafe { copy_spans(&s, &d, 40) };
            let mut want = init.clone();
            want.copy_within(from as usize..from as usize + 40, to as usize);
            let mut got = [0; 64];
            view.read(0, &mut got).unwrap();
            assert_eq!(got[..], want[..], "{from} -> {to}");
        }
    }
}

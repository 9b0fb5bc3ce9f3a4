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
//! The engine is split by responsibility, one module each:
//!
//! | module | holds | contract in brief |
//! |---|---|---|
//! | `mod.rs` | [`Engine`]: the tables, [`Engine::step`], lookups, faults on demand, [`Fault`] | one pass per step, nothing allocated per operation |
//! | `queues.rs` | QP and CQ state: creation, connection, destruction, doorbell records, receive flushes | sizes checked before use; a destroyed queue is never touched again |
//! | `requester.rs` | the send queue: parsing, the requester's checks, execution, completion | one WQE at a time per QP, completed with what the responder answered |
//! | `responder.rs` | who a QP serves, and [`respond`](Engine::respond): checks, placement, the receive and its CQE | answers once, `Result<Ack, Nak>`; every check before any byte moves |
//! | `copy.rs` | [`Span`](copy::Span)s of checked memory and the one copy loop | atomic accesses only; the last byte stored last, with `Release` |
//! | `ud.rs` | address vectors, the UD requester, routing to a QP or a multicast group, the UD receive | a send completes once sent; what the receiver refuses is dropped and counted |
//! | `srq.rs` | shared receive queues: creation, consumption in free-list order, limit and error events | nothing read outside the ring; a malformed ring puts the SRQ in error |
//! | `raw.rs` | raw packet QPs: the Ethernet segment, frames out of the port and back in, flow rules, RSS, receive work queues (ordinary and striding) and their CQEs | a malformed WQE sends nothing; a frame no rule takes, or no WQE can hold, is dropped and counted |
//! | `events.rs` | the port's state, injected QP and device failures, the events the data path raises ([`crate::faults`]) | a port down fails each RC request taken, once; an event per cause |
//!
//! Requester and responder meet in [`Engine::respond`]: the requester checks its own side
//! (keys, bounds and rights of its gather list or READ destination), the responder does its
//! work on its own memory, receive queue and CQs and answers with an `Ack` or a `Nak`, which
//! the requester turns into its completion. A peer in the same device is called directly; a
//! peer in another process is reached through the [`Wire`]: the same request goes out as a
//! [`Request`](crate::wire::Request) message, the peer's device runs [`Engine::respond`] on it,
//! and its answer comes back as a [`Response`](crate::wire::Response). Such a QP keeps one
//! request in flight.
//!
//! Before either, the responder must recognise the requester as its peer: the QP its own
//! connection names (`peer` for a QP of this device, `remote` — LID and QPN — for one in
//! another process). A request from anyone else never reaches [`Engine::respond`].

mod copy;
mod dc;
mod events;
mod queues;
mod raw;
mod requester;
mod reset;
mod responder;
mod srq;
mod timers;
mod ud;

use std::sync::Arc;

use crate::config::{Access, DeviceConfig, Mr, QpStatus, SimError, Stats};
use crate::cq::{self, DevCq};
use crate::mem::{DevBuf, Region};
use crate::mr::{MrFault, MrTable};
use crate::wire::{Message, Wire};
use queues::DevQp;
use srq::DevSrq;
use ud::Group;
use zverbs_mlx5dv::prm::cqe::Syndrome;

pub use queues::Peer;

/// The object a device buffer belongs to, by number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    Qp(u32),
    Cq(u32),
    Srq(u32),
    Wq(u32),
}

/// The largest message (2 GiB).
const MAX_MSG: u64 = 1 << 31;

/// The path MTU the device splits messages by when it counts their packets (the port's active
/// MTU): a message of `len` bytes takes `max(1, ceil(len / PMTU))` PSNs.
pub(crate) const PMTU: u64 = 4096;
/// PSNs are 24 bits.
pub(crate) const PSN_MASK: u32 = 0xff_ffff;
/// The atomic results a responder keeps for answering duplicates (its responder resources,
/// `max_dest_rd_atomic`, as `ibv_query_device` reports `max_qp_rd_atom`).
pub(crate) const ATOMIC_RESOURCES: usize = 16;
/// The retry count a QP starts with (`retry_cnt` of `ibv_modify_qp` at RTS; 7 is the most).
pub(crate) const RETRY_CNT_DEFAULT: u8 = 7;

/// `a + n` in PSN space.
pub(crate) fn psn_add(a: u32, n: u32) -> u32 {
    a.wrapping_add(n) & PSN_MASK
}

/// Where `a` lies from `b` in PSN space: positive ahead, negative behind, within ±2^23 (the
/// signed 24-bit difference IB receivers compare PSNs with).
pub(crate) fn psn_diff(a: u32, b: u32) -> i32 {
    (a.wrapping_sub(b) << 8) as i32 >> 8
}

/// The PSNs a request takes: one per packet of its message at [`PMTU`] (a READ's the packets
/// of its response), one for an atomic, none for a NOP (which never leaves the device).
pub(crate) fn packets(opcode: u8, len: u64) -> u32 {
    match opcode {
        zverbs_mlx5dv::prm::opcode::NOP => 0,
        zverbs_mlx5dv::prm::opcode::ATOMIC_CS | zverbs_mlx5dv::prm::opcode::ATOMIC_FA => 1,
        // At most 2^31 bytes: at most 2^19 packets.
        _ => len.div_ceil(PMTU).max(1) as u32,
    }
}

const LOC_LEN: u8 = Syndrome::LocalLengthErr.to_raw();
const LOC_QP_OP: u8 = Syndrome::LocalQpOpErr.to_raw();
const LOC_PROT: u8 = Syndrome::LocalProtErr.to_raw();
const FLUSH: u8 = Syndrome::WrFlushErr.to_raw();
const REM_INV_REQ: u8 = Syndrome::RemoteInvalReqErr.to_raw();
const REM_ACCESS: u8 = Syndrome::RemoteAccessErr.to_raw();
const REM_OP: u8 = Syndrome::RemoteOpErr.to_raw();
const RETRY_EXC: u8 = Syndrome::TransportRetryExcErr.to_raw();
const RNR_EXC: u8 = Syndrome::RnrRetryExcErr.to_raw();

/// Why a work request failed: the syndrome and vendor syndrome of its error CQE (the vendor
/// values are in [`vendor`](crate::vendor)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Fault {
    syndrome: u8,
    vendor: u8,
}

impl Fault {
    const fn new(syndrome: u8, vendor: u8) -> Self {
        Self { syndrome, vendor }
    }
}

/// The vendor syndrome of a refused key and span: `key`, `bounds` or `access` by the fault.
fn mr_vendor(f: MrFault, key: u8, bounds: u8, access: u8) -> u8 {
    match f {
        MrFault::Key => key,
        MrFault::Bounds => bounds,
        MrFault::Access => access,
    }
}

/// The device's state. Accessed under the device's lock, by callers and the progress thread.
pub(crate) struct Engine {
    qps: Vec<DevQp>,
    cqs: Vec<DevCq>,
    /// Shared receive queues (as many as QPs at most).
    srqs: Vec<DevSrq>,
    /// Multicast groups with at least one QP attached.
    groups: Vec<Group>,
    mrs: MrTable,
    /// The buffers the device allocated (rings, records, registers), each with the object it
    /// belongs to: freed when that object is destroyed.
    owned: Vec<(Owner, DevBuf)>,
    now: u64,
    pub(crate) stats: Stats,
    cfg: DeviceConfig,
    /// The transport to device instances in other processes, and this instance's LID.
    wire: Option<(Arc<dyn Wire>, u16)>,
    /// Tag of the next request sent through the wire.
    next_seq: u32,
    /// Atomics treat memory as host-endian instead of big-endian.
    pub(crate) atomic_host_endian: bool,
    /// The port's state and the subscribers to asynchronous events.
    pub(crate) faults: crate::faults::Faults,
    /// The device clock (CQE timestamps).
    pub(crate) clock: crate::clock::DeviceClock,
    /// The transport and RNR timers run this many times faster than the specification's
    /// values (`timers.rs`).
    timer_scale: u32,
    /// The Ethernet port, flow rules, receive work queues and RSS QPs (`raw.rs`).
    pub(crate) eth: raw::EthState,
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
// Never `Sync`: the raw pointers keep it so, and the device's mutex is its only way across
// threads.
static_assertions::assert_not_impl_any!(Engine: Sync);

impl Engine {
    /// An engine with tables for `cfg`, or why `cfg` cannot be served.
    pub(crate) fn new(cfg: DeviceConfig) -> Result<Self, SimError> {
        if cfg.max_qps > queues::MAX_QPS {
            return Err(SimError::InvalidConfig(
                "max_qps above 2^24 - 256 (QP numbers are 24 bits, from 0x100)",
            ));
        }
        if cfg.max_cqs > queues::MAX_CQS {
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
            srqs: Vec::new(),
            groups: Vec::new(),
            mrs,
            owned: Vec::new(),
            now: 0,
            stats: Stats::default(),
            cfg,
            wire: None,
            next_seq: 0,
            atomic_host_endian: true,
            faults: crate::faults::Faults::default(),
            clock: crate::clock::DeviceClock::new(),
            timer_scale: 1,
            eth: raw::EthState::default(),
        })
    }

    pub(crate) fn set_wire(&mut self, wire: Arc<dyn Wire>, lid: u16) {
        self.wire = Some((wire, lid));
    }

    /// A buffer the device allocates for `owner` (a ring, a record, a register), until
    /// [`Engine::free_owned`] frees it with the object.
    fn alloc(&mut self, owner: Owner, len: usize) -> Result<Region, SimError> {
        self.owned
            .try_reserve(1)
            .map_err(|_| SimError::OutOfMemory)?;
        let b = DevBuf::new(len).ok_or(SimError::OutOfMemory)?;
        let r = b.region();
        self.owned.push((owner, b));
        Ok(r)
    }

    /// Frees every buffer the device allocated for `owner` (a destroyed object, or one whose
    /// creation failed half-way): the device keeps no memory of what is gone.
    fn free_owned(&mut self, owner: Owner) {
        self.owned.retain(|(o, _)| *o != owner);
    }

    /// Bytes of the buffers the device holds now (rings, records, registers, with guards).
    pub(crate) fn owned_bytes(&self) -> usize {
        self.owned.iter().map(|(_, b)| b.footprint()).sum()
    }

    /// Whether the guard bytes around every device buffer are intact.
    pub(crate) fn guards_intact(&self) -> bool {
        self.owned.iter().all(|(_, b)| b.guards_intact())
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
        work + self.flush_cqs()
    }

    /// Writes the CQEs the compressing CQs staged ([`crate::compress`]) when the burst they
    /// belong to ended: the step just taken added none to their CQ. Counts overruns; returns
    /// the CQs written to.
    fn flush_cqs(&mut self) -> usize {
        let mut work = 0;
        for i in 0..self.cqs.len() {
            let c = &mut self.cqs[i];
            let burst_on = core::mem::take(&mut c.staged_now);
            if c.dead || !c.has_staged() || burst_on {
                continue;
            }
            work += 1;
            let (before, sessions) = (c.overruns, c.sessions);
            c.flush(&mut self.stats.cqes);
            self.stats.compressed_sessions += c.sessions - sessions;
            let after = c.overruns;
            self.stats.cq_overruns += after - before;
            if after != before {
                self.cq_overrun(i);
            }
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

    /// Writes `cqe` to CQ `cq` (table entry), or holds it there; counts an overrun.
    fn push_cqe(&mut self, cq: usize, cqe: cq::RawCqe) {
        self.push_cqe_with_head(cq, cqe, None);
    }

    /// [`Engine::push_cqe`], with the first half of a 128-byte entry (scattered data).
    fn push_cqe_with_head(&mut self, cq: usize, cqe: cq::RawCqe, head: Option<[u8; 64]>) {
        let now = self.now;
        let c = &mut self.cqs[cq];
        if c.dead {
            return;
        }
        let before = c.overruns;
        c.push_with_head(now, cqe, head, &mut self.stats.cqes);
        self.stats.cq_overruns += c.overruns - before;
        if c.overruns != before {
            self.cq_overrun(cq);
        }
    }

    /// Handles a message from another device instance.
    pub(crate) fn deliver(&mut self, msg: &[u8]) {
        match Message::decode(msg) {
            Some(Message::Request(r)) => self.serve(&r),
            Some(Message::Response(r)) => self.complete_remote(&r),
            Some(Message::Datagram(d)) => self.deliver_datagram(&d),
            None => self.stats.bad_messages += 1,
        }
    }

    // ----- faults and control -----

    pub(crate) fn set_error(&mut self, qpn: u32) -> Result<(), SimError> {
        self.qp_mut(qpn)?.status = QpStatus::Error;
        Ok(())
    }

    pub(crate) fn fail_next(&mut self, qpn: u32, syndrome: u8, vendor: u8) -> Result<(), SimError> {
        self.qp_mut(qpn)?.fail_next = Some(Fault::new(syndrome, vendor));
        Ok(())
    }

    pub(crate) fn drop_next_recv(&mut self, qpn: u32) -> Result<(), SimError> {
        self.qp_mut(qpn)?.drop_next_recv = true;
        Ok(())
    }

    pub(crate) fn lose_next_ack(&mut self, qpn: u32) -> Result<(), SimError> {
        self.qp_mut(qpn)?.lose_next_ack = true;
        Ok(())
    }
}

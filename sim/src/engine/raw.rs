//! Raw Ethernet: raw packet QPs, the Ethernet port, flow steering, RSS and receive work
//! queues (ordinary and striding), as a ConnectX does them.
//!
//! Contract. Send: a raw QP's WQE is the control segment, the Ethernet segment (its inlined
//! header bytes from byte 14 on, running through the following segments) and data or inline
//! segments; every check (layout, `mss`, the inline header's extent, keys, the frame's length
//! against the port MTU) comes before any byte leaves, so a refused WQE sends nothing and
//! completes with an error CQE (the QP enters the error state). A frame that passes has its
//! checksums computed as `cs_flags` asks and goes to the attached port, and back into the
//! device's own receive side when loopback is on.
//!
//! Receive: a frame is steered by the flow rules, looked at by table (user priority *p* in
//! table `2p + 1`, multicast-only rules in table 32), in creation order within a table; the
//! first rule that matches decides, and every rule of its table with the very same match gets
//! a copy (a ConnectX's shared flow-table entry). A frame no rule takes is dropped and
//! counted. A raw QP's target is its receive queue; an RSS QP's is the receive work queue its
//! Toeplitz hash picks from its indirection table. An ordinary queue takes one frame per WQE;
//! a striding queue places frames into consecutive strides, writes a filler CQE for the
//! strides left when the next frame does not fit them, and moves on to the next WQE. A frame
//! with no WQE to go to, or longer than one, is dropped and counted: Ethernet has no RNR.
//! Nothing here allocates per frame: the frame is assembled in a buffer sized when the first
//! raw QP or work queue is created.

use std::sync::Arc;

use zverbs_mlx5dv::prm::SEGS_PER_BB;
use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::prm::wqe::DataSeg;

use super::copy::{Span, Spans, copy_spans};
use super::responder::Recv;
use super::{Engine, Fault, LOC_LEN, LOC_PROT, Owner, mr_vendor};
use crate::config::{Access, QpStatus, QpType, SimError};
use crate::cq::{self, RawCqe, op};
use crate::eth::{self, EthPort, Headers};
use crate::mem::{Region, load_be32_acquire};
use crate::steering::{
    FLOW_PRIORITIES, FlowAttr, FlowDest, MAX_FLOW_TAG, RssConfig, SimWq, Striding, WqConfig,
};
use crate::vendor;
use crate::wqe::{Bad, DataEntry, MAX_SEGS, RqRing, SqRing, Wqe};

/// The first receive work queue number.
const WQN_BASE: u32 = 0x400;
/// The most WQEs of a receive work queue.
const MAX_WQ_WR: u32 = 1 << 15;
/// The largest indirection table (`IB_USER_VERBS_MAX_LOG_IND_TBL_SIZE`: 2^13 entries).
const MAX_LOG_IND_TBL: u32 = 13;
/// Bytes of a striding WQE: the next segment and one data segment.
const STRIDING_WQE: u32 = 32;

/// The CQE's `hds_ip_ext` bits (`MLX5_CQE_L2_OK`, `L3_OK`, `L4_OK`).
const L2_OK: u8 = 1 << 0;
const L3_OK: u8 = 1 << 1;
const L4_OK: u8 = 1 << 2;
/// The CQE's `l4_l3_hdr_type`: IPv4 options, L3 IPv4 (bits 3:2 = 2), the L4 types (bits 6:4),
/// an IP fragment.
const HDR_IPV4_OPTIONS: u8 = 1 << 1;
const HDR_L3_IPV4: u8 = 2 << 2;
const HDR_L4_TCP: u8 = 1 << 4;
const HDR_L4_UDP: u8 = 2 << 4;
const HDR_L4_TCP_ACK: u8 = 3 << 4;
const HDR_L4_TCP_ACK_DATA: u8 = 4 << 4;
const HDR_FRAGMENT: u8 = 1 << 7;
/// The striding `byte_cnt`'s filler bit and the consumed strides' shift.
const FILLER: u32 = 1 << 31;
const STRIDES_SHIFT: u32 = 16;

/// A flow rule as the device keeps it.
#[derive(Clone, Copy, Debug)]
struct Flow {
    id: u32,
    attr: FlowAttr,
    /// The table it sits in ([`crate::steering::core_priority`]).
    table: u16,
}

/// A receive work queue as the device drives it.
#[derive(Debug)]
struct DevWq {
    wqn: u32,
    /// The user index its CQEs carry (CQE version 1): the WQN unless the driver gave one.
    uidx: u32,
    ring: RqRing,
    dbrec: core::ptr::NonNull<u32>,
    cq: usize,
    striding: Option<Striding>,
    /// `IBV_WQS_RDY`: frames are placed (a new queue is in RESET).
    ready: bool,
    /// A WQE named memory it may not write: no frame is placed any more.
    error: bool,
    dead: bool,
    /// WQE consumer counter (free-running).
    ci: u32,
    /// Strides used in WQE `ci` of a striding queue.
    used: u32,
}

/// An indirection table: the work queues (table entries) a hash picks from.
#[derive(Debug)]
struct IndTable {
    handle: u32,
    wqs: Vec<usize>,
}

/// An RSS QP: its indirection table and hash.
#[derive(Clone, Copy, Debug)]
struct RssQp {
    handle: u32,
    table: u32,
    cfg: RssConfig,
}

/// The device's Ethernet side.
pub(crate) struct EthState {
    /// Where a frame is assembled: [`eth::MAX_FRAME`] bytes once a raw object exists.
    frame: Vec<u8>,
    /// The port MTU: the largest IP packet a frame may carry.
    mtu: u32,
    /// Frames sent are offered to this device's own receive side.
    loopback: bool,
    /// The device computes IPv4/UDP/TCP checksums on send (`IBV_DEVICE_RAW_IP_CSUM`): on by
    /// default; off, it reports none and leaves `cs_flags` unheeded.
    ip_csum: bool,
    /// What the port is connected to.
    port: Option<Arc<dyn EthPort>>,
    flows: Vec<Flow>,
    wqs: Vec<DevWq>,
    tables: Vec<IndTable>,
    rss: Vec<RssQp>,
    /// The next flow, table and RSS handle.
    next_handle: u32,
}

impl Default for EthState {
    fn default() -> Self {
        Self {
            frame: Vec::new(),
            mtu: eth::DEFAULT_MTU,
            loopback: true,
            ip_csum: true,
            port: None,
            flows: Vec::new(),
            wqs: Vec::new(),
            tables: Vec::new(),
            rss: Vec::new(),
            next_handle: 1,
        }
    }
}

impl EthState {
    /// Sizes the frame buffer (once).
    pub(crate) fn reserve(&mut self) -> Result<(), SimError> {
        if self.frame.len() < eth::MAX_FRAME {
            self.frame
                .try_reserve_exact(eth::MAX_FRAME)
                .map_err(|_| SimError::OutOfMemory)?;
            self.frame.resize(eth::MAX_FRAME, 0);
        }
        Ok(())
    }

    fn handle(&mut self) -> u32 {
        let h = self.next_handle;
        self.next_handle = self.next_handle.wrapping_add(1).max(1);
        h
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The Ethernet segment's fields the device reads (`struct mlx5_wqe_eth_seg`): `cs_flags` at
/// byte 4, `mss` at 6..8, `inline_hdr_sz` at 12..14, the inlined bytes from byte 14 on.
mod eseg {
    pub(super) const CS_FLAGS: usize = 4;
    pub(super) const MSS: usize = 6;
    pub(super) const INLINE_HDR_SZ: usize = 12;
    pub(super) const INLINE_HDR_START: usize = 14;
}

/// The segments the Ethernet segment takes with `n` inlined header bytes: one, and one more
/// for every 16 bytes past the first two.
fn eseg_ds(n: u32) -> u32 {
    1 + n.saturating_sub(2).div_ceil(16)
}

/// Parses the raw packet WQE at block counter `ci` (`avail` blocks published) of QP `qpn`:
/// SEND or NOP; for a SEND, the Ethernet segment and then the payload, which the returned
/// [`Wqe`] holds. TSO (`MLX5_OPCODE_TSO`) is not modelled and refused as an unknown opcode.
pub(super) fn parse_raw(sq: &SqRing, ci: u32, avail: u32, qpn: u32) -> Result<Wqe, Bad> {
    let start = ci.wrapping_mul(SEGS_PER_BB as u32);
    let (mut w, ds) = sq.control(ci, avail, qpn)?;
    let (op, blocks) = (w.opcode, w.blocks);
    let bad = |vendor, blocks| Bad {
        vendor,
        opcode: op,
        blocks,
    };
    match op {
        opcode::NOP => return Ok(w),
        opcode::SEND => {}
        _ => return Err(bad(vendor::OPCODE, blocks)),
    }
    if ds < 2 {
        return Err(bad(vendor::NO_ETH_SEG, blocks));
    }
    let es = sq.seg(start.wrapping_add(1));
    if be16(&es, eseg::MSS) != 0 {
        return Err(bad(vendor::RAW_MSS, blocks));
    }
    let first = 1 + eseg_ds(u32::from(be16(&es, eseg::INLINE_HDR_SZ)));
    if first > ds {
        return Err(bad(vendor::RAW_INLINE_HDR, blocks));
    }
    sq.parse_payload(start, first, ds, &mut w)
        .map_err(|v| bad(v, blocks))?;
    Ok(w)
}

/// What went wrong placing a frame into a receive WQE.
enum Place {
    /// The WQE's buffers are shorter than the frame: the frame is dropped.
    TooLong,
    /// An entry names memory the device may not write: the vendor syndrome.
    Prot(u8),
}

impl Engine {
    // ----- send -----

    /// Sends the raw packet WQE `w` of QP `q`: the frame is assembled, checked against the
    /// port, its checksums computed, and it leaves through the port. `Err` for a WQE refused
    /// before anything left.
    pub(super) fn execute_raw(&mut self, q: usize, w: &Wqe) -> Result<(), Fault> {
        if w.opcode == opcode::NOP {
            return Ok(());
        }
        let qp = &self.qps[q];
        let sq = qp.mem.sq;
        let eseg_at = qp.sq_ci.wrapping_mul(SEGS_PER_BB as u32).wrapping_add(1);
        let es = sq.seg(eseg_at);
        let cs_flags = es[eseg::CS_FLAGS];
        let inl = usize::from(be16(&es, eseg::INLINE_HDR_SZ));
        let (spans, len) = self.local_spans(q, w, Access::NONE)?;
        let total = inl as u64 + len;
        if total < eth::ETH_HLEN as u64 || total > eth::MAX_FRAME as u64 {
            return Err(Fault::new(LOC_LEN, vendor::RAW_FRAME_LEN));
        }
        let total = total as usize;
        // Sized when the QP was created (`EthState::reserve`), so every index below is in it.
        let mut frame = core::mem::take(&mut self.eth.frame);
        debug_assert!(frame.len() >= eth::MAX_FRAME);
        // The inlined header: from byte 14 of the Ethernet segment on, segment by segment
        // (each masked into the ring, so it continues at the ring's start).
        let mut at = 0;
        while at < inl {
            let pos = eseg::INLINE_HDR_START + at;
            let seg = sq.seg(eseg_at.wrapping_add((pos / 16) as u32));
            let from = pos % 16;
            let n = (16 - from).min(inl - at);
            frame[at..at + n].copy_from_slice(&seg[from..from + n]);
            at += n;
        }
        let dst = [Span::own(frame[inl..].as_mut_ptr() as u64, len)];
        // SAFETY: the gather spans were checked against registered regions (or lie in the
        // send ring); the destination is the device's frame buffer, at least `len` bytes past
        // the header (`total <= MAX_FRAME`).
        unsafe { copy_spans(spans.as_slice(), &dst, len) };
        let f = &mut frame[..total];
        let outcome = match eth::parse(f) {
            Some(h) => {
                let vlan = if h.vlan { eth::VLAN_HLEN } else { 0 };
                if total > self.eth.mtu as usize + eth::ETH_HLEN + vlan {
                    Err(Fault::new(LOC_LEN, vendor::RAW_FRAME_LEN))
                } else {
                    if self.eth.ip_csum {
                        eth::fill_checksums(f, &h, cs_flags);
                    }
                    Ok(())
                }
            }
            None => Err(Fault::new(LOC_LEN, vendor::RAW_FRAME_LEN)),
        };
        if outcome.is_ok() {
            self.stats.eth_sent += 1;
            self.stats.bytes += total as u64;
            if let Some(port) = self.eth.port.clone() {
                port.transmit(&frame[..total]);
            }
            if self.eth.loopback {
                self.rx_buffered(&mut frame, total);
            }
        }
        self.eth.frame = frame;
        outcome
    }

    // ----- receive -----

    /// A frame from outside the device (an attached port's other end), between steps: its
    /// completions, like those of every frame that arrives before the next step, are a burst
    /// that step ends (for a compressing CQ, written then).
    pub(crate) fn receive_external(&mut self, frame: &[u8]) {
        let len = frame.len();
        if !(eth::ETH_HLEN..=eth::MAX_FRAME).contains(&len) {
            self.stats.eth_arrived += 1;
            self.stats.eth_bad_frames += 1;
            return;
        }
        if self.eth.frame.len() < len {
            // No raw QP or work queue yet, so no rule either.
            self.stats.eth_arrived += 1;
            self.stats.eth_no_rule += 1;
            return;
        }
        // Into the device's own buffer first, as a NIC takes a frame off the wire before it
        // steers it: the copies into receive buffers read memory the device owns.
        let mut buf = core::mem::take(&mut self.eth.frame);
        buf[..len].copy_from_slice(frame);
        self.rx_buffered(&mut buf, len);
        self.eth.frame = buf;
        for c in &mut self.cqs {
            c.staged_now = false;
        }
    }

    /// The frame in the first `len` bytes of `buf` (the device's frame buffer, taken out of
    /// the engine meanwhile), arriving at the port: steered by the flow rules into receive
    /// queues.
    fn rx_buffered(&mut self, buf: &mut [u8], len: usize) {
        // The copies read the frame through this pointer (exposed here, before the shared
        // borrow below, so the device's atomic reads may use it).
        let span = Span::own(buf.as_mut_ptr() as u64, len as u64);
        let bytes = &buf[..len];
        self.stats.eth_arrived += 1;
        let h = match eth::parse(bytes) {
            Some(h) => h,
            None => {
                self.stats.eth_bad_frames += 1;
                return;
            }
        };
        let frame = Arrived { bytes, span, h };
        let mut best: Option<Flow> = None;
        for f in &self.eth.flows {
            if best.is_none_or(|b| f.table < b.table)
                && crate::steering::matches(&f.attr.spec, &frame.h)
            {
                best = Some(*f);
            }
        }
        let Some(best) = best else {
            self.stats.eth_no_rule += 1;
            return;
        };
        for i in 0..self.eth.flows.len() {
            let f = self.eth.flows[i];
            if f.table == best.table && f.attr.spec == best.attr.spec {
                self.steer_to(&f.attr, &frame);
            }
        }
    }

    /// Places `frame` (headers `h`) into the receive queue `dest` names.
    fn steer_to(&mut self, rule: &FlowAttr, frame: &Arrived<'_>) {
        let tag = rule.tag.unwrap_or(0);
        match rule.dest {
            FlowDest::RawQp(qpn) => match self.qp_index(qpn) {
                Ok(q)
                    if self.qps[q].qp_type == QpType::RawPacket
                        && self.qps[q].status != QpStatus::Error =>
                {
                    self.place_qp(q, frame, tag);
                }
                _ => self.stats.eth_no_wqe += 1,
            },
            FlowDest::Rss(handle) => {
                let Some(rss) = self.eth.rss.iter().find(|r| r.handle == handle).copied() else {
                    self.stats.eth_no_wqe += 1;
                    return;
                };
                let Some(t) = self.eth.tables.iter().find(|t| t.handle == rss.table) else {
                    self.stats.eth_no_wqe += 1;
                    return;
                };
                let (hash, ty) = rss.cfg.hash(&frame.h);
                // A power-of-two table: the hash's low bits pick the entry.
                let w = t.wqs[hash as usize & (t.wqs.len() - 1)];
                self.place_wq(w, frame, Some((hash, ty)), tag);
            }
        }
    }

    /// The spans of the receive WQE with `entries` that `len` bytes fill, checked for local
    /// write.
    fn scatter_spans(&self, entries: &[DataEntry], len: u64) -> Result<Spans, Place> {
        let capacity: u64 = entries.iter().map(|e| e.len).sum();
        if capacity < len {
            return Err(Place::TooLong);
        }
        let mut spans = Spans::new();
        let mut left = len;
        for e in entries {
            if left == 0 {
                break;
            }
            let used = e.len.min(left);
            let mr = self
                .mrs
                .check_local(e.lkey, e.addr, used, Access::LOCAL_WRITE)
                .map_err(|f| {
                    Place::Prot(mr_vendor(
                        f,
                        vendor::RECV_LKEY,
                        vendor::RECV_BOUNDS,
                        vendor::RECV_ACCESS,
                    ))
                })?;
            spans.push(Span::of(&mr, e.addr, used));
            left -= used;
        }
        Ok(spans)
    }

    /// An ordinary receive into the receive queue of raw QP `q`.
    fn place_qp(&mut self, q: usize, a: &Arrived<'_>, tag: u32) {
        let (frame, h) = (a.bytes, &a.h);
        let Some(rq) = self.qps[q].mem.rq else {
            self.stats.eth_no_wqe += 1;
            return;
        };
        let avail = self.rq_doorbell(q);
        if avail == 0 || avail > rq.cnt {
            self.stats.bad_doorbells += u64::from(avail > rq.cnt);
            self.stats.eth_no_wqe += 1;
            return;
        }
        let ci = self.qps[q].rq_ci;
        let mut entries = [DataEntry::default(); MAX_SEGS];
        let n = rq.entries(ci, &mut entries);
        let len = frame.len() as u64;
        match self.scatter_spans(&entries[..n], len) {
            Err(Place::TooLong) => self.stats.eth_too_long += 1,
            Err(Place::Prot(v)) => self.recv_fail(q, Recv::Rq(ci), LOC_PROT, v),
            Ok(dst) => {
                // SAFETY: the frame is the caller's bytes; the destination spans were checked
                // against regions with local write.
                unsafe { copy_spans(&[a.span], dst.as_slice(), len) };
                let qp = &mut self.qps[q];
                qp.rq_ci = ci.wrapping_add(1);
                let cqe = eth_cqe(qp.uidx, ci as u16, len as u32, 0, frame, h, None, tag);
                let cqn = qp.recv_cq;
                self.push_cqe(cqn, cqe);
                self.stats.eth_delivered += 1;
                self.stats.bytes += len;
            }
        }
    }

    /// Places a frame into receive work queue `w` (table entry), hashed with `hash`.
    fn place_wq(&mut self, w: usize, a: &Arrived<'_>, hash: Option<(u32, u8)>, tag: u32) {
        let (frame, h) = (a.bytes, &a.h);
        let wq = &self.eth.wqs[w];
        if wq.dead || !wq.ready || wq.error {
            self.stats.eth_no_wqe += 1;
            return;
        }
        // SAFETY: the doorbell record is valid for the WQ's life (creation).
        let head = unsafe { load_be32_acquire(wq.dbrec) } as u16;
        let mut avail = u32::from(head.wrapping_sub(wq.ci as u16));
        if avail > wq.ring.cnt {
            self.stats.bad_doorbells += 1;
            self.stats.eth_no_wqe += 1;
            return;
        }
        let len = frame.len() as u64;
        let (uidx, cq) = (wq.uidx, wq.cq);
        let Some(s) = wq.striding else {
            if avail == 0 {
                self.stats.eth_no_wqe += 1;
                return;
            }
            let ci = wq.ci;
            let mut entries = [DataEntry::default(); MAX_SEGS];
            let n = wq.ring.entries(ci, &mut entries);
            match self.scatter_spans(&entries[..n], len) {
                Err(Place::TooLong) => self.stats.eth_too_long += 1,
                Err(Place::Prot(v)) => self.wq_fail(w, ci as u16, v),
                Ok(dst) => {
                    // SAFETY: as in `place_qp`.
                    unsafe { copy_spans(&[a.span], dst.as_slice(), len) };
                    self.eth.wqs[w].ci = ci.wrapping_add(1);
                    let cqe = eth_cqe(uidx, ci as u16, len as u32, 0, frame, h, hash, tag);
                    self.push_cqe(cq, cqe);
                    self.stats.eth_delivered += 1;
                    self.stats.bytes += len;
                }
            }
            return;
        };
        let (size, num) = (u64::from(s.stride_bytes()), s.num_strides());
        let need = len.div_ceil(size) as u32;
        if need > num {
            self.stats.eth_too_long += 1;
            return;
        }
        if avail == 0 {
            self.stats.eth_no_wqe += 1;
            return;
        }
        let slot_mask = wq.ring.cnt - 1;
        if wq.used + need > num {
            // The strides left cannot hold the frame: a filler CQE consumes them, and the
            // frame goes to the next WQE.
            let (ci, used) = (wq.ci, wq.used);
            let byte_cnt = FILLER | ((num - used) << STRIDES_SHIFT);
            // Written for the frame that did not fit: its rule's flow tag.
            let mut c = cq::resp(
                uidx,
                tag,
                op::RESP_SEND,
                used as u16,
                byte_cnt,
                [0; 4],
                false,
            );
            c[2..4].copy_from_slice(&((ci & slot_mask) as u16).to_be_bytes());
            let wq = &mut self.eth.wqs[w];
            wq.ci = ci.wrapping_add(1);
            wq.used = 0;
            self.push_cqe(cq, c);
            self.stats.eth_fillers += 1;
            avail -= 1;
            if avail == 0 {
                self.stats.eth_no_wqe += 1;
                return;
            }
        }
        let wq = &self.eth.wqs[w];
        let (ci, used) = (wq.ci, wq.used);
        let off = (ci & slot_mask) as usize * STRIDING_WQE as usize + 16;
        debug_assert!(off + 16 <= wq.ring.region.len);
        // SAFETY: the data segment of WQE `ci`, inside the ring (`cnt` WQEs of 32 bytes);
        // published (`avail > 0`).
        let seg = unsafe { crate::mem::read16(wq.ring.region.ptr.add(off)) };
        let d = DataSeg::new_unchecked(&seg);
        let addr = d.addr().wrapping_add(u64::from(used) * size);
        let dst = match self
            .mrs
            .check_local(d.lkey(), addr, len, Access::LOCAL_WRITE)
        {
            Ok(mr) => Span::of(&mr, addr, len),
            Err(f) => {
                let v = mr_vendor(
                    f,
                    vendor::RECV_LKEY,
                    vendor::RECV_BOUNDS,
                    vendor::RECV_ACCESS,
                );
                self.wq_fail(w, used as u16, v);
                return;
            }
        };
        // SAFETY: as in `place_qp`.
        unsafe { copy_spans(&[a.span], &[dst], len) };
        let byte_cnt = (need << STRIDES_SHIFT) | len as u32;
        let wqe_id = (ci & slot_mask) as u16;
        let cqe = eth_cqe(uidx, used as u16, byte_cnt, wqe_id, frame, h, hash, tag);
        let wq = &mut self.eth.wqs[w];
        wq.used += need;
        if wq.used == num {
            wq.ci = ci.wrapping_add(1);
            wq.used = 0;
        }
        self.push_cqe(cq, cqe);
        self.stats.eth_delivered += 1;
        self.stats.bytes += len;
    }

    /// A receive WQE of work queue `w` named memory the device may not write: a local
    /// protection error CQE (`wqe_counter` as the frame's would have been), and the queue
    /// places nothing more.
    fn wq_fail(&mut self, w: usize, counter: u16, vendor: u8) {
        let wq = &mut self.eth.wqs[w];
        wq.error = true;
        let c = cq::err(wq.uidx, 0, op::RESP_ERR, 0, counter, LOC_PROT, vendor);
        let cq = wq.cq;
        self.push_cqe(cq, c);
    }

    // ----- control -----

    /// Moves raw packet QP `qpn` to RTS (through RTR): its send queue runs from now on.
    pub(crate) fn ready_raw(&mut self, qpn: u32) -> Result<(), SimError> {
        let qp = self.qp_mut(qpn)?;
        if qp.qp_type != QpType::RawPacket {
            return Err(SimError::InvalidConfig("not a raw packet QP"));
        }
        if qp.status != QpStatus::Init {
            return Err(SimError::AlreadyConnected(qpn));
        }
        qp.status = QpStatus::Rts;
        Ok(())
    }

    pub(crate) fn attach_port(&mut self, port: Option<Arc<dyn EthPort>>) {
        self.eth.loopback = port.is_none();
        self.eth.port = port;
    }

    pub(crate) fn set_loopback(&mut self, on: bool) {
        self.eth.loopback = on;
    }

    pub(crate) fn set_checksum_offload(&mut self, on: bool) {
        self.eth.ip_csum = on;
    }

    pub(crate) fn checksum_offload(&self) -> bool {
        self.eth.ip_csum
    }

    pub(crate) fn set_mtu(&mut self, mtu: u32) -> Result<(), SimError> {
        if !(68..=eth::MAX_MTU).contains(&mtu) {
            return Err(SimError::InvalidConfig("port MTU outside 68..=9000"));
        }
        self.eth.mtu = mtu;
        Ok(())
    }

    /// The WQE stride of a work queue of `cfg`, its sizes checked.
    fn wq_stride(cfg: &WqConfig) -> Result<u32, SimError> {
        if cfg.max_wr == 0 || cfg.max_wr > MAX_WQ_WR {
            return Err(SimError::InvalidConfig("max_wr must be in 1..=32768"));
        }
        if cfg.two_byte_shift {
            return Err(SimError::InvalidConfig(
                "the two-byte shift of a striding queue is not modelled by the software device",
            ));
        }
        match cfg.striding {
            Some(s) => {
                if !(6..=13).contains(&s.log_stride_bytes) {
                    return Err(SimError::InvalidConfig("log_stride_bytes outside 6..=13"));
                }
                if !(3..=16).contains(&s.log_num_strides) {
                    return Err(SimError::InvalidConfig("log_num_strides outside 3..=16"));
                }
                Ok(STRIDING_WQE)
            }
            None => {
                if cfg.max_sge == 0 || cfg.max_sge > MAX_SEGS as u32 {
                    return Err(SimError::InvalidConfig("max_sge must be in 1..=64"));
                }
                Ok(16 * cfg.max_sge.next_power_of_two())
            }
        }
    }

    /// A free work queue slot, with room to push one.
    fn wq_slot(&mut self) -> Result<usize, SimError> {
        let slot = match self.eth.wqs.iter().position(|w| w.dead) {
            Some(i) => i,
            None if self.eth.wqs.len() < self.cfg.max_qps as usize => self.eth.wqs.len(),
            None => return Err(SimError::TooMany),
        };
        self.eth.reserve()?;
        if slot == self.eth.wqs.len() {
            self.eth
                .wqs
                .try_reserve(1)
                .map_err(|_| SimError::OutOfMemory)?;
        }
        Ok(slot)
    }

    /// Puts `wq` into `slot` (from [`Engine::wq_slot`]).
    fn put_wq(&mut self, slot: usize, wq: DevWq) {
        let (cq, striding) = (wq.cq, wq.striding.is_some());
        if slot == self.eth.wqs.len() {
            self.eth.wqs.push(wq);
        } else {
            self.eth.wqs[slot] = wq;
        }
        if striding {
            self.cqs[cq].strided = true;
        }
    }

    /// A new work queue of `cfg` over `ring` (`cnt` WQEs of `stride` bytes) and `dbrec`.
    fn new_wq(
        wqn: u32,
        cfg: &WqConfig,
        cq: usize,
        ring: Region,
        cnt: u32,
        stride: u32,
        dbrec: core::ptr::NonNull<u32>,
    ) -> DevWq {
        DevWq {
            wqn,
            uidx: wqn,
            ring: RqRing {
                region: ring,
                cnt,
                stride,
            },
            dbrec,
            cq,
            striding: cfg.striding,
            ready: false,
            error: false,
            dead: false,
            ci: 0,
            used: 0,
        }
    }

    pub(crate) fn create_wq(&mut self, cfg: WqConfig) -> Result<SimWq, SimError> {
        let cq = self.cq_index(cfg.cq)?;
        let stride = Self::wq_stride(&cfg)?;
        let cnt = cfg.max_wr.next_power_of_two();
        let slot = self.wq_slot()?;
        let wqn = WQN_BASE + slot as u32;
        let owner = Owner::Wq(wqn);
        let made = (|| {
            let ring = self.alloc(owner, cnt as usize * stride as usize)?;
            let dbrec = self.alloc(owner, 8)?.ptr.cast::<u32>();
            Ok::<_, SimError>((ring, dbrec))
        })();
        let (ring, dbrec) = match made {
            Ok(x) => x,
            Err(e) => {
                self.free_owned(owner);
                return Err(e);
            }
        };
        let region = Region {
            ptr: ring.ptr,
            len: ring.len,
        };
        let wq = Self::new_wq(wqn, &cfg, cq, region, cnt, stride, dbrec);
        self.put_wq(slot, wq);
        Ok(SimWq {
            wqn,
            layout: zverbs_mlx5dv::WqLayout {
                buf: ring.ptr,
                wqe_cnt: cnt,
                stride,
            },
            dbrec,
            striding: cfg.striding,
        })
    }

    /// A work queue over a ring and doorbell record the driver allocated: `cnt` WQEs (a power
    /// of two, at most 32768) of the stride `cfg` implies; its CQEs carry `uidx`.
    ///
    /// # Safety
    ///
    /// As [`crate::Device::create_wq_external`].
    pub(crate) unsafe fn create_wq_external(
        &mut self,
        cfg: WqConfig,
        buf: core::ptr::NonNull<u8>,
        cnt: u32,
        dbrec: core::ptr::NonNull<u32>,
        uidx: u32,
    ) -> Result<u32, SimError> {
        let cq = self.cq_index(cfg.cq)?;
        let stride = Self::wq_stride(&cfg)?;
        if !cnt.is_power_of_two() || cnt > MAX_WQ_WR {
            return Err(SimError::InvalidConfig(
                "a work queue's ring holds a power of two of WQEs, at most 32768",
            ));
        }
        let slot = self.wq_slot()?;
        let wqn = WQN_BASE + slot as u32;
        let region = Region {
            ptr: buf,
            len: cnt as usize * stride as usize,
        };
        let mut wq = Self::new_wq(wqn, &cfg, cq, region, cnt, stride, dbrec);
        wq.uidx = uidx & 0xff_ffff;
        self.put_wq(slot, wq);
        Ok(wqn)
    }

    fn wq_index(&self, wqn: u32) -> Result<usize, SimError> {
        self.eth
            .wqs
            .iter()
            .position(|w| w.wqn == wqn && !w.dead)
            .ok_or(SimError::NoSuchWq(wqn))
    }

    pub(crate) fn ready_wq(&mut self, wqn: u32) -> Result<(), SimError> {
        let w = self.wq_index(wqn)?;
        let wq = &mut self.eth.wqs[w];
        if !wq.ready {
            // RESET → RDY: the queue starts at its first WQE, as libmlx5 resets it.
            wq.ci = 0;
            wq.used = 0;
            wq.error = false;
        }
        wq.ready = true;
        Ok(())
    }

    pub(crate) fn reset_wq(&mut self, wqn: u32) -> Result<(), SimError> {
        let w = self.wq_index(wqn)?;
        self.eth.wqs[w].ready = false;
        Ok(())
    }

    pub(crate) fn destroy_wq(&mut self, wqn: u32) -> Result<(), SimError> {
        let w = self.wq_index(wqn)?;
        if self.eth.tables.iter().any(|t| t.wqs.contains(&w)) {
            return Err(SimError::InvalidConfig("WQ in use by an indirection table"));
        }
        self.eth.wqs[w].dead = true;
        self.free_owned(Owner::Wq(wqn));
        Ok(())
    }

    pub(crate) fn create_ind_table(&mut self, wqns: &[u32]) -> Result<u32, SimError> {
        if !wqns.len().is_power_of_two() || wqns.len() > 1 << MAX_LOG_IND_TBL {
            return Err(SimError::InvalidConfig(
                "an indirection table has a power-of-two number of WQs, at most 8192",
            ));
        }
        let mut wqs = Vec::new();
        wqs.try_reserve_exact(wqns.len())
            .map_err(|_| SimError::OutOfMemory)?;
        for &n in wqns {
            wqs.push(self.wq_index(n)?);
        }
        self.eth
            .tables
            .try_reserve(1)
            .map_err(|_| SimError::OutOfMemory)?;
        let handle = self.eth.handle();
        self.eth.tables.push(IndTable { handle, wqs });
        Ok(handle)
    }

    pub(crate) fn destroy_ind_table(&mut self, handle: u32) -> Result<(), SimError> {
        let t = self
            .eth
            .tables
            .iter()
            .position(|t| t.handle == handle)
            .ok_or(SimError::NoSuchIndTable(handle))?;
        if self.eth.rss.iter().any(|r| r.table == handle) {
            return Err(SimError::InvalidConfig(
                "indirection table in use by an RSS QP",
            ));
        }
        self.eth.tables.swap_remove(t);
        Ok(())
    }

    pub(crate) fn create_rss_qp(&mut self, cfg: RssConfig) -> Result<u32, SimError> {
        cfg.check().map_err(SimError::InvalidConfig)?;
        if !self.eth.tables.iter().any(|t| t.handle == cfg.ind_table) {
            return Err(SimError::NoSuchIndTable(cfg.ind_table));
        }
        self.eth
            .rss
            .try_reserve(1)
            .map_err(|_| SimError::OutOfMemory)?;
        let handle = self.eth.handle();
        self.eth.rss.push(RssQp {
            handle,
            table: cfg.ind_table,
            cfg,
        });
        Ok(handle)
    }

    pub(crate) fn destroy_rss_qp(&mut self, handle: u32) -> Result<(), SimError> {
        let r = self
            .eth
            .rss
            .iter()
            .position(|r| r.handle == handle)
            .ok_or(SimError::NoSuchRssQp(handle))?;
        if self
            .eth
            .flows
            .iter()
            .any(|f| f.attr.dest == FlowDest::Rss(handle))
        {
            return Err(SimError::InvalidConfig("RSS QP in use by a flow rule"));
        }
        self.eth.rss.swap_remove(r);
        Ok(())
    }

    pub(crate) fn create_flow(&mut self, attr: FlowAttr) -> Result<u32, SimError> {
        if attr.priority >= FLOW_PRIORITIES {
            return Err(SimError::InvalidConfig("flow priority above 15"));
        }
        attr.spec
            .check()
            .map_err(|e| SimError::InvalidConfig(e.reason()))?;
        if attr.tag.is_some_and(|t| t > MAX_FLOW_TAG) {
            return Err(SimError::InvalidConfig("a flow tag has 24 bits"));
        }
        let table = crate::steering::core_priority(&attr);
        if self
            .eth
            .flows
            .iter()
            .any(|f| f.table == table && f.attr.spec == attr.spec && f.attr.tag != attr.tag)
        {
            // One flow-table entry, shared by identical rules, has one tag (the kernel:
            // EEXIST).
            return Err(SimError::InvalidConfig(
                "a rule with the same match and priority carries another flow tag",
            ));
        }
        match attr.dest {
            FlowDest::RawQp(qpn) => {
                let q = self.qp_index(qpn)?;
                if self.qps[q].qp_type != QpType::RawPacket {
                    return Err(SimError::InvalidConfig(
                        "a flow rule steers to a raw packet QP or an RSS QP",
                    ));
                }
            }
            FlowDest::Rss(h) => {
                if !self.eth.rss.iter().any(|r| r.handle == h) {
                    return Err(SimError::NoSuchRssQp(h));
                }
            }
        }
        self.eth
            .flows
            .try_reserve(1)
            .map_err(|_| SimError::OutOfMemory)?;
        let id = self.eth.handle();
        self.eth.flows.push(Flow { id, attr, table });
        Ok(id)
    }

    /// Whether a flow rule steers to QP `qpn`.
    pub(crate) fn flows_name_qp(&self, qpn: u32) -> bool {
        self.eth
            .flows
            .iter()
            .any(|f| f.attr.dest == FlowDest::RawQp(qpn))
    }

    pub(crate) fn destroy_flow(&mut self, id: u32) -> Result<(), SimError> {
        let i = self
            .eth
            .flows
            .iter()
            .position(|f| f.id == id)
            .ok_or(SimError::NoSuchFlow(id))?;
        // Creation order decides within a table: keep it.
        self.eth.flows.remove(i);
        Ok(())
    }
}

/// A frame on its way to the receive queues: its bytes, the same bytes as a span the device
/// copies from, and its headers.
struct Arrived<'a> {
    bytes: &'a [u8],
    span: Span,
    h: Headers,
}

/// The receive CQE of an Ethernet frame: `RESP_SEND`, the user index of its queue, the
/// counter (the WQE counter of an ordinary queue, the stride index of a striding one), the
/// byte count (the striding format's for a striding queue), `wqe_id`, the RSS hash and its
/// type, the raw checksum, the header validity and types, and the rule's flow tag (bits
/// 23..0 of `sop_drop_qpn`).
#[allow(clippy::too_many_arguments)] // Each is a CQE field of its own.
fn eth_cqe(
    uidx: u32,
    counter: u16,
    byte_cnt: u32,
    wqe_id: u16,
    frame: &[u8],
    h: &Headers,
    hash: Option<(u32, u8)>,
    tag: u32,
) -> RawCqe {
    let mut c = cq::resp(uidx, tag, op::RESP_SEND, counter, byte_cnt, [0; 4], false);
    c[2..4].copy_from_slice(&wqe_id.to_be_bytes());
    if let Some((result, ty)) = hash {
        c[12..16].copy_from_slice(&result.to_be_bytes());
        c[16] = ty;
    }
    c[20..22].copy_from_slice(&eth::raw_sum(frame, h).to_be_bytes());
    let mut ok = L2_OK;
    if eth::l3_ok(frame, h) {
        ok |= L3_OK;
    }
    if eth::l4_ok(frame, h) {
        ok |= L4_OK;
    }
    c[28] = ok;
    let mut ty = 0;
    if let Some(ip) = h.ipv4 {
        ty |= HDR_L3_IPV4;
        if ip.hlen > 20 {
            ty |= HDR_IPV4_OPTIONS;
        }
        if ip.fragment {
            ty |= HDR_FRAGMENT;
        }
    }
    if let Some(l4) = h.l4 {
        ty |= match (l4.proto, l4.ack, l4.payload) {
            (eth::IPPROTO_UDP, _, _) => HDR_L4_UDP,
            (_, false, _) => HDR_L4_TCP,
            (_, true, 0) => HDR_L4_TCP_ACK,
            (_, true, _) => HDR_L4_TCP_ACK_DATA,
        };
    }
    c[29] = ty;
    c
}

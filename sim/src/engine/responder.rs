//! The responder: what a QP does with a request from its peer.
//!
//! Contract: a request reaches a QP only from the peer its own connection names
//! ([`Engine::admit_local`], and [`Engine::serve`] for a request from another process);
//! anyone else's is refused with "transport retry exceeded", as a responder that drops the
//! packets leaves its requester. [`Engine::respond`] then does the whole of the responder's
//! side and answers once: `Ok(`[`Ack`]`)` for a request carried out, `Err(`[`Nak`]`)` for one
//! that was not. All of a request's checks — the QP's state, the message length, the remote
//! key, bounds and right, the receive it consumes and that receive's entries — come before
//! any byte moves, so a refused request places nothing. A refusal that IB counts as a class C
//! error (a bad remote key or span, a misaligned atomic, a receive too short or naming memory
//! it may not write) moves the responder to the error state, and one that concerns a receive
//! also completes that receive with an error CQE. An RNR NAK (no receive posted) changes
//! nothing at the responder.
//!
//! Before any of that, the request's PSN is compared with the one the QP expects: only the
//! expected PSN is carried out (and moves the expected PSN past the request's packets); one
//! ahead is answered with a sequence error NAK ([`Nak::Seq`], then [`Nak::Dropped`] until the
//! expected one arrives); one behind is a duplicate, answered without being carried out
//! again ([`Ack::Again`] for a WRITE or SEND, a READ read again, an atomic's kept result).

use zverbs_core::sync::atomic::{AtomicU64, Ordering};
use zverbs_mlx5dv::prm::{fm_ce_se, opcode};

use super::copy::{Span, Spans, copy_spans};
use super::{
    Engine, Fault, LOC_LEN, LOC_PROT, LOC_QP_OP, MAX_MSG, PSN_MASK, REM_ACCESS, REM_INV_REQ,
    REM_OP, RETRY_EXC, mr_vendor, packets, psn_add, psn_diff,
};
use crate::config::{Access, Mr, QpStatus, QpType};
use crate::cq::{self, op};
use crate::faults::DeviceEvent;
use crate::vendor;
use crate::wire::{Message, Request, Response, Status};
use crate::wqe::{DataEntry, MAX_SEGS, Wqe};
use zverbs_mlx5dv::prm::cqe::{self, field};

/// What a requester asks of a responder, apart from the payload bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct Ask {
    pub(super) opcode: u8,
    pub(super) solicited: bool,
    pub(super) raddr: u64,
    pub(super) rkey: u32,
    pub(super) imm: [u8; 4],
    pub(super) len: u64,
    pub(super) swap_add: u64,
    pub(super) compare: u64,
    /// The request's PSN (its first packet's).
    pub(super) psn: u32,
}

impl Ask {
    /// The request WQE `w` makes, for a message of `len` bytes.
    pub(super) fn of(w: &Wqe, len: u64, psn: u32) -> Self {
        Self {
            psn,
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

    /// The request a message from another process makes.
    fn of_request(r: &Request) -> Self {
        Self {
            psn: r.psn & PSN_MASK,
            opcode: r.opcode,
            solicited: r.solicited,
            raddr: r.raddr,
            rkey: r.rkey,
            imm: r.imm,
            len: r.len,
            swap_add: r.swap_add,
            compare: r.compare,
        }
    }
}

/// A request the responder carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Ack {
    /// WRITE, SEND: the data is placed.
    Done,
    /// READ: the checked span of the responder's memory to read.
    Read(Span),
    /// Atomic: the original 8 bytes as they were in memory.
    Atomic(u64),
    /// A duplicate WRITE or SEND, acknowledged again without being carried out again; the
    /// acknowledgement carries the PSN of the last request the responder carried out.
    Again(u32),
}

/// A request the responder did not carry out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Nak {
    /// No receive posted (an RNR NAK): the requester may send the request again.
    Rnr,
    /// Refused: the requester's WQE completes with this error.
    Error(Fault),
    /// PSN sequence error: the request is ahead of the PSN the responder expects (carried);
    /// nothing is done. The requester's retry counter decides what follows.
    Seq(u32),
    /// Dropped without an answer (a repeated out-of-sequence request, or a duplicate atomic
    /// whose result is no longer kept): the requester's timer runs out.
    Dropped,
}

impl From<Fault> for Nak {
    fn from(f: Fault) -> Self {
        Nak::Error(f)
    }
}

impl Nak {
    /// How a response to another process says so; an RNR NAK carries the responder's RNR
    /// timer code `rnr_timer`.
    fn status(self, rnr_timer: u8) -> Status {
        match self {
            Nak::Rnr => Status::Rnr(rnr_timer),
            Nak::Error(f) => Status::Nak(f.syndrome, f.vendor),
            Nak::Seq(_) => Status::Seq,
            Nak::Dropped => Status::Dropped,
        }
    }

    /// What a response from another process that is not an ACK says.
    /// `psn` is the response's.
    pub(super) fn of_status(s: Status, psn: u32) -> Option<Self> {
        match s {
            Status::Ack => None,
            Status::Rnr(_) => Some(Nak::Rnr),
            Status::Nak(syndrome, vendor) => Some(Nak::Error(Fault::new(syndrome, vendor))),
            Status::Seq => Some(Nak::Seq(psn)),
            Status::Dropped => Some(Nak::Dropped),
        }
    }
}

/// A receive a message consumes: an entry of the QP's receive queue (by its counter) or a WQE
/// of a shared receive queue (table entry, WQE index).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Recv {
    Rq(u32),
    Srq { s: usize, index: u16 },
}

/// What a receive CQE reports of the message that consumed it.
#[derive(Clone, Copy, Debug)]
pub(super) struct RecvCqe {
    pub(super) resp_op: u8,
    /// Bytes received (for UD, with the 40-byte GRH area).
    pub(super) len: u64,
    pub(super) imm: [u8; 4],
    pub(super) solicited: bool,
    /// A UD datagram's source, path and GRH.
    pub(super) ud: Option<cq::UdInfo>,
}

impl RecvCqe {
    fn of(resp_op: u8, ask: &Ask, imm: [u8; 4]) -> Self {
        Self {
            resp_op,
            len: ask.len,
            imm,
            solicited: ask.solicited,
            ud: None,
        }
    }
}

/// The kind of a class C error a responder detects, by the event it raises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    /// A remote key, bounds or right refused (`IBV_EVENT_QP_ACCESS_ERR`).
    Access,
    /// A request the responder cannot carry out: a misaligned atomic, a message above 2 GiB
    /// (`IBV_EVENT_QP_REQ_ERR`).
    InvalidRequest,
}

/// Converts an atomic operand to or from its order in memory.
type ByteOrder = fn(u64) -> u64;

impl Engine {
    /// Whether QP `p` serves a request from QP `q` of this device: it must be connected,
    /// name `q` as its peer and be ready to send.
    pub(super) fn admit_local(&mut self, p: usize, q: usize) -> Result<(), Fault> {
        let responder = &self.qps[p];
        if responder.status == QpStatus::Init {
            return Err(Fault::new(RETRY_EXC, vendor::PEER_DOWN));
        }
        if responder.peer != Some(q) {
            // The responder's connection names another QP: it drops the request.
            self.stats.not_peer += 1;
            return Err(Fault::new(RETRY_EXC, vendor::NOT_PEER));
        }
        if responder.status != QpStatus::Rts {
            return Err(Fault::new(RETRY_EXC, vendor::PEER_DOWN));
        }
        Ok(())
    }

    /// Which QP serves the request `r` from another process: its destination, if that QP's
    /// connection names the request's source and the request is whole.
    fn admit_remote(&mut self, r: &Request, writes: bool) -> Result<usize, Fault> {
        let p = self
            .qp_index(r.dst_qpn)
            .map_err(|_| Fault::new(RETRY_EXC, vendor::PEER_DOWN))?;
        if self.qps[p].status == QpStatus::Init {
            return Err(Fault::new(RETRY_EXC, vendor::PEER_DOWN));
        }
        if self.qps[p].remote != Some((r.src_lid, r.src_qpn)) {
            // Not the responder's peer (another QP, at another LID, or a guessed QPN): the
            // request never reaches the QP. Hardware drops it and the requester's retries run
            // out; the answer says so at once.
            self.stats.not_peer += 1;
            return Err(Fault::new(RETRY_EXC, vendor::NOT_PEER));
        }
        if writes && r.payload.len() as u64 != r.len {
            return Err(Fault::new(REM_INV_REQ, vendor::LAYOUT));
        }
        Ok(p)
    }

    /// The responder's work for `ask` at QP `p`: checks, data placement, the receive it
    /// consumes and its CQE.
    ///
    /// # Safety
    ///
    /// `src` (the payload of a WRITE or SEND, covering `ask.len` bytes) is valid for reads.
    pub(super) unsafe fn respond(&mut self, p: usize, ask: &Ask, src: &[Span]) -> Result<Ack, Nak> {
        if self.qps[p].status != QpStatus::Rts {
            return Err(Fault::new(RETRY_EXC, vendor::PEER_DOWN).into());
        }
        let expected = self.qps[p].rq_psn;
        let ahead = psn_diff(ask.psn, expected);
        if ahead > 0 {
            // Out of sequence (an earlier request was lost, or the two sides were given
            // different PSNs): NAK the first such request with the PSN expected, drop the
            // rest until that PSN arrives. Nothing is carried out.
            self.stats.seq_errors += 1;
            if core::mem::replace(&mut self.qps[p].seq_nak_sent, true) {
                return Err(Nak::Dropped);
            }
            return Err(Nak::Seq(expected));
        }
        if ahead < 0 {
            self.stats.duplicates += 1;
            return self.duplicate(p, ask);
        }
        // SAFETY: (caller) the payload is valid for reads.
        let answer = unsafe { self.carry_out(p, ask, src) };
        if let Ok(ack) = answer {
            let qp = &mut self.qps[p];
            qp.rq_psn = psn_add(ask.psn, packets(ask.opcode, ask.len));
            qp.seq_nak_sent = false;
            if let Ack::Atomic(orig) = ack {
                qp.keep_atomic(ask.psn, orig);
            }
        }
        answer
    }

    /// A request behind the PSN QP `p` expects, which it has carried out before (its
    /// acknowledgement was lost): as IB responders do, a WRITE or SEND is acknowledged again
    /// and not placed again, a READ is read again, an atomic is answered with the result kept
    /// from its first execution and not run again (dropped when no longer kept).
    fn duplicate(&mut self, p: usize, ask: &Ask) -> Result<Ack, Nak> {
        match ask.opcode {
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::SEND | opcode::SEND_IMM => {
                Ok(Ack::Again(psn_add(self.qps[p].rq_psn, PSN_MASK)))
            }
            opcode::RDMA_READ => self.read(p, ask),
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => match self.qps[p].kept_atomic(ask.psn) {
                Some(orig) => Ok(Ack::Atomic(orig)),
                None => Err(Nak::Dropped),
            },
            _ => Err(Fault::new(LOC_QP_OP, vendor::OPCODE).into()),
        }
    }

    /// The work of an in-sequence request `ask` at QP `p`.
    ///
    /// # Safety
    ///
    /// As [`Engine::respond`].
    unsafe fn carry_out(&mut self, p: usize, ask: &Ask, src: &[Span]) -> Result<Ack, Nak> {
        if ask.len > MAX_MSG {
            // Only a request from another process can claim this (a local requester checks
            // its own length); its READ would be answered with more than a message can hold.
            self.peer_to_error(p, Class::InvalidRequest);
            return Err(Fault::new(REM_INV_REQ, vendor::MSG_TOO_LONG).into());
        }
        match ask.opcode {
            // SAFETY: (caller) the payload is valid for reads.
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM => unsafe { self.write(p, ask, src) },
            // SAFETY: as above.
            opcode::SEND | opcode::SEND_IMM => unsafe { self.send(p, ask, src) },
            opcode::RDMA_READ => self.read(p, ask),
            opcode::ATOMIC_CS | opcode::ATOMIC_FA => self.atomic(p, ask),
            _ => Err(Fault::new(LOC_QP_OP, vendor::OPCODE).into()),
        }
    }

    /// RDMA WRITE, with or without immediate (which consumes a receive).
    ///
    /// # Safety
    ///
    /// As [`Engine::respond`].
    unsafe fn write(&mut self, p: usize, ask: &Ask, src: &[Span]) -> Result<Ack, Nak> {
        let len = ask.len;
        // A zero-length RDMA WRITE needs no valid remote key (IBA C9-88).
        let dst = if len > 0 {
            let mr = self.remote_check(p, ask, len, Access::REMOTE_WRITE)?;
            Span::of(&mr, ask.raddr, len)
        } else {
            Span::own(ask.raddr, 0)
        };
        let recv = if ask.opcode == opcode::RDMA_WRITE_IMM {
            Some(self.next_recv(p)?)
        } else {
            None
        };
        // SAFETY: the source spans are valid (caller), the destination was checked against
        // the responder's region with remote write.
        unsafe { copy_spans(src, &[dst], len) };
        self.stats.bytes += len;
        if let Some(recv) = recv {
            self.complete_recv(p, recv, RecvCqe::of(op::RESP_WR_IMM, ask, ask.imm));
        }
        Ok(Ack::Done)
    }

    /// SEND, with or without immediate: scattered over the next receive.
    ///
    /// # Safety
    ///
    /// As [`Engine::respond`].
    unsafe fn send(&mut self, p: usize, ask: &Ask, src: &[Span]) -> Result<Ack, Nak> {
        let len = ask.len;
        let recv = self.next_recv(p)?;
        let dst = self.recv_spans(p, recv, len, vendor::RECV_TOO_SHORT)?;
        let room = self.scatter_room(p);
        let mut scattered = None;
        if len > 0 && len <= room {
            // Scatter-to-CQE, as a ConnectX does for a QP created allowing it: the message
            // goes into the CQE (the receive's buffers, checked above, are not written).
            let mut data = [0u8; 64];
            let to = [Span::own(data.as_mut_ptr() as u64, len)];
            // SAFETY: the source spans are valid (caller); `data` holds `len` ≤ 64 bytes.
            unsafe { copy_spans(src, &to, len) };
            scattered = Some(data);
        } else {
            // SAFETY: the source spans are valid (caller), the destination spans were checked
            // against the responder's regions with local write.
            unsafe { copy_spans(src, dst.as_slice(), len) };
        }
        self.stats.bytes += len;
        let (resp_op, imm) = if ask.opcode == opcode::SEND_IMM {
            (op::RESP_SEND_IMM, ask.imm)
        } else {
            (op::RESP_SEND, [0; 4])
        };
        match scattered {
            None => self.complete_recv(p, recv, RecvCqe::of(resp_op, ask, imm)),
            Some(data) => {
                self.complete_recv_scattered(p, recv, RecvCqe::of(resp_op, ask, imm), &data)
            }
        }
        Ok(Ack::Done)
    }

    /// How many bytes of a SEND QP `p` receives may go into the receive CQE: 0 unless it was
    /// created allowing scatter-to-CQE (RC only: the kernel never enables it on UD); 32 with
    /// 64-byte receive CQEs, 64 with 128-byte ones.
    fn scatter_room(&self, p: usize) -> u64 {
        let qp = &self.qps[p];
        if !qp.scatter_to_cqe || qp.qp_type != crate::config::QpType::Rc {
            return 0;
        }
        match self.cqs[qp.recv_cq].cqe_size() {
            128 => 64,
            _ => 32,
        }
    }

    /// RDMA READ: the span to read, checked (the requester copies it).
    fn read(&mut self, p: usize, ask: &Ask) -> Result<Ack, Nak> {
        if ask.len == 0 {
            // As a zero-length WRITE, it needs no valid remote key.
            return Ok(Ack::Read(Span::own(ask.raddr, 0)));
        }
        let mr = self.remote_check(p, ask, ask.len, Access::REMOTE_READ)?;
        Ok(Ack::Read(Span::of(&mr, ask.raddr, ask.len)))
    }

    /// Compare-and-swap or fetch-and-add on 8 aligned bytes.
    fn atomic(&mut self, p: usize, ask: &Ask) -> Result<Ack, Nak> {
        if !ask.raddr.is_multiple_of(8) {
            self.peer_to_error(p, Class::InvalidRequest);
            return Err(Fault::new(REM_INV_REQ, vendor::ATOMIC_ALIGN).into());
        }
        self.remote_check(p, ask, 8, Access::REMOTE_ATOMIC)?;
        // SAFETY: the 8 aligned bytes lie in the responder's region with remote atomic
        // access; `AtomicU64` has the layout of `u64`. The value in memory is big-endian (a
        // ConnectX in its big-endian requester mode), or host-endian when the device was set
        // so (the mode the Linux driver configures when the firmware offers it, and then
        // advertises IBV_ATOMIC_HCA).
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
        Ok(Ack::Atomic(orig))
    }

    /// Checks the remote span of a WRITE, READ or atomic; on failure the responder enters the
    /// error state (class C).
    fn remote_check(&mut self, p: usize, ask: &Ask, len: u64, need: Access) -> Result<Mr, Fault> {
        self.mrs
            .check_remote(ask.rkey, ask.raddr, len, need)
            .map_err(|f| {
                let v = mr_vendor(
                    f,
                    vendor::RKEY,
                    vendor::REMOTE_BOUNDS,
                    vendor::REMOTE_ACCESS,
                );
                Fault::new(REM_ACCESS, v)
            })
            .inspect_err(|_| self.peer_to_error(p, Class::Access))
    }

    /// The receive the next inbound message at `p` consumes: the next of its receive queue,
    /// or of its shared receive queue. None posted (or the next one dropped by injection) is
    /// an RNR NAK; a doorbell record that claims more than a ring completes the receive with
    /// an error, and the QP enters the error state (an SRQ's malformed ring puts the SRQ in
    /// the error state instead).
    pub(super) fn next_recv(&mut self, p: usize) -> Result<Recv, Nak> {
        if core::mem::take(&mut self.qps[p].drop_next_recv) {
            return Err(Nak::Rnr);
        }
        if let Some(s) = self.qps[p].srq {
            return self.srq_peek(s).map(|index| Recv::Srq { s, index });
        }
        let Some(rq) = self.qps[p].mem.rq else {
            return Err(Nak::Rnr);
        };
        let avail = self.rq_doorbell(p);
        if avail == 0 {
            return Err(Nak::Rnr);
        }
        if avail > rq.cnt {
            self.stats.bad_doorbells += 1;
            self.recv_fail(p, Recv::Rq(self.qps[p].rq_ci), LOC_QP_OP, vendor::DOORBELL);
            return Err(Fault::new(REM_OP, vendor::REMOTE_RECV).into());
        }
        Ok(Recv::Rq(self.qps[p].rq_ci))
    }

    /// The spans of receive `recv` at `p` that a message of `len` bytes fills, checked. On a
    /// failure the receive completes with an error at the responder (`short`: the vendor
    /// syndrome of a receive too short), which enters the error state, and the requester's
    /// failure is returned.
    pub(super) fn recv_spans(
        &mut self,
        p: usize,
        recv: Recv,
        len: u64,
        short: u8,
    ) -> Result<Spans, Nak> {
        let mut entries = [DataEntry::default(); MAX_SEGS];
        let n = match recv {
            Recv::Rq(ci) => match self.qps[p].mem.rq {
                Some(rq) => rq.entries(ci, &mut entries),
                None => return Err(Nak::Rnr),
            },
            Recv::Srq { s, index } => self.srqs[s].ring.entries(u32::from(index), &mut entries),
        };
        let capacity: u64 = entries[..n].iter().map(|e| e.len).sum();
        if capacity < len {
            // The responder reports a local length error on the receive; the requester sees
            // the NAK as "remote invalid request" (as on mlx5 and rxe).
            self.recv_fail(p, recv, LOC_LEN, short);
            return Err(Fault::new(REM_INV_REQ, short).into());
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
                    self.recv_fail(p, recv, LOC_PROT, v);
                    return Err(Fault::new(REM_OP, vendor::REMOTE_RECV).into());
                }
            };
            spans.push(Span::of(&mr, e.addr, used));
            left -= used;
        }
        Ok(spans)
    }

    /// Takes receive `recv` off its queue; returns what its CQE carries in `srqn_uidx` and
    /// `wqe_counter`: the QP's user index and the receive counter, or for a shared receive
    /// queue the SRQ number (the user index when the driver chose one, CQE version 1) and
    /// the WQE's index.
    fn consume_recv(&mut self, p: usize, recv: Recv) -> (u32, u16) {
        match recv {
            Recv::Rq(ci) => {
                let qp = &mut self.qps[p];
                qp.rq_ci = ci.wrapping_add(1);
                (qp.uidx, ci as u16)
            }
            Recv::Srq { s, index } => {
                self.srq_consume(s, index);
                let qp = &self.qps[p];
                let id = if qp.uidx_set {
                    qp.uidx
                } else {
                    self.srqs[s].srqn
                };
                (id, index)
            }
        }
    }

    /// Consumes receive `recv` at `p` for the message `m` and returns its responder CQE
    /// (what every receive completion reports; the callers add the rest).
    fn consume_into_cqe(&mut self, p: usize, recv: Recv, m: &RecvCqe) -> cq::RawCqe {
        let (id, counter) = self.consume_recv(p, recv);
        cq::resp(
            id,
            self.qps[p].qpn,
            m.resp_op,
            counter,
            m.len as u32,
            m.imm,
            m.solicited,
        )
    }

    /// Completes receive `recv` at `p`, consumed by a message of `len` bytes, with a
    /// `resp_op` CQE; `ud` adds what a UD receive reports.
    pub(super) fn complete_recv(&mut self, p: usize, recv: Recv, m: RecvCqe) {
        let mut cqe = self.consume_into_cqe(p, recv, &m);
        let peer = &self.qps[p];
        if let Some(ud) = m.ud {
            cq::set_ud(
                &mut cqe,
                &ud,
                m.resp_op != op::RESP_SEND_IMM,
                peer.pkey_index,
            );
        }
        let cqn = peer.recv_cq;
        self.push_cqe(cqn, cqe);
        self.stats.recvs += 1;
    }

    /// [`Engine::complete_recv`] for a message whose `data` (its first `m.len` bytes) goes
    /// into the CQE: in its first 32 bytes with 64-byte CQEs (`INLINE_SCATTER_32`), in the
    /// first half of the 128-byte entry otherwise (`INLINE_SCATTER_64`).
    fn complete_recv_scattered(&mut self, p: usize, recv: Recv, m: RecvCqe, data: &[u8; 64]) {
        let mut cqe = self.consume_into_cqe(p, recv, &m);
        let cqn = self.qps[p].recv_cq;
        let head = if self.cqs[cqn].cqe_size() == 128 {
            cqe[field::OP_OWN] |= cqe::INLINE_SCATTER_64;
            Some(*data)
        } else {
            cqe[field::OP_OWN] |= cqe::INLINE_SCATTER_32;
            cqe[..32].copy_from_slice(&data[..32]);
            None
        };
        self.push_cqe_with_head(cqn, cqe, head);
        self.stats.recvs += 1;
        self.stats.scattered += 1;
    }

    /// Moves QP `p` to the error state (a responder-detected error of class C) and raises
    /// the asynchronous event a ConnectX raises for it: `IBV_EVENT_QP_ACCESS_ERR` for a
    /// remote access violation, `IBV_EVENT_QP_REQ_ERR` for an invalid request (then, on an
    /// SRQ, `IBV_EVENT_QP_LAST_WQE_REACHED`). So the responder's side learns that its QP
    /// left RTS, as the requester learns it from its error completion.
    fn peer_to_error(&mut self, p: usize, class: Class) {
        if self.qps[p].qp_type == QpType::Dct {
            // A DC target serves every initiator: one initiator's bad request fails that
            // initiator alone.
            return;
        }
        let qpn = self.qps[p].qpn;
        let was = core::mem::replace(&mut self.qps[p].status, QpStatus::Error);
        if was != QpStatus::Error {
            self.qp_event(
                p,
                match class {
                    Class::Access => DeviceEvent::QpAccessError { qpn },
                    Class::InvalidRequest => DeviceEvent::QpRequestError { qpn },
                },
            );
        }
    }

    /// Completes receive `recv` at `p` with an error; the QP enters the error state.
    pub(super) fn recv_fail(&mut self, p: usize, recv: Recv, syndrome: u8, vendor: u8) {
        let (id, counter) = self.consume_recv(p, recv);
        let qp = &mut self.qps[p];
        let cqe = cq::err(id, qp.qpn, op::RESP_ERR, 0, counter, syndrome, vendor);
        qp.status = QpStatus::Error;
        let cqn = qp.recv_cq;
        self.push_cqe(cqn, cqe);
    }

    /// The responder's side of a request from another process; the answer goes back through
    /// the wire.
    pub(super) fn serve(&mut self, r: &Request) {
        let writes = matches!(
            r.opcode,
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::SEND | opcode::SEND_IMM
        );
        let ask = Ask::of_request(r);
        let admitted = match r.dc_key {
            Some(key) => self.admit_dc(r.dst_qpn, key, r.psn).and_then(|p| {
                if writes && r.payload.len() as u64 != r.len {
                    Err(Fault::new(REM_INV_REQ, vendor::LAYOUT))
                } else {
                    Ok(p)
                }
            }),
            None => self.admit_remote(r, writes),
        };
        let (answer, rnr_timer) = match admitted {
            Err(f) => (Err(Nak::Error(f)), 0),
            Ok(p) => {
                let src = [Span::own(r.payload.as_ptr() as u64, r.payload.len() as u64)];
                // SAFETY: the payload is the message's own bytes.
                let answer = unsafe { self.respond(p, &ask, if writes { &src } else { &[] }) };
                (answer, self.qps[p].min_rnr_timer)
            }
        };
        // An acknowledgement carries the request's last PSN; a duplicate's, the last request
        // carried out; a sequence error NAK, the PSN expected.
        let last = psn_add(ask.psn, packets(ask.opcode, ask.len).saturating_sub(1));
        let psn = match answer {
            Ok(Ack::Again(psn)) | Err(Nak::Seq(psn)) => psn,
            _ => last,
        };
        let (status, data) = match answer {
            Ok(Ack::Done | Ack::Again(_)) => (Status::Ack, Vec::new()),
            Ok(Ack::Read(span)) => {
                let mut v = std::vec![0u8; span.len as usize];
                let dst = [Span::own(v.as_mut_ptr() as u64, span.len)];
                // SAFETY: `respond` checked the span for remote read; the destination is the
                // new buffer.
                unsafe { copy_spans(&[span], &dst, span.len) };
                self.stats.bytes += span.len;
                (Status::Ack, v)
            }
            Ok(Ack::Atomic(orig)) => (Status::Ack, orig.to_ne_bytes().to_vec()),
            Err(nak) => (nak.status(rnr_timer), Vec::new()),
        };
        if let Some((wire, my_lid)) = &self.wire {
            let resp = Response {
                src_lid: *my_lid,
                src_qpn: r.dst_qpn,
                dst_qpn: r.src_qpn,
                seq: r.seq,
                psn,
                status,
                data,
            };
            wire.send(r.src_lid, Message::Response(resp).encode());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A NAK sent back to another process is read there as the same NAK; an ACK is none.
    #[test]
    fn naks_cross_the_wire_unchanged() {
        for nak in [
            Nak::Rnr,
            Nak::Error(Fault::new(REM_ACCESS, vendor::RKEY)),
            Nak::Error(Fault::new(RETRY_EXC, vendor::NOT_PEER)),
            Nak::Seq(0xff_ffff),
            Nak::Dropped,
        ] {
            assert_eq!(Nak::of_status(nak.status(12), 0xff_ffff), Some(nak));
        }
        assert_eq!(Nak::of_status(Status::Ack, 0), None);
    }
}

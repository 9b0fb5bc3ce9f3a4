//! The requester: what a QP does with the send WQEs its driver posts.
//!
//! Contract: each step takes at most one WQE per QP — the one at the send consumer counter,
//! once the doorbell record publishes all of it — and completes it before the next one
//! starts. The requester checks its own side first (the WQE's layout, the keys, bounds and
//! rights of its gather list or READ destination, the message length); a WQE that fails them,
//! or that an injected failure hits, completes with an error CQE and moves the QP to the error
//! state, where every published WQE is flushed. A WQE that passes goes to the responder — a
//! direct call for a peer of this device, a [`Request`] through the [`Wire`](crate::wire::Wire)
//! for one in another process, with one request in flight per QP — and its completion is what
//! the responder answered: a CQE when signaled (READ data and atomic results placed first), an
//! error CQE always. An RNR NAK leaves the WQE where it is, to be sent again until the QP's RNR
//! retries run out. A request carries the QP's next PSN; an acknowledgement counts only if it
//! names the request's last PSN, and the PSN moves past the request's packets only then. No
//! valid acknowledgement (a sequence error NAK, a drop, a lost or foreign acknowledgement)
//! leaves the WQE where it is too, to be sent again until the QP's transport retries run out.

use std::time::Instant;

use zverbs_mlx5dv::prm::{fm_ce_se, opcode};

use super::copy::{Span, Spans, copy_spans};
use super::queues::Pending;
use super::responder::{Ack, Ask, Nak};
use super::{
    Engine, FLUSH, Fault, LOC_LEN, LOC_PROT, LOC_QP_OP, MAX_MSG, RETRY_EXC, RNR_EXC, mr_vendor,
    packets, psn_add,
};
use crate::config::{Access, QpStatus, QpType, RNR_RETRY_INFINITE};
use crate::cq::{self, op};
use crate::vendor;
use crate::wire::{Message, Request, Response, Status};
use crate::wqe::{Payload, Wqe};

/// How a send WQE ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Success; the requester CQE's byte count.
    Done(u32),
    /// The peer had no receive: retry later; a peer in another process says when (its RNR
    /// timer code), a peer in this device is asked again at the next step.
    Rnr(Option<u8>),
    /// No valid acknowledgement (lost, a sequence error NAK, a PSN that is not the
    /// request's): send again, counted against the QP's retry count.
    Retry,
    /// Failed: an error CQE, and the QP enters the error state.
    Fail(Fault),
}

impl From<Nak> for Outcome {
    fn from(nak: Nak) -> Self {
        match nak {
            Nak::Rnr => Outcome::Rnr(None),
            Nak::Error(f) => Outcome::Fail(f),
            Nak::Seq(_) | Nak::Dropped => Outcome::Retry,
        }
    }
}

/// The bytes of `w`'s message: its payload, the bytes a READ reads, 8 for an atomic.
fn msg_len(w: &Wqe) -> u64 {
    match (w.opcode, w.payload) {
        (opcode::ATOMIC_CS | opcode::ATOMIC_FA, _) => 8,
        (_, Payload::Inline { len, .. }) => u64::from(len),
        (_, Payload::Sges(n)) => w.sges[..n].iter().map(|e| e.len).sum(),
    }
}

/// The PSN of the last packet of a request at `psn` (a READ's last response packet's).
pub(super) fn last_psn(psn: u32, opcode: u8, len: u64) -> u32 {
    psn_add(psn, packets(opcode, len).saturating_sub(1))
}

impl Engine {
    /// Executes or flushes the next published send WQE of QP `q`; returns the work done.
    pub(super) fn service_sq(&mut self, q: usize) -> usize {
        if self.qps[q].status == QpStatus::Init {
            return 0;
        }
        if let Some(p) = self.qps[q].pending {
            if self.qps[q].status == QpStatus::Error {
                // In the error state the request in flight is flushed like every other: its
                // answer, if one still comes, matches nothing.
                self.qps[q].pending = None;
            } else {
                match self.transport_deadline(q, p.sent) {
                    Some(at) if Instant::now() >= at => {
                        // No answer within the transport timer: sent again, or failed with
                        // "transport retry exceeded" once the retries have run out.
                        self.qps[q].pending = None;
                        self.stats.timeouts += 1;
                        return self.finish(q, &p.wqe, Outcome::Retry);
                    }
                    _ => return 0,
                }
            }
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
            self.fail(q, Fault::new(LOC_QP_OP, vendor::DOORBELL), op, 0);
            return 1;
        }
        let parsed = match qp.qp_type {
            QpType::Dci => sq.parse_dc(qp.sq_ci, avail, qp.qpn),
            QpType::RawPacket => super::raw::parse_raw(&sq, qp.sq_ci, avail, qp.qpn),
            _ => sq.parse(qp.sq_ci, avail, qp.qpn, qp.qp_type == QpType::Ud),
        };
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
                self.fail(q, Fault::new(LOC_QP_OP, b.vendor), b.opcode, b.blocks);
                return 1;
            }
        };
        if let Some(f) = self.qps[q].fail_next.take() {
            self.fail(q, f, w.opcode, w.blocks);
            return 1;
        }
        if self.port_down_fails(q, w.opcode, w.blocks) {
            return 1;
        }
        if self.qps[q].qp_type == QpType::RawPacket {
            // A frame completes once it has left through the port.
            let outcome = match self.execute_raw(q, &w) {
                Ok(()) => Outcome::Done(0),
                Err(f) => Outcome::Fail(f),
            };
            return self.finish(q, &w, outcome);
        }
        if self.qps[q].qp_type == QpType::Ud {
            // A UD send completes once sent: nothing comes back.
            let outcome = match self.execute_ud(q, &w) {
                Ok(()) => Outcome::Done(0),
                Err(f) => Outcome::Fail(f),
            };
            return self.finish(q, &w, outcome);
        }
        if self.qps[q].qp_type == QpType::Dci {
            if let Some((lid, dctn, key)) = self.remote_dc_target(&w) {
                // A target in another process: a request through the wire, answered as an RC
                // responder's, from the LID and number the initiator sent to.
                self.qps[q].remote = Some((lid, dctn));
                return self.send_remote(q, &w, lid, dctn, Some(key));
            }
            let outcome = self.execute_dc(q, &w);
            return self.finish(q, &w, outcome);
        }
        if let Some((lid, qpn)) = self.qps[q].remote {
            if w.opcode == opcode::NOP {
                return self.finish(q, &w, Outcome::Done(0));
            }
            return self.send_remote(q, &w, lid, qpn, None);
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
                qp.retry_left = None;
                qp.sq_psn = psn_add(qp.sq_psn, packets(w.opcode, msg_len(w)));
                let cqn = qp.send_cq;
                if w.fm_ce_se & fm_ce_se::CQ_UPDATE != 0 {
                    self.push_cqe(cqn, cqe);
                }
                self.stats.wqes_ok += 1;
                1
            }
            Outcome::Rnr(timer) => {
                self.stats.rnr_naks += 1;
                let at = timer.map(|code| self.rnr_deadline(code));
                let qp = &mut self.qps[q];
                // A peer in another process: sent again once the RNR timer its NAK carried
                // has run.
                qp.resend_at = at;
                if qp.rnr_retry == RNR_RETRY_INFINITE {
                    return 0;
                }
                let left = qp.rnr_left.unwrap_or(qp.rnr_retry);
                if left == 0 {
                    self.fail(q, Fault::new(RNR_EXC, vendor::RNR), w.opcode, w.blocks);
                } else {
                    qp.rnr_left = Some(left - 1);
                }
                1
            }
            Outcome::Retry => {
                self.stats.retries += 1;
                let qp = &mut self.qps[q];
                let left = qp.retry_left.unwrap_or(qp.retry_cnt);
                if left == 0 {
                    self.fail(q, Fault::new(RETRY_EXC, vendor::RETRY), w.opcode, w.blocks);
                } else {
                    qp.retry_left = Some(left - 1);
                }
                1
            }
            Outcome::Fail(f) => {
                self.fail(q, f, w.opcode, w.blocks);
                1
            }
        }
    }

    /// Completes the WQE at the send consumer counter with an error and moves the QP to the
    /// error state.
    pub(super) fn fail(&mut self, q: usize, f: Fault, wqe_opcode: u8, blocks: u32) {
        let qp = &mut self.qps[q];
        let cqe = cq::err(
            qp.uidx,
            qp.qpn,
            op::REQ_ERR,
            wqe_opcode,
            qp.sq_ci as u16,
            f.syndrome,
            f.vendor,
        );
        qp.sq_ci = qp.sq_ci.wrapping_add(blocks);
        qp.status = QpStatus::Error;
        qp.rnr_left = None;
        qp.retry_left = None;
        let cqn = qp.send_cq;
        self.push_cqe(cqn, cqe);
        self.stats.wqes_failed += 1;
    }

    /// The local spans of a WRITE or SEND payload (`need`: rights on each, none to read) or of
    /// a READ destination, and the message length.
    pub(super) fn local_spans(
        &self,
        q: usize,
        w: &Wqe,
        need: Access,
    ) -> Result<(Spans, u64), Fault> {
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
                    return Err(Fault::new(LOC_LEN, vendor::MSG_TOO_LONG));
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
                            Fault::new(LOC_PROT, v)
                        })?;
                    spans.push(Span::of(&mr, e.addr, e.len));
                }
                Ok((spans, total))
            }
        }
    }

    /// The requester's own checks of `w`: the spans it reads (WRITE, SEND) or writes (READ,
    /// the atomic's result), and the message length.
    pub(super) fn requester_spans(&self, q: usize, w: &Wqe) -> Result<(Spans, u64), Fault> {
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
                        Fault::new(LOC_PROT, v)
                    })?;
                let mut s = Spans::new();
                s.push(Span::of(&mr, local.addr, 8));
                Ok((s, 8))
            }
            _ => self.local_spans(q, w, Access::NONE),
        }
    }

    /// Turns a responder's answer into the requester's outcome, placing READ data and atomic
    /// results into the local spans.
    ///
    /// # Safety
    ///
    /// `spans` were checked by [`Engine::requester_spans`] for this WQE; a `Read` span lies in
    /// memory the responder checked for remote read (or in a response's own bytes).
    pub(super) unsafe fn conclude(
        &mut self,
        answer: Result<Ack, Nak>,
        spans: &Spans,
        len: u64,
        last_psn: u32,
    ) -> Outcome {
        match answer {
            Ok(Ack::Done) => Outcome::Done(0),
            // A duplicate acknowledged again: it acknowledges this request only if it names
            // the request's last PSN; otherwise the requester ignores it (a ghost
            // acknowledgement) and its timer runs out.
            Ok(Ack::Again(psn)) if psn == last_psn => Outcome::Done(0),
            Ok(Ack::Again(_)) => Outcome::Retry,
            Ok(Ack::Read(src)) => {
                // SAFETY: (caller) the source was checked by the responder, the destination
                // spans by the requester (local write).
                unsafe { copy_spans(&[src], spans.as_slice(), len) };
                self.stats.bytes += len;
                Outcome::Done(len as u32)
            }
            Ok(Ack::Atomic(mut orig)) => {
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
            Err(nak) => nak.into(),
        }
    }

    /// Executes `w` against a peer in this device.
    fn execute(&mut self, q: usize, w: &Wqe) -> Outcome {
        let Some(p) = self.qps[q].peer else {
            return Outcome::Fail(Fault::new(RETRY_EXC, vendor::PEER_DOWN));
        };
        if let Err(f) = self.admit_local(p, q) {
            return Outcome::Fail(f);
        }
        if w.opcode == opcode::NOP {
            return Outcome::Done(0);
        }
        self.run_local(q, p, w)
    }

    /// Carries out `w` of QP `q` at the QP `p` of this device, admitted to take it: the
    /// requester's checks, the responder's answer and the requester's outcome.
    pub(super) fn run_local(&mut self, q: usize, p: usize, w: &Wqe) -> Outcome {
        let (spans, len) = match self.requester_spans(q, w) {
            Ok(x) => x,
            Err(f) => return Outcome::Fail(f),
        };
        let src = if matches!(
            w.opcode,
            opcode::RDMA_READ | opcode::ATOMIC_CS | opcode::ATOMIC_FA
        ) {
            Spans::new()
        } else {
            spans
        };
        let psn = self.qps[q].sq_psn;
        // SAFETY: the payload spans were checked against registered regions (or lie in the
        // send ring).
        let answer = unsafe { self.respond(p, &Ask::of(w, len, psn), src.as_slice()) };
        if core::mem::take(&mut self.qps[q].lose_next_ack) {
            // The responder did its work; its answer never arrives.
            return Outcome::Retry;
        }
        // SAFETY: `spans` come from `requester_spans`; a READ span was checked by `respond`.
        unsafe { self.conclude(answer, &spans, len, last_psn(psn, w.opcode, len)) }
    }

    /// Sends `w` to the peer QP `qpn` in the device instance at `lid` (with `dc_key`, to the DC
    /// target `qpn` there).
    fn send_remote(&mut self, q: usize, w: &Wqe, lid: u16, qpn: u32, dc_key: Option<u64>) -> usize {
        let (spans, len) = match self.requester_spans(q, w) {
            Ok(x) => x,
            Err(f) => return self.finish(q, w, Outcome::Fail(f)),
        };
        let Some((wire, my_lid)) = self.wire.clone() else {
            return self.finish(
                q,
                w,
                Outcome::Fail(Fault::new(RETRY_EXC, vendor::PEER_DOWN)),
            );
        };
        let mut payload = Vec::new();
        if matches!(
            w.opcode,
            opcode::RDMA_WRITE | opcode::RDMA_WRITE_IMM | opcode::SEND | opcode::SEND_IMM
        ) {
            payload.resize(len as usize, 0);
            let dst = [Span::own(payload.as_mut_ptr() as u64, len)];
            // SAFETY: the spans were checked (or lie in the send ring); the destination is the
            // new buffer of `len` bytes.
            unsafe { copy_spans(spans.as_slice(), &dst, len) };
        }
        let ask = Ask::of(w, len, self.qps[q].sq_psn);
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        let qp = &mut self.qps[q];
        qp.pending = Some(Pending {
            seq,
            wqe: *w,
            sent: Instant::now(),
        });
        let req = Request {
            src_lid: my_lid,
            src_qpn: qp.qpn,
            dst_qpn: qpn,
            seq,
            psn: ask.psn,
            opcode: ask.opcode,
            solicited: ask.solicited,
            raddr: ask.raddr,
            rkey: ask.rkey,
            imm: ask.imm,
            len: ask.len,
            swap_add: ask.swap_add,
            compare: ask.compare,
            dc_key,
            payload,
        };
        wire.send(lid, Message::Request(req).encode());
        1
    }

    /// The requester's side of an answer from another process.
    pub(super) fn complete_remote(&mut self, r: &Response) {
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
        if core::mem::take(&mut self.qps[q].lose_next_ack) {
            // Lost on its way: the request is sent again.
            self.finish(q, &w, Outcome::Retry);
            return;
        }
        if let Status::Rnr(timer) = r.status {
            self.finish(q, &w, Outcome::Rnr(Some(timer)));
            return;
        }
        let outcome = match self.requester_spans(q, &w) {
            Err(f) => Outcome::Fail(f),
            Ok((spans, len)) => {
                let last = last_psn(self.qps[q].sq_psn, w.opcode, len);
                // A response that does not fit the request fails the WQE as a malformed one;
                // an acknowledgement that names another PSN is ignored (the request is sent
                // again).
                let answer = match Nak::of_status(r.status, r.psn) {
                    Some(nak) => Err(nak),
                    None if r.psn != last => Ok(Ack::Again(r.psn)),
                    None => match w.opcode {
                        opcode::RDMA_READ if r.data.len() as u64 == len => {
                            Ok(Ack::Read(Span::own(r.data.as_ptr() as u64, len)))
                        }
                        opcode::ATOMIC_CS | opcode::ATOMIC_FA => match r.data.as_slice().try_into()
                        {
                            Ok(b) => Ok(Ack::Atomic(u64::from_ne_bytes(b))),
                            Err(_) => Err(Nak::Error(Fault::new(LOC_QP_OP, vendor::LAYOUT))),
                        },
                        opcode::RDMA_READ => Err(Nak::Error(Fault::new(LOC_QP_OP, vendor::LAYOUT))),
                        _ => Ok(Ack::Done),
                    },
                };
                // SAFETY: `spans` come from `requester_spans`; READ data is the response's own
                // bytes, of the length asked.
                unsafe { self.conclude(answer, &spans, len, last) }
            }
        };
        self.finish(q, &w, outcome);
    }
}

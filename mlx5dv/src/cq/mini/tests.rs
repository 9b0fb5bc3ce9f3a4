//! Compressed sessions against the same completions written one by one.

extern crate std;

use std::vec::Vec;

use super::INVALID_OP_OWN;
use crate::prm::mini::{FORMAT_MASK, MiniCqe, MiniCqeFormat, PER_ARRAY, array_entry};
use crate::prm::opcode;
use crate::testutil::{QPN, Rig, caps, req_cqe, resp_cqe};
use zverbs_core::{
    Completion, PollCq, PollCqTimed, PostRecv, PostSend, RecvWr, SendWr, Sge, TimedCompletion,
    WcOpcode, WcStatus,
};

/// What the device completes, in order.
#[derive(Clone, Copy, Debug)]
enum Ev {
    /// `n` receives of one kind (CQE opcode `cqe_op`, immediate `imm`) in a run the device
    /// may compress.
    Recv { n: u32, cqe_op: u8, imm: u32 },
    /// One signaled NOP's requester CQE (never compressed here).
    Send,
}

/// A rig and the device's producer counter over its CQ.
struct Dev {
    rig: Rig,
    pi: u32,
    /// The next receive's `wr_id` and WQE counter.
    recvs: u32,
    sends: u64,
    compress: Option<MiniCqeFormat>,
}

const CQES: u32 = 16;

impl Dev {
    fn new(compress: Option<MiniCqeFormat>) -> Self {
        Self {
            rig: Rig::with_sizes(64, 0, caps(1, 0), CQES, 64),
            pi: 0,
            recvs: 0,
            sends: 0,
            compress,
        }
    }

    fn slot(&self, counter: u32) -> usize {
        (counter % CQES) as usize
    }

    fn owner(&self, counter: u32) -> u8 {
        ((counter / CQES) & 1) as u8
    }

    /// The length the `i`th receive reports.
    fn len_of(i: u32) -> u32 {
        i.wrapping_mul(2_654_435_761) >> 16
    }

    /// Writes `ev`'s CQEs, posting the requests they complete first.
    fn put(&mut self, ev: Ev) {
        match ev {
            Ev::Send => {
                let wqe = self.rig.sq.producer() as u16;
                // SAFETY: never executed by a device.
                unsafe {
                    self.rig
                        .sq
                        .post(&SendWr::nop(1_000_000 + self.sends).signaled())
                }
                .unwrap();
                self.sends += 1;
                let c = req_cqe(QPN, opcode::NOP, wqe, 0, self.owner(self.pi));
                self.rig.mem.put_cqe(self.slot(self.pi), c);
                self.pi += 1;
            }
            Ev::Recv { n, cqe_op, imm } => {
                let sgl = [Sge::new(0x1000, 1 << 20, 1)];
                let first = self.recvs;
                for i in 0..n {
                    // SAFETY: never executed by a device.
                    unsafe { self.rig.rq.post(&RecvWr::new(u64::from(first + i), &sgl)) }.unwrap();
                }
                self.recvs += n;
                match self.compress {
                    Some(format) if n >= 2 => self.put_session(first, n, cqe_op, imm, format),
                    _ => {
                        for i in first..first + n {
                            let mut c = resp_cqe(QPN, cqe_op, Self::len_of(i), imm, 0);
                            c[60..62].copy_from_slice(&(i as u16).to_be_bytes());
                            c[63] |= self.owner(self.pi);
                            self.rig.mem.put_cqe(self.slot(self.pi), c);
                            self.pi += 1;
                        }
                    }
                }
            }
        }
    }

    /// A session of `n` receives from the `first`th: the arrays, then the title. The first
    /// word of each mini-CQE carries something of the format (and nothing the completion
    /// reports); the stale bytes of the entries the device leaves are garbage.
    fn put_session(&mut self, first: u32, n: u32, cqe_op: u8, imm: u32, format: MiniCqeFormat) {
        let at = self.pi;
        for e in 1..n {
            // Holes: stale bytes that would pass an owner check of this pass.
            let mut junk = [0xa5u8; 64];
            junk[63] = (2 << 4) | self.owner(at + e);
            self.rig.mem.put_raw(self.slot(at + e), junk);
        }
        for k in 0..n.div_ceil(PER_ARRAY as u32) {
            let mut a = [0x5au8; 64];
            for m in 0..PER_ARRAY as u32 {
                let j = k * PER_ARRAY as u32 + m;
                if j >= n {
                    break;
                }
                let i = first + j;
                let b = &mut a[m as usize * 8..m as usize * 8 + 8];
                let mut v = MiniCqe::new_unchecked(b);
                match format {
                    MiniCqeFormat::Hash => v.set_rx_hash_result(i ^ 0x8765_4321),
                    MiniCqeFormat::Csum => {
                        v.set_checksum(i as u16 ^ 0xffff);
                        v.set_stride_idx(0);
                    }
                    _ => {
                        v.set_checksum(0x1234);
                        v.set_stride_idx(j as u16);
                    }
                }
                v.set_byte_cnt(Self::len_of(i));
            }
            self.rig.mem.put_raw(self.slot(at + array_entry(k)), a);
        }
        let mut t = resp_cqe(QPN, cqe_op, n, imm, 0);
        t[60..62].copy_from_slice(&(first as u16).to_be_bytes());
        t[63] |= FORMAT_MASK | self.owner(at);
        self.rig.mem.put_cqe(self.slot(at), t);
        self.pi += n;
    }

    /// Room for `ev`'s CQEs in the CQ.
    fn fits(&self, ev: Ev) -> bool {
        let n = match ev {
            Ev::Send => 1,
            Ev::Recv { n, .. } => n,
        };
        self.pi - self.rig.cq.consumer() + n <= CQES
    }

    /// Polls with slices of `slice` until nothing comes.
    fn drain(&mut self, slice: usize, got: &mut Vec<Completion>) {
        let mut wc = [Completion::EMPTY; CQES as usize];
        for polls in 0.. {
            // Each poll but the last takes at least one of the ring's entries: a poll that
            // never comes back empty is a fault, not something to wait for.
            assert!(polls <= CQES, "the CQ never runs dry");
            let n = self.rig.cq.poll(&mut wc[..slice]);
            got.extend_from_slice(&wc[..n]);
            if n == 0 {
                break;
            }
        }
        assert_eq!(self.rig.cq.consumer(), self.pi, "every entry consumed");
        assert_eq!(
            self.rig.mem.cq_dbrec(),
            self.pi & 0x00ff_ffff,
            "and published"
        );
    }
}

/// Runs `evs` (each written when the CQ has room for it, polling with `slice` otherwise) and
/// returns the completions.
fn run(evs: &[Ev], slice: usize, compress: Option<MiniCqeFormat>) -> Vec<Completion> {
    let mut d = Dev::new(compress);
    let mut got = Vec::new();
    for &ev in evs {
        if !d.fits(ev) {
            d.drain(slice, &mut got);
        }
        d.put(ev);
    }
    d.drain(slice, &mut got);
    got
}

fn recv(n: u32) -> Ev {
    Ev::Recv {
        n,
        cqe_op: 2,
        imm: 0,
    }
}

/// Every session length that fits the ring, at every position of the ring, each format, and
/// polls that stop anywhere inside a session.
#[test]
fn every_length_position_and_format_matches_plain_delivery() {
    let slices = [1, 3, 7, 8, 16];
    for n in 2..=CQES {
        for start in 0..CQES {
            // Under Miri (100 times slower), from each start the length `2 + 4 × start mod 15`
            // (every length; ten of the sessions wrap, each at another entry, six do not),
            // polled with one slice and compressed in one format, both in turn.
            let (slice_at, format_at) = (start as usize % slices.len(), start as usize % 3);
            if cfg!(miri) && n != 2 + 4 * start % 15 {
                continue;
            }
            // `start` single receives move the session to `start`.
            let mut evs: Vec<Ev> = (0..start).map(|_| recv(1)).collect();
            evs.push(recv(n));
            evs.push(Ev::Send);
            for (i, &slice) in slices.iter().enumerate() {
                if cfg!(miri) && i != slice_at {
                    continue;
                }
                let want = run(&evs, slice, None);
                assert_eq!(want.len(), (start + n + 1) as usize);
                for (j, f) in MiniCqeFormat::ALL.into_iter().enumerate() {
                    if cfg!(miri) && j != format_at {
                        continue;
                    }
                    let got = run(&evs, slice, Some(f));
                    assert_eq!(got, want, "n {n} start {start} slice {slice} {f:?}");
                }
            }
        }
    }
}

/// Sends between sessions, sessions of each opcode, immediates, several passes over the ring.
#[test]
fn mixed_sends_and_sessions_over_several_passes() {
    let mut evs = Vec::new();
    // Under Miri (100 times slower), five rounds: still every session length, opcode and
    // length of the plain runs, over five passes of the ring.
    let rounds = if cfg!(miri) { 5 } else { 6u32 };
    for round in 0..rounds {
        evs.push(Ev::Send);
        evs.push(Ev::Recv {
            n: 2 + round % 5,
            cqe_op: [1, 2, 3][round as usize % 3],
            imm: 0xdead_0000 | round,
        });
        evs.push(Ev::Send);
        evs.push(Ev::Send);
        evs.push(recv(9 + round % 4));
    }
    for slice in [1, 2, 5, 16] {
        let want = run(&evs, slice, None);
        let got = run(&evs, slice, Some(MiniCqeFormat::Csum));
        assert_eq!(got, want, "slice {slice}");
        assert!(got.iter().all(Completion::is_success));
        assert!(
            got.iter()
                .any(|c| c.opcode == WcOpcode::RecvRdmaWithImm && c.imm() == Some(0xdead_0000))
        );
    }
}

/// The entries of a session are handed back invalid, so a later pass never takes a stale
/// one; a poll that stops inside a session leaves the next entry marked for its own pass.
#[test]
fn entries_are_handed_back_invalid_and_the_stop_is_marked() {
    let mut d = Dev::new(Some(MiniCqeFormat::Hash));
    d.put(recv(12));
    let mut wc = [Completion::EMPTY; 8];
    assert_eq!(d.rig.cq.poll(&mut wc), 8);
    for e in 0..8 {
        assert_eq!(d.rig.mem.op_own(e), INVALID_OP_OWN, "entry {e}");
    }
    assert_eq!(d.rig.mem.op_own(8), FORMAT_MASK, "marked, owner of pass 0");
    assert_eq!(d.rig.mem.cq_dbrec(), 8);
    assert_eq!(
        d.rig.cq.poll(&mut wc),
        4,
        "the second array was copied before the mark"
    );
    assert_eq!(
        wc[..4].iter().map(|c| c.wr_id).collect::<Vec<_>>(),
        [8, 9, 10, 11]
    );
    assert_eq!(
        wc[..4].iter().map(|c| c.byte_len).collect::<Vec<_>>(),
        (8..12).map(Dev::len_of).collect::<Vec<_>>()
    );
    for e in 0..12 {
        assert_eq!(d.rig.mem.op_own(e), INVALID_OP_OWN, "entry {e}");
    }
    assert_eq!(d.rig.cq.poll(&mut wc), 0, "nothing stale is taken");
    assert_eq!(d.rig.mem.cq_dbrec(), 12);
}

/// A requester session: each mini-CQE names its WQE and send opcode.
#[test]
fn requester_session_retires_what_each_mini_cqe_names() {
    let mut rig: Rig = Rig::with_sizes(16, 0, caps(1, 0), 16, 8);
    let sgl = [Sge::new(0x1000, 8, 1)];
    let remote = zverbs_core::RemoteBuf::new(0x2000, 5);
    // SAFETY: never executed by a device.
    unsafe {
        rig.sq.post(&SendWr::write(1, &sgl, remote)).unwrap();
        rig.sq
            .post(&SendWr::read(2, &sgl, remote).signaled())
            .unwrap();
        rig.sq.post(&SendWr::write(4, &sgl, remote)).unwrap();
        rig.sq.post(&SendWr::nop(3).signaled()).unwrap();
    }
    // The mini-CQEs name WQEs 1 and 3 (not consecutive: each names its own).
    let mut a = [0u8; 64];
    for (m, (wqe, sop, len)) in [(1u16, opcode::RDMA_READ, 8u32), (3, opcode::NOP, 0)]
        .into_iter()
        .enumerate()
    {
        let mut v = MiniCqe::new_unchecked(&mut a[m * 8..m * 8 + 8]);
        v.set_wqe_counter(wqe);
        v.set_s_wqe_opcode(sop);
        v.set_byte_cnt(len);
    }
    rig.mem.put_raw(1, a);
    let mut t = req_cqe(QPN, opcode::RDMA_READ, 1, 2, 0);
    t[63] |= FORMAT_MASK;
    rig.mem.put_cqe(0, t);
    let mut wc = [Completion::EMPTY; 4];
    assert_eq!(rig.cq.poll(&mut wc), 2);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].byte_len, wc[0].qp_num),
        (2, WcOpcode::RdmaRead, 8, QPN)
    );
    assert_eq!(
        (wc[1].wr_id, wc[1].opcode, wc[1].byte_len),
        (3, WcOpcode::Nop, 0)
    );
    assert!(wc[..2].iter().all(Completion::is_success));
    assert_eq!(
        rig.sq.free_blocks(),
        16,
        "the unsignaled WRITEs retired too"
    );
    assert_eq!(rig.sq.outstanding_signaled(), 0);
}

/// A title whose count no session can have is one completion, reported, and the poll goes
/// on.
#[test]
fn a_title_with_an_impossible_count_is_reported_alone() {
    for count in [0, 1, CQES + 1, u32::MAX] {
        let mut d = Dev::new(None);
        let mut t = resp_cqe(QPN, 2, count, 0, 0);
        t[63] |= FORMAT_MASK;
        d.rig.mem.put_cqe(0, t);
        d.pi = 1;
        d.put(recv(1));
        let mut wc = [Completion::EMPTY; 4];
        assert_eq!(d.rig.cq.poll(&mut wc), 2, "count {count}");
        assert_eq!(wc[0].status, WcStatus::GeneralErr);
        assert_eq!(
            wc[0].vendor_err,
            crate::VENDOR_ERR_UNSUPPORTED_FORMAT | 0x2c
        );
        assert_eq!(
            (wc[1].wr_id, wc[1].status),
            (0, WcStatus::Success),
            "the receive is still the first"
        );
    }
}

/// A title that cannot open a session is reported without a timestamp (the CQE it would come
/// from is not one the poller decodes), even when the CQ has timestamps.
#[test]
fn a_title_with_an_impossible_count_has_no_timestamp() {
    let mut d = Dev::new(None);
    d.rig.cq.set_timestamps(true);
    let mut t = resp_cqe(QPN, 2, 1, 0, 0);
    t[48..56].copy_from_slice(&0x0102_0304_0506_0708u64.to_be_bytes());
    t[63] |= FORMAT_MASK;
    d.rig.mem.put_cqe(0, t);
    d.pi = 1;
    d.put(recv(1));
    let mut wc = [TimedCompletion {
        timestamp: Some(7),
        ..TimedCompletion::EMPTY
    }; 2];
    assert_eq!(d.rig.cq.poll_timed(&mut wc), 2);
    assert_eq!(
        (wc[0].wc.status, wc[0].timestamp),
        (WcStatus::GeneralErr, None)
    );
    assert_eq!(
        (wc[1].wc.wr_id, wc[1].wc.status, wc[1].timestamp),
        (0, WcStatus::Success, Some(0)),
        "the receive after it, with its own CQE's timestamp"
    );
}

/// A session's completions all carry its title's timestamp.
#[test]
fn timed_poll_gives_each_completion_the_title_timestamp() {
    let mut d = Dev::new(Some(MiniCqeFormat::Csum));
    d.rig.cq.set_timestamps(true);
    d.put(recv(3));
    // The same session again, its title with a timestamp.
    let ts: u64 = 0x0102_0304_0506_0708;
    let mut title = resp_cqe(QPN, 2, 3, 0, 0);
    title[48..56].copy_from_slice(&ts.to_be_bytes());
    title[60..62].copy_from_slice(&0u16.to_be_bytes());
    title[63] |= FORMAT_MASK;
    d.rig.mem.put_cqe(0, title);
    let mut wc = [TimedCompletion::EMPTY; 2];
    assert_eq!(d.rig.cq.poll_timed(&mut wc), 2);
    assert_eq!(d.rig.cq.poll_timed(&mut wc), 1, "resumed");
    assert_eq!(wc[0].timestamp, Some(ts));
    assert_eq!(wc[0].wc.wr_id, 2);
    d.rig.cq.set_timestamps(false);
    d.put(recv(2));
    assert_eq!(d.rig.cq.poll_timed(&mut wc), 2);
    assert_eq!(wc.map(|w| w.timestamp), [None, None]);
}

/// A session of a queue pair the CQ was not given: reported, entry by entry, nothing retired.
#[test]
fn a_session_of_an_unknown_queue_is_reported_not_dropped() {
    let mut d = Dev::new(None);
    let mut a = [0u8; 64];
    a[4..8].copy_from_slice(&5u32.to_be_bytes());
    d.rig.mem.put_raw(1, a);
    let mut t = resp_cqe(QPN + 1, 2, 3, 0, 0);
    t[63] |= FORMAT_MASK;
    d.rig.mem.put_cqe(0, t);
    let mut wc = [Completion::EMPTY; 8];
    assert_eq!(d.rig.cq.poll(&mut wc), 3);
    for c in &wc[..3] {
        assert_eq!(
            (c.status, c.opcode, c.qp_num),
            (WcStatus::GeneralErr, WcOpcode::Unknown(2), QPN + 1)
        );
    }
    assert_eq!(d.rig.cq.consumer(), 3);
}

/// The array of mini-CQEs for `(wqe_counter, s_wqe_opcode, byte_cnt)` each, for an entry.
fn array_of(minis: &[(u16, u8, u32)]) -> [u8; 64] {
    let mut a = [0x5au8; 64];
    for (m, &(wqe, sop, len)) in minis.iter().enumerate() {
        let mut v = MiniCqe::new_unchecked(&mut a[m * 8..m * 8 + 8]);
        v.set_wqe_counter(wqe);
        v.set_s_wqe_opcode(sop);
        v.set_byte_cnt(len);
    }
    a
}

/// A requester session on a timed poll: the length by each mini-CQE's opcode (none for a
/// WRITE whatever its byte count, 8 for an atomic, the byte count for a READ), the title's
/// timestamp on each, and every entry handed back invalid.
#[test]
fn a_requester_session_reports_lengths_by_opcode_and_the_title_timestamp() {
    let mut rig: Rig = Rig::with_sizes(16, 0, caps(1, 0), 16, 8);
    rig.cq.set_timestamps(true);
    let sgl = [Sge::new(0x1000, 8, 1)];
    let remote = zverbs_core::RemoteBuf::new(0x2000, 5);
    let mut wqes = [0u16; 3];
    // SAFETY: never executed by a device.
    unsafe {
        wqes[0] = rig.sq.producer() as u16;
        rig.sq
            .post(&SendWr::write(1, &sgl, remote).signaled())
            .unwrap();
        wqes[1] = rig.sq.producer() as u16;
        rig.sq
            .post(&SendWr::fetch_add(2, Sge::new(0x1000, 8, 1), remote, 1).signaled())
            .unwrap();
        wqes[2] = rig.sq.producer() as u16;
        rig.sq
            .post(&SendWr::read(3, &sgl, remote).signaled())
            .unwrap();
    }
    rig.mem.put_raw(
        1,
        array_of(&[
            (wqes[0], opcode::RDMA_WRITE, 0x55),
            (wqes[1], opcode::ATOMIC_FA, 0),
            (wqes[2], opcode::RDMA_READ, 0x30),
        ]),
    );
    // The third entry: stale bytes that would pass this pass's owner check.
    let mut junk = [0xa5u8; 64];
    junk[63] = 0;
    rig.mem.put_raw(2, junk);
    let ts: u64 = 0x1122_3344_5566_7788;
    let mut t = req_cqe(QPN, opcode::RDMA_WRITE, wqes[0], 3, 0);
    t[48..56].copy_from_slice(&ts.to_be_bytes());
    t[63] |= FORMAT_MASK;
    rig.mem.put_cqe(0, t);
    let mut wc = [TimedCompletion::EMPTY; 4];
    assert_eq!(rig.cq.poll_timed(&mut wc), 3);
    let got: Vec<_> = wc[..3]
        .iter()
        .map(|w| (w.wc.wr_id, w.wc.opcode, w.wc.byte_len, w.timestamp))
        .collect();
    assert_eq!(
        got,
        [
            (1, WcOpcode::RdmaWrite, 0, Some(ts)),
            (2, WcOpcode::FetchAdd, 8, Some(ts)),
            (3, WcOpcode::RdmaRead, 0x30, Some(ts)),
        ]
    );
    assert!(wc[..3].iter().all(|w| w.wc.is_success()));
    for e in 0..3 {
        assert_eq!(rig.mem.op_own(e), INVALID_OP_OWN, "entry {e}");
    }
    assert_eq!(rig.mem.cq_dbrec(), 3);
    assert_eq!(rig.sq.free_blocks(), 16);
    assert_eq!(rig.cq.poll_timed(&mut wc), 0, "nothing stale is taken");
}

/// A session of receives from a shared receive queue: each completion retires the WQE the
/// title's counter plus its place names, and carries the title's timestamp; a poll that
/// stops inside the session goes on from there.
#[test]
fn a_shared_receive_queue_session_retires_the_wqes_its_counter_names() {
    use crate::state::{CqBinding, SrqSlot, SrqState};
    use crate::testutil::{SqHandle, SrqMem};
    use crate::{CompletionQueue, SharedRecvQueue};
    let mem = SrqMem::new(0x42);
    let layout = mem.layout;
    let slots: Vec<SrqSlot> = (0..4).map(|_| SrqSlot::new()).collect();
    // SAFETY: the ring and record outlive the state and the queue; a new SRQ, its free list
    // from head to tail; nothing else posts to it.
    let state = unsafe { SrqState::new(&layout, &slots[..]) }.unwrap();
    // SAFETY: as above.
    let mut srq = unsafe { SharedRecvQueue::new(&layout, &state) }.unwrap();
    for id in 1..=3u64 {
        let sgl = [Sge::new(0x1000 * id, 0x100, 7)];
        // SAFETY: never executed by a device.
        unsafe { srq.post(&RecvWr::new(id, &sgl)) }.unwrap();
    }
    let rig = Rig::new(8, 256, caps(1, 0));
    let bindings = [CqBinding::with_srq(QPN, None::<SqHandle>, &state)];
    let cql = rig.mem.cq_layout();
    // SAFETY: the rig's CQ memory, which this poller alone polls (the rig's is not used).
    let mut cq = unsafe { CompletionQueue::new(&cql, &bindings[..]) }.unwrap();
    cq.set_timestamps(true);
    rig.mem
        .put_raw(1, array_of(&[(0, 0, 0x11), (0, 0, 0x22), (0, 0, 0x33)]));
    let mut junk = [0xa5u8; 64];
    junk[63] = 2 << 4;
    rig.mem.put_raw(2, junk);
    let ts: u64 = 0x0a0b_0c0d_0e0f_1011;
    let mut t = resp_cqe(QPN, 2, 3, 0, 0);
    t[48..56].copy_from_slice(&ts.to_be_bytes());
    t[60..62].copy_from_slice(&0u16.to_be_bytes());
    t[63] |= FORMAT_MASK;
    rig.mem.put_cqe(0, t);
    let mut wc = [TimedCompletion::EMPTY; 3];
    assert_eq!(
        cq.poll_timed(&mut wc[..1]),
        1,
        "the poll stops inside the session"
    );
    assert_eq!(cq.poll_timed(&mut wc[1..]), 2, "and the next goes on");
    let got: Vec<_> = wc
        .iter()
        .map(|w| (w.wc.wr_id, w.wc.byte_len, w.wc.opcode, w.timestamp))
        .collect();
    assert_eq!(
        got,
        [
            (1, 0x11, WcOpcode::Recv, Some(ts)),
            (2, 0x22, WcOpcode::Recv, Some(ts)),
            (3, 0x33, WcOpcode::Recv, Some(ts)),
        ]
    );
    assert!(wc.iter().all(|w| w.wc.is_success()));
    for e in 0..3 {
        assert_eq!(rig.mem.op_own(e), INVALID_OP_OWN, "entry {e}");
    }
    assert_eq!(rig.mem.cq_dbrec(), 3);
    assert_eq!(srq.free(), 3, "every WQE back on the free list");
}

/// A requester session of more than one array: the completions after the eighth come from
/// the second array (in the entry of its first completion), whole polls or polls that stop
/// anywhere.
#[test]
fn a_requester_session_of_two_arrays_reads_the_second() {
    for slice in [16, 3, 1] {
        let mut rig: Rig = Rig::with_sizes(16, 0, caps(1, 0), 16, 8);
        let mut wqes = Vec::new();
        for i in 0..10u64 {
            wqes.push(rig.sq.producer() as u16);
            // SAFETY: never executed by a device.
            unsafe { rig.sq.post(&SendWr::nop(100 + i).signaled()) }.unwrap();
        }
        let minis: Vec<_> = wqes.iter().map(|&w| (w, opcode::NOP, 0)).collect();
        for e in 1..10 {
            let mut junk = [0xa5u8; 64];
            junk[63] = 0;
            rig.mem.put_raw(e, junk);
        }
        rig.mem
            .put_raw(array_entry(0) as usize, array_of(&minis[..8]));
        rig.mem
            .put_raw(array_entry(1) as usize, array_of(&minis[8..]));
        let mut t = req_cqe(QPN, opcode::NOP, wqes[0], 10, 0);
        t[63] |= FORMAT_MASK;
        rig.mem.put_cqe(0, t);
        let mut got = Vec::new();
        let mut wc = [Completion::EMPTY; 16];
        for polls in 0.. {
            assert!(polls <= 10, "the CQ never runs dry");
            let n = rig.cq.poll(&mut wc[..slice]);
            if n == 0 {
                break;
            }
            got.extend(wc[..n].iter().map(|c| (c.wr_id, c.opcode, c.status)));
        }
        let want: Vec<_> = (100..110)
            .map(|i| (i, WcOpcode::Nop, WcStatus::Success))
            .collect();
        assert_eq!(got, want, "{slice} a poll");
        assert_eq!(rig.cq.consumer(), 10);
        assert_eq!(rig.sq.free_blocks(), 16);
    }
}

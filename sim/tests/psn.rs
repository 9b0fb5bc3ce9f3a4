//! Packet sequence numbers: a responder carries out only the request with the PSN it expects,
//! NAKs one ahead of it (the requester's retries run out), and acknowledges a duplicate again
//! without carrying it out again. PSNs are 24 bits and wrap.

mod common;

use std::sync::Arc;

use common::{Arena, End, PairCfg, Queue, end_on, with_pair};
use zverbs_core::{PostSend, SendWr, WcOpcode, WcStatus};
use zverbs_sim::{Device, QpStatus, vendor};

/// A's requests start at `sq_psn`, B expects `rq_psn`: every request fails with "transport
/// retry exceeded" once the retries run out, nothing reaches B's memory, and the rest of A's
/// WQEs are flushed.
fn mismatched(sq_psn: u32, rq_psn: u32) {
    with_pair(PairCfg::default(), |p| {
        p.dev.set_sq_psn(p.a.qpn(), sq_psn).unwrap();
        p.dev.set_rq_psn(p.b.qpn(), rq_psn).unwrap();
        p.dev.set_retry_cnt(p.a.qpn(), 3).unwrap();
        p.a.mem.write(0, b"must not arrive");
        p.b.mem.fill(100, 64, 0xaa);
        let sgl = [p.a.sge(0, 15)];
        // SAFETY: entries in the registered arenas, untouched until completion.
        unsafe {
            p.a.sq
                .post(&SendWr::write(1, &sgl, p.b.remote(100)).signaled())
                .unwrap();
            p.a.sq
                .post(&SendWr::write(2, &sgl, p.b.remote(120)).signaled())
                .unwrap();
        }
        let (a, b) = p.run();
        assert!(b.is_empty(), "{b:?}");
        assert_eq!(a.len(), 2, "{a:?}");
        assert_eq!(
            (a[0].wr_id, a[0].status, a[0].vendor_err),
            (1, WcStatus::RetryExcErr, u32::from(vendor::RETRY))
        );
        assert_eq!((a[1].wr_id, a[1].status), (2, WcStatus::WrFlushErr));
        assert_eq!(p.b.mem.read(100, 64), [0xaa; 64], "nothing written at B");
        assert_eq!(p.dev.qp_status(p.a.qpn()).unwrap(), QpStatus::Error);
        assert_eq!(p.dev.qp_status(p.b.qpn()).unwrap(), QpStatus::Rts);
        let s = p.dev.stats();
        assert_eq!(s.retries, 4, "the first send and 3 retries: {s:?}");
        assert_eq!(s.bytes, 0);
        assert_eq!(
            p.dev.psns(p.b.qpn()).unwrap().1,
            rq_psn,
            "B still expects its PSN"
        );
    });
}

#[test]
fn a_requester_ahead_of_the_responders_psn_runs_out_of_retries() {
    mismatched(100, 0);
}

#[test]
fn a_requester_behind_the_responders_psn_runs_out_of_retries() {
    // Taken for a duplicate: acknowledged again with B's last PSN (99), which is not the
    // request's, so A ignores the acknowledgement.
    mismatched(0, 100);
}

/// A requester exactly one PSN behind looks like a retransmission of the responder's last
/// request: the duplicate is acknowledged with the PSN it carries, so the WRITE completes
/// successfully and places nothing (what IB responders do; the hazard of mismatched PSNs).
#[test]
fn a_requester_one_psn_behind_is_acknowledged_as_a_duplicate() {
    with_pair(PairCfg::default(), |p| {
        p.dev.set_sq_psn(p.a.qpn(), 0).unwrap();
        p.dev.set_rq_psn(p.b.qpn(), 1).unwrap();
        p.a.mem.write(0, b"lost");
        let sgl = [p.a.sge(0, 4)];
        // SAFETY: as above.
        unsafe {
            p.a.sq
                .post(&SendWr::write(1, &sgl, p.b.remote(0)).signaled())
                .unwrap();
        }
        let (a, _) = p.run();
        assert_eq!((a[0].wr_id, a[0].status), (1, WcStatus::Success));
        assert_eq!(p.b.mem.read(0, 4), [0; 4], "not placed");
        assert_eq!(p.dev.stats().duplicates, 1);
    });
}

#[test]
fn matching_psns_work_across_the_24_bit_wrap() {
    with_pair(PairCfg::default(), |p| {
        let start = 0xff_fffe;
        p.dev.set_sq_psn(p.a.qpn(), start).unwrap();
        p.dev.set_rq_psn(p.b.qpn(), start).unwrap();
        for i in 0..8192 {
            p.a.mem.write(i, &[(i % 251) as u8]);
        }
        p.b.mem.write(20_000, &[7; 8192]);
        p.b.mem.write_u64_in(30_000, 40, false);
        let two = [p.a.sge(0, 4097)];
        let one = [p.a.sge(0, 100)];
        let read = [p.a.sge(10_000, 8192)];
        // SAFETY: as above.
        unsafe {
            // Two packets at 0xfffffe and 0xffffff, then one at 0.
            p.a.sq
                .post(&SendWr::write(1, &two, p.b.remote(0)).signaled())
                .unwrap();
            p.a.sq
                .post(&SendWr::write(2, &one, p.b.remote(8192)).signaled())
                .unwrap();
            // Two response packets (1, 2), then the atomic at 3.
            p.a.sq
                .post(&SendWr::read(3, &read, p.b.remote(20_000)).signaled())
                .unwrap();
            p.a.sq
                .post(&SendWr::fetch_add(4, p.a.sge(30_000, 8), p.b.remote(30_000), 2).signaled())
                .unwrap();
        }
        let (a, _) = p.run();
        assert_eq!(a.len(), 4, "{a:?}");
        assert!(a.iter().all(|c| c.status == WcStatus::Success), "{a:?}");
        assert_eq!(p.b.mem.read(0, 4097), p.a.mem.read(0, 4097));
        assert_eq!(p.b.mem.read(8192, 100), p.a.mem.read(0, 100));
        assert_eq!(p.a.mem.read(10_000, 8192), [7; 8192]);
        assert_eq!(p.b.mem.read_u64_in(30_000, false), 42);
        assert_eq!(
            p.dev.psns(p.a.qpn()).unwrap().0,
            4,
            "0xfffffe + 2 + 1 + 2 + 1"
        );
        assert_eq!(p.dev.psns(p.b.qpn()).unwrap().1, 4);
        assert_eq!(p.dev.stats().retries, 0);
    });
}

/// A lost acknowledgement: the requester sends the fetch-and-add again, and the responder
/// answers the duplicate with the result it kept instead of adding twice.
#[test]
fn a_duplicate_atomic_is_not_run_twice() {
    with_pair(PairCfg::default(), |p| {
        p.b.mem.write_u64_in(64, 40, false);
        p.dev.lose_next_ack(p.a.qpn()).unwrap();
        // SAFETY: as above.
        unsafe {
            p.a.sq
                .post(&SendWr::fetch_add(1, p.a.sge(0, 8), p.b.remote(64), 2).signaled())
                .unwrap();
        }
        let (a, _) = p.run();
        assert_eq!(a.len(), 1);
        assert_eq!(
            (a[0].status, a[0].opcode),
            (WcStatus::Success, WcOpcode::FetchAdd)
        );
        assert_eq!(p.b.mem.read_u64_in(64, false), 42, "added once");
        assert_eq!(p.a.mem.read_u64_in(0, false), 40, "the first result");
        let s = p.dev.stats();
        assert_eq!((s.retries, s.duplicates), (1, 1), "{s:?}");
    });
}

/// The same for a WRITE: the duplicate is acknowledged and not placed again (the memory it
/// would overwrite was changed meanwhile and stays changed).
#[test]
fn a_duplicate_write_is_acknowledged_and_not_placed_again() {
    with_pair(PairCfg::default(), |p| {
        p.a.mem.write(0, b"first");
        p.dev.lose_next_ack(p.a.qpn()).unwrap();
        let sgl = [p.a.sge(0, 5)];
        // SAFETY: as above.
        unsafe {
            p.a.sq
                .post(&SendWr::write(1, &sgl, p.b.remote(0)).signaled())
                .unwrap();
        }
        // The write lands; its acknowledgement is lost.
        p.dev.step();
        assert_eq!(p.b.mem.read(0, 5), b"first");
        p.b.mem.write(0, b"later");
        let (a, _) = p.run();
        assert_eq!(a.len(), 1);
        assert_eq!(a[0].status, WcStatus::Success);
        assert_eq!(p.b.mem.read(0, 5), b"later", "not placed twice");
        assert_eq!(p.dev.stats().duplicates, 1);
    });
}

const LID_A: u16 = 1;
const LID_B: u16 = 2;

/// Two instances of the device, as two processes would have, joined by the wire `q` (LIDs
/// [`LID_A`] and [`LID_B`]): end `a` on `da` over `mem_a`, end `b` on `db` over `mem_b`,
/// connected to each other.
struct Across {
    q: Arc<Queue>,
    da: Device,
    db: Device,
    mem_a: Arena,
    mem_b: Arena,
}

impl Across {
    fn new() -> Self {
        let q = Arc::new(Queue::default());
        let (da, db) = (Device::new(), Device::new());
        da.set_wire(q.clone(), LID_A);
        db.set_wire(q.clone(), LID_B);
        let (mem_a, mem_b) = (Arena::new(4096), Arena::new(4096));
        Self {
            q,
            da,
            db,
            mem_a,
            mem_b,
        }
    }

    /// The two ends, connected.
    fn ends(&self) -> (End<'_>, End<'_>) {
        let a = end_on(&self.da, &self.mem_a, PairCfg::default());
        let b = end_on(&self.db, &self.mem_b, PairCfg::default());
        common::connect_across(&self.da, LID_A, a.qpn(), &self.db, LID_B, b.qpn());
        (a, b)
    }
}

/// A request that arrives twice from another process (a network may duplicate a packet) is
/// carried out once: the fetch-and-add adds once, the second copy is answered from the kept
/// result.
#[test]
fn a_request_delivered_twice_across_processes_runs_once() {
    let x = Across::new();
    let (q, da, db, mem_a, mem_b) = (&x.q, &x.da, &x.db, &x.mem_a, &x.mem_b);
    let (mut a, b) = x.ends();
    let (qa, qb) = (a.qpn(), b.qpn());
    da.set_sq_psn(qa, 0xff_ffff).unwrap();
    db.set_rq_psn(qb, 0xff_ffff).unwrap();
    mem_b.write_u64_in(64, 40, false);
    // SAFETY: entries in the registered arenas, untouched until completion.
    unsafe {
        a.sq.post(&SendWr::fetch_add(1, a.sge(0, 8), b.remote(64), 2).signaled())
            .unwrap();
    }
    da.run_until_idle();
    let msgs = q.take();
    assert_eq!(msgs.len(), 1, "one request");
    let (lid, req) = &msgs[0];
    assert_eq!(*lid, LID_B);
    db.deliver(req);
    db.deliver(req);
    assert_eq!(mem_b.read_u64_in(64, false), 42, "added once");
    assert_eq!(db.stats().duplicates, 1);
    assert_eq!(db.psns(qb).unwrap().1, 0, "expects the PSN after the wrap");
    for (lid, m) in q.take() {
        assert_eq!(lid, LID_A);
        da.deliver(&m);
    }
    da.run_until_idle();
    let c = a.poll_all();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(c[0].status, WcStatus::Success);
    assert_eq!(mem_a.read_u64_in(0, false), 40);
    assert_eq!(da.psns(qa).unwrap().0, 0);
}

/// Across processes too, a requester whose PSN the responder does not expect runs out of
/// retries and writes nothing.
#[test]
fn mismatched_psns_across_processes_run_out_of_retries() {
    let x = Across::new();
    let (q, da, db, mem_a, mem_b) = (&x.q, &x.da, &x.db, &x.mem_a, &x.mem_b);
    let (mut a, b) = x.ends();
    let (qa, qb) = (a.qpn(), b.qpn());
    da.set_sq_psn(qa, 5).unwrap();
    db.set_rq_psn(qb, 1).unwrap();
    mem_a.write(0, b"nope");
    let sgl = [a.sge(0, 4)];
    // SAFETY: as above.
    unsafe {
        a.sq.post(&SendWr::write(1, &sgl, b.remote(0)).signaled())
            .unwrap();
    }
    loop {
        let mut work = da.run_until_idle() + db.run_until_idle();
        for (lid, m) in q.take() {
            if lid == LID_A {
                da.deliver(&m)
            } else {
                db.deliver(&m)
            }
            work += 1;
        }
        if work == 0 {
            break;
        }
    }
    let c = a.poll_all();
    assert_eq!(c.len(), 1, "{c:?}");
    assert_eq!(
        (c[0].status, c[0].vendor_err),
        (WcStatus::RetryExcErr, u32::from(vendor::RETRY))
    );
    assert_eq!(mem_b.read(0, 4), [0; 4]);
    assert_eq!(da.stats().retries, 8, "the first send and 7 retries");
    assert_eq!(db.stats().seq_errors, 8);
}

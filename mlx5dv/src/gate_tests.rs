//! The gate seen from the queues: posts refused with nothing written while it is closed, the
//! counters restarted at 0 when it opens at a later incarnation, the poller closing it on an
//! error CQE.

extern crate std;

use std::vec::Vec;

use zverbs_core::{Completion, PollCq, PostError, PostRecv, PostSend, RecvWr, SendWr, Sge};

use crate::prm::opcode;
use crate::testutil::{QPN, Rig, caps, err_cqe, req_cqe};

fn wcs() -> [Completion; 8] {
    [Completion::EMPTY; 8]
}

fn post(rig: &mut Rig, wr: &SendWr<'_>) -> Result<(), PostError> {
    // SAFETY: never executed by a device.
    unsafe { rig.sq.post(wr) }
}

#[test]
fn a_closed_gate_refuses_posts_and_writes_nothing() {
    let mut rig = Rig::new(8, 64, caps(1, 0));
    let sgl = [Sge::new(0x1000, 8, 1)];
    post(&mut rig, &SendWr::send(1, &sgl).signaled()).unwrap();
    let (ring, dbrec, bf) = (rig.mem.sq_bytes(), rig.mem.dbrec(1), rig.mem.bf_bytes());
    rig.bindings[0].sq.as_ref().unwrap().gate().close();
    rig.bindings[0].rq.as_ref().unwrap().gate().close();
    assert_eq!(
        post(&mut rig, &SendWr::send(2, &sgl).signaled()),
        Err(PostError::NotReady)
    );
    // SAFETY: never executed.
    let e = unsafe { rig.sq.post_all(&[SendWr::send(3, &sgl)]) }.unwrap_err();
    assert_eq!((e.index, e.error), (0, PostError::NotReady));
    let rsgl = [Sge::new(0x2000, 64, 1)];
    // SAFETY: never executed.
    let e = unsafe { rig.rq.post(&RecvWr::new(4, &rsgl)) };
    assert_eq!(e, Err(PostError::NotReady));
    assert_eq!(rig.mem.sq_bytes(), ring);
    assert_eq!((rig.mem.dbrec(1), rig.mem.dbrec(0)), (dbrec, 0));
    assert_eq!(rig.mem.bf_bytes(), bf);
    assert_eq!(rig.sq.producer(), 1);
}

#[test]
fn a_later_incarnation_restarts_the_queues_at_zero() {
    let mut rig = Rig::new(8, 64, caps(1, 0));
    let empty = rig.rq.free();
    let sgl = [Sge::new(0x1000, 8, 1)];
    for i in 0..3 {
        post(&mut rig, &SendWr::send(i, &sgl).signaled()).unwrap();
    }
    // Written and not rung: the old incarnation's, never seen by the device.
    // SAFETY: never executed.
    unsafe { rig.sq.stage(&SendWr::send(9, &sgl)) }.unwrap();
    let rsgl = [Sge::new(0x2000, 64, 1)];
    // SAFETY: never executed.
    unsafe { rig.rq.post(&RecvWr::new(7, &rsgl)) }.unwrap();
    assert_eq!((rig.sq.producer(), rig.rq.head()), (4, 1));
    let (sq, rq) = (
        rig.bindings[0].sq.clone().unwrap(),
        rig.bindings[0].rq.clone().unwrap(),
    );
    // The control path: error, drained (taken as given here), RESET, INIT, RTS.
    sq.gate().close();
    rq.gate().close();
    // SAFETY: nothing polls or posts meanwhile.
    unsafe {
        crate::clear_doorbell_record(&rig.mem.qp_layout(QPN, 8, 64));
        sq.restart();
        rq.restart();
    }
    assert_eq!(
        post(&mut rig, &SendWr::send(5, &sgl)),
        Err(PostError::NotReady),
        "closed until RTS"
    );
    rq.gate().open();
    sq.gate().open();
    assert_eq!(sq.gate().incarnation(), 1);
    // The old incarnation's receive is forgotten: the whole receive queue is free again.
    assert_eq!(rig.rq.free(), empty);
    // The staged request is forgotten: ringing now writes nothing.
    rig.sq.ring();
    assert_eq!(rig.mem.dbrec(1), 0);
    post(&mut rig, &SendWr::send(10, &sgl).signaled()).unwrap();
    assert_eq!(rig.sq.producer(), 1, "restarted at 0");
    assert_eq!(rig.mem.dbrec(1), 1);
    // The WQE at slot 0 carries index 0.
    let ring = rig.mem.sq_bytes();
    assert_eq!(&ring[0..4], &(u32::from(opcode::SEND)).to_be_bytes());
    // SAFETY: never executed.
    unsafe { rig.rq.post(&RecvWr::new(11, &rsgl)) }.unwrap();
    assert_eq!((rig.rq.head(), rig.mem.dbrec(0)), (1, 1));
    // The completion of the new WQE 0 names the new wr_id.
    rig.mem.put_cqe(0, req_cqe(QPN, opcode::SEND, 0, 0, 0));
    let mut wc = wcs();
    assert_eq!(rig.cq.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 10);
    assert_eq!(rig.sq.free_blocks(), 8);
}

#[test]
fn an_error_cqe_closes_the_gates() {
    let mut rig = Rig::new(8, 64, caps(1, 0));
    let sgl = [Sge::new(0x1000, 8, 1)];
    post(&mut rig, &SendWr::send(1, &sgl).signaled()).unwrap();
    post(&mut rig, &SendWr::send(2, &sgl).signaled()).unwrap();
    rig.mem.put_cqe(0, err_cqe(QPN, 13, 0, 0x13, 0, 0));
    rig.mem.put_cqe(1, err_cqe(QPN, 13, 1, 0x05, 0, 0));
    let mut wc = wcs();
    assert_eq!(rig.cq.poll(&mut wc), 2);
    let ids: Vec<u64> = wc[..2].iter().map(|c| c.wr_id).collect();
    assert_eq!(ids, [1, 2]);
    assert!(!rig.bindings[0].sq.as_ref().unwrap().gate().is_open());
    assert!(!rig.bindings[0].rq.as_ref().unwrap().gate().is_open());
    assert_eq!(
        post(&mut rig, &SendWr::send(3, &sgl).signaled()),
        Err(PostError::NotReady)
    );
    // Drained: the credit word shows every WQE retired, as the doorbell record has them.
    let sq = rig.bindings[0].sq.as_ref().unwrap();
    assert_eq!(u32::from(sq.retired16()), rig.mem.dbrec(1));
}

#[test]
fn doorbell_counters_read_what_the_queues_published() {
    // What recovery compares with the retired counts: the receive head and the send producer
    // counter, as the queues last wrote them to the QP's doorbell record.
    let mut rig = Rig::new(8, 64, caps(1, 0));
    let layout = rig.mem.qp_layout(QPN, 8, 64);
    // SAFETY: the rig's record, mapped while the rig lives.
    assert_eq!(unsafe { crate::doorbell_counters(&layout) }, (0, 0));
    let sgl = [Sge::new(0x1000, 8, 1)];
    for i in 0..3 {
        post(&mut rig, &SendWr::send(i, &sgl).signaled()).unwrap();
    }
    let rsgl = [Sge::new(0x2000, 64, 1)];
    for i in 0..2 {
        // SAFETY: never executed.
        unsafe { rig.rq.post(&RecvWr::new(i, &rsgl)) }.unwrap();
    }
    let pi = rig.sq.producer();
    assert_eq!(pi, 3);
    // SAFETY: as above.
    assert_eq!(unsafe { crate::doorbell_counters(&layout) }, (2, 3));
    // SAFETY: as above; nothing posts meanwhile.
    unsafe { crate::clear_doorbell_record(&layout) };
    // SAFETY: as above.
    assert_eq!(unsafe { crate::doorbell_counters(&layout) }, (0, 0));
}

#[test]
fn a_responder_error_cqe_closes_both_gates() {
    let mut rig = Rig::new(8, 64, caps(1, 0));
    let rsgl = [Sge::new(0x2000, 64, 1)];
    // SAFETY: never executed.
    unsafe { rig.rq.post(&RecvWr::new(4, &rsgl)) }.unwrap();
    rig.mem.put_cqe(0, err_cqe(QPN, 14, 0, 0x05, 0, 0));
    let mut wc = wcs();
    assert_eq!(rig.cq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (4, zverbs_core::WcStatus::WrFlushErr)
    );
    assert!(!rig.bindings[0].sq.as_ref().unwrap().gate().is_open());
    assert!(!rig.bindings[0].rq.as_ref().unwrap().gate().is_open());
    let sgl = [Sge::new(0x1000, 8, 1)];
    assert_eq!(
        post(&mut rig, &SendWr::send(3, &sgl).signaled()),
        Err(PostError::NotReady)
    );
}

//! The posts' credit (`SendQueue::credit`): the one compare of the fast path runs out exactly
//! where the exact checks refuse (a full ring, a full CQ share), is taken away by staged
//! requests, and starts again from the new incarnation after a reset. Each refusal writes
//! nothing.

extern crate std;

use std::vec::Vec;

use zverbs_core::{Completion, PollCq, PostError, PostSend, SendWr, Sge};

use super::{Changes, PreparedSend};
use crate::prm::opcode;
use crate::testutil::{QPN, Rig, caps, req_cqe};

/// Everything a refused post must leave as it was.
fn snapshot(rig: &mut Rig) -> (Vec<u8>, u32, Vec<u8>, u32, u32) {
    (
        rig.mem.sq_bytes(),
        rig.mem.dbrec(1),
        rig.mem.bf_bytes(),
        rig.sq.producer(),
        rig.sq.pending(),
    )
}

fn send(rig: &mut Rig, wr_id: u64, signaled: bool) -> Result<(), PostError> {
    let sgl = [Sge::new(0x1000, 8, 1)];
    let wr = SendWr::send(wr_id, &sgl);
    let wr = if signaled { wr.signaled() } else { wr };
    // SAFETY: never executed by a device.
    unsafe { rig.sq.post(&wr) }
}

fn prepared(rig: &mut Rig, p: &PreparedSend, wr_id: u64) -> Result<(), PostError> {
    let c = Changes {
        wr_id,
        addr: 0x1000,
        len: 8,
        ..Changes::default()
    };
    // SAFETY: never executed by a device.
    unsafe { rig.sq.post_prepared(p, c) }
}

/// Completes the signaled SEND at WQE index `index` (the `n`-th CQE of the rig's CQ) and
/// polls it.
fn complete(rig: &mut Rig, index: u16, n: usize) {
    rig.mem.put_cqe(n, req_cqe(QPN, opcode::SEND, index, 0, 0));
    let mut wc = [Completion::EMPTY; 1];
    assert_eq!(rig.cq.poll(&mut wc), 1);
}

#[test]
fn the_credit_runs_out_exactly_at_a_full_ring() {
    let mut rig = Rig::new(8, 64, caps(1, 0));
    let sgl = [Sge::new(0x1000, 8, 1)];
    let p = rig
        .sq
        .prepare_send(&SendWr::send(0, &sgl).signaled())
        .unwrap();
    // Generic and prepared posts alternating, each taking one block of eight.
    for i in 0..8u64 {
        if i % 2 == 0 {
            send(&mut rig, i, true).unwrap();
        } else {
            prepared(&mut rig, &p, i).unwrap();
        }
    }
    assert_eq!(rig.mem.dbrec(1), 8);
    let before = snapshot(&mut rig);
    let full = Err(PostError::QueueFull { needed: 1, free: 0 });
    assert_eq!(send(&mut rig, 8, true), full);
    assert_eq!(send(&mut rig, 8, false), full);
    assert_eq!(prepared(&mut rig, &p, 8), full);
    assert_eq!(snapshot(&mut rig), before, "a refusal wrote");
    // One block back: one more post, then full again.
    complete(&mut rig, 0, 0);
    prepared(&mut rig, &p, 9).unwrap();
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (9, 9));
    let before = snapshot(&mut rig);
    assert_eq!(send(&mut rig, 10, false), full);
    assert_eq!(prepared(&mut rig, &p, 10), full);
    assert_eq!(snapshot(&mut rig), before, "a refusal wrote");
    complete(&mut rig, 1, 1);
    send(&mut rig, 11, false).unwrap();
    assert_eq!(send(&mut rig, 12, false), full);
    assert_eq!(rig.sq.producer(), 10);
}

/// A post takes its WQE's blocks from the credit, not one: WQEs of two blocks fill a ring of
/// eight in four posts, and the fifth is refused with nothing written.
#[test]
fn the_credit_counts_the_blocks_of_larger_wqes() {
    let mut rig = Rig::new(8, 64, caps(4, 0));
    let sgl = [Sge::new(0x1000, 8, 1); 4];
    let r = zverbs_core::RemoteBuf::new(0x4000, 1);
    // Control, remote address and four data segments: two blocks.
    let write = |rig: &mut Rig, wr_id| {
        // SAFETY: never executed by a device.
        unsafe { rig.sq.post(&SendWr::write(wr_id, &sgl, r)) }
    };
    for i in 0..4 {
        write(&mut rig, i).unwrap();
    }
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (8, 8));
    let before = snapshot(&mut rig);
    assert_eq!(
        write(&mut rig, 4),
        Err(PostError::QueueFull { needed: 2, free: 0 })
    );
    assert_eq!(snapshot(&mut rig), before, "a refusal wrote");
}

#[test]
fn the_credit_runs_out_exactly_at_a_full_cq_share() {
    let mut c = caps(1, 0);
    c.max_signaled = 3;
    let mut rig = Rig::new(16, 64, c);
    let sgl = [Sge::new(0x1000, 8, 1)];
    let p = rig
        .sq
        .prepare_send(&SendWr::send(0, &sgl).signaled())
        .unwrap();
    send(&mut rig, 0, true).unwrap();
    prepared(&mut rig, &p, 1).unwrap();
    send(&mut rig, 2, true).unwrap();
    let before = snapshot(&mut rig);
    let full = Err(PostError::CqFull { limit: 3 });
    assert_eq!(send(&mut rig, 3, true), full);
    assert_eq!(prepared(&mut rig, &p, 3), full);
    assert_eq!(snapshot(&mut rig), before, "a refusal wrote");
    // Unsignaled requests still fit, one after another (the credit is at least their block).
    send(&mut rig, 4, false).unwrap();
    send(&mut rig, 5, false).unwrap();
    assert_eq!(rig.sq.producer(), 5);
    let before = snapshot(&mut rig);
    assert_eq!(prepared(&mut rig, &p, 6), full);
    assert_eq!(send(&mut rig, 6, true), full);
    assert_eq!(snapshot(&mut rig), before, "a refusal wrote");
    // One CQE back: one more signaled request.
    complete(&mut rig, 0, 0);
    prepared(&mut rig, &p, 7).unwrap();
    assert_eq!(send(&mut rig, 8, true), full);
    assert_eq!(rig.sq.producer(), 6);
}

#[test]
fn staged_requests_take_the_credit_away() {
    let mut rig = Rig::new(8, 64, caps(1, 0));
    let sgl = [Sge::new(0x1000, 8, 1)];
    let p = rig.sq.prepare_send(&SendWr::send(0, &sgl)).unwrap();
    send(&mut rig, 0, false).unwrap();
    // SAFETY: never executed by a device.
    unsafe { rig.sq.stage(&SendWr::send(1, &sgl)) }.unwrap();
    assert_eq!((rig.sq.pending(), rig.mem.dbrec(1)), (1, 1));
    // The post rings the staged request first, then itself.
    send(&mut rig, 2, false).unwrap();
    assert_eq!((rig.sq.pending(), rig.mem.dbrec(1)), (0, 3));
    // SAFETY: as above.
    unsafe { rig.sq.stage(&SendWr::send(3, &sgl)) }.unwrap();
    prepared(&mut rig, &p, 4).unwrap();
    assert_eq!((rig.sq.pending(), rig.mem.dbrec(1)), (0, 5));
}

#[test]
fn after_a_reset_the_credit_starts_from_the_new_incarnation() {
    let mut rig = Rig::new(8, 64, caps(1, 0));
    let sgl = [Sge::new(0x1000, 8, 1)];
    let p = rig.sq.prepare_send(&SendWr::send(0, &sgl)).unwrap();
    for i in 0..5 {
        send(&mut rig, i, false).unwrap();
    }
    let sq = rig.bindings[0].sq.clone().unwrap();
    sq.gate().close();
    let before = snapshot(&mut rig);
    assert_eq!(send(&mut rig, 5, false), Err(PostError::NotReady));
    assert_eq!(prepared(&mut rig, &p, 5), Err(PostError::NotReady));
    assert_eq!(snapshot(&mut rig), before, "a refusal wrote");
    // SAFETY: nothing polls or posts meanwhile.
    unsafe {
        crate::clear_doorbell_record(&rig.mem.qp_layout(QPN, 8, 64));
        sq.restart();
    }
    sq.gate().open();
    // The whole ring again, from block 0, and not one block more.
    for i in 0..8u64 {
        if i % 2 == 0 {
            prepared(&mut rig, &p, 10 + i).unwrap();
        } else {
            send(&mut rig, 10 + i, false).unwrap();
        }
    }
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (8, 8));
    let before = snapshot(&mut rig);
    let full = Err(PostError::QueueFull { needed: 1, free: 0 });
    assert_eq!(prepared(&mut rig, &p, 20), full);
    assert_eq!(send(&mut rig, 20, false), full);
    assert_eq!(snapshot(&mut rig), before, "a refusal wrote");
}

//! What "nothing written" means for a refused request or batch, as tests check it, and the
//! one-pass batch's roll-back.

extern crate std;

use std::vec::Vec;

use super::*;
use crate::state::SlotData;
use crate::testutil::{QPN, Rig, caps};
use zverbs_core::RemoteBuf;

/// What the device and the poller may read of a send queue: the doorbell record, the
/// BlueFlame register, the producer counter, the requests staged and not rung, the signaled
/// requests outstanding, the free blocks (the consumer counter), and the ring's blocks below
/// the producer counter that are not free yet, with their slots. The ring's free blocks, from
/// the producer counter on, are left out: scratch, which a refused batch may have written.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Visible {
    dbrec: u32,
    bf: Vec<u8>,
    producer: u32,
    pending: u32,
    outstanding: u32,
    free: u32,
    in_use: Vec<u8>,
    slots: Vec<SlotData>,
}

impl Visible {
    /// Panics naming the first part that differs from `before` (and, in bytes, the first
    /// offset that does), with `what` as the context.
    #[track_caller]
    pub(super) fn assert_same(&self, before: &Visible, what: &str) {
        let first = |a: &[u8], b: &[u8]| a.iter().zip(b).position(|(x, y)| x != y);
        assert_eq!(
            (
                self.dbrec,
                self.producer,
                self.pending,
                self.outstanding,
                self.free
            ),
            (
                before.dbrec,
                before.producer,
                before.pending,
                before.outstanding,
                before.free
            ),
            "{what}: doorbell record, producer, pending, outstanding signaled, free blocks"
        );
        assert!(
            self.bf == before.bf,
            "{what}: BlueFlame register, from byte {:?}",
            first(&self.bf, &before.bf)
        );
        assert!(
            self.in_use == before.in_use,
            "{what}: ring below the producer counter, from byte {:?}",
            first(&self.in_use, &before.in_use)
        );
        assert_eq!(self.slots, before.slots, "{what}: slots in use");
    }
}

/// [`Visible`] of `rig`'s send queue now.
pub(super) fn visible<T: SqTransport>(rig: &mut Rig<T>) -> Visible {
    let free = rig.sq.free_blocks();
    let producer = rig.sq.producer();
    let size = rig.sq.blocks();
    let ring = rig.mem.sq_bytes();
    let slots = rig.sq.state.slots();
    let (mut in_use, mut held) = (Vec::new(), Vec::new());
    // The blocks in use, oldest first: `size - free` of them below the producer counter.
    for b in producer.wrapping_sub(size - free)..producer {
        let at = (b % size) as usize;
        in_use.extend_from_slice(&ring[at * 64..at * 64 + 64]);
        held.push(slots[at].peek());
    }
    Visible {
        dbrec: rig.mem.dbrec(1),
        bf: rig.mem.bf_bytes(),
        producer,
        pending: rig.sq.pending(),
        outstanding: rig.sq.outstanding_signaled(),
        free,
        in_use,
        slots: held,
    }
}

fn post_all(rig: &mut Rig, wrs: &[SendWr<'_>]) -> Result<(), BatchError> {
    // SAFETY: never executed by a device; no request is inline.
    unsafe { rig.sq.post_all(wrs) }
}

fn stage(rig: &mut Rig, wr: &SendWr<'_>) -> Result<(), PostError> {
    // SAFETY: as above.
    unsafe { rig.sq.stage(wr) }
}

/// A refused batch wrote its valid requests past the producer counter (the one pass), and
/// everything the device and the poller may read is as before; the blocks it wrote are
/// written over by the next batch, which is exactly what it would have been without the
/// refused one.
#[test]
fn a_refused_batch_leaves_scratch_past_the_producer_only() {
    let sgl = [Sge::new(0x1000, 8, 1)];
    let four = [sgl[0]; 4];
    let r = RemoteBuf::new(0x4000, 1);
    let mut rig = Rig::new(16, 256, caps(3, 0));
    // Three blocks in use, one of them rung and two staged.
    // SAFETY: never executed.
    unsafe { rig.sq.post(&SendWr::send(1, &sgl).signaled()) }.unwrap();
    stage(&mut rig, &SendWr::write(2, &sgl, r).signaled()).unwrap();
    stage(&mut rig, &SendWr::read(3, &sgl, r)).unwrap();
    let before = visible(&mut rig);
    let ring_before = rig.mem.sq_bytes();
    let bad = [
        SendWr::write(10, &sgl, r).signaled(),
        SendWr::send(11, &sgl).signaled(),
        SendWr::write(12, &sgl, r),
        SendWr::write(13, &four, r),
    ];
    let e = post_all(&mut rig, &bad).unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (3, PostError::TooManySges { got: 4, max: 3 })
    );
    visible(&mut rig).assert_same(&before, "refused");
    // The one pass wrote the first three past the producer counter: scratch now.
    assert_ne!(
        rig.mem.sq_bytes()[3 * 64..6 * 64],
        ring_before[3 * 64..6 * 64]
    );

    // The staged requests are still staged, and the last of them is what rings.
    rig.sq.ring();
    assert_eq!(rig.mem.dbrec(1), 3);
    let ring = rig.mem.sq_bytes();
    assert_eq!(rig.mem.bf_bytes()[256..264], ring[2 * 64..2 * 64 + 8]);

    // A batch posted now writes what it would have without the refused one (two WQEs of
    // three segments, as many as the refused batch wrote in those blocks: the bytes of a
    // block past its WQE's last segment are whatever was there before, which the device
    // does not read).
    let good = [
        SendWr::write(20, &sgl, r),
        SendWr::write(21, &sgl, r).signaled(),
    ];
    let mut clean = Rig::new(16, 256, caps(3, 0));
    // SAFETY: never executed.
    unsafe { clean.sq.post(&SendWr::send(1, &sgl).signaled()) }.unwrap();
    stage(&mut clean, &SendWr::write(2, &sgl, r).signaled()).unwrap();
    stage(&mut clean, &SendWr::read(3, &sgl, r)).unwrap();
    clean.sq.ring();
    post_all(&mut clean, &good).unwrap();
    post_all(&mut rig, &good).unwrap();
    let clean = visible(&mut clean);
    visible(&mut rig).assert_same(&clean, "after the refused batch");
}

/// After a refused batch, a post rings the requests staged before the batch first, as it
/// would have without the batch: the roll-back leaves no credit that would let the post go
/// out alone while they stay staged (and a later ring copy the last of them to the BlueFlame
/// register again).
#[test]
fn after_a_refused_batch_a_post_rings_what_was_staged_first() {
    let sgl = [Sge::new(0x1000, 8, 1)];
    let four = [sgl[0]; 4];
    let r = RemoteBuf::new(0x4000, 1);
    let run = |refused: bool| {
        let mut rig = Rig::new(16, 256, caps(3, 0));
        stage(&mut rig, &SendWr::write(2, &sgl, r).signaled()).unwrap();
        stage(&mut rig, &SendWr::read(3, &sgl, r)).unwrap();
        if refused {
            // The batch reads the credit word (the staged requests left no credit), takes
            // blocks from what it read, then meets its refused request. (Its scratch in the
            // post's block is a WQE of the post's size: the post writes over all of it.)
            let bad = [
                SendWr::send(10, &sgl),
                SendWr::send(11, &sgl),
                SendWr::write(12, &four, r),
            ];
            assert_eq!(post_all(&mut rig, &bad).unwrap_err().index, 2);
        }
        // SAFETY: never executed by a device.
        unsafe { rig.sq.post(&SendWr::send(4, &sgl).signaled()) }.unwrap();
        assert_eq!(
            rig.sq.pending(),
            0,
            "refused={refused}: the staged requests rung"
        );
        // Nothing is left to ring.
        let after = visible(&mut rig);
        rig.sq.ring();
        visible(&mut rig).assert_same(&after, "ring after the post");
        after
    };
    run(true).assert_same(&run(false), "with and without the refused batch");
}

/// A batch refused for room rolls back the counters it moved: the producer counter and the
/// signaled count, also after it read the credit word again in the middle of the batch.
#[test]
fn a_batch_refused_for_room_rolls_back_its_counters() {
    use crate::testutil::req_cqe;
    use zverbs_core::{Completion, PollCq};
    let sgl = [Sge::new(0x1000, 8, 1)];
    let mut rig = Rig::with_cq(
        8,
        256,
        SqCaps {
            max_signaled: 4,
            ..caps(1, 0)
        },
        64,
    );
    // Six signaled sends rung, then the first two completed: the queue's limits were last
    // read with the ring full to six blocks and four CQEs outstanding at most.
    for i in 0..4 {
        // SAFETY: never executed.
        unsafe { rig.sq.post(&SendWr::send(i, &sgl).signaled()) }.unwrap();
    }
    for i in 4..6 {
        // SAFETY: never executed.
        unsafe { rig.sq.post(&SendWr::send(i, &sgl)) }.unwrap();
    }
    for i in 0..2 {
        rig.mem
            .put_cqe(i, req_cqe(QPN, opcode::SEND, i as u16, 0, 0));
    }
    assert_eq!(rig.cq.poll(&mut [Completion::EMPTY; 4]), 2);
    let before = visible(&mut rig);
    // Two signaled (the CQ share then full), then four more blocks: the ring has four.
    let wrs: Vec<SendWr<'_>> = (10..15)
        .map(|i| {
            let wr = SendWr::send(i, &sgl);
            if i < 12 { wr.signaled() } else { wr }
        })
        .collect();
    let e = post_all(&mut rig, &wrs).unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (4, PostError::QueueFull { needed: 5, free: 4 })
    );
    visible(&mut rig).assert_same(&before, "refused");
    // One more signaled one than the CQ share allows.
    let wrs = [
        SendWr::send(20, &sgl).signaled(),
        SendWr::send(21, &sgl),
        SendWr::send(22, &sgl).signaled(),
        SendWr::send(23, &sgl).signaled(),
    ];
    let e = post_all(&mut rig, &wrs).unwrap_err();
    assert_eq!((e.index, e.error), (3, PostError::CqFull { limit: 4 }));
    visible(&mut rig).assert_same(&before, "refused");
    // Two more complete; the queue has not read the credit word since. A batch that fits
    // only with them reads it again at its fifth request, and is taken whole.
    for i in 2..4 {
        rig.mem
            .put_cqe(i, req_cqe(QPN, opcode::SEND, i as u16, 0, 0));
    }
    assert_eq!(rig.cq.poll(&mut [Completion::EMPTY; 4]), 2);
    let wrs = [
        SendWr::send(30, &sgl).signaled(),
        SendWr::send(31, &sgl).signaled(),
        SendWr::send(32, &sgl),
        SendWr::send(33, &sgl),
        SendWr::send(34, &sgl).signaled(),
        SendWr::send(35, &sgl).signaled(),
    ];
    post_all(&mut rig, &wrs).unwrap();
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (12, 12));
    assert_eq!(rig.sq.outstanding_signaled(), 4);
}

/// The gate, as the batch finds it: a closed gate refuses a batch at its first request
/// (after that request's own check), an empty batch asks nothing of it, and an open gate of
/// a later incarnation restarts the counters before the batch is written.
#[test]
fn a_batch_meets_the_gate_before_its_first_request() {
    let sgl = [Sge::new(0x1000, 8, 1)];
    let three = [sgl[0]; 3];
    let mut rig = Rig::new(8, 256, caps(2, 0));
    post_all(&mut rig, &[SendWr::send(1, &sgl)]).unwrap();
    let gate = rig.bindings[0].sq.clone().unwrap();
    gate.gate().close();
    let before = visible(&mut rig);
    let e = post_all(&mut rig, &[SendWr::send(2, &three), SendWr::nop(3)]).unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (0, PostError::TooManySges { got: 3, max: 2 })
    );
    let e = post_all(&mut rig, &[SendWr::send(2, &sgl), SendWr::nop(3)]).unwrap_err();
    assert_eq!((e.index, e.error), (0, PostError::NotReady));
    post_all(&mut rig, &[]).unwrap();
    visible(&mut rig).assert_same(&before, "refused");
    // SAFETY: nothing polls or posts meanwhile.
    unsafe {
        crate::clear_doorbell_record(&rig.mem.qp_layout(QPN, 8, 256));
        gate.restart();
    }
    gate.gate().open();
    post_all(&mut rig, &[SendWr::send(4, &sgl), SendWr::nop(5)]).unwrap();
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (2, 2));
}

/// A batch of one rides on BlueFlame, as a single post does; a batch after a staged request
/// (a batch of one again) rings both with the 8-byte doorbell of the batch's WQE.
#[test]
fn a_batch_rings_once_for_itself_and_what_was_staged() {
    let sgl = [Sge::new(0x1000, 8, 1)];
    let r = RemoteBuf::new(0x4000, 1);
    let mut rig = Rig::new(16, 256, caps(1, 0));
    // Stale bytes, which a BlueFlame copy of a whole block would carry.
    rig.mem.fill_sq(0xee);
    post_all(&mut rig, &[SendWr::write(1, &sgl, r).signaled()]).unwrap();
    let ring = rig.mem.sq_bytes();
    assert_eq!(
        rig.mem.bf_bytes()[..64],
        ring[..64],
        "the whole WQE by BlueFlame"
    );
    assert_eq!((rig.sq.pending(), rig.mem.dbrec(1)), (0, 1));
    stage(&mut rig, &SendWr::send(2, &sgl)).unwrap();
    post_all(&mut rig, &[SendWr::nop(3)]).unwrap();
    let ring = rig.mem.sq_bytes();
    let bf = rig.mem.bf_bytes();
    assert_eq!(
        bf[256..264],
        ring[2 * 64..2 * 64 + 8],
        "the batch's doorbell"
    );
    assert!(bf[264..320].iter().all(|&b| b == 0), "8 bytes only");
    assert_eq!((rig.sq.pending(), rig.mem.dbrec(1)), (0, 3));
}

/// The credit word read again in the middle of a batch, when the ring is full: the
/// completions polled since free exactly the room the batch's next request needs, one block
/// and the last CQE of the CQ share, and it is taken.
#[test]
fn a_batch_fits_in_exactly_what_was_returned_mid_batch() {
    use crate::testutil::req_cqe;
    use zverbs_core::{Completion, PollCq};
    let sgl = [Sge::new(0x1000, 8, 1)];
    let mut rig = Rig::with_cq(
        4,
        256,
        SqCaps {
            max_signaled: 2,
            ..caps(1, 0)
        },
        64,
    );
    for i in 0..2 {
        // SAFETY: never executed.
        unsafe { rig.sq.post(&SendWr::send(i, &sgl).signaled()) }.unwrap();
    }
    // The first completes; the queue does not read the credit word until the ring is full.
    rig.mem.put_cqe(0, req_cqe(QPN, opcode::SEND, 0, 0, 0));
    assert_eq!(rig.cq.poll(&mut [Completion::EMPTY; 2]), 1);
    let wrs = [
        SendWr::nop(2),
        SendWr::nop(3),
        SendWr::send(4, &sgl).signaled(),
    ];
    post_all(&mut rig, &wrs).unwrap();
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (5, 5));
    assert_eq!(rig.sq.outstanding_signaled(), 2);
}

#[test]
fn inline_requests_of_one_entry_are_written_alike_posted_alone_or_in_a_batch() {
    // Posted alone, a request of one entry may take the word-built writer of the common
    // shapes; in a batch every request takes the segment writer. An inline one is not of
    // those shapes: its data is in the WQE, whatever the path.
    let payload: Vec<u8> = (1..=40).collect();
    let remote = RemoteBuf::new(0x2000, 9);
    let mk = |n: usize| [Sge::new(payload.as_ptr() as u64, n as u32, 3)];
    let (s12, s20, s4, s40) = (mk(12), mk(20), mk(4), mk(40));
    let wrs = [
        SendWr::send(1, &s12).inline(),
        SendWr::write(2, &s20, remote).inline().signaled(),
        SendWr::send_imm(3, &s4, 0x55).inline(),
        SendWr::write_imm(4, &s40, remote, 7).inline(),
    ];
    let mut alone = Rig::new(16, 256, caps(1, 64));
    for wr in &wrs {
        // SAFETY: never executed by a device; the inline sources are readable.
        unsafe { alone.sq.post(wr) }.unwrap();
    }
    let mut batch = Rig::new(16, 256, caps(1, 64));
    post_all(&mut batch, &wrs).unwrap();
    assert_eq!(alone.sq.producer(), batch.sq.producer());
    let (a, b) = (alone.mem.sq_bytes(), batch.mem.sq_bytes());
    let blocks = alone.sq.producer() as usize;
    assert_eq!(&a[..blocks * 64], &b[..blocks * 64]);
    // The first WQE: control, then the inline segment holding the bytes.
    assert_eq!(
        u32::from_be_bytes(a[16..20].try_into().unwrap()),
        0x8000_0000 | 12
    );
    assert_eq!(&a[20..32], &payload[..12]);
}

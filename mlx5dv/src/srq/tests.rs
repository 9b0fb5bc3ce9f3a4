//! The shared receive queue over ordinary memory: what it reports, where each receive goes,
//! the doorbell record, the full queue and the WQEs the poller frees.

extern crate std;

use std::vec::Vec;

use super::*;
use crate::state::{SrqSlot, SrqState};
use crate::testutil::{Block, Raw};
use zverbs_core::Sge;

const SRQN: u32 = 0x42;

/// An SRQ of four 64-byte WQEs (three entries each), its free list 0 → 1 → 2 → 3.
struct Srq {
    ring: Raw<Block>,
    dbrec: Raw<u32>,
    layout: SrqLayout,
}

impl Srq {
    fn new() -> Self {
        let ring = Raw::new(Block([0; 64]), 4);
        for i in 0..3u16 {
            ring.write_bytes(
                i as usize * 64 + srq_next::NEXT_WQE_INDEX.start,
                &(i + 1).to_be_bytes(),
            );
        }
        let dbrec = Raw::new(0u32, 1);
        let layout = SrqLayout {
            srqn: SRQN,
            buf: ring.ptr().cast(),
            dbrec: dbrec.ptr(),
            stride: 64,
            wqe_cnt: 4,
            head: 0,
            tail: 3,
        };
        Self {
            ring,
            dbrec,
            layout,
        }
    }

    /// The doorbell record, host order.
    fn dbrec(&self) -> u32 {
        u32::from_be_bytes(self.dbrec.bytes()[..4].try_into().unwrap())
    }

    /// The first data segment of WQE `i`: (length, lkey, address).
    fn data(&self, i: usize) -> (u32, u32, u64) {
        let b = self.ring.bytes();
        let d = &b[i * 64 + 16..i * 64 + 32];
        (
            u32::from_be_bytes(d[0..4].try_into().unwrap()),
            u32::from_be_bytes(d[4..8].try_into().unwrap()),
            u64::from_be_bytes(d[8..16].try_into().unwrap()),
        )
    }
}

fn post(q: &mut SharedRecvQueue<&SrqState<&[SrqSlot]>>, id: u64) -> Result<(), PostError> {
    let sgl = [Sge::new(0x1000 * id, 0x10 + id as u32, 7)];
    // SAFETY: the receives are never executed by a device.
    unsafe { q.post(&RecvWr::new(id, &sgl)) }
}

#[test]
fn posts_follow_the_free_list_until_full_and_take_what_the_poller_frees() {
    let srq = Srq::new();
    let slots: Vec<SrqSlot> = (0..4).map(|_| SrqSlot::new()).collect();
    // SAFETY: the ring and doorbell record outlive the state and the queue; the SRQ is new,
    // its free list runs from head to tail; nothing else posts to it.
    let state = unsafe { SrqState::new(&srq.layout, &slots[..]) }.unwrap();
    // SAFETY: as above.
    let mut q = unsafe { SharedRecvQueue::new(&srq.layout, &state) }.unwrap();
    assert_eq!((q.srqn(), q.max_sge()), (SRQN, 3));
    assert_eq!((q.posted(), q.head(), q.free()), (0, 0, 3));

    // Three receives: WQEs 0, 1, 2, each published in the doorbell record.
    for id in 1..=3u64 {
        post(&mut q, id).unwrap();
        assert_eq!(q.posted(), id as u32);
        assert_eq!(q.head(), id as u32);
        assert_eq!(q.free(), 3 - id as u32);
        assert_eq!(srq.dbrec(), id as u32);
        assert_eq!(
            srq.data(id as usize - 1),
            (0x10 + id as u32, 7, 0x1000 * id)
        );
    }
    // Full: the tail WQE is never taken; the refusal writes nothing.
    let ring = srq.ring.bytes();
    assert_eq!(
        post(&mut q, 4),
        Err(PostError::QueueFull { needed: 1, free: 0 })
    );
    assert_eq!((q.posted(), q.head(), srq.dbrec()), (3, 3, 3));
    assert_eq!(srq.ring.bytes(), ring);

    // The poller frees WQE 1 (linked behind the tail, 3): one receive fits, into WQE 3,
    // and the next would go to WQE 1. The post finds the room itself (its cached count is
    // still 0), exactly the one receive it needs.
    // SAFETY: WQE 1 was posted; this test is the one poller.
    assert_eq!(unsafe { state.retire(1) }, 2);
    post(&mut q, 5).unwrap();
    assert_eq!((q.posted(), q.head(), q.free(), srq.dbrec()), (4, 1, 0, 4));
    assert_eq!(srq.data(3), (0x15, 7, 0x5000));
    assert_eq!(
        post(&mut q, 6),
        Err(PostError::QueueFull { needed: 1, free: 0 })
    );
}

//! The shared receive queue over ordinary memory: what it reports, where each receive goes,
//! the doorbell record, the full queue and the WQEs the poller frees.

extern crate std;

use std::vec::Vec;

use super::*;
use crate::devmem::Reported;
use crate::state::{Polled, SrqSlot, SrqState};
use crate::testutil::SrqMem;
use zverbs_core::Sge;

const SRQN: u32 = 0x42;

fn post(q: &mut SharedRecvQueue<&SrqState<&[SrqSlot]>>, id: u64) -> Result<(), PostError> {
    let sgl = [Sge::new(0x1000 * id, 0x10 + id as u32, 7)];
    // SAFETY: the receives are never executed by a device.
    unsafe { q.post(&RecvWr::new(id, &sgl)) }
}

#[test]
fn posts_follow_the_free_list_until_full_and_take_what_the_poller_frees() {
    let srq = SrqMem::new(SRQN);
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
    // SAFETY: WQE 1 was posted and this test, playing the device, reports it complete (as a
    // session's completion would); it is the one poller.
    let retired = unsafe { Polled::new(&state).retire(Reported::in_session(1)) };
    assert_eq!(retired, 2);
    post(&mut q, 5).unwrap();
    assert_eq!((q.posted(), q.head(), q.free(), srq.dbrec()), (4, 1, 0, 4));
    assert_eq!(srq.data(3), (0x15, 7, 0x5000));
    assert_eq!(
        post(&mut q, 6),
        Err(PostError::QueueFull { needed: 1, free: 0 })
    );
}

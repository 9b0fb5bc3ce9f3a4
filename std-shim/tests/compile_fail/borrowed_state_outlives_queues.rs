//! With borrowed bookkeeping (`no_std` code's way), the borrow checker keeps the slots, the
//! states and the bindings alive for as long as a queue or poller uses them.

use zverbs::mlx5::{
    CompletionQueue, CqBinding, CqLayout, QpLayout, RecvQueue, RqSlot, RqState, SendQueue, SqCaps,
    SqSlot, SqState,
};
use zverbs::{Completion, PollCq};

fn slots_outlive_the_send_queue(layout: &QpLayout, caps: SqCaps) {
    let slots: Vec<SqSlot> = (0..4).map(|_| SqSlot::new()).collect();
    let state = SqState::new(&slots[..]).unwrap();
    // SAFETY: (not run) the layout describes live queue memory.
    let sq = unsafe { SendQueue::new(layout, caps, &state, None) }.unwrap();
    drop(slots);
    drop(sq);
}

fn state_outlives_the_recv_queue(layout: &QpLayout) {
    let slots: Vec<RqSlot> = (0..4).map(|_| RqSlot::new()).collect();
    let state = RqState::new(&slots[..]).unwrap();
    // SAFETY: (not run) as above.
    let rq = unsafe { RecvQueue::new(layout, &state) }.unwrap();
    drop(state);
    drop(rq);
}

fn bindings_outlive_the_poller(layout: &CqLayout, qpn: u32) {
    let slots: Vec<SqSlot> = (0..4).map(|_| SqSlot::new()).collect();
    let state = SqState::new(&slots[..]).unwrap();
    let bindings = vec![CqBinding::send_only(qpn, &state)];
    // SAFETY: (not run) as above.
    let mut cq = unsafe { CompletionQueue::new(layout, &bindings[..]) }.unwrap();
    drop(bindings);
    cq.poll(&mut [Completion::EMPTY; 4]);
}

fn main() {}

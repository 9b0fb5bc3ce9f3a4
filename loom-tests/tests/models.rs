//! The models. Run with `cargo xtask loom` (all models, then every mutant).

use zverbs_core::{Completion, PollCq, PostRecv, PostSend, RecvWr, RemoteBuf, SendWr, Sge};
use zverbs_loom_tests::mem::{Mem, QPN, SrqMem, caps, free, leak, req_cqe, srq_cqe};
use zverbs_loom_tests::{check, thread};

#[cfg(zverbs_loom)]
use loom::sync::{Condvar, Mutex};
use std::ptr::NonNull;
#[cfg(not(zverbs_loom))]
use std::sync::{Condvar, Mutex};
use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::{
    CompletionQueue, CqArm, CqBinding, RecvQueue, RqRef, RqSlot, RqState, SendQueue, SharedBf,
    SharedRecvQueue, SqSlot, SqState, SrqSlot, SrqState,
};

/// A send queue's state, borrowed by the queue and the CQ as `no_std` code does.
type Sq = &'static SqState<&'static [SqSlot]>;
/// A receive queue's state, likewise.
type Rq = &'static RqState<&'static [RqSlot]>;

fn sq_state(blocks: usize) -> (&'static Vec<SqSlot>, Sq) {
    let slots: &'static Vec<SqSlot> = leak((0..blocks).map(|_| SqSlot::new()).collect());
    let state = leak(SqState::new(&slots[..]).expect("power of two"));
    (slots, state)
}

/// Basic blocks of a WQE of `ds` segments.
fn blocks(ds: u8) -> u32 {
    u32::from(ds).div_ceil(4)
}

/// Send path: the poster writes a WQE of two basic blocks that wraps the end of the ring and
/// rings, then (after a refused batch that wrote the next block and rolled back) a one-block
/// WQE and rings again; a NIC that sees a doorbell-record value reads
/// every segment of every WQE before it, and must see exactly what was written. Catches
/// `no_to_device` (the barrier between the WQE stores and the doorbell record).
fn send_path() {
    let mem = leak(Mem::new(4, 1, 4));
    let (slots, state) = sq_state(4);
    let bindings: &'static [CqBinding<Sq, Rq>; 1] = leak([CqBinding::new(QPN, Some(state), None)]);
    let layout = mem.qp_layout();
    // SAFETY: the memory outlives the queue (freed after the joins below); only this queue
    // posts to it.
    let mut sq = unsafe { SendQueue::new(&layout, caps(), state, None) }.expect("valid layout");
    // Set-up, before the threads: three NOPs executed and completed, so the producer is at
    // block 3 and the next two-block WQE wraps to block 0.
    {
        // SAFETY: the memory outlives the CQ; only this CQ polls it.
        let mut cq =
            unsafe { CompletionQueue::new(&mem.cq_layout(), &bindings[..]) }.expect("layout");
        let mut wc = [Completion::EMPTY; 4];
        for i in 0..3u16 {
            // SAFETY: nothing executes the NOPs' memory.
            unsafe { sq.post(&SendWr::nop(u64::from(i)).signaled()) }.expect("fits");
            mem.nic_write_cqe(usize::from(i), req_cqe(opcode::NOP, i, 0));
        }
        assert_eq!(cq.poll(&mut wc), 3);
    }

    let nic = thread::spawn(move || {
        let mut seen = 3u32;
        let mut wqes = 0;
        while wqes < 2 {
            let pi = Mem::nic_dbrec(&mem.dbrec[1]);
            while seen != pi {
                let ctrl = mem.nic_read_sq(seen * 4);
                let ds = ctrl[7] & 0x3f;
                assert_eq!(
                    u16::from_be_bytes([ctrl[1], ctrl[2]]),
                    seen as u16,
                    "wqe index"
                );
                let want = if wqes == 0 {
                    opcode::RDMA_WRITE
                } else {
                    opcode::SEND
                };
                assert_eq!(ctrl[3], want, "opcode of WQE {wqes}");
                let segs: Vec<[u8; 16]> = (1..u32::from(ds))
                    .map(|s| mem.nic_read_sq(seen * 4 + s))
                    .collect();
                if wqes == 0 {
                    assert_eq!(ds, 5, "ctrl, raddr and 3 inline segments");
                    assert_eq!(&segs[1][..4], &[0x80, 0, 0, 40], "inline header");
                    assert_eq!(&segs[1][4..], &[7; 12], "inline data, first block");
                    assert_eq!(segs[2], [7; 16], "inline data, wrapped to block 0");
                    assert_eq!(&segs[3][..12], &[7; 12], "inline data, end");
                } else {
                    assert_eq!(&segs[0][..4], &64u32.to_be_bytes(), "byte count");
                }
                seen += blocks(ds);
                wqes += 1;
            }
            thread::yield_now();
        }
    });
    let poster = thread::spawn(move || {
        let payload = [7u8; 40];
        let inline = [Sge::from_slice(&payload, 0)];
        let sgl = [Sge::new(0x2000, 64, 9)];
        // SAFETY: the model's NIC never touches local memory.
        unsafe {
            sq.post(&SendWr::write(1, &inline, RemoteBuf::new(0x1000, 5)).inline())
                .expect("fits");
            // A batch refused at its second request: its first is written past the producer
            // counter, in the block the next WQE takes, and rolled back. The NIC never reads
            // it (no doorbell record covers it); it reads the SEND written over it.
            let two = [sgl[0]; 2];
            let refused = [SendWr::nop(8).signaled(), SendWr::send(9, &two)];
            sq.post_all(&refused).expect_err("two entries, one allowed");
            sq.post(&SendWr::send(2, &sgl).signaled()).expect("fits");
        }
        sq
    });
    // The joined queues are dropped at once, before the memory they point into is freed.
    poster.join().expect("poster");
    nic.join().expect("nic");
    // SAFETY: every thread is joined and every queue dropped.
    unsafe {
        free(bindings);
        free(state);
        free(slots);
        free(mem);
    }
}

/// Completion path: the NIC writes three CQEs into a 2-entry CQ (body, then owner byte), so it
/// must wait for the poller's consumer index before reusing an entry; the poller reads a body
/// only after its owner byte. Catches `no_from_device` (the barrier after the owner check) and
/// `relaxed_cq_ci` (a consumer index published without `Release`, which would let the NIC
/// overwrite an entry still being read).
fn completion_path() {
    let mem = leak(Mem::new(4, 1, 2));
    let (slots, state) = sq_state(4);
    let bindings: &'static [CqBinding<Sq, Rq>; 1] = leak([CqBinding::new(QPN, Some(state), None)]);
    let layout = mem.qp_layout();
    {
        // SAFETY: as in `send_path`.
        let mut sq = unsafe { SendQueue::new(&layout, caps(), state, None) }.expect("valid layout");
        for i in 0..3 {
            // SAFETY: the NIC touches no local memory.
            unsafe { sq.stage(&SendWr::nop(10 + i).signaled()) }.expect("fits");
        }
        sq.ring();
    }
    // SAFETY: the memory outlives the CQ; only this CQ polls it.
    let mut cq =
        unsafe { CompletionQueue::new(&mem.cq_layout(), &bindings[..]) }.expect("valid layout");

    let nic = thread::spawn(move || {
        for k in 0..3u32 {
            // Wait for room: the poller's consumer index, published in the CQ doorbell record.
            while k - Mem::nic_dbrec(&mem.cq_dbrec[0]) >= 2 {
                thread::yield_now();
            }
            mem.nic_write_cqe((k % 2) as usize, req_cqe(opcode::NOP, k as u16, k / 2));
        }
    });
    let poller = thread::spawn(move || {
        let mut got = Vec::new();
        let mut wc = [Completion::EMPTY; 2];
        while got.len() < 3 {
            let n = cq.poll(&mut wc);
            got.extend(wc[..n].iter().map(|c| c.wr_id));
            thread::yield_now();
        }
        assert_eq!(got, [10, 11, 12]);
        cq
    });
    poller.join().expect("poller");
    nic.join().expect("nic");
    // SAFETY: every thread is joined and every queue dropped.
    unsafe {
        free(bindings);
        free(state);
        free(slots);
        free(mem);
    }
}

/// Credit return: the poster posts three signaled NOPs into a 2-block ring, so it must wait for
/// credits; another thread plays the NIC (executing what the doorbell record publishes and
/// writing CQEs) and then polls and returns credits. The poster never overwrites a slot whose
/// completion has not been consumed, and does not stall once completions arrive. Catches
/// `relaxed_credit` (credits handed back without `Release`). The device and the poller share a
/// thread here to keep the model small; their own protocol is `completion_path`'s.
fn credit_return() {
    let mem = leak(Mem::new(2, 1, 4));
    let (slots, state) = sq_state(2);
    let bindings: &'static [CqBinding<Sq, Rq>; 1] = leak([CqBinding::new(QPN, Some(state), None)]);
    let layout = mem.qp_layout();
    // SAFETY: as in `send_path`.
    let mut sq = unsafe { SendQueue::new(&layout, caps(), state, None) }.expect("valid layout");
    // SAFETY: as in `completion_path`.
    let mut cq =
        unsafe { CompletionQueue::new(&mem.cq_layout(), &bindings[..]) }.expect("valid layout");

    let poster = thread::spawn(move || {
        for i in 0..3u64 {
            loop {
                // SAFETY: the NIC touches no local memory.
                match unsafe { sq.post(&SendWr::nop(20 + i).signaled()) } {
                    Ok(()) => break,
                    Err(zverbs_core::PostError::QueueFull { .. }) => thread::yield_now(),
                    Err(e) => panic!("unexpected {e}"),
                }
            }
        }
        sq
    });
    let device_and_poller = thread::spawn(move || {
        let mut seen = 0u32;
        let mut got = Vec::new();
        let mut wc = [Completion::EMPTY; 4];
        while got.len() < 3 {
            let pi = Mem::nic_dbrec(&mem.dbrec[1]);
            while seen != pi {
                let ctrl = mem.nic_read_sq(seen * 4);
                assert_eq!(ctrl[3], opcode::NOP);
                mem.nic_write_cqe(seen as usize, req_cqe(opcode::NOP, seen as u16, 0));
                seen += 1;
            }
            let n = cq.poll(&mut wc);
            got.extend(wc[..n].iter().map(|c| c.wr_id));
            thread::yield_now();
        }
        assert_eq!(got, [20, 21, 22]);
        cq
    });
    poster.join().expect("poster");
    device_and_poller.join().expect("device and poller");
    // SAFETY: every thread is joined and every queue dropped.
    unsafe {
        free(bindings);
        free(state);
        free(slots);
        free(mem);
    }
}

/// Receive path: receive WQEs are visible to the NIC before the receive doorbell record that
/// publishes them. Catches `no_to_device`.
fn recv_path() {
    let mem = leak(Mem::new(1, 4, 4));
    let rslots: &'static Vec<RqSlot> = leak((0..4).map(|_| RqSlot::new()).collect());
    let rstate = leak(RqState::new(&rslots[..]).expect("power of two"));
    let layout = mem.qp_layout();
    // SAFETY: the memory outlives the queue; only this queue posts receives.
    let mut rq = unsafe { RecvQueue::new(&layout, rstate) }.expect("valid layout");
    let nic = thread::spawn(move || {
        let mut seen = 0u32;
        while seen < 2 {
            let head = Mem::nic_dbrec(&mem.dbrec[0]);
            while seen != head {
                let seg = mem.nic_read_rq(seen);
                assert_eq!(&seg[..8], &[0, 0, 0, 32, 0, 0, 0, 7 + seen as u8]);
                seen += 1;
            }
            thread::yield_now();
        }
    });
    let poster = thread::spawn(move || {
        for i in 0..2u32 {
            let sgl = [Sge::new(0x1000, 32, 7 + i)];
            // SAFETY: the NIC touches no local memory.
            unsafe { rq.post(&RecvWr::new(u64::from(i), &sgl)) }.expect("fits");
        }
        rq
    });
    poster.join().expect("poster");
    nic.join().expect("nic");
    // SAFETY: every thread is joined and every queue dropped.
    unsafe {
        free(rstate);
        free(rslots);
        free(mem);
    }
}

/// A shared receive queue's state, borrowed.
type Srq = &'static SrqState<&'static [SrqSlot]>;

/// Shared receive queue free list: an SRQ of four WQEs (three receives outstanding at most)
/// is full, and the NIC has completed WQE 0. On one thread the CQ's poller takes that CQE,
/// reads WQE 0's `wr_id`, links it behind the tail (WQE 3's next segment) and counts it freed;
/// on another the poster waits for room and posts a fourth receive into the head WQE, 3,
/// following 3's link to the new head, 0. The poster's read of that link must come after the
/// poller's write of it. Catches `relaxed_srq_free` (the freed count published with
/// `Relaxed`): the poster then sees the room but not the link.
fn srq_free_list() {
    let mem = leak(Mem::new(1, 1, 4));
    let srq_mem = leak(SrqMem::new(4));
    let layout = srq_mem.layout();
    let slots: &'static Vec<SrqSlot> = leak((0..4).map(|_| SrqSlot::new()).collect());
    // SAFETY: the ring outlives the state (freed after the joins below); the SRQ is new.
    let state: Srq = leak(unsafe { SrqState::new(&layout, &slots[..]) }.expect("layout"));
    let bindings: &'static [CqBinding<Sq, RqRef<'static>, Srq>; 1] =
        leak([CqBinding::with_srq(QPN, None, state)]);
    // SAFETY: as above; only this queue posts to the SRQ, and its QP's receives complete on
    // the CQ below.
    let mut srq = unsafe { SharedRecvQueue::new(&layout, state) }.expect("layout");
    // SAFETY: the memory outlives the CQ; only this CQ polls it.
    let mut cq = unsafe { CompletionQueue::new(&mem.cq_layout(), &bindings[..]) }.expect("layout");
    // Set-up, before the threads: three receives fill the SRQ, and the NIC completes the
    // first.
    for i in 0..3u32 {
        let sgl = [Sge::new(0x1000, 32, 7 + i)];
        // SAFETY: the NIC touches no local memory.
        unsafe { srq.post(&RecvWr::new(u64::from(i), &sgl)) }.expect("fits");
    }
    assert_eq!((srq.head(), srq.free()), (3, 0));
    mem.nic_write_cqe(0, srq_cqe(0));

    let poller = thread::spawn(move || {
        let mut wc = [Completion::EMPTY; 1];
        while cq.poll(&mut wc) == 0 {
            thread::yield_now();
        }
        assert_eq!((wc[0].wr_id, wc[0].qp_num), (0, QPN));
        cq
    });
    let poster = thread::spawn(move || {
        while srq.free() == 0 {
            thread::yield_now();
        }
        let sgl = [Sge::new(0x2000, 16, 11)];
        // SAFETY: as above.
        unsafe { srq.post(&RecvWr::new(3, &sgl)) }.expect("fits");
        assert_eq!(srq.head(), 0, "the link the poller wrote");
        srq
    });
    let srq = poster.join().expect("poster");
    let cq = poller.join().expect("poller");
    assert_eq!(&srq_mem.nic_read_data(3)[..8], &[0, 0, 0, 16, 0, 0, 0, 11]);
    let _ = (srq, cq);
    // SAFETY: every thread is joined and every queue dropped.
    unsafe {
        free(bindings);
        free(state);
        free(slots);
        free(srq_mem);
        free(mem);
    }
}

/// Shared BlueFlame register: two send queues on two threads whose QPs share one register
/// each post a NOP and ring (BlueFlame: the one-block WQE fits the 64-byte buffers). Both take
/// the register's lock; inside it each reads and flips the shared toggle (a loom cell), copies
/// into the buffer it names and flushes. Afterwards the two buffers hold one WQE each, one per
/// QP. Catches `relaxed_bf_lock` (the lock taken with `Relaxed`): the next holder's read of
/// the toggle is then not ordered after the previous holder's write.
fn shared_blueflame() {
    let mem_a = leak(Mem::new(4, 1, 4));
    let mem_b = leak(Mem::new(4, 1, 4));
    let (slots_a, state_a) = sq_state(4);
    let (slots_b, state_b) = sq_state(4);
    let shared = leak(SharedBf::new(64));
    let layout_a = mem_a.qp_layout();
    let mut layout_b = mem_b.qp_layout();
    layout_b.qpn = QPN + 1;
    layout_b.bf = layout_a.bf;
    // SAFETY: the memory outlives the queues (freed after the joins below); each ring is
    // posted to by one queue, and the shared register is written only by the two queues that
    // hold `shared`.
    let (mut sq_a, mut sq_b) = unsafe {
        (
            SendQueue::new(&layout_a, caps(), state_a, Some(shared)).expect("valid layout"),
            SendQueue::new(&layout_b, caps(), state_b, Some(shared)).expect("valid layout"),
        )
    };
    let a = thread::spawn(move || {
        // SAFETY: nothing executes the NOP's memory.
        unsafe { sq_a.post(&SendWr::nop(1)) }.expect("fits");
        sq_a
    });
    let b = thread::spawn(move || {
        // SAFETY: as above.
        unsafe { sq_b.post(&SendWr::nop(2)) }.expect("fits");
        sq_b
    });
    a.join().expect("poster a");
    b.join().expect("poster b");
    // Both rings are done: each buffer holds the control segment of one of the two QPs.
    let qpn_in =
        |buffer: usize| u32::from_be_bytes(mem_a.bf_bytes(buffer)[4..8].try_into().unwrap()) >> 8;
    let mut qpns = [qpn_in(0), qpn_in(1)];
    qpns.sort_unstable();
    assert_eq!(qpns, [QPN, QPN + 1], "one WQE per buffer");
    // SAFETY: every thread is joined and every queue dropped.
    unsafe {
        free(shared);
        free(state_a);
        free(state_b);
        free(slots_a);
        free(slots_b);
        free(mem_a);
        free(mem_b);
    }
}

/// The device's side of arming, in the weakest form a waiter may meet (the verbs contract):
/// an arm (the CQ doorbell, taken in order with the device's CQE writes) asks for one event
/// at the next CQE written; a CQE written before the arm raises nothing.
struct ArmingNic {
    /// Armed, and an event raised and not yet taken; one lock, as the device serialises its
    /// doorbells with its own writes.
    state: Mutex<Arming>,
    /// Where the waiter sleeps until the event.
    wake: Condvar,
}

#[derive(Default)]
struct Arming {
    armed: bool,
    event: bool,
}

/// Completion events: the poller waits for two completions with the library's protocol
/// (`poll_arm_poll`: poll, arm with the mlx5 arm sequence, poll again, sleep only when that
/// poll is empty; each event advances the arm sequence number); the NIC writes the two CQEs,
/// raising the event for an armed CQ. A wake-up that never comes leaves the poller asleep for
/// ever, which loom reports as a deadlock. Catches `no_repoll_after_arm` (both CQEs written
/// between the first poll and the arm), and `no_from_device` (a CQE body read before the
/// device's write of it is ordered before the read, in a poll that found its owner byte
/// without the device's lock in between).
fn cq_arm() {
    let mem = leak(Mem::new(4, 1, 4));
    let uar: &'static [u64; 8] = leak([0u64; 8]);
    let (slots, state) = sq_state(4);
    let bindings: &'static [CqBinding<Sq, Rq>; 1] = leak([CqBinding::new(QPN, Some(state), None)]);
    let layout = mem.qp_layout();
    {
        // SAFETY: as in `send_path`.
        let mut sq = unsafe { SendQueue::new(&layout, caps(), state, None) }.expect("valid layout");
        for i in 0..2 {
            // SAFETY: the NIC touches no local memory.
            unsafe { sq.stage(&SendWr::nop(20 + i).signaled()) }.expect("fits");
        }
        sq.ring();
    }
    let nic: &'static ArmingNic = leak(ArmingNic {
        state: Mutex::new(Arming::default()),
        wake: Condvar::new(),
    });
    let cq_layout = mem.cq_layout();
    // SAFETY: the memory outlives the CQ; only this CQ polls it.
    let mut cq = unsafe { CompletionQueue::new(&cq_layout, &bindings[..]) }.expect("layout");
    // SAFETY: the record and the stand-in UAR outlive the arm; only it writes them.
    let mut arm = unsafe { CqArm::new(&cq_layout, NonNull::from(uar).cast()) };

    let device = thread::spawn(move || {
        for k in 0..2u32 {
            let mut s = nic.state.lock().unwrap();
            mem.nic_write_cqe(k as usize, req_cqe(opcode::NOP, k as u16, 0));
            if std::mem::take(&mut s.armed) {
                s.event = true;
                nic.wake.notify_one();
            }
        }
    });

    let mut got = Vec::new();
    let mut wc = [Completion::EMPTY; 4];
    while got.len() < 2 {
        let n =
            zverbs_core::event::poll_arm_poll(&mut cq, &mut wc, |cq: &mut CompletionQueue<_>| {
                arm.arm(cq.consumer(), false);
                // The doorbell: the device takes the arm word from the record.
                let word = Mem::nic_dbrec(&mem.cq_dbrec[1]);
                assert_eq!(
                    word & 0x00ff_ffff,
                    cq.consumer(),
                    "the arm names the consumer index"
                );
                nic.state.lock().unwrap().armed = true;
                Ok::<(), ()>(())
            })
            .expect("arms");
        got.extend(wc[..n].iter().map(|c| c.wr_id));
        if n == 0 {
            let mut s = nic.state.lock().unwrap();
            while !s.event {
                s = nic.wake.wait(s).unwrap();
            }
            s.event = false;
            drop(s);
            arm.event();
        }
    }
    assert_eq!(got, [20, 21]);
    device.join().expect("device");
    let _ = (cq, arm);
    // SAFETY: every thread is joined and every queue dropped.
    unsafe {
        free(nic);
        free(bindings);
        free(state);
        free(slots);
        free(uar);
        free(mem);
    }
}

#[test]
fn model_cq_arm() {
    check("cq_arm", &["no_repoll_after_arm", "no_from_device"], cq_arm);
}

#[test]
fn model_send_path() {
    check("send_path", &["no_to_device"], send_path);
}

#[test]
fn model_completion_path() {
    check(
        "completion_path",
        &["no_from_device", "relaxed_cq_ci"],
        completion_path,
    );
}

#[test]
fn model_credit_return() {
    check(
        "credit_return",
        &["relaxed_credit", "no_to_device"],
        credit_return,
    );
}

#[test]
fn model_recv_path() {
    check("recv_path", &["no_to_device"], recv_path);
}

#[test]
fn model_srq_free_list() {
    check("srq_free_list", &["relaxed_srq_free"], srq_free_list);
}

#[test]
fn model_shared_blueflame() {
    check("shared_blueflame", &["relaxed_bf_lock"], shared_blueflame);
}

#[cfg(not(zverbs_loom))]
#[test]
fn mem_helpers_build_consistent_layouts() {
    let m = Mem::new(4, 2, 2);
    let l = m.qp_layout();
    assert_eq!((l.sq.wqe_cnt, l.rq.wqe_cnt, l.bf.size), (4, 2, 64));
    assert_eq!(m.cq_layout().cqe_cnt, 2);
    assert_eq!(req_cqe(opcode::NOP, 3, 1)[63], 1);
}

/// Table hand-over: the control path publishes two tables one after the other while the
/// poller polls (adopting what waits) and reads its table; the control path then frees what
/// the poller acknowledged, and the rest once the poller is gone. The poller sees tables in
/// order, and nothing it may still read is freed. Catches `early_retire` (the poller
/// acknowledges a replaced table before it is done with it: the control path's reclaim races
/// its last access).
fn table_handover() {
    use std::sync::Arc;
    use zverbs_core::handover::{Handover, Node};

    fn free_list(mut n: *mut Node<u32>, out: &mut Vec<u32>) {
        while !n.is_null() {
            // SAFETY: a reclaimed or unadopted node, the control path's alone, freed once.
            let next = unsafe { Node::next_reclaimed(n) };
            // SAFETY: allocated with `Box::into_raw` below.
            out.push(unsafe { Box::from_raw(n) }.into_table());
            n = next;
        }
    }

    let h: Arc<Handover<u32>> = Arc::new(Handover::new());
    let hp = Arc::clone(&h);
    let poller = thread::spawn(move || {
        let mut current = 0u32;
        let mut seen = Vec::new();
        for _ in 0..2 {
            if hp.pending() {
                // SAFETY: the one poller.
                unsafe { hp.adopt(|t| core::mem::swap(t, &mut current)) };
            }
            seen.push(current);
            thread::yield_now();
        }
        assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
        current
    });
    let mut freed = Vec::new();
    for table in [1u32, 2] {
        // SAFETY: a fresh node; this thread is the only publisher.
        let replaced = unsafe { h.publish(Box::into_raw(Box::new(Node::new(table)))) };
        free_list(replaced, &mut freed);
        free_list(h.reclaim(), &mut freed);
    }
    let last = poller.join().expect("poller");
    free_list(h.reclaim(), &mut freed);
    free_list(h.take_unadopted(), &mut freed);
    // Every table but the poller's own was freed exactly once.
    freed.push(last);
    freed.sort_unstable();
    assert_eq!(freed, [0, 1, 2]);
}

#[test]
fn model_table_handover() {
    check("table_handover", &["early_retire"], table_handover);
}

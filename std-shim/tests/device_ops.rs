//! Every operation the data path offers, on a real device: two RC queue pairs connected to
//! each other, on one device (`one_device`) and on the two ends of a link (`across_the_pair`),
//! with the memory and the completions on both sides checked. On rxe (and every device but
//! mlx5) the queues are the libibverbs fallback's; on a ConnectX, the direct path's.
//!
//! Device tests: they return at once unless `ZVERBS_TEST_DEVICE` names a device
//! (docs/testing.md); `cargo xtask test` runs them on rxe in a VM.

mod device;

use device::{Caps, Link, bytes, connected, pattern, wait};
use zverbs::{
    BackendKind, PostRecv, PostSend, RecvWr, Registered, SendFlags, SendWr, Sge, WcFlags, WcOpcode,
    WcStatus,
};

const SIG: SendFlags = SendFlags::SIGNALED;

on_both_links!(
    write,
    write_above_the_mtu,
    write_with_immediate,
    send_and_receive,
    send_with_immediate,
    send_above_the_mtu,
    gather_and_scatter,
    read,
    read_above_the_mtu,
    atomics,
    inline,
    selective_signaling_and_batches,
);

/// RDMA WRITE lands exactly where it was aimed, and only there; the requester's completion
/// names the request.
fn write(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let (qa, mut qb) = (a.queues(), b.queues());
    let mut sq = qa.sq;
    let mut acq = qa.cq;
    let data = pattern(1, 200);
    a.buf.write(0, &data).unwrap();
    b.buf.fill(0..1024, 0xee).unwrap();
    sq.write(
        0x1111,
        a.buf.slice(0..200).unwrap(),
        b.buf.remote(300).unwrap(),
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 1);
    assert_eq!(w[0].status, WcStatus::Success, "{w:?}");
    assert_eq!(
        (w[0].wr_id, w[0].opcode, w[0].byte_len, w[0].qp_num),
        (0x1111, WcOpcode::RdmaWrite, 0, a.qp.qpn())
    );
    assert_eq!(bytes(&b.buf, 300, 200), data);
    assert!(bytes(&b.buf, 0, 300).iter().all(|&x| x == 0xee), "before");
    assert!(bytes(&b.buf, 500, 524).iter().all(|&x| x == 0xee), "after");
    // A plain WRITE consumes no receive and completes nothing on the responder.
    let mut wc = [zverbs::Completion::EMPTY; 1];
    assert_eq!(zverbs::PollCq::poll(&mut qb.cq, &mut wc), 0);
}

/// A 60 KiB WRITE: sixty packets at a 1024-byte path MTU, reassembled in order.
fn write_above_the_mtu(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let qa = a.queues();
    let mut sq = qa.sq;
    let mut acq = qa.cq;
    let len = 60 << 10;
    let data = pattern(2, len);
    a.buf.write(0, &data).unwrap();
    sq.write(
        7,
        a.buf.slice(0..len).unwrap(),
        b.buf.remote(1024).unwrap(),
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 1);
    assert!(w[0].is_success() && w[0].wr_id == 7, "{w:?}");
    assert_eq!(bytes(&b.buf, 1024, len), data);
}

/// WRITE with immediate: the data lands, and the responder's receive completes as
/// RECV_RDMA_WITH_IMM with the immediate in host order.
fn write_with_immediate(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let (qa, qb) = (a.queues(), b.queues());
    let mut sq = qa.sq;
    let mut rq = qb.rq;
    let (mut acq, mut bcq) = (qa.cq, qb.cq);
    rq.post(0xb0, b.buf.slice(60000..60100).unwrap()).unwrap();
    let data = pattern(3, 3000);
    a.buf.write(0, &data).unwrap();
    sq.write_imm(
        0xa0,
        a.buf.slice(0..3000).unwrap(),
        b.buf.remote(8000).unwrap(),
        0x1234_5678,
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 1);
    assert_eq!(
        (w[0].status, w[0].wr_id, w[0].opcode),
        (WcStatus::Success, 0xa0, WcOpcode::RdmaWrite),
        "{w:?}"
    );
    let r = wait(&mut bcq, 1);
    assert_eq!(r[0].status, WcStatus::Success, "{r:?}");
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].imm(), r[0].qp_num),
        (
            0xb0,
            WcOpcode::RecvRdmaWithImm,
            Some(0x1234_5678),
            b.qp.qpn()
        )
    );
    assert!(r[0].flags.contains(WcFlags::WITH_IMM));
    assert_eq!(r[0].byte_len, 3000, "the length written");
    assert_eq!(bytes(&b.buf, 8000, 3000), data);
    assert!(
        bytes(&b.buf, 60000, 100).iter().all(|&x| x == 0),
        "the receive buffer is untouched"
    );
}

/// SEND into posted receives: each message lands in the next receive, in order, with its
/// length; the sender's completion says SEND.
fn send_and_receive(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let (qa, qb) = (a.queues(), b.queues());
    let mut sq = qa.sq;
    let mut rq = qb.rq;
    let (mut acq, mut bcq) = (qa.cq, qb.cq);
    let sizes = [1usize, 64, 1000, 1024, 4096];
    for i in 0..sizes.len() {
        rq.post(
            100 + i as u64,
            b.buf.slice(i * 8192..i * 8192 + 4096).unwrap(),
        )
        .unwrap();
    }
    let mut off = 0;
    for (i, &n) in sizes.iter().enumerate() {
        a.buf.write(off, &pattern(10 + i as u8, n)).unwrap();
        sq.send(200 + i as u64, a.buf.slice(off..off + n).unwrap(), SIG)
            .unwrap();
        off += n;
    }
    let w = wait(&mut acq, sizes.len());
    let r = wait(&mut bcq, sizes.len());
    for (i, &n) in sizes.iter().enumerate() {
        assert_eq!(
            (w[i].status, w[i].wr_id, w[i].opcode),
            (WcStatus::Success, 200 + i as u64, WcOpcode::Send),
            "{w:?}"
        );
        assert_eq!(
            (r[i].status, r[i].wr_id, r[i].opcode, r[i].byte_len),
            (WcStatus::Success, 100 + i as u64, WcOpcode::Recv, n as u32),
            "{r:?}"
        );
        assert_eq!(r[i].imm(), None);
        assert_eq!(
            bytes(&b.buf, i * 8192, n),
            pattern(10 + i as u8, n),
            "message {i}"
        );
        assert!(
            bytes(&b.buf, i * 8192 + n, 4096 - n)
                .iter()
                .all(|&x| x == 0),
            "message {i} wrote past its length"
        );
    }
}

/// SEND with immediate: the receive carries the immediate in host order and the WITH_IMM flag.
fn send_with_immediate(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let (qa, qb) = (a.queues(), b.queues());
    let mut sq = qa.sq;
    let mut rq = qb.rq;
    let (mut acq, mut bcq) = (qa.cq, qb.cq);
    rq.post(1, b.buf.slice(0..256).unwrap()).unwrap();
    rq.post(2, b.buf.slice(256..512).unwrap()).unwrap();
    a.buf.write(0, b"with an immediate").unwrap();
    sq.send_imm(3, a.buf.slice(0..17).unwrap(), 0xdead_beef, SIG)
        .unwrap();
    sq.send_imm(4, a.buf.slice(0..0).unwrap(), 1, SIG).unwrap();
    let w = wait(&mut acq, 2);
    assert!(
        w.iter()
            .all(|c| c.is_success() && c.opcode == WcOpcode::Send),
        "{w:?}"
    );
    let r = wait(&mut bcq, 2);
    assert_eq!(
        (r[0].wr_id, r[0].opcode, r[0].byte_len, r[0].imm()),
        (1, WcOpcode::Recv, 17, Some(0xdead_beef)),
        "{r:?}"
    );
    assert_eq!(
        (r[1].wr_id, r[1].byte_len, r[1].imm()),
        (2, 0, Some(1)),
        "an empty SEND with immediate: {r:?}"
    );
    assert_eq!(bytes(&b.buf, 0, 17), b"with an immediate");
}

/// A 16 KiB SEND (sixteen packets) into one receive.
fn send_above_the_mtu(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let (qa, qb) = (a.queues(), b.queues());
    let mut sq = qa.sq;
    let mut rq = qb.rq;
    let (mut acq, mut bcq) = (qa.cq, qb.cq);
    let len = 16 << 10;
    rq.post(9, b.buf.slice(4096..4096 + 32768).unwrap())
        .unwrap();
    let data = pattern(4, len);
    a.buf.write(0, &data).unwrap();
    sq.send(8, a.buf.slice(0..len).unwrap(), SIG).unwrap();
    assert!(wait(&mut acq, 1)[0].is_success());
    let r = wait(&mut bcq, 1);
    assert_eq!(
        (r[0].status, r[0].byte_len),
        (WcStatus::Success, len as u32),
        "{r:?}"
    );
    assert_eq!(bytes(&b.buf, 4096, len), data);
}

/// Two scatter/gather entries on each side: the sender gathers two pieces into one message,
/// the receiver scatters it into two buffers.
fn gather_and_scatter(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let (mut qa, mut qb) = (a.queues(), b.queues());
    let first = pattern(5, 100);
    let second = pattern(6, 150);
    a.buf.write(1000, &first).unwrap();
    a.buf.write(5000, &second).unwrap();
    let recv = [
        b.buf.sge(2000..2120).unwrap(),
        b.buf.sge(9000..9500).unwrap(),
    ];
    // SAFETY: the entries lie in B's registered buffer, which the test reads only after the
    // completion.
    unsafe { PostRecv::post(&mut qb.rq, &RecvWr::new(77, &recv)) }.unwrap();
    let gather = [
        a.buf.sge(1000..1100).unwrap(),
        a.buf.sge(5000..5150).unwrap(),
    ];
    // SAFETY: the entries lie in A's registered buffer, not written until the completion.
    unsafe { qa.sq.post(&SendWr::send(78, &gather).signaled()) }.unwrap();
    assert!(wait(&mut qa.cq, 1)[0].is_success());
    let r = wait(&mut qb.cq, 1);
    assert_eq!((r[0].wr_id, r[0].byte_len), (77, 250), "{r:?}");
    let mut whole = first.clone();
    whole.extend_from_slice(&second);
    assert_eq!(bytes(&b.buf, 2000, 120), whole[..120]);
    assert_eq!(bytes(&b.buf, 9000, 130), whole[120..]);
    assert!(bytes(&b.buf, 9130, 370).iter().all(|&x| x == 0));

    // A gathered WRITE too.
    let remote = b.buf.remote(20000).unwrap();
    // SAFETY: as above.
    unsafe { qa.sq.post(&SendWr::write(79, &gather, remote).signaled()) }.unwrap();
    assert!(wait(&mut qa.cq, 1)[0].is_success());
    assert_eq!(bytes(&b.buf, 20000, 250), whole);
}

/// RDMA READ fetches the peer's bytes; its completion gives the length read.
fn read(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let qa = a.queues();
    let mut sq = qa.sq;
    let mut acq = qa.cq;
    let data = pattern(7, 777);
    b.buf.write(12345, &data).unwrap();
    sq.read(
        0x5eed,
        a.buf.slice(40000..40777).unwrap(),
        b.buf.remote(12345).unwrap(),
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 1);
    assert_eq!(
        (w[0].status, w[0].wr_id, w[0].opcode, w[0].byte_len),
        (WcStatus::Success, 0x5eed, WcOpcode::RdmaRead, 777),
        "{w:?}"
    );
    assert_eq!(bytes(&a.buf, 40000, 777), data);
    assert!(bytes(&a.buf, 40777, 100).iter().all(|&x| x == 0));
}

/// A 48 KiB READ: the responder answers in many packets.
fn read_above_the_mtu(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let qa = a.queues();
    let mut sq = qa.sq;
    let mut acq = qa.cq;
    let len = 48 << 10;
    let data = pattern(8, len);
    b.buf.write(4096, &data).unwrap();
    sq.read(
        1,
        a.buf.slice(0..len).unwrap(),
        b.buf.remote(4096).unwrap(),
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 1);
    assert_eq!(
        (w[0].status, w[0].byte_len),
        (WcStatus::Success, len as u32),
        "{w:?}"
    );
    assert_eq!(bytes(&a.buf, 0, len), data);
}

/// Fetch-and-add and compare-and-swap (a match and a mismatch) on 8 bytes of the peer's
/// memory: the original value comes back, the new one stays. In host order on rxe and on
/// ConnectX under the mlx5 driver; big-endian where the device says so.
fn atomics(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let be = b.ctx.atomics_big_endian();
    let v = |x: u64| if be { x.to_be() } else { x };
    let qa = a.queues();
    let mut sq = qa.sq;
    let mut acq = qa.cq;
    let start = 0x0123_4567_89ab_cdef_u64;
    b.buf.store_u64(8, v(start)).unwrap();
    sq.fetch_add(
        1,
        a.buf.slice(64..72).unwrap(),
        b.buf.remote(8).unwrap(),
        0x1_0000_0001,
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 1);
    assert_eq!(
        (w[0].status, w[0].opcode, w[0].byte_len),
        (WcStatus::Success, WcOpcode::FetchAdd, 8),
        "{w:?}"
    );
    assert_eq!(
        a.buf.load_u64(64).unwrap(),
        v(start),
        "FETCH_ADD returns the old value"
    );
    let added = start + 0x1_0000_0001;
    assert_eq!(b.buf.load_u64(8).unwrap(), v(added), "and adds");

    sq.compare_swap(
        2,
        a.buf.slice(72..80).unwrap(),
        b.buf.remote(8).unwrap(),
        5,
        6,
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 1);
    assert_eq!(
        (w[0].status, w[0].opcode),
        (WcStatus::Success, WcOpcode::CompSwap)
    );
    assert_eq!(
        a.buf.load_u64(72).unwrap(),
        v(added),
        "a failed compare returns the value"
    );
    assert_eq!(b.buf.load_u64(8).unwrap(), v(added), "and leaves it");

    sq.compare_swap(
        3,
        a.buf.slice(80..88).unwrap(),
        b.buf.remote(8).unwrap(),
        added,
        42,
        SIG,
    )
    .unwrap();
    let w = wait(&mut acq, 1);
    assert!(w[0].is_success(), "{w:?}");
    assert_eq!(a.buf.load_u64(80).unwrap(), v(added));
    assert_eq!(
        b.buf.load_u64(8).unwrap(),
        v(42),
        "a matching compare swaps"
    );

    // Misuse is refused before it reaches the device.
    assert!(
        sq.fetch_add(
            4,
            a.buf.slice(64..70).unwrap(),
            b.buf.remote(8).unwrap(),
            1,
            SIG
        )
        .is_err()
    );
    assert!(
        sq.fetch_add(
            4,
            a.buf.slice(64..72).unwrap(),
            b.buf.remote(12).unwrap(),
            1,
            SIG
        )
        .is_err()
    );
}

/// Inline WRITE and SEND: the payload is copied when posted, so the source may change before
/// the ring; payloads over the QP's inline limit are refused with nothing posted.
fn inline(link: Link) {
    let Some((a, b)) = connected(link, Caps::default(), |_, _| {}) else {
        return;
    };
    let max = a.qp.caps().max_inline_data as usize;
    assert!(max >= 64, "asked for 64 inline bytes, got {max}");
    let (qa, qb) = (a.queues(), b.queues());
    let mut sq = qa.sq;
    let mut rq = qb.rq;
    let (mut acq, mut bcq) = (qa.cq, qb.cq);
    rq.post(1, b.buf.slice(0..128).unwrap()).unwrap();
    let mut payload = pattern(9, 64);
    sq.write_inline(10, &payload, b.buf.remote(1000).unwrap(), SendFlags::NONE)
        .unwrap();
    let first = payload.clone();
    payload.iter_mut().for_each(|x| *x = !*x);
    sq.send_inline(11, &payload, SIG).unwrap();
    let second = payload.clone();
    payload.fill(0);
    let too_big = vec![1u8; max + 1];
    assert!(
        matches!(
            sq.send_inline(12, &too_big, SIG),
            Err(zverbs::safe::SafePostError::Post(
                zverbs::PostError::InlineTooLarge { .. }
            ))
        ),
        "over the inline limit"
    );
    let w = wait(&mut acq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (11, WcStatus::Success), "{w:?}");
    let r = wait(&mut bcq, 1);
    assert_eq!((r[0].wr_id, r[0].byte_len), (1, 64), "{r:?}");
    assert_eq!(bytes(&b.buf, 1000, 64), first);
    assert_eq!(bytes(&b.buf, 0, 64), second);
}

/// Unsignaled requests complete silently and are retired by the next signaled one; a batch
/// behind one ring lands in order; a full send queue refuses with nothing posted.
fn selective_signaling_and_batches(link: Link) {
    let caps = Caps {
        send: 16,
        ..Caps::default()
    };
    let Some((a, b)) = connected(link, caps, |_, _| {}) else {
        return;
    };
    let mut qa = a.queues();
    let depth = a.qp.caps().max_send_wr as usize;
    for i in 0..16usize {
        a.buf.write(i * 16, &pattern(i as u8, 16)).unwrap();
    }
    let sgls: Vec<[Sge; 1]> = (0..16)
        .map(|i| [a.buf.sge(i * 16..i * 16 + 16).unwrap()])
        .collect();
    let wrs: Vec<SendWr<'_>> = sgls
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let wr = SendWr::write(i as u64, s, b.buf.remote(30000 + i * 16).unwrap());
            if i == 15 { wr.signaled() } else { wr }
        })
        .collect();
    // SAFETY: every entry lies in A's registered buffer, unchanged until the completion.
    unsafe { qa.sq.post_all(&wrs) }.unwrap();
    let w = wait(&mut qa.cq, 1);
    assert_eq!((w[0].wr_id, w[0].status), (15, WcStatus::Success), "{w:?}");
    for i in 0..16usize {
        assert_eq!(
            bytes(&b.buf, 30000 + i * 16, 16),
            pattern(i as u8, 16),
            "write {i}"
        );
    }
    // The signaled completion returned every slot: the queue takes `depth` requests again.
    for i in 0..depth {
        let wr = SendWr::write(100 + i as u64, &sgls[0], b.buf.remote(40000).unwrap());
        let wr = if i + 1 == depth { wr.signaled() } else { wr };
        // SAFETY: as above.
        unsafe { qa.sq.stage(&wr) }.unwrap_or_else(|e| panic!("request {i} of {depth}: {e}"));
    }
    if qa.sq.kind() == BackendKind::Verbs {
        // The fallback holds exactly `max_send_wr` requests and refuses one more. (The direct
        // path counts 64-byte blocks of a power-of-two ring, which may hold more.)
        // SAFETY: as above (refused, so never posted).
        let full = unsafe {
            qa.sq
                .stage(&SendWr::write(999, &sgls[0], b.buf.remote(40000).unwrap()).signaled())
        };
        assert!(
            matches!(full, Err(zverbs::PostError::QueueFull { .. })),
            "{full:?}"
        );
    }
    qa.sq.ring();
    let w = wait(&mut qa.cq, 1);
    assert_eq!(w[0].wr_id, 99 + depth as u64, "{w:?}");
}

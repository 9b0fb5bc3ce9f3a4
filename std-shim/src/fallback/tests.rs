//! The fallback against a fake provider whose `ops` entries record every call.

use std::sync::Arc;
use zverbs_core::{
    BatchError, Completion, PollCq, PostError, PostRecv, PostSend, RecvWr, RemoteBuf, SendFlags,
    SendWr, Sge, WcFlags, WcOpcode, WcStatus,
};

use zverbs_mlx5dv::SqCaps;

use super::fake::{self, FakeDevice, QPN, with};
use super::state::RECV_TAG;
use super::{Binding, Poller, RecvQueue, RqShared, SendQueue, SqShared};
use zverbs_ffi::types::*;

const MAX_WR: u32 = 8;

fn caps() -> SqCaps {
    SqCaps {
        max_send_sge: 3,
        max_inline_data: 32,
        sig_all: false,
        max_signaled: 6,
        transport: zverbs_mlx5dv::Transport::Rc,
    }
}

/// A fake device with one QP's fallback queues and the poller of its CQ.
struct Rig {
    sq: SendQueue,
    rq: RecvQueue,
    cq: Poller,
    _dev: FakeDevice,
}

fn rig_with(caps: SqCaps) -> Rig {
    fake::reset(1024);
    let dev = FakeDevice::new();
    let sqs = Arc::new(SqShared::new(MAX_WR));
    let rqs = Arc::new(RqShared::new(MAX_WR));
    let bindings = Box::new([Binding {
        qpn: QPN,
        sq: Some(sqs.clone()),
        rq: Some(rqs.clone()),
        srq: false,
    }]);
    // SAFETY: the fake QP and CQ live as long as the rig; each queue is the only one of its
    // kind; the states are made for them and bound to this poller only.
    unsafe {
        Rig {
            sq: SendQueue::new(dev.qp(), MAX_WR, caps, sqs).unwrap(),
            rq: RecvQueue::new(dev.qp(), MAX_WR, 2, rqs).unwrap(),
            cq: Poller::new(dev.cq(), 16, bindings).unwrap(),
            _dev: dev,
        }
    }
}

fn rig() -> Rig {
    rig_with(caps())
}

fn post(r: &mut Rig, wr: &SendWr<'_>) -> Result<(), PostError> {
    // SAFETY: the fake provider only reads the requests and their (live) buffers.
    unsafe { r.sq.stage(wr) }
}

fn sent() -> Vec<SeenSend> {
    with(|f| f.sends.clone())
}

use super::fake::SeenSend;

fn poll_all(r: &mut Rig) -> Vec<Completion> {
    let mut wc = [Completion::EMPTY; 16];
    let n = r.cq.poll(&mut wc);
    wc[..n].to_vec()
}

#[test]
fn nothing_reaches_the_provider_until_ring() {
    let mut r = rig();
    let buf = [7u8; 16];
    let sgl = [Sge::from_slice(&buf, 0x11)];
    post(&mut r, &SendWr::send(1, &sgl)).unwrap();
    post(&mut r, &SendWr::send(2, &sgl).signaled()).unwrap();
    assert!(with(|f| f.send_calls.is_empty()));
    assert_eq!(r.sq.pending(), 2);
    r.sq.ring();
    assert_eq!(with(|f| f.send_calls.clone()), vec![2]);
    assert_eq!(r.sq.pending(), 0);
    r.sq.ring(); // nothing staged: no call
    assert_eq!(with(|f| f.send_calls.len()), 1);
    // The provider sees the fallback's counters as wr_ids, in order.
    let s = sent();
    assert_eq!((s[0].wr_id, s[1].wr_id), (0, 1));
}

#[test]
fn every_operation_builds_its_send_wr() {
    let mut r = rig();
    let buf = [0u8; 64];
    let a = Sge::new(buf.as_ptr() as u64, 16, 0x11);
    let b = Sge::new(buf.as_ptr() as u64 + 16, 8, 0x22);
    let sgl = [a, b];
    let rem = RemoteBuf::new(0x7f00_0000_1000, 0xdead_beef);
    let atom = Sge::new(
        buf.as_ptr() as u64 + 32 - (buf.as_ptr() as u64 % 8),
        8,
        0x33,
    );
    let wrs = [
        SendWr::write(10, &sgl, rem),
        SendWr::write_imm(11, &sgl, rem, 0x1234_5678),
        SendWr::send(12, &sgl),
        SendWr::send_imm(13, &sgl[..1], 0xcafe_f00d),
        SendWr::read(14, &sgl, rem),
        SendWr::compare_swap(15, atom, RemoteBuf::new(0x1000, 9), 5, 6),
        SendWr::fetch_add(16, atom, RemoteBuf::new(0x2008, 10), 3),
    ];
    for w in &wrs {
        post(&mut r, w).unwrap();
    }
    r.sq.ring();
    let s = sent();
    let ops: Vec<u32> = s.iter().map(|x| x.opcode).collect();
    assert_eq!(ops, [0, 1, 2, 3, 4, 5, 6]); // IBV_WR_* numbers
    // WRITE: two entries copied, remote address and key in wr.rdma.
    assert_eq!(s[0].num_sge, 2);
    assert_eq!(&s[0].sges[..2], &sgl);
    assert_eq!(
        (s[0].remote_addr, s[0].rkey),
        (0x7f00_0000_1000, 0xdead_beef)
    );
    assert_eq!(s[0].imm_data, 0);
    // Immediates in network byte order.
    assert_eq!(s[1].imm_data, 0x1234_5678u32.to_be());
    assert_eq!(s[1].imm_data.to_ne_bytes(), [0x12, 0x34, 0x56, 0x78]);
    assert_eq!(s[3].imm_data.to_ne_bytes(), [0xca, 0xfe, 0xf0, 0x0d]);
    assert_eq!(s[3].num_sge, 1);
    // READ like WRITE.
    assert_eq!(
        (s[4].remote_addr, s[4].rkey, s[4].num_sge),
        (rem.addr, rem.rkey, 2)
    );
    // Atomics: one local entry; compare/swap and add in wr.atomic.
    assert_eq!((s[5].num_sge, s[5].sges[0]), (1, atom));
    assert_eq!(
        (
            s[5].remote_addr,
            s[5].compare_add,
            s[5].swap,
            s[5].atomic_rkey
        ),
        (0x1000, 5, 6, 9)
    );
    assert_eq!(
        (s[6].remote_addr, s[6].compare_add, s[6].atomic_rkey),
        (0x2008, 3, 10)
    );
    // Unsignaled by default.
    assert!(s.iter().all(|x| x.send_flags == 0));
}

#[test]
fn flags_pass_through_and_sig_all_signals_everything() {
    let mut r = rig();
    let buf = [0u8; 8];
    let sgl = [Sge::from_slice(&buf, 1)];
    post(&mut r, &SendWr::send(1, &sgl).fenced()).unwrap();
    post(&mut r, &SendWr::send(2, &sgl).solicited().signaled()).unwrap();
    r.sq.ring();
    let s = sent();
    assert_eq!(s[0].send_flags, IBV_SEND_FENCE_FOR_TEST);
    assert_eq!(
        s[1].send_flags,
        SendFlags::SOLICITED.bits() | IBV_SEND_SIGNALED
    );

    let mut r = rig_with(SqCaps {
        sig_all: true,
        ..caps()
    });
    post(&mut r, &SendWr::send(3, &sgl)).unwrap();
    r.sq.ring();
    assert_eq!(sent()[0].send_flags, IBV_SEND_SIGNALED);
    assert_eq!(r.sq.outstanding_signaled(), 1);
}

const IBV_SEND_FENCE_FOR_TEST: u32 = 1;

#[test]
fn inline_payload_is_copied_at_post_time() {
    let mut r = rig();
    let mut a = *b"hello, ";
    let mut b = *b"inline world";
    let sgl = [Sge::from_slice(&a, 0), Sge::from_slice(&b, 0)];
    post(&mut r, &SendWr::send(1, &sgl).inline()).unwrap();
    // The caller may reuse the memory as soon as the post returns.
    a.fill(b'X');
    b.fill(b'Y');
    r.sq.ring();
    let s = sent();
    assert_eq!(s[0].send_flags, SendFlags::INLINE.bits());
    assert_eq!(s[0].num_sge, 1);
    assert_eq!(s[0].sges[0].length, 19);
    assert_ne!(s[0].sges[0].addr, a.as_ptr() as u64);
    assert_eq!(&s[0].payload[..19], b"hello, inline world");
    // Inline size is checked against the queue's limit.
    let big = [0u8; 33];
    let sgl = [Sge::from_slice(&big, 0)];
    assert_eq!(
        post(&mut r, &SendWr::send(2, &sgl).inline()),
        Err(PostError::InlineTooLarge { len: 33, max: 32 })
    );
}

#[test]
fn invalid_requests_are_refused_and_stage_nothing() {
    let mut r = rig();
    let buf = [0u64; 4];
    let p = buf.as_ptr() as u64;
    let one = [Sge::new(p, 8, 1)];
    let four = [one[0]; 4];
    let rem = RemoteBuf::new(0x1000, 1);
    assert_eq!(post(&mut r, &SendWr::nop(1)), Err(PostError::Unsupported));
    // The request contract's errors come first, as on every backend.
    assert_eq!(
        post(&mut r, &SendWr::nop(1).inline()),
        Err(PostError::InlineNotAllowed)
    );
    assert_eq!(
        post(&mut r, &SendWr::write(1, &four, rem)),
        Err(PostError::TooManySges { got: 4, max: 3 })
    );
    assert_eq!(
        post(&mut r, &SendWr::read(1, &one, rem).inline()),
        Err(PostError::InlineNotAllowed)
    );
    assert_eq!(
        post(&mut r, &SendWr::fetch_add(1, Sge::new(p, 4, 1), rem, 1)),
        Err(PostError::AtomicSize { len: 4 })
    );
    assert_eq!(
        post(&mut r, &SendWr::fetch_add(1, Sge::new(p + 4, 8, 1), rem, 1)),
        Err(PostError::AtomicAlignment)
    );
    assert_eq!(
        post(
            &mut r,
            &SendWr::compare_swap(1, one[0], RemoteBuf::new(0x1004, 1), 0, 0)
        ),
        Err(PostError::AtomicAlignment)
    );
    let huge = [Sge::new(p, u32::MAX, 1), Sge::new(p, 2, 1)];
    assert_eq!(
        post(&mut r, &SendWr::write(1, &huge, rem)),
        Err(PostError::MessageTooLong)
    );
    assert_eq!(r.sq.pending(), 0);
    r.sq.ring();
    assert!(with(|f| f.send_calls.is_empty()));
    assert_eq!(r.sq.free(), MAX_WR);
}

/// A raw packet QP's queue on a device without checksum offload refuses `IP_CSUM` before
/// anything reaches the provider (libmlx5 would refuse it too, with EINVAL at the ring);
/// the same frame without the flag goes out.
#[test]
fn checksum_offload_is_refused_where_the_device_has_none() {
    let eth = |ip_csum| SqCaps {
        transport: zverbs_mlx5dv::Transport::Ethernet {
            max_frame: 1514,
            ip_csum,
        },
        ..caps()
    };
    let frame = [0u8; 64];
    let sgl = [Sge::from_slice(&frame, 0x11)];
    let mut r = rig_with(eth(false));
    for wr in [
        SendWr::send(1, &sgl).with_flags(SendFlags::IP_CSUM),
        SendWr::send(1, &sgl[..])
            .with_flags(SendFlags::IP_CSUM)
            .inline(),
    ] {
        assert_eq!(post(&mut r, &wr), Err(PostError::ChecksumNotAvailable));
    }
    assert_eq!(r.sq.pending(), 0);
    r.sq.ring();
    assert!(with(|f| f.send_calls.is_empty()));
    post(&mut r, &SendWr::send(2, &sgl)).unwrap();
    r.sq.ring();
    assert_eq!(with(|f| f.send_calls.clone()), vec![1]);
    drop(r);
    let mut r = rig_with(eth(true));
    post(
        &mut r,
        &SendWr::send(3, &sgl).with_flags(SendFlags::IP_CSUM),
    )
    .unwrap();
    r.sq.ring();
    assert_eq!(with(|f| f.send_calls.clone()), vec![1]);
}

#[test]
fn full_queue_and_full_cq_are_refused() {
    let mut r = rig();
    let buf = [0u8; 8];
    let sgl = [Sge::from_slice(&buf, 1)];
    for i in 0..6 {
        post(&mut r, &SendWr::send(i, &sgl).signaled()).unwrap();
    }
    // max_signaled is 6.
    assert_eq!(
        post(&mut r, &SendWr::send(6, &sgl).signaled()),
        Err(PostError::CqFull { limit: 6 })
    );
    post(&mut r, &SendWr::send(6, &sgl)).unwrap();
    post(&mut r, &SendWr::send(7, &sgl)).unwrap();
    assert_eq!(
        post(&mut r, &SendWr::send(8, &sgl)),
        Err(PostError::QueueFull { needed: 1, free: 0 })
    );
    r.sq.ring();
    assert_eq!(with(|f| f.send_calls.clone()), vec![8]);
}

#[test]
fn completions_return_credits_and_retire_unsignaled_requests() {
    let mut r = rig();
    with(|f| f.auto_complete = true);
    let buf = [0u8; 8];
    let sgl = [Sge::from_slice(&buf, 1)];
    let rem = RemoteBuf::new(0x1000, 2);
    post(&mut r, &SendWr::write(100, &sgl, rem)).unwrap();
    post(&mut r, &SendWr::write(101, &sgl, rem)).unwrap();
    post(&mut r, &SendWr::read(102, &sgl, rem).signaled()).unwrap();
    r.sq.ring();
    assert_eq!(r.sq.free(), MAX_WR - 3);
    // The fake reports the READ's length as a provider would.
    with(|f| f.cq[0].byte_len = 8);
    let wc = poll_all(&mut r);
    assert_eq!(wc.len(), 1);
    assert_eq!(wc[0].wr_id, 102);
    assert_eq!(wc[0].opcode, WcOpcode::RdmaRead);
    assert_eq!(wc[0].byte_len, 8);
    assert_eq!(wc[0].qp_num, QPN);
    assert!(wc[0].is_success());
    // The signaled READ retired the two unsignaled WRITEs before it.
    assert_eq!(r.sq.free(), MAX_WR);
    assert_eq!(r.sq.outstanding_signaled(), 0);
    // And the queue can be filled again, across the slot table's wrap.
    for round in 0..3u64 {
        for i in 0..MAX_WR as u64 {
            let flags = if i == MAX_WR as u64 - 1 {
                SendFlags::SIGNALED
            } else {
                SendFlags::NONE
            };
            post(
                &mut r,
                &SendWr::write(round * 100 + i, &sgl, rem).with_flags(flags),
            )
            .unwrap();
        }
        r.sq.ring();
        let wc = poll_all(&mut r);
        assert_eq!(wc[0].wr_id, round * 100 + MAX_WR as u64 - 1);
        assert_eq!(wc[0].opcode, WcOpcode::RdmaWrite);
        assert_eq!(wc[0].byte_len, 0);
    }
}

#[test]
fn refusal_at_ring_is_reported_by_the_next_post() {
    let mut r = rig();
    let buf = [0u8; 8];
    let sgl = [Sge::from_slice(&buf, 1)];
    post(&mut r, &SendWr::send(1, &sgl)).unwrap();
    post(&mut r, &SendWr::send(2, &sgl).signaled()).unwrap();
    post(&mut r, &SendWr::send(3, &sgl)).unwrap();
    // The provider posts the first request and refuses the chain from the second on.
    with(|f| f.refuse_send = Some((1, libc::ENOMEM)));
    r.sq.ring();
    assert_eq!(with(|f| f.sends.len()), 1);
    // The two refused requests gave their room (and CQ share) back.
    assert_eq!(r.sq.free(), MAX_WR - 1);
    assert_eq!(r.sq.outstanding_signaled(), 0);
    assert_eq!(
        post(&mut r, &SendWr::send(4, &sgl)),
        Err(PostError::Verbs {
            errno: libc::ENOMEM
        })
    );
    // Reported once; the details stay readable until taken.
    post(&mut r, &SendWr::send(4, &sgl)).unwrap();
    r.sq.ring();
    // Counters were rolled back: the retried request reuses the refused one's counter.
    let s = sent();
    assert_eq!(s.last().unwrap().wr_id, 1);

    let mut r = rig();
    post(&mut r, &SendWr::send(7, &sgl)).unwrap();
    post(&mut r, &SendWr::send(8, &sgl)).unwrap();
    with(|f| f.refuse_send = Some((0, -libc::EINVAL)));
    r.sq.ring();
    let e = r.sq.take_ring_error().unwrap();
    assert_eq!((e.errno, e.dropped, e.first_wr_id), (libc::EINVAL, 2, 7));
    assert!(r.sq.take_ring_error().is_none());
    post(&mut r, &SendWr::send(9, &sgl)).unwrap(); // taken: nothing left to report
}

#[test]
fn batches_are_all_or_nothing_and_ring_once() {
    let mut r = rig();
    let buf = [0u8; 8];
    let sgl = [Sge::from_slice(&buf, 1)];
    let ok = [
        SendWr::send(1, &sgl),
        SendWr::send(2, &sgl),
        SendWr::send(3, &sgl).signaled(),
    ];
    let bad = [SendWr::send(4, &sgl), SendWr::nop(5), SendWr::send(6, &sgl)];
    // SAFETY: the fake provider only reads the requests.
    let e = unsafe { r.sq.post_all(&bad) }.unwrap_err();
    assert_eq!(
        e,
        BatchError {
            index: 1,
            error: PostError::Unsupported
        }
    );
    assert_eq!(r.sq.pending(), 0);
    assert!(with(|f| f.send_calls.is_empty()));
    // SAFETY: as above.
    unsafe { r.sq.post_all(&ok) }.unwrap();
    assert_eq!(with(|f| f.send_calls.clone()), vec![3]);
    // A batch that does not fit is refused whole.
    let many: Vec<SendWr<'_>> = (0..6).map(|i| SendWr::send(i, &sgl)).collect();
    // SAFETY: as above.
    let e = unsafe { r.sq.post_all(&many) }.unwrap_err();
    assert_eq!(e.index, 5);
    assert_eq!(e.error, PostError::QueueFull { needed: 6, free: 5 });
    assert_eq!(with(|f| f.send_calls.len()), 1);
}

#[test]
fn receives_post_at_once_with_tagged_ids() {
    let mut r = rig();
    let buf = [0u8; 64];
    let a = [
        Sge::new(buf.as_ptr() as u64, 32, 5),
        Sge::new(buf.as_ptr() as u64 + 32, 32, 5),
    ];
    // SAFETY: the fake provider only reads the requests.
    unsafe { r.rq.post(&RecvWr::new(70, &a)) }.unwrap();
    assert_eq!(with(|f| f.recv_calls.clone()), vec![1]);
    let seen = with(|f| f.recvs[0]);
    assert_eq!(seen.wr_id, RECV_TAG);
    assert_eq!((seen.num_sge, &seen.sges[..2]), (2, &a[..]));
    let three = [a[0]; 3];
    assert_eq!(
        // SAFETY: as above.
        unsafe { r.rq.post(&RecvWr::new(71, &three)) },
        Err(PostError::TooManySges { got: 3, max: 2 })
    );
    let batch: Vec<RecvWr<'_>> = (71..75).map(|i| RecvWr::new(i, &a[..1])).collect();
    // SAFETY: as above.
    unsafe { r.rq.post_all(&batch) }.unwrap();
    assert_eq!(with(|f| f.recv_calls.clone()), vec![1, 4]);
    let ids: Vec<u64> = with(|f| f.recvs.iter().map(|x| x.wr_id & !RECV_TAG).collect());
    assert_eq!(ids, [0, 1, 2, 3, 4]);
    assert_eq!(r.rq.free(), MAX_WR - 5);
    // The provider refuses a chain at its second request: the first was posted.
    with(|f| f.refuse_recv = Some((1, libc::ENOMEM)));
    // SAFETY: as above.
    let e = unsafe { r.rq.post_all(&batch[..3]) }.unwrap_err();
    assert_eq!(
        e,
        BatchError {
            index: 1,
            error: PostError::Verbs {
                errno: libc::ENOMEM
            }
        }
    );
    assert_eq!(r.rq.free(), MAX_WR - 6);
    // Too many for the queue.
    // SAFETY: as above.
    let e = unsafe { r.rq.post_all(&batch[..3]) }.unwrap_err();
    assert_eq!(e.error, PostError::QueueFull { needed: 3, free: 2 });
}

#[test]
fn work_completions_convert() {
    let mut r = rig();
    let buf = [0u8; 64];
    let a = [Sge::new(buf.as_ptr() as u64, 64, 5)];
    for i in 0..3 {
        // SAFETY: the fake provider only reads the requests.
        unsafe { r.rq.post(&RecvWr::new(500 + i, &a)) }.unwrap();
    }
    let sgl = [Sge::new(buf.as_ptr() as u64, 8, 5)];
    post(
        &mut r,
        &SendWr::write_imm(900, &sgl, RemoteBuf::new(0x10, 1), 5).signaled(),
    )
    .unwrap();
    post(&mut r, &SendWr::send(901, &sgl).signaled()).unwrap();
    r.sq.ring();
    with(|f| {
        // A SEND with immediate received: imm in network order, IBV_WC_WITH_IMM.
        f.cq.push_back(ibv_wc {
            wr_id: RECV_TAG,
            opcode: 128,
            byte_len: 40,
            imm_data: 0xdead_beefu32.to_be(),
            qp_num: QPN,
            wc_flags: 2,
            ..ibv_wc::default()
        });
        // A WRITE with immediate received.
        f.cq.push_back(ibv_wc {
            wr_id: RECV_TAG | 1,
            opcode: 129,
            byte_len: 0,
            imm_data: 7u32.to_be(),
            qp_num: QPN,
            wc_flags: 2 | 1,
            ..ibv_wc::default()
        });
        // The send-side completion of the WRITE with immediate.
        f.cq.push_back(ibv_wc {
            wr_id: 0,
            opcode: 1,
            qp_num: QPN,
            ..ibv_wc::default()
        });
        // The SEND, flushed: opcode is undefined in an error completion.
        f.cq.push_back(ibv_wc {
            wr_id: 1,
            status: 5,
            opcode: 0xff,
            vendor_err: 0x249,
            qp_num: QPN,
            ..ibv_wc::default()
        });
        // A flushed receive.
        f.cq.push_back(ibv_wc {
            wr_id: RECV_TAG | 2,
            status: 5,
            opcode: 0xff,
            qp_num: QPN,
            ..ibv_wc::default()
        });
        // A completion of a QP the poller was not given.
        f.cq.push_back(ibv_wc {
            wr_id: 77,
            opcode: 0,
            qp_num: 0x999,
            ..ibv_wc::default()
        });
    });
    let wc = poll_all(&mut r);
    assert_eq!(wc.len(), 6);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].byte_len),
        (500, WcOpcode::Recv, 40)
    );
    assert_eq!(wc[0].imm(), Some(0xdead_beef));
    assert_eq!(
        (wc[1].wr_id, wc[1].opcode),
        (501, WcOpcode::RecvRdmaWithImm)
    );
    assert_eq!(wc[1].imm(), Some(7));
    assert_eq!(wc[1].flags, WcFlags::GRH.union(WcFlags::WITH_IMM));
    assert_eq!(
        (wc[2].wr_id, wc[2].opcode, wc[2].byte_len),
        (900, WcOpcode::RdmaWrite, 0)
    );
    assert!(wc[2].flags.contains(WcFlags::WITH_IMM));
    assert_eq!(
        (wc[3].wr_id, wc[3].status, wc[3].opcode),
        (901, WcStatus::WrFlushErr, WcOpcode::Send)
    );
    assert_eq!(wc[3].vendor_err, 0x249);
    assert_eq!(
        (wc[4].wr_id, wc[4].status, wc[4].opcode),
        (502, WcStatus::WrFlushErr, WcOpcode::Recv)
    );
    assert_eq!(wc[4].imm(), None);
    assert_eq!(
        (wc[5].wr_id, wc[5].status, wc[5].qp_num),
        (77, WcStatus::GeneralErr, 0x999)
    );
    assert_eq!(r.rq.free(), MAX_WR);
    assert_eq!(r.sq.free(), MAX_WR);
}

#[test]
fn poll_errors_are_kept_and_polls_are_bounded() {
    let mut r = rig();
    with(|f| f.poll_fail = Some(-libc::EIO));
    assert!(poll_all(&mut r).is_empty());
    assert_eq!(r.cq.take_error(), Some(libc::EIO));
    assert_eq!(r.cq.take_error(), None);
    // An empty output buffer does not call the provider.
    let before = with(|f| f.poll_calls);
    assert_eq!(r.cq.poll(&mut []), 0);
    assert_eq!(with(|f| f.poll_calls), before);
}

#[test]
fn no_allocation_per_operation() {
    let mut r = rig_with(SqCaps {
        max_signaled: MAX_WR,
        ..caps()
    });
    with(|f| f.auto_complete = true);
    let buf = [0u8; 64];
    let sgl = [Sge::new(buf.as_ptr() as u64, 16, 1)];
    let rem = RemoteBuf::new(0x1000, 2);
    let mut wc = [Completion::EMPTY; 16];
    let mut once = |r: &mut Rig, i: u64| {
        post(r, &SendWr::write(i, &sgl, rem)).unwrap();
        post(r, &SendWr::send(i, &sgl).inline().signaled()).unwrap();
        r.sq.ring();
        // SAFETY: the fake provider only reads the request.
        unsafe { r.rq.post(&RecvWr::new(i, &sgl)) }.unwrap();
        with(|f| {
            f.cq.push_back(ibv_wc {
                wr_id: RECV_TAG | (i as u32) as u64,
                opcode: 128,
                qp_num: QPN,
                ..ibv_wc::default()
            });
            // Keep the fake's records within their reserved capacity.
            f.sends.clear();
            f.send_calls.clear();
            f.recvs.clear();
            f.recv_calls.clear();
        });
        assert_eq!(r.cq.poll(&mut wc), 2);
    };
    once(&mut r, 0); // warm-up: thread-locals and the like
    // Under Miri (100 times slower), a thousand.
    let rounds = if cfg!(miri) { 1_000 } else { 100_000 };
    let n = crate::test_alloc::count_allocs(|| {
        for i in 1..rounds {
            once(&mut r, i);
        }
    });
    assert_eq!(n, 0, "allocations on the fallback's data path");
}

#[test]
fn bad_wr_outside_the_chain_is_not_trusted() {
    let arr = [ibv_recv_wr::ZERO; 4];
    let base = arr.as_ptr();
    assert_eq!(
        super::sq::chain_index(base.wrapping_add(2), base, 4),
        Some(2)
    );
    assert_eq!(super::sq::chain_index(base.wrapping_add(4), base, 4), None);
    assert_eq!(super::sq::chain_index(core::ptr::null(), base, 4), None);
    let odd = (base as usize + 8) as *const ibv_recv_wr;
    assert_eq!(super::sq::chain_index(odd, base, 4), None);
}

fn ud_caps() -> SqCaps {
    SqCaps {
        transport: zverbs_mlx5dv::Transport::Ud { mtu: 1024 },
        ..caps()
    }
}

#[test]
fn a_ud_send_queue_posts_send_to_through_wr_ud() {
    let mut r = rig_with(ud_caps());
    r._dev.set_ud();
    let buf = [5u8; 16];
    let sgl = [Sge::from_slice(&buf, 0x11)];
    let dest = zverbs_core::UdDest::new([0; 48], 0xa000, 0x0012_3456, 0x1111_2222);
    let group = zverbs_core::UdDest::new([0; 48], 0xb000, 0xff_ffff, 7);
    post(&mut r, &SendWr::send_to(1, &sgl, &dest).signaled()).unwrap();
    post(&mut r, &SendWr::send_to_imm(2, &sgl, &group, 0x0102_0304)).unwrap();
    r.sq.ring();
    let s = sent();
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].opcode, s[0].send_flags, s[0].ud),
        (
            IBV_WR_SEND,
            IBV_SEND_SIGNALED,
            Some((0xa000, 0x12_3456, 0x1111_2222))
        )
    );
    assert_eq!((s[0].num_sge, s[0].sges[0]), (1, sgl[0]));
    assert_eq!(
        (s[1].opcode, s[1].imm_data, s[1].ud),
        (
            IBV_WR_SEND_WITH_IMM,
            0x0102_0304u32.to_be(),
            Some((0xb000, 0xff_ffff, 7))
        )
    );
    // A destination without a verbs handle, an RC operation, a datagram above the MTU:
    // refused, nothing staged.
    let direct_only = zverbs_core::UdDest::new([0; 48], 0, 5, 7);
    assert_eq!(
        post(&mut r, &SendWr::send_to(3, &sgl, &direct_only)),
        Err(PostError::Unsupported)
    );
    assert_eq!(
        post(&mut r, &SendWr::send(4, &sgl)),
        Err(PostError::WrongTransport)
    );
    let big = vec![0u8; 2048];
    let bsgl = [Sge::from_slice(&big, 0x11)];
    assert!(matches!(
        post(&mut r, &SendWr::send_to(5, &bsgl, &dest)),
        Err(PostError::DatagramTooLong { .. })
    ));
    assert_eq!(r.sq.pending(), 0);
}

#[test]
fn an_srq_binding_reports_receives_with_the_callers_wr_id() {
    fake::reset(16);
    let dev = FakeDevice::new();
    let sqs = Arc::new(SqShared::new(MAX_WR));
    let bindings = Box::new([Binding {
        qpn: QPN,
        sq: Some(sqs.clone()),
        rq: None,
        srq: true,
    }]);
    // SAFETY: the fake QP and CQ live as long as `dev`; the state is made for the queue and
    // bound to this poller only.
    let (mut sq, mut cq) = unsafe {
        (
            SendQueue::new(dev.qp(), MAX_WR, caps(), sqs).unwrap(),
            Poller::new(dev.cq(), 16, bindings).unwrap(),
        )
    };
    let buf = [0u8; 8];
    let sgl = [Sge::from_slice(&buf, 0x11)];
    // SAFETY: the fake only reads the request.
    unsafe { sq.post(&SendWr::send(77, &sgl).signaled()) }.unwrap();
    let recv = |wr_id: u64, opcode: u32, status: u32| ibv_wc {
        wr_id,
        status,
        opcode,
        byte_len: 6,
        qp_num: QPN,
        wc_flags: 2, // IBV_WC_WITH_IMM
        imm_data: 9u32.to_be(),
        ..ibv_wc::default()
    };
    with(|f| {
        // Receives (IBV_WC_RECV, success) whose wr_id looks like a send counter, the send, a receive with immediate.
        f.cq.push_back(recv(0, 128, 0));
        f.cq.push_back(ibv_wc {
            wr_id: 0,
            opcode: 0, // IBV_WC_SEND
            qp_num: QPN,
            ..ibv_wc::default()
        });
        f.cq.push_back(recv(0xdead_beef_0000_0001, 128, 0));
    });
    let mut wc = [Completion::EMPTY; 8];
    let n = cq.poll(&mut wc);
    assert_eq!(n, 3);
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].byte_len, wc[0].imm),
        (0, WcOpcode::Recv, 6, 9)
    );
    assert_eq!((wc[1].wr_id, wc[1].opcode), (77, WcOpcode::Send));
    assert_eq!(wc[2].wr_id, 0xdead_beef_0000_0001);
    assert!(wc.iter().take(3).all(|c| c.status == WcStatus::Success));
}

/// A raw packet QP's receive completions name the flow tag where the QP number would be (0
/// without a tag): its receive queue keys its `wr_id`s with its number, and the poller finds
/// the queue by that key (the keyed binding), not by the completion's `qp_num`, which may even
/// equal another QP's number. Its send completions still name the QP.
#[test]
fn keyed_receives_are_found_by_their_key_not_the_flow_tag() {
    fake::reset(1024);
    let dev = FakeDevice::new();
    let raw_qpn = 0x42;
    let (sqs, rqs) = (
        Arc::new(SqShared::new(MAX_WR)),
        Arc::new(RqShared::new(MAX_WR)),
    );
    // Another QP whose number is the flow tag below, with a receive queue of its own.
    let other = Arc::new(RqShared::new(MAX_WR));
    let bindings = Box::new([
        Binding {
            qpn: raw_qpn,
            sq: Some(sqs.clone()),
            rq: None,
            srq: false,
        },
        Binding::keyed(raw_qpn, rqs.clone()),
        Binding {
            qpn: 7,
            sq: None,
            rq: Some(other),
            srq: false,
        },
    ]);
    // SAFETY: as in `rig_with`.
    let (mut rq, mut cq) = unsafe {
        (
            RecvQueue::new(dev.qp(), MAX_WR, 1, rqs)
                .unwrap()
                .keyed(raw_qpn),
            Poller::new(dev.cq(), 16, bindings).unwrap(),
        )
    };
    let buf = [0u8; 256];
    let a = [Sge::new(buf.as_ptr() as u64, 256, 5)];
    for i in 0..2 {
        // SAFETY: the fake provider only reads the requests.
        unsafe { rq.post(&RecvWr::new(300 + i, &a)) }.unwrap();
    }
    let ids: Vec<u64> = with(|f| f.recvs.iter().map(|x| x.wr_id).collect());
    assert_eq!(
        ids,
        [RECV_TAG | (0x42 << 32), RECV_TAG | (0x42 << 32) | 1],
        "the key above the counter"
    );
    with(|f| {
        for (i, tag) in [(0u64, 0u32), (1, 7)] {
            f.cq.push_back(ibv_wc {
                wr_id: ids[i as usize],
                opcode: 128,
                byte_len: 60,
                qp_num: tag,
                ..ibv_wc::default()
            });
        }
    });
    let mut wc = [Completion::EMPTY; 4];
    let n = cq.poll(&mut wc);
    assert_eq!(n, 2);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].opcode, wc[0].byte_len),
        (300, WcStatus::Success, WcOpcode::Recv, 60)
    );
    assert_eq!((wc[1].wr_id, wc[1].status), (301, WcStatus::Success));
    assert_eq!(rq.free(), MAX_WR);
    drop(dev);
}

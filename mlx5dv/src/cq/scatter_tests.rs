//! Scattered receive CQEs on the direct poller: every size boundary with 64- and 128-byte
//! CQEs, SEND and SEND with immediate, the data byte-exact in the receive's buffers (split over
//! its scatter list) and nothing past it, the completion as for a plain receive.

extern crate std;

use std::vec::Vec;

use super::*;
use crate::testutil::{QPN, Rig, caps, resp_cqe};
use zverbs_core::{PostRecv, PostSend, RecvWr, SendWr, Sge};

/// Bytes of the receive's first scatter entry (the rest go to the second).
const FIRST: usize = 10;
/// The second entry's room: 64 bytes in all, as a 64-byte scatter needs.
const SECOND: usize = 54;
/// What the buffers hold before the message.
const STALE: u8 = 0xee;

/// A rig whose CQ is polled with `cqe_size`-byte CQEs (the memory re-laid out: 128-byte
/// entries are two of the rig's 64-byte slots, the CQE in the second), and its poller.
fn rig(cqe_size: u32) -> (Rig, CompletionQueue<crate::testutil::RigBindings>) {
    rig_of(cqe_size, 64)
}

/// As [`rig`], with `slots` 64-byte slots of CQ memory.
fn rig_of(cqe_size: u32, slots: u32) -> (Rig, CompletionQueue<crate::testutil::RigBindings>) {
    let rig = Rig::with_cq(8, 256, caps(1, 0), slots);
    let mut layout = rig.mem.cq_layout();
    layout.cqe_cnt = slots * 64 / cqe_size;
    layout.cqe_size = cqe_size;
    // SAFETY: the rig's CQ memory, which this poller alone polls (the rig's is not used).
    let cq = unsafe { CompletionQueue::new(&layout, rig.bindings.clone()) }.unwrap();
    (rig, cq)
}

/// Message bytes `len` long, recognisable (`i + 1`, never the stale byte).
fn message(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i + 1) as u8).collect()
}

/// Writes the receive CQE `k` (free-running: its slot and owner bit those of the pass over a
/// ring of `cqe_size`-byte CQEs) for `msg`, scattered in the format `scatter` (0: not
/// scattered), as a ConnectX does.
fn put(rig: &Rig, cqe_size: u32, k: usize, cqe_op: u8, msg: &[u8], scatter: u8) {
    let per = (cqe_size / 64) as usize;
    let cnt = rig.mem.cq_entries() / per;
    let mut c = resp_cqe(QPN, cqe_op, msg.len() as u32, 0x0102_0304, (k / cnt) as u8);
    c[63] |= scatter;
    // Where the message came from: a GRH and source QP 0xabc (in the bytes a 32-byte
    // scatter's data overwrites).
    c[24..28].copy_from_slice(&0x1000_0abcu32.to_be_bytes());
    let at = (k % cnt) * per + per - 1;
    match scatter {
        INLINE_SCATTER_32 => c[..msg.len()].copy_from_slice(msg),
        INLINE_SCATTER_64 => {
            let mut head = [0u8; 64];
            head[..msg.len()].copy_from_slice(msg);
            // The first half of the 128-byte entry: no owner byte of its own to publish.
            rig.mem.put_cqe(at - 1, head);
        }
        _ => {}
    }
    rig.mem.put_cqe(at, c);
}

/// With `primed`, posts a receive and polls its plain CQE (the rig's first, `k` 0), so the
/// poller has the QP's binding cached and decodes the next CQE inline (the first CQE of a
/// poller is always decoded out of line). Returns the next CQE's `k`.
fn prime(
    rig: &mut Rig,
    cq: &mut CompletionQueue<crate::testutil::RigBindings>,
    cqe_size: u32,
    primed: bool,
) -> usize {
    if !primed {
        return 0;
    }
    let sgl = [Sge::new(0x1000, 8, 1)];
    // SAFETY: never written (the CQE says the device wrote the buffer).
    unsafe { rig.rq.post(&RecvWr::new(1000, &sgl)) }.unwrap();
    put(rig, cqe_size, 0, op::RESP_SEND, &message(8), 0);
    let mut wc = [Completion::EMPTY; 1];
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (1000, WcStatus::Success));
    1
}

#[test]
fn scattered_receives_at_every_size_boundary() {
    for (cqe_size, primed) in [(64u32, false), (128, false), (64, true), (128, true)] {
        let limit = if cqe_size == 64 { 32 } else { 64 };
        for cqe_op in [op::RESP_SEND, op::RESP_SEND_IMM] {
            for (i, len) in [0usize, 1, 9, 10, 11, 31, 32, 33, 63, 64, 65]
                .into_iter()
                .enumerate()
            {
                // Under Miri (100 times slower), every length for each CQE size, primed or not,
                // as a SEND and as a SEND with immediate in turn (the immediate is read
                // whatever the length).
                if cfg!(miri) && (i % 2 == 1) != (cqe_op == op::RESP_SEND_IMM) {
                    continue;
                }
                let (mut rig, mut cq) = rig(cqe_size);
                let k = prime(&mut rig, &mut cq, cqe_size, primed);
                let mut a = std::vec![STALE; FIRST];
                let mut b = std::vec![STALE; SECOND + 8];
                let sgl = [
                    Sge::new(a.as_mut_ptr() as u64, FIRST as u32, 1),
                    Sge::new(b.as_mut_ptr() as u64, SECOND as u32, 1),
                ];
                // SAFETY: the buffers outlive the poll that fills them.
                unsafe { rig.rq.post(&RecvWr::new(77, &sgl)) }.unwrap();
                let msg = message(len);
                let scatter = match (cqe_size, len) {
                    (_, 0) => 0,
                    (64, ..=32) => INLINE_SCATTER_32,
                    (128, ..=64) => INLINE_SCATTER_64,
                    _ => 0,
                };
                put(&rig, cqe_size, k, cqe_op, &msg, scatter);
                let mut wc = [Completion::EMPTY; 2];
                let case =
                    std::format!("{cqe_size}-byte CQE, op {cqe_op}, {len} bytes, primed {primed}");
                assert_eq!(cq.poll(&mut wc), 1, "{case}");
                let w = wc[0];
                assert_eq!(
                    (w.wr_id, w.status, w.opcode, w.byte_len, w.qp_num),
                    (77, WcStatus::Success, WcOpcode::Recv, len as u32, QPN),
                    "{case}"
                );
                let imm = cqe_op == op::RESP_SEND_IMM;
                assert_eq!(w.imm(), imm.then_some(0x0102_0304), "{case}");
                assert_eq!(w.vendor_err, 0, "{case}");
                // The buffers: the scattered bytes in order over both entries, the rest
                // untouched; a message the device wrote itself (not scattered) is not the
                // poller's to copy.
                let got: Vec<u8> = a.iter().chain(&b).copied().collect();
                let copied = if scatter != 0 { len } else { 0 };
                assert!(len <= limit || copied == 0, "{case}");
                assert_eq!(&got[..copied], &msg[..copied], "{case}");
                assert!(got[copied..].iter().all(|&x| x == STALE), "{case}: {got:?}");
                assert_eq!(rig.rq.free(), 8, "{case}: the receive was retired");
            }
        }
    }
}

#[test]
fn a_32_byte_scatter_in_a_128_byte_cqe_and_a_run_of_them() {
    // A device may scatter into the CQE itself with 128-byte CQEs too; and a run of
    // scattered receives, each to its own buffer, in one poll.
    let (mut rig, mut cq) = rig(128);
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|_| std::vec![STALE; 64]).collect();
    for (i, buf) in bufs.iter_mut().enumerate() {
        let sgl = [Sge::new(buf.as_mut_ptr() as u64, 64, 1)];
        // SAFETY: the buffers outlive the poll.
        unsafe { rig.rq.post(&RecvWr::new(i as u64, &sgl)) }.unwrap();
    }
    let sizes = [
        (20, INLINE_SCATTER_32),
        (50, INLINE_SCATTER_64),
        (32, INLINE_SCATTER_32),
    ];
    let sizes = [sizes[0], sizes[1], sizes[2], (64, INLINE_SCATTER_64)];
    let msgs: Vec<Vec<u8>> = sizes.iter().map(|&(len, _)| message(len)).collect();
    for (i, m) in msgs.iter().enumerate() {
        put(&rig, 128, i, op::RESP_SEND, m, sizes[i].1);
    }
    let mut wc = [Completion::EMPTY; 8];
    assert_eq!(cq.poll(&mut wc), 4);
    for (i, m) in msgs.iter().enumerate() {
        assert_eq!((wc[i].wr_id, wc[i].byte_len), (i as u64, m.len() as u32));
        assert!(wc[i].is_success(), "{:?}", wc[i]);
        // Where the message came from, as libmlx5 reads it: from the CQE's bytes 24..28,
        // which hold data when 32 bytes were scattered (as far as the message reaches).
        let path = if sizes[i].1 == INLINE_SCATTER_32 {
            let mut b = 0x1000_0abcu32.to_be_bytes();
            for (k, x) in b.iter_mut().enumerate() {
                *x = m.get(24 + k).copied().unwrap_or(*x);
            }
            let f = u32::from_be_bytes(b);
            (f & 0xff_ffff, ((f >> 24) & 0xf) as u8, f & (3 << 28) != 0)
        } else {
            (0xabc, 0, true)
        };
        let got = (wc[i].src_qp, wc[i].sl, wc[i].flags.contains(WcFlags::GRH));
        assert_eq!(got, path, "receive {i}");
        assert_eq!(&bufs[i][..m.len()], &m[..], "receive {i}");
        assert!(bufs[i][m.len()..].iter().all(|&x| x == STALE));
    }
}

#[test]
fn a_message_longer_than_the_scatter_list_is_a_local_length_error() {
    for primed in [false, true] {
        let (mut rig, mut cq) = rig(64);
        let k = prime(&mut rig, &mut cq, 64, primed);
        let mut a = std::vec![STALE; 12];
        let sgl = [Sge::new(a.as_mut_ptr() as u64, 8, 1)];
        // SAFETY: the buffer outlives the poll.
        unsafe { rig.rq.post(&RecvWr::new(5, &sgl)) }.unwrap();
        put(&rig, 64, k, op::RESP_SEND, &message(9), INLINE_SCATTER_32);
        let mut wc = [Completion::EMPTY; 1];
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!((wc[0].wr_id, wc[0].status), (5, WcStatus::LocLenErr));
        assert_eq!(&a[..8], &message(8)[..], "what fits is written");
        assert_eq!(&a[8..], &[STALE; 4], "nothing past the buffer");
    }
}

/// Guard bytes after each receive buffer: nothing may be written there.
const GUARD: usize = 8;

#[test]
fn one_buffer_receives_of_every_length_round_both_rings() {
    // The inline path's case: a receive of one buffer. Every message length a format holds,
    // into a buffer exactly as long, one byte longer and one byte shorter (a local length
    // error, what fits written); the receives go round the receive ring (8 entries) and the
    // CQ (8 or 4 CQEs) many times, 1 and 3 CQEs a poll.
    let lens: Vec<usize> = if cfg!(miri) {
        std::vec![0, 1, 2, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 48, 63, 64]
    } else {
        (0..=64).collect()
    };
    for (f, (cqe_size, scatter)) in [
        (64u32, INLINE_SCATTER_32),
        (128, INLINE_SCATTER_32),
        (128, INLINE_SCATTER_64),
    ]
    .into_iter()
    .enumerate()
    {
        let room = if scatter == INLINE_SCATTER_32 { 32 } else { 64 };
        for per_poll in [1usize, 3] {
            // Under Miri, each format polled 1 or 3 CQEs at a time in turn (every receive of
            // the list still taken, round both rings).
            if cfg!(miri) && per_poll != [1, 3][f % 2] {
                continue;
            }
            let (mut rig, mut cq) = rig_of(cqe_size, 8);
            let mut cases = Vec::new();
            for &len in lens.iter().filter(|&&l| l <= room) {
                for buf_len in [len, len + 1, len.wrapping_sub(1)] {
                    if buf_len <= 64 {
                        cases.push((len, buf_len));
                    }
                }
            }
            let mut k = 0;
            for batch in cases.chunks(per_poll) {
                let mut bufs: Vec<Vec<u8>> = batch
                    .iter()
                    .map(|&(_, n)| std::vec![STALE; n + GUARD])
                    .collect();
                for (i, (&(len, n), buf)) in batch.iter().zip(&mut bufs).enumerate() {
                    let sgl = [Sge::new(buf.as_mut_ptr() as u64, n as u32, 1)];
                    // SAFETY: the buffers outlive the poll that fills them.
                    unsafe { rig.rq.post(&RecvWr::new(i as u64, &sgl)) }.unwrap();
                    put(&rig, cqe_size, k + i, op::RESP_SEND, &message(len), scatter);
                }
                let mut wc = [Completion::EMPTY; 4];
                assert_eq!(cq.poll(&mut wc[..per_poll]), batch.len());
                for (i, (&(len, n), buf)) in batch.iter().zip(&bufs).enumerate() {
                    let case = std::format!(
                        "{cqe_size}-byte CQE, scatter {scatter:#x}, {len} bytes into {n},                          CQE {}, {per_poll} a poll",
                        k + i
                    );
                    let status = if len <= n {
                        WcStatus::Success
                    } else {
                        WcStatus::LocLenErr
                    };
                    assert_eq!(
                        (wc[i].wr_id, wc[i].status, wc[i].byte_len, wc[i].vendor_err),
                        (i as u64, status, len as u32, 0),
                        "{case}"
                    );
                    let copied = len.min(n);
                    assert_eq!(&buf[..copied], &message(copied)[..], "{case}");
                    assert!(buf[copied..].iter().all(|&x| x == STALE), "{case}: {buf:?}");
                }
                k += batch.len();
            }
            assert_eq!(rig.rq.free(), 8);
            assert_eq!(cq.consumer() as usize, k);
            assert!(k > 8 * 4, "the rings went round");
        }
    }
}

#[test]
fn scattered_data_goes_to_the_receive_of_the_new_incarnation() {
    // Receives posted, some completed, then the queue pair is reset and connected again: the
    // counters restart at 0, and the receives posted now (at the slots the old ones had)
    // take the scattered data, not the old receives' buffers.
    let (mut rig, mut cq) = rig(64);
    let mut old: Vec<Vec<u8>> = (0..3).map(|_| std::vec![STALE; 32]).collect();
    for (i, buf) in old.iter_mut().enumerate() {
        let sgl = [Sge::new(buf.as_mut_ptr() as u64, 32, 1)];
        // SAFETY: the buffers outlive the polls.
        unsafe { rig.rq.post(&RecvWr::new(i as u64, &sgl)) }.unwrap();
    }
    // Two complete (the second inline); the third is flushed by the reset.
    put(&rig, 64, 0, op::RESP_SEND, &message(5), INLINE_SCATTER_32);
    put(&rig, 64, 1, op::RESP_SEND, &message(6), INLINE_SCATTER_32);
    let flush = crate::testutil::err_cqe(QPN, op::RESP_ERR, 0, 0x05, 0, 0);
    rig.mem.put_cqe(2, flush);
    let mut wc = [Completion::EMPTY; 4];
    assert_eq!(cq.poll(&mut wc), 3);
    assert_eq!(
        wc[..3]
            .iter()
            .map(|w| (w.wr_id, w.status))
            .collect::<Vec<_>>(),
        [
            (0, WcStatus::Success),
            (1, WcStatus::Success),
            (2, WcStatus::WrFlushErr)
        ]
    );
    let rq = rig.bindings[0].rq.clone().unwrap();
    let sq = rig.bindings[0].sq.clone().unwrap();
    // SAFETY: nothing polls or posts meanwhile; every receive was retired.
    unsafe {
        crate::clear_doorbell_record(&rig.mem.qp_layout(QPN, 8, 256));
        sq.restart();
        rq.restart();
    }
    rq.gate().open();
    sq.gate().open();
    let mut new: Vec<Vec<u8>> = (0..2).map(|_| std::vec![STALE; 32]).collect();
    for (i, buf) in new.iter_mut().enumerate() {
        let sgl = [Sge::new(buf.as_mut_ptr() as u64, 32, 1)];
        // SAFETY: the buffers outlive the polls.
        unsafe { rig.rq.post(&RecvWr::new(10 + i as u64, &sgl)) }.unwrap();
    }
    assert_eq!(rig.rq.head(), 2, "restarted at 0");
    put(&rig, 64, 3, op::RESP_SEND, &message(7), INLINE_SCATTER_32);
    put(&rig, 64, 4, op::RESP_SEND, &message(8), INLINE_SCATTER_32);
    assert_eq!(cq.poll(&mut wc), 2);
    assert_eq!((wc[0].wr_id, wc[1].wr_id), (10, 11));
    assert!(wc[..2].iter().all(|w| w.is_success()));
    assert_eq!(&new[0][..7], &message(7)[..]);
    assert_eq!(&new[1][..8], &message(8)[..]);
    assert!(new.iter().all(|b| b[8..].iter().all(|&x| x == STALE)));
    assert_eq!(&old[0][..5], &message(5)[..]);
    assert_eq!(&old[1][..6], &message(6)[..]);
    assert!(old[0][5..].iter().all(|&x| x == STALE), "{:?}", old[0]);
    assert!(old[1][6..].iter().all(|&x| x == STALE), "{:?}", old[1]);
    assert!(
        old[2].iter().all(|&x| x == STALE),
        "the flushed receive got nothing"
    );
}

#[test]
fn data_where_no_cqe_has_room_is_a_format_error_and_nothing_is_copied() {
    // 64 bytes before a 64-byte CQE (the previous CQE), 33 bytes "in" a 32-byte scatter and
    // 65 in a 64-byte one; into a buffer that would hold them, on either path (primed: the
    // inline decoder of a run of scattered receives).
    for (cqe_size, scatter, len) in [
        (64u32, INLINE_SCATTER_64, 8u32),
        (64, INLINE_SCATTER_32, 33),
        (128, INLINE_SCATTER_32, 33),
        (128, INLINE_SCATTER_64, 65),
    ] {
        for primed in [false, true] {
            let case =
                std::format!("{cqe_size}-byte CQE, {scatter:#x}, {len} bytes, primed {primed}");
            let (mut rig, mut cq) = rig(cqe_size);
            let k = prime(&mut rig, &mut cq, cqe_size, primed);
            let mut a = std::vec![STALE; 128];
            let sgl = [Sge::new(a.as_mut_ptr() as u64, 128, 1)];
            // SAFETY: the buffer outlives the poll.
            unsafe { rig.rq.post(&RecvWr::new(6, &sgl)) }.unwrap();
            let mut c = resp_cqe(QPN, op::RESP_SEND, len, 0, 0);
            c[63] |= scatter;
            c[..32].copy_from_slice(&message(32));
            let per = (cqe_size / 64) as usize;
            if per == 2 {
                // The first half of the 128-byte entry: data, were there room for it.
                let mut head = [0u8; 64];
                head.copy_from_slice(&message(64));
                rig.mem.put_cqe(k * per, head);
            }
            rig.mem.put_cqe(k * per + per - 1, c);
            let mut wc = [Completion::EMPTY; 1];
            assert_eq!(cq.poll(&mut wc), 1, "{case}");
            assert_eq!(
                (wc[0].wr_id, wc[0].status, wc[0].vendor_err),
                (
                    6,
                    WcStatus::GeneralErr,
                    VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(c[63])
                ),
                "{case}"
            );
            assert!(a.iter().all(|&x| x == STALE), "{case}: nothing copied");
            assert_eq!(rig.rq.free(), 8, "{case}: the receive was retired");
        }
    }
}

#[test]
fn a_run_of_scattered_receives_ends_at_the_first_cqe_of_another_kind() {
    // One poll: two scattered receives (the first decoded straight, the second in the run),
    // a plain receive (the run ends: the rest of the poll is decoded out of line) and a
    // scattered one after it (copied out of line); then a poll that starts at a scattered
    // receive whose list it spans (out of line from the first CQE).
    let (mut rig, mut cq) = rig(64);
    let k = prime(&mut rig, &mut cq, 64, true);
    let mut bufs: Vec<Vec<u8>> = (0..4).map(|_| std::vec![STALE; 16 + GUARD]).collect();
    for (i, buf) in bufs.iter_mut().enumerate() {
        let sgl = [Sge::new(buf.as_mut_ptr() as u64, 16, 1)];
        // SAFETY: the buffers outlive the polls.
        unsafe { rig.rq.post(&RecvWr::new(i as u64, &sgl)) }.unwrap();
    }
    let lens = [5, 16, 9, 12];
    let scatter = [INLINE_SCATTER_32, INLINE_SCATTER_32, 0, INLINE_SCATTER_32];
    for i in 0..4 {
        put(
            &rig,
            64,
            k + i,
            op::RESP_SEND,
            &message(lens[i]),
            scatter[i],
        );
    }
    let mut wc = [Completion::EMPTY; 8];
    assert_eq!(cq.poll(&mut wc), 4);
    assert_eq!(cq.consumer() as usize, k + 4);
    for i in 0..4 {
        assert_eq!(
            (wc[i].wr_id, wc[i].status, wc[i].byte_len),
            (i as u64, WcStatus::Success, lens[i] as u32),
            "receive {i}"
        );
        let copied = if scatter[i] != 0 { lens[i] } else { 0 };
        assert_eq!(&bufs[i][..copied], &message(copied)[..], "receive {i}");
        assert!(bufs[i][copied..].iter().all(|&x| x == STALE), "receive {i}");
    }
    assert_eq!(rig.mem.cq_dbrec() as usize, k + 4);
    // Two scattered receives over two entries each, the first too long for its first entry:
    // the poll starts out of line and the second, which would fit, goes with it.
    let mut pairs: Vec<Vec<u8>> = (0..2).map(|_| std::vec![STALE; 20]).collect();
    for (i, buf) in pairs.iter_mut().enumerate() {
        let base = buf.as_mut_ptr() as u64;
        let sgl = [Sge::new(base, 6, 1), Sge::new(base + 6, 14, 1)];
        // SAFETY: the buffers outlive the polls.
        unsafe { rig.rq.post(&RecvWr::new(10 + i as u64, &sgl)) }.unwrap();
    }
    put(
        &rig,
        64,
        k + 4,
        op::RESP_SEND,
        &message(20),
        INLINE_SCATTER_32,
    );
    put(
        &rig,
        64,
        k + 5,
        op::RESP_SEND_IMM,
        &message(6),
        INLINE_SCATTER_32,
    );
    assert_eq!(cq.poll(&mut wc), 2);
    assert_eq!((wc[0].wr_id, wc[0].byte_len), (10, 20));
    assert_eq!((wc[1].wr_id, wc[1].byte_len), (11, 6));
    assert!(wc[..2].iter().all(|w| w.is_success()));
    assert_eq!(pairs[0], message(20));
    assert_eq!(&pairs[1][..6], &message(6)[..]);
    assert!(pairs[1][6..].iter().all(|&x| x == STALE));
    assert_eq!(rig.rq.free(), 8);
}

#[test]
fn a_buffer_with_the_end_marker_lkey_ends_the_list() {
    // A scatter entry whose lkey is the end marker (`MLX5_INVALID_LKEY`) ends the list for
    // the device, whatever its length: a message for it is a local length error and nothing
    // is written, on either path.
    for primed in [false, true] {
        let (mut rig, mut cq) = rig(64);
        let k = prime(&mut rig, &mut cq, 64, primed);
        let mut a = std::vec![STALE; 32];
        let sgl = [Sge::new(
            a.as_mut_ptr() as u64,
            32,
            crate::prm::INVALID_LKEY,
        )];
        // SAFETY: the buffer outlives the poll.
        unsafe { rig.rq.post(&RecvWr::new(3, &sgl)) }.unwrap();
        put(&rig, 64, k, op::RESP_SEND, &message(8), INLINE_SCATTER_32);
        let mut wc = [Completion::EMPTY; 1];
        assert_eq!(cq.poll(&mut wc), 1);
        assert_eq!(
            (wc[0].wr_id, wc[0].status),
            (3, WcStatus::LocLenErr),
            "primed {primed}"
        );
        assert!(a.iter().all(|&x| x == STALE), "primed {primed}");
    }
}

#[test]
fn a_scattered_cqe_of_another_kind_or_queue_pair_is_not_taken_inline() {
    // After a receive of the QP (its binding cached, so the next poll that starts at a
    // scattered CQE tries the inline decoder first): a requester CQE with data in it (a READ
    // response scattered to the CQE, a format the poller does not decode) and a scattered
    // receive of a queue pair the CQ was not given. Neither may reach the QP's receive.
    let (mut rig, mut cq) = rig(64);
    let k = prime(&mut rig, &mut cq, 64, true);
    let mut a = std::vec![STALE; 64];
    let sgl = [Sge::new(a.as_mut_ptr() as u64, 64, 1)];
    // SAFETY: the buffer outlives the polls.
    unsafe { rig.rq.post(&RecvWr::new(8, &sgl)) }.unwrap();
    let local = [Sge::new(0x1000, 4, 1)];
    // SAFETY: never executed by a device.
    unsafe {
        rig.sq
            .post(&SendWr::read(5, &local, zverbs_core::RemoteBuf::new(0x2000, 9)).signaled())
    }
    .unwrap();
    let mut read = crate::testutil::req_cqe(QPN, crate::prm::opcode::RDMA_READ, 0, 4, 0);
    read[..4].copy_from_slice(&message(4));
    read[63] |= INLINE_SCATTER_32;
    rig.mem.put_cqe(k, read);
    let mut other = resp_cqe(QPN + 1, op::RESP_SEND, 4, 0, 0);
    other[..4].copy_from_slice(&message(4));
    other[63] |= INLINE_SCATTER_32;
    rig.mem.put_cqe(k + 1, other);
    let mut wc = [Completion::EMPTY; 1];
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].vendor_err, wc[0].qp_num),
        (
            5,
            WcStatus::GeneralErr,
            VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(read[63]),
            QPN
        )
    );
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].qp_num),
        (0, WcStatus::GeneralErr, QPN + 1)
    );
    assert!(a.iter().all(|&x| x == STALE), "nothing copied: {a:?}");
    assert_eq!(rig.rq.free(), 7, "the QP's receive is still posted");
    // Its own scattered receive takes it.
    put(
        &rig,
        64,
        k + 2,
        op::RESP_SEND,
        &message(6),
        INLINE_SCATTER_32,
    );
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].byte_len),
        (8, WcStatus::Success, 6)
    );
    assert_eq!(&a[..6], &message(6)[..]);
    assert_eq!(rig.rq.free(), 8);
}

#[test]
fn shared_receive_queue_receives_scattered_and_flushed_retire_their_wqes() {
    // Data scattered into the CQE of a receive from a shared receive queue (whose QPs must be
    // created without scatter-to-CQE): reported as a format error, its WQE retired.
    use crate::SharedRecvQueue;
    use crate::state::{CqBinding, SrqSlot, SrqState};
    use crate::testutil::{SqHandle, SrqMem};
    let mem = SrqMem::new(0x42);
    let slots: Vec<SrqSlot> = (0..4).map(|_| SrqSlot::new()).collect();
    // SAFETY: the memory outlives the state and the queue; a new SRQ; nothing else posts.
    let state = unsafe { SrqState::new(&mem.layout, &slots[..]) }.unwrap();
    // SAFETY: as above.
    let mut srq = unsafe { SharedRecvQueue::new(&mem.layout, &state) }.unwrap();
    let mut a = std::vec![STALE; 64];
    let sgl = [Sge::new(a.as_mut_ptr() as u64, 64, 1)];
    // SAFETY: the buffer outlives the poll.
    unsafe { srq.post(&RecvWr::new(1, &sgl)) }.unwrap();
    let rig = Rig::new(8, 256, caps(1, 0));
    let bindings = [CqBinding::with_srq(QPN, None::<SqHandle>, &state)];
    // SAFETY: the rig's CQ memory, which this poller alone polls (the rig's is not used).
    let mut cq = unsafe { CompletionQueue::new(&rig.mem.cq_layout(), &bindings[..]) }.unwrap();
    let mut c = resp_cqe(QPN, op::RESP_SEND, 4, 0, 0);
    c[..4].copy_from_slice(&message(4));
    c[63] |= INLINE_SCATTER_32;
    rig.mem.put_cqe(0, c);
    let mut wc = [Completion::EMPTY; 1];
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status, wc[0].vendor_err),
        (
            1,
            WcStatus::GeneralErr,
            VENDOR_ERR_UNSUPPORTED_FORMAT | u32::from(c[63])
        )
    );
    assert!(a.iter().all(|&x| x == STALE));
    assert_eq!(srq.free(), 3, "the WQE was retired");
    // And a flushed receive of the SRQ: its error CQE retires the WQE it names.
    let wqe = srq.head() as u16;
    // SAFETY: never executed by a device.
    unsafe { srq.post(&RecvWr::new(2, &sgl)) }.unwrap();
    rig.mem.put_cqe(
        1,
        crate::testutil::err_cqe(QPN, op::RESP_ERR, wqe, 0x05, 0, 0),
    );
    assert_eq!(cq.poll(&mut wc), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::WrFlushErr));
    assert_eq!(srq.free(), 3);
}

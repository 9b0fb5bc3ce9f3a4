//! The send queue's UD WQEs: bytes at every wrap position, the literal bytes of one WQE, and
//! refused requests that leave the ring, the doorbell and the counters untouched.

extern crate std;

use std::vec::Vec;

use super::frame::{advance, expect_wqe, read_wrapped};
use super::*;
use crate::testutil::{QPN, Rig, caps};
use zverbs_core::{RemoteBuf, Transport};

const QKEY: u32 = 0x8000_1234;
const DQPN: u32 = 0x00ab_cdef;

/// A UD queue's capabilities: `max_send_sge` entries, `max_inline_data` inline bytes, the
/// 4096-byte path MTU.
fn ud_caps(max_send_sge: u32, max_inline_data: u32) -> SqCaps {
    SqCaps {
        transport: Transport::Ud { mtu: 4096 },
        ..caps(max_send_sge, max_inline_data)
    }
}

/// An address vector with recognisable bytes (`3 × i + 1`).
fn dest() -> UdDest {
    UdDest::new(core::array::from_fn(|i| (3 * i + 1) as u8), 0, DQPN, QKEY)
}

/// The datagram segment libmlx5's `set_datagram_seg` writes for [`dest`]: the vector, the
/// Q_Key in bytes 0..4 and `DQPN | MLX5_EXTENDED_UD_AV` in bytes 8..12.
fn datagram_bytes() -> [u8; 48] {
    let mut av = dest().av;
    av[0..4].copy_from_slice(&QKEY.to_be_bytes());
    av[8..12].copy_from_slice(&(DQPN | 0x8000_0000).to_be_bytes());
    av
}

/// The bytes of a UD SEND (with `imm`) of `n` entries or of `inline` bytes, at block `pi`.
fn expect_ud(pi: u32, n: usize, inline: Option<&[u8]>, imm: Option<u32>) -> Vec<u8> {
    let op = if imm.is_some() {
        opcode::SEND_IMM
    } else {
        opcode::SEND
    };
    expect_wqe(pi, op, imm.unwrap_or(0), &datagram_bytes(), n, inline)
}

#[test]
fn one_ud_send_as_literal_bytes() {
    let mut rig = Rig::new_ud(8, 256, ud_caps(2, 64));
    rig.mem.fill_sq(0xaa);
    let d = dest();
    let sgl = [Sge::new(0x1122_3344_5566_7788, 0x40, 0x99)];
    // SAFETY: never executed by a device.
    unsafe {
        rig.sq
            .post(&SendWr::send_to_imm(5, &sgl, &d, 0xdead_beef).signaled())
    }
    .unwrap();
    let ring = rig.mem.sq_bytes();
    #[rustfmt::skip]
    let want: [u8; 80] = [
        // ctrl: wqe index 0, SEND_IMM (0x0b); QPN 0x100, ds 5; CQ_UPDATE; immediate.
        0x00, 0x00, 0x00, 0x0b, 0x00, 0x01, 0x00, 0x05, 0x00, 0x00, 0x00, 0x08,
        0xde, 0xad, 0xbe, 0xef,
        // datagram: Q_Key, the vector's bytes 4..8, DQPN | extended AV, the vector from 12.
        0x80, 0x00, 0x12, 0x34, 13, 16, 19, 22, 0x80, 0xab, 0xcd, 0xef, 37, 40, 43, 46,
        49, 52, 55, 58, 61, 64, 67, 70, 73, 76, 79, 82, 85, 88, 91, 94,
        97, 100, 103, 106, 109, 112, 115, 118, 121, 124, 127, 130, 133, 136, 139, 142,
        // data: byte count, lkey, address.
        0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x99, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66,
        0x77, 0x88,
    ];
    assert_eq!(ring[..80], want[..]);
    assert!(
        ring[80..128].iter().all(|&b| b == 0xaa),
        "nothing past the WQE"
    );
    assert_eq!(rig.sq.producer(), 2, "two basic blocks");
    // Read back through the views.
    let c = CtrlSeg::new_unchecked(&ring[..16]);
    assert_eq!(
        (c.opcode(), c.ds(), c.qpn(), c.imm()),
        (opcode::SEND_IMM, 5, QPN, 0xdead_beef)
    );
    let g = DatagramSeg::new_unchecked(&ring[16..64]);
    assert_eq!((g.qkey(), g.dqp(), g.extended()), (QKEY, DQPN, true));
}

#[test]
fn ud_sends_at_every_wrap_position() {
    let blocks = 8u32;
    // Every number of entries (2 to 3 blocks), from every block of the ring; the datagram
    // segment fills the first block, so the entries are what wraps.
    for n in 0..=8usize {
        // Under Miri (100 times slower), each number of entries from block `7 - n % 4` (over
        // the entry counts of each size, the block from which it ends at the ring's end and
        // each from which it wraps) and from block `n % 4`, one of the two with an immediate:
        // every size at every wrap offset, and every block.
        let starts: Vec<u32> = if cfg!(miri) {
            std::vec![7 - n as u32 % 4, n as u32 % 4]
        } else {
            (0..blocks).collect()
        };
        for start in starts {
            for imm in [None, Some(0x0102_0304)] {
                if cfg!(miri) && imm.is_some() != ((n as u32 + start) % 2 == 1) {
                    continue;
                }
                let mut rig = Rig::new_ud(blocks, 256, ud_caps(8, 0));
                advance(&mut rig, start);
                let sgl: Vec<Sge> = (0..n)
                    .map(|i| Sge::new(0x1000 * (i as u64 + 1), i as u32 + 1, 0x10 + i as u32))
                    .collect();
                let d = dest();
                let wr = match imm {
                    Some(imm) => SendWr::send_to_imm(9, &sgl, &d, imm),
                    None => SendWr::send_to(9, &sgl, &d),
                };
                let pi = rig.sq.producer();
                // SAFETY: never executed by a device.
                unsafe { rig.sq.stage(&wr) }.unwrap();
                let want = expect_ud(pi, n, None, imm);
                assert_eq!(
                    read_wrapped(&rig.mem.sq_bytes(), pi, want.len()),
                    want,
                    "n={n} start={start}"
                );
                assert_eq!(
                    rig.sq.producer() - pi,
                    want.len().div_ceil(64) as u32,
                    "n={n} start={start}"
                );
                rig.sq.ring();
                assert_eq!(rig.mem.dbrec(1), rig.sq.producer() & 0xffff);
                // BlueFlame carries the wrapped WQE in ring order.
                let bf = rig.mem.bf_bytes();
                let off = if start % 2 == 0 { 0 } else { 256 };
                assert_eq!(
                    bf[off..off + want.len()],
                    want[..],
                    "BlueFlame n={n} start={start}"
                );
            }
        }
    }
    // Inline payloads of every length up to the limit, from the blocks where they wrap. Under
    // Miri, the lengths at a segment boundary and at the block boundary, the latter from the
    // block where the shorter ends at the ring's end (the longer's data wraps by a byte), the
    // others alternately from the last block (the data then at the ring's start) and block 0.
    let miri = [(0, 7), (1, 0), (12, 7), (13, 0), (60, 6), (61, 6), (120, 7)];
    for len in 0..=120usize {
        for start in [0, blocks - 1, blocks - 2] {
            if cfg!(miri) && !miri.contains(&(len, start)) {
                continue;
            }
            let mut rig = Rig::new_ud(blocks, 256, ud_caps(1, 120));
            advance(&mut rig, start);
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let sgl = [Sge::from_slice(&data, 0)];
            let d = dest();
            let pi = rig.sq.producer();
            // SAFETY: never executed by a device; the inline source is readable.
            unsafe { rig.sq.post(&SendWr::send_to(9, &sgl, &d).inline()) }.unwrap();
            let want = expect_ud(pi, 0, Some(&data), None);
            assert_eq!(
                read_wrapped(&rig.mem.sq_bytes(), pi, want.len()),
                want,
                "len={len} start={start}"
            );
        }
    }
}

#[test]
fn the_largest_ud_wqe_counts_the_datagram_segment() {
    // 12 entries: ctrl + datagram (4) + 12 = 16 segments, four blocks: fits four blocks, and
    // one entry more does not (an RC queue would take it: 2 + 13 = 15).
    let fits = Rig::new_ud(4, 0, ud_caps(12, 0));
    assert_eq!(fits.sq.caps().transport, Transport::Ud { mtu: 4096 });
    let mem = crate::testutil::Mem::new(4, 8, 32, 0, 8);
    let qp = mem.qp_layout(QPN, 8, 0);
    let slots: std::boxed::Box<[crate::SqSlot]> = (0..4).map(|_| crate::SqSlot::new()).collect();
    let state = crate::SqState::new(slots).unwrap();
    // SAFETY: never posted to.
    let e = unsafe { SendQueue::new_ud(&qp, ud_caps(13, 0), &state, None) }.unwrap_err();
    assert_eq!(e, crate::LayoutError::WqeTooLarge { blocks: 5 });
    // SAFETY: as above.
    assert!(unsafe { SendQueue::new(&qp, caps(13, 0), &state, None) }.is_ok());
    // The capabilities' transport must be the queue's.
    // SAFETY: as above.
    let e = unsafe { SendQueue::new(&qp, ud_caps(2, 0), &state, None) }.unwrap_err();
    assert_eq!(e, crate::LayoutError::Transport);
    // SAFETY: as above.
    let e = unsafe { SendQueue::new_ud(&qp, caps(2, 0), &state, None) }.unwrap_err();
    assert_eq!(e, crate::LayoutError::Transport);
}

#[test]
fn refused_ud_requests_change_nothing() {
    let mut rig = Rig::new_ud(8, 256, ud_caps(2, 32));
    let d = dest();
    let sgl = [Sge::new(0x1000, 8, 1)];
    // Fill the ring but one block: three UD SENDs of one entry (two blocks each) and a NOP.
    for i in 0..3 {
        // SAFETY: never executed by a device.
        unsafe { rig.sq.stage(&SendWr::send_to(i, &sgl, &d)) }.unwrap();
    }
    // SAFETY: as above.
    unsafe { rig.sq.stage(&SendWr::nop(3)) }.unwrap();
    let ring = rig.mem.sq_bytes();
    let (pi, pending, db) = (rig.sq.producer(), rig.sq.pending(), rig.mem.dbrec(1));
    let three = [sgl[0]; 3];
    let long = [Sge::new(0x1000, 4000, 1), Sge::new(0x1000, 97, 1)];
    let inline = [Sge::new(0x1000, 33, 1)];
    let r = RemoteBuf::new(0x2000, 2);
    let local = Sge::new(0x3000, 8, 1);
    let cases = [
        (SendWr::write(1, &sgl, r), PostError::WrongTransport),
        (SendWr::write_imm(1, &sgl, r, 1), PostError::WrongTransport),
        (SendWr::send(1, &sgl), PostError::WrongTransport),
        (SendWr::send_imm(1, &sgl, 2), PostError::WrongTransport),
        (SendWr::read(1, &sgl, r), PostError::WrongTransport),
        (
            SendWr::compare_swap(1, local, r, 1, 2),
            PostError::WrongTransport,
        ),
        (SendWr::fetch_add(1, local, r, 1), PostError::WrongTransport),
        (
            SendWr::send_to(1, &long, &d),
            PostError::DatagramTooLong {
                len: 4097,
                mtu: 4096,
            },
        ),
        (
            SendWr::send_to(1, &three, &d),
            PostError::TooManySges { got: 3, max: 2 },
        ),
        (
            SendWr::send_to(1, &inline, &d).inline(),
            PostError::InlineTooLarge { len: 33, max: 32 },
        ),
        (
            SendWr::send_to(1, &sgl, &d),
            PostError::QueueFull { needed: 2, free: 1 },
        ),
    ];
    for (wr, err) in cases {
        // SAFETY: refused before anything is read or written.
        assert_eq!(unsafe { rig.sq.post(&wr) }, Err(err), "{wr:?}");
        assert_eq!(rig.mem.sq_bytes(), ring, "{wr:?}");
        assert_eq!(
            (rig.sq.producer(), rig.sq.pending(), rig.mem.dbrec(1)),
            (pi, pending, db),
            "{wr:?}"
        );
    }
    // A batch whose last request is refused writes none of it that the device may read.
    let before = super::batch_tests::visible(&mut rig);
    let wrs = [SendWr::nop(7), SendWr::send(8, &sgl)];
    // SAFETY: as above.
    let e = unsafe { rig.sq.post_all(&wrs) }.unwrap_err();
    assert_eq!((e.index, e.error), (1, PostError::WrongTransport));
    super::batch_tests::visible(&mut rig).assert_same(&before, "refused batch");
    assert_eq!(rig.sq.producer(), pi);
    // A datagram on a reliable-connected queue.
    let mut rc = Rig::new(8, 256, caps(2, 32));
    // SAFETY: as above.
    let got = unsafe { rc.sq.post(&SendWr::send_to(1, &sgl, &d)) };
    assert_eq!(got, Err(PostError::WrongTransport));
    assert_eq!(rc.sq.producer(), 0);
}

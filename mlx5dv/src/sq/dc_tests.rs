//! The DC initiator's WQEs: the literal bytes of one, every operation at every wrap position,
//! the datagram segment as libmlx5's `mlx5dv_wr_set_dc_addr` writes it, and refused requests
//! that leave the ring, the doorbell and the counters untouched.

extern crate std;

use std::vec::Vec;

use super::frame::{complete_nop, expect_wqe, read_wrapped};
use super::*;
use crate::testutil::{Mem, QPN, Rig, SqHandle, caps, req_cqe};
use zverbs_core::{Completion, DcDest, PollCq, RemoteBuf, Transport};

const DCTN: u32 = 0x00ab_cdef;
const DC_KEY: u64 = 0x0102_0304_0506_0708;

/// A DCI's send queue with the CQ that completes it, over [`Mem`].
struct DcRig {
    // Field order is drop order: the queues before the memory they point into.
    dc: SendQueue<SqHandle, Dci>,
    cq: crate::CompletionQueue<crate::testutil::RigBindings>,
    mem: Mem,
}

impl DcRig {
    fn new(blocks: u32, bf_size: u32, caps: SqCaps) -> Self {
        let Rig { sq, cq, mem, .. } = Rig::<Dci>::with_cq(blocks, bf_size, caps, 64);
        Self { dc: sq, cq, mem }
    }

    /// Posts and completes `n` DC NOPs (one block each: ctrl + datagram) so the producer
    /// starts at block `n`.
    fn advance(&mut self, n: u32) {
        let d = dest();
        for i in 0..n {
            // SAFETY: never executed by a device.
            unsafe {
                self.dc
                    .post_to(&d, &SendWr::nop(1000 + u64::from(i)).signaled())
            }
            .unwrap();
            complete_nop(&mut self.cq, &self.mem, i);
        }
        assert_eq!(self.dc.producer(), n);
    }
}

/// An address vector with recognisable bytes (`3 × i + 1`) and, as an address handle's
/// vector has, no destination in `dqp_dct`.
fn dest() -> DcDest {
    let mut av: [u8; 48] = core::array::from_fn(|i| (3 * i + 1) as u8);
    av[8..12].fill(0);
    DcDest::new(av, DCTN, DC_KEY)
}

/// The datagram segment `mlx5dv_wr_set_dc_addr` writes for [`dest`]: the vector, the access
/// key in bytes 0..8 and `DCTN | MLX5_EXTENDED_UD_AV` in bytes 8..12.
fn dc_av_bytes() -> [u8; 48] {
    let mut av = dest().av;
    av[0..8].copy_from_slice(&DC_KEY.to_be_bytes());
    av[8..12].copy_from_slice(&(DCTN | 0x8000_0000).to_be_bytes());
    av
}

fn raddr_bytes(r: RemoteBuf) -> [u8; 16] {
    let mut b = [0u8; 16];
    RaddrSeg::new_unchecked(&mut b).set(r.addr, r.rkey);
    b
}

/// The header of a DC WQE after its control segment: the datagram segment, then what the
/// operation puts before its data (remote address; remote address, atomic and the one data
/// segment of an atomic).
fn header(wr: &SendWr<'_>) -> Vec<u8> {
    let mut h = dc_av_bytes().to_vec();
    match wr.op {
        SendOp::Write { remote, .. }
        | SendOp::WriteImm { remote, .. }
        | SendOp::Read { remote, .. } => h.extend_from_slice(&raddr_bytes(remote)),
        SendOp::CompareSwap {
            local,
            remote,
            compare,
            swap,
        } => {
            h.extend_from_slice(&raddr_bytes(remote));
            let mut a = [0u8; 16];
            AtomicSeg::new_unchecked(&mut a).set(swap, compare);
            h.extend_from_slice(&a);
            let mut d = [0u8; 16];
            DataSeg::new_unchecked(&mut d).set(8, local.lkey, local.addr);
            h.extend_from_slice(&d);
        }
        SendOp::FetchAdd { local, remote, add } => {
            h.extend_from_slice(&raddr_bytes(remote));
            let mut a = [0u8; 16];
            AtomicSeg::new_unchecked(&mut a).set(add, 0);
            h.extend_from_slice(&a);
            let mut d = [0u8; 16];
            DataSeg::new_unchecked(&mut d).set(8, local.lkey, local.addr);
            h.extend_from_slice(&d);
        }
        _ => {}
    }
    h
}

/// The opcode of each operation's WQE.
fn wqe_opcode(op: &SendOp<'_>) -> u8 {
    match op {
        SendOp::Write { .. } => opcode::RDMA_WRITE,
        SendOp::WriteImm { .. } => opcode::RDMA_WRITE_IMM,
        SendOp::Send { .. } => opcode::SEND,
        SendOp::SendImm { .. } => opcode::SEND_IMM,
        SendOp::Read { .. } => opcode::RDMA_READ,
        SendOp::CompareSwap { .. } => opcode::ATOMIC_CS,
        SendOp::FetchAdd { .. } => opcode::ATOMIC_FA,
        _ => opcode::NOP,
    }
}

#[test]
fn one_dc_write_as_literal_bytes() {
    let mut rig = DcRig::new(8, 256, caps(2, 64));
    rig.mem.fill_sq(0xaa);
    let d = dest();
    let sgl = [Sge::new(0x1122_3344_5566_7788, 0x40, 0x99)];
    let r = RemoteBuf::new(0x0a0b_0c0d_0e0f_1011, 0x2233_4455);
    // SAFETY: never executed by a device.
    unsafe {
        rig.dc
            .post_to(&d, &SendWr::write_imm(5, &sgl, r, 0xdead_beef).signaled())
    }
    .unwrap();
    let ring = rig.mem.sq_bytes();
    #[rustfmt::skip]
    let want: [u8; 96] = [
        // ctrl: wqe index 0, RDMA_WRITE_IMM (0x09); QPN 0x100, ds 6; CQ_UPDATE; immediate.
        0x00, 0x00, 0x00, 0x09, 0x00, 0x01, 0x00, 0x06, 0x00, 0x00, 0x00, 0x08,
        0xde, 0xad, 0xbe, 0xef,
        // datagram: the access key (8 bytes), DCTN | extended AV, the vector from 12.
        0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08, 0x80, 0xab, 0xcd, 0xef, 37, 40, 43, 46,
        49, 52, 55, 58, 61, 64, 67, 70, 73, 76, 79, 82, 85, 88, 91, 94,
        97, 100, 103, 106, 109, 112, 115, 118, 121, 124, 127, 130, 133, 136, 139, 142,
        // raddr: address, rkey, reserved.
        0x0a, 0x0b, 0x0c, 0x0d, 0x0e, 0x0f, 0x10, 0x11, 0x22, 0x33, 0x44, 0x55, 0, 0, 0, 0,
        // data: byte count, lkey, address.
        0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x00, 0x99, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66,
        0x77, 0x88,
    ];
    assert_eq!(ring[..96], want[..]);
    assert!(
        ring[96..128].iter().all(|&b| b == 0xaa),
        "nothing past the WQE"
    );
    assert_eq!(rig.dc.producer(), 2, "two basic blocks");
    assert_eq!(rig.mem.dbrec(1), 2, "rung");
    let g = DatagramSeg::new_unchecked(&ring[16..64]);
    assert_eq!((g.dc_key(), g.dqp(), g.extended()), (DC_KEY, DCTN, true));
}

#[test]
fn the_dct_number_is_or_ed_into_the_vectors_dqp_dct() {
    // libmlx5 or-s the target into the handle's `dqp_dct` (which carries the extended flag
    // when the handle has a GRH), and writes the whole 8-byte key.
    let mut av = [0u8; 48];
    av[8..12].copy_from_slice(&0x8000_0000u32.to_be_bytes());
    av[0..8].fill(0xff);
    let mut b = [0u8; 48];
    DatagramSeg::new_unchecked(&mut b[..]).set_dc_from_av(&av, 0x12_3456, 0x1111_2222_3333_4444);
    assert_eq!(b[0..8], 0x1111_2222_3333_4444u64.to_be_bytes());
    assert_eq!(b[8..12], [0x80, 0x12, 0x34, 0x56]);
    assert_eq!(b[12..], av[12..]);
    av[8..12].copy_from_slice(&0x0100_0000u32.to_be_bytes());
    DatagramSeg::new_unchecked(&mut b[..]).set_dc_from_av(&av, 0x12_3456, 0);
    assert_eq!(b[8..12], [0x81, 0x12, 0x34, 0x56]);
}

#[test]
fn every_dc_operation_at_every_wrap_position() {
    let blocks = 8u32;
    let r = RemoteBuf::new(0x7f00_1234_5600, 0xbeef);
    let local = Sge::new(0x5000, 8, 0x77);
    for n in 0..=4usize {
        let sgl: Vec<Sge> = (0..n)
            .map(|i| Sge::new(0x1000 * (i as u64 + 1), i as u32 + 1, 0x10 + i as u32))
            .collect();
        let wrs = [
            SendWr::write(1, &sgl, r),
            SendWr::write_imm(2, &sgl, r, 0x0102_0304),
            SendWr::send(3, &sgl),
            SendWr::send_imm(4, &sgl, 0x0506_0708),
            SendWr::read(5, &sgl, r),
            SendWr::compare_swap(6, local, r, 0x11, 0x22),
            SendWr::fetch_add(7, local, r, 0x33),
            SendWr::nop(8),
        ];
        for (j, wr) in wrs.iter().enumerate() {
            // Under Miri (100 times slower), each operation once, with `j % 5` entries, from
            // the last block (where a WQE of two or three blocks wraps and one of one block ends
            // at the ring's end) and from block `(j + 2) % 7` (blocks 0 to 6 over the
            // operations; 6 for the three-block READ, which wraps there after two blocks): each
            // arm, each number of entries and each block is reached.
            if cfg!(miri) && j % 5 != n {
                continue;
            }
            let starts: Vec<u32> = if cfg!(miri) {
                std::vec![blocks - 1, (j as u32 + 2) % 7]
            } else {
                (0..blocks).collect()
            };
            let n = if matches!(
                wr.op,
                SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. } | SendOp::Nop
            ) {
                0
            } else {
                n
            };
            for start in starts {
                let mut rig = DcRig::new(blocks, 256, caps(4, 0));
                rig.advance(start);
                let d = dest();
                let pi = rig.dc.producer();
                // SAFETY: never executed by a device.
                unsafe { rig.dc.stage_to(&d, wr) }.unwrap();
                let want = expect_wqe(
                    pi,
                    wqe_opcode(&wr.op),
                    wr.op.imm().unwrap_or(0),
                    &header(wr),
                    n,
                    None,
                );
                let ctx = std::format!("{:?} n={n} start={start}", wr.op);
                assert_eq!(
                    read_wrapped(&rig.mem.sq_bytes(), pi, want.len()),
                    want,
                    "{ctx}"
                );
                assert_eq!(
                    rig.dc.producer() - pi,
                    want.len().div_ceil(64) as u32,
                    "{ctx}"
                );
                assert_eq!(rig.dc.pending(), 1, "{ctx}");
                rig.dc.ring();
                assert_eq!(rig.mem.dbrec(1), rig.dc.producer() & 0xffff, "{ctx}");
                let bf = rig.mem.bf_bytes();
                let off = if start % 2 == 0 { 0 } else { 256 };
                assert_eq!(bf[off..off + want.len()], want[..], "BlueFlame {ctx}");
            }
        }
    }
    // Inline payloads of every length up to the limit, from the blocks where they wrap. Under
    // Miri, the lengths at a segment boundary and at the block boundary, the latter from the
    // block where the shorter ends at the ring's end (the longer's data wraps by a byte), the
    // others alternately from the last block (where the WQE wraps after its first) and block 0.
    let miri = [(0, 7), (1, 0), (12, 7), (13, 0), (44, 6), (45, 6), (100, 7)];
    for len in 0..=100usize {
        for start in [0, blocks - 1, blocks - 2] {
            if cfg!(miri) && !miri.contains(&(len, start)) {
                continue;
            }
            let mut rig = DcRig::new(blocks, 256, caps(1, 100));
            rig.advance(start);
            let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let sgl = [Sge::from_slice(&data, 0)];
            let d = dest();
            let pi = rig.dc.producer();
            let wr = SendWr::write(9, &sgl, r).inline();
            // SAFETY: never executed by a device; the inline source is readable.
            unsafe { rig.dc.post_to(&d, &wr) }.unwrap();
            let want = expect_wqe(pi, opcode::RDMA_WRITE, 0, &header(&wr), 0, Some(&data));
            assert_eq!(
                read_wrapped(&rig.mem.sq_bytes(), pi, want.len()),
                want,
                "len={len} start={start}"
            );
        }
    }
}

#[test]
fn the_largest_dc_wqe_counts_the_datagram_segment() {
    // 11 entries: ctrl + datagram + raddr (5) + 11 = 16 segments, four blocks: fits four
    // blocks, and one entry more does not (an RC queue would take it: 2 + 12 = 14).
    let mem = Mem::new(4, 8, 32, 0, 8);
    let qp = mem.qp_layout(QPN, 8, 0);
    let slots: std::boxed::Box<[crate::SqSlot]> = (0..4).map(|_| crate::SqSlot::new()).collect();
    let state = crate::SqState::new(slots).unwrap();
    // SAFETY: never posted to.
    assert!(unsafe { SendQueue::new_dc(&qp, caps(11, 0), &state, None) }.is_ok());
    // SAFETY: as above.
    let e = unsafe { SendQueue::new_dc(&qp, caps(12, 0), &state, None) }.unwrap_err();
    assert_eq!(e, crate::LayoutError::WqeTooLarge { blocks: 5 });
    // SAFETY: as above.
    assert!(unsafe { SendQueue::new(&qp, caps(12, 0), &state, None) }.is_ok());
    // A DCI carries RC operations: UD capabilities are refused.
    let ud = SqCaps {
        transport: Transport::Ud { mtu: 4096 },
        ..caps(2, 0)
    };
    // SAFETY: as above.
    let e = unsafe { SendQueue::new_dc(&qp, ud, &state, None) }.unwrap_err();
    assert_eq!(e, crate::LayoutError::Transport);
}

#[test]
fn refused_dc_requests_change_nothing() {
    let mut rig = DcRig::new(8, 256, caps(2, 32));
    let d = dest();
    let sgl = [Sge::new(0x1000, 8, 1)];
    let r = RemoteBuf::new(0x2000, 2);
    // Fill the ring but one block: three DC WRITEs of one entry (two blocks each) and a NOP.
    for i in 0..3 {
        // SAFETY: never executed by a device.
        unsafe { rig.dc.stage_to(&d, &SendWr::write(i, &sgl, r)) }.unwrap();
    }
    // SAFETY: as above.
    unsafe { rig.dc.stage_to(&d, &SendWr::nop(3)) }.unwrap();
    let ring = rig.mem.sq_bytes();
    let (pi, pending, db) = (rig.dc.producer(), rig.dc.pending(), rig.mem.dbrec(1));
    let three = [sgl[0]; 3];
    let inline = [Sge::new(0x1000, 33, 1)];
    let ud = zverbs_core::UdDest::new([0; 48], 0, 1, 1);
    let unaligned = RemoteBuf::new(0x2004, 2);
    let local = Sge::new(0x3000, 8, 1);
    let cases = [
        (SendWr::send_to(1, &sgl, &ud), PostError::WrongTransport),
        (
            SendWr::send_to_imm(1, &sgl, &ud, 1),
            PostError::WrongTransport,
        ),
        (
            SendWr::write(1, &three, r),
            PostError::TooManySges { got: 3, max: 2 },
        ),
        (
            SendWr::send(1, &inline).inline(),
            PostError::InlineTooLarge { len: 33, max: 32 },
        ),
        (
            SendWr::fetch_add(1, local, unaligned, 1),
            SendWr::fetch_add(1, local, unaligned, 1)
                .check(&caps(2, 32))
                .unwrap_err(),
        ),
        (
            SendWr::send(1, &sgl),
            PostError::QueueFull { needed: 2, free: 1 },
        ),
    ];
    for (wr, err) in cases {
        // SAFETY: refused before anything is read or written.
        assert_eq!(unsafe { rig.dc.post_to(&d, &wr) }, Err(err), "{wr:?}");
        // SAFETY: as above.
        assert_eq!(unsafe { rig.dc.stage_to(&d, &wr) }, Err(err), "{wr:?}");
        assert_eq!(rig.mem.sq_bytes(), ring, "{wr:?}");
        assert_eq!(
            (rig.dc.producer(), rig.dc.pending(), rig.mem.dbrec(1)),
            (pi, pending, db),
            "{wr:?}"
        );
    }
    // A NOP still fits (one block); ringing publishes all five.
    // SAFETY: never executed by a device.
    unsafe { rig.dc.post_to(&d, &SendWr::nop(9)) }.unwrap();
    assert_eq!((rig.dc.producer(), rig.dc.pending()), (8, 0));
    assert_eq!(rig.mem.dbrec(1), 8);
}

#[test]
fn the_largest_dc_wqe_may_have_exactly_the_most_segments_a_wqe_has() {
    // 58 entries: ctrl + datagram + 58 = 63 segments (MAX_DS), 16 blocks: taken by a ring
    // of 16 blocks; 59 would be 64 segments, more than a WQE's count field holds, though the
    // ring has room for the 16 blocks.
    let mem = Mem::new(16, 8, 32, 0, 8);
    let qp = mem.qp_layout(QPN, 8, 0);
    let slots: std::boxed::Box<[crate::SqSlot]> = (0..16).map(|_| crate::SqSlot::new()).collect();
    let state = crate::SqState::new(slots).unwrap();
    assert_eq!(2 + DC_AV_DS as usize + 58, crate::prm::MAX_DS);
    // SAFETY: never posted to.
    assert!(unsafe { SendQueue::new_dc(&qp, caps(58, 0), &state, None) }.is_ok());
    // SAFETY: as above.
    let e = unsafe { SendQueue::new_dc(&qp, caps(59, 0), &state, None) }.unwrap_err();
    assert_eq!(e, crate::LayoutError::WqeTooLarge { blocks: 16 });
}

#[test]
fn a_dc_queue_reports_its_qpn_and_free_blocks() {
    let mut rig = DcRig::new(8, 256, caps(2, 0));
    assert_eq!(rig.dc.qpn(), QPN);
    assert_eq!(rig.dc.free_blocks(), 8);
    let sgl = [Sge::new(0x1000, 8, 1)];
    // SAFETY: never executed by a device.
    unsafe {
        rig.dc
            .stage_to(&dest(), &SendWr::write(1, &sgl, RemoteBuf::new(0x2000, 2)))
    }
    .unwrap();
    assert_eq!(
        rig.dc.free_blocks(),
        6,
        "a DC WRITE of one entry is two blocks"
    );
}

#[test]
fn zero_length_entries_of_a_dc_request_are_skipped() {
    let mut rig = DcRig::new(8, 0, caps(4, 0));
    let sgl = [
        Sge::new(0x10, 0, 1),
        Sge::new(0x20, 5, 2),
        Sge::new(0x30, 0, 3),
        Sge::new(0x40, 7, 4),
    ];
    // SAFETY: never executed by a device.
    unsafe { rig.dc.stage_to(&dest(), &SendWr::send(1, &sgl)) }.unwrap();
    let ring = rig.mem.sq_bytes();
    // ctrl + datagram (3) + the two entries with bytes.
    assert_eq!(crate::prm::wqe::CtrlSeg::new_unchecked(&ring[..16]).ds(), 6);
    for (at, want) in [(64, (5, 2, 0x20)), (80, (7, 4, 0x40))] {
        let d = crate::prm::wqe::DataSeg::new_unchecked(&ring[at..at + 16]);
        assert_eq!(
            (d.byte_count(), d.lkey(), d.addr()),
            want,
            "segment at {at}"
        );
    }
    assert_eq!(rig.dc.producer(), 2);
}

#[test]
fn a_dc_post_goes_by_blueflame_and_completes_with_its_wr_id() {
    let mut c = caps(1, 0);
    c.max_signaled = 2;
    let mut rig = DcRig::new(8, 256, c);
    let d = dest();
    let sgl = [Sge::new(0x1000, 8, 1)];
    let r = RemoteBuf::new(0x2000, 2);
    // SAFETY: never executed by a device.
    unsafe { rig.dc.post_to(&d, &SendWr::write(77, &sgl, r).signaled()) }.unwrap();
    // The WQE (two blocks) fits the BlueFlame buffer: copied to the register, as posted.
    let (ring, bf) = (rig.mem.sq_bytes(), rig.mem.bf_bytes());
    assert_eq!(&bf[..128], &ring[..128]);
    // An unsignaled request, then a signaled one: the CQE of the second retires both.
    // SAFETY: as above.
    unsafe { rig.dc.post_to(&d, &SendWr::write(78, &sgl, r)) }.unwrap();
    // SAFETY: as above.
    unsafe { rig.dc.post_to(&d, &SendWr::nop(79).signaled()) }.unwrap();
    rig.mem
        .put_cqe(0, req_cqe(QPN, opcode::RDMA_WRITE, 0, 0, 0));
    rig.mem.put_cqe(1, req_cqe(QPN, opcode::NOP, 4, 0, 0));
    let mut wc = [Completion::EMPTY; 4];
    assert_eq!(rig.cq.poll(&mut wc), 2);
    assert_eq!((wc[0].wr_id, wc[1].wr_id), (77, 79));
    assert!(wc[..2].iter().all(Completion::is_success));
    assert_eq!(rig.dc.free_blocks(), 8);
    // Two CQEs back, as two were signaled: the CQ share (2) is whole again, and no more.
    for i in 0..2 {
        // SAFETY: as above.
        unsafe { rig.dc.post_to(&d, &SendWr::nop(80 + i).signaled()) }.unwrap();
    }
    // SAFETY: as above.
    let e = unsafe { rig.dc.post_to(&d, &SendWr::nop(82).signaled()) };
    assert_eq!(e, Err(PostError::CqFull { limit: 2 }));
}

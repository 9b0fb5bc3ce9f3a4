//! The send queue's raw Ethernet WQEs: libmlx5's worked examples byte for byte (the research
//! brief's section 1.5, cases A, B and C), a model of the WQE for gathered frames at every
//! wrap position, prepared frames, and refused requests that leave the ring, the doorbell and
//! the counters untouched.

extern crate std;

use std::boxed::Box;
use std::sync::Arc;
use std::vec;
use std::vec::Vec;

use super::frame::{advance, read_wrapped};
use super::*;
use crate::prm::cs_flags;
use crate::prm::wqe::{EthSeg, eth_seg_head};
use crate::testutil::{Mem, QPN, Rig, caps};
use zverbs_core::{RemoteBuf, Transport};

/// The brief's 64-byte multicast UDP frame: checksums left 0 for the device.
fn market_frame() -> [u8; 64] {
    let mut f = [0u8; 64];
    f[..42].copy_from_slice(&[
        0x01, 0x00, 0x5e, 0x01, 0x02, 0x03, 0x0c, 0x42, 0xa1, 0x11, 0x22, 0x33, 0x08,
        0x00, // eth
        0x45, 0x00, 0x00, 0x32, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00, 0x00,
        0x01, 0xef, 0x01, 0x02, 0x03, // ipv4
        0x75, 0x30, 0x79, 0x18, 0x00, 0x1e, 0x00, 0x00, // udp
    ]);
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

/// An Ethernet queue's capabilities: `max_send_sge` entries, `max_inline_data` inline bytes,
/// frames up to 1514 bytes.
fn eth_caps(max_send_sge: u32, max_inline_data: u32) -> SqCaps {
    SqCaps {
        transport: Transport::Ethernet {
            max_frame: 1514,
            ip_csum: true,
        },
        ..caps(max_send_sge, max_inline_data)
    }
}

/// A queue of `blocks` blocks for QP `qpn` over `mem`, inlining `min_inline` frame bytes.
fn queue(
    mem: &Mem,
    qpn: u32,
    blocks: u32,
    min_inline: u16,
    caps: SqCaps,
) -> SendQueue<Arc<SqState<Box<[SqSlot]>>>, Ethernet> {
    let slots: Box<[SqSlot]> = (0..blocks).map(|_| SqSlot::new()).collect();
    let state = Arc::new(SqState::new(slots).unwrap());
    // SAFETY: `mem` outlives the queue in every test (declared before it); nothing else
    // drives the ring.
    let q =
        unsafe { SendQueue::new_eth(&mem.qp_layout(qpn, 8, 256), caps, min_inline, state, None) }
            .unwrap();
    assert_eq!(
        q.min_inline(),
        min_inline,
        "the queue reports what it inlines"
    );
    q
}

use crate::{SqSlot, SqState};

/// Worked example A of the brief: one entry, `SIGNALED | IP_CSUM`, 18 bytes inlined, QPN
/// 0x123, producer counter 5: one basic block. The data segment's address is the frame's
/// own plus 18 (the brief's 0x7f00_0000_1000 + 18 there).
#[test]
fn case_a_one_entry_checksum_offload_as_libmlx5_writes_it() {
    let mem = Mem::new(16, 8, 32, 256, 64);
    let mut q = queue(&mem, 0x123, 16, 18, eth_caps(2, 64));
    for i in 0..5 {
        // SAFETY: never executed by a device.
        unsafe { q.stage(&SendWr::nop(i)) }.unwrap();
    }
    let frame = market_frame();
    let sgl = [Sge::new(frame.as_ptr() as u64, 64, 0x1234)];
    let wr = SendWr::send(9, &sgl).with_flags(SendFlags::SIGNALED | SendFlags::IP_CSUM);
    // SAFETY: never executed by a device; the frame is live for the post.
    unsafe { q.post(&wr) }.unwrap();
    let addr = (frame.as_ptr() as u64 + 18).to_be_bytes();
    #[rustfmt::skip]
    let want: [u8; 64] = [
        0x00, 0x00, 0x05, 0x0a, 0x00, 0x01, 0x23, 0x04, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x01, 0x00,
        0x5e, 0x01, 0x02, 0x03, 0x0c, 0x42, 0xa1, 0x11, 0x22, 0x33, 0x08, 0x00, 0x45, 0x00, 0x00, 0x32,
        0x00, 0x00, 0x00, 0x2e, 0x00, 0x00, 0x12, 0x34, addr[0], addr[1], addr[2], addr[3], addr[4],
        addr[5], addr[6], addr[7],
    ];
    let ring = mem.sq_bytes();
    assert_eq!(ring[5 * 64..6 * 64], want);
    // Rung alone, with BlueFlame: the block in the register, the record at 6.
    assert_eq!(mem.dbrec(1), 6);
    let eth = EthSeg::new_unchecked(&ring[5 * 64 + 16..5 * 64 + 32]);
    assert_eq!(
        (eth.cs_flags(), eth.mss(), eth.inline_hdr_sz()),
        (0xc0, 0, 18)
    );
    assert_eq!(eth.inline_hdr_start(), [0x01, 0x00]);
}

/// Worked example B: the same frame with `IBV_SEND_INLINE` (and no checksum flag): the rest
/// of the frame, 46 bytes, in one inline segment; 7 units, two basic blocks.
#[test]
fn case_b_inline_frame_as_libmlx5_writes_it() {
    let mem = Mem::new(16, 8, 32, 256, 64);
    let mut q = queue(&mem, 0x123, 16, 18, eth_caps(2, 128));
    for i in 0..5 {
        // SAFETY: never executed by a device.
        unsafe { q.stage(&SendWr::nop(i)) }.unwrap();
    }
    let frame = market_frame();
    let sgl = [Sge::from_slice(&frame, 0)];
    // SAFETY: as above.
    unsafe { q.post(&SendWr::send(9, &sgl).inline().signaled()) }.unwrap();
    let mut want = Vec::new();
    want.extend_from_slice(&[
        0x00, 0x00, 0x05, 0x0a, 0x00, 0x01, 0x23, 0x07, 0, 0, 0, 0x08, 0, 0, 0, 0,
    ]);
    want.extend_from_slice(&eth_seg_head(0, 18, [0x01, 0x00]));
    want.extend_from_slice(&frame[2..18]);
    want.extend_from_slice(&[0x80, 0x00, 0x00, 0x2e]);
    want.extend_from_slice(&frame[18..]);
    want.resize(112, 0);
    assert_eq!(mem.sq_bytes()[5 * 64..5 * 64 + 112], want[..]);
    assert_eq!(mem.dbrec(1), 7);
}

/// Worked example C: a device that asks for no inline header: the Ethernet segment is one
/// unit with `inline_hdr_sz` 0, the data segment the whole 64 bytes at bytes 32..48; 3 units.
#[test]
fn case_c_no_inline_header_as_libmlx5_writes_it() {
    let mem = Mem::new(16, 8, 32, 256, 64);
    let mut q = queue(&mem, 0x123, 16, 0, eth_caps(2, 64));
    let frame = market_frame();
    let sgl = [Sge::new(0x7f00_0000_1000, 64, 0x1234)];
    let wr = SendWr::send(9, &sgl).with_flags(SendFlags::SIGNALED | SendFlags::IP_CSUM);
    // SAFETY: never executed; with no inline header the post reads nothing of the frame.
    unsafe { q.post(&wr) }.unwrap();
    let _ = frame;
    #[rustfmt::skip]
    let want: [u8; 48] = [
        0x00, 0x00, 0x00, 0x0a, 0x00, 0x01, 0x23, 0x03, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x40, 0x00, 0x00, 0x12, 0x34, 0x00, 0x00, 0x7f, 0x00, 0x00, 0x00, 0x10, 0x00,
    ];
    assert_eq!(mem.sq_bytes()[..48], want);
}

/// The rest of a frame after its inlined first bytes, as a model: by reference (each entry
/// with bytes left, resumed after the inlined ones) or inline (the bytes).
enum Rest {
    Data(Vec<Sge>),
    Inline(Vec<u8>),
}

/// The WQE an Ethernet queue must write at block `pi` for a frame whose first bytes `head`
/// are inlined and whose `rest` follows, with `fm` and `cs` (QP [`QPN`]).
fn expect_eth(pi: u32, fm: u8, cs: u8, head: &[u8], rest: &Rest) -> Vec<u8> {
    let eth_units = crate::prm::wqe::eth_ds(head.len());
    let rest_units = match rest {
        Rest::Data(d) => d.len(),
        Rest::Inline(b) => inline_ds(b.len()),
    };
    let ds = 1 + eth_units + rest_units;
    let mut v = vec![0u8; 16];
    CtrlSeg::new_unchecked(&mut v[..]).set(pi as u16, opcode::SEND, 0, QPN, fm, ds as u8, 0);
    let start = [
        head.first().copied().unwrap_or(0),
        head.get(1).copied().unwrap_or(0),
    ];
    v.extend_from_slice(&eth_seg_head(cs, head.len() as u16, start));
    if head.len() > 2 {
        v.extend_from_slice(&head[2..]);
    }
    v.resize(16 + eth_units * 16, 0);
    match rest {
        Rest::Data(d) => {
            for s in d {
                let mut seg = [0u8; 16];
                DataSeg::new_unchecked(&mut seg).set(s.length, s.lkey, s.addr);
                v.extend_from_slice(&seg);
            }
        }
        Rest::Inline(b) if !b.is_empty() => {
            v.extend_from_slice(&inline_byte_count(b.len() as u32).to_be_bytes());
            v.extend_from_slice(b);
            v.resize(v.len().next_multiple_of(16), 0);
        }
        Rest::Inline(_) => {}
    }
    assert_eq!(v.len(), ds * 16);
    v
}

/// The frame `sgl` gathers from `bytes` (entry `i` at `bytes[at[i]..]`), split after `hdr`
/// bytes: the inlined bytes and the rest as [`expect_eth`] takes it.
fn split(sgl: &[Sge], hdr: usize, inline: bool) -> (Vec<u8>, Rest) {
    let mut all = Vec::new();
    let mut data = Vec::new();
    for s in sgl {
        // SAFETY: the tests' entries name live buffers of `length` bytes.
        let b = unsafe { core::slice::from_raw_parts(s.addr as *const u8, s.length as usize) };
        let before = all.len();
        all.extend_from_slice(b);
        // What of this entry lies after the inlined bytes.
        let from = hdr.saturating_sub(before).min(b.len());
        if from < b.len() {
            data.push(Sge::new(
                s.addr + from as u64,
                (b.len() - from) as u32,
                s.lkey,
            ));
        }
    }
    let rest = if inline {
        Rest::Inline(all[hdr..].to_vec())
    } else {
        Rest::Data(data)
    };
    (all[..hdr].to_vec(), rest)
}

/// Gather lists that exercise the gathering of the inlined bytes: the first entry longer,
/// exactly as long, shorter (ending inside the second, at its end), zero-length entries
/// before, between and after.
fn gather_lists(buf: &[u8]) -> Vec<Vec<Sge>> {
    let at = |from: usize, len: usize| Sge::new(buf[from..].as_ptr() as u64, len as u32, 0x77);
    vec![
        vec![at(0, 64)],
        // A frame of the inlined bytes alone: no data segment after them.
        vec![at(0, 18)],
        vec![at(0, 18), at(100, 30)],
        vec![at(0, 10), at(50, 20)],
        vec![at(0, 10), at(50, 8), at(200, 40)],
        vec![at(0, 0), at(0, 5), at(20, 0), at(30, 13), at(300, 0)],
        vec![at(0, 4), at(10, 4), at(20, 4), at(30, 40)],
    ]
}

/// Every gather list, by reference and inline, with and without checksum offload, each
/// minimum inline, at every position of a 4-block ring: the bytes of the model.
#[test]
fn gathered_frames_at_every_wrap_position_match_the_model() {
    let buf: Vec<u8> = (0..512).map(|i| (i * 7 + 3) as u8).collect();
    let lists = gather_lists(&buf);
    for min_inline in [0u16, 18] {
        for (n, sgl) in lists.iter().enumerate() {
            for inline in [false, true] {
                for pi in 0..4 {
                    // Under Miri a sample of the positions.
                    if cfg!(miri) && pi != 3 {
                        continue;
                    }
                    let mut rig = Rig::new_eth(4, 256, eth_caps(5, 80), min_inline);
                    rig.mem.fill_sq(0xee);
                    advance(&mut rig, pi);
                    let mut wr = SendWr::send(7, sgl).with_flags(SendFlags::IP_CSUM);
                    if inline {
                        wr = wr.inline();
                    }
                    // SAFETY: never executed; the entries name `buf`, live for the post.
                    unsafe { rig.sq.post(&wr) }.unwrap();
                    let (head, rest) = split(sgl, usize::from(min_inline), inline);
                    let want = expect_eth(pi, 0, cs_flags::IP_CSUM, &head, &rest);
                    let got = read_wrapped(&rig.mem.sq_bytes(), pi, want.len());
                    assert_eq!(
                        got, want,
                        "list {n}, inline {inline}, min {min_inline}, pi {pi}"
                    );
                }
            }
        }
    }
}

/// A batch and staged requests write what single posts write.
#[test]
fn batches_and_staged_frames_write_what_single_posts_write() {
    let buf: Vec<u8> = (0..512).map(|i| (i * 5 + 1) as u8).collect();
    let lists = gather_lists(&buf);
    let wrs: Vec<SendWr<'_>> = lists
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let wr = SendWr::send(i as u64, l).with_flags(SendFlags::IP_CSUM);
            if i % 2 == 1 {
                wr.inline().signaled()
            } else {
                wr
            }
        })
        .collect();
    let mut one = Rig::new_eth(32, 256, eth_caps(5, 80), 18);
    let mut batch = Rig::new_eth(32, 256, eth_caps(5, 80), 18);
    let mut staged = Rig::new_eth(32, 256, eth_caps(5, 80), 18);
    for wr in &wrs {
        // SAFETY: never executed; the entries name `buf`.
        unsafe { one.sq.post(wr) }.unwrap();
        // SAFETY: as above.
        unsafe { staged.sq.stage(wr) }.unwrap();
    }
    staged.sq.ring();
    // SAFETY: as above.
    unsafe { batch.sq.post_all(&wrs) }.unwrap();
    assert_eq!(batch.mem.sq_bytes(), one.mem.sq_bytes());
    assert_eq!(staged.mem.sq_bytes(), one.mem.sq_bytes());
    assert_eq!(batch.sq.producer(), one.sq.producer());
    assert_eq!(batch.mem.dbrec(1), one.mem.dbrec(1));
}

#[test]
fn bad_frames_write_nothing() {
    let buf = [0x5au8; 64];
    let mut rig = Rig::new_eth(8, 256, eth_caps(2, 64), 18);
    rig.mem.fill_sq(0xcd);
    let short = [Sge::from_slice(&buf[..17], 1)];
    let two_short = [Sge::from_slice(&buf[..9], 1), Sge::from_slice(&buf[..8], 1)];
    let too_short = [Sge::from_slice(&buf[..13], 1)];
    let ok = [Sge::from_slice(&buf, 1)];
    let r = RemoteBuf::new(0x1000, 1);
    let dest = UdDest::new([0; 48], 0, 7, 0x11);
    let cases: [(SendWr<'_>, PostError); 7] = [
        // Longer than an Ethernet header, shorter than the queue's minimum inline.
        (
            SendWr::send(1, &short),
            PostError::FrameTooShort { len: 17, min: 18 },
        ),
        (
            SendWr::send(1, &two_short),
            PostError::FrameTooShort { len: 17, min: 18 },
        ),
        (
            SendWr::send(1, &short).inline(),
            PostError::FrameTooShort { len: 17, min: 18 },
        ),
        (
            SendWr::send(1, &too_short),
            PostError::FrameTooShort { len: 13, min: 14 },
        ),
        (SendWr::write(1, &ok, r), PostError::WrongTransport),
        (SendWr::send_imm(1, &ok, 3), PostError::WrongTransport),
        (SendWr::send_to(1, &ok, &dest), PostError::WrongTransport),
    ];
    for (wr, err) in cases {
        // SAFETY: refused before anything is read or written.
        assert_eq!(unsafe { rig.sq.post(&wr) }, Err(err), "{wr:?}");
        // SAFETY: as above.
        assert_eq!(unsafe { rig.sq.stage(&wr) }, Err(err), "{wr:?}");
    }
    assert!(rig.mem.sq_bytes().iter().all(|&b| b == 0xcd));
    // A batch refused at its second request: the first's WQE is scratch past the producer
    // counter, nothing the device may read moved.
    for (wr, err) in cases {
        // SAFETY: as above; the first request names `buf`, live for the post.
        let e = unsafe { rig.sq.post_all(&[SendWr::send(0, &ok), wr]) }.unwrap_err();
        assert_eq!((e.index, e.error), (1, err), "{wr:?}");
    }
    assert_eq!(
        (rig.sq.producer(), rig.mem.dbrec(1), rig.sq.pending()),
        (0, 0, 0)
    );
    assert!(rig.mem.bf_bytes().iter().all(|&b| b == 0));
    // What a connected queue refuses of a frame: checksum offload.
    let mut rc = Rig::new(8, 256, caps(2, 64));
    let wr = SendWr::send(1, &ok).with_flags(SendFlags::IP_CSUM);
    // SAFETY: refused.
    let e = unsafe { rc.sq.post(&wr) };
    assert_eq!(e, Err(PostError::ChecksumNotAvailable));
}

/// On a queue whose device computes no checksums (no `IBV_DEVICE_RAW_IP_CSUM`), a frame or a
/// prepared frame asking for them is refused before anything is written, as libmlx5 refuses
/// `IBV_SEND_IP_CSUM` there; the same frames without the flag go out.
#[test]
fn checksum_offload_is_refused_where_the_device_has_none() {
    let buf = [0x5au8; 64];
    let no_csum = SqCaps {
        transport: Transport::Ethernet {
            max_frame: 1514,
            ip_csum: false,
        },
        ..eth_caps(2, 64)
    };
    let mut rig = Rig::new_eth(8, 256, no_csum, 18);
    rig.mem.fill_sq(0xcd);
    let ok = [Sge::from_slice(&buf, 1)];
    let two = [
        Sge::from_slice(&buf[..30], 1),
        Sge::from_slice(&buf[30..], 1),
    ];
    let csum = SendFlags::IP_CSUM;
    let cases = [
        SendWr::send(1, &ok).with_flags(csum),
        SendWr::send(1, &two).with_flags(csum | SendFlags::SIGNALED),
        SendWr::send(1, &ok).with_flags(csum).inline(),
        SendWr::nop(1).with_flags(csum),
    ];
    for wr in cases {
        // SAFETY: refused before anything is read or written.
        let posted = unsafe { rig.sq.post(&wr) };
        assert_eq!(posted, Err(PostError::ChecksumNotAvailable), "{wr:?}");
        // SAFETY: as above.
        let staged = unsafe { rig.sq.stage(&wr) };
        assert_eq!(staged, Err(PostError::ChecksumNotAvailable), "{wr:?}");
    }
    assert_eq!(
        rig.sq
            .prepare_frame(&market_frame()[..42], csum, FrameLengths::IPV4_UDP),
        Err(PostError::ChecksumNotAvailable)
    );
    assert!(rig.mem.sq_bytes().iter().all(|&b| b == 0xcd));
    // A batch refused at its second request: the first's WQE is scratch past the producer
    // counter, nothing the device may read moved.
    for wr in cases {
        // SAFETY: as above; the first request names `buf`, live for the post.
        let e = unsafe { rig.sq.post_all(&[SendWr::send(0, &ok), wr]) }.unwrap_err();
        assert_eq!((e.index, e.error), (1, PostError::ChecksumNotAvailable));
    }
    assert_eq!(
        (rig.sq.producer(), rig.mem.dbrec(1), rig.sq.pending()),
        (0, 0, 0)
    );
    assert!(rig.mem.bf_bytes().iter().all(|&b| b == 0));
    // Without the flag the queue sends, and prepares.
    // SAFETY: `buf` is live for the post; the ring is not executed.
    unsafe { rig.sq.post(&SendWr::send(1, &ok)) }.unwrap();
    assert_eq!(rig.sq.producer(), 1);
    assert!(p2(&rig).headers_len() == 42);
}

#[test]
fn constructors_check_the_transport_and_the_minimum_inline() {
    let mem = Mem::new(8, 8, 32, 256, 64);
    let layout = mem.qp_layout(QPN, 8, 256);
    let state = || {
        let slots: Box<[SqSlot]> = (0..8).map(|_| SqSlot::new()).collect();
        Arc::new(SqState::new(slots).unwrap())
    };
    for bytes in [1u16, 14, 17, 19, 42] {
        // SAFETY: a refused layout is not written to.
        let e = unsafe { SendQueue::new_eth(&layout, eth_caps(2, 64), bytes, state(), None) };
        assert_eq!(e.unwrap_err(), LayoutError::MinInline { bytes });
    }
    // SAFETY: as above.
    let e = unsafe { SendQueue::new_eth(&layout, caps(2, 64), 18, state(), None) };
    assert_eq!(e.unwrap_err(), LayoutError::Transport);
    // SAFETY: as above.
    let e = unsafe { SendQueue::new(&layout, eth_caps(2, 64), state(), None) };
    assert_eq!(e.unwrap_err(), LayoutError::Transport);
    // The largest WQE counts the Ethernet segment: 1 + 2 + 13 units fit 4 blocks of 16, 14
    // entries do not.
    let small = Mem::new(4, 8, 32, 256, 64);
    let l4 = small.qp_layout(QPN, 8, 256);
    let slots4 = || {
        let slots: Box<[SqSlot]> = (0..4).map(|_| SqSlot::new()).collect();
        Arc::new(SqState::new(slots).unwrap())
    };
    // SAFETY: as above (and the queue that is built is dropped before `small`).
    let fits = unsafe { SendQueue::new_eth(&l4, eth_caps(13, 16), 18, slots4(), None) };
    assert!(fits.is_ok());
    // SAFETY: as above.
    let big = unsafe { SendQueue::new_eth(&l4, eth_caps(62, 16), 18, slots4(), None) };
    assert!(matches!(big.unwrap_err(), LayoutError::WqeTooLarge { .. }));
}

/// A prepared frame's posts write what the model writes for the headers inlined whole and
/// the payload by reference, with the length fields set; at every wrap position.
#[test]
fn prepared_frames_write_the_model_with_their_lengths() {
    let frame = market_frame();
    let headers = &frame[..42];
    let payload = [0x11u8; 300];
    for min_inline in [0u16, 18] {
        for pi in 0..8 {
            if cfg!(miri) && pi != 7 {
                continue;
            }
            let mut rig = Rig::new_eth(8, 256, eth_caps(2, 64), min_inline);
            advance(&mut rig, pi);
            let p = rig
                .sq
                .prepare_frame(
                    headers,
                    SendFlags::IP_CSUM | SendFlags::SIGNALED,
                    FrameLengths::IPV4_UDP,
                )
                .unwrap();
            assert_eq!(p.headers_len(), 42);
            for (i, len) in [22u32, 0, 300, 1].into_iter().enumerate() {
                let at = rig.sq.producer();
                let sge = Sge::new(payload.as_ptr() as u64, len, 0x99);
                // SAFETY: never executed.
                unsafe { rig.sq.post_frame(&p, i as u64, sge) }.unwrap();
                let mut head = headers.to_vec();
                let total = 42 + len as u16;
                head[16..18].copy_from_slice(&(total - 14).to_be_bytes());
                head[38..40].copy_from_slice(&(total - 34).to_be_bytes());
                let rest = Rest::Data(if len == 0 { vec![] } else { vec![sge] });
                let want = expect_eth(at, fm_ce_se::CQ_UPDATE, cs_flags::IP_CSUM, &head, &rest);
                let got = read_wrapped(&rig.mem.sq_bytes(), at, want.len());
                assert_eq!(got, want, "min {min_inline}, pi {pi}, len {len}");
                assert_eq!(rig.mem.dbrec(1), rig.sq.producer());
                // Completed, so that the ring has room for the next.
                let n = rig.sq.outstanding_signaled();
                assert_eq!(n, 1);
                let ci = rig.cq.consumer();
                let owner = ((ci / rig.cq.cqe_cnt()) & 1) as u8;
                let slot = (ci % rig.cq.cqe_cnt()) as usize;
                rig.mem.put_cqe(
                    slot,
                    crate::testutil::req_cqe(QPN, opcode::SEND, at as u16, 0, owner),
                );
                let mut wc = [zverbs_core::Completion::EMPTY; 1];
                assert_eq!(zverbs_core::PollCq::poll(&mut rig.cq, &mut wc), 1);
                assert_eq!(wc[0].wr_id, i as u64);
            }
        }
    }
}

/// The market frame's headers prepared on `rig`'s queue, both lengths set.
fn p2(rig: &Rig<Ethernet>) -> PreparedFrame {
    rig.sq
        .prepare_frame(
            &market_frame()[..42],
            SendFlags::NONE,
            FrameLengths::IPV4_UDP,
        )
        .unwrap()
}

#[test]
fn prepared_frames_refuse_bad_headers_and_frames() {
    let frame = market_frame();
    let mut rig = Rig::new_eth(8, 256, eth_caps(2, 64), 18);
    let sq = &rig.sq;
    let none = FrameLengths::default();
    assert_eq!(
        sq.prepare_frame(&frame[..13], SendFlags::NONE, none),
        Err(PostError::FrameTooShort { len: 13, min: 14 })
    );
    assert_eq!(
        sq.prepare_frame(&frame[..16], SendFlags::NONE, none),
        Err(PostError::FrameTooShort { len: 16, min: 18 })
    );
    assert_eq!(
        sq.prepare_frame(&frame[..42], SendFlags::INLINE, none),
        Err(PostError::InlineNotAllowed)
    );
    // Headers of exactly the minimum inline are enough.
    assert!(
        sq.prepare_frame(&frame[..18], SendFlags::NONE, none)
            .is_ok()
    );
    // Outside the headers (its last byte or both past them), before its header's start, at
    // an odd offset.
    for (ip, udp, at) in [
        (Some(41), None, 41),
        (Some(42), None, 42),
        (None, Some(42), 42),
        (Some(1), None, 1),
        (None, Some(2), 2),
        (Some(17), None, 17),
    ] {
        let lengths = FrameLengths {
            ipv4_total_at: ip,
            udp_len_at: udp,
        };
        assert_eq!(
            sq.prepare_frame(&frame[..42], SendFlags::NONE, lengths),
            Err(PostError::FrameLengthField { at, headers: 42 })
        );
    }
    // More header than the queue's WQE holds: it was sized for 1 + 2 + 5 units (the
    // inline limit's), so the Ethernet segment may take 6 with a data segment: 82 header
    // bytes (a prepared frame takes up to 82: two basic blocks).
    let long = [0u8; 120];
    assert_eq!(
        sq.prepare_frame(&long[..83], SendFlags::NONE, none),
        Err(PostError::InlineTooLarge { len: 83, max: 82 })
    );
    assert!(sq.prepare_frame(&long[..82], SendFlags::NONE, none).is_ok());
    // A queue sized for one entry and no inline data: control, the Ethernet segment of the 18
    // bytes it inlines, one data segment; a prepared frame's headers fit what it was sized
    // for, not the most a prepared frame holds.
    let small = Rig::new_eth(8, 256, eth_caps(1, 0), 18);
    assert_eq!(
        small.sq.prepare_frame(&long[..19], SendFlags::NONE, none),
        Err(PostError::InlineTooLarge { len: 19, max: 18 })
    );
    assert!(
        small
            .sq
            .prepare_frame(&long[..18], SendFlags::NONE, none)
            .is_ok()
    );
    let p = sq
        .prepare_frame(&frame[..42], SendFlags::NONE, FrameLengths::IPV4_UDP)
        .unwrap();
    rig.mem.fill_sq(0xcd);
    // SAFETY: refused.
    let e = unsafe { rig.sq.post_frame(&p, 1, Sge::new(0x1000, 1514 - 41, 1)) };
    assert_eq!(
        e,
        Err(PostError::FrameTooLong {
            len: 1515,
            max: 1514
        })
    );
    // Another queue's frame.
    let other = Rig::new_eth(8, 256, eth_caps(2, 64), 18);
    let mem = Mem::new(8, 8, 32, 256, 64);
    let mut q2 = queue(&mem, QPN + 1, 8, 18, eth_caps(2, 64));
    // SAFETY: refused.
    let e = unsafe { q2.post_frame(&p, 1, Sge::new(0x1000, 10, 1)) };
    assert_eq!(e, Err(PostError::Unsupported));
    // Another queue's, with the longest payload: still another queue's.
    // SAFETY: refused.
    let e = unsafe { q2.post_frame(&p, 1, Sge::new(0x1000, 1514 - 42, 1)) };
    assert_eq!(e, Err(PostError::Unsupported));
    drop(other);
    assert!(rig.mem.sq_bytes().iter().all(|&b| b == 0xcd));
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (0, 0));
    // The longest frame is staged (the exact check).
    let mut longest = Rig::new_eth(8, 256, eth_caps(2, 64), 18);
    // SAFETY: never executed.
    unsafe {
        longest
            .sq
            .stage_frame(&p2(&longest), 1, Sge::new(0x1000, 1514 - 42, 1))
    }
    .unwrap();
    assert_eq!(longest.sq.pending(), 1);
    // A staged frame waits for the ring.
    // SAFETY: never executed.
    unsafe { rig.sq.stage_frame(&p, 2, Sge::new(0x1000, 22, 1)) }.unwrap();
    assert_eq!((rig.sq.pending(), rig.mem.dbrec(1)), (1, 0));
    rig.sq.ring();
    assert_eq!(rig.mem.dbrec(1), 2);
}

/// An Ethernet queue's requests complete, fail and flush as an RC queue's: an error CQE for
/// the first frame, the flush of the next, then the drain marker (a NOP at the producer
/// counter) flushed too, every credit back.
#[test]
fn frames_fail_flush_and_drain_as_every_queue_does() {
    use crate::testutil::err_cqe;
    use crate::{DRAIN_WR_ID, post_drain_marker};
    use zverbs_core::{Completion, PollCq, WcStatus};

    let frame = market_frame();
    let sgl = [Sge::from_slice(&frame, 1)];
    let mut rig = Rig::new_eth(8, 64, eth_caps(2, 64), 18);
    // SAFETY: never executed by a device; the frame is live for the posts.
    unsafe {
        rig.sq.post(&SendWr::send(1, &sgl)).unwrap();
        rig.sq.post(&SendWr::send(2, &sgl).signaled()).unwrap();
    }
    assert_eq!(rig.mem.dbrec(1), 2);
    // The device fails the first frame (local protection) and flushes the second.
    rig.mem.put_cqe(0, err_cqe(QPN, 13, 0, 0x04, 0, 0));
    rig.mem.put_cqe(1, err_cqe(QPN, 13, 1, 0x05, 0, 0));
    let mut wc = [Completion::EMPTY; 4];
    assert_eq!(rig.cq.poll(&mut wc), 2);
    assert_eq!(
        [(wc[0].wr_id, wc[0].status), (wc[1].wr_id, wc[1].status)],
        [(1, WcStatus::LocProtErr), (2, WcStatus::WrFlushErr)]
    );
    // The drain marker: a NOP at block 2, flushed, retiring the queue.
    let layout = rig.mem.qp_layout(QPN, 8, 64);
    let sq = rig.bindings[0].sq.clone().unwrap();
    // SAFETY: the rig's live layout and state; nothing posts meanwhile.
    assert!(unsafe { post_drain_marker(&layout, &sq, None) }.unwrap());
    rig.mem.put_cqe(2, err_cqe(QPN, 13, 2, 0x05, 0, 0));
    assert_eq!(rig.cq.poll(&mut wc), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].status),
        (DRAIN_WR_ID, WcStatus::WrFlushErr)
    );
    assert_eq!(u32::from(sq.retired16()), rig.mem.dbrec(1), "drained");
}

/// What a queue shows after a post: the result, the ring, the BlueFlame buffers, the doorbell
/// record and the producer counter.
type Seen = (Result<(), PostError>, Vec<u8>, Vec<u8>, u32, u32);

fn seen(rig: &Rig<Ethernet>, r: Result<(), PostError>) -> Seen {
    (
        r,
        rig.mem.sq_bytes(),
        rig.mem.bf_bytes(),
        rig.mem.dbrec(1),
        rig.sq.producer(),
    )
}

/// The request flags a frame may carry, from bits: checksum offload, signaled, solicited,
/// fenced, inline.
fn frame_flags(bits: u8) -> SendFlags {
    [
        SendFlags::IP_CSUM,
        SendFlags::SIGNALED,
        SendFlags::SOLICITED,
        SendFlags::FENCE,
        SendFlags::INLINE,
    ]
    .into_iter()
    .enumerate()
    .filter(|(i, _)| bits & (1 << i) != 0)
    .fold(SendFlags::NONE, |a, (_, f)| a.union(f))
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig {
        cases: if cfg!(miri) { 4 } else { 96 },
        // Under Miri's isolation there is no file system for the regressions file.
        failure_persistence: if cfg!(miri) {
            None
        } else {
            proptest::prelude::ProptestConfig::default().failure_persistence
        },
        ..proptest::prelude::ProptestConfig::default()
    })]

    /// A frame of one entry posted and rung at once (`post`, whose common frame has a path of
    /// its own) writes the ring, the BlueFlame buffer and the doorbell record as the general
    /// path does (`stage`, then `ring`), and is refused as it refuses: any length around the
    /// limits, any flags, either minimum inline, with and without entries, BlueFlame or not,
    /// at every wrap position.
    #[test]
    fn one_entry_frames_post_what_the_general_path_writes(
        len in proptest::prop_oneof![0u32..40, 1490u32..1530, 0u32..1600],
        bits in 0u8..32,
        min_inline in proptest::sample::select(vec![0u16, 18]),
        max_send_sge in 0u32..3,
        sig_all in proptest::bool::ANY,
        bf_size in proptest::sample::select(vec![0u32, 64, 256]),
        pi in 0u32..8,
    ) {
        let frame: Vec<u8> = (0..1600).map(|i| (i * 7 + 3) as u8).collect();
        let caps = SqCaps { sig_all, ..eth_caps(max_send_sge, 256) };
        let mut one = Rig::new_eth(8, bf_size, caps, min_inline);
        let mut general = Rig::new_eth(8, bf_size, caps, min_inline);
        advance(&mut one, pi);
        advance(&mut general, pi);
        let sgl = [Sge::new(frame.as_ptr() as u64, len, 0x77)];
        let wr = SendWr::send(5, &sgl).with_flags(frame_flags(bits));
        for _ in 0..2 {
            // SAFETY: never executed; the entry names `frame`.
            let r = unsafe { one.sq.post(&wr) };
            // SAFETY: as above.
            let g = unsafe { general.sq.stage(&wr) };
            general.sq.ring();
            proptest::prop_assert_eq!(seen(&one, r), seen(&general, g));
        }
    }

    /// A prepared frame's posts (whose common case has a path of its own: the key, the
    /// BlueFlame copy read back from the ring) write what staging the same frame and ringing
    /// writes (the general writer and the general doorbell): any headers of 14 to 82 bytes,
    /// any length fields, flags and payloads, either minimum inline, BlueFlame buffers of no,
    /// one and two blocks and more, at every wrap position.
    #[test]
    fn prepared_frame_posts_write_what_staging_them_writes(
        h in 14usize..=82,
        ip in proptest::option::of(0usize..82),
        udp in proptest::option::of(0usize..82),
        bits in 0u8..16,
        min_inline in proptest::sample::select(vec![0u16, 18]),
        bf_size in proptest::sample::select(vec![0u32, 64, 128, 256]),
        pi in 0u32..16,
        lens in proptest::collection::vec(
            proptest::prop_oneof![0u32..4, 0u32..1600],
            1..5,
        ),
    ) {
        let frame: Vec<u8> = (0..1600).map(|i| (i * 5 + 1) as u8).collect();
        let mut one = Rig::new_eth(16, bf_size, eth_caps(2, 64), min_inline);
        let mut staged = Rig::new_eth(16, bf_size, eth_caps(2, 64), min_inline);
        advance(&mut one, pi);
        advance(&mut staged, pi);
        let lengths = FrameLengths { ipv4_total_at: ip, udp_len_at: udp };
        let flags = frame_flags(bits);
        let p = one.sq.prepare_frame(&frame[..h], flags, lengths);
        proptest::prop_assert_eq!(p, staged.sq.prepare_frame(&frame[..h], flags, lengths));
        let Ok(p) = p else {
            return Ok(());
        };
        for (i, &len) in lens.iter().enumerate() {
            let sge = Sge::new(frame.as_ptr() as u64 + 100, len, 0x66);
            // SAFETY: never executed; the payload names `frame`.
            let r = unsafe { one.sq.post_frame(&p, i as u64, sge) };
            // SAFETY: as above.
            let s = unsafe { staged.sq.stage_frame(&p, i as u64, sge) };
            staged.sq.ring();
            proptest::prop_assert_eq!(seen(&one, r), seen(&staged, s), "post {}", i);
        }
    }
}

/// A queue pair reset and connected again restarts the producer counter at 0: the next frame,
/// posted by either fast path, carries WQE index 0, not the old counter.
#[test]
fn frames_after_a_reset_start_the_ring_again() {
    let frame = market_frame();
    for prepared in [false, true] {
        let mut rig = Rig::new_eth(8, 256, eth_caps(2, 64), 18);
        let p = rig
            .sq
            .prepare_frame(&frame[..42], SendFlags::SIGNALED, FrameLengths::IPV4_UDP)
            .unwrap();
        let sgl = [Sge::new(frame.as_ptr() as u64, 64, 1)];
        let post = |rig: &mut Rig<Ethernet>, id: u64| {
            // SAFETY: never executed; the entries name `frame`.
            unsafe {
                if prepared {
                    rig.sq
                        .post_frame(&p, id, Sge::new(frame.as_ptr() as u64 + 42, 22, 1))
                } else {
                    rig.sq.post(&SendWr::send(id, &sgl).signaled())
                }
            }
        };
        for i in 0..3 {
            post(&mut rig, i).unwrap();
        }
        assert_ne!(rig.sq.producer(), 0);
        let sq = rig.bindings[0].sq.clone().unwrap();
        sq.gate().close();
        rig.bindings[0].rq.as_ref().unwrap().gate().close();
        // SAFETY: nothing polls or posts meanwhile.
        unsafe {
            crate::clear_doorbell_record(&rig.mem.qp_layout(QPN, 8, 256));
            sq.restart();
            rig.bindings[0].rq.as_ref().unwrap().restart();
        }
        sq.gate().open();
        rig.mem.fill_sq(0);
        post(&mut rig, 9).unwrap();
        let blocks = rig.sq.producer();
        assert!(
            blocks == 1 || blocks == 2,
            "prepared {prepared}: restarted at 0"
        );
        let ring = rig.mem.sq_bytes();
        // `opmod_idx_opcode`: WQE index 0, SEND.
        assert_eq!(&ring[0..4], &u32::from(opcode::SEND).to_be_bytes());
        assert_eq!(rig.mem.dbrec(1), blocks);
        // The fourth copy: in the second buffer (the toggle is kept across the reset).
        assert_eq!(&rig.mem.bf_bytes()[256..264], &ring[..8]);
    }
}

/// A prepared frame's post without payload takes the blocks of its WQE without a data
/// segment: 30 header bytes are control and four Ethernet units, one block (with a payload,
/// the data segment makes it two).
#[test]
fn an_empty_payload_takes_the_blocks_of_its_wqe() {
    let frame = market_frame();
    let mut rig = Rig::new_eth(8, 256, eth_caps(2, 64), 18);
    let p = rig
        .sq
        .prepare_frame(&frame[..30], SendFlags::NONE, FrameLengths::default())
        .unwrap();
    // SAFETY: never executed.
    unsafe { rig.sq.post_frame(&p, 1, Sge::new(0, 0, 0)) }.unwrap();
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (1, 1));
    // SAFETY: never executed; the payload names `frame`.
    unsafe {
        rig.sq
            .post_frame(&p, 2, Sge::new(frame.as_ptr() as u64, 8, 1))
    }
    .unwrap();
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (3, 3));
}

//! Every operation end to end through the direct backend on the software device: memory
//! contents, completions and the raw CQE fields.

mod common;

use common::{PairCfg, with_pair};
use zverbs_core::{PostError, PostRecv, PostSend, RecvWr, SendWr, Sge, WcFlags, WcOpcode};
use zverbs_sim::QpConfig;

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn write_places_bytes_and_completes() {
    with_pair(PairCfg::default(), |p| {
        let data = pattern(100, 7);
        p.a.mem.write(0, &data);
        let sgl = [p.a.sge(0, 100)];
        // SAFETY: the entries lie in registered arenas, untouched until the completion.
        unsafe {
            p.a.sq
                .post(&SendWr::write(0x11, &sgl, p.b.remote(512)).signaled())
        }
        .unwrap();
        let (ca, cb) = p.run();
        assert_eq!(p.b.mem.read(512, 100), data);
        assert_eq!(p.b.mem.read(612, 1), [0], "nothing past the message");
        assert!(cb.is_empty());
        assert_eq!(ca.len(), 1);
        let c = ca[0];
        assert!(c.is_success());
        assert_eq!(
            (c.wr_id, c.opcode, c.byte_len),
            (0x11, WcOpcode::RdmaWrite, 0)
        );
        assert_eq!(c.qp_num, p.a.qpn());
        // The raw requester CQE: opcode REQ, owner 0 (first pass), the WRITE opcode in the top
        // byte of sop_drop_qpn, wqe_counter 0, the QPN as user index.
        let raw = p.a.last_cqe(1);
        assert_eq!(raw[63], 0x00);
        assert_eq!(&raw[56..60], &(0x0800_0000 | p.a.qpn()).to_be_bytes());
        assert_eq!(&raw[60..62], &[0, 0]);
        assert_eq!(&raw[32..36], &p.a.qpn().to_be_bytes());
    });
}

#[test]
fn write_with_immediate_consumes_a_receive() {
    with_pair(PairCfg::default(), |p| {
        let data = pattern(33, 1);
        p.a.mem.write(64, &data);
        // SAFETY: receive entries in the registered arena.
        unsafe { p.b.rq.post(&RecvWr::new(0xb0, &[p.b.sge(0, 8)])) }.unwrap();
        let sgl = [p.a.sge(64, 33)];
        let wr = SendWr::write_imm(0xa0, &sgl, p.b.remote(1000), 0xdead_beef).signaled();
        // SAFETY: as above.
        unsafe { p.a.sq.post(&wr) }.unwrap();
        let (ca, cb) = p.run();
        assert_eq!(p.b.mem.read(1000, 33), data);
        assert_eq!(
            p.b.mem.read(0, 8),
            [0; 8],
            "the receive buffer is not written"
        );
        assert_eq!(ca.len(), 1);
        assert_eq!((ca[0].wr_id, ca[0].opcode), (0xa0, WcOpcode::RdmaWrite));
        assert!(ca[0].flags.contains(WcFlags::WITH_IMM));
        assert_eq!(cb.len(), 1);
        let c = cb[0];
        assert!(c.is_success());
        assert_eq!(
            (c.wr_id, c.opcode, c.byte_len),
            (0xb0, WcOpcode::RecvRdmaWithImm, 33)
        );
        assert_eq!(c.imm(), Some(0xdead_beef));
        assert_eq!(c.qp_num, p.b.qpn());
        let raw = p.b.last_cqe(1);
        assert_eq!(raw[63] >> 4, 1, "RESP_WR_IMM");
        assert_eq!(
            &raw[36..40],
            &[0xde, 0xad, 0xbe, 0xef],
            "immediate as on the wire"
        );
        assert_eq!(&raw[60..62], &[0, 0], "wqe_counter: the receive index");
    });
}

#[test]
fn send_gathers_and_scatters_over_many_entries() {
    with_pair(PairCfg::default(), |p| {
        let parts = [pattern(5, 1), pattern(17, 2), pattern(40, 3)];
        p.a.mem.write(0, &parts[0]);
        p.a.mem.write(100, &parts[1]);
        p.a.mem.write(300, &parts[2]);
        let msg: Vec<u8> = parts.concat();
        let rx = [
            p.b.sge(0, 10),
            p.b.sge(200, 0),
            p.b.sge(400, 20),
            p.b.sge(800, 100),
        ];
        // SAFETY: receive entries in the registered arena.
        unsafe { p.b.rq.post(&RecvWr::new(7, &rx)) }.unwrap();
        let sgl = [
            p.a.sge(0, 5),
            p.a.sge(50, 0), // zero-length: skipped
            p.a.sge(100, 17),
            p.a.sge(300, 40),
        ];
        // SAFETY: as above.
        unsafe { p.a.sq.post(&SendWr::send_imm(8, &sgl, 42).signaled()) }.unwrap();
        let (ca, cb) = p.run();
        assert_eq!(p.b.mem.read(0, 10), msg[..10]);
        assert_eq!(p.b.mem.read(400, 20), msg[10..30]);
        assert_eq!(p.b.mem.read(800, 32), msg[30..]);
        assert_eq!(p.b.mem.read(832, 1), [0]);
        assert_eq!((ca[0].wr_id, ca[0].opcode), (8, WcOpcode::Send));
        let c = cb[0];
        assert_eq!((c.wr_id, c.opcode, c.byte_len), (7, WcOpcode::Recv, 62));
        assert_eq!(c.imm(), Some(42));
        assert_eq!(p.b.last_cqe(1)[63] >> 4, 3, "RESP_SEND_IMM");
    });
}

#[test]
fn plain_send_and_zero_length_send() {
    with_pair(PairCfg::default(), |p| {
        p.a.mem.write(0, b"hello");
        // SAFETY: receive entries in the registered arena.
        unsafe {
            p.b.rq
                .post_all(&[
                    RecvWr::new(1, &[p.b.sge(0, 64)]),
                    RecvWr::new(2, &[p.b.sge(64, 64)]),
                ])
                .unwrap()
        };
        let sgl = [p.a.sge(0, 5)];
        // SAFETY: as above.
        unsafe {
            p.a.sq.stage(&SendWr::send(10, &sgl).signaled()).unwrap();
            p.a.sq.stage(&SendWr::send(11, &[]).signaled()).unwrap();
        }
        p.a.sq.ring();
        let (ca, cb) = p.run();
        assert_eq!(p.b.mem.read(0, 5), b"hello");
        assert_eq!(ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(), [10, 11]);
        assert_eq!(cb.len(), 2);
        assert_eq!((cb[0].wr_id, cb[0].byte_len, cb[0].imm()), (1, 5, None));
        assert_eq!((cb[1].wr_id, cb[1].byte_len), (2, 0));
        assert_eq!(p.b.last_cqe(1)[63] >> 4, 2, "RESP_SEND");
        assert_eq!(&p.b.last_cqe(1)[60..62], &[0, 1], "second receive");
    });
}

#[test]
fn read_scatters_remote_bytes_and_reports_length() {
    with_pair(PairCfg::default(), |p| {
        let data = pattern(64, 9);
        p.b.mem.write(4096, &data);
        let sgl = [p.a.sge(0, 24), p.a.sge(1000, 40)];
        // SAFETY: the destination lies in the registered arena, not touched until completion.
        unsafe {
            p.a.sq
                .post(&SendWr::read(5, &sgl, p.b.remote(4096)).signaled())
        }
        .unwrap();
        let (ca, cb) = p.run();
        assert!(cb.is_empty());
        assert_eq!(p.a.mem.read(0, 24), data[..24]);
        assert_eq!(p.a.mem.read(1000, 40), data[24..]);
        let c = ca[0];
        assert_eq!((c.wr_id, c.opcode, c.byte_len), (5, WcOpcode::RdmaRead, 64));
        assert_eq!(&p.a.last_cqe(1)[44..48], &64u32.to_be_bytes());
    });
}

#[test]
fn atomics_work_in_host_order_and_return_the_original() {
    atomics(false);
}

#[test]
fn atomics_in_big_endian_mode_work_on_big_endian_values() {
    atomics(true);
}

/// Fetch-and-add and compare-and-swap, in the device's default host-order mode or (`big`) its
/// big-endian mode.
fn atomics(big: bool) {
    with_pair(PairCfg::default(), |p| {
        p.dev.set_atomic_host_endian(!big);
        p.b.mem.write_u64_in(64, 100, big);
        let r = p.b.remote(64);
        let wrs = [
            SendWr::fetch_add(1, p.a.sge(0, 8), r, 5).signaled(),
            SendWr::compare_swap(2, p.a.sge(8, 8), r, 105, 7).signaled(), // succeeds
            SendWr::compare_swap(3, p.a.sge(16, 8), r, 105, 9).signaled(), // fails
            SendWr::fetch_add(4, p.a.sge(24, 8), r, u64::MAX).signaled(), // 7 - 1
        ];
        // SAFETY: local results in the registered arena.
        unsafe { p.a.sq.post_all(&wrs) }.unwrap();
        let (ca, _) = p.run();
        assert_eq!(p.a.mem.read_u64_in(0, big), 100);
        assert_eq!(p.a.mem.read_u64_in(8, big), 105);
        assert_eq!(p.a.mem.read_u64_in(16, big), 7);
        assert_eq!(p.a.mem.read_u64_in(24, big), 7);
        assert_eq!(p.b.mem.read_u64_in(64, big), 6);
        let ops: Vec<_> = ca.iter().map(|c| (c.wr_id, c.opcode, c.byte_len)).collect();
        assert_eq!(
            ops,
            [
                (1, WcOpcode::FetchAdd, 8),
                (2, WcOpcode::CompSwap, 8),
                (3, WcOpcode::CompSwap, 8),
                (4, WcOpcode::FetchAdd, 8)
            ]
        );
    });
}

#[test]
fn nop_completes_when_signaled() {
    with_pair(PairCfg::default(), |p| {
        // SAFETY: a NOP touches no memory.
        unsafe {
            p.a.sq.stage(&SendWr::nop(1)).unwrap();
            p.a.sq.stage(&SendWr::nop(2).signaled()).unwrap();
        }
        p.a.sq.ring();
        let (ca, _) = p.run();
        assert_eq!(ca.len(), 1);
        assert_eq!((ca[0].wr_id, ca[0].opcode), (2, WcOpcode::Nop));
        assert_eq!(
            &p.a.last_cqe(1)[60..62],
            &[0, 1],
            "the second NOP's basic block"
        );
    });
}

#[test]
fn inline_every_size_for_write_and_send() {
    let cfg = PairCfg {
        qp: QpConfig {
            max_inline_data: 200,
            max_send_wr: 8,
            max_recv_wr: 8,
            ..QpConfig::default()
        },
        ..PairCfg::default()
    };
    with_pair(cfg, |p| {
        let max = p.a.sq.caps().max_inline_data;
        assert!(max >= 200, "the device reports at least what was asked");
        // Under Miri (100 times slower), the lengths at each block boundary of either WQE (the
        // payload starts 36 bytes into the WRITE, 20 into the SEND), at a segment boundary,
        // the smallest and the limit; with 2 and 64, the WRITE of 93 bytes and the SEND of 172
        // meet the ring's end (as WRITEs and SENDs of other lengths do in the full sweep).
        let lens: Vec<usize> = if cfg!(miri) {
            let mut lens = vec![
                0, 1, 2, 12, 13, 28, 29, 44, 45, 64, 92, 93, 108, 109, 156, 157, 172, 173,
            ];
            lens.push(max as usize);
            lens
        } else {
            (0..=max as usize).collect()
        };
        for len in lens {
            // The payload comes from unregistered stack memory: inline needs no key.
            let src = pattern(len, len as u8);
            let sgl = [Sge::new(src.as_ptr() as u64, len as u32, 0xbad)];
            p.b.mem.fill(0, 1024, 0xee);
            // SAFETY: `src` is readable during the post; the receive lies in the arena.
            unsafe {
                p.b.rq
                    .post(&RecvWr::new(len as u64, &[p.b.sge(512, 512)]))
                    .unwrap();
                p.a.sq
                    .stage(&SendWr::write(1, &sgl, p.b.remote(0)).inline())
                    .unwrap();
                p.a.sq
                    .stage(&SendWr::send(2, &sgl).inline().signaled())
                    .unwrap();
            }
            p.a.sq.ring();
            drop(src);
            let (ca, cb) = p.run();
            let want = pattern(len, len as u8);
            assert_eq!(p.b.mem.read(0, len), want, "WRITE inline {len}");
            assert_eq!(p.b.mem.read(len, 1), [0xee]);
            assert_eq!(p.b.mem.read(512, len), want, "SEND inline {len}");
            assert_eq!(ca.len(), 1);
            assert_eq!((cb[0].wr_id, cb[0].byte_len), (len as u64, len as u32));
        }
        let big = vec![0u8; max as usize + 1];
        let sgl = [Sge::new(big.as_ptr() as u64, max + 1, 0)];
        // SAFETY: refused before anything is read.
        let e = unsafe { p.a.sq.stage(&SendWr::send(3, &sgl).inline()) };
        assert!(matches!(e, Err(PostError::InlineTooLarge { .. })));
    });
}

#[test]
fn solicited_bit_reaches_the_responder_cqe() {
    with_pair(PairCfg::default(), |p| {
        let sgl = [p.a.sge(0, 4)];
        // SAFETY: entries in the registered arenas.
        unsafe {
            p.b.rq
                .post_all(&[
                    RecvWr::new(1, &[p.b.sge(0, 8)]),
                    RecvWr::new(2, &[p.b.sge(8, 8)]),
                ])
                .unwrap();
            p.a.sq.stage(&SendWr::send(1, &sgl).solicited()).unwrap();
            p.a.sq.stage(&SendWr::send(2, &sgl).signaled()).unwrap();
        }
        p.a.sq.ring();
        let (_, cb) = p.run();
        assert_eq!(cb.len(), 2);
        assert_eq!(p.b.last_cqe(2)[63] & 0x2, 0x2, "solicited event bit");
        assert_eq!(p.b.last_cqe(1)[63] & 0x2, 0, "no solicited event bit");
    });
}

#[test]
fn fenced_write_after_read_sees_the_read_done() {
    with_pair(PairCfg::default(), |p| {
        p.b.mem.write(0, &pattern(16, 3));
        // READ b[0..16] into a[0..16], then (fenced) WRITE a[0..16] to b[100..116].
        let rd = [p.a.sge(0, 16)];
        let wr = [p.a.sge(0, 16)];
        // SAFETY: entries in the registered arenas.
        unsafe {
            p.a.sq
                .post_all(&[
                    SendWr::read(1, &rd, p.b.remote(0)),
                    SendWr::write(2, &wr, p.b.remote(100)).fenced().signaled(),
                ])
                .unwrap()
        };
        let (ca, _) = p.run();
        assert_eq!(ca.len(), 1);
        assert_eq!(p.b.mem.read(100, 16), pattern(16, 3));
    });
}

#[test]
fn zero_length_write_needs_no_valid_rkey() {
    with_pair(PairCfg::default(), |p| {
        let bogus = zverbs_core::RemoteBuf::new(0, 0x7777_7777);
        // SAFETY: no memory is touched.
        unsafe { p.a.sq.post(&SendWr::write(1, &[], bogus).signaled()) }.unwrap();
        let (ca, _) = p.run();
        assert!(ca[0].is_success(), "{:?}", ca[0]);
    });
}

#[test]
fn loopback_qp_writes_to_itself() {
    let mem = common::Arena::new(4096);
    let dev = zverbs_sim::Device::new();
    let cq = dev.create_cq(zverbs_sim::CqConfig { cqe: 15 }).unwrap();
    let qp = dev
        .create_qp(QpConfig {
            send_cq: cq.cqn,
            recv_cq: cq.cqn,
            ..QpConfig::default()
        })
        .unwrap();
    dev.connect(qp.qpn, qp.qpn).unwrap();
    // SAFETY: the arena outlives the device.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, zverbs_sim::Access::ALL) }.unwrap();
    let slots = qp.sq_slots();
    let state = zverbs_mlx5dv::SqState::new(&slots[..]).unwrap();
    let binding = [zverbs_mlx5dv::CqBinding::send_only(qp.qpn, &state)];
    // SAFETY: the device's layouts; this is their only driver.
    let (mut sq, mut cqp) = unsafe {
        (
            zverbs_mlx5dv::SendQueue::new(&qp.layout, qp.caps(), &state, None).unwrap(),
            zverbs_mlx5dv::CompletionQueue::new(&cq.layout, &binding[..]).unwrap(),
        )
    };
    mem.write(0, b"loop");
    let sgl = [Sge::new(mem.addr(0), 4, mr.lkey)];
    let remote = zverbs_core::RemoteBuf::new(mem.addr(100), mr.rkey);
    // SAFETY: entries in the registered arena.
    unsafe { sq.post(&SendWr::write(9, &sgl, remote).signaled()) }.unwrap();
    dev.run_until_idle();
    let mut wc = [zverbs_core::Completion::EMPTY; 2];
    use zverbs_core::PollCq;
    assert_eq!(cqp.poll(&mut wc), 1);
    assert_eq!(wc[0].wr_id, 9);
    assert_eq!(mem.read(100, 4), b"loop");
}

fn bf_cfg(bf_size: u32) -> PairCfg {
    PairCfg {
        qp: QpConfig {
            bf_size,
            max_send_wr: 8,
            max_recv_wr: 8,
            ..QpConfig::default()
        },
        ..PairCfg::default()
    }
}

/// Reads `len` bytes of the BlueFlame register area of `layout` at `off`.
fn bf_bytes(layout: &zverbs_mlx5dv::QpLayout, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: the register area is the device's, `2 × bf.size` (or 8) bytes; stepped mode.
    unsafe { std::ptr::copy_nonoverlapping(layout.bf.reg.as_ptr().add(off), v.as_mut_ptr(), len) };
    v
}

fn ring_bytes(layout: &zverbs_mlx5dv::QpLayout, block: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: inside the device's send ring; stepped mode.
    unsafe {
        std::ptr::copy_nonoverlapping(layout.sq.buf.as_ptr().add(block * 64), v.as_mut_ptr(), len)
    };
    v
}

#[test]
fn blueflame_copies_single_wqes_into_alternating_buffers() {
    with_pair(bf_cfg(256), |p| {
        assert!(p.a.sq.has_blueflame());
        let sgl = [p.a.sge(0, 8)];
        for (i, off) in [(0u64, 0usize), (1, 256), (2, 0)] {
            // SAFETY: entries in the registered arena.
            unsafe {
                p.a.sq
                    .post(&SendWr::write(i, &sgl, p.b.remote(0)).signaled())
            }
            .unwrap();
            let wqe = ring_bytes(&p.a.qp.layout, i as usize, 64);
            assert_eq!(
                bf_bytes(&p.a.qp.layout, off, 64),
                wqe,
                "WQE {i} copied at {off}"
            );
            let (ca, _) = p.run();
            assert_eq!(ca[0].wr_id, i);
        }
        // A batch rings the 8-byte doorbell with the last WQE's control segment.
        // SAFETY: as above.
        unsafe {
            p.a.sq
                .post_all(&[
                    SendWr::write(3, &sgl, p.b.remote(0)),
                    SendWr::write(4, &sgl, p.b.remote(0)).signaled(),
                ])
                .unwrap()
        };
        assert_eq!(
            bf_bytes(&p.a.qp.layout, 256, 8),
            ring_bytes(&p.a.qp.layout, 4, 8)
        );
        let (ca, _) = p.run();
        assert_eq!(ca[0].wr_id, 4);
    });
}

#[test]
fn doorbell_only_mode_works() {
    with_pair(bf_cfg(0), |p| {
        assert!(!p.a.sq.has_blueflame());
        p.a.mem.write(0, b"abcdefgh");
        let sgl = [p.a.sge(0, 8)];
        for i in 0..4u64 {
            // SAFETY: entries in the registered arena.
            unsafe {
                p.a.sq
                    .post(&SendWr::write(i, &sgl, p.b.remote(8 * i as usize)).signaled())
            }
            .unwrap();
            assert_eq!(
                bf_bytes(&p.a.qp.layout, 0, 8),
                ring_bytes(&p.a.qp.layout, i as usize, 8),
                "the doorbell carries the control segment's first 8 bytes"
            );
        }
        let (ca, _) = p.run();
        assert_eq!(ca.len(), 4);
        assert_eq!(p.b.mem.read(0, 32), b"abcdefgh".repeat(4));
    });
}

/// The device driving rings it did not allocate (as behind libmlx5): the same backend, the
/// same results.
#[test]
fn external_rings_are_driven_like_the_devices_own() {
    use std::ptr::NonNull;
    use zverbs_mlx5dv::{BfLayout, CqLayout, QpLayout, WqLayout};
    let rings = common::Arena::new(64 * 1024);
    let mem = common::Arena::new(4096);
    let nn = |off: usize| NonNull::new(rings.ptr(off)).unwrap();
    // CQ: 16 CQEs at 0, initialised invalid as libmlx5 does; doorbell record at 1024.
    for i in 0..16 {
        rings.write(i * 64 + 63, &[0xf0]);
    }
    let cq_layout = CqLayout {
        buf: nn(0),
        dbrec: nn(1024).cast(),
        cqe_cnt: 16,
        cqe_size: 64,
        cqn: 0x77,
    };
    // QP: 16-block send ring at 4096, 8 receive entries of 32 bytes at 8192, doorbell record
    // at 1088, BlueFlame 2 × 256 bytes at 2048.
    let qp_layout = |qpn, sq: usize, rq: usize, db: usize, bf: usize| QpLayout {
        qpn,
        dbrec: nn(db).cast(),
        sq: WqLayout {
            buf: nn(sq),
            wqe_cnt: 16,
            stride: 64,
        },
        rq: WqLayout {
            buf: nn(rq),
            wqe_cnt: 8,
            stride: 32,
        },
        bf: BfLayout {
            reg: nn(bf),
            size: 256,
        },
    };
    let qa = qp_layout(0x5001, 4096, 8192, 1088, 2048);
    let qb = qp_layout(0x5002, 12288, 16384, 1152, 2560);
    let dev = zverbs_sim::Device::new();
    // SAFETY: the arenas outlive the device and are used as mlx5 rings only.
    unsafe {
        dev.create_cq_external(&cq_layout).unwrap();
        dev.create_qp_external(&qa, 0x77, 0x77, 0).unwrap();
        dev.create_qp_external(&qb, 0x77, 0x77, 0).unwrap();
    }
    dev.connect(qa.qpn, qb.qpn).unwrap();
    // SAFETY: as above.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 4096, zverbs_sim::Access::ALL) }.unwrap();
    let sq_slots: Vec<_> = (0..16).map(|_| zverbs_mlx5dv::SqSlot::new()).collect();
    let rq_slots: Vec<_> = (0..8).map(|_| zverbs_mlx5dv::RqSlot::new()).collect();
    let sq_state = zverbs_mlx5dv::SqState::new(&sq_slots[..]).unwrap();
    let rq_state = zverbs_mlx5dv::RqState::new(&rq_slots[..]).unwrap();
    let bindings = [
        zverbs_mlx5dv::CqBinding::new(qa.qpn, Some(&sq_state), None),
        zverbs_mlx5dv::CqBinding::new(qb.qpn, None, Some(&rq_state)),
    ];
    let caps = zverbs_mlx5dv::SqCaps {
        max_send_sge: 2,
        max_inline_data: 28,
        sig_all: false,
        max_signaled: 8,
        transport: zverbs_core::Transport::Rc,
    };
    // SAFETY: the layouts above, each driven by one queue only.
    let (mut sq, mut rq, mut cq) = unsafe {
        (
            zverbs_mlx5dv::SendQueue::new(&qa, caps, &sq_state, None).unwrap(),
            zverbs_mlx5dv::RecvQueue::new(&qb, &rq_state).unwrap(),
            zverbs_mlx5dv::CompletionQueue::new(&cq_layout, &bindings[..]).unwrap(),
        )
    };
    mem.write(0, b"external");
    let sgl = [Sge::new(mem.addr(0), 8, mr.lkey)];
    let rx = [Sge::new(mem.addr(512), 64, mr.lkey)];
    // SAFETY: entries in the registered arena.
    unsafe {
        rq.post(&RecvWr::new(2, &rx)).unwrap();
        sq.post(&SendWr::send_imm(1, &sgl, 9).signaled()).unwrap();
    }
    dev.run_until_idle();
    let mut wc = [zverbs_core::Completion::EMPTY; 4];
    use zverbs_core::PollCq;
    assert_eq!(cq.poll(&mut wc), 2);
    // The responder's CQE comes first: it is written when the message lands, the requester's
    // when the WQE completes (on a wire, after the acknowledgement).
    assert_eq!((wc[0].wr_id, wc[0].qp_num, wc[0].byte_len), (2, 0x5002, 8));
    assert_eq!(wc[0].imm(), Some(9));
    assert_eq!((wc[1].wr_id, wc[1].qp_num), (1, 0x5001));
    assert_eq!(mem.read(512, 8), b"external");
    assert!(rings.guards_intact() && mem.guards_intact());
}

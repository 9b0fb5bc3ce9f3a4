//! Ring wrap positions, batches behind one doorbell, selective signaling and credit return.

mod common;

use common::{Pair, PairCfg, with_pair};
use zverbs_core::{BatchError, PostError, PostRecv, PostSend, RecvWr, SendWr, Sge};
use zverbs_sim::QpConfig;

/// 4 gather entries, 100 inline bytes: the largest WQE is 9 segments (3 blocks); 4 of them
/// make a 16-block ring.
fn small_ring() -> PairCfg {
    PairCfg {
        qp: QpConfig {
            max_send_wr: 4,
            max_send_sge: 4,
            max_inline_data: 100,
            max_recv_wr: 4,
            max_recv_sge: 4,
            ..QpConfig::default()
        },
        ..PairCfg::default()
    }
}

/// Moves A's producer to `block` (mod ring) with signaled NOPs, draining their completions.
fn advance_to(p: &mut Pair<'_>, block: u32) {
    let ring = p.a.sq.blocks();
    while p.a.sq.producer() % ring != block {
        // SAFETY: a NOP touches no memory.
        unsafe { p.a.sq.post(&SendWr::nop(0xfff).signaled()) }.unwrap();
        let (ca, _) = p.run();
        assert_eq!(ca.len(), 1);
    }
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Write1,
    Write4,
    Send4,
    InlineWrite(usize),
    InlineSend(usize),
}

impl Kind {
    /// The basic blocks of its WQE: the control segment, a WRITE's remote address, then the
    /// entries or the inline data (a 4-byte header and the bytes, in 16-byte segments).
    fn blocks(self) -> u32 {
        let segs = match self {
            Kind::Write1 => 3,
            Kind::Write4 => 6,
            Kind::Send4 => 5,
            Kind::InlineWrite(n) => 2 + (n + 4).div_ceil(16),
            Kind::InlineSend(n) => 1 + (n + 4).div_ceil(16),
        };
        segs.div_ceil(4) as u32
    }
}

#[test]
fn every_wrap_position_for_every_wqe_size() {
    with_pair(small_ring(), |p| {
        let ring = p.a.sq.blocks();
        assert_eq!(ring, 16);
        let kinds = [
            Kind::Write1,
            Kind::Write4,
            Kind::Send4,
            Kind::InlineWrite(12),
            Kind::InlineWrite(29),
            Kind::InlineWrite(60),
            Kind::InlineWrite(p.a.sq.caps().max_inline_data as usize),
            Kind::InlineSend(1),
            Kind::InlineSend(77),
        ];
        let mut seed = 0u8;
        for (i, kind) in kinds.into_iter().enumerate() {
            for start in 0..ring {
                // Under Miri (100 times slower), each kind from blocks `i mod 8` and 8 more
                // (every block over the kinds) and from each block where it wraps: about a lap
                // of the ring a kind instead of one a start.
                if cfg!(miri) && start % 8 != i as u32 % 8 && start + kind.blocks() <= ring {
                    continue;
                }
                advance_to(p, start);
                seed = seed.wrapping_add(1);
                let msg: Vec<u8> = (0..p.a.sq.caps().max_inline_data as usize)
                    .map(|i| (i as u8) ^ seed)
                    .collect();
                p.a.mem.write(0, &msg);
                p.b.mem.fill(0, 2048, 0);
                let len = match kind {
                    Kind::Write1 => 50,
                    Kind::Write4 | Kind::Send4 => 80,
                    Kind::InlineWrite(n) | Kind::InlineSend(n) => n,
                };
                let sgl4 = [
                    p.a.sge(0, 20),
                    p.a.sge(20, 20),
                    p.a.sge(40, 20),
                    p.a.sge(60, 20),
                ];
                let sgl1 = [p.a.sge(0, len as u32)];
                let recv = [p.b.sge(1024, 512)];
                let wr = match kind {
                    Kind::Write1 => SendWr::write(start.into(), &sgl1, p.b.remote(0)),
                    Kind::Write4 => SendWr::write(start.into(), &sgl4, p.b.remote(0)),
                    Kind::Send4 => SendWr::send(start.into(), &sgl4),
                    Kind::InlineWrite(_) => {
                        SendWr::write(start.into(), &sgl1, p.b.remote(0)).inline()
                    }
                    Kind::InlineSend(_) => SendWr::send(start.into(), &sgl1).inline(),
                };
                let is_send = matches!(kind, Kind::Send4 | Kind::InlineSend(_));
                // SAFETY: entries in the registered arenas.
                unsafe {
                    if is_send {
                        p.b.rq.post(&RecvWr::new(start.into(), &recv)).unwrap();
                    }
                    p.a.sq.post(&wr.signaled()).unwrap();
                }
                let (ca, cb) = p.run();
                assert_eq!(ca.len(), 1, "{kind:?} at block {start}");
                assert!(ca[0].is_success(), "{kind:?} at block {start}: {:?}", ca[0]);
                assert_eq!(ca[0].wr_id, u64::from(start));
                let wqe_counter = u16::from_be_bytes(p.a.last_cqe(1)[60..62].try_into().unwrap());
                assert_eq!(u32::from(wqe_counter) % ring, start);
                let at = if is_send {
                    assert_eq!((cb.len(), cb[0].byte_len), (1, len as u32));
                    1024
                } else {
                    0
                };
                assert_eq!(
                    p.b.mem.read(at, len),
                    msg[..len],
                    "{kind:?} at block {start}"
                );
                assert_eq!(p.b.mem.read(at + len, 1), [0], "{kind:?} at block {start}");
            }
        }
    });
}

#[test]
fn batches_of_every_size_behind_one_doorbell() {
    with_pair(small_ring(), |p| {
        let ring = p.a.sq.blocks() as usize;
        for signal_all in [false, true] {
            for n in 1..=ring {
                // Under Miri (100 times slower), every size once, every other one with every
                // request signaled.
                if cfg!(miri) && signal_all != n.is_multiple_of(2) {
                    continue;
                }
                let data: Vec<u8> = (0..n * 8).map(|i| (i + n) as u8).collect();
                p.a.mem.write(0, &data);
                let sgls: Vec<[Sge; 1]> = (0..n).map(|i| [p.a.sge(i * 8, 8)]).collect();
                let wrs: Vec<SendWr<'_>> = (0..n)
                    .map(|i| {
                        let wr = SendWr::write(i as u64, &sgls[i], p.b.remote(4096 + i * 8));
                        if signal_all || i == n - 1 {
                            wr.signaled()
                        } else {
                            wr
                        }
                    })
                    .collect();
                // SAFETY: entries in the registered arenas.
                unsafe { p.a.sq.post_all(&wrs) }.unwrap();
                assert_eq!(p.a.sq.pending(), 0, "one ring for the batch");
                let (ca, _) = p.run();
                let ids: Vec<u64> = ca.iter().map(|c| c.wr_id).collect();
                let want: Vec<u64> = if signal_all {
                    (0..n as u64).collect()
                } else {
                    vec![n as u64 - 1]
                };
                assert_eq!(ids, want);
                assert_eq!(p.b.mem.read(4096, n * 8), data);
                assert_eq!(p.a.sq.free_blocks() as usize, ring, "all credits returned");
            }
        }
        // One more than the ring holds: refused whole.
        let sgl = [p.a.sge(0, 8)];
        let wrs = vec![SendWr::write(0, &sgl, p.b.remote(0)); ring + 1];
        // SAFETY: refused before anything is written.
        let e = unsafe { p.a.sq.post_all(&wrs) };
        assert!(matches!(
            e,
            Err(BatchError {
                index,
                error: PostError::QueueFull { .. }
            }) if index == ring
        ));
        let (ca, _) = p.run();
        assert!(ca.is_empty());
    });
}

#[test]
fn selective_signaling_retires_unsignaled_and_returns_credits() {
    with_pair(small_ring(), |p| {
        let ring = p.a.sq.blocks();
        let total = 20 * ring as u64;
        let mut next = 0u64;
        let mut got = Vec::new();
        let sgl = [p.a.sge(0, 8)];
        while next < total {
            let wr = SendWr::write(next, &sgl, p.b.remote(0));
            let wr = if next % 5 == 4 || next == total - 1 {
                wr.signaled()
            } else {
                wr
            };
            // SAFETY: entries in the registered arenas.
            match unsafe { p.a.sq.stage(&wr) } {
                Ok(()) => next += 1,
                Err(PostError::QueueFull { .. }) => {
                    p.a.sq.ring();
                    let (ca, _) = p.run();
                    assert!(!ca.is_empty(), "a full ring always has a signaled WQE");
                    got.extend(ca);
                }
                Err(e) => panic!("{e}"),
            }
        }
        p.a.sq.ring();
        got.extend(p.run().0);
        let ids: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
        let want: Vec<u64> = (0..total)
            .filter(|i| i % 5 == 4 || *i == total - 1)
            .collect();
        assert_eq!(ids, want);
        assert!(got.iter().all(|c| c.is_success()));
        assert_eq!(p.a.sq.free_blocks(), ring);
        assert_eq!(p.a.sq.outstanding_signaled(), 0);
    });
}

#[test]
fn receive_and_completion_rings_wrap_with_owner_bits() {
    let cfg = PairCfg {
        cqe: 15, // 16 CQEs
        ..small_ring()
    };
    with_pair(cfg, |p| {
        let cqe_cnt = p.b.cq.layout.cqe_cnt;
        assert_eq!(cqe_cnt, 16);
        let mut owners = Vec::new();
        for i in 0..(6 * cqe_cnt) {
            let msg = [i as u8; 3];
            p.a.mem.write(0, &msg);
            let sgl = [p.a.sge(0, 3)];
            // SAFETY: entries in the registered arenas.
            unsafe {
                p.b.rq
                    .post(&RecvWr::new(
                        i.into(),
                        &[p.b.sge(16 * (i as usize % 4), 16)],
                    ))
                    .unwrap();
                p.a.sq
                    .post(&SendWr::send(i.into(), &sgl).signaled())
                    .unwrap();
            }
            let (ca, cb) = p.run();
            assert_eq!((ca.len(), cb.len()), (1, 1));
            assert_eq!((cb[0].wr_id, cb[0].byte_len), (u64::from(i), 3));
            assert_eq!(p.b.mem.read(16 * (i as usize % 4), 3), msg);
            owners.push(p.b.last_cqe(1)[63] & 1);
            let counter = u16::from_be_bytes(p.b.last_cqe(1)[60..62].try_into().unwrap());
            assert_eq!(u32::from(counter), i, "wqe_counter is the receive index");
        }
        let want: Vec<u8> = (0..6 * cqe_cnt)
            .map(|i| ((i / cqe_cnt) & 1) as u8)
            .collect();
        assert_eq!(owners, want);
    });
}

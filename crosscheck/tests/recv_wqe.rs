//! Receive WQEs: zverbs' `RecvQueue` writes the bytes libmlx5's `mlx5_post_recv` writes for
//! the same scatter lists (modelled by the C probe with `mlx5dv_set_data_seg` and
//! `MLX5_INVALID_LKEY`), and the same doorbell record.
//!
//! Both rings start as the same random bytes; after every post the whole rings must be equal
//! (so the data segments, the terminator and the bytes neither side touches all agree), and
//! so must the doorbell records. Receives are completed through responder CQEs this test
//! writes as the device would, so the head drifts over every entry and past the 16-bit wrap.

use std::ptr::NonNull;

use zverbs_core::{Completion, PollCq, PostRecv, RecvWr, Sge, WcStatus};
use zverbs_crosscheck::probe::CRq;
use zverbs_crosscheck::{DeviceMem, SplitMix64};
use zverbs_mlx5dv::prm::cqe::{Cqe64, CqeOpcode};
use zverbs_mlx5dv::{
    BfLayout, CompletionQueue, CqBinding, CqLayout, QpLayout, RecvQueue, RqSlot, RqState, WqLayout,
};

/// (entries, stride in bytes).
const CONFIGS: &[(u32, u32)] = &[(4, 16), (8, 64), (64, 256), (16, 512)];

/// Run each configuration for at least this many receives (and past the 16-bit wrap).
const MIN_RECVS: u64 = 10_000;

#[derive(Debug, Default)]
struct Stats {
    recvs: u64,
    batches: u64,
    batched: u64,
    terminated: u64,
    full: u64,
    zero_len_sges: u64,
    head_wraps: u64,
    completions: u64,
}

fn random_sgl(rng: &mut SplitMix64, max_sge: u32) -> Vec<Sge> {
    let n = rng.range(0, u64::from(max_sge));
    (0..n)
        .map(|_| {
            let len = if rng.chance(1, 6) {
                0
            } else {
                rng.edgy_u32().max(1)
            };
            Sge::new(rng.edgy_u64(), len, rng.edgy_u32())
        })
        .collect()
}

fn run_config(wqe_cnt: u32, stride: u32, rng: &mut SplitMix64, seed: u64, stats: &mut Stats) {
    let max_sge = stride / 16;
    let ring_len = (wqe_cnt * stride) as usize;
    let mut initial = vec![0u8; ring_len];
    rng.fill(&mut initial);
    let ring = DeviceMem::new(ring_len, 4096);
    ring.write_at(0, &initial);
    let dbrec = DeviceMem::new(8, 8);
    let unused = DeviceMem::new(64, 64);
    let cq_ring = DeviceMem::new(wqe_cnt as usize * 64, 4096);
    for i in 0..wqe_cnt as usize {
        cq_ring.write_at(i * 64 + 63, &[0xf0]); // MLX5_CQE_INVALID << 4, as libmlx5 starts
    }
    let cq_dbrec = DeviceMem::new(8, 8);
    let qpn = rng.below(1 << 24) as u32;
    let mut c = CRq::new(wqe_cnt, stride, &initial);

    let layout = QpLayout {
        qpn,
        dbrec: dbrec.ptr().cast(),
        sq: WqLayout {
            buf: NonNull::dangling(),
            wqe_cnt: 0,
            stride: 64,
        },
        rq: WqLayout {
            buf: ring.ptr(),
            wqe_cnt,
            stride,
        },
        bf: BfLayout {
            reg: unused.ptr(),
            size: 0,
        },
    };
    let cq_layout = CqLayout {
        buf: cq_ring.ptr(),
        dbrec: cq_dbrec.ptr().cast(),
        cqe_cnt: wqe_cnt,
        cqe_size: 64,
        cqn: 2,
    };
    let slots: Vec<RqSlot> = (0..wqe_cnt).map(|_| RqSlot::new()).collect();
    let state = RqState::new(&slots[..]).expect("slot storage");
    let bindings = [CqBinding::recv_only(qpn, &state)];
    // SAFETY: the ring and doorbell record are allocations that outlive the queue; nothing else
    // posts to it; `state` is bound only to `cq` below; the head starts at 0.
    let mut rq = unsafe { RecvQueue::new(&layout, &state) }.expect("RecvQueue::new");
    // SAFETY: the CQE ring and its doorbell record outlive the poller, which is the only one;
    // it is new, and its one binding carries the receive queue's state.
    let mut cq =
        unsafe { CompletionQueue::new(&cq_layout, &bindings[..]) }.expect("CompletionQueue::new");

    let fail = |head: u32, what: String| -> ! {
        panic!("seed {seed:#x}, {wqe_cnt} entries of {stride} bytes, head {head}: {what}")
    };
    let mut next_wr_id = 1u64;
    let mut cq_pi = 0u32;
    let mut posted = 0u64;
    while posted < MIN_RECVS || rq.head() < 0x1_0000 + wqe_cnt {
        // A round: fill part of the ring, singly or in batches, then complete it all.
        let round = rng.range(1, u64::from(rq.free())) as usize;
        let mut wr_ids = Vec::with_capacity(round);
        while wr_ids.len() < round {
            let k = if rng.chance(1, 3) {
                rng.range(1, (round - wr_ids.len()) as u64) as usize
            } else {
                1
            };
            let lists: Vec<Vec<Sge>> = (0..k).map(|_| random_sgl(rng, max_sge)).collect();
            let wrs: Vec<RecvWr<'_>> = lists
                .iter()
                .enumerate()
                .map(|(i, l)| RecvWr::new(next_wr_id + i as u64, l))
                .collect();
            let head = rq.head();
            c.clear_written();
            for l in &lists {
                c.post(l)
                    .unwrap_or_else(|e| fail(head, format!("the C builder refused {l:?}: {e}")));
                let nonempty = l.iter().filter(|e| e.length != 0).count() as u32;
                stats.terminated += u64::from(nonempty < max_sge);
                stats.full += u64::from(nonempty == max_sge);
                stats.zero_len_sges += l.len() as u64 - u64::from(nonempty);
            }
            let r = if k == 1 {
                // SAFETY: nothing reads the scatter lists' memory (no device executes them).
                unsafe { rq.post(&wrs[0]) }.map_err(|e| format!("{e:?}"))
            } else {
                stats.batches += 1;
                stats.batched += k as u64;
                // SAFETY: as above.
                unsafe { rq.post_all(&wrs) }.map_err(|e| format!("{e:?}"))
            };
            if let Err(e) = r {
                fail(head, format!("RecvQueue refused {lists:?}: {e}"));
            }
            if rq.head() != c.head() {
                fail(
                    head,
                    format!("heads differ: ours {}, C {}", rq.head(), c.head()),
                );
            }
            let (ours, theirs) = (ring.to_vec(), c.ring().to_vec());
            if ours != theirs {
                let at: Vec<usize> = (0..ring_len).filter(|&i| ours[i] != theirs[i]).collect();
                let e = (head % wqe_cnt) as usize * stride as usize;
                fail(
                    head,
                    format!(
                        "ring bytes differ at {at:?} after posting {lists:?}\n  ours:    {:02x?}\n  \
                         libmlx5: {:02x?}",
                        &ours[e..e + stride as usize],
                        &theirs[e..e + stride as usize]
                    ),
                );
            }
            let db = dbrec.to_vec();
            if db[..] != c.dbrec_bytes() || db[..4] != (rq.head() & 0xffff).to_be_bytes() {
                fail(
                    head,
                    format!(
                        "doorbell record {db:02x?}, libmlx5 {:02x?}",
                        c.dbrec_bytes()
                    ),
                );
            }
            stats.head_wraps += u64::from(head >> 16 != rq.head() >> 16);
            wr_ids.extend((0..k as u64).map(|i| next_wr_id + i));
            next_wr_id += k as u64;
            posted += k as u64;
            stats.recvs += k as u64;
        }

        // The device: one responder SEND CQE per receive, in order.
        for _ in &wr_ids {
            let mut cqe = [0u8; 64];
            let mut v = Cqe64::new_unchecked(&mut cqe);
            v.set_sop_drop_qpn(qpn);
            v.set_byte_cnt(rng.next_u32() >> 1);
            v.set_op_own((CqeOpcode::RespSend.to_raw() << 4) | ((cq_pi / wqe_cnt) & 1) as u8);
            cq_ring.write_at((cq_pi % wqe_cnt) as usize * 64, &cqe);
            cq_pi = cq_pi.wrapping_add(1);
        }
        let mut wc = vec![Completion::EMPTY; wr_ids.len() + 1];
        let n = cq.poll(&mut wc);
        if n != wr_ids.len() {
            fail(
                rq.head(),
                format!("polled {n} completions, expected {}", wr_ids.len()),
            );
        }
        for (w, &id) in wc.iter().zip(&wr_ids) {
            if w.wr_id != id || w.status != WcStatus::Success {
                fail(rq.head(), format!("completion {w:?}, expected wr_id {id}"));
            }
        }
        stats.completions += n as u64;
        if rq.free() != wqe_cnt {
            fail(
                rq.head(),
                format!("{} free entries after completing everything", rq.free()),
            );
        }
    }
}

#[test]
fn recv_queue_wqes_match_libmlx5() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_4ec7, 8);
    let mut stats = Stats::default();
    for &(wqe_cnt, stride) in CONFIGS {
        let before = stats.recvs;
        run_config(wqe_cnt, stride, &mut rng, seed, &mut stats);
        eprintln!(
            "recv wqe: {:>6} receives on {wqe_cnt} entries of {stride} bytes",
            stats.recvs - before
        );
    }
    let s = &stats;
    eprintln!(
        "recv wqe: {} randomized receive WQEs compared with libmlx5's layout ({} in {} batches); \
         {} ended by an MLX5_INVALID_LKEY segment, {} full, {} zero-length SGEs skipped, {} \
         16-bit head wraps; {} completions",
        s.recvs,
        s.batched,
        s.batches,
        s.terminated,
        s.full,
        s.zero_len_sges,
        s.head_wraps,
        s.completions,
    );
    assert!(s.terminated > 0 && s.full > 0 && s.zero_len_sges > 0 && s.batches > 0);
    assert!(s.head_wraps >= CONFIGS.len() as u64);
}

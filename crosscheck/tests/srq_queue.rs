//! Shared receives through zverbs' `SharedRecvQueue` and `CompletionQueue`, against libmlx5
//! 44's shared receive queue as the C probe models it: `mlx5_post_srq_recv` takes the head of
//! the free list, writes the WQE's data segments and sets the doorbell record to the 16-bit
//! count of receives; `mlx5_free_srq_wqe` (called by libmlx5's poller for each receive CQE)
//! links the completed WQE behind the tail.
//!
//! Both queues run side by side over rings that start as the same random bytes, linked as
//! `set_srq_buf_ll` links them (head 0, tail the last WQE). A long seeded sequence posts
//! receives (alone or in batches; 0..=max entries), completes random subsets of the
//! outstanding receives in random order (ours: receive CQEs written as the device would and
//! polled, which frees the WQEs; the C side: the same frees in the same order), so the free
//! list is shuffled and WQEs are reused out of order, and runs the receive counter past its
//! 16-bit wrap. After every post: the WQE used (ours' head, libmlx5's head) and its bytes, the
//! doorbell record; after every completion round: the `wr_id`s polled and the free list's
//! tail; after every step: the whole ring.
//!
//! Refused receives change nothing on either side: more entries than the WQE holds (ours
//! `TooManySges`, libmlx5 `EINVAL`) and a post to a full queue (ours `QueueFull`, libmlx5
//! `ENOMEM`: the head has reached the tail).
//!
//! One difference, by design: ours skips empty entries (a zero byte count means 2 GiB to an
//! mlx5 device), as libmlx5 does for a QP's receive queue but not for an SRQ's; the C side is
//! given the list without its empty entries.

use std::collections::VecDeque;

use zverbs_core::{Completion, PollCq, PostError, PostRecv, RecvWr, Sge, WcStatus};
use zverbs_crosscheck::probe::{self, CSharedRecvQueue};
use zverbs_crosscheck::{DeviceMem, SplitMix64};
use zverbs_mlx5dv::prm::cqe::{Cqe64, op};
use zverbs_mlx5dv::prm::wqe::srq_max_gs;
use zverbs_mlx5dv::{
    CompletionQueue, CqBinding, CqLayout, RqRef, SharedRecvQueue, SqRef, SrqLayout, SrqRef,
    SrqSlot, SrqState,
};

/// An SRQ shape: WQEs and their stride.
#[derive(Clone, Copy, Debug)]
struct Config {
    nwqes: u32,
    stride: u32,
}

const CONFIGS: &[Config] = &[
    Config {
        nwqes: 2,
        stride: 32,
    },
    Config {
        nwqes: 4,
        stride: 64,
    },
    Config {
        nwqes: 16,
        stride: 32,
    },
    Config {
        nwqes: 64,
        stride: 128,
    },
    Config {
        nwqes: 256,
        stride: 64,
    },
    Config {
        nwqes: 8,
        stride: 512,
    },
];

/// Receives each configuration posts at least: past the 16-bit doorbell counter's wrap.
const MIN_RECEIVES: u32 = 0x1_0000 + 1000;

const EINVAL: i32 = 22;
const ENOMEM: i32 = 12;

#[derive(Debug, Default)]
struct Stats {
    receives: u64,
    batches: u64,
    empty_entries: u64,
    full_lists: u64,
    completions: u64,
    out_of_order: u64,
    refused_sges: u64,
    refused_full: u64,
    ring_checks: u64,
}

type Cq<'a> = CompletionQueue<&'a [CqBinding<SqRef<'a>, RqRef<'a>, SrqRef<'a>>]>;

struct Run<'a> {
    cfg: Config,
    seed: u64,
    rng: &'a mut SplitMix64,
    stats: &'a mut Stats,
    qpn: u32,
    ring: &'a DeviceMem,
    dbrec: &'a DeviceMem,
    cq_ring: &'a DeviceMem,
    cqe_cnt: u32,
    cq_pi: u32,
    c: CSharedRecvQueue,
    srq: SharedRecvQueue<SrqRef<'a>>,
    cq: Cq<'a>,
    /// Posted, not completed: (WQE, wr_id).
    outstanding: Vec<(u32, u64)>,
    next_wr_id: u64,
    steps: u64,
}

impl Run<'_> {
    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {:#x}, {:?}, receive #{} (step {}): {what}",
            self.seed,
            self.cfg,
            self.srq.posted(),
            self.steps
        );
    }

    fn max_gs(&self) -> usize {
        srq_max_gs(self.cfg.stride as usize)
    }

    /// A random list of at most `max` entries, some of them empty.
    fn list(&mut self, max: usize) -> Vec<Sge> {
        let n = self.rng.range(0, max as u64) as usize;
        (0..n)
            .map(|_| {
                let length = if self.rng.chance(1, 5) {
                    0
                } else {
                    self.rng.edgy_u32().max(1)
                };
                Sge::new(self.rng.edgy_u64(), length, self.rng.edgy_u32())
            })
            .collect()
    }

    fn check_dbrec(&self) {
        let ours = self.dbrec.to_vec();
        if ours[..] != self.c.dbrec_bytes() {
            self.fail(&format!(
                "doorbell record {ours:02x?}, libmlx5 {:02x?}",
                self.c.dbrec_bytes()
            ));
        }
    }

    fn check_ring(&mut self) {
        let (ours, theirs) = (self.ring.to_vec(), self.c.ring().to_vec());
        if ours != theirs {
            let at: Vec<usize> = (0..ours.len()).filter(|&i| ours[i] != theirs[i]).collect();
            self.fail(&format!("rings differ at bytes {at:?}"));
        }
        self.stats.ring_checks += 1;
    }

    /// Posts `lists` (one `post`, or one `post_all`) on both sides and compares.
    fn post(&mut self, lists: &[Vec<Sge>]) {
        let stride = self.cfg.stride as usize;
        let head = self.srq.head();
        if head != self.c.head() {
            self.fail(&format!(
                "heads differ: ours {head}, libmlx5 {}",
                self.c.head()
            ));
        }
        let mut used = Vec::new();
        for sgl in lists {
            let filtered: Vec<Sge> = sgl.iter().copied().filter(|s| s.length != 0).collect();
            self.stats.empty_entries += (sgl.len() - filtered.len()) as u64;
            self.stats.full_lists += u64::from(filtered.len() == self.max_gs());
            let idx = self
                .c
                .post(&filtered)
                .unwrap_or_else(|e| self.fail(&format!("libmlx5 refused {sgl:?}: errno {e}")));
            used.push((idx, self.next_wr_id));
            self.next_wr_id += 1;
        }
        let wrs: Vec<RecvWr<'_>> = lists
            .iter()
            .zip(&used)
            .map(|(sgl, &(_, wr_id))| RecvWr::new(wr_id, sgl))
            .collect();
        let ours_head = self.srq.head();
        let res = if let [wr] = &wrs[..] {
            // SAFETY: the entries are never written to (nothing executes the receives).
            unsafe { self.srq.post(wr) }.map_err(|e| format!("{e:?}"))
        } else {
            self.stats.batches += 1;
            // SAFETY: as above.
            unsafe { self.srq.post_all(&wrs) }.map_err(|e| format!("{e:?}"))
        };
        if let Err(e) = res {
            self.fail(&format!("SharedRecvQueue refused {lists:?}: {e}"));
        }
        if used[0].0 != ours_head || self.srq.head() != self.c.head() {
            self.fail(&format!(
                "WQEs used: libmlx5 {used:?}, ours from {ours_head}; heads now ours {}, \
                 libmlx5 {}",
                self.srq.head(),
                self.c.head()
            ));
        }
        let (ring, c_ring) = (self.ring.to_vec(), self.c.ring().to_vec());
        for &(idx, _) in &used {
            let at = idx as usize * stride;
            let (ours, theirs) = (&ring[at..at + stride], &c_ring[at..at + stride]);
            if ours != theirs {
                self.fail(&format!(
                    "WQE {idx} differs:\n  ours    {ours:02x?}\n  libmlx5 {theirs:02x?}"
                ));
            }
        }
        self.check_dbrec();
        self.stats.receives += lists.len() as u64;
        self.outstanding.extend(used);
    }

    /// A refused receive: nothing changes on either side.
    fn refuse(&mut self, sgl: &[Sge], full: bool) {
        let ring = self.ring.to_vec();
        let (db, head, posted) = (self.dbrec.to_vec(), self.srq.head(), self.srq.posted());
        let (c_head, c_db) = (self.c.head(), self.c.dbrec_bytes());
        // SAFETY: nothing is written.
        let ours = unsafe { self.srq.post(&RecvWr::new(0, sgl)) };
        let ok = match ours {
            Err(PostError::QueueFull { needed: 1, free: 0 }) => full,
            Err(PostError::TooManySges { got, max }) => {
                !full && got as usize == sgl.len() && max as usize == self.max_gs()
            }
            _ => false,
        };
        if !ok {
            self.fail(&format!(
                "SharedRecvQueue gave {ours:?} (full: {full}) for {sgl:?}"
            ));
        }
        // The C side gets the whole list: its length is what is refused.
        self.c.clear_written();
        let theirs = self.c.post(sgl);
        if theirs != Err(if full { ENOMEM } else { EINVAL }) {
            self.fail(&format!(
                "libmlx5 gave {theirs:?} (full: {full}) for {sgl:?}"
            ));
        }
        if self.ring.to_vec() != ring
            || self.dbrec.to_vec() != db
            || self.srq.head() != head
            || self.srq.posted() != posted
        {
            self.fail("SharedRecvQueue changed something for a refused receive");
        }
        let c_wrote = self.c.written().to_vec().iter().any(|&w| w != 0);
        if c_wrote || self.c.head() != c_head || self.c.dbrec_bytes() != c_db {
            self.fail("libmlx5 changed something for a refused receive");
        }
        if full {
            self.stats.refused_full += 1;
        } else {
            self.stats.refused_sges += 1;
        }
    }

    /// Completes a random subset of the outstanding receives in random order: CQEs polled by
    /// ours, the same frees on the C side.
    fn complete(&mut self) {
        let n = self.rng.range(1, self.outstanding.len() as u64) as usize;
        // Shuffle (Fisher-Yates) and take the first `n`.
        for i in (1..self.outstanding.len()).rev() {
            let j = self.rng.below(i as u64 + 1) as usize;
            self.outstanding.swap(i, j);
        }
        let done: Vec<(u32, u64)> = self.outstanding.drain(..n).collect();
        let oldest = self.outstanding.iter().map(|o| o.1).min();
        self.stats.out_of_order += done
            .iter()
            .filter(|d| oldest.is_some_and(|o| o < d.1))
            .count() as u64;
        let mut expect = VecDeque::new();
        for &(idx, wr_id) in &done {
            let mut cqe = [0u8; 64];
            let mut v = Cqe64::new_unchecked(&mut cqe);
            v.set_sop_drop_qpn(self.qpn);
            v.set_wqe_counter(idx as u16);
            v.set_byte_cnt(self.rng.next_u32() >> 1);
            let owner = ((self.cq_pi / self.cqe_cnt) & 1) as u8;
            v.set_op_own((op::RESP_SEND << 4) | owner);
            let slot = (self.cq_pi % self.cqe_cnt) as usize;
            self.cq_ring.write_at(slot * 64, &cqe);
            self.cq_pi = self.cq_pi.wrapping_add(1);
            expect.push_back(wr_id);
            self.c.free(idx);
        }
        let mut wc = vec![Completion::EMPTY; done.len() + 1];
        let got = self.cq.poll(&mut wc);
        if got != done.len() {
            self.fail(&format!(
                "polled {got} completions, expected {}",
                done.len()
            ));
        }
        for c in &wc[..got] {
            let want = expect.pop_front();
            if Some(c.wr_id) != want || c.status != WcStatus::Success {
                self.fail(&format!("completion {c:?}, expected wr_id {want:?}"));
            }
        }
        self.stats.completions += got as u64;
        // The freed WQEs are linked behind the tail on both sides, in the same order.
        let stride = self.cfg.stride as usize;
        let tail = self.c.tail();
        let at = tail as usize * stride;
        let (ours, theirs) = (self.ring.to_vec(), self.c.ring().to_vec());
        if tail != done[done.len() - 1].0 || ours[at..at + 16] != theirs[at..at + 16] {
            self.fail(&format!("free list tail {tail} after freeing {done:?}"));
        }
    }

    fn run(&mut self) {
        let max_gs = self.max_gs();
        while self.srq.posted() < MIN_RECEIVES {
            self.steps += 1;
            let free = self.srq.free();
            if free != self.cfg.nwqes - 1 - self.outstanding.len() as u32 {
                self.fail(&format!(
                    "{free} free, {} outstanding",
                    self.outstanding.len()
                ));
            }
            match self.rng.below(20) {
                0 => {
                    let mut sgl = self.list(max_gs);
                    let extra = self.rng.range(1, 2) as usize;
                    sgl.extend((0..max_gs + extra - sgl.len()).map(|_| Sge::new(1, 1, 1)));
                    self.refuse(&sgl, false);
                }
                _ if free == 0 => {
                    if self.rng.chance(1, 4) {
                        let sgl = self.list(max_gs);
                        self.refuse(&sgl, true);
                    }
                    self.complete();
                }
                1..=7 if !self.outstanding.is_empty() => self.complete(),
                _ => {
                    let n = if free >= 2 && self.rng.chance(1, 4) {
                        self.rng.range(2, u64::from(free.min(8))) as usize
                    } else {
                        1
                    };
                    let lists: Vec<Vec<Sge>> = (0..n).map(|_| self.list(max_gs)).collect();
                    self.post(&lists);
                }
            }
            self.check_ring();
        }
    }
}

fn run_config(cfg: Config, rng: &mut SplitMix64, seed: u64, stats: &mut Stats) {
    let (nwqes, stride) = (cfg.nwqes, cfg.stride);
    let len = nwqes as usize * stride as usize;
    let mut initial = vec![0u8; len];
    rng.fill(&mut initial);
    // The free list as libmlx5 links it: 0 -> 1 -> ... -> nwqes - 1, the tail.
    probe::srq_link(&mut initial, stride, 0, nwqes - 1);
    let ring = DeviceMem::new(len, 4096);
    ring.write_at(0, &initial);
    let dbrec = DeviceMem::new(4, 4);
    let cqe_cnt = nwqes.max(2);
    let cq_ring = DeviceMem::new(cqe_cnt as usize * 64, 4096);
    for i in 0..cqe_cnt as usize {
        cq_ring.write_at(i * 64 + 63, &[0xf0]); // MLX5_CQE_INVALID << 4, as libmlx5 starts
    }
    let cq_dbrec = DeviceMem::new(8, 8);
    let qpn = rng.below(1 << 24) as u32;
    let srqn = rng.below(1 << 24) as u32;

    let c = CSharedRecvQueue::new(nwqes, stride, 0, nwqes - 1, &initial);
    let layout = SrqLayout {
        srqn,
        buf: ring.ptr(),
        dbrec: dbrec.ptr().cast(),
        stride,
        wqe_cnt: nwqes,
        head: 0,
        tail: nwqes - 1,
    };
    let slots: Vec<SrqSlot> = (0..nwqes).map(|_| SrqSlot::new()).collect();
    // SAFETY: the ring outlives the state; its free list runs from 0 to nwqes - 1 (linked
    // above); nothing was posted.
    let state = unsafe { SrqState::new(&layout, &slots[..]) }.expect("SrqState::new");
    let bindings = [CqBinding::<SqRef<'_>, RqRef<'_>, SrqRef<'_>>::with_srq(
        qpn, None, &state,
    )];
    // SAFETY: the ring and doorbell record outlive the queue, the only poster; `state` was
    // made from the same layout and is bound to `cq` below, the one CQ of the SRQ's QP.
    let srq = unsafe { SharedRecvQueue::new(&layout, &state) }.expect("SharedRecvQueue::new");
    let cq_layout = CqLayout {
        buf: cq_ring.ptr(),
        dbrec: cq_dbrec.ptr().cast(),
        cqe_cnt,
        cqe_size: 64,
        cqn: 1,
    };
    // SAFETY: the CQE ring and its doorbell record outlive the poller, which is the only one;
    // it is new, and its one binding carries the SRQ's state.
    let cq =
        unsafe { CompletionQueue::new(&cq_layout, &bindings[..]) }.expect("CompletionQueue::new");

    Run {
        cfg,
        seed,
        rng,
        stats,
        qpn,
        ring: &ring,
        dbrec: &dbrec,
        cq_ring: &cq_ring,
        cqe_cnt,
        cq_pi: 0,
        c,
        srq,
        cq,
        outstanding: Vec::new(),
        next_wr_id: 1,
        steps: 0,
    }
    .run();
}

#[test]
fn shared_recv_queue_matches_libmlx5_srq() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_54a5, 13);
    let mut stats = Stats::default();
    for cfg in CONFIGS {
        let before = stats.receives;
        run_config(*cfg, &mut rng, seed, &mut stats);
        eprintln!(
            "srq queue: {:>6} receives on {} WQEs of {} bytes",
            stats.receives - before,
            cfg.nwqes,
            cfg.stride
        );
    }
    let s = &stats;
    eprintln!(
        "srq queue: {} randomized receives compared with libmlx5's mlx5_post_srq_recv ({} \
         batches, {} filling their WQE, {} empty entries skipped); {} completions polled and \
         freed as mlx5_free_srq_wqe frees them ({} before an older receive); refused, nothing \
         changed: {} too many entries, {} full; {} whole-ring comparisons",
        s.receives,
        s.batches,
        s.full_lists,
        s.empty_entries,
        s.completions,
        s.out_of_order,
        s.refused_sges,
        s.refused_full,
        s.ring_checks,
    );
    assert!(s.batches > 0 && s.full_lists > 0 && s.empty_entries > 0);
    assert!(s.out_of_order > 0 && s.refused_sges > 0 && s.refused_full > 0);
}

//! Whole WQEs: zverbs' `SendQueue` writes, request after request, the bytes that libmlx5's
//! `_mlx5_post_send` lays out for the same requests (modelled by the C probe with
//! `mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg` and the header's structs), writes the doorbell
//! record as `post_send_db` does, rings BlueFlame or the doorbell, and gets its credits back
//! through CQEs.
//!
//! Both queues run side by side over plain heap memory: a ring of `wqe_cnt` basic blocks that
//! starts as the same random bytes on both sides, a doorbell record, a BlueFlame register of
//! two buffers, and (for ours) a CQ whose CQEs this test writes as the device would. Requests
//! are random (every operation, 0..=max SGEs with zero-length ones among them, inline
//! payloads up to the limit, signaled or not, fence, solicited, edge values in every field),
//! posted in rounds of random length, so the producer counter drifts over every position of
//! the ring and WQEs wrap its end; each configuration runs past the 16-bit WQE index wrap.
//!
//! After every post the WQE's `ds × 16` bytes (following the ring's wrap) must equal
//! libmlx5's, except where libmlx5 stores nothing and leaves stale ring bytes (the padding
//! after inline data, the compare word of a fetch-and-add): there ours must be zero. Then the
//! whole ring must be equal, so neither side wrote outside the WQE. After every ring the
//! doorbell record must equal libmlx5's, and the BlueFlame register must hold, in the buffer
//! whose turn it is, the WQE's basic blocks (one WQE since the last ring that fits the buffer)
//! or else the first 8 bytes of the last WQE (the doorbell), and nothing else. That is
//! zverbs' policy; libmlx5 44 takes the BlueFlame path only when, in addition, the WQE has more
//! than one segment and carries inline data or the context prefers BlueFlame, and rings the
//! doorbell otherwise. Both are valid for the device.

use std::fmt::Write as _;
use std::ptr::NonNull;

use zverbs_core::WcStatus;
use zverbs_core::{Completion, PollCq, PostSend, RemoteBuf, SendFlags, SendOp, SendWr, Sge};
use zverbs_crosscheck::ffi::op;
use zverbs_crosscheck::probe::{CRequest, CSendQueue};
use zverbs_crosscheck::{DeviceMem, SplitMix64};
use zverbs_mlx5dv::prm::cqe::Cqe64;
use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::prm::wqe::inline_ds;
use zverbs_mlx5dv::{
    BfLayout, CompletionQueue, CqBinding, CqLayout, QpLayout, RqRef, SendQueue, SqCaps, SqRef,
    SqSlot, SqState, WqLayout,
};

/// A queue pair shape: what the control path would have negotiated.
#[derive(Clone, Copy, Debug)]
struct Config {
    name: &'static str,
    /// Basic blocks in the send ring.
    wqe_cnt: u32,
    max_send_sge: u32,
    max_inline_data: u32,
    /// BlueFlame buffer size (0: doorbell only).
    bf_size: u32,
    sig_all: bool,
    /// Run at least this many WQEs (and in any case past the 16-bit WQE index wrap).
    min_wqes: u64,
}

const CONFIGS: &[Config] = &[
    Config {
        name: "4 blocks, 1-block WQEs, BlueFlame 64",
        wqe_cnt: 4,
        max_send_sge: 2,
        max_inline_data: 28,
        bf_size: 64,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "8 blocks, BlueFlame 256",
        wqe_cnt: 8,
        max_send_sge: 4,
        max_inline_data: 60,
        bf_size: 256,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "16 blocks, doorbell only, sq_sig_all",
        wqe_cnt: 16,
        max_send_sge: 8,
        max_inline_data: 124,
        bf_size: 0,
        sig_all: true,
        min_wqes: 10_000,
    },
    Config {
        name: "64 blocks, BlueFlame 256",
        wqe_cnt: 64,
        max_send_sge: 16,
        max_inline_data: 220,
        bf_size: 256,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "32 blocks, 63-segment WQEs, BlueFlame 1024",
        wqe_cnt: 32,
        max_send_sge: 61,
        max_inline_data: 972,
        bf_size: 1024,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "128 blocks, no inline, BlueFlame 512",
        wqe_cnt: 128,
        max_send_sge: 30,
        max_inline_data: 0,
        bf_size: 512,
        sig_all: false,
        min_wqes: 10_000,
    },
];

/// A random request, in a form both sides can be given.
#[derive(Clone, Debug)]
struct Req {
    op: u32,
    sgl: Vec<Sge>,
    flags: SendFlags,
    remote: RemoteBuf,
    imm: u32,
    compare: u64,
    swap_add: u64,
}

impl Req {
    fn send_wr(&self, wr_id: u64) -> SendWr<'_> {
        let (sgl, remote) = (&self.sgl[..], self.remote);
        let op = match self.op {
            op::WRITE => SendOp::Write { sgl, remote },
            op::WRITE_IMM => SendOp::WriteImm {
                sgl,
                remote,
                imm: self.imm,
            },
            op::SEND => SendOp::Send { sgl },
            op::SEND_IMM => SendOp::SendImm { sgl, imm: self.imm },
            op::READ => SendOp::Read { sgl, remote },
            op::CS => SendOp::CompareSwap {
                local: sgl[0],
                remote,
                compare: self.compare,
                swap: self.swap_add,
            },
            op::FA => SendOp::FetchAdd {
                local: sgl[0],
                remote,
                add: self.swap_add,
            },
            _ => SendOp::Nop,
        };
        SendWr::new(wr_id, op).with_flags(self.flags)
    }

    /// The same request for the C side; the `IBV_SEND_*` values equal `SendFlags`' bits
    /// (checked by the layout test).
    fn c_request(&self) -> CRequest<'_> {
        CRequest {
            op: self.op,
            sgl: &self.sgl,
            send_flags: self.flags.bits(),
            remote_addr: self.remote.addr,
            rkey: self.remote.rkey,
            imm: self.imm,
            compare_add: if self.op == op::FA {
                self.swap_add
            } else {
                self.compare
            },
            swap: self.swap_add,
            ..CRequest::default()
        }
    }

    fn mlx5_opcode(&self) -> u8 {
        match self.op {
            op::WRITE => opcode::RDMA_WRITE,
            op::WRITE_IMM => opcode::RDMA_WRITE_IMM,
            op::SEND => opcode::SEND,
            op::SEND_IMM => opcode::SEND_IMM,
            op::READ => opcode::RDMA_READ,
            op::CS => opcode::ATOMIC_CS,
            op::FA => opcode::ATOMIC_FA,
            _ => opcode::NOP,
        }
    }

    fn nop(flags: SendFlags) -> Self {
        Self {
            op: op::NOP,
            sgl: Vec::new(),
            flags,
            remote: RemoteBuf::default(),
            imm: 0,
            compare: 0,
            swap_add: 0,
        }
    }
}

/// What the BlueFlame register holds before each ring, to see exactly what was written.
const MARK: u8 = 0x5a;

/// `total` bytes split over `n` entries at random (some of them empty).
fn split(rng: &mut SplitMix64, total: u64, n: usize) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    let mut cuts: Vec<u64> = (0..n - 1).map(|_| rng.range(0, total)).collect();
    cuts.push(0);
    cuts.push(total);
    cuts.sort_unstable();
    cuts.windows(2).map(|w| w[1] - w[0]).collect()
}

fn random_req(rng: &mut SplitMix64, cfg: &Config, payload: &[u8]) -> Req {
    let ops = [
        op::WRITE,
        op::WRITE_IMM,
        op::SEND,
        op::SEND_IMM,
        op::READ,
        op::CS,
        op::FA,
        op::NOP,
    ];
    let op = rng.pick(&ops);
    let mut flags = SendFlags::NONE;
    if rng.chance(1, 3) {
        flags |= SendFlags::SIGNALED;
    }
    if rng.chance(1, 8) {
        flags |= SendFlags::FENCE;
    }
    if rng.chance(1, 8) {
        flags |= SendFlags::SOLICITED;
    }
    let mut remote = RemoteBuf::new(rng.edgy_u64(), rng.edgy_u32());
    let mut sgl = Vec::new();
    match op {
        op::CS | op::FA => {
            remote.addr &= !7;
            sgl.push(Sge::new(rng.edgy_u64() & !7, 8, rng.edgy_u32()));
        }
        op::NOP => {}
        _ => {
            let n = rng.range(0, u64::from(cfg.max_send_sge)) as usize;
            let can_inline = op != op::READ && cfg.max_inline_data > 0;
            if can_inline && rng.chance(1, 3) {
                flags |= SendFlags::INLINE;
                let max = u64::from(cfg.max_inline_data);
                let total = if rng.chance(1, 4) {
                    rng.pick(&[0, 1, 12, 13, max - 1, max]).min(max)
                } else {
                    rng.range(0, max)
                };
                for len in split(rng, total, n) {
                    let off = rng.range(0, payload.len() as u64 - len);
                    let addr = payload.as_ptr() as u64 + off;
                    sgl.push(Sge::new(addr, len as u32, rng.edgy_u32()));
                }
            } else {
                // Keep the message within 2 GiB, the largest an RDMA message may be.
                let per = (1u64 << 31) / n.max(1) as u64;
                for _ in 0..n {
                    let len = match rng.below(6) {
                        0 => 0,
                        1 => rng.range(1, 64),
                        2 => per,
                        _ => rng.range(1, per),
                    };
                    sgl.push(Sge::new(rng.edgy_u64(), len as u32, rng.edgy_u32()));
                }
            }
        }
    }
    Req {
        op,
        sgl,
        flags,
        remote,
        imm: rng.edgy_u32(),
        compare: rng.edgy_u64(),
        swap_add: rng.edgy_u64(),
    }
}

/// What the run saw, printed at the end.
#[derive(Debug, Default)]
struct Stats {
    wqes: u64,
    per_op: [u64; 8],
    inline: u64,
    zero_len_sges: u64,
    wrapped: u64,
    inline_wrapped: u64,
    index_wraps: u64,
    left_by_libmlx5: u64,
    batches: u64,
    blueflame: u64,
    doorbell: u64,
    completions: u64,
}

fn hex(bytes: &[u8]) -> String {
    let mut s = String::new();
    for (i, row) in bytes.chunks(16).enumerate() {
        let _ = write!(s, "\n    {:4}:", i * 16);
        for b in row {
            let _ = write!(s, " {b:02x}");
        }
    }
    s
}

/// The bytes of the WQE of `ds` segments at block `start`, following the ring's wrap.
fn wqe_bytes(ring: &[u8], start: u32, len: usize) -> Vec<u8> {
    let base = start as usize * 64 % ring.len();
    (0..len).map(|i| ring[(base + i) % ring.len()]).collect()
}

/// One configuration's run: both queues side by side.
struct Run<'a> {
    cfg: Config,
    seed: u64,
    rng: &'a mut SplitMix64,
    stats: &'a mut Stats,
    payload: Vec<u8>,
    qpn: u32,
    ring: &'a DeviceMem,
    dbrec: &'a DeviceMem,
    bf: &'a DeviceMem,
    cq_ring: &'a DeviceMem,
    c: CSendQueue,
    sq: SendQueue<SqRef<'a>>,
    cq: CompletionQueue<&'a [CqBinding<SqRef<'a>, RqRef<'a>>]>,
    /// CQEs written so far (the device's CQ producer counter).
    cq_pi: u32,
    /// Which BlueFlame buffer the next ring uses (byte offset).
    bf_offset: usize,
    /// WQEs since the last ring: (first block, blocks).
    pending: Vec<(u32, u32)>,
    /// Signaled WQEs not completed yet: (first block, wr_id, mlx5 opcode).
    signaled: Vec<(u32, u64, u8)>,
    next_wr_id: u64,
    /// Ring positions at which a WQE started.
    seen_starts: Vec<bool>,
}

impl Run<'_> {
    fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {:#x}, config {:?}, WQE #{} (producer {}): {what}",
            self.seed,
            self.cfg.name,
            self.stats.wqes,
            self.c.producer()
        );
    }

    /// Posts `reqs` on both sides (one `post`, or a `post_all` that rings once)
    /// and compares the WQEs and the rings.
    fn post(&mut self, reqs: &[Req]) {
        let first = self.sq.producer();
        if first != self.c.producer() {
            self.fail(&format!(
                "producers differ: ours {first}, C {}",
                self.c.producer()
            ));
        }
        // The C side: (first block, ds, wr_id) of each WQE.
        self.c.clear_written();
        let mut posted = Vec::with_capacity(reqs.len());
        for req in reqs {
            let start = self.c.producer();
            // SAFETY: inline entries point into `self.payload`, which is alive and readable.
            let ds = unsafe { self.c.post(&req.c_request()) }.unwrap_or_else(|e| {
                self.fail(&format!("the C builder refused {req:?}: errno {e}"))
            });
            posted.push((start, ds, self.next_wr_id));
            self.next_wr_id += 1;
        }

        let wrs: Vec<SendWr<'_>> = reqs
            .iter()
            .zip(&posted)
            .map(|(req, &(_, _, wr_id))| req.send_wr(wr_id))
            .collect();
        if let [wr] = &wrs[..] {
            // SAFETY: inline entries point into `self.payload`; the other entries are never
            // read (nothing executes the WQEs).
            if let Err(e) = unsafe { self.sq.stage(wr) } {
                self.fail(&format!("SendQueue refused {:?}: {e:?}", reqs[0]));
            }
        } else {
            self.bf.fill(MARK);
            // SAFETY: as above.
            if let Err(e) = unsafe { self.sq.post_all(&wrs) } {
                self.fail(&format!("SendQueue refused the batch {reqs:?}: {e:?}"));
            }
        }
        if self.c.producer() != self.sq.producer() {
            self.fail(&format!(
                "WQEs of ds {:?}: producer went {first} -> ours {}, C {}",
                posted.iter().map(|p| p.1).collect::<Vec<_>>(),
                self.sq.producer(),
                self.c.producer()
            ));
        }

        let ours = self.ring.to_vec();
        let mut theirs = self.c.ring().to_vec();
        let written = self.c.written().to_vec();
        let ring_len = ours.len();
        for (req, &(start, ds, wr_id)) in reqs.iter().zip(&posted) {
            let base = (start % self.cfg.wqe_cnt) as usize * 64;
            let len = ds as usize * 16;
            let mut diffs = Vec::new();
            for i in 0..len {
                let at = (base + i) % ring_len;
                if written[at] != 0 {
                    if ours[at] != theirs[at] {
                        diffs.push(i);
                    }
                } else {
                    // libmlx5 leaves this byte as it was; ours writes zero.
                    if ours[at] != 0 {
                        diffs.push(i);
                    }
                    self.stats.left_by_libmlx5 += 1;
                    theirs[at] = ours[at];
                    self.c.ring().write_at(at, &[ours[at]]);
                }
            }
            if !diffs.is_empty() {
                self.fail(&format!(
                    "WQE at block {start} differs at bytes {diffs:?} of {len}, {req:?}\n  \
                     ours:{}\n  libmlx5:{}\n  (bytes libmlx5 leaves as they were must be zero \
                     in ours)",
                    hex(&wqe_bytes(&ours, start, len)),
                    hex(&wqe_bytes(&theirs, start, len)),
                ));
            }

            let blocks = ds.div_ceil(4);
            let s = &mut *self.stats;
            s.wqes += 1;
            s.per_op[req.op as usize] += 1;
            s.inline += u64::from(req.flags.contains(SendFlags::INLINE) && !req.sgl.is_empty());
            s.zero_len_sges += req.sgl.iter().filter(|e| e.length == 0).count() as u64;
            let wraps = (start % self.cfg.wqe_cnt) + blocks > self.cfg.wqe_cnt;
            s.wrapped += u64::from(wraps);
            s.inline_wrapped += u64::from(wraps && req.flags.contains(SendFlags::INLINE));
            s.index_wraps += u64::from(start >> 16 != start.wrapping_add(blocks) >> 16);
            self.seen_starts[(start % self.cfg.wqe_cnt) as usize] = true;
            self.pending.push((start, blocks));
            if self.cfg.sig_all || req.flags.contains(SendFlags::SIGNALED) {
                self.signaled.push((start, wr_id, req.mlx5_opcode()));
            }
        }
        if ours != theirs {
            let at: Vec<usize> = (0..ring_len).filter(|&i| ours[i] != theirs[i]).collect();
            self.fail(&format!(
                "ring bytes outside the WQEs (blocks {first}..{}) differ at {at:?}",
                self.sq.producer()
            ));
        }
        if reqs.len() > 1 {
            self.stats.batches += 1;
            self.c.ring_db();
            self.check_ring();
        }
    }

    /// Rings on both sides and checks the doorbell record and the BlueFlame register.
    fn ring(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        self.bf.fill(MARK);
        self.sq.ring();
        self.c.ring_db();
        self.check_ring();
    }

    /// Checks the doorbell record and the BlueFlame register after ringing `self.pending`.
    fn check_ring(&mut self) {
        let &(start, blocks) = self.pending.last().expect("something to ring");
        let db = self.dbrec.to_vec();
        let pi = self.sq.producer();
        if db[..] != self.c.dbrec_bytes() || db[4..] != (pi & 0xffff).to_be_bytes() {
            self.fail(&format!(
                "doorbell record {db:02x?}, libmlx5 {:02x?}, producer {pi:#x}",
                self.c.dbrec_bytes()
            ));
        }

        let ring = self.ring.to_vec();
        let bf_size = self.cfg.bf_size as usize;
        let mut want = vec![MARK; self.bf.len()];
        let len = blocks as usize * 64;
        if self.pending.len() == 1 && bf_size != 0 && len <= bf_size {
            want[self.bf_offset..self.bf_offset + len]
                .copy_from_slice(&wqe_bytes(&ring, start, len));
            self.stats.blueflame += 1;
        } else {
            want[self.bf_offset..self.bf_offset + 8].copy_from_slice(&wqe_bytes(&ring, start, 8));
            self.stats.doorbell += 1;
        }
        let got = self.bf.to_vec();
        if got != want {
            self.fail(&format!(
                "BlueFlame register after ringing {} WQE(s), last at block {start} ({blocks} \
                 blocks), buffer offset {}:\n  got:{}\n  want:{}",
                self.pending.len(),
                self.bf_offset,
                hex(&got),
                hex(&want)
            ));
        }
        self.bf_offset ^= bf_size;
        self.pending.clear();
    }

    /// Plays the device: one requester CQE per signaled WQE, then polls them all.
    fn complete(&mut self) {
        let cqe_cnt = self.cfg.wqe_cnt;
        for &(start, _, opc) in &self.signaled {
            let mut cqe = [0u8; 64];
            let mut v = Cqe64::new_unchecked(&mut cqe);
            v.set_sop_drop_qpn((u32::from(opc) << 24) | self.qpn);
            v.set_wqe_counter(start as u16);
            v.set_op_own(((self.cq_pi / cqe_cnt) & 1) as u8);
            let slot = (self.cq_pi % cqe_cnt) as usize;
            self.cq_ring.write_at(slot * 64, &cqe);
            self.cq_pi = self.cq_pi.wrapping_add(1);
        }
        let mut wc = vec![Completion::EMPTY; self.signaled.len() + 1];
        let n = self.cq.poll(&mut wc);
        if n != self.signaled.len() {
            self.fail(&format!(
                "polled {n} completions, expected {}",
                self.signaled.len()
            ));
        }
        for (c, &(_, wr_id, _)) in wc.iter().zip(&self.signaled) {
            if c.wr_id != wr_id || c.status != WcStatus::Success || c.qp_num != self.qpn {
                self.fail(&format!("completion {c:?}, expected wr_id {wr_id}"));
            }
        }
        self.stats.completions += n as u64;
        self.signaled.clear();
        let free = self.sq.free_blocks();
        if free != self.cfg.wqe_cnt {
            self.fail(&format!("{free} free blocks after completing everything"));
        }
    }

    /// Posts rounds until the configuration has run long enough.
    fn run(&mut self) {
        let cfg = self.cfg;
        let max_ds = 2 + (cfg.max_send_sge as usize).max(inline_ds(cfg.max_inline_data as usize));
        let max_blocks = max_ds.div_ceil(4) as u32;
        let start_wqes = self.stats.wqes;
        while self.stats.wqes - start_wqes < cfg.min_wqes
            || self.sq.producer() < 0x1_0000 + cfg.wqe_cnt
        {
            let mut last_signaled = true;
            let mut posted = 0;
            // Leave room for a closing signaled NOP.
            loop {
                let free = self.sq.free_blocks();
                if free <= max_blocks || (posted > 0 && self.rng.chance(1, 6)) {
                    break;
                }
                // Now and then a batch, as many as surely fit.
                let fit = (free - 1) / max_blocks;
                let n = if fit >= 2 && self.rng.chance(1, 5) {
                    self.rng.range(2, u64::from(fit.min(8))) as usize
                } else {
                    1
                };
                let reqs: Vec<Req> = (0..n)
                    .map(|_| random_req(self.rng, &cfg, &self.payload))
                    .collect();
                self.post(&reqs);
                let last = &reqs[n - 1];
                last_signaled = cfg.sig_all || last.flags.contains(SendFlags::SIGNALED);
                posted += n;
                if n == 1 && self.rng.chance(1, 2) {
                    self.ring();
                }
            }
            if !last_signaled {
                self.post(&[Req::nop(SendFlags::SIGNALED)]);
            }
            self.ring();
            self.complete();
        }
        let unseen: Vec<usize> = (0..cfg.wqe_cnt as usize)
            .filter(|&i| !self.seen_starts[i])
            .collect();
        if !unseen.is_empty() {
            self.fail(&format!("no WQE started at ring blocks {unseen:?}"));
        }
    }
}

fn run_config(cfg: Config, rng: &mut SplitMix64, seed: u64, stats: &mut Stats) {
    let wqe_cnt = cfg.wqe_cnt;
    let ring_len = wqe_cnt as usize * 64;
    let mut initial = vec![0u8; ring_len];
    rng.fill(&mut initial);
    let ring = DeviceMem::new(ring_len, 4096);
    ring.write_at(0, &initial);
    let dbrec = DeviceMem::new(8, 8);
    let bf_len = if cfg.bf_size == 0 {
        8
    } else {
        2 * cfg.bf_size as usize
    };
    let bf = DeviceMem::new(bf_len, 64);
    // At most one signaled WQE per block is outstanding, so a CQE per block is enough.
    let cq_ring = DeviceMem::new(ring_len, 4096);
    for i in 0..wqe_cnt as usize {
        cq_ring.write_at(i * 64 + 63, &[0xf0]); // MLX5_CQE_INVALID << 4, as libmlx5 starts
    }
    let cq_dbrec = DeviceMem::new(8, 8);
    let mut payload = vec![0u8; 2048];
    rng.fill(&mut payload);

    let qpn = rng.below(1 << 24) as u32;
    let c = CSendQueue::new(wqe_cnt, qpn, cfg.sig_all, cfg.max_inline_data, &initial);
    let layout = QpLayout {
        qpn,
        dbrec: dbrec.ptr().cast(),
        sq: WqLayout {
            buf: ring.ptr(),
            wqe_cnt,
            stride: 64,
        },
        rq: WqLayout {
            buf: NonNull::dangling(),
            wqe_cnt: 0,
            stride: 0,
        },
        bf: BfLayout {
            reg: bf.ptr(),
            size: cfg.bf_size,
        },
    };
    let caps = SqCaps {
        max_send_sge: cfg.max_send_sge,
        max_inline_data: cfg.max_inline_data,
        sig_all: cfg.sig_all,
        max_signaled: wqe_cnt,
        transport: zverbs_core::Transport::Rc,
    };
    let cq_layout = CqLayout {
        buf: cq_ring.ptr(),
        dbrec: cq_dbrec.ptr().cast(),
        cqe_cnt: wqe_cnt,
        cqe_size: 64,
        cqn: 1,
    };
    let slots: Vec<SqSlot> = (0..wqe_cnt).map(|_| SqSlot::new()).collect();
    let state = SqState::new(&slots[..]).expect("slot storage");
    let bindings = [CqBinding::send_only(qpn, &state)];
    // SAFETY: the ring, doorbell record and BlueFlame register (2 × bf_size bytes, or 8) are
    // allocations that outlive the queue; nothing else posts to it; the caps fit the ring;
    // `state` is bound only to `cq` below; the producer starts at 0.
    let sq = unsafe { SendQueue::new(&layout, caps, &state) }.expect("SendQueue::new");
    // SAFETY: the CQE ring and its doorbell record outlive the poller, which is the only one;
    // it is new, and its one binding carries the send queue's state.
    let cq =
        unsafe { CompletionQueue::new(&cq_layout, &bindings[..]) }.expect("CompletionQueue::new");

    Run {
        cfg,
        seed,
        rng,
        stats,
        payload,
        qpn,
        ring: &ring,
        dbrec: &dbrec,
        bf: &bf,
        cq_ring: &cq_ring,
        c,
        sq,
        cq,
        cq_pi: 0,
        bf_offset: 0,
        pending: Vec::new(),
        signaled: Vec::new(),
        next_wr_id: 1,
        seen_starts: vec![false; wqe_cnt as usize],
    }
    .run();
}

#[test]
fn send_queue_wqes_match_libmlx5() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_e0e0, 7);
    let mut stats = Stats::default();
    for cfg in CONFIGS {
        let before = stats.wqes;
        run_config(*cfg, &mut rng, seed, &mut stats);
        eprintln!("wqe: {:>6} WQEs on {}", stats.wqes - before, cfg.name);
    }
    let s = &stats;
    eprintln!(
        "wqe: {} randomized WQEs compared with libmlx5's layout (WRITE {}, WRITE_IMM {}, SEND {}, \
         SEND_IMM {}, READ {}, CS {}, FA {}, NOP {}); {} inline, {} zero-length SGEs skipped, \
         {} WQEs wrapping the ring end ({} inline), {} WQE-index wraps, {} bytes libmlx5 leaves stale (zero in \
         ours); {} batches; {} BlueFlame rings, {} doorbell rings; {} completions",
        s.wqes,
        s.per_op[0],
        s.per_op[1],
        s.per_op[2],
        s.per_op[3],
        s.per_op[4],
        s.per_op[5],
        s.per_op[6],
        s.per_op[7],
        s.inline,
        s.zero_len_sges,
        s.wrapped,
        s.inline_wrapped,
        s.index_wraps,
        s.left_by_libmlx5,
        s.batches,
        s.blueflame,
        s.doorbell,
        s.completions,
    );
    assert!(s.wrapped > 0 && s.inline_wrapped > 0 && s.index_wraps >= CONFIGS.len() as u64);
    assert!(s.blueflame > 0 && s.doorbell > 0 && s.batches > 0);
    assert!(s.inline > 0 && s.zero_len_sges > 0);
}

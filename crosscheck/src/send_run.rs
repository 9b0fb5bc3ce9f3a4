//! The harness of the whole-WQE cross-checks (`tests/wqe.rs` for RC, `tests/ud_wqe.rs` for
//! UD): zverbs' `SendQueue` and the probe's model of libmlx5's send queue side by side over
//! plain heap memory, fed the same requests.
//!
//! Each configuration gets a ring of `wqe_cnt` basic blocks that starts as the same random
//! bytes on both sides, a doorbell record, a BlueFlame register of two buffers (or 8 bytes
//! for a doorbell only), and for ours a CQ whose CQEs the harness writes as the device would.
//! Requests are posted in rounds of random length, alone or in batches, so the producer
//! counter drifts over every position of the ring, WQEs wrap its end, and each configuration
//! runs past the 16-bit WQE index wrap.
//!
//! After every post the WQE's `ds × 16` bytes (following the ring's wrap) must equal
//! libmlx5's, except where libmlx5 stores nothing and leaves stale ring bytes: there ours
//! must be zero. Then the whole ring must be equal, so neither side wrote outside the WQE.
//! After every ring the doorbell record must equal libmlx5's, and the BlueFlame register must
//! hold, in the buffer whose turn it is, the WQE's basic blocks (one WQE since the last ring
//! that fits the buffer) or else the first 8 bytes of the last WQE (the doorbell), and nothing
//! else. At the end of each round the harness completes every signaled WQE and polls the
//! completions, which must give every credit back.
//!
//! What differs between the two tests (the requests, what they count, refusals) is a
//! [`Driver`].

use std::fmt::{self, Write as _};
use std::ptr::NonNull;

use zverbs_core::{Completion, PollCq, PostSend, SendFlags, SendWr, Sge, Transport, WcStatus};
use zverbs_mlx5dv::prm::cqe::Cqe64;
use zverbs_mlx5dv::prm::wqe::{UD_HEADER_DS, inline_ds};
use zverbs_mlx5dv::{
    BfLayout, CompletionQueue, Connected, CqBinding, CqLayout, Datagram, Ethernet, LayoutError,
    QpLayout, RqRef, SelfAddressed, SendQueue, SqCaps, SqRef, SqSlot, SqState, WqLayout,
};

use crate::mem::DeviceMem;
use crate::probe::{CRequest, CSq};
use crate::rng::SplitMix64;

/// A queue pair shape: what the control path would have negotiated.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// What the run prints for it.
    pub name: &'static str,
    /// Basic blocks in the send ring.
    pub wqe_cnt: u32,
    /// The most gather entries a request may have.
    pub max_send_sge: u32,
    /// The most inline bytes a request may carry.
    pub max_inline_data: u32,
    /// RC, or UD with its path MTU (the largest datagram).
    pub transport: Transport,
    /// BlueFlame buffer size (0: doorbell only).
    pub bf_size: u32,
    /// `sq_sig_all`.
    pub sig_all: bool,
    /// Run at least this many WQEs (and in any case past the 16-bit WQE index wrap).
    pub min_wqes: u64,
}

/// A request in a form both sides can be given.
pub trait Request: fmt::Debug {
    /// The request for ours.
    fn send_wr(&self, wr_id: u64) -> SendWr<'_>;
    /// The same request for the C side.
    fn c_request(&self) -> CRequest<'_>;
    /// The mlx5 opcode its requester CQE carries.
    fn mlx5_opcode(&self) -> u8;
    /// Its flags.
    fn flags(&self) -> SendFlags;
    /// Its gather list (or inline sources).
    fn sgl(&self) -> &[Sge];
}

/// The transport of the queues: how each side's queue is made.
pub trait Kind: SelfAddressed + Sized {
    /// The segments before the data: control and remote address (RC), control and datagram
    /// (UD).
    const HEADER_DS: usize;

    /// The C side's queue.
    fn c_queue(cfg: &Config, qpn: u32, initial: &[u8]) -> CSq;

    /// Ours.
    ///
    /// # Safety
    ///
    /// As `SendQueue::new` (RC) or `SendQueue::new_ud` (UD).
    unsafe fn send_queue<'a>(
        layout: &QpLayout,
        caps: SqCaps,
        state: SqRef<'a>,
    ) -> Result<SendQueue<SqRef<'a>, Self>, LayoutError>;
}

impl Kind for Connected {
    const HEADER_DS: usize = 2;

    fn c_queue(cfg: &Config, qpn: u32, initial: &[u8]) -> CSq {
        CSq::new(cfg.wqe_cnt, qpn, cfg.sig_all, cfg.max_inline_data, initial)
    }

    unsafe fn send_queue<'a>(
        layout: &QpLayout,
        caps: SqCaps,
        state: SqRef<'a>,
    ) -> Result<SendQueue<SqRef<'a>, Self>, LayoutError> {
        // SAFETY: the caller upholds `SendQueue::new`'s contract.
        unsafe { SendQueue::new(layout, caps, state, None) }
    }
}

impl Kind for Datagram {
    const HEADER_DS: usize = UD_HEADER_DS;

    fn c_queue(cfg: &Config, qpn: u32, initial: &[u8]) -> CSq {
        CSq::new_ud(
            cfg.wqe_cnt,
            qpn,
            cfg.sig_all,
            cfg.max_inline_data,
            cfg.max_send_sge,
            initial,
        )
    }

    unsafe fn send_queue<'a>(
        layout: &QpLayout,
        caps: SqCaps,
        state: SqRef<'a>,
    ) -> Result<SendQueue<SqRef<'a>, Self>, LayoutError> {
        // SAFETY: the caller upholds `SendQueue::new_ud`'s contract.
        unsafe { SendQueue::new_ud(layout, caps, state, None) }
    }
}

/// The minimum inline frame bytes of the raw Ethernet queues the harness makes (libmlx5's 18:
/// `eth_min_inline` reporting any mode but none).
pub const ETH_MIN_INLINE: u16 = 18;

impl Kind for Ethernet {
    /// Control and the Ethernet segment with 18 inlined bytes.
    const HEADER_DS: usize = 3;

    fn c_queue(cfg: &Config, qpn: u32, initial: &[u8]) -> CSq {
        CSq::new_raw(
            cfg.wqe_cnt,
            qpn,
            cfg.sig_all,
            cfg.max_inline_data,
            cfg.max_send_sge,
            u32::from(ETH_MIN_INLINE),
            initial,
        )
    }

    unsafe fn send_queue<'a>(
        layout: &QpLayout,
        caps: SqCaps,
        state: SqRef<'a>,
    ) -> Result<SendQueue<SqRef<'a>, Self>, LayoutError> {
        // SAFETY: the caller upholds `SendQueue::new_eth`'s contract (the frames the tests
        // post point into the harness's payload, readable).
        unsafe { SendQueue::new_eth(layout, caps, ETH_MIN_INLINE, state, None) }
    }
}

/// What a test adds to the harness: its requests, and what it does and counts besides.
pub trait Driver {
    /// The transport of its queues.
    type Kind: Kind;
    /// Its requests.
    type Req: Request;

    /// A random valid request.
    fn random(&mut self, h: &mut Harness<'_, Self::Kind>) -> Self::Req;

    /// A signaled request that closes a round whose last request was unsignaled.
    fn close(&mut self, h: &mut Harness<'_, Self::Kind>) -> Self::Req;

    /// Called before each post of a round, with `free` blocks and WQEs of at most
    /// `max_blocks`: true when it used the turn itself (the round goes on without a post).
    fn interject(&mut self, h: &mut Harness<'_, Self::Kind>, free: u32, max_blocks: u32) -> bool {
        let _ = (h, free, max_blocks);
        false
    }

    /// Counts `req`, which both sides took.
    fn posted(&mut self, req: &Self::Req);
}

/// What every run counts, printed at the end.
#[derive(Debug, Default)]
pub struct Stats {
    /// WQEs compared.
    pub wqes: u64,
    /// WQEs with inline data.
    pub inline: u64,
    /// Empty gather entries (skipped).
    pub zero_len_sges: u64,
    /// WQEs whose blocks continue at the start of the ring.
    pub wrapped: u64,
    /// Of those, inline ones.
    pub inline_wrapped: u64,
    /// WQEs across which the 16-bit WQE index wrapped.
    pub index_wraps: u64,
    /// Bytes libmlx5 left as they were (zero in ours).
    pub left_by_libmlx5: u64,
    /// Batches posted with `post_all`.
    pub batches: u64,
    /// Rings through BlueFlame.
    pub blueflame: u64,
    /// Rings through the doorbell.
    pub doorbell: u64,
    /// Completions polled.
    pub completions: u64,
}

impl Stats {
    /// Checks that a run of `configs` configurations saw WQEs wrap the ring end (inline ones
    /// too) and the WQE index wrap in each, BlueFlame and doorbell rings, batches, inline data
    /// and empty entries.
    pub fn assert_coverage(&self, configs: usize) {
        let s = self;
        assert!(s.wrapped > 0 && s.inline_wrapped > 0 && s.index_wraps >= configs as u64);
        assert!(s.blueflame > 0 && s.doorbell > 0 && s.batches > 0);
        assert!(s.inline > 0 && s.zero_len_sges > 0);
    }
}

/// Runs every configuration of `configs` with `driver`'s requests, printing how many WQEs
/// each compared after `label`; returns what the runs counted.
pub fn run_all<D: Driver>(
    label: &str,
    configs: &[Config],
    rng: &mut SplitMix64,
    seed: u64,
    driver: &mut D,
) -> Stats {
    let mut stats = Stats::default();
    for cfg in configs {
        let before = stats.wqes;
        run(*cfg, rng, seed, &mut stats, driver);
        eprintln!("{label}: {:>6} WQEs on {}", stats.wqes - before, cfg.name);
    }
    stats
}

/// What the BlueFlame register holds before each ring, to see exactly what was written.
pub const MARK: u8 = 0x5a;

/// `total` bytes split over `n` entries at random (some of them empty).
pub fn split(rng: &mut SplitMix64, total: u64, n: usize) -> Vec<u64> {
    if n == 0 {
        return Vec::new();
    }
    let mut cuts: Vec<u64> = (0..n - 1).map(|_| rng.range(0, total)).collect();
    cuts.push(0);
    cuts.push(total);
    cuts.sort_unstable();
    cuts.windows(2).map(|w| w[1] - w[0]).collect()
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

/// The `len` bytes of the WQE at block `start`, following the ring's wrap.
fn wqe_bytes(ring: &[u8], start: u32, len: usize) -> Vec<u8> {
    let base = start as usize * 64 % ring.len();
    (0..len).map(|i| ring[(base + i) % ring.len()]).collect()
}

/// One configuration's run: both queues side by side.
pub struct Harness<'a, T: Kind> {
    /// The configuration.
    pub cfg: Config,
    /// The seed, for failure messages.
    pub seed: u64,
    /// The random source.
    pub rng: &'a mut SplitMix64,
    /// What the run counts.
    pub stats: &'a mut Stats,
    /// Bytes inline entries point into.
    pub payload: Vec<u8>,
    /// Ours: the ring.
    pub ring: &'a DeviceMem,
    /// Ours: the doorbell record.
    pub dbrec: &'a DeviceMem,
    /// Ours: the BlueFlame register.
    pub bf: &'a DeviceMem,
    /// The C side.
    pub c: CSq,
    /// Ours.
    pub sq: SendQueue<SqRef<'a>, T>,
    qpn: u32,
    cq_ring: &'a DeviceMem,
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

impl<T: Kind> Harness<'_, T> {
    /// Fails the test, naming the seed, the configuration and the WQE.
    pub fn fail(&self, what: &str) -> ! {
        panic!(
            "seed {:#x}, config {:?}, WQE #{} (producer {}): {what}",
            self.seed,
            self.cfg.name,
            self.stats.wqes,
            self.c.producer()
        );
    }

    /// Posts `reqs` on both sides (one `stage`, or a `post_all` that rings once) and compares
    /// the WQEs and the rings.
    pub fn post<R: Request>(&mut self, reqs: &[R]) {
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
            let flags = req.flags();
            let inline = flags.contains(SendFlags::INLINE) && !req.sgl().is_empty();
            let s = &mut *self.stats;
            s.wqes += 1;
            s.inline += u64::from(inline);
            s.zero_len_sges += req.sgl().iter().filter(|e| e.length == 0).count() as u64;
            let wraps = (start % self.cfg.wqe_cnt) + blocks > self.cfg.wqe_cnt;
            s.wrapped += u64::from(wraps);
            // A WQE without data is one block and never wraps: inline or not, the same count.
            s.inline_wrapped += u64::from(wraps && inline);
            s.index_wraps += u64::from(start >> 16 != start.wrapping_add(blocks) >> 16);
            self.seen_starts[(start % self.cfg.wqe_cnt) as usize] = true;
            self.pending.push((start, blocks));
            if self.cfg.sig_all || flags.contains(SendFlags::SIGNALED) {
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
    fn run<D: Driver<Kind = T>>(&mut self, d: &mut D) {
        let cfg = self.cfg;
        let max_ds =
            T::HEADER_DS + (cfg.max_send_sge as usize).max(inline_ds(cfg.max_inline_data as usize));
        let max_blocks = max_ds.div_ceil(4) as u32;
        let start_wqes = self.stats.wqes;
        while self.stats.wqes - start_wqes < cfg.min_wqes
            || self.sq.producer() < 0x1_0000 + cfg.wqe_cnt
        {
            let mut last_signaled = true;
            let mut posted = 0;
            // Leave room for a closing signaled request.
            loop {
                let free = self.sq.free_blocks();
                if free <= max_blocks || (posted > 0 && self.rng.chance(1, 6)) {
                    break;
                }
                if d.interject(self, free, max_blocks) {
                    continue;
                }
                // Now and then a batch, as many as surely fit.
                let fit = (free - 1) / max_blocks;
                let n = if fit >= 2 && self.rng.chance(1, 5) {
                    self.rng.range(2, u64::from(fit.min(8))) as usize
                } else {
                    1
                };
                let reqs: Vec<D::Req> = (0..n).map(|_| d.random(self)).collect();
                self.post(&reqs);
                reqs.iter().for_each(|r| d.posted(r));
                let last = &reqs[n - 1];
                last_signaled = cfg.sig_all || last.flags().contains(SendFlags::SIGNALED);
                posted += n;
                if n == 1 && self.rng.chance(1, 2) {
                    self.ring();
                }
            }
            if !last_signaled {
                let close = d.close(self);
                self.post(std::slice::from_ref(&close));
                d.posted(&close);
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

/// Runs configuration `cfg` with `driver`'s requests, counting into `stats`.
pub fn run<D: Driver>(
    cfg: Config,
    rng: &mut SplitMix64,
    seed: u64,
    stats: &mut Stats,
    driver: &mut D,
) {
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
    let c = D::Kind::c_queue(&cfg, qpn, &initial);
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
        transport: cfg.transport,
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
    let sq = unsafe { D::Kind::send_queue(&layout, caps, &state) }.expect("the send queue");
    // SAFETY: the CQE ring and its doorbell record outlive the poller, which is the only one;
    // it is new, and its one binding carries the send queue's state.
    let cq =
        unsafe { CompletionQueue::new(&cq_layout, &bindings[..]) }.expect("CompletionQueue::new");

    Harness {
        cfg,
        seed,
        rng,
        stats,
        payload,
        ring: &ring,
        dbrec: &dbrec,
        bf: &bf,
        c,
        sq,
        qpn,
        cq_ring: &cq_ring,
        cq,
        cq_pi: 0,
        bf_offset: 0,
        pending: Vec::new(),
        signaled: Vec::new(),
        next_wr_id: 1,
        seen_starts: vec![false; wqe_cnt as usize],
    }
    .run(driver);
}

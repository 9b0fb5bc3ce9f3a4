//! Whole UD WQEs: zverbs' `SendQueue::new_ud` writes, request after request, the bytes that
//! libmlx5's `_mlx5_post_send` lays out for the same requests on an `IBV_QPT_UD` QP (control,
//! datagram segment from the address handle's vector with the remote QPN and Q_Key over it,
//! then data or inline segments; modelled by the C probe), writes the doorbell record as
//! `post_send_db` does, rings BlueFlame or the doorbell, and gets its credits back through
//! CQEs.
//!
//! Both queues run side by side over plain heap memory, as in `wqe.rs`: a ring that starts as
//! the same random bytes on both sides, a doorbell record, a BlueFlame register and (for ours)
//! a CQ whose CQEs this test writes as the device would. Requests are SEND and SEND with
//! immediate to random destinations (48 random address-vector bytes with the GRH bit set or
//! clear, any 32-bit remote QPN, any Q_Key), of 0..=max entries with empty ones among them or
//! of inline payloads up to the limit, up to the path MTU, signaled or not, solicited, fenced;
//! posted alone or in batches, in rounds of random length, so WQEs start at every block of
//! the ring, their data wraps its end, and every configuration runs past the 16-bit WQE index
//! wrap.
//!
//! After every post the WQE's `ds × 16` bytes must equal libmlx5's, except where libmlx5
//! stores nothing (the padding after inline data): there ours must be zero; then the whole
//! ring must be equal. After every ring the doorbell record must equal libmlx5's and the
//! BlueFlame register hold what `wqe.rs` describes.
//!
//! Refused requests, one in ten: more entries than `max_send_sge`, more inline bytes than
//! `max_inline_data`, a datagram longer than the path MTU, alone or inside a batch. Ours
//! refuses them with the typed error its check order names and writes nothing at all: ring,
//! doorbell record, BlueFlame register and producer stay as they were. libmlx5 refuses the
//! first two (`ENOMEM`: `max_gs`, `max_inline_data`) without moving its producer counter or
//! its doorbell record, though it has stored part of the WQE in the free ring space by then
//! (counted, then undone); it does not compare a datagram with the MTU (the device completes
//! it with an error), so it accepts the third, which the test then undoes.

use std::fmt::Write as _;
use std::ptr::NonNull;

use zverbs_core::{
    Completion, PollCq, PostError, PostSend, SendFlags, SendWr, Sge, Transport, UdDest, WcStatus,
};
use zverbs_crosscheck::ffi::op;
use zverbs_crosscheck::probe::{CRequest, CSendQueue};
use zverbs_crosscheck::{DeviceMem, SplitMix64};
use zverbs_mlx5dv::prm::cqe::Cqe64;
use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::prm::wqe::{UD_HEADER_DS, inline_ds};
use zverbs_mlx5dv::{
    BfLayout, CompletionQueue, CqBinding, CqLayout, Datagram, Dedicated, QpLayout, RqRef,
    SendQueue, SqCaps, SqRef, SqSlot, SqState, WqLayout,
};

/// A UD queue pair shape: what the control path would have negotiated.
#[derive(Clone, Copy, Debug)]
struct Config {
    name: &'static str,
    /// Basic blocks in the send ring.
    wqe_cnt: u32,
    max_send_sge: u32,
    max_inline_data: u32,
    /// The path MTU: the largest datagram.
    mtu: u32,
    /// BlueFlame buffer size (0: doorbell only).
    bf_size: u32,
    sig_all: bool,
    /// Run at least this many WQEs (and in any case past the 16-bit WQE index wrap).
    min_wqes: u64,
}

const CONFIGS: &[Config] = &[
    Config {
        name: "4 blocks, MTU 256, BlueFlame 64",
        wqe_cnt: 4,
        max_send_sge: 2,
        max_inline_data: 28,
        mtu: 256,
        bf_size: 64,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "8 blocks, MTU 1024, BlueFlame 256",
        wqe_cnt: 8,
        max_send_sge: 4,
        max_inline_data: 60,
        mtu: 1024,
        bf_size: 256,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "16 blocks, MTU 4096, doorbell only, sq_sig_all",
        wqe_cnt: 16,
        max_send_sge: 8,
        max_inline_data: 124,
        mtu: 4096,
        bf_size: 0,
        sig_all: true,
        min_wqes: 10_000,
    },
    Config {
        name: "32 blocks, 63-segment WQEs, inline above MTU 256, BlueFlame 1024",
        wqe_cnt: 32,
        max_send_sge: 59,
        max_inline_data: 940,
        mtu: 256,
        bf_size: 1024,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "64 blocks, no inline, MTU 2048, BlueFlame 512",
        wqe_cnt: 64,
        max_send_sge: 16,
        max_inline_data: 0,
        mtu: 2048,
        bf_size: 512,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "128 blocks, MTU 512, BlueFlame 256",
        wqe_cnt: 128,
        max_send_sge: 30,
        max_inline_data: 220,
        mtu: 512,
        bf_size: 256,
        sig_all: false,
        min_wqes: 10_000,
    },
];

/// Why a request is refused (by ours; see the module documentation for libmlx5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    TooManySges,
    InlineTooLarge,
    OverMtu,
}

/// A random UD request, in a form both sides can be given.
#[derive(Clone, Debug)]
struct Req {
    imm: Option<u32>,
    sgl: Vec<Sge>,
    flags: SendFlags,
    dest: UdDest,
    /// What ours must refuse it for, if anything.
    fault: Option<Fault>,
}

impl Req {
    fn send_wr(&self, wr_id: u64) -> SendWr<'_> {
        let wr = match self.imm {
            Some(imm) => SendWr::send_to_imm(wr_id, &self.sgl, &self.dest, imm),
            None => SendWr::send_to(wr_id, &self.sgl, &self.dest),
        };
        wr.with_flags(self.flags)
    }

    /// The same request for the C side; the `IBV_SEND_*` values equal `SendFlags`' bits
    /// (checked by the layout test).
    fn c_request(&self) -> CRequest<'_> {
        CRequest {
            op: if self.imm.is_some() {
                op::SEND_IMM
            } else {
                op::SEND
            },
            sgl: &self.sgl,
            send_flags: self.flags.bits(),
            imm: self.imm.unwrap_or(0),
            av: Some(&self.dest.av),
            remote_qpn: self.dest.remote_qpn,
            qkey: self.dest.qkey,
            ..CRequest::default()
        }
    }

    fn mlx5_opcode(&self) -> u8 {
        if self.imm.is_some() {
            opcode::SEND_IMM
        } else {
            opcode::SEND
        }
    }

    fn total(&self) -> u64 {
        self.sgl.iter().map(|s| u64::from(s.length)).sum()
    }

    fn has_grh(&self) -> bool {
        self.dest.av[GRH_BYTE] & GRH_BIT != 0
    }
}

/// The GRH bit of an address vector: bit 30 of the big-endian `grh_gid_fl` at byte 28.
const GRH_BYTE: usize = 28;
const GRH_BIT: u8 = 0x40;

/// The errno libmlx5 refuses a request with.
const ENOMEM: i32 = 12;

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

fn random_dest(rng: &mut SplitMix64) -> UdDest {
    let mut av = [0u8; 48];
    rng.fill(&mut av);
    if rng.chance(1, 2) {
        av[GRH_BYTE] |= GRH_BIT;
    } else {
        av[GRH_BYTE] &= !GRH_BIT;
    }
    // Any 32 bits: both sides store the QPN as given (with the extended-AV bit).
    UdDest::new(av, 0, rng.edgy_u32(), rng.edgy_u32())
}

/// A total length for a message of at most `max` bytes, edges often.
fn length(rng: &mut SplitMix64, max: u64) -> u64 {
    if rng.chance(1, 4) {
        rng.pick(&[0, 1, 12, 13, max.saturating_sub(1), max])
            .min(max)
    } else {
        rng.range(0, max)
    }
}

/// The entries of a message of `total` bytes over `n` entries; inline ones point into
/// `payload`.
fn entries(rng: &mut SplitMix64, total: u64, n: usize, inline: bool, payload: &[u8]) -> Vec<Sge> {
    split(rng, total, n)
        .into_iter()
        .map(|len| {
            let addr = if inline {
                let off = rng.range(0, payload.len() as u64 - len);
                payload.as_ptr() as u64 + off
            } else {
                rng.edgy_u64()
            };
            Sge::new(addr, len as u32, rng.edgy_u32())
        })
        .collect()
}

fn random_req(rng: &mut SplitMix64, cfg: &Config, payload: &[u8], fault: Option<Fault>) -> Req {
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
    let (mtu, max_sge, max_inline) = (
        u64::from(cfg.mtu),
        u64::from(cfg.max_send_sge),
        u64::from(cfg.max_inline_data),
    );
    let sgl = match fault {
        None => {
            let n = rng.range(0, max_sge) as usize;
            if max_inline > 0 && rng.chance(1, 3) {
                flags |= SendFlags::INLINE;
                let total = length(rng, max_inline.min(mtu));
                entries(rng, total, n, true, payload)
            } else {
                let total = length(rng, mtu);
                entries(rng, total, n, false, payload)
            }
        }
        Some(Fault::TooManySges) => {
            let n = rng.range(max_sge + 1, max_sge + 3) as usize;
            let inline = max_inline > 0 && rng.chance(1, 3);
            if inline {
                flags |= SendFlags::INLINE;
            }
            let total = length(rng, if inline { max_inline.min(mtu) } else { mtu });
            entries(rng, total, n, inline, payload)
        }
        Some(Fault::InlineTooLarge) => {
            flags |= SendFlags::INLINE;
            let n = rng.range(1, max_sge) as usize;
            let total = rng.range(max_inline + 1, (max_inline + 64).min(payload.len() as u64));
            entries(rng, total, n, true, payload)
        }
        Some(Fault::OverMtu) => {
            let n = rng.range(1, max_sge) as usize;
            // Inline too, where the inline limit is above the MTU.
            if max_inline > mtu && rng.chance(1, 2) {
                flags |= SendFlags::INLINE;
                let total = rng.range(mtu + 1, max_inline);
                entries(rng, total, n, true, payload)
            } else {
                let over = rng.pick(&[1, 64, 1 << 20]);
                let total = rng.range(mtu + 1, mtu + over);
                entries(rng, total, n, false, payload)
            }
        }
    };
    Req {
        imm: rng.chance(1, 2).then(|| rng.edgy_u32()),
        sgl,
        flags,
        dest: random_dest(rng),
        fault,
    }
}

/// What the run saw, printed at the end.
#[derive(Debug, Default)]
struct Stats {
    wqes: u64,
    send: u64,
    send_imm: u64,
    with_grh: u64,
    inline: u64,
    zero_len_sges: u64,
    /// WQEs whose data continues at the start of the ring.
    wrapped: u64,
    inline_wrapped: u64,
    index_wraps: u64,
    left_by_libmlx5: u64,
    batches: u64,
    blueflame: u64,
    doorbell: u64,
    completions: u64,
    refused: [u64; 3],
    refused_in_batch: u64,
    /// Bytes libmlx5 stored (unpublished) for requests it refused.
    scribbled_by_libmlx5: u64,
    /// Over-MTU datagrams libmlx5 accepted (and ours refused).
    over_mtu_accepted_by_libmlx5: u64,
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

/// The bytes of the WQE of `len` bytes at block `start`, following the ring's wrap.
fn wqe_bytes(ring: &[u8], start: u32, len: usize) -> Vec<u8> {
    let base = start as usize * 64 % ring.len();
    (0..len).map(|i| ring[(base + i) % ring.len()]).collect()
}

type UdQueue<'a> = SendQueue<SqRef<'a>, Dedicated, Datagram>;

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
    sq: UdQueue<'a>,
    cq: CompletionQueue<&'a [CqBinding<SqRef<'a>, RqRef<'a>>]>,
    cq_pi: u32,
    bf_offset: usize,
    pending: Vec<(u32, u32)>,
    signaled: Vec<(u32, u64, u8)>,
    next_wr_id: u64,
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

    /// The error ours must give for `req`, in the core's check order (MTU, entries, inline).
    fn expected_error(&self, req: &Req) -> PostError {
        let total = req.total();
        let (mtu, max) = (self.cfg.mtu, self.cfg.max_send_sge);
        if total > u64::from(mtu) {
            PostError::DatagramTooLong {
                len: total.min(u64::from(u32::MAX)) as u32,
                mtu,
            }
        } else if req.sgl.len() > max as usize {
            PostError::TooManySges {
                got: req.sgl.len() as u32,
                max,
            }
        } else {
            PostError::InlineTooLarge {
                len: total as u32,
                max: self.cfg.max_inline_data,
            }
        }
    }

    /// Offers the refused `req` to both sides (inside a batch of valid requests on ours when
    /// `in_batch`) and checks that neither publishes anything.
    fn refuse(&mut self, req: &Req, in_batch: bool) {
        let fault = req.fault.expect("a faulty request");
        let ring = self.ring.to_vec();
        let db = self.dbrec.to_vec();
        self.bf.fill(MARK);
        let pi = self.sq.producer();
        let want = self.expected_error(req);
        if in_batch {
            let good: Vec<Req> = (0..self.rng.range(1, 3))
                .map(|_| random_req(self.rng, &self.cfg, &self.payload, None))
                .collect();
            let at = self.rng.below(good.len() as u64 + 1) as usize;
            let mut wrs: Vec<SendWr<'_>> = good.iter().map(|r| r.send_wr(0)).collect();
            wrs.insert(at, req.send_wr(0));
            // SAFETY: inline entries point into `self.payload`; nothing is written.
            match unsafe { self.sq.post_all(&wrs) } {
                Err(e) if e.index == at && e.error == want => {}
                other => self.fail(&format!(
                    "SendQueue gave {other:?} for a batch refused at {at} with {want:?}: {req:?}"
                )),
            }
            self.stats.refused_in_batch += 1;
        } else {
            // SAFETY: as above.
            match unsafe { self.sq.stage(&req.send_wr(0)) } {
                Err(e) if e == want => {}
                other => self.fail(&format!(
                    "SendQueue gave {other:?} for {req:?}, expected {want:?}"
                )),
            }
        }
        if self.ring.to_vec() != ring
            || self.dbrec.to_vec() != db
            || self.bf.to_vec().iter().any(|&b| b != MARK)
            || self.sq.producer() != pi
        {
            self.fail(&format!(
                "SendQueue wrote something for the refused {req:?}"
            ));
        }

        // libmlx5 refuses more entries than max_gs and more inline bytes than its limit, both
        // with ENOMEM, and nothing else.
        let c_refuses = req.sgl.len() > self.cfg.max_send_sge as usize
            || (req.flags.contains(SendFlags::INLINE)
                && req.total() > u64::from(self.cfg.max_inline_data));
        let before = self.c.snapshot();
        let (c_pi, c_db) = (self.c.producer(), self.c.dbrec_bytes());
        self.c.clear_written();
        // SAFETY: inline entries point into `self.payload`, which is alive and readable.
        let got = unsafe { self.c.post(&req.c_request()) };
        match got {
            Ok(_) if !c_refuses => self.stats.over_mtu_accepted_by_libmlx5 += 1,
            Err(ENOMEM) if c_refuses => {
                if self.c.producer() != c_pi || self.c.dbrec_bytes() != c_db {
                    self.fail(&format!("libmlx5 published the refused {req:?}"));
                }
                let scribbled = self
                    .c
                    .written()
                    .to_vec()
                    .iter()
                    .filter(|&&b| b != 0)
                    .count();
                self.stats.scribbled_by_libmlx5 += scribbled as u64;
            }
            other => self.fail(&format!("libmlx5 gave {other:?} for {req:?} ({fault:?})")),
        }
        // Undo what libmlx5 stored or published, so that both rings go on alike.
        self.c.restore(&before);
        self.stats.refused[fault as usize] += 1;
    }

    /// Posts `reqs` on both sides (one `stage`, or a `post_all` that rings once) and compares
    /// the WQEs and the rings.
    fn post(&mut self, reqs: &[Req]) {
        let first = self.sq.producer();
        if first != self.c.producer() {
            self.fail(&format!(
                "producers differ: ours {first}, C {}",
                self.c.producer()
            ));
        }
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
            let inline = req.flags.contains(SendFlags::INLINE) && !req.sgl.is_empty();
            let s = &mut *self.stats;
            s.wqes += 1;
            s.send += u64::from(req.imm.is_none());
            s.send_imm += u64::from(req.imm.is_some());
            s.with_grh += u64::from(req.has_grh());
            s.inline += u64::from(inline);
            s.zero_len_sges += req.sgl.iter().filter(|e| e.length == 0).count() as u64;
            let wraps = (start % self.cfg.wqe_cnt) + blocks > self.cfg.wqe_cnt;
            s.wrapped += u64::from(wraps);
            s.inline_wrapped += u64::from(wraps && inline);
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

    /// A random fault this configuration can have.
    fn fault(&mut self) -> Fault {
        let mut faults = vec![Fault::TooManySges, Fault::OverMtu];
        if self.cfg.max_inline_data > 0 {
            faults.push(Fault::InlineTooLarge);
        }
        self.rng.pick(&faults)
    }

    /// Posts rounds until the configuration has run long enough.
    fn run(&mut self) {
        let cfg = self.cfg;
        let max_ds =
            UD_HEADER_DS + (cfg.max_send_sge as usize).max(inline_ds(cfg.max_inline_data as usize));
        let max_blocks = max_ds.div_ceil(4) as u32;
        let start_wqes = self.stats.wqes;
        while self.stats.wqes - start_wqes < cfg.min_wqes
            || self.sq.producer() < 0x1_0000 + cfg.wqe_cnt
        {
            let mut last_signaled = true;
            let mut posted = 0;
            loop {
                let free = self.sq.free_blocks();
                if free <= max_blocks || (posted > 0 && self.rng.chance(1, 6)) {
                    break;
                }
                if self.rng.chance(1, 10) {
                    let fault = self.fault();
                    let req = random_req(self.rng, &cfg, &self.payload, Some(fault));
                    // Room for the valid requests around it, so that the batch fails there.
                    let in_batch = free > 3 * max_blocks && self.rng.chance(1, 4);
                    self.refuse(&req, in_batch);
                    continue;
                }
                let fit = (free - 1) / max_blocks;
                let n = if fit >= 2 && self.rng.chance(1, 5) {
                    self.rng.range(2, u64::from(fit.min(8))) as usize
                } else {
                    1
                };
                let reqs: Vec<Req> = (0..n)
                    .map(|_| random_req(self.rng, &cfg, &self.payload, None))
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
                // An empty signaled datagram closes the round (its CQE retires the rest).
                let mut close = random_req(self.rng, &cfg, &self.payload, None);
                close.sgl.clear();
                close.flags = SendFlags::SIGNALED;
                self.post(&[close]);
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
    let cq_ring = DeviceMem::new(ring_len, 4096);
    for i in 0..wqe_cnt as usize {
        cq_ring.write_at(i * 64 + 63, &[0xf0]); // MLX5_CQE_INVALID << 4, as libmlx5 starts
    }
    let cq_dbrec = DeviceMem::new(8, 8);
    let mut payload = vec![0u8; 2048];
    rng.fill(&mut payload);

    let qpn = rng.below(1 << 24) as u32;
    let c = CSendQueue::new_ud(
        wqe_cnt,
        qpn,
        cfg.sig_all,
        cfg.max_inline_data,
        cfg.max_send_sge,
        &initial,
    );
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
        transport: Transport::Ud { mtu: cfg.mtu },
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
    let sq = unsafe { SendQueue::new_ud(&layout, caps, &state) }.expect("SendQueue::new_ud");
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
fn ud_send_queue_wqes_match_libmlx5() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_0d0d, 11);
    let mut stats = Stats::default();
    for cfg in CONFIGS {
        let before = stats.wqes;
        run_config(*cfg, &mut rng, seed, &mut stats);
        eprintln!("ud wqe: {:>6} WQEs on {}", stats.wqes - before, cfg.name);
    }
    let s = &stats;
    eprintln!(
        "ud wqe: {} randomized UD WQEs compared with libmlx5's layout (SEND {}, SEND_IMM {}; \
         {} with the GRH bit); {} inline, {} zero-length SGEs skipped, {} WQEs whose data \
         wraps the ring end ({} inline), {} WQE-index wraps, {} bytes libmlx5 leaves stale \
         (zero in ours); {} batches; {} BlueFlame rings, {} doorbell rings; {} completions; \
         refused by ours, nothing written: {} too many SGEs, {} too much inline, {} over the \
         MTU ({} inside a batch); libmlx5 refused the first two after storing {} unpublished \
         bytes, and accepted {} over-MTU datagrams",
        s.wqes,
        s.send,
        s.send_imm,
        s.with_grh,
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
        s.refused[Fault::TooManySges as usize],
        s.refused[Fault::InlineTooLarge as usize],
        s.refused[Fault::OverMtu as usize],
        s.refused_in_batch,
        s.scribbled_by_libmlx5,
        s.over_mtu_accepted_by_libmlx5,
    );
    assert!(s.wrapped > 0 && s.inline_wrapped > 0 && s.index_wraps >= CONFIGS.len() as u64);
    assert!(s.blueflame > 0 && s.doorbell > 0 && s.batches > 0);
    assert!(s.inline > 0 && s.zero_len_sges > 0 && s.with_grh > 0 && s.with_grh < s.wqes);
    assert!(s.refused.iter().all(|&n| n > 0) && s.refused_in_batch > 0);
    assert!(s.over_mtu_accepted_by_libmlx5 > 0);
}

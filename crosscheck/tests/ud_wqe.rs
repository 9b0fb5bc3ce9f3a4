//! Whole UD WQEs: zverbs' `SendQueue::new_ud` writes, request after request, the bytes that
//! libmlx5's `_mlx5_post_send` lays out for the same requests on an `IBV_QPT_UD` QP (control,
//! datagram segment from the address handle's vector with the remote QPN and Q_Key over it,
//! then data or inline segments; modelled by the C probe), writes the doorbell record as
//! `post_send_db` does, rings BlueFlame or the doorbell, and gets its credits back through
//! CQEs.
//!
//! Both queues run side by side in `zverbs_crosscheck::send_run`'s harness, as in `wqe.rs`.
//! Requests are SEND and SEND with
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

use zverbs_core::{PostError, PostSend, SendFlags, SendWr, Sge, Transport, UdDest};
use zverbs_crosscheck::SplitMix64;
use zverbs_crosscheck::ffi::op;
use zverbs_crosscheck::probe::CRequest;
use zverbs_crosscheck::send_run::{self, Config, Driver, Harness, MARK, Request, split};
use zverbs_mlx5dv::Datagram;
use zverbs_mlx5dv::prm::opcode;

const CONFIGS: &[Config] = &[
    Config {
        name: "4 blocks, MTU 256, BlueFlame 64",
        wqe_cnt: 4,
        max_send_sge: 2,
        max_inline_data: 28,
        transport: Transport::Ud { mtu: 256 },
        bf_size: 64,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "8 blocks, MTU 1024, BlueFlame 256",
        wqe_cnt: 8,
        max_send_sge: 4,
        max_inline_data: 60,
        transport: Transport::Ud { mtu: 1024 },
        bf_size: 256,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "16 blocks, MTU 4096, doorbell only, sq_sig_all",
        wqe_cnt: 16,
        max_send_sge: 8,
        max_inline_data: 124,
        transport: Transport::Ud { mtu: 4096 },
        bf_size: 0,
        sig_all: true,
        min_wqes: 10_000,
    },
    Config {
        name: "32 blocks, 63-segment WQEs, inline above MTU 256, BlueFlame 1024",
        wqe_cnt: 32,
        max_send_sge: 59,
        max_inline_data: 940,
        transport: Transport::Ud { mtu: 256 },
        bf_size: 1024,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "64 blocks, no inline, MTU 2048, BlueFlame 512",
        wqe_cnt: 64,
        max_send_sge: 16,
        max_inline_data: 0,
        transport: Transport::Ud { mtu: 2048 },
        bf_size: 512,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "128 blocks, MTU 512, BlueFlame 256",
        wqe_cnt: 128,
        max_send_sge: 30,
        max_inline_data: 220,
        transport: Transport::Ud { mtu: 512 },
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

impl Request for Req {
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

    fn flags(&self) -> SendFlags {
        self.flags
    }

    fn sgl(&self) -> &[Sge] {
        &self.sgl
    }
}

impl Req {
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
        u64::from(mtu(cfg)),
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

/// The UD requests, with the refusals between them, and what the run saw besides what the
/// harness counts.
#[derive(Debug, Default)]
struct Ud {
    send: u64,
    send_imm: u64,
    with_grh: u64,
    refused: [u64; 3],
    refused_in_batch: u64,
    /// Bytes libmlx5 stored (unpublished) for requests it refused.
    scribbled_by_libmlx5: u64,
    /// Over-MTU datagrams libmlx5 accepted (and ours refused).
    over_mtu_accepted_by_libmlx5: u64,
}

/// The path MTU of a UD configuration.
fn mtu(cfg: &Config) -> u32 {
    match cfg.transport {
        Transport::Ud { mtu } => mtu,
        Transport::Rc | Transport::Ethernet { .. } => unreachable!("a UD configuration"),
    }
}

/// The error ours must give for `req`, in the core's check order (MTU, entries, inline).
fn expected_error(cfg: &Config, req: &Req) -> PostError {
    let total = req.total();
    let (mtu, max) = (mtu(cfg), cfg.max_send_sge);
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
            max: cfg.max_inline_data,
        }
    }
}

impl Ud {
    /// Offers the refused `req` to both sides (inside a batch of valid requests on ours when
    /// `in_batch`) and checks that neither publishes anything.
    fn refuse(&mut self, h: &mut Harness<'_, Datagram>, req: &Req, in_batch: bool) {
        let fault = req.fault.expect("a faulty request");
        // What the device may read of the ring: the blocks below the producer counter not
        // yet free. A refused batch may leave its valid requests in the free blocks past the
        // producer counter (scratch, `docs/ordering.md` section 9).
        let in_use = |h: &mut Harness<'_, Datagram>| {
            let (pi, size) = (h.sq.producer(), h.sq.blocks());
            let used = size - h.sq.free_blocks();
            let ring = h.ring.to_vec();
            (pi.wrapping_sub(used)..pi)
                .flat_map(|b| {
                    let at = (b % size) as usize * 64;
                    ring[at..at + 64].to_vec()
                })
                .collect::<Vec<u8>>()
        };
        let ring = in_use(h);
        let db = h.dbrec.to_vec();
        h.bf.fill(MARK);
        let pi = h.sq.producer();
        let want = expected_error(&h.cfg, req);
        if in_batch {
            let good: Vec<Req> = (0..h.rng.range(1, 3))
                .map(|_| random_req(h.rng, &h.cfg, &h.payload, None))
                .collect();
            let at = h.rng.below(good.len() as u64 + 1) as usize;
            let mut wrs: Vec<SendWr<'_>> = good.iter().map(|r| r.send_wr(0)).collect();
            wrs.insert(at, req.send_wr(0));
            // SAFETY: inline entries point into `self.payload`; nothing is written.
            match unsafe { h.sq.post_all(&wrs) } {
                Err(e) if e.index == at && e.error == want => {}
                other => h.fail(&format!(
                    "SendQueue gave {other:?} for a batch refused at {at} with {want:?}: {req:?}"
                )),
            }
            self.refused_in_batch += 1;
        } else {
            // SAFETY: as above.
            match unsafe { h.sq.stage(&req.send_wr(0)) } {
                Err(e) if e == want => {}
                other => h.fail(&format!(
                    "SendQueue gave {other:?} for {req:?}, expected {want:?}"
                )),
            }
        }
        if in_use(h) != ring
            || h.dbrec.to_vec() != db
            || h.bf.to_vec().iter().any(|&b| b != MARK)
            || h.sq.producer() != pi
        {
            h.fail(&format!(
                "SendQueue wrote something for the refused {req:?}"
            ));
        }
        if in_batch {
            // The free blocks, which the refused batch may have written (its requests before
            // the refused one): scratch the device never reads, mirrored into libmlx5's ring so
            // that the whole rings compare equal again after the next posts.
            let (size, free) = (h.sq.blocks(), h.sq.free_blocks());
            let ours = h.ring.to_vec();
            for b in pi..pi.wrapping_add(free) {
                let at = (b % size) as usize * 64;
                h.c.ring().write_at(at, &ours[at..at + 64]);
            }
        }

        // libmlx5 refuses more entries than max_gs and more inline bytes than its limit, both
        // with ENOMEM, and nothing else.
        let c_refuses = req.sgl.len() > h.cfg.max_send_sge as usize
            || (req.flags.contains(SendFlags::INLINE)
                && req.total() > u64::from(h.cfg.max_inline_data));
        let before = h.c.snapshot();
        let (c_pi, c_db) = (h.c.producer(), h.c.dbrec_bytes());
        h.c.clear_written();
        // SAFETY: inline entries point into `self.payload`, which is alive and readable.
        let got = unsafe { h.c.post(&req.c_request()) };
        match got {
            Ok(_) if !c_refuses => self.over_mtu_accepted_by_libmlx5 += 1,
            Err(ENOMEM) if c_refuses => {
                if h.c.producer() != c_pi || h.c.dbrec_bytes() != c_db {
                    h.fail(&format!("libmlx5 published the refused {req:?}"));
                }
                let scribbled = h.c.written().to_vec().iter().filter(|&&b| b != 0).count();
                self.scribbled_by_libmlx5 += scribbled as u64;
            }
            other => h.fail(&format!("libmlx5 gave {other:?} for {req:?} ({fault:?})")),
        }
        // Undo what libmlx5 stored or published, so that both rings go on alike.
        h.c.restore(&before);
        self.refused[fault as usize] += 1;
    }
}

impl Driver for Ud {
    type Kind = Datagram;
    type Req = Req;

    fn random(&mut self, h: &mut Harness<'_, Datagram>) -> Req {
        random_req(h.rng, &h.cfg, &h.payload, None)
    }

    /// An empty signaled datagram closes the round (its CQE retires the rest).
    fn close(&mut self, h: &mut Harness<'_, Datagram>) -> Req {
        let mut close = random_req(h.rng, &h.cfg, &h.payload, None);
        close.sgl.clear();
        close.flags = SendFlags::SIGNALED;
        close
    }

    /// One turn in ten offers a refused request, alone or inside a batch.
    fn interject(&mut self, h: &mut Harness<'_, Datagram>, free: u32, max_blocks: u32) -> bool {
        if !h.rng.chance(1, 10) {
            return false;
        }
        let mut faults = vec![Fault::TooManySges, Fault::OverMtu];
        if h.cfg.max_inline_data > 0 {
            faults.push(Fault::InlineTooLarge);
        }
        let fault = h.rng.pick(&faults);
        let req = random_req(h.rng, &h.cfg, &h.payload, Some(fault));
        // Room for the valid requests around it, so that the batch fails there.
        let in_batch = free > 3 * max_blocks && h.rng.chance(1, 4);
        self.refuse(h, &req, in_batch);
        true
    }

    fn posted(&mut self, req: &Req) {
        self.send += u64::from(req.imm.is_none());
        self.send_imm += u64::from(req.imm.is_some());
        self.with_grh += u64::from(req.has_grh());
    }
}

#[test]
fn ud_send_queue_wqes_match_libmlx5() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_0d0d, 11);
    let mut ud = Ud::default();
    let stats = send_run::run_all("ud wqe", CONFIGS, &mut rng, seed, &mut ud);
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
        ud.send,
        ud.send_imm,
        ud.with_grh,
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
        ud.refused[Fault::TooManySges as usize],
        ud.refused[Fault::InlineTooLarge as usize],
        ud.refused[Fault::OverMtu as usize],
        ud.refused_in_batch,
        ud.scribbled_by_libmlx5,
        ud.over_mtu_accepted_by_libmlx5,
    );
    s.assert_coverage(CONFIGS.len());
    assert!(ud.with_grh > 0 && ud.with_grh < s.wqes);
    assert!(ud.refused.iter().all(|&n| n > 0) && ud.refused_in_batch > 0);
    assert!(ud.over_mtu_accepted_by_libmlx5 > 0);
}

//! Whole raw Ethernet WQEs: zverbs' `SendQueue::new_eth` writes, request after request, the
//! bytes that libmlx5's `_mlx5_post_send` lays out for the same frames on an
//! `IBV_QPT_RAW_PACKET` QP whose context reports a minimum inline (modelled by the C probe
//! with `mlx5dv.h`'s `struct mlx5_wqe_eth_seg`, `mlx5dv_set_ctrl_seg` and
//! `mlx5dv_set_data_seg`): the control segment, the Ethernet segment zeroed with `cs_flags`
//! for `IBV_SEND_IP_CSUM` and the frame's first 18 bytes gathered across the entries
//! (`copy_eth_inline_headers`), then the rest of the frame as data segments resumed after
//! them (`set_data_ptr_seg` with an offset, zero-length entries skipped, an entry consumed by
//! the header skipped) or as one inline segment (`set_data_inl_seg` from the same place).
//!
//! Both queues run side by side in `zverbs_crosscheck::send_run`'s harness, as in `wqe.rs`
//! and `ud_wqe.rs`: random frames of 18 bytes to the largest frame over 1..=max entries, the
//! first often shorter than the inlined bytes, empty entries among them, by reference or
//! inline, with and without checksum offload, signaled or not, solicited, fenced; posted
//! alone or in batches, so WQEs start at every block of the ring, their header bytes and data
//! wrap its end, and every configuration runs past the 16-bit WQE index wrap.
//!
//! The research brief's worked examples (section 1.5, cases A and B: a 64-byte UDP frame by
//! one entry with `IP_CSUM`, and inline) are checked byte for byte against the C model here;
//! `mlx5dv`'s unit tests check zverbs' bytes against the same literals.

use zverbs_core::{SendFlags, SendWr, Sge, Transport};
use zverbs_crosscheck::SplitMix64;
use zverbs_crosscheck::ffi::op;
use zverbs_crosscheck::probe::{CRequest, CSq};
use zverbs_crosscheck::send_run::{self, Config, Driver, ETH_MIN_INLINE, Harness, Request, split};
use zverbs_mlx5dv::Ethernet;
use zverbs_mlx5dv::prm::opcode;

/// The largest frame of every configuration: the harness's payload (2048 bytes) holds it.
const MAX_FRAME: u32 = 1514;

const CONFIGS: &[Config] = &[
    Config {
        name: "4 blocks, BlueFlame 64, 2 entries, inline 28",
        wqe_cnt: 4,
        max_send_sge: 2,
        max_inline_data: 28,
        transport: Transport::Ethernet {
            max_frame: MAX_FRAME,
            ip_csum: true,
        },
        bf_size: 64,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "8 blocks, BlueFlame 256, 4 entries, inline 92",
        wqe_cnt: 8,
        max_send_sge: 4,
        max_inline_data: 92,
        transport: Transport::Ethernet {
            max_frame: MAX_FRAME,
            ip_csum: true,
        },
        bf_size: 256,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "16 blocks, doorbell only, sq_sig_all, 8 entries, inline 204",
        wqe_cnt: 16,
        max_send_sge: 8,
        max_inline_data: 204,
        transport: Transport::Ethernet {
            max_frame: MAX_FRAME,
            ip_csum: true,
        },
        bf_size: 0,
        sig_all: true,
        min_wqes: 10_000,
    },
    Config {
        name: "64 blocks, BlueFlame 512, 30 entries, inline 460",
        wqe_cnt: 64,
        max_send_sge: 30,
        max_inline_data: 460,
        transport: Transport::Ethernet {
            max_frame: MAX_FRAME,
            ip_csum: true,
        },
        bf_size: 512,
        sig_all: false,
        min_wqes: 10_000,
    },
];

/// A random frame, in a form both sides can be given.
#[derive(Clone, Debug)]
struct Frame {
    sgl: Vec<Sge>,
    flags: SendFlags,
}

impl Request for Frame {
    fn send_wr(&self, wr_id: u64) -> SendWr<'_> {
        SendWr::send(wr_id, &self.sgl).with_flags(self.flags)
    }

    /// The same frame for the C side; `IBV_SEND_IP_CSUM` equals `SendFlags::IP_CSUM` (16),
    /// as the other flags do.
    fn c_request(&self) -> CRequest<'_> {
        CRequest {
            op: op::SEND,
            sgl: &self.sgl,
            send_flags: self.flags.bits(),
            ..CRequest::default()
        }
    }

    fn mlx5_opcode(&self) -> u8 {
        opcode::SEND
    }

    fn flags(&self) -> SendFlags {
        self.flags
    }

    fn sgl(&self) -> &[Sge] {
        &self.sgl
    }
}

/// What the run saw besides what the harness counts.
#[derive(Debug, Default)]
struct Frames {
    csum: u64,
    /// Frames whose first entry was shorter than the inlined bytes (gathered across entries).
    gathered: u64,
    /// Frames with an entry the inlined bytes consumed exactly (skipped).
    consumed: u64,
}

/// A random frame: 18 bytes (the inlined header) to `max` over 1..=`max_sge` entries, every
/// entry pointing into `payload` (the post reads the first 18 bytes, as libmlx5 does).
fn random_frame(rng: &mut SplitMix64, cfg: &Config, payload: &[u8]) -> Frame {
    let hdr = u64::from(ETH_MIN_INLINE);
    let mut flags = SendFlags::NONE;
    for (f, den) in [
        (SendFlags::SIGNALED, 3),
        (SendFlags::FENCE, 8),
        (SendFlags::SOLICITED, 8),
        (SendFlags::IP_CSUM, 2),
    ] {
        if rng.chance(1, den) {
            flags |= f;
        }
    }
    let inline = cfg.max_inline_data as u64 >= hdr && rng.chance(1, 3);
    let max = if inline {
        u64::from(cfg.max_inline_data)
    } else {
        u64::from(MAX_FRAME)
    };
    let total = if rng.chance(1, 4) {
        rng.pick(&[hdr, hdr + 1, 60, 64, max - 1, max])
            .clamp(hdr, max)
    } else {
        rng.range(hdr, max)
    };
    if inline {
        flags |= SendFlags::INLINE;
    }
    let n = rng.range(1, u64::from(cfg.max_send_sge)) as usize;
    let mut lens = split(rng, total, n);
    // Often a first entry shorter than the inlined bytes, or exactly as long.
    if n > 1 && rng.chance(1, 2) {
        let first = rng.pick(&[0, 1, 10, 17, 18]).min(lens[0] + lens[1]);
        let moved = lens[0] + lens[1] - first;
        lens[0] = first;
        lens[1] = moved;
    }
    let sgl = lens
        .into_iter()
        .map(|len| {
            let off = rng.range(0, payload.len() as u64 - len);
            Sge::new(payload.as_ptr() as u64 + off, len as u32, rng.edgy_u32())
        })
        .collect();
    Frame { sgl, flags }
}

impl Driver for Frames {
    type Kind = Ethernet;
    type Req = Frame;

    fn random(&mut self, h: &mut Harness<'_, Ethernet>) -> Frame {
        random_frame(h.rng, &h.cfg, &h.payload)
    }

    /// A signaled frame of one entry by reference, one basic block, closes the round (its
    /// CQE retires the rest; the harness keeps room for one block).
    fn close(&mut self, h: &mut Harness<'_, Ethernet>) -> Frame {
        let len = h.rng.range(u64::from(ETH_MIN_INLINE) + 1, 200);
        let off = h.rng.range(0, h.payload.len() as u64 - len);
        Frame {
            sgl: vec![Sge::new(h.payload.as_ptr() as u64 + off, len as u32, 7)],
            flags: SendFlags::SIGNALED | SendFlags::IP_CSUM,
        }
    }

    fn posted(&mut self, f: &Frame) {
        let hdr = u32::from(ETH_MIN_INLINE);
        self.csum += u64::from(f.flags.contains(SendFlags::IP_CSUM));
        self.gathered += u64::from(f.sgl[0].length < hdr);
        let mut seen = 0;
        let mut consumed = false;
        for s in &f.sgl {
            if s.length != 0 && seen < hdr && seen + s.length == hdr {
                consumed = true;
            }
            seen += s.length;
        }
        self.consumed += u64::from(consumed);
    }
}

#[test]
fn ethernet_send_queue_wqes_match_libmlx5() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_e7e7, 13);
    let mut frames = Frames::default();
    let stats = send_run::run_all("eth wqe", CONFIGS, &mut rng, seed, &mut frames);
    let s = &stats;
    eprintln!(
        "eth wqe: {} randomized raw Ethernet WQEs compared with libmlx5's layout ({} with \
         checksum offload, {} with the inlined bytes gathered across entries, {} with an entry \
         they consumed exactly); {} inline, {} zero-length SGEs skipped, {} WQEs that wrap the \
         ring end ({} inline), {} WQE-index wraps, {} bytes libmlx5 leaves stale (zero in \
         ours); {} batches; {} BlueFlame rings, {} doorbell rings; {} completions",
        s.wqes,
        frames.csum,
        frames.gathered,
        frames.consumed,
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
    s.assert_coverage(CONFIGS.len());
    assert!(frames.csum > 0 && frames.csum < s.wqes);
    assert!(frames.gathered > 0 && frames.consumed > 0);
}

/// The brief's 64-byte multicast UDP frame, both checksums 0 (the device fills them in).
fn market_frame() -> [u8; 64] {
    let mut f = [0u8; 64];
    f[..42].copy_from_slice(&[
        0x01, 0x00, 0x5e, 0x01, 0x02, 0x03, 0x0c, 0x42, 0xa1, 0x11, 0x22, 0x33, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x32, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01,
        0xef, 0x01, 0x02, 0x03, 0x75, 0x30, 0x79, 0x18, 0x00, 0x1e, 0x00, 0x00,
    ]);
    for (i, b) in f[42..].iter_mut().enumerate() {
        *b = i as u8;
    }
    f
}

/// libmlx5's layout of the brief's worked examples A (one entry, `SIGNALED | IP_CSUM`) and B
/// (the same frame inline), on QPN 0x123 at producer counter 5, minimum inline 18: the C
/// model's bytes are the brief's.
#[test]
fn the_worked_examples_are_libmlx5s_bytes() {
    let frame = market_frame();
    let mut c = CSq::new_raw(16, 0x123, false, 128, 4, 18, &[0u8; 16 * 64]);
    let nop = CRequest {
        op: op::NOP,
        ..CRequest::default()
    };
    for _ in 0..5 {
        // SAFETY: a NOP reads nothing.
        unsafe { c.post(&nop) }.unwrap();
    }
    let sgl = [Sge::new(frame.as_ptr() as u64, 64, 0x1234)];
    let a = CRequest {
        op: op::SEND,
        sgl: &sgl,
        send_flags: (SendFlags::SIGNALED | SendFlags::IP_CSUM).bits(),
        ..CRequest::default()
    };
    // SAFETY: the entry names the live frame, whose first 18 bytes the model reads.
    assert_eq!(unsafe { c.post(&a) }, Ok(4));
    let addr = (frame.as_ptr() as u64 + 18).to_be_bytes();
    #[rustfmt::skip]
    let want_a: [u8; 64] = [
        0x00, 0x00, 0x05, 0x0a, 0x00, 0x01, 0x23, 0x04, 0x00, 0x00, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00,
        0x00, 0x00, 0x00, 0x00, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x12, 0x01, 0x00,
        0x5e, 0x01, 0x02, 0x03, 0x0c, 0x42, 0xa1, 0x11, 0x22, 0x33, 0x08, 0x00, 0x45, 0x00, 0x00, 0x32,
        0x00, 0x00, 0x00, 0x2e, 0x00, 0x00, 0x12, 0x34, addr[0], addr[1], addr[2], addr[3], addr[4],
        addr[5], addr[6], addr[7],
    ];
    let ring = c.ring().to_vec();
    assert_eq!(ring[5 * 64..6 * 64], want_a);

    let b = CRequest {
        send_flags: (SendFlags::SIGNALED | SendFlags::INLINE).bits(),
        ..a
    };
    // SAFETY: as above; inline, the whole frame is read.
    assert_eq!(unsafe { c.post(&b) }, Ok(7));
    let ring = c.ring().to_vec();
    let mut want_b = vec![
        0x00, 0x00, 0x06, 0x0a, 0x00, 0x01, 0x23, 0x07, 0, 0, 0, 0x08, 0, 0, 0, 0, //
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x00, 0x12, 0x01, 0x00,
    ];
    want_b.extend_from_slice(&frame[2..18]);
    want_b.extend_from_slice(&[0x80, 0x00, 0x00, 0x2e]);
    want_b.extend_from_slice(&frame[18..]);
    // (libmlx5 leaves the inline padding as the ring held it: zeros here.)
    want_b.resize(112, 0);
    assert_eq!(ring[6 * 64..6 * 64 + 112], want_b[..]);
}

//! The benchmark cases, each runnable on both sides: what `cargo xtask bench` times (criterion)
//! and counts (callgrind).
//!
//! A [`Runner`] performs a number of calls of its case and returns the time spent in them
//! only: the bookkeeping between runs of calls (handing send credits back, writing CQEs as the
//! device would) is done outside the timed span.

use std::time::{Duration, Instant};

use zverbs_core::{BriefCompletion, Completion, RemoteBuf, SendWr, Sge, TimedCompletion};

use crate::Fixture;
use crate::c::{CBase, CRecv, RecvKind, WrChain, wcs};
use crate::ffi::{self, ZvbWrDesc};
use crate::mem::QpMem;
use crate::ours::{self, Ours};
use crate::pingpong::{PingPong, SendRecv};
use zverbs_ffi::types::{IBV_SEND_SIGNALED, IBV_WR_RDMA_WRITE, ibv_send_wr, ibv_wc};

/// Which implementation runs a case.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    /// zverbs' direct path.
    Ours,
    /// The C baseline.
    C,
}

impl Side {
    /// `"ours"` or `"c"`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Ours => "ours",
            Side::C => "c",
        }
    }
}

/// What a case measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// Post and ring.
    Post,
    /// Poll.
    Poll,
    /// A round trip on the software device.
    RoundTrip,
}

/// A benchmark case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Short name (criterion's benchmark name, `count`'s argument).
    pub name: &'static str,
    /// What one call does.
    pub about: &'static str,
    /// What it measures.
    pub group: Group,
    /// Work requests or CQEs per call: times and counts are reported per unit.
    pub units: u32,
    /// The out-of-line function the zverbs side calls (callgrind's `--toggle-collect`), if it
    /// is counted.
    pub ours_fn: Option<&'static str>,
    /// The C function.
    pub c_fn: Option<&'static str>,
    /// The case whose zverbs measurement this one reuses (the same Rust code compared with a
    /// second C variant).
    pub ours_from: Option<&'static str>,
    /// A goal for the zverbs time on this machine's memory, in ns per unit.
    pub goal_ns: Option<f64>,
}

const fn case(
    name: &'static str,
    about: &'static str,
    group: Group,
    units: u32,
    fns: (&'static str, &'static str),
) -> Case {
    Case {
        name,
        about,
        group,
        units,
        ours_fn: Some(fns.0),
        c_fn: Some(fns.1),
        ours_from: None,
        goal_ns: None,
    }
}

/// Every case, in report order.
pub const CASES: &[Case] = &[
    Case {
        goal_ns: Some(10.0),
        ..case(
            "write",
            "RDMA WRITE, 1 SGE, BlueFlame",
            Group::Post,
            1,
            ("zverbs_benches::ours::post_write", "zvb_post_write"),
        )
    },
    case(
        "write_db",
        "RDMA WRITE, 1 SGE, doorbell only",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_write", "zvb_post_write"),
    ),
    case(
        "write_inline8",
        "RDMA WRITE, 8 bytes inline",
        Group::Post,
        1,
        (
            "zverbs_benches::ours::post_write_inline",
            "zvb_post_write_inline",
        ),
    ),
    case(
        "write_inline64",
        "RDMA WRITE, 64 bytes inline (2 basic blocks)",
        Group::Post,
        1,
        (
            "zverbs_benches::ours::post_write_inline",
            "zvb_post_write_inline",
        ),
    ),
    case(
        "send",
        "SEND, 1 SGE",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_send", "zvb_post_send"),
    ),
    case(
        "read",
        "RDMA READ, 1 SGE",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_read", "zvb_post_read"),
    ),
    case(
        "cas",
        "atomic compare-and-swap",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_cas", "zvb_post_cas"),
    ),
    case(
        "faa",
        "atomic fetch-and-add",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_faa", "zvb_post_faa"),
    ),
    case(
        "opaque",
        "RDMA WRITE, 1 SGE, request built elsewhere (generic path; C: ibv_send_wr)",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_opaque", "zvb_post_send_wr"),
    ),
    case(
        "batch1",
        "batch of 1 WRITE (generic path), BlueFlame",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_batch", "zvb_post_send_wr"),
    ),
    case(
        "batch8",
        "batch of 8 WRITEs behind one doorbell, per WQE",
        Group::Post,
        8,
        ("zverbs_benches::ours::post_batch", "zvb_post_send_wr"),
    ),
    case(
        "batch32",
        "batch of 32 WRITEs behind one doorbell, per WQE",
        Group::Post,
        32,
        ("zverbs_benches::ours::post_batch", "zvb_post_send_wr"),
    ),
    case(
        "chain8",
        "8 WRITEs posted one by one, then one doorbell, per WQE",
        Group::Post,
        8,
        ("zverbs_benches::ours::post_chain", "zvb_post_send_wr"),
    ),
    case(
        "prep_write",
        "prepared RDMA WRITE, 1 SGE, BlueFlame (C: as `write`)",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_prepared_rdma", "zvb_post_write"),
    ),
    case(
        "prep_write_db",
        "prepared RDMA WRITE, 1 SGE, doorbell only (C: as `write_db`)",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_prepared_rdma", "zvb_post_write"),
    ),
    case(
        "prep_send",
        "prepared SEND, 1 SGE (C: as `send`)",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_prepared_send", "zvb_post_send"),
    ),
    case(
        "prep_read",
        "prepared RDMA READ, 1 SGE (C: as `read`)",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_prepared_rdma", "zvb_post_read"),
    ),
    case(
        "eth_csum",
        "raw Ethernet SEND of a 64-byte frame, 1 SGE, IP_CSUM, 18 bytes inlined",
        Group::Post,
        1,
        ("zverbs_benches::ours::post_eth", "zvb_post_eth"),
    ),
    case(
        "prep_frame",
        "prepared raw Ethernet frame: 42 header bytes inlined, lengths set, 22-byte payload, \
         IP_CSUM (C: the same, prepared by hand)",
        Group::Post,
        1,
        (
            "zverbs_benches::ours::post_prepared_frame",
            "zvb_post_eth_frame",
        ),
    ),
    Case {
        goal_ns: Some(5.0),
        ..case(
            "poll1",
            "poll of 1 CQE (C: compiler barrier, as zverbs on x86)",
            Group::Poll,
            1,
            ("zverbs_benches::ours::poll", "zvb_poll_cq"),
        )
    },
    Case {
        ours_from: Some("poll1"),
        ..case(
            "poll1_lfence",
            "poll of 1 CQE (C: lfence, as rdma-core on x86)",
            Group::Poll,
            1,
            ("zverbs_benches::ours::poll", "zvb_poll_cq_lfence"),
        )
    },
    case(
        "poll16",
        "poll of 16 CQEs in one call, per CQE",
        Group::Poll,
        16,
        ("zverbs_benches::ours::poll", "zvb_poll_cq"),
    ),
    case(
        "poll_empty",
        "poll of an empty CQ",
        Group::Poll,
        1,
        ("zverbs_benches::ours::poll", "zvb_poll_cq"),
    ),
    case(
        "poll1_ts",
        "poll of 1 CQE with its timestamp (C: the same, the CQE's timestamp read as \
         ibv_wc_read_completion_ts does)",
        Group::Poll,
        1,
        ("zverbs_benches::ours::poll_timed", "zvb_poll_cq_ts"),
    ),
    case(
        "poll16_ts",
        "poll of 16 CQEs with their timestamps in one call, per CQE (C: the same)",
        Group::Poll,
        16,
        ("zverbs_benches::ours::poll_timed", "zvb_poll_cq_ts"),
    ),
    case(
        "poll16_recv",
        "poll of 16 receive CQEs in one call, per CQE (C: the same, wr_id from the receive \
         ring)",
        Group::Poll,
        16,
        ("zverbs_benches::ours::poll", "zvb_poll_cq"),
    ),
    case(
        "poll16_comp",
        "poll of a compressed session of 16 receives in one call, per CQE (C: the same \
         receives as 16 uncompressed CQEs)",
        Group::Poll,
        16,
        ("zverbs_benches::ours::poll", "zvb_poll_cq"),
    ),
    case(
        "poll1_recv32",
        "poll of 1 receive CQE of a 32-byte SEND, data in the buffer (C: the same)",
        Group::Poll,
        1,
        ("zverbs_benches::ours::poll", "zvb_poll_cq"),
    ),
    case(
        "poll1_scatter",
        "poll of 1 receive CQE of a 32-byte SEND scattered into the CQE, copied to the buffer \
         (C: the same, as libmlx5 copies it)",
        Group::Poll,
        1,
        ("zverbs_benches::ours::poll", "zvb_poll_cq_scatter"),
    ),
    case(
        "poll16_recv32",
        "poll of 16 receive CQEs of 32-byte SENDs, data in the buffers, per CQE (C: the \
         same)",
        Group::Poll,
        16,
        ("zverbs_benches::ours::poll", "zvb_poll_cq"),
    ),
    case(
        "poll16_scatter",
        "poll of 16 receive CQEs of 32-byte SENDs scattered into the CQEs, copied to the \
         buffers, per CQE (C: the same)",
        Group::Poll,
        16,
        ("zverbs_benches::ours::poll", "zvb_poll_cq_scatter"),
    ),
    case(
        "rx_stride1",
        "receive of 1 packet from a striding queue in place: poll, touch (first 8 bytes and \
         length), give the stride back, the WQE posted again every 64 packets (C: the same, \
         as DPDK's mlx5 receive path does it)",
        Group::Poll,
        1,
        ("zverbs_benches::ours::rx_stride", "zvb_rx_stride"),
    ),
    case(
        "rx_stride16",
        "receive of 16 packets from a striding queue in place in one poll, per packet (C: the \
         same)",
        Group::Poll,
        16,
        ("zverbs_benches::ours::rx_stride", "zvb_rx_stride"),
    ),
    case(
        "poll1_brief",
        "poll of 1 CQE, wr_id/status/opcode/byte_len only (C: full ibv_wc poll)",
        Group::Poll,
        1,
        ("zverbs_benches::ours::poll_brief", "zvb_poll_cq"),
    ),
    case(
        "poll16_brief",
        "poll of 16 CQEs, wr_id/status/opcode/byte_len only, per CQE (C: full ibv_wc poll)",
        Group::Poll,
        16,
        ("zverbs_benches::ours::poll_brief", "zvb_poll_cq"),
    ),
    Case {
        ours_fn: None,
        c_fn: None,
        ..case(
            "pingpong",
            "RDMA WRITE ping-pong round trip on the software device (8 bytes, signaled)",
            Group::RoundTrip,
            1,
            ("", ""),
        )
    },
    Case {
        ours_fn: None,
        c_fn: None,
        ..case(
            "sendrecv",
            "SEND/RECV ping-pong round trip on the software device (32 bytes, signaled; zverbs \
             only)",
            Group::RoundTrip,
            1,
            ("", ""),
        )
    },
    Case {
        ours_fn: None,
        c_fn: None,
        ..case(
            "sendrecv_scatter",
            "SEND/RECV ping-pong round trip as sendrecv, the data scattered into the receive \
             CQEs (zverbs only)",
            Group::RoundTrip,
            1,
            ("", ""),
        )
    },
];

/// The case named `name`.
pub fn find(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name == name)
}

/// Performs calls of one case on one side.
pub trait Runner {
    /// Performs `calls` calls and returns the time spent in them.
    fn run(&mut self, calls: u64) -> Duration;
}

/// Send basic blocks of the post fixtures.
pub const BLOCKS: u32 = 512;
/// CQEs of the fixtures.
pub const CQES: u32 = 512;
/// BlueFlame buffer size of the fixtures (as ConnectX reports it).
pub const BF_SIZE: u32 = 256;

// Operands: fixed values passed through `black_box`, so neither compiler can fold them.
const ADDR: u64 = 0x10_0000;
const LEN: u32 = 64;
const LKEY: u32 = 0x1100;
const RADDR: u64 = 0x7f00_0000_1000;
const RKEY: u32 = 0xdead_beef;
const WR_ID: u64 = 7;
/// Inline payload source.
static DATA: [u8; 64] = [0x5a; 64];

/// The raw Ethernet cases' frame: the research brief's 64-byte multicast UDP frame (Ethernet,
/// IPv4, UDP: 42 header bytes, checksums 0 for the device, then 22 payload bytes).
static FRAME: [u8; 64] = {
    let head: [u8; 42] = [
        0x01, 0x00, 0x5e, 0x01, 0x02, 0x03, 0x0c, 0x42, 0xa1, 0x11, 0x22, 0x33, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x32, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0x0a, 0x00, 0x00, 0x01,
        0xef, 0x01, 0x02, 0x03, 0x75, 0x30, 0x79, 0x18, 0x00, 0x1e, 0x00, 0x00,
    ];
    let mut f = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        f[i] = if i < 42 { head[i] } else { (i - 42) as u8 };
        i += 1;
    }
    f
};

/// The frame's header bytes (Ethernet, IPv4, UDP).
const FRAME_HEADERS: usize = 42;

/// A prepared frame of [`FRAME`]'s headers on `sq`.
fn prepared_frame(sq: &ours::EthSq) -> zverbs_mlx5dv::PreparedFrame {
    sq.prepare_frame(
        &FRAME[..FRAME_HEADERS],
        zverbs_core::SendFlags::IP_CSUM | zverbs_core::SendFlags::SIGNALED,
        zverbs_mlx5dv::FrameLengths::IPV4_UDP,
    )
    .expect("prepares")
}

/// The C baseline's prepared frame of [`FRAME`]'s headers.
fn c_frame() -> ffi::ZvbEthFrame {
    let mut f = ffi::ZvbEthFrame {
        segs: [0; 64],
        ip_base: 0,
        udp_base: 0,
        ip_at: 0,
        udp_at: 0,
    };
    // SAFETY: `f` is a live frame and the headers are 42 bytes.
    unsafe { ffi::zvb_prepare_eth_frame(&mut f, FRAME.as_ptr(), 16, 38) };
    f
}

/// The frame's address (the post reads its first bytes) and the payload's.
fn frame_addr() -> u64 {
    FRAME.as_ptr() as u64
}

/// Post+ring runs: as many calls as the queue takes, then every credit back (untimed).
struct PostRun<F, Op> {
    fix: F,
    blocks: u32,
    requests: u32,
    op: Op,
    failures: u64,
}

impl<F: Fixture, Op: FnMut(&mut F) -> bool> Runner for PostRun<F, Op> {
    fn run(&mut self, calls: u64) -> Duration {
        let mut total = Duration::ZERO;
        let mut left = calls;
        while left > 0 {
            let n = left.min(self.fix.room(self.blocks, self.requests));
            assert!(n > 0, "the fixture has no room");
            let t = Instant::now();
            for _ in 0..n {
                if !(self.op)(&mut self.fix) {
                    self.failures += 1;
                }
            }
            total += t.elapsed();
            left -= n;
            self.fix.complete_all(n * u64::from(self.requests));
        }
        assert_eq!(self.failures, 0, "refused posts");
        total
    }
}

/// Poll runs: the CQEs are written first (untimed), then polled.
struct PollRun<F, Op> {
    fix: F,
    per_call: u32,
    op: Op,
}

impl<F: Fixture, Op: FnMut(&mut F) -> usize> Runner for PollRun<F, Op> {
    fn run(&mut self, calls: u64) -> Duration {
        let mut total = Duration::ZERO;
        let mut left = calls;
        let per_call = u64::from(self.per_call);
        let chunk = u64::from(self.fix.cq_room()) / per_call.max(1);
        while left > 0 {
            let n = left.min(chunk);
            self.fix.write_cqes((n * per_call) as u32);
            let mut got = 0;
            let t = Instant::now();
            for _ in 0..n {
                got += (self.op)(&mut self.fix);
            }
            total += t.elapsed();
            assert_eq!(got as u64, n * per_call, "completions polled");
            left -= n;
        }
        total
    }
}

/// Round trips, timed whole.
struct RoundTripRun<E>(PingPong<E>);

impl<E: crate::pingpong::End> Runner for RoundTripRun<E> {
    fn run(&mut self, calls: u64) -> Duration {
        let t = Instant::now();
        for _ in 0..calls {
            self.0.round_trip();
        }
        t.elapsed()
    }
}

/// SEND/RECV round trips, timed whole.
struct SendRecvRun(SendRecv);

impl Runner for SendRecvRun {
    fn run(&mut self, calls: u64) -> Duration {
        let t = Instant::now();
        for _ in 0..calls {
            self.0.round_trip();
        }
        t.elapsed()
    }
}

fn post<F: Fixture + 'static>(
    fix: F,
    blocks: u32,
    requests: u32,
    op: impl FnMut(&mut F) -> bool + 'static,
) -> Box<dyn Runner> {
    Box::new(PostRun {
        fix,
        blocks,
        requests,
        op,
        failures: 0,
    })
}

fn poll<F: Fixture + 'static>(
    fix: F,
    per_call: u32,
    op: impl FnMut(&mut F) -> usize + 'static,
) -> Box<dyn Runner> {
    Box::new(PollRun { fix, per_call, op })
}

fn mem(bf_size: u32) -> QpMem {
    QpMem::new(BLOCKS, CQES, bf_size)
}

/// The 1-SGE RDMA WRITE every batch is made of; the last of a batch is signaled.
fn write_desc(i: usize, n: usize) -> ZvbWrDesc {
    ZvbWrDesc {
        wr_id: WR_ID + i as u64,
        addr: ADDR,
        len: LEN,
        lkey: LKEY,
        raddr: RADDR,
        rkey: RKEY,
        opcode: IBV_WR_RDMA_WRITE,
        send_flags: if i + 1 == n { IBV_SEND_SIGNALED } else { 0 },
        ..ZvbWrDesc::default()
    }
}

/// The same requests as [`write_desc`], as zverbs takes them.
fn write_wrs(n: usize) -> Vec<SendWr<'static>> {
    let sgl: &'static [Sge] = Box::leak(Box::new([Sge::new(ADDR, LEN, LKEY)]));
    (0..n)
        .map(|i| {
            let wr = SendWr::write(WR_ID + i as u64, sgl, RemoteBuf::new(RADDR, RKEY));
            if i + 1 == n { wr.signaled() } else { wr }
        })
        .collect()
}

/// The request a prepared case prepares (signaled, as the C baselines' are): its keys are
/// the benchmark's, its addresses and length are each post's.
fn prepared_template(name: &str) -> SendWr<'static> {
    let sgl: &'static [Sge] = Box::leak(Box::new([Sge::new(ADDR, LEN, LKEY)]));
    let remote = RemoteBuf::new(RADDR, RKEY);
    match name {
        "prep_read" => SendWr::read(WR_ID, sgl, remote),
        "prep_send" => SendWr::send(WR_ID, sgl),
        _ => SendWr::write(WR_ID, sgl, remote),
    }
    .signaled()
}

/// The zverbs runner of `case`.
fn ours_runner(case: &Case) -> Option<Box<dyn Runner>> {
    use std::hint::black_box as bb;
    let r = match case.name {
        "write" | "write_db" => {
            let bf = if case.name == "write" { BF_SIZE } else { 0 };
            post(Ours::new(mem(bf)), 1, 1, |f: &mut Ours| {
                // SAFETY: no device: nothing reads the memory the request names.
                unsafe {
                    ours::post_write(
                        &mut f.sq,
                        bb(ADDR),
                        bb(LEN),
                        bb(LKEY),
                        bb(RADDR),
                        bb(RKEY),
                        bb(WR_ID),
                    )
                }
                .is_ok()
            })
        }
        "prep_write" | "prep_write_db" | "prep_read" => {
            let bf = if case.name.ends_with("_db") {
                0
            } else {
                BF_SIZE
            };
            let fix = Ours::new(mem(bf));
            let p = fix
                .sq
                .prepare_rdma(&prepared_template(case.name))
                .expect("prepares");
            post(fix, 1, 1, move |f: &mut Ours| {
                // SAFETY: no device: nothing reads the memory the request names.
                unsafe {
                    ours::post_prepared_rdma(
                        &mut f.sq,
                        bb(&p),
                        bb(ADDR),
                        bb(LEN),
                        bb(RADDR),
                        bb(WR_ID),
                    )
                }
                .is_ok()
            })
        }
        "prep_send" => {
            let fix = Ours::new(mem(BF_SIZE));
            let p = fix
                .sq
                .prepare_send(&prepared_template(case.name))
                .expect("prepares");
            post(fix, 1, 1, move |f: &mut Ours| {
                // SAFETY: as above.
                unsafe { ours::post_prepared_send(&mut f.sq, bb(&p), bb(ADDR), bb(LEN), bb(WR_ID)) }
                    .is_ok()
            })
        }
        "write_inline8" | "write_inline64" => {
            let (len, blocks) = if case.name == "write_inline8" {
                (8, 1)
            } else {
                (64, 2)
            };
            post(Ours::new(mem(BF_SIZE)), blocks, 1, move |f: &mut Ours| {
                // SAFETY: as above; the inline source is a live static.
                unsafe {
                    ours::post_write_inline(
                        &mut f.sq,
                        bb(&DATA[..len]),
                        bb(RADDR),
                        bb(RKEY),
                        bb(WR_ID),
                    )
                }
                .is_ok()
            })
        }
        "eth_csum" => post(Ours::new_eth(mem(BF_SIZE)), 1, 1, |f: &mut Ours<_>| {
            // SAFETY: no device: nothing reads the frame but the post (its first bytes, a
            // live static).
            unsafe { ours::post_eth(&mut f.sq, bb(frame_addr()), bb(64), bb(LKEY), bb(WR_ID)) }
                .is_ok()
        }),
        "prep_frame" => {
            let fix = Ours::new_eth(mem(BF_SIZE));
            let p = prepared_frame(&fix.sq);
            let payload = frame_addr() + FRAME_HEADERS as u64;
            post(fix, 2, 1, move |f: &mut Ours<_>| {
                // SAFETY: no device: nothing reads the payload.
                unsafe {
                    ours::post_prepared_frame(
                        &mut f.sq,
                        bb(&p),
                        bb(payload),
                        bb(22),
                        bb(LKEY),
                        bb(WR_ID),
                    )
                }
                .is_ok()
            })
        }
        "send" => post(Ours::new(mem(BF_SIZE)), 1, 1, |f: &mut Ours| {
            // SAFETY: as above.
            unsafe { ours::post_send(&mut f.sq, bb(ADDR), bb(LEN), bb(LKEY), bb(WR_ID)) }.is_ok()
        }),
        "read" => post(Ours::new(mem(BF_SIZE)), 1, 1, |f: &mut Ours| {
            // SAFETY: as above.
            unsafe {
                ours::post_read(
                    &mut f.sq,
                    bb(ADDR),
                    bb(LEN),
                    bb(LKEY),
                    bb(RADDR),
                    bb(RKEY),
                    bb(WR_ID),
                )
            }
            .is_ok()
        }),
        "cas" => post(Ours::new(mem(BF_SIZE)), 1, 1, |f: &mut Ours| {
            // SAFETY: as above.
            unsafe {
                ours::post_cas(
                    &mut f.sq,
                    bb(ADDR),
                    bb(LKEY),
                    bb(RADDR),
                    bb(RKEY),
                    bb(1),
                    bb(2),
                    bb(WR_ID),
                )
            }
            .is_ok()
        }),
        "faa" => post(Ours::new(mem(BF_SIZE)), 1, 1, |f: &mut Ours| {
            // SAFETY: as above.
            unsafe {
                ours::post_faa(
                    &mut f.sq,
                    bb(ADDR),
                    bb(LKEY),
                    bb(RADDR),
                    bb(RKEY),
                    bb(1),
                    bb(WR_ID),
                )
            }
            .is_ok()
        }),
        "opaque" => {
            let wr = write_wrs(1)[0];
            post(Ours::new(mem(BF_SIZE)), 1, 1, move |f: &mut Ours| {
                // SAFETY: as above.
                unsafe { ours::post_opaque(&mut f.sq, bb(&wr)) }.is_ok()
            })
        }
        "batch1" | "batch8" | "batch32" => {
            let n = case.units;
            let wrs = write_wrs(n as usize);
            post(Ours::new(mem(BF_SIZE)), n, n, move |f: &mut Ours| {
                // SAFETY: as above.
                unsafe { ours::post_batch(&mut f.sq, bb(&wrs)) }.is_ok()
            })
        }
        "chain8" => {
            let n = case.units;
            let wrs = write_wrs(n as usize);
            post(Ours::new(mem(BF_SIZE)), n, n, move |f: &mut Ours| {
                // SAFETY: as above.
                unsafe { ours::post_chain(&mut f.sq, bb(&wrs)) }.is_ok()
            })
        }
        "poll1" | "poll_empty" => {
            let per_call = u32::from(case.name == "poll1");
            let mut wc = [Completion::EMPTY; 1];
            poll(Ours::new(mem(BF_SIZE)), per_call, move |f: &mut Ours| {
                ours::poll(&mut f.cq, bb(&mut wc))
            })
        }
        "poll16" => {
            let mut wc = [Completion::EMPTY; 16];
            poll(Ours::new(mem(BF_SIZE)), 16, move |f: &mut Ours| {
                ours::poll(&mut f.cq, bb(&mut wc))
            })
        }
        "poll1_ts" | "poll16_ts" => {
            let per_call = case.units;
            let mut wc = vec![TimedCompletion::EMPTY; per_call as usize];
            let fix = Ours::new(mem(BF_SIZE)).with_timestamps();
            poll(fix, per_call, move |f: &mut Ours| {
                ours::poll_timed(&mut f.cq, bb(&mut wc))
            })
        }
        "poll16_recv" | "poll16_comp" => {
            let mut wc = [Completion::EMPTY; 16];
            let session = (case.name == "poll16_comp").then_some(16);
            poll(
                crate::ours::OursRecv::new(mem(BF_SIZE), session),
                16,
                move |f: &mut crate::ours::OursRecv| ours::poll(&mut f.cq, bb(&mut wc)),
            )
        }
        "poll1_recv32" | "poll1_scatter" | "poll16_recv32" | "poll16_scatter" => {
            let mut wc = vec![Completion::EMPTY; case.units as usize];
            let fix = ours::OursSmall::new(mem(BF_SIZE), case.name.ends_with("_scatter"));
            poll(fix, case.units, move |f: &mut ours::OursSmall| {
                ours::poll(&mut f.cq, bb(&mut wc))
            })
        }
        "rx_stride1" | "rx_stride16" => {
            let max = case.units as usize;
            let mut sum = 0u64;
            poll(
                ours::OursStride::new(mem(BF_SIZE)),
                case.units,
                move |f: &mut ours::OursStride| {
                    ours::rx_stride(&f.rq, &mut f.cq, bb(max), &mut sum)
                },
            )
        }
        "poll1_brief" | "poll16_brief" => {
            let mut wc = vec![BriefCompletion::EMPTY; case.units as usize];
            poll(Ours::new(mem(BF_SIZE)), case.units, move |f: &mut Ours| {
                ours::poll_brief(&mut f.cq, bb(&mut wc))
            })
        }
        "pingpong" => Box::new(RoundTripRun(PingPong::ours())),
        "sendrecv" | "sendrecv_scatter" => {
            Box::new(SendRecvRun(SendRecv::new(case.name == "sendrecv_scatter")))
        }
        _ => return None,
    };
    Some(r)
}

/// The C runner of `case`.
fn c_runner(case: &Case) -> Option<Box<dyn Runner>> {
    use std::hint::black_box as bb;
    let r = match case.name {
        "write" | "write_db" | "prep_write" | "prep_write_db" => {
            let bf = if case.name.ends_with("_db") {
                0
            } else {
                BF_SIZE
            };
            post(CBase::new(mem(bf)), 1, 1, |f: &mut CBase| {
                // SAFETY: a live queue; no device reads the memory the request names.
                let rc = unsafe {
                    ffi::zvb_post_write(
                        &mut *f.sq,
                        bb(ADDR),
                        bb(LEN),
                        bb(LKEY),
                        bb(RADDR),
                        bb(RKEY),
                        bb(WR_ID),
                    )
                };
                rc == 0
            })
        }
        "write_inline8" | "write_inline64" => {
            let (len, blocks) = if case.name == "write_inline8" {
                (8, 1)
            } else {
                (64, 2)
            };
            post(CBase::new(mem(BF_SIZE)), blocks, 1, move |f: &mut CBase| {
                // SAFETY: as above; the inline source is a live static of at least `len` bytes.
                let rc = unsafe {
                    ffi::zvb_post_write_inline(
                        &mut *f.sq,
                        bb(DATA.as_ptr()),
                        bb(len),
                        bb(RADDR),
                        bb(RKEY),
                        bb(WR_ID),
                    )
                };
                rc == 0
            })
        }
        "eth_csum" => post(CBase::new(mem(BF_SIZE)), 1, 1, |f: &mut CBase| {
            // SAFETY: as above; the frame's first bytes are a live static.
            let rc = unsafe {
                ffi::zvb_post_eth(&mut *f.sq, bb(frame_addr()), bb(64), bb(LKEY), bb(WR_ID))
            };
            rc == 0
        }),
        "prep_frame" => {
            let frame = c_frame();
            let payload = frame_addr() + FRAME_HEADERS as u64;
            post(CBase::new(mem(BF_SIZE)), 2, 1, move |f: &mut CBase| {
                // SAFETY: as above; `frame` is live.
                let rc = unsafe {
                    ffi::zvb_post_eth_frame(
                        &mut *f.sq,
                        bb(&frame),
                        bb(payload),
                        bb(22),
                        bb(LKEY),
                        bb(WR_ID),
                    )
                };
                rc == 0
            })
        }
        "send" | "prep_send" => post(CBase::new(mem(BF_SIZE)), 1, 1, |f: &mut CBase| {
            // SAFETY: as above.
            let rc =
                unsafe { ffi::zvb_post_send(&mut *f.sq, bb(ADDR), bb(LEN), bb(LKEY), bb(WR_ID)) };
            rc == 0
        }),
        "read" | "prep_read" => post(CBase::new(mem(BF_SIZE)), 1, 1, |f: &mut CBase| {
            // SAFETY: as above.
            let rc = unsafe {
                ffi::zvb_post_read(
                    &mut *f.sq,
                    bb(ADDR),
                    bb(LEN),
                    bb(LKEY),
                    bb(RADDR),
                    bb(RKEY),
                    bb(WR_ID),
                )
            };
            rc == 0
        }),
        "cas" => post(CBase::new(mem(BF_SIZE)), 1, 1, |f: &mut CBase| {
            // SAFETY: as above.
            let rc = unsafe {
                ffi::zvb_post_cas(
                    &mut *f.sq,
                    bb(ADDR),
                    bb(LKEY),
                    bb(RADDR),
                    bb(RKEY),
                    bb(1),
                    bb(2),
                    bb(WR_ID),
                )
            };
            rc == 0
        }),
        "faa" => post(CBase::new(mem(BF_SIZE)), 1, 1, |f: &mut CBase| {
            // SAFETY: as above.
            let rc = unsafe {
                ffi::zvb_post_faa(
                    &mut *f.sq,
                    bb(ADDR),
                    bb(LKEY),
                    bb(RADDR),
                    bb(RKEY),
                    bb(1),
                    bb(WR_ID),
                )
            };
            rc == 0
        }),
        "opaque" | "batch1" | "batch8" | "batch32" | "chain8" => {
            let n = case.units;
            let chain = WrChain::new(
                &(0..n as usize)
                    .map(|i| write_desc(i, n as usize))
                    .collect::<Vec<_>>(),
            );
            post(CBase::new(mem(BF_SIZE)), n, n, move |f: &mut CBase| {
                let mut bad: *mut ibv_send_wr = std::ptr::null_mut();
                // SAFETY: a live queue and chain.
                unsafe { ffi::zvb_post_send_wr(&mut *f.sq, bb(chain.head()), &mut bad) == 0 }
            })
        }
        "poll1" | "poll_empty" | "poll1_lfence" | "poll1_brief" => {
            let per_call = u32::from(case.name != "poll_empty");
            let lfence = case.name == "poll1_lfence";
            let mut wc = wcs::<1>();
            poll(CBase::new(mem(BF_SIZE)), per_call, move |f: &mut CBase| {
                let wc = bb(&mut wc).as_mut_ptr();
                // SAFETY: a live CQ and a one-entry array.
                let n = unsafe {
                    if lfence {
                        ffi::zvb_poll_cq_lfence(&mut *f.cq, 1, wc)
                    } else {
                        ffi::zvb_poll_cq(&mut *f.cq, 1, wc)
                    }
                };
                n.max(0) as usize
            })
        }
        "poll1_ts" | "poll16_ts" => {
            let n = case.units as usize;
            let mut wc = vec![ibv_wc::default(); n];
            let mut ts = vec![0u64; n];
            poll(
                CBase::new(mem(BF_SIZE)),
                case.units,
                move |f: &mut CBase| {
                    // SAFETY: a live CQ and two arrays of `n` entries.
                    let got = unsafe {
                        ffi::zvb_poll_cq_ts(
                            &mut *f.cq,
                            n as i32,
                            bb(&mut wc).as_mut_ptr(),
                            bb(&mut ts).as_mut_ptr(),
                        )
                    };
                    got.max(0) as usize
                },
            )
        }
        "poll16" | "poll16_brief" => {
            let mut wc = wcs::<16>();
            poll(CBase::new(mem(BF_SIZE)), 16, move |f: &mut CBase| {
                // SAFETY: a live CQ and a 16-entry array.
                let n = unsafe { ffi::zvb_poll_cq(&mut *f.cq, 16, bb(&mut wc).as_mut_ptr()) };
                n.max(0) as usize
            })
        }
        "poll16_recv" | "poll16_comp" | "poll1_recv32" | "poll16_recv32" | "poll1_scatter"
        | "poll16_scatter" => {
            let kind = match case.name {
                "poll16_recv" | "poll16_comp" => RecvKind::Plain,
                "poll1_recv32" | "poll16_recv32" => RecvKind::Small,
                _ => RecvKind::Scattered,
            };
            let n = case.units as usize;
            let mut wc = vec![ibv_wc::default(); n];
            poll(
                CRecv::new(mem(BF_SIZE), kind),
                case.units,
                move |f: &mut CRecv| {
                    let cq = &mut *f.base.cq;
                    let wc = bb(&mut wc).as_mut_ptr();
                    // SAFETY: a live CQ, its QP's receive ring, wr_id array and buffers, and an
                    // array of `n` entries.
                    let got = unsafe {
                        if kind == RecvKind::Scattered {
                            ffi::zvb_poll_cq_scatter(cq, n as i32, wc)
                        } else {
                            ffi::zvb_poll_cq(cq, n as i32, wc)
                        }
                    };
                    got.max(0) as usize
                },
            )
        }
        "rx_stride1" | "rx_stride16" => {
            let max = case.units as i32;
            let mut sum = 0u64;
            poll(
                crate::c::CStride::new(mem(BF_SIZE)),
                case.units,
                move |f: &mut crate::c::CStride| {
                    // SAFETY: a live CQ and striding queue over leaked memory.
                    let n = unsafe {
                        ffi::zvb_rx_stride(&mut *f.base.cq, &mut *f.rq, bb(max), &mut sum)
                    };
                    n.max(0) as usize
                },
            )
        }
        "pingpong" => Box::new(RoundTripRun(PingPong::c())),
        _ => return None,
    };
    Some(r)
}

/// The runner of `case` on `side`, or `None` when that side does not run it (the zverbs side
/// of a case that reuses another's measurement).
pub fn runner(case: &Case, side: Side) -> Option<Box<dyn Runner>> {
    match side {
        Side::Ours => ours_runner(find(case.ours_from.unwrap_or(case.name))?),
        Side::C => c_runner(case),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zverbs_core::{Completion, PollCq, WcOpcode};

    /// Both sides over rings of `blocks` blocks.
    fn pair(blocks: u32, bf: u32) -> (Ours, CBase) {
        (
            Ours::new(QpMem::new(blocks, 64, bf)),
            CBase::new(QpMem::new(blocks, 64, bf)),
        )
    }

    /// Posts one request of `kind` on both sides.
    fn post_both(o: &mut Ours, c: &mut CBase, kind: &str, wr_id: u64) {
        let data: Vec<u8> = (0..64).map(|i| (i * 7 + wr_id as usize) as u8).collect();
        let sq = &mut *c.sq;
        // SAFETY: no device reads the memory the requests name; inline sources are live.
        let (ours, rc) = unsafe {
            match kind {
                "write" => (
                    ours::post_write(&mut o.sq, ADDR, LEN, LKEY, RADDR, RKEY, wr_id),
                    ffi::zvb_post_write(sq, ADDR, LEN, LKEY, RADDR, RKEY, wr_id),
                ),
                "write0" => (
                    ours::post_write(&mut o.sq, ADDR, 0, LKEY, RADDR, RKEY, wr_id),
                    ffi::zvb_post_write(sq, ADDR, 0, LKEY, RADDR, RKEY, wr_id),
                ),
                "inline8" | "inline64" | "inline13" => {
                    let len = kind[6..].parse::<usize>().unwrap();
                    (
                        ours::post_write_inline(&mut o.sq, &data[..len], RADDR, RKEY, wr_id),
                        ffi::zvb_post_write_inline(
                            sq,
                            data.as_ptr(),
                            len as u32,
                            RADDR,
                            RKEY,
                            wr_id,
                        ),
                    )
                }
                "send" => (
                    ours::post_send(&mut o.sq, ADDR, LEN, LKEY, wr_id),
                    ffi::zvb_post_send(sq, ADDR, LEN, LKEY, wr_id),
                ),
                "read" => (
                    ours::post_read(&mut o.sq, ADDR, LEN, LKEY, RADDR, RKEY, wr_id),
                    ffi::zvb_post_read(sq, ADDR, LEN, LKEY, RADDR, RKEY, wr_id),
                ),
                "cas" => (
                    ours::post_cas(&mut o.sq, ADDR, LKEY, RADDR, RKEY, 11, 22, wr_id),
                    ffi::zvb_post_cas(sq, ADDR, LKEY, RADDR, RKEY, 11, 22, wr_id),
                ),
                "faa" => (
                    ours::post_faa(&mut o.sq, ADDR, LKEY, RADDR, RKEY, 33, wr_id),
                    ffi::zvb_post_faa(sq, ADDR, LKEY, RADDR, RKEY, 33, wr_id),
                ),
                "prep_write" | "prep_write0" | "prep_read" => {
                    let name = if kind == "prep_read" {
                        kind
                    } else {
                        "prep_write"
                    };
                    let p = o.sq.prepare_rdma(&prepared_template(name)).unwrap();
                    let len = if kind == "prep_write0" { 0 } else { LEN };
                    let zvb = if kind == "prep_read" {
                        ffi::zvb_post_read
                    } else {
                        ffi::zvb_post_write
                    };
                    (
                        ours::post_prepared_rdma(&mut o.sq, &p, ADDR, len, RADDR, wr_id),
                        zvb(sq, ADDR, len, LKEY, RADDR, RKEY, wr_id),
                    )
                }
                "prep_send" => {
                    let p = o.sq.prepare_send(&prepared_template(kind)).unwrap();
                    (
                        ours::post_prepared_send(&mut o.sq, &p, ADDR, LEN, wr_id),
                        ffi::zvb_post_send(sq, ADDR, LEN, LKEY, wr_id),
                    )
                }
                other => panic!("no request kind {other}"),
            }
        };
        assert_eq!((ours, rc), (Ok(()), 0), "{kind}");
    }

    fn assert_same<T: zverbs_mlx5dv::SqTransport>(o: &Ours<T>, c: &CBase, what: &str) {
        assert_eq!(o.mem.sq_bytes(), c.mem.sq_bytes(), "ring after {what}");
        assert_eq!(
            bf_as_read(o.mem.bf_bytes()),
            bf_as_read(c.mem.bf_bytes()),
            "BlueFlame after {what}"
        );
        assert_eq!(
            o.mem.sq_dbrec(),
            c.mem.sq_dbrec(),
            "doorbell record after {what}"
        );
    }

    /// A BlueFlame area as the device reads it: of each buffer, the `ds` segments of the WQE
    /// last copied into it (its control segment's byte 7). A copy is whole 64-byte blocks:
    /// past the WQE, rdma-core's copy carries the ring's stale bytes, a prepared post zeros.
    fn bf_as_read(mut bf: Vec<u8>) -> Vec<u8> {
        if bf.len() > 8 {
            let size = bf.len() / 2;
            for buf in bf.chunks_mut(size) {
                let ds = usize::from(buf[7] & 0x3f) * 16;
                buf[ds.min(size)..].fill(0);
            }
        }
        bf
    }

    /// The benchmarked requests are the same bytes on both sides: WQEs, BlueFlame copies and
    /// doorbell records, at every position of a small ring (so WQEs of two blocks straddle its
    /// end), with BlueFlame and doorbell only.
    #[test]
    fn both_sides_write_the_same_bytes() {
        let kinds = [
            "write",
            "write0",
            "inline8",
            "inline13",
            "inline64",
            "send",
            "read",
            "cas",
            "faa",
            "prep_write",
            "prep_write0",
            "prep_send",
            "prep_read",
        ];
        for bf in [BF_SIZE, 0] {
            for kind in kinds {
                let (mut o, mut c) = pair(8, bf);
                for i in 0..19u64 {
                    // A one-block request first shifts the two-block ones onto odd blocks.
                    let k = if i % 3 == 0 { "write" } else { kind };
                    post_both(&mut o, &mut c, k, 100 + i);
                    assert_same(&o, &c, &format!("{k} #{i} (bf {bf})"));
                    o.complete_all(1);
                    c.complete_all(1);
                }
            }
        }
    }

    /// The raw Ethernet cases are the same bytes on both sides: the 64-byte frame with 18 bytes
    /// inlined and the prepared frame (with a payload and without), at every position of a
    /// small ring (the prepared frame's two blocks straddle its end), with BlueFlame and
    /// doorbell only.
    #[test]
    fn both_sides_write_the_same_ethernet_bytes() {
        for bf in [BF_SIZE, 0] {
            for kind in ["eth_csum", "prep_frame", "prep_frame0"] {
                let mut o = Ours::new_eth(QpMem::new(8, 64, bf));
                let mut c = CBase::new(QpMem::new(8, 64, bf));
                let p = prepared_frame(&o.sq);
                let frame = c_frame();
                for i in 0..19u64 {
                    // A one-block frame first shifts the two-block ones onto odd blocks.
                    let k = if i % 3 == 0 { "eth_csum" } else { kind };
                    let wr_id = 100 + i;
                    let payload = frame_addr() + FRAME_HEADERS as u64;
                    let len = if k == "prep_frame0" { 0 } else { 22 };
                    // SAFETY: no device reads the memory; the frame is a live static.
                    let (ours, rc) = unsafe {
                        if k == "eth_csum" {
                            (
                                ours::post_eth(&mut o.sq, frame_addr(), 64, LKEY, wr_id),
                                ffi::zvb_post_eth(&mut *c.sq, frame_addr(), 64, LKEY, wr_id),
                            )
                        } else {
                            (
                                ours::post_prepared_frame(&mut o.sq, &p, payload, len, LKEY, wr_id),
                                ffi::zvb_post_eth_frame(
                                    &mut *c.sq, &frame, payload, len, LKEY, wr_id,
                                ),
                            )
                        }
                    };
                    assert_eq!((ours, rc), (Ok(()), 0), "{k}");
                    // Past the WQE in its last block: stale bytes on one side, zeros on the
                    // other (a prepared frame stores whole blocks), never read.
                    let at = o.sq.producer() - u32::from(k != "eth_csum") - 1;
                    o.mem.clear_past_wqe(at);
                    c.mem.clear_past_wqe(at);
                    assert_same(&o, &c, &format!("{k} #{i} (bf {bf})"));
                    o.complete_all(1);
                    c.complete_all(1);
                }
            }
        }
    }

    /// A verbs chain and a zverbs batch of the same requests write the same bytes and ring the
    /// same doorbell (8 bytes of the last control segment).
    #[test]
    fn batches_write_the_same_bytes() {
        for n in [1usize, 3, 8] {
            let (mut o, mut c) = pair(32, BF_SIZE);
            let descs: Vec<ZvbWrDesc> = (0..n).map(|i| write_desc(i, n)).collect();
            let chain = WrChain::new(&descs);
            let wrs = write_wrs(n);
            let mut bad = std::ptr::null_mut();
            // SAFETY: no device reads the memory the requests name.
            let (ours, rc) = unsafe {
                (
                    ours::post_batch(&mut o.sq, &wrs),
                    ffi::zvb_post_send_wr(&mut *c.sq, chain.head(), &mut bad),
                )
            };
            assert_eq!((ours, rc), (Ok(()), 0));
            assert_same(&o, &c, &format!("a batch of {n}"));
        }
    }

    /// Both pollers report the same completions for the same CQEs.
    #[test]
    fn both_sides_poll_the_same_completions() {
        let (mut o, mut c) = pair(16, BF_SIZE);
        for i in 0..4 {
            post_both(&mut o, &mut c, "write", 7 + i);
        }
        // One CQE naming each WQE, as the device writes them.
        o.write_cqes(4);
        c.write_cqes(4);
        let mut ours = [zverbs_core::Completion::EMPTY; 8];
        let mut theirs = [ibv_wc::default(); 8];
        assert_eq!(ours::poll(&mut o.cq, &mut ours), 4);
        // SAFETY: a live CQ and an 8-entry array.
        let polled = unsafe { ffi::zvb_poll_cq(&mut *c.cq, 8, theirs.as_mut_ptr()) };
        assert_eq!(polled, 4);
        for (a, b) in ours.iter().zip(&theirs).take(4) {
            assert_eq!(
                (a.wr_id, a.qp_num, a.byte_len),
                (b.wr_id, b.qp_num, b.byte_len)
            );
            assert!(a.is_success() && b.status == 0);
            assert_eq!((a.opcode, b.opcode), (WcOpcode::RdmaWrite, 1));
        }
        assert_eq!(o.mem.cq_dbrec(), c.mem.cq_dbrec());
        assert_eq!(o.cq.poll(&mut ours), 0);
    }

    /// The 32-byte receive fixtures take the path they claim: scattered CQEs carry the data
    /// and `INLINE_SCATTER_32`, and the poll copies it into the receive buffers; plain ones
    /// carry neither and the buffers already hold the message.
    #[test]
    fn small_receive_fixtures_scatter_or_not_as_named() {
        for scatter in [false, true] {
            let mut f = ours::OursSmall::new(mem(BF_SIZE), scatter);
            for round in 0..3u32 {
                let ci = f.cq.consumer();
                f.write_cqes(16);
                for i in 0..16 {
                    let op_own = f.mem.op_own(ci + i);
                    assert_eq!(op_own & 0x0c, if scatter { 0x04 } else { 0 }, "op_own");
                    let before = if scatter { [0; 32] } else { ours::SMALL_MSG };
                    assert_eq!(f.buf(ci + i), before, "buffer before the poll");
                }
                let mut wc = [Completion::EMPTY; 16];
                assert_eq!(ours::poll(&mut f.cq, &mut wc), 16);
                for (i, c) in wc.iter().enumerate() {
                    assert!(c.is_success(), "{c:?}");
                    assert_eq!((c.opcode, c.byte_len), (WcOpcode::Recv, 32));
                    assert_eq!(c.wr_id, u64::from(round * 16 + i as u32));
                    assert_eq!(f.buf(ci + i as u32), ours::SMALL_MSG, "buffer after");
                }
            }
        }
    }

    /// The C receive baselines do the work their zverbs cases do: the `wr_id` comes from the
    /// receive ring, scattered data lands in the receive WQE's buffer (and only with the
    /// scatter poll), and the timestamped poll reads each CQE's timestamp.
    #[test]
    fn c_receive_and_timestamp_polls_do_the_same_work() {
        for kind in [RecvKind::Plain, RecvKind::Small, RecvKind::Scattered] {
            let mut f = CRecv::new(mem(BF_SIZE), kind);
            for round in 0..3u32 {
                let ci = f.base.cq.cons_index;
                f.write_cqes(16);
                let mut wc = [ibv_wc::default(); 16];
                // SAFETY: a live CQ with its receive ring and a 16-entry array.
                let n = unsafe {
                    if kind == RecvKind::Scattered {
                        ffi::zvb_poll_cq_scatter(&mut *f.base.cq, 16, wc.as_mut_ptr())
                    } else {
                        ffi::zvb_poll_cq(&mut *f.base.cq, 16, wc.as_mut_ptr())
                    }
                };
                assert_eq!(n, 16, "{kind:?}");
                for (i, w) in wc.iter().enumerate() {
                    assert_eq!(w.status, 0, "{kind:?}");
                    assert_eq!(w.opcode, 128, "IBV_WC_RECV");
                    assert_eq!(w.wr_id, u64::from(round * 16 + i as u32), "{kind:?}");
                    let want = if kind == RecvKind::Plain { 64 } else { 32 };
                    assert_eq!(w.byte_len, want);
                    if kind != RecvKind::Plain {
                        assert_eq!(f.buf(ci + i as u32), ours::SMALL_MSG, "{kind:?} buffer");
                    }
                }
            }
        }
        // A scattered CQE polled without the scatter poll leaves the buffer as it was.
        let mut f = CRecv::new(mem(BF_SIZE), RecvKind::Scattered);
        f.write_cqes(1);
        let mut wc = [ibv_wc::default(); 1];
        // SAFETY: as above.
        let n = unsafe { ffi::zvb_poll_cq(&mut *f.base.cq, 1, wc.as_mut_ptr()) };
        assert_eq!(n, 1);
        assert_eq!(f.buf(0), [0; 32]);

        let mut c = CBase::new(mem(BF_SIZE));
        for i in 0..4 {
            post_both(&mut Ours::new(mem(BF_SIZE)), &mut c, "write", i);
        }
        c.write_cqes(4);
        for i in 0..4u64 {
            let at = i as usize * 64 + 48;
            // SAFETY: the timestamp field of CQE `i` of the leaked ring, not being polled.
            unsafe {
                c.mem
                    .cq
                    .as_ptr()
                    .add(at)
                    .cast::<[u8; 8]>()
                    .write((0x0102_0304_0506_0700 + i).to_be_bytes())
            };
        }
        let (mut wc, mut ts) = ([ibv_wc::default(); 4], [0u64; 4]);
        // SAFETY: a live CQ and two 4-entry arrays.
        let n = unsafe { ffi::zvb_poll_cq_ts(&mut *c.cq, 4, wc.as_mut_ptr(), ts.as_mut_ptr()) };
        assert_eq!(n, 4);
        for (i, t) in ts.iter().enumerate() {
            assert_eq!(*t, 0x0102_0304_0506_0700 + i as u64);
        }
    }

    /// The packet cases do the same work on both sides: over many refills (the WQEs posted
    /// again, the ring wrapping), the same packets touched (the same sum), the same WQEs
    /// posted again (the doorbell records), the same CQEs consumed.
    #[test]
    fn both_sides_receive_the_same_packets_in_place() {
        for max in [1usize, 16] {
            let mut o = ours::OursStride::new(mem(BF_SIZE));
            let mut c = crate::c::CStride::new(mem(BF_SIZE));
            assert_eq!(o.smem.dbrec(), crate::mem::STRIDE_WQES);
            let (mut so, mut sc) = (0u64, 0u64);
            for round in 0..200u32 {
                let n = 1 + round % 16;
                o.write_cqes(n);
                c.write_cqes(n);
                let (mut got_o, mut got_c) = (0, 0);
                while got_o < n as usize {
                    let k = ours::rx_stride(&o.rq, &mut o.cq, max, &mut so);
                    assert!(k > 0 && k <= max);
                    got_o += k;
                }
                while got_c < n as usize {
                    // SAFETY: a live CQ and striding queue.
                    let k = unsafe {
                        ffi::zvb_rx_stride(&mut *c.base.cq, &mut *c.rq, max as i32, &mut sc)
                    };
                    assert!(k > 0 && k as usize <= max);
                    got_c += k as usize;
                }
                assert_eq!((got_o, so), (got_c, sc), "round {round}");
                assert_eq!(o.smem.dbrec(), c.smem.dbrec(), "round {round}");
                assert_eq!(o.mem.cq_dbrec(), c.base.mem.cq_dbrec(), "round {round}");
                assert_eq!(ours::rx_stride(&o.rq, &mut o.cq, max, &mut so), 0);
            }
            // 1600 or so packets of one stride, 64 strides a WQE: the ring of 16 went round.
            assert!(o.smem.dbrec() > 2 * crate::mem::STRIDE_WQES);
            assert_eq!((o.rq.malformed(), c.rq.malformed), (0, 0));
        }
    }

    /// Every case runs on both sides, across the fixtures' refills.
    #[test]
    fn every_case_runs_on_both_sides() {
        for case in CASES {
            for side in [Side::Ours, Side::C] {
                let calls = if case.group == Group::RoundTrip {
                    20
                } else {
                    5000
                };
                // The SEND/RECV round trips have no C side.
                let Some(mut r) = runner(case, side) else {
                    assert!(side == Side::C && case.name.starts_with("sendrecv"));
                    continue;
                };
                r.run(calls);
            }
        }
    }
}

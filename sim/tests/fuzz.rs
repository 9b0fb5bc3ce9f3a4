//! Ring contents are untrusted input: random and half-valid WQEs, random receive entries and
//! random doorbell values never make the device panic, write outside the registered regions
//! that allow writing, write its own rings, or touch a guard byte.
//!
//! A property test (`proptest`): each case is one device with three QPs and up to 12 rounds of
//! generated ring contents, doorbell records and steps. A case first picks how much of what it
//! writes is consistent (20, 80, 95 or 100 percent of the segments: a live key, inside its
//! region, short), so that some cases reach deep into execution and others hammer the
//! parser. A failing case is shrunk (fewer rounds, WQEs and segments, consistent values in
//! place of garbage) before it is reported. The cases are drawn from a fixed seed;
//! `PROPTEST_RNG_SEED` draws others, `PROPTEST_CASES` sets how many, and a failure is replayed
//! from `fuzz.proptest-regressions` beside this file.

mod common;

use common::{Arena, check};
use proptest::collection::vec;
use proptest::prelude::*;
use zverbs_core::{Completion, PollCq};
use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::{CompletionQueue, CqBinding, RqRef, SqRef};
use zverbs_sim::{Access, CqConfig, Device, Mr, QpConfig, SimQp, Stats};

const ARENA: usize = 16 * 1024;

/// (offset, length, access) of the regions registered over the arena; the gaps between them
/// are registered to nobody.
const REGIONS: [(usize, usize, Access); 6] = [
    (1024, 3072, Access::ALL),
    (5120, 1024, Access::NONE),
    (7168, 1024, Access::LOCAL_WRITE),
    (9216, 1024, Access::REMOTE_READ),
    (11264, 1024, Access::LOCAL_WRITE.union(Access::REMOTE_WRITE)),
    (
        13312,
        1024,
        Access::LOCAL_WRITE.union(Access::REMOTE_ATOMIC),
    ),
];
/// Keys a case can name: each region's lkey and rkey, and those of a deregistered region.
const KEYS: usize = 2 * REGIONS.len() + 2;

/// A 16-byte segment of random bytes.
type Raw16 = [u8; 16];

/// Random bytes for a segment, drawn as one `u128` (an array of 16 drawn bytes costs ten
/// times as much, for shrinking that finds nothing more).
fn raw16() -> impl Strategy<Value = Raw16> + Clone {
    any::<u128>().prop_map(u128::to_ne_bytes)
}

// ----- what a case is made of -----

/// A consistent (key, address, length), before it is placed: in region `region` (reduced
/// into the regions with the right the use needs, or into all of them when `any_region`).
#[derive(Clone, Copy, Debug)]
struct Valid {
    any_region: bool,
    region: usize,
    span: SpanKind,
}

#[derive(Clone, Copy, Debug)]
enum SpanKind {
    /// 8-aligned inside the region, up to 64 bytes (`off` and `len` reduced into it).
    Inside { off: u16, len: u16 },
    /// Straddling the region's end: `back` (1..=16) bytes before it, `back + 1 + extra`
    /// long.
    StraddleEnd { back: u64, extra: u32 },
    /// Starting `1 + back` bytes before the region.
    Before { back: u64, len: u32 },
}

fn valid() -> impl Strategy<Value = Valid> + Clone {
    let span = prop_oneof![
        8 => (any::<u16>(), any::<u16>()).prop_map(|(off, len)| SpanKind::Inside { off, len }),
        1 => (1..=16u64, 0..16u32).prop_map(|(back, extra)| SpanKind::StraddleEnd { back, extra }),
        1 => (0..16u64, 1..=32u32).prop_map(|(back, len)| SpanKind::Before { back, len }),
    ];
    (proptest::bool::weighted(0.2), 0..REGIONS.len(), span).prop_map(
        |(any_region, region, span)| Valid {
            any_region,
            region,
            span,
        },
    )
}

#[derive(Clone, Copy, Debug)]
enum Key {
    /// One of the [`KEYS`].
    Known(usize),
    /// `MLX5_INVALID_LKEY`.
    Invalid,
    Raw(u32),
}

fn key() -> impl Strategy<Value = Key> + Clone {
    prop_oneof![
        6 => (0..KEYS).prop_map(Key::Known),
        1 => Just(Key::Invalid),
        1 => any::<u32>().prop_map(Key::Raw),
    ]
}

#[derive(Clone, Copy, Debug)]
enum Addr {
    /// In the arena, or up to 256 bytes around it.
    Arena(u16),
    /// In a region (index and offset, reduced into it).
    Region(usize, u16),
    /// Just below `u64::MAX`.
    NearMax(u64),
    Raw(u64),
}

fn addr() -> impl Strategy<Value = Addr> + Clone {
    prop_oneof![
        5 => (0..ARENA as u16 + 512).prop_map(Addr::Arena),
        3 => (0..REGIONS.len(), any::<u16>()).prop_map(|(r, o)| Addr::Region(r, o)),
        1 => (0..64u64).prop_map(Addr::NearMax),
        1 => any::<u64>().prop_map(Addr::Raw),
    ]
}

fn len() -> impl Strategy<Value = u32> + Clone {
    prop_oneof![
        4 => 1..=64u32,
        1 => Just(0u32),
        1 => 1..=2048u32,
        1 => Just(0x7fff_ffffu32),
        1 => any::<u32>(),
    ]
}

/// A data segment (gather, scatter or atomic result entry).
#[derive(Clone, Copy, Debug)]
enum Seg {
    Valid(Valid),
    Raw { key: Key, addr: Addr, len: u32 },
}

fn seg(pct: u32) -> impl Strategy<Value = Seg> + Clone {
    prop_oneof![
        pct => valid().prop_map(Seg::Valid),
        100 - pct => (key(), addr(), len()).prop_map(|(key, addr, len)| Seg::Raw { key, addr, len }),
    ]
}

/// The remote-address segment.
#[derive(Clone, Copy, Debug)]
enum Remote {
    Valid(Valid),
    Raw { key: Key, addr: Addr },
}

/// What follows the control and remote-address segments of a built WQE.
#[derive(Clone, Debug)]
enum Body {
    /// Gather entries.
    Sges(Vec<Seg>),
    /// An inline segment of `len` bytes (the top bit set as the inline flag) over `segs` raw
    /// segments (at most 8).
    Inline { len: u32, segs: Vec<Raw16> },
    /// An atomic: the operands, then the result entry (its length forced to 8 when `len8`).
    Atomic {
        operands: Raw16,
        result: Seg,
        len8: bool,
    },
}

/// The opcodes a built WQE may carry: the known ones, or any byte.
const OPCODES: [u8; 8] = [
    opcode::NOP,
    opcode::RDMA_WRITE,
    opcode::RDMA_WRITE_IMM,
    opcode::SEND,
    opcode::SEND_IMM,
    opcode::RDMA_READ,
    opcode::ATOMIC_CS,
    opcode::ATOMIC_FA,
];

/// A WQE that follows the layout (mostly), or raw bytes.
#[derive(Clone, Debug)]
enum WqeSpec {
    Built(Box<Built>),
    /// 4, 8 or 12 raw segments.
    Garbage(Vec<Raw16>),
}

#[derive(Clone, Debug)]
struct Built {
    opcode: u8,
    remote: Remote,
    body: Body,
    /// `ds` in place of the WQE's true size.
    ds: Option<u8>,
    /// WQE index and QPN in place of the right ones.
    index: Option<u16>,
    qpn: Option<u32>,
    fm_ce_se: u8,
    imm: [u8; 4],
    /// Filler up to whole basic blocks.
    pad: [Raw16; 3],
}

fn built(pct: u32) -> impl Strategy<Value = Built> {
    let bad = 100 - pct;
    let sane = 100 - bad / 8;
    let opcode = prop_oneof![8 => proptest::sample::select(&OPCODES[..]), 1 => any::<u8>()];
    let remote = prop_oneof![
        pct => valid().prop_map(Remote::Valid),
        bad => (key(), addr()).prop_map(|(key, addr)| Remote::Raw { key, addr }),
    ];
    // Inline: a length that may or may not fit the segments that follow.
    let inline_len = prop_oneof![pct => 0..120u32, bad => 0..(1u32 << 31)];
    let inline = (
        inline_len,
        proptest::bool::weighted(f64::from(pct) / 100.0),
        0..8usize,
    )
        .prop_flat_map(|(len, fits, n)| {
            let n = if fits {
                (len as usize + 4).div_ceil(16).min(8)
            } else {
                n
            };
            vec(raw16(), n).prop_map(move |segs| Body::Inline { len, segs })
        });
    let body = prop_oneof![
        7 => vec(seg(pct), 0..5).prop_map(Body::Sges),
        3 => inline,
    ];
    let atomic =
        (raw16(), seg(pct), proptest::bool::weighted(0.8)).prop_map(|(operands, result, len8)| {
            Body::Atomic {
                operands,
                result,
                len8,
            }
        });
    (
        opcode,
        remote,
        body,
        atomic,
        replace(0..64u8, 100 - bad / 4),
        (replace(any::<u16>(), sane), replace(any::<u32>(), sane)),
        (
            any::<u8>(),
            any::<u32>().prop_map(u32::to_ne_bytes),
            [raw16(), raw16(), raw16()],
        ),
    )
        .prop_map(
            |(opcode, remote, body, atomic, ds, (index, qpn), (fm_ce_se, imm, pad))| {
                let body = if matches!(opcode, opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
                    atomic
                } else {
                    body
                };
                Built {
                    opcode,
                    remote,
                    body,
                    ds,
                    index,
                    qpn,
                    fm_ce_se,
                    imm,
                    pad,
                }
            },
        )
}

/// `None` (the true value) `keep` percent of the time, else a value of `s` in its place.
fn replace<S: Strategy>(s: S, keep: u32) -> impl Strategy<Value = Option<S::Value>>
where
    S::Value: Clone,
{
    prop_oneof![keep => Just(None), 100 - keep => s.prop_map(Some)]
}

fn wqe(pct: u32) -> BoxedStrategy<WqeSpec> {
    prop_oneof![
        pct => built(pct).prop_map(|b| WqeSpec::Built(Box::new(b))),
        100 - pct => (1..=3usize, vec(raw16(), 12))
            .prop_map(|(n, segs)| WqeSpec::Garbage(segs[..4 * n].to_vec())),
    ]
    .boxed()
}

/// A receive entry: a data segment (its key replaced by `MLX5_INVALID_LKEY` when
/// `invalid_key`, which ends the scatter list), or raw bytes.
#[derive(Clone, Copy, Debug)]
struct RecvSeg {
    seg: Result<Seg, Raw16>,
    invalid_key: bool,
}

fn recv_seg(pct: u32) -> impl Strategy<Value = RecvSeg> + Clone {
    let raw = (100 - pct) / 2;
    let seg = prop_oneof![
        100 - raw => seg(pct).prop_map(Ok),
        raw => raw16().prop_map(Err),
    ];
    (seg, proptest::bool::weighted(0.15))
        .prop_map(|(seg, invalid_key)| RecvSeg { seg, invalid_key })
}

/// One QP's part of a round: WQEs and receives written, then the doorbell record's counters
/// (`None`: the true ones).
#[derive(Clone, Debug)]
struct QpRound {
    wqes: Vec<WqeSpec>,
    recvs: Vec<[RecvSeg; RECV_SEGS]>,
    snd: Option<u32>,
    rcv: Option<u32>,
}

/// Scatter entries per receive of the case's QPs (`max_recv_sge`).
const RECV_SEGS: usize = 2;

/// What the program does with a CQ after a step: polls it, or writes a bogus consumer
/// counter to its doorbell record.
#[derive(Clone, Copy, Debug)]
enum CqAct {
    Poll,
    BogusCi(u32),
}

#[derive(Clone, Debug)]
struct Round {
    qps: [QpRound; 3],
    /// Device steps, and after each what the program does with each CQ.
    steps: Vec<[CqAct; 2]>,
}

fn round(pct: u32) -> impl Strategy<Value = Round> {
    let bad = 100 - pct;
    let sane = 100 - bad / 4;
    let counter = move || replace(any::<u32>(), sane);
    let qp = || {
        (
            vec(wqe(pct), 0..4),
            vec([recv_seg(pct), recv_seg(pct)], 0..3),
            counter(),
            counter(),
        )
            .prop_map(|(wqes, recvs, snd, rcv)| QpRound {
                wqes,
                recvs,
                snd,
                rcv,
            })
            .boxed()
    };
    let act = prop_oneof![
        100 - bad / 4 => Just(CqAct::Poll),
        bad / 4 => any::<u32>().prop_map(CqAct::BogusCi),
    ];
    ([qp(), qp(), qp()], vec([act.clone(), act], 1..=8))
        .prop_map(|(qps, steps)| Round { qps, steps })
}

/// One case: the arena's initial bytes (a hash of the offset and `fill`), the QPs' RNR retry
/// count, and the rounds (drawn with one share of consistent segments).
#[derive(Clone, Debug)]
struct Case {
    fill: u64,
    rnr_retry: u8,
    rounds: Vec<Round>,
}

fn case() -> impl Strategy<Value = Case> {
    proptest::sample::select(vec![100u32, 95, 80, 20]).prop_flat_map(|pct| {
        (any::<u64>(), 0..8u8, vec(round(pct), 1..=12)).prop_map(|(fill, rnr_retry, rounds)| Case {
            fill,
            rnr_retry,
            rounds,
        })
    })
}

// ----- placing a case in the device's rings -----

struct World<'a> {
    arena: &'a Arena,
    keys: [u32; KEYS],
    mrs: Vec<Mr>,
}

impl World<'_> {
    /// A consistent (key, address, length); `remote` picks the rkey.
    fn valid(&self, v: &Valid, remote: bool, need: Access) -> (u32, u64, u32) {
        // Mostly a region with the rights the use needs; sometimes any region (wrong rights).
        let fit: Vec<&Mr> = if v.any_region {
            self.mrs.iter().collect()
        } else {
            self.mrs
                .iter()
                .filter(|m| m.access.contains(need))
                .collect()
        };
        let mr = *fit[v.region % fit.len()];
        let key = if remote { mr.rkey } else { mr.lkey };
        match v.span {
            SpanKind::StraddleEnd { back, extra } => {
                (key, mr.addr + mr.len - back, (back + 1) as u32 + extra)
            }
            SpanKind::Before { back, len } => (key, mr.addr - 1 - back, len),
            SpanKind::Inside { off, len } => {
                let off = (u64::from(off) % (mr.len - 8)) & !7;
                let len = 1 + u64::from(len) % 64.min(mr.len - off);
                (key, mr.addr + off, len as u32)
            }
        }
    }
    fn key(&self, k: Key) -> u32 {
        match k {
            Key::Known(i) => self.keys[i],
            Key::Invalid => 0x100,
            Key::Raw(k) => k,
        }
    }
    fn addr(&self, a: Addr) -> u64 {
        match a {
            Addr::Arena(off) => self
                .arena
                .addr(0)
                .wrapping_add(u64::from(off))
                .wrapping_sub(256),
            Addr::Region(r, off) => {
                let mr = self.mrs[r];
                mr.addr + u64::from(off) % mr.len
            }
            Addr::NearMax(d) => u64::MAX - d,
            Addr::Raw(a) => a,
        }
    }
    /// A data segment's bytes.
    fn data_seg(&self, s: &Seg, need: Access) -> Raw16 {
        let (key, addr, len) = match *s {
            Seg::Valid(v) => self.valid(&v, false, need),
            Seg::Raw { key, addr, len } => (self.key(key), self.addr(addr), len),
        };
        let mut b = [0u8; 16];
        b[0..4].copy_from_slice(&len.to_be_bytes());
        b[4..8].copy_from_slice(&key.to_be_bytes());
        b[8..16].copy_from_slice(&addr.to_be_bytes());
        b
    }
}

/// The segments of WQE `spec` for block counter `pi` of `qp`.
fn wqe_segs(w: &World<'_>, spec: &WqeSpec, qp: &SimQp, pi: u32) -> Vec<Raw16> {
    let b = match spec {
        WqeSpec::Garbage(segs) => return segs.clone(),
        WqeSpec::Built(b) => b,
    };
    let op = b.opcode;
    let mut body: Vec<Raw16> = Vec::new();
    if matches!(
        op,
        opcode::RDMA_WRITE
            | opcode::RDMA_WRITE_IMM
            | opcode::RDMA_READ
            | opcode::ATOMIC_CS
            | opcode::ATOMIC_FA
    ) {
        let (key, addr) = match b.remote {
            Remote::Valid(v) => {
                let need = match op {
                    opcode::RDMA_READ => Access::REMOTE_READ,
                    opcode::ATOMIC_CS | opcode::ATOMIC_FA => Access::REMOTE_ATOMIC,
                    _ => Access::REMOTE_WRITE,
                };
                let (k, a, _) = w.valid(&v, true, need);
                (k, a)
            }
            Remote::Raw { key, addr } => (w.key(key), w.addr(addr)),
        };
        let mut r = [0u8; 16];
        r[0..8].copy_from_slice(&addr.to_be_bytes());
        r[8..12].copy_from_slice(&key.to_be_bytes());
        body.push(r);
    }
    match &b.body {
        Body::Atomic {
            operands,
            result,
            len8,
        } => {
            body.push(*operands);
            let mut d = w.data_seg(result, Access::LOCAL_WRITE);
            if *len8 {
                d[0..4].copy_from_slice(&8u32.to_be_bytes());
            }
            body.push(d);
        }
        Body::Inline { len, segs } => {
            for (i, s) in segs.iter().enumerate() {
                let mut s = *s;
                if i == 0 {
                    s[0..4].copy_from_slice(&(0x8000_0000 | len).to_be_bytes());
                }
                body.push(s);
            }
        }
        Body::Sges(sges) => {
            let need = if op == opcode::RDMA_READ {
                Access::LOCAL_WRITE
            } else {
                Access::NONE
            };
            body.extend(sges.iter().map(|s| w.data_seg(s, need)));
        }
    }
    let ds = b.ds.map_or(1 + body.len() as u32, u32::from);
    let index = b.index.unwrap_or(pi as u16);
    let qpn = b.qpn.unwrap_or(qp.qpn);
    let mut c = [0u8; 16];
    c[0..4].copy_from_slice(&((u32::from(index) << 8) | u32::from(op)).to_be_bytes());
    c[4..8].copy_from_slice(&((qpn << 8) | (ds & 0x3f)).to_be_bytes());
    c[11] = b.fm_ce_se;
    c[12..16].copy_from_slice(&b.imm);
    let mut segs = vec![c];
    segs.extend(body);
    let mut pad = b.pad.iter();
    while !segs.len().is_multiple_of(4) {
        segs.push(*pad.next().unwrap());
    }
    segs
}

/// Writes WQE `spec` at block counter `pi` of `qp`'s ring; returns its size in blocks.
fn write_wqe(w: &World<'_>, spec: &WqeSpec, qp: &SimQp, pi: u32) -> u32 {
    let ring = qp.layout.sq;
    let segs = wqe_segs(w, spec, qp, pi);
    let seg_mask = ring.wqe_cnt * 4 - 1;
    for (i, s) in segs.iter().enumerate() {
        let at = (pi * 4 + i as u32) & seg_mask;
        // SAFETY: inside the device's send ring; stepped mode, nothing else runs.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), ring.buf.as_ptr().add(at as usize * 16), 16)
        };
    }
    (segs.len() / 4) as u32
}

fn write_recv(w: &World<'_>, spec: &[RecvSeg; RECV_SEGS], qp: &SimQp, head: u32) {
    let rq = qp.layout.rq;
    let slot = (head & (rq.wqe_cnt - 1)) as usize;
    for (i, r) in spec.iter().enumerate() {
        let mut s = match &r.seg {
            Ok(seg) => w.data_seg(seg, Access::LOCAL_WRITE),
            Err(raw) => *raw,
        };
        if r.invalid_key {
            s[4..8].copy_from_slice(&0x100u32.to_be_bytes());
        }
        // SAFETY: inside the device's receive ring; stepped mode.
        unsafe {
            std::ptr::copy_nonoverlapping(
                s.as_ptr(),
                rq.buf.as_ptr().add(slot * rq.stride as usize + i * 16),
                16,
            )
        };
    }
}

fn set_dbrec(qp: &SimQp, word: usize, v: u32) {
    // SAFETY: the device's doorbell record; stepped mode.
    unsafe { qp.layout.dbrec.as_ptr().add(word).write_volatile(v.to_be()) };
}

fn snapshot(p: std::ptr::NonNull<u8>, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    // SAFETY: a device ring of `len` bytes; stepped mode.
    unsafe { std::ptr::copy_nonoverlapping(p.as_ptr(), v.as_mut_ptr(), len) };
    v
}

/// `len` bytes that look random: a hash of each offset and `key`.
fn fill(len: usize, key: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i ^ key).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
        .collect()
}

/// Runs case `c` on a new device; checks the rings, the arena and the guards; returns the
/// device's counters.
fn run_case(c: &Case) -> Stats {
    let arena = Arena::new(ARENA);
    let initial = fill(ARENA, c.fill);
    arena.write(0, &initial);
    let dev = Device::new();
    let mut mrs = Vec::new();
    for (off, len, access) in REGIONS {
        // SAFETY: the arena outlives the device.
        mrs.push(unsafe { dev.reg_mr(arena.ptr(off), len, access) }.unwrap());
    }
    // A deregistered region over the first gap: its keys must be refused.
    // SAFETY: as above.
    let gone = unsafe { dev.reg_mr(arena.ptr(0), 1024, Access::ALL) }.unwrap();
    dev.dereg_mr(gone.lkey).unwrap();
    let mut keys = [0; KEYS];
    for (k, key) in mrs
        .iter()
        .flat_map(|m| [m.lkey, m.rkey])
        .chain([gone.lkey, gone.rkey])
        .enumerate()
    {
        keys[k] = key;
    }
    let world = World {
        arena: &arena,
        keys,
        mrs,
    };

    let cqs: Vec<_> = (0..2)
        .map(|_| dev.create_cq(CqConfig { cqe: 7 }).unwrap())
        .collect();
    let cfg = |i: usize| QpConfig {
        send_cq: cqs[i % 2].cqn,
        recv_cq: cqs[(i + 1) % 2].cqn,
        max_send_wr: 4,
        max_send_sge: 4,
        max_inline_data: 64,
        max_recv_wr: 4,
        max_recv_sge: RECV_SEGS as u32,
        rnr_retry: c.rnr_retry,
        bf_size: 0,
        ..QpConfig::default()
    };
    let qps: Vec<SimQp> = (0..3).map(|i| dev.create_qp(cfg(i)).unwrap()).collect();
    dev.connect(qps[0].qpn, qps[1].qpn).unwrap();
    dev.connect(qps[2].qpn, qps[2].qpn).unwrap();
    // Pollers with no bindings: they report every CQE as unknown and publish the consumer
    // counter, as a driver would.
    // SAFETY: the device's CQ layouts; the only pollers.
    let mut pollers: Vec<CompletionQueue<&[CqBinding<SqRef<'_>, RqRef<'_>>]>> = cqs
        .iter()
        .map(|c| unsafe { CompletionQueue::new(&c.layout, &[][..]) }.unwrap())
        .collect();

    let mut pis = [0u32; 3];
    let mut heads = [0u32; 3];
    for round in &c.rounds {
        for (i, (qp, r)) in qps.iter().zip(&round.qps).enumerate() {
            for spec in &r.wqes {
                pis[i] = pis[i].wrapping_add(write_wqe(&world, spec, qp, pis[i]));
            }
            for spec in &r.recvs {
                write_recv(&world, spec, qp, heads[i]);
                heads[i] = heads[i].wrapping_add(1);
            }
            set_dbrec(qp, 1, r.snd.unwrap_or(pis[i]) & 0xffff);
            set_dbrec(qp, 0, r.rcv.unwrap_or(heads[i]) & 0xffff);
        }
        let rings: Vec<(Vec<u8>, Vec<u8>)> = qps
            .iter()
            .map(|q| {
                (
                    snapshot(q.layout.sq.buf, q.layout.sq.wqe_cnt as usize * 64),
                    snapshot(
                        q.layout.rq.buf,
                        (q.layout.rq.wqe_cnt * q.layout.rq.stride) as usize,
                    ),
                )
            })
            .collect();
        for acts in &round.steps {
            dev.step();
            let mut wc = [Completion::EMPTY; 8];
            for (i, (p, act)) in pollers.iter_mut().zip(acts).enumerate() {
                match *act {
                    CqAct::Poll => while p.poll(&mut wc) > 0 {},
                    // SAFETY: the device's CQ doorbell record; stepped mode.
                    CqAct::BogusCi(ci) => unsafe {
                        cqs[i].layout.dbrec.as_ptr().write_volatile(ci.to_be())
                    },
                }
            }
        }
        for (q, (sq, rq)) in qps.iter().zip(&rings) {
            assert_eq!(
                &snapshot(q.layout.sq.buf, sq.len()),
                sq,
                "the device wrote a send ring"
            );
            assert_eq!(
                &snapshot(q.layout.rq.buf, rq.len()),
                rq,
                "the device wrote a receive ring"
            );
        }
    }
    let mut writable = vec![false; ARENA];
    for (off, len, acc) in REGIONS {
        if acc.contains(Access::LOCAL_WRITE) {
            writable[off..off + len].fill(true);
        }
    }
    let after = arena.read(0, ARENA);
    for (i, ((a, b), w)) in initial.iter().zip(&after).zip(&writable).enumerate() {
        if !w {
            assert_eq!(a, b, "byte {i} outside every writable region changed");
        }
    }
    assert!(arena.guards_intact(), "arena guard bytes changed");
    assert!(dev.guards_intact(), "device guard bytes changed");
    dev.stats()
}

#[test]
fn random_rings_never_escape_registered_memory() {
    let cases = 600;
    let total = std::cell::RefCell::new(Stats::default());
    check(file!(), cases, 0x5eed_f022, &case(), |c| {
        let s = run_case(&c);
        let mut t = total.borrow_mut();
        t.wqes_ok += s.wqes_ok;
        t.wqes_failed += s.wqes_failed;
        t.flushed += s.flushed;
        t.recvs += s.recvs;
        t.bytes += s.bytes;
        t.cqes += s.cqes;
        t.cq_overruns += s.cq_overruns;
        t.bad_doorbells += s.bad_doorbells;
    });
    let total = total.into_inner();
    println!("fuzz: {cases} cases; {total:?}");
    // The generator reaches both the success and the error paths.
    assert!(total.wqes_ok > 100 && total.recvs > 10 && total.bytes > 1000);
    assert!(total.wqes_failed > 100 && total.flushed > 100 && total.bad_doorbells > 0);
}

//! Randomized workloads of mixed operations through the direct backend on the device, checked
//! against a plain reference model of RC semantics: memory of both sides and every completion.
//!
//! Property tests (`proptest`): each case is a workload of rounds of up to 8 operations, on a
//! fresh pair of QPs, with BlueFlame or doorbell-only; in the third test the send ring is
//! first moved to just before the 16-bit wrap of the WQE index, so that the workload runs
//! across it. A failing workload is shrunk (fewer rounds, fewer and simpler operations)
//! before it is reported. The cases are drawn from fixed seeds; `PROPTEST_RNG_SEED` draws
//! others, `PROPTEST_CASES` sets how many, and a failure is replayed from
//! `random.proptest-regressions` beside this file.

mod common;

use common::{Pair, PairCfg, check, with_pair};
use proptest::collection::vec;
use proptest::prelude::*;
use zverbs_core::{
    Completion, PostRecv, PostSend, RecvWr, SendWr, Sge, WcFlags, WcOpcode, WcStatus,
};
use zverbs_sim::{QpConfig, Stats};

const ARENA: usize = 16 * 1024;
/// A's arena: sources and destinations. B's arena: `0..REMOTE` RDMA/atomic target,
/// `REMOTE..` receive buffers.
const REMOTE: usize = 8 * 1024;

#[derive(Clone, Debug)]
enum Op {
    Write {
        src: Vec<(usize, usize)>,
        dst: usize,
        imm: Option<u32>,
        inline: Option<Vec<u8>>,
    },
    Send {
        src: Vec<(usize, usize)>,
        imm: Option<u32>,
        inline: Option<Vec<u8>>,
    },
    Read {
        dst: Vec<(usize, usize)>,
        src: usize,
    },
    Cas {
        local: usize,
        remote: usize,
        compare: u64,
        swap: u64,
    },
    Faa {
        local: usize,
        remote: usize,
        add: u64,
    },
    Nop,
}

/// The model: both arenas, the receives posted at B, and the expected completions.
struct Model {
    a: Vec<u8>,
    b: Vec<u8>,
    /// Posted receives at B: (wr_id, entries).
    recvs: std::collections::VecDeque<(u64, Vec<(usize, usize)>)>,
    want_a: Vec<Completion>,
    want_b: Vec<Completion>,
}

impl Model {
    fn gather(&self, src: &[(usize, usize)], inline: &Option<Vec<u8>>) -> Vec<u8> {
        match inline {
            Some(bytes) => bytes.clone(),
            None => src
                .iter()
                .flat_map(|&(o, l)| self.a[o..o + l].to_vec())
                .collect(),
        }
    }

    fn apply(&mut self, op: &Op, wr_id: u64, signaled: bool, qpn_a: u32, qpn_b: u32) {
        let mut c = Completion {
            wr_id,
            qp_num: qpn_a,
            ..Completion::EMPTY
        };
        match op {
            Op::Write {
                src,
                dst,
                imm,
                inline,
            } => {
                let data = self.gather(src, inline);
                self.b[*dst..dst + data.len()].copy_from_slice(&data);
                c.opcode = WcOpcode::RdmaWrite;
                if let Some(imm) = imm {
                    c.flags = WcFlags::WITH_IMM;
                    let (rid, _) = self.recvs.pop_front().unwrap();
                    self.want_b.push(Completion {
                        wr_id: rid,
                        byte_len: data.len() as u32,
                        imm: *imm,
                        qp_num: qpn_b,
                        opcode: WcOpcode::RecvRdmaWithImm,
                        flags: WcFlags::WITH_IMM,
                        ..Completion::EMPTY
                    });
                }
            }
            Op::Send { src, imm, inline } => {
                let data = self.gather(src, inline);
                let (rid, entries) = self.recvs.pop_front().unwrap();
                let mut at = 0;
                for (o, l) in entries {
                    let n = l.min(data.len() - at);
                    self.b[o..o + n].copy_from_slice(&data[at..at + n]);
                    at += n;
                }
                assert_eq!(at, data.len(), "the generator posts receives large enough");
                c.opcode = WcOpcode::Send;
                let mut r = Completion {
                    wr_id: rid,
                    byte_len: data.len() as u32,
                    qp_num: qpn_b,
                    opcode: WcOpcode::Recv,
                    ..Completion::EMPTY
                };
                if let Some(imm) = imm {
                    c.flags = WcFlags::WITH_IMM;
                    r.flags = WcFlags::WITH_IMM;
                    r.imm = *imm;
                }
                self.want_b.push(r);
            }
            Op::Read { dst, src } => {
                let len: usize = dst.iter().map(|d| d.1).sum();
                let data = self.b[*src..src + len].to_vec();
                let mut at = 0;
                for &(o, l) in dst {
                    self.a[o..o + l].copy_from_slice(&data[at..at + l]);
                    at += l;
                }
                c.opcode = WcOpcode::RdmaRead;
                c.byte_len = len as u32;
            }
            Op::Cas {
                local,
                remote,
                compare,
                swap,
            } => {
                let orig: [u8; 8] = self.b[*remote..remote + 8].try_into().unwrap();
                // The device's default atomics work in host order.
                if u64::from_ne_bytes(orig) == *compare {
                    self.b[*remote..remote + 8].copy_from_slice(&swap.to_ne_bytes());
                }
                self.a[*local..local + 8].copy_from_slice(&orig);
                c.opcode = WcOpcode::CompSwap;
                c.byte_len = 8;
            }
            Op::Faa { local, remote, add } => {
                let orig: [u8; 8] = self.b[*remote..remote + 8].try_into().unwrap();
                let new = u64::from_ne_bytes(orig).wrapping_add(*add);
                self.b[*remote..remote + 8].copy_from_slice(&new.to_ne_bytes());
                self.a[*local..local + 8].copy_from_slice(&orig);
                c.opcode = WcOpcode::FetchAdd;
                c.byte_len = 8;
            }
            Op::Nop => c.opcode = WcOpcode::Nop,
        }
        if signaled {
            self.want_a.push(c);
        }
    }
}

/// Where the pieces of a message lie: `n` pieces (1 to 4) of equal length, each at its
/// `at[i]` reduced into the room left (so that shrinking moves a piece to the start).
#[derive(Clone, Copy, Debug)]
struct Pieces {
    n: usize,
    at: [u16; 4],
}

fn pieces_spec() -> impl Strategy<Value = Pieces> + Clone {
    (1..=4usize, any::<[u16; 4]>()).prop_map(|(n, at)| Pieces { n, at })
}

impl Pieces {
    /// (offset, length) entries inside `lo..hi` that add up to `total` bytes.
    fn place(&self, lo: usize, hi: usize, total: usize) -> Vec<(usize, usize)> {
        let n = self.n.min(total.max(1));
        let mut lens = vec![total / n; n];
        lens[n - 1] += total % n;
        lens.iter()
            .zip(self.at)
            .map(|(&l, at)| (lo + usize::from(at) % (hi - lo - l + 1), l))
            .collect()
    }
}

/// The compare value of a compare-and-swap.
#[derive(Clone, Copy, Debug)]
enum Compare {
    /// The target's value when the operation is posted: the swap happens.
    Current,
    /// Any value (it rarely matches).
    Value(u64),
}

/// One generated operation, before it is placed in the arenas.
#[derive(Clone, Debug)]
enum Spec {
    Nop,
    Write {
        len: usize,
        src: Pieces,
        dst: u16,
        imm: Option<u32>,
        inline: bool,
        recv: Recv,
    },
    Send {
        len: usize,
        src: Pieces,
        imm: Option<u32>,
        inline: bool,
        recv: Recv,
    },
    Read {
        len: usize,
        dst: Pieces,
        src: u16,
    },
    Cas {
        local: usize,
        remote: usize,
        compare: Compare,
        swap: u64,
    },
    Faa {
        local: usize,
        remote: usize,
        add: u64,
    },
}

/// The receive posted for a message that needs one: `extra` bytes beyond the message, in
/// `pieces`.
#[derive(Clone, Copy, Debug)]
struct Recv {
    extra: usize,
    pieces: Pieces,
}

/// A message length: mostly short, sometimes 0, now and then up to 2 KiB.
fn msg_len() -> impl Strategy<Value = usize> {
    prop_oneof![
        5 => 1..=64usize,
        1 => Just(0usize),
        3 => 1..=512usize,
        1 => 1..=2048usize,
    ]
}

fn spec() -> BoxedStrategy<Spec> {
    let recv = || (0..64usize, pieces_spec()).prop_map(|(extra, pieces)| Recv { extra, pieces });
    let imm = prop_oneof![7 => Just(None), 3 => any::<u32>().prop_map(Some)];
    let inline = proptest::bool::weighted(0.3);
    let write = (
        msg_len(),
        pieces_spec(),
        any::<u16>(),
        imm.clone(),
        inline,
        recv(),
    )
        .prop_map(|(len, src, dst, imm, inline, recv)| Spec::Write {
            len,
            src,
            dst,
            imm,
            inline,
            recv,
        });
    let send = (msg_len(), pieces_spec(), imm, inline, recv()).prop_map(
        |(len, src, imm, inline, recv)| Spec::Send {
            len,
            src,
            imm,
            inline,
            recv,
        },
    );
    let read = (msg_len(), pieces_spec(), any::<u16>()).prop_map(|(len, dst, src)| Spec::Read {
        len,
        dst,
        src,
    });
    // A small pool of targets, so that atomics meet each other.
    let target = (0..ARENA / 8, 0..16usize).prop_map(|(l, r)| (8 * l, 8 * r));
    let compare = prop_oneof![
        Just(Compare::Current),
        any::<u64>().prop_map(Compare::Value)
    ];
    let cas =
        (target.clone(), compare, any::<u64>()).prop_map(|((local, remote), compare, swap)| {
            Spec::Cas {
                local,
                remote,
                compare,
                swap,
            }
        });
    let faa = (target, any::<u64>(), 0..64u32).prop_map(|((local, remote), v, shift)| Spec::Faa {
        local,
        remote,
        add: v >> shift,
    });
    // Boxed: a workload's value tree holds thousands of these, moved as pointers.
    prop_oneof![
        4 => Just(Spec::Nop).boxed(),
        2 => write.boxed(),
        2 => send.boxed(),
        2 => read.boxed(),
        1 => cas.boxed(),
        1 => faa.boxed(),
    ]
    .boxed()
}

/// A round: up to 8 operations posted together (in one batch, or one by one with a doorbell
/// after some), then run to completion and compared with the model.
#[derive(Clone, Debug)]
struct Round {
    batch: bool,
    /// (operation, signaled, ring the doorbell after posting it).
    ops: Vec<(Spec, bool, bool)>,
}

fn round() -> impl Strategy<Value = Round> {
    let op = (
        spec(),
        proptest::bool::weighted(0.4),
        proptest::bool::weighted(0.3),
    );
    (any::<bool>(), vec(op, 1..=8)).prop_map(|(batch, ops)| Round { batch, ops })
}

/// A send ring start just before the WQE index (16 bits of the producer counter) wraps.
const WRAP_START: u32 = (1 << 16) - 128;

/// One case: the send ring's start, the arenas' initial bytes (a hash of the offset and
/// `fill`) and the rounds.
#[derive(Clone, Debug)]
struct Workload {
    start: u32,
    fill: u64,
    rounds: Vec<Round>,
}

fn workload(start: u32, max_rounds: usize) -> impl Strategy<Value = Workload> {
    (Just(start), any::<u64>(), vec(round(), 1..=max_rounds)).prop_map(|(start, fill, rounds)| {
        Workload {
            start,
            fill,
            rounds,
        }
    })
}

/// `len` bytes that look random: a hash of each offset and `key`.
fn fill(len: usize, key: u64) -> Vec<u8> {
    (0..len as u64)
        .map(|i| ((i ^ key).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8)
        .collect()
}

/// Moves A's send ring to `block` with unsignaled NOPs (one signaled per batch), draining
/// their completions.
fn advance(p: &mut Pair<'_>, block: u32) {
    let mut wrs = [SendWr::nop(u64::MAX); 32];
    wrs[31] = SendWr::nop(u64::MAX).signaled();
    while p.a.sq.producer() < block {
        let n = ((block - p.a.sq.producer()) as usize).min(32);
        wrs[n - 1] = SendWr::nop(u64::MAX).signaled();
        // SAFETY: a NOP touches no memory.
        unsafe { p.a.sq.post_all(&wrs[..n]) }.unwrap();
        wrs[n - 1] = SendWr::nop(u64::MAX);
        let (a, b) = p.run();
        assert!(a.len() == 1 && a[0].status == WcStatus::Success && b.is_empty());
    }
}

/// Runs workload `w` on the pair; returns the number of operations.
fn run(p: &mut Pair<'_>, w: &Workload) -> u64 {
    advance(p, w.start);
    let executed_before = p.dev.stats().wqes_ok;
    let init_a = fill(ARENA, w.fill);
    let init_b = fill(ARENA, !w.fill);
    p.a.mem.write(0, &init_a);
    p.b.mem.write(0, &init_b);
    let mut m = Model {
        a: init_a,
        b: init_b,
        recvs: Default::default(),
        want_a: Vec::new(),
        want_b: Vec::new(),
    };
    let max_inline = p.a.sq.caps().max_inline_data as usize;
    let (qpn_a, qpn_b) = (p.a.qpn(), p.b.qpn());
    let mut done = 0u64;
    let mut next_id = 0u64;
    for round in &w.rounds {
        let n = round.ops.len();
        // Place the round's operations; receives are posted as needed.
        let mut wrs_owned: Vec<(u64, Op, bool, Vec<Sge>)> = Vec::new();
        for (k, (spec, signaled, _)) in round.ops.iter().enumerate() {
            let signaled = *signaled || k == n - 1;
            let inline = |len: usize, on: bool| (on && len <= max_inline).then(Vec::new);
            let (mut op, recv) = match *spec {
                Spec::Nop => (Op::Nop, None),
                Spec::Write {
                    len,
                    src,
                    dst,
                    imm,
                    inline: on,
                    recv,
                } => (
                    Op::Write {
                        src: src.place(0, ARENA, len),
                        dst: usize::from(dst) % (REMOTE - len + 1),
                        imm,
                        inline: inline(len, on),
                    },
                    imm.map(|_| (0, recv)),
                ),
                Spec::Send {
                    len,
                    src,
                    imm,
                    inline: on,
                    recv,
                } => (
                    Op::Send {
                        src: src.place(0, ARENA, len),
                        imm,
                        inline: inline(len, on),
                    },
                    Some((len, recv)),
                ),
                Spec::Read { len, dst, src } => (
                    Op::Read {
                        dst: dst.place(0, ARENA, len),
                        src: usize::from(src) % (REMOTE - len + 1),
                    },
                    None,
                ),
                Spec::Cas {
                    local,
                    remote,
                    compare,
                    swap,
                } => {
                    let compare = match compare {
                        Compare::Current => {
                            u64::from_ne_bytes(m.b[remote..remote + 8].try_into().unwrap())
                        }
                        Compare::Value(v) => v,
                    };
                    let op = Op::Cas {
                        local,
                        remote,
                        compare,
                        swap,
                    };
                    (op, None)
                }
                Spec::Faa { local, remote, add } => (Op::Faa { local, remote, add }, None),
            };
            if let Some((len, r)) = recv {
                let entries = r.pieces.place(REMOTE, ARENA, len + r.extra);
                let sgl: Vec<Sge> = entries.iter().map(|&(o, l)| p.b.sge(o, l as u32)).collect();
                let rid = 0x1_0000_0000 | next_id;
                // SAFETY: receive entries in B's registered arena.
                unsafe { p.b.rq.post(&RecvWr::new(rid, &sgl)) }.unwrap();
                m.recvs.push_back((rid, entries));
            }
            let sgl: Vec<Sge> = match &mut op {
                Op::Write { src, inline, .. } | Op::Send { src, inline, .. } => {
                    if let Some(bytes) = inline {
                        // Inline: the CPU copies the bytes at post time.
                        *bytes = m.gather(src, &None);
                    }
                    src.iter().map(|&(o, l)| p.a.sge(o, l as u32)).collect()
                }
                Op::Read { dst, .. } => dst.iter().map(|&(o, l)| p.a.sge(o, l as u32)).collect(),
                Op::Cas { local, .. } | Op::Faa { local, .. } => vec![p.a.sge(*local, 8)],
                Op::Nop => vec![],
            };
            wrs_owned.push((next_id, op, signaled, sgl));
            next_id += 1;
        }
        let wrs: Vec<SendWr<'_>> = wrs_owned
            .iter()
            .map(|(id, op, signaled, sgl)| {
                let wr = match op {
                    Op::Write {
                        dst,
                        imm: None,
                        inline,
                        ..
                    } => {
                        let w = SendWr::write(*id, sgl, p.b.remote(*dst));
                        if inline.is_some() { w.inline() } else { w }
                    }
                    Op::Write {
                        dst,
                        imm: Some(imm),
                        inline,
                        ..
                    } => {
                        let w = SendWr::write_imm(*id, sgl, p.b.remote(*dst), *imm);
                        if inline.is_some() { w.inline() } else { w }
                    }
                    Op::Send { imm, inline, .. } => {
                        let w = match imm {
                            Some(imm) => SendWr::send_imm(*id, sgl, *imm),
                            None => SendWr::send(*id, sgl),
                        };
                        if inline.is_some() { w.inline() } else { w }
                    }
                    Op::Read { src, .. } => SendWr::read(*id, sgl, p.b.remote(*src)),
                    Op::Cas {
                        remote,
                        compare,
                        swap,
                        ..
                    } => SendWr::compare_swap(*id, sgl[0], p.b.remote(*remote), *compare, *swap),
                    Op::Faa { remote, add, .. } => {
                        SendWr::fetch_add(*id, sgl[0], p.b.remote(*remote), *add)
                    }
                    Op::Nop => SendWr::nop(*id),
                };
                if *signaled { wr.signaled() } else { wr }
            })
            .collect();
        // SAFETY: every entry lies in a registered arena; nothing touches them until the
        // round's completions are polled.
        unsafe {
            if round.batch {
                p.a.sq.post_all(&wrs).unwrap();
            } else {
                for (wr, (_, _, ring)) in wrs.iter().zip(&round.ops) {
                    p.a.sq.stage(wr).unwrap();
                    if *ring {
                        p.a.sq.ring();
                    }
                }
                p.a.sq.ring();
            }
        }
        for (id, op, signaled, _) in &wrs_owned {
            m.apply(op, *id, *signaled, qpn_a, qpn_b);
        }
        let (ca, cb) = p.run();
        done += n as u64;
        assert_eq!(ca, m.want_a, "requester completions after op {done}");
        assert_eq!(cb, m.want_b, "responder completions after op {done}");
        m.want_a.clear();
        m.want_b.clear();
        assert!(ca.iter().chain(&cb).all(|c| c.status == WcStatus::Success));
        assert!(
            p.a.mem.read(0, ARENA) == m.a && p.b.mem.read(0, ARENA) == m.b,
            "memory differs from the model after op {done}"
        );
    }
    assert!(m.recvs.is_empty());
    let executed = p.dev.stats().wqes_ok - executed_before;
    assert_eq!(executed, done, "every operation executed");
    done
}

fn cfg(bf_size: u32) -> PairCfg {
    PairCfg {
        qp: QpConfig {
            max_send_wr: 32,
            max_send_sge: 4,
            max_inline_data: 64,
            max_recv_wr: 32,
            max_recv_sge: 4,
            bf_size,
            ..QpConfig::default()
        },
        cqe: 1023,
        arena: ARENA,
        max_signaled: None,
        cqe_size: 64,
    }
}

/// The most rounds of a case: about 2000 operations, so that a case that starts before the
/// WQE index wraps runs across it.
const MAX_ROUNDS: usize = 450;

/// Runs `cases` workloads on pairs with BlueFlame registers of `bf_size` bytes (0: doorbell
/// only), their send rings starting at block `start`; prints the figures and returns how many
/// workloads ran across the 16-bit WQE index wrap.
fn randomized(name: &str, bf_size: u32, start: u32, cases: u32, seed: u64) -> u64 {
    let totals = std::cell::RefCell::new((0u64, 0u64, Stats::default()));
    check(file!(), cases, seed, &workload(start, MAX_ROUNDS), |w| {
        let (ops, end, st) = with_pair(cfg(bf_size), |p| {
            (run(p, &w), p.a.sq.producer(), p.dev.stats())
        });
        let mut t = totals.borrow_mut();
        t.0 += ops;
        t.1 += u64::from(start >> 16 != end >> 16);
        t.2.wqes_ok += st.wqes_ok;
        t.2.recvs += st.recvs;
        t.2.cqes += st.cqes;
        t.2.bytes += st.bytes;
    });
    let (ops, wrapped, st) = totals.into_inner();
    println!(
        "randomized run ({name}): {cases} cases, {ops} operations, {wrapped} cases across the \
         WQE index wrap; {} WQEs, {} receives, {} CQEs, {} bytes",
        st.wqes_ok, st.recvs, st.cqes, st.bytes
    );
    wrapped
}

#[test]
fn randomized_run_matches_the_reference_model() {
    randomized("BlueFlame", 256, 0, 200, 0x2b0b_5eed);
}

#[test]
fn randomized_run_matches_the_reference_model_doorbell_only() {
    randomized("doorbell only", 0, 0, 50, 0x2b0b_5eec);
}

/// The send ring starts 128 blocks before its WQE index wraps, so almost every case runs across
/// the wrap (the ring is first moved there with NOPs, which is why there are few cases).
#[test]
fn randomized_run_matches_the_reference_model_across_the_index_wrap() {
    let wrapped = randomized("across the WQE index wrap", 256, WRAP_START, 4, 0x2b0b_5eeb);
    assert!(wrapped > 0, "no workload reached the wrap");
}

//! A long seeded run of mixed operations through the direct backend on the device, checked
//! against a plain reference model of RC semantics: memory of both sides and every completion.
//!
//! `ZVERBS_SIM_SEED` overrides the seed, `ZVERBS_SIM_OPS` the number of operations.

mod common;

use common::{Pair, PairCfg, Rng, env_u64, with_pair};
use zverbs_core::{
    Completion, PostRecv, PostSend, RecvWr, SendWr, Sge, WcFlags, WcOpcode, WcStatus,
};
use zverbs_sim::QpConfig;

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

/// Random (offset, length) entries inside `lo..hi`, `total` bytes in `1..=4` pieces.
fn pieces(rng: &mut Rng, lo: usize, hi: usize, total: usize, max: usize) -> Vec<(usize, usize)> {
    let n = (1 + rng.below(max as u64) as usize).min(total.max(1));
    let mut lens = vec![total / n; n];
    lens[n - 1] += total % n;
    lens.iter()
        .map(|&l| (lo + rng.below((hi - lo - l) as u64 + 1) as usize, l))
        .collect()
}

fn msg_len(rng: &mut Rng) -> usize {
    match rng.below(10) {
        0 => 0,
        1..=5 => 1 + rng.below(64) as usize,
        6..=8 => 1 + rng.below(512) as usize,
        _ => 1 + rng.below(2048) as usize,
    }
}

fn run(p: &mut Pair<'_>, seed: u64, ops: u64) {
    let mut rng = Rng(seed);
    let init_a = rng.bytes(ARENA);
    let init_b = rng.bytes(ARENA);
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
    while done < ops {
        let n = (1 + rng.below(8)).min(ops - done) as usize;
        let batch = rng.chance(50);
        // Generate the round's operations; receives are posted as needed.
        let mut round: Vec<(Op, bool)> = Vec::new();
        for k in 0..n {
            let signaled = k == n - 1 || rng.chance(40);
            let op = match rng.below(12) {
                0..=3 => {
                    let len = msg_len(&mut rng);
                    let src = pieces(&mut rng, 0, ARENA, len, 4);
                    let imm = rng.chance(30).then(|| rng.next_u64() as u32);
                    let inline = (len <= max_inline && rng.chance(30)).then(Vec::new);
                    if rng.chance(50) {
                        let dst = rng.below((REMOTE - len) as u64 + 1) as usize;
                        Op::Write {
                            src,
                            dst,
                            imm,
                            inline,
                        }
                    } else {
                        Op::Send { src, imm, inline }
                    }
                }
                4..=5 => {
                    let len = msg_len(&mut rng);
                    Op::Read {
                        dst: pieces(&mut rng, 0, ARENA, len, 4),
                        src: rng.below((REMOTE - len) as u64 + 1) as usize,
                    }
                }
                6..=7 => {
                    // A small pool of targets, so that atomics meet each other.
                    let remote = 8 * rng.below(16) as usize;
                    let local = 8 * rng.below((ARENA / 8) as u64) as usize;
                    if rng.chance(50) {
                        let cur = u64::from_ne_bytes(m.b[remote..remote + 8].try_into().unwrap());
                        let compare = if rng.chance(50) { cur } else { rng.next_u64() };
                        Op::Cas {
                            local,
                            remote,
                            compare,
                            swap: rng.next_u64(),
                        }
                    } else {
                        Op::Faa {
                            local,
                            remote,
                            add: rng.next_u64() >> rng.below(64),
                        }
                    }
                }
                _ => Op::Nop,
            };
            round.push((op, signaled));
        }
        // Post: receives first for the messages that need them, then the sends.
        let mut wrs_owned: Vec<(u64, Op, bool, Vec<Sge>)> = Vec::new();
        for (op, signaled) in round {
            let needs_recv = match &op {
                Op::Write { imm: Some(_), .. } => Some(0),
                Op::Send { src, .. } => Some(src.iter().map(|s| s.1).sum::<usize>()),
                _ => None,
            };
            if let Some(len) = needs_recv {
                let cap = len + rng.below(64) as usize;
                let entries = pieces(&mut rng, REMOTE, ARENA, cap, 4);
                let sgl: Vec<Sge> = entries.iter().map(|&(o, l)| p.b.sge(o, l as u32)).collect();
                let rid = 0x1_0000_0000 | next_id;
                // SAFETY: receive entries in B's registered arena.
                unsafe { p.b.rq.post(&RecvWr::new(rid, &sgl)) }.unwrap();
                m.recvs.push_back((rid, entries));
            }
            let mut op = op;
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
            if batch {
                p.a.sq.post_all(&wrs).unwrap();
            } else {
                for wr in &wrs {
                    p.a.sq.stage(wr).unwrap();
                    if rng.chance(30) {
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
        assert_eq!(
            ca,
            m.want_a,
            "requester completions after op {}",
            done + n as u64
        );
        assert_eq!(
            cb,
            m.want_b,
            "responder completions after op {}",
            done + n as u64
        );
        m.want_a.clear();
        m.want_b.clear();
        assert!(ca.iter().chain(&cb).all(|c| c.status == WcStatus::Success));
        if p.a.mem.read(0, ARENA) != m.a || p.b.mem.read(0, ARENA) != m.b {
            panic!(
                "memory differs from the model after op {} (seed {seed:#x})",
                done + n as u64
            );
        }
        done += n as u64;
    }
    assert!(m.recvs.is_empty());
    let st = p.dev.stats();
    println!("  {st:?}");
    assert_eq!(st.wqes_ok, ops, "every operation executed");
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
    }
}

#[test]
fn randomized_run_matches_the_reference_model() {
    let seed = env_u64("ZVERBS_SIM_SEED", 0x2b0b_5eed);
    let ops = env_u64("ZVERBS_SIM_OPS", 200_000);
    println!(
        "randomized run: seed {seed:#x}, {ops} operations (BlueFlame), {} (doorbell only)",
        ops / 4
    );
    with_pair(cfg(256), |p| run(p, seed, ops));
    with_pair(cfg(0), |p| run(p, seed ^ 1, ops / 4));
}

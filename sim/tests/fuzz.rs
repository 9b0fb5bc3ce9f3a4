//! Ring contents are untrusted input: random and half-valid WQEs, random receive entries and
//! random doorbell values never make the device panic, write outside the registered regions
//! that allow writing, write its own rings, or touch a guard byte.
//!
//! Seed: `ZVERBS_SIM_FUZZ_SEED` (default fixed); rounds: `ZVERBS_SIM_FUZZ_ROUNDS`.

mod common;

use common::{Arena, Rng, env_u64};
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
    (
        11264,
        1024,
        Access::from_bits_truncate(Access::LOCAL_WRITE.bits() | Access::REMOTE_WRITE.bits()),
    ),
    (
        13312,
        1024,
        Access::from_bits_truncate(Access::LOCAL_WRITE.bits() | Access::REMOTE_ATOMIC.bits()),
    ),
];

struct World<'a> {
    arena: &'a Arena,
    keys: Vec<u32>,
    mrs: Vec<Mr>,
    /// Percentage of segments made consistent (a live key, inside its region, short).
    valid_pct: u64,
}

impl World<'_> {
    /// A consistent (key, address, length) in a random region; `remote` picks its rkey.
    fn valid(&self, rng: &mut Rng, remote: bool, need: Access) -> (u32, u64, u32) {
        // Mostly a region with the rights the use needs; sometimes any region (wrong rights).
        let fit: Vec<&Mr> = if rng.chance(80) {
            self.mrs
                .iter()
                .filter(|m| m.access.contains(need))
                .collect()
        } else {
            self.mrs.iter().collect()
        };
        let mr = *fit[rng.below(fit.len() as u64) as usize];
        let key = if remote { mr.rkey } else { mr.lkey };
        match rng.below(10) {
            // Straddling the end of the region by a few bytes.
            0 => {
                let back = 1 + rng.below(16);
                (
                    key,
                    mr.addr + mr.len - back,
                    (back + 1 + rng.below(16)) as u32,
                )
            }
            // Starting a few bytes before it.
            1 => (key, mr.addr - 1 - rng.below(16), 1 + rng.below(32) as u32),
            _ => {
                let off = rng.below(mr.len - 8) & !7;
                let len = 1 + rng.below(64.min(mr.len - off)) as u32;
                (key, mr.addr + off, len)
            }
        }
    }
    fn addr(&self, rng: &mut Rng) -> u64 {
        match rng.below(10) {
            0 => rng.next_u64(),
            1 => u64::MAX - rng.below(64),
            2..=4 => {
                let mr = self.mrs[rng.below(self.mrs.len() as u64) as usize];
                mr.addr + rng.below(mr.len)
            }
            _ => self
                .arena
                .addr(0)
                .wrapping_add(rng.below(ARENA as u64 + 512))
                .wrapping_sub(256),
        }
    }
    fn key(&self, rng: &mut Rng) -> u32 {
        match rng.below(8) {
            0 => rng.next_u64() as u32,
            1 => 0x100,
            _ => self.keys[rng.below(self.keys.len() as u64) as usize],
        }
    }
    fn len(&self, rng: &mut Rng) -> u32 {
        match rng.below(8) {
            0 => 0,
            1 => rng.next_u64() as u32,
            2 => 0x7fff_ffff,
            3 => 1 + rng.below(2048) as u32,
            _ => 1 + rng.below(64) as u32,
        }
    }
    /// A data segment.
    fn data_seg(&self, rng: &mut Rng, need: Access) -> [u8; 16] {
        let (key, addr, len) = if rng.chance(self.valid_pct) {
            self.valid(rng, false, need)
        } else {
            (self.key(rng), self.addr(rng), self.len(rng))
        };
        let mut s = [0u8; 16];
        s[0..4].copy_from_slice(&len.to_be_bytes());
        s[4..8].copy_from_slice(&key.to_be_bytes());
        s[8..16].copy_from_slice(&addr.to_be_bytes());
        s
    }
}

/// Writes a random (often half-valid) WQE at block counter `pi` of `qp`'s ring; returns its
/// size in blocks.
fn gen_wqe(w: &World<'_>, rng: &mut Rng, qp: &SimQp, pi: u32) -> u32 {
    let ring = qp.layout.sq;
    let mut segs: Vec<[u8; 16]> = Vec::new();
    if rng.chance(100 - w.valid_pct) {
        for _ in 0..4 * (1 + rng.below(3)) {
            segs.push(rng.bytes(16).try_into().unwrap());
        }
    } else {
        let ops = [
            opcode::NOP,
            opcode::RDMA_WRITE,
            opcode::RDMA_WRITE_IMM,
            opcode::SEND,
            opcode::SEND_IMM,
            opcode::RDMA_READ,
            opcode::ATOMIC_CS,
            opcode::ATOMIC_FA,
            rng.next_u64() as u8,
        ];
        let op = ops[rng.below(ops.len() as u64) as usize];
        let mut body: Vec<[u8; 16]> = Vec::new();
        if matches!(
            op,
            opcode::RDMA_WRITE
                | opcode::RDMA_WRITE_IMM
                | opcode::RDMA_READ
                | opcode::ATOMIC_CS
                | opcode::ATOMIC_FA
        ) {
            let (key, addr) = if rng.chance(w.valid_pct) {
                let need = match op {
                    opcode::RDMA_READ => Access::REMOTE_READ,
                    opcode::ATOMIC_CS | opcode::ATOMIC_FA => Access::REMOTE_ATOMIC,
                    _ => Access::REMOTE_WRITE,
                };
                let (k, a, _) = w.valid(rng, true, need);
                (k, a)
            } else {
                (w.key(rng), w.addr(rng))
            };
            let mut r = [0u8; 16];
            r[0..8].copy_from_slice(&addr.to_be_bytes());
            r[8..12].copy_from_slice(&key.to_be_bytes());
            body.push(r);
        }
        if matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA) {
            body.push(rng.bytes(16).try_into().unwrap());
            let mut d = w.data_seg(rng, Access::LOCAL_WRITE);
            if rng.chance(80) {
                d[0..4].copy_from_slice(&8u32.to_be_bytes());
            }
            body.push(d);
        } else if rng.chance(30) {
            // Inline: a length that may or may not fit the segments that follow.
            let bound = if rng.chance(w.valid_pct) {
                120
            } else {
                1 << 31
            };
            let len = rng.below(bound) as u32;
            let segs = if rng.chance(w.valid_pct) {
                (len as usize + 4).div_ceil(16).min(8)
            } else {
                rng.below(8) as usize
            };
            for i in 0..segs {
                let mut s: [u8; 16] = rng.bytes(16).try_into().unwrap();
                if i == 0 {
                    s[0..4].copy_from_slice(&(0x8000_0000 | len).to_be_bytes());
                }
                body.push(s);
            }
        } else {
            let need = if op == opcode::RDMA_READ {
                Access::LOCAL_WRITE
            } else {
                Access::NONE
            };
            for _ in 0..rng.below(5) {
                body.push(w.data_seg(rng, need));
            }
        }
        let mut ds = 1 + body.len() as u32;
        if rng.chance((100 - w.valid_pct) / 4) {
            ds = rng.below(64) as u32;
        }
        let sane = 100 - (100 - w.valid_pct) / 8;
        let index = if rng.chance(sane) {
            pi as u16
        } else {
            rng.next_u64() as u16
        };
        let qpn = if rng.chance(sane) {
            qp.qpn
        } else {
            rng.next_u64() as u32
        };
        let mut c = [0u8; 16];
        c[0..4].copy_from_slice(&((u32::from(index) << 8) | u32::from(op)).to_be_bytes());
        c[4..8].copy_from_slice(&((qpn << 8) | (ds & 0x3f)).to_be_bytes());
        c[11] = rng.next_u64() as u8;
        c[12..16].copy_from_slice(&rng.bytes(4));
        segs.push(c);
        segs.extend(body);
        while !segs.len().is_multiple_of(4) {
            segs.push(rng.bytes(16).try_into().unwrap());
        }
    }
    let blocks = (segs.len() / 4) as u32;
    let seg_mask = ring.wqe_cnt * 4 - 1;
    for (i, s) in segs.iter().enumerate() {
        let at = (pi * 4 + i as u32) & seg_mask;
        // SAFETY: inside the device's send ring; stepped mode, nothing else runs.
        unsafe {
            std::ptr::copy_nonoverlapping(s.as_ptr(), ring.buf.as_ptr().add(at as usize * 16), 16)
        };
    }
    blocks
}

fn gen_recv(w: &World<'_>, rng: &mut Rng, qp: &SimQp, head: u32) {
    let rq = qp.layout.rq;
    let per = rq.stride as usize / 16;
    let slot = (head & (rq.wqe_cnt - 1)) as usize;
    for i in 0..per {
        let mut s = if rng.chance((100 - w.valid_pct) / 2) {
            rng.bytes(16).try_into().unwrap()
        } else {
            w.data_seg(rng, Access::LOCAL_WRITE)
        };
        if rng.chance(15) {
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

fn round(rng: &mut Rng) -> Stats {
    let arena = Arena::new(ARENA);
    let initial = rng.bytes(ARENA);
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
    let mut keys: Vec<u32> = mrs.iter().flat_map(|m| [m.lkey, m.rkey]).collect();
    keys.extend([gone.lkey, gone.rkey]);
    let valid_pct = [20, 80, 95, 100][rng.below(4) as usize];
    let world = World {
        arena: &arena,
        keys,
        mrs,
        valid_pct,
    };

    let cqs: Vec<_> = (0..2)
        .map(|_| dev.create_cq(CqConfig { cqe: 7 }).unwrap())
        .collect();
    let rnr_retry = rng.below(8) as u8;
    let cfg = |i: usize| QpConfig {
        send_cq: cqs[i % 2].cqn,
        recv_cq: cqs[(i + 1) % 2].cqn,
        max_send_wr: 4,
        max_send_sge: 4,
        max_inline_data: 64,
        max_recv_wr: 4,
        max_recv_sge: 2,
        rnr_retry,
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
    for _ in 0..12 {
        for (i, qp) in qps.iter().enumerate() {
            for _ in 0..rng.below(4) {
                pis[i] = pis[i].wrapping_add(gen_wqe(&world, rng, qp, pis[i]));
            }
            for _ in 0..rng.below(3) {
                gen_recv(&world, rng, qp, heads[i]);
                heads[i] = heads[i].wrapping_add(1);
            }
            let sane = 100 - (100 - valid_pct) / 4;
            let snd = if rng.chance(sane) {
                pis[i]
            } else {
                rng.next_u64() as u32
            };
            let rcv = if rng.chance(sane) {
                heads[i]
            } else {
                rng.next_u64() as u32
            };
            set_dbrec(qp, 1, snd & 0xffff);
            set_dbrec(qp, 0, rcv & 0xffff);
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
        for _ in 0..1 + rng.below(8) {
            dev.step();
            let mut wc = [Completion::EMPTY; 8];
            for (i, p) in pollers.iter_mut().enumerate() {
                if rng.chance((100 - valid_pct) / 4) {
                    // A bogus consumer counter in the CQ doorbell record.
                    // SAFETY: the device's CQ doorbell record; stepped mode.
                    unsafe {
                        cqs[i]
                            .layout
                            .dbrec
                            .as_ptr()
                            .write_volatile((rng.next_u64() as u32).to_be())
                    };
                } else {
                    while p.poll(&mut wc) > 0 {}
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
    let after = arena.read(0, ARENA);
    for (i, (a, b)) in initial.iter().zip(&after).enumerate() {
        let writable = REGIONS.iter().any(|(off, len, acc)| {
            acc.contains(Access::LOCAL_WRITE) && (*off..off + len).contains(&i)
        });
        if !writable {
            assert_eq!(a, b, "byte {i} outside every writable region changed");
        }
    }
    assert!(arena.guards_intact(), "arena guard bytes changed");
    assert!(dev.guards_intact(), "device guard bytes changed");
    dev.stats()
}

#[test]
fn random_rings_never_escape_registered_memory() {
    let seed = env_u64("ZVERBS_SIM_FUZZ_SEED", 0x5eed_f022);
    let rounds = env_u64("ZVERBS_SIM_FUZZ_ROUNDS", 600);
    println!("fuzz seed {seed:#x}, {rounds} rounds");
    let mut rng = Rng(seed);
    let mut total = Stats::default();
    for _ in 0..rounds {
        let s = round(&mut rng);
        total.wqes_ok += s.wqes_ok;
        total.wqes_failed += s.wqes_failed;
        total.flushed += s.flushed;
        total.recvs += s.recvs;
        total.bytes += s.bytes;
        total.cqes += s.cqes;
        total.cq_overruns += s.cq_overruns;
        total.bad_doorbells += s.bad_doorbells;
    }
    println!("{total:?}");
    // The generator reaches both the success and the error paths.
    assert!(total.wqes_ok > 100 && total.recvs > 10 && total.bytes > 1000);
    assert!(total.wqes_failed > 100 && total.flushed > 100 && total.bad_doorbells > 0);
}

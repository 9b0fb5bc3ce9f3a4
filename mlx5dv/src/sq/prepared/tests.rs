extern crate std;

use std::vec;
use std::vec::Vec;

use proptest::prelude::*;
use zverbs_core::{PostError, PostSend, RemoteBuf, SendFlags, SendWr, Sge, SqCaps};

use super::{Changes, Prepared};
use crate::testutil::{Rig, caps};

/// One request, as the generic path takes it and as a prepared post takes it.
#[derive(Clone, Copy, Debug)]
struct Req {
    /// 0 WRITE, 1 WRITE with immediate, 2 READ, 3 SEND, 4 SEND with immediate.
    op: u8,
    flags: u32,
    lkey: u32,
    rkey: u32,
    c: Changes,
}

impl Req {
    fn wr<'a>(&self, sgl: &'a [Sge]) -> SendWr<'a> {
        let remote = RemoteBuf::new(self.c.remote_addr, self.rkey);
        let (id, imm) = (self.c.wr_id, self.c.imm);
        let wr = match self.op {
            0 => SendWr::write(id, sgl, remote),
            1 => SendWr::write_imm(id, sgl, remote, imm),
            2 => SendWr::read(id, sgl, remote),
            3 => SendWr::send(id, sgl),
            _ => SendWr::send_imm(id, sgl, imm),
        };
        wr.with_flags(SendFlags::from_bits_truncate(self.flags))
    }

    fn sgl(&self) -> [Sge; 1] {
        [Sge::new(self.c.addr, self.c.len, self.lkey)]
    }
}

fn req() -> impl Strategy<Value = Req> {
    let len = prop_oneof![Just(0u32), 1u32..4096, Just(1 << 31)];
    (
        0u8..5,
        0u32..8,
        any::<u32>(),
        any::<u32>(),
        (any::<u64>(), any::<u64>(), len, any::<u64>(), any::<u32>()),
    )
        .prop_map(
            |(op, flags, lkey, rkey, (wr_id, addr, len, remote_addr, imm))| Req {
                op,
                flags,
                lkey,
                rkey,
                c: Changes {
                    wr_id,
                    addr,
                    len,
                    remote_addr,
                    imm,
                },
            },
        )
}

/// Posts `r` prepared (from a template with other changing fields than its own), or stages
/// it when `stage`.
fn post_prepared(rig: &mut Rig, r: &Req, stage: bool) -> Result<(), PostError> {
    // The template's changing fields differ from the post's: the post must not keep them.
    let tsgl = [Sge::new(!r.c.addr, 7, r.lkey)];
    let template = Req {
        c: Changes {
            wr_id: !r.c.wr_id,
            remote_addr: !r.c.remote_addr,
            imm: !r.c.imm,
            ..r.c
        },
        ..*r
    }
    .wr(&tsgl);
    if r.op < 3 {
        let p = rig.sq.prepare_rdma(&template)?;
        go(rig, &p, r.c, stage)
    } else {
        let p = rig.sq.prepare_send(&template)?;
        go(rig, &p, r.c, stage)
    }
}

fn go<const REMOTE: bool>(
    rig: &mut Rig,
    p: &Prepared<REMOTE>,
    c: Changes,
    stage: bool,
) -> Result<(), PostError> {
    // SAFETY: no device reads these rings; the requests name no memory the test touches.
    unsafe {
        if stage {
            rig.sq.stage_prepared(p, c)
        } else {
            rig.sq.post_prepared(p, c)
        }
    }
}

/// The BlueFlame area of a prepared rig as the device reads it. A BlueFlame copy is a whole
/// 64-byte block of which the device reads the WQE's `ds` segments: past them the generic
/// path copies the ring's bytes (stale here), a prepared post zeros. So a byte past the WQE
/// of the last whole copy into its buffer may be 0 on the prepared side (a doorbell-only
/// ring rewrites the first 8 bytes alone, and leaves the rest as the copy before left it).
struct BfView {
    last: Vec<u8>,
    past_wqe: Vec<bool>,
}

impl BfView {
    fn new(rig: &Rig) -> Self {
        let last = rig.mem.bf_bytes();
        let past_wqe = vec![false; last.len()];
        Self { last, past_wqe }
    }

    /// Takes the prepared rig's page after an operation: a buffer whose bytes 8..64 changed
    /// received a whole copy, of the WQE whose `ds` its byte 7 holds.
    fn update(&mut self, rig: &Rig) {
        let page = rig.mem.bf_bytes();
        if page.len() > 8 {
            let size = page.len() / 2;
            for o in [0, size] {
                if page[o + 8..o + 64] != self.last[o + 8..o + 64] {
                    let ds = usize::from(page[o + 7] & 0x3f) * 16;
                    for (i, past) in self.past_wqe[o..o + 64].iter_mut().enumerate() {
                        *past = i >= ds;
                    }
                }
            }
        }
        self.last = page;
    }

    /// Whether the prepared page (the last taken) and `generic`'s read the same.
    fn reads_as(&self, generic: &Rig) -> bool {
        let g = generic.mem.bf_bytes();
        g.len() == self.last.len()
            && (0..g.len()).all(|i| self.last[i] == g[i] || (self.past_wqe[i] && self.last[i] == 0))
    }
}

/// What the device may read, and the queue's counters.
fn seen(rig: &mut Rig) -> (Vec<u8>, Vec<u8>, u32, u32, u32, u32) {
    (
        rig.mem.sq_bytes(),
        rig.mem.bf_bytes(),
        rig.mem.dbrec(1),
        rig.sq.producer(),
        rig.sq.pending(),
        rig.sq.outstanding_signaled(),
    )
}

/// [`seen`] but the BlueFlame area (see [`BfView`]).
fn seen_but_bf(rig: &mut Rig) -> (Vec<u8>, u32, u32, u32, u32) {
    let (ring, _, dbrec, pi, pending, sig) = seen(rig);
    (ring, dbrec, pi, pending, sig)
}

fn rigs(blocks: u32, bf: u32) -> (Rig, Rig) {
    let (a, b) = (
        Rig::new(blocks, bf, caps(4, 64)),
        Rig::new(blocks, bf, caps(4, 64)),
    );
    // Stale bytes in the ring, so that a segment written on one side only shows.
    a.mem.fill_sq(0xa5);
    b.mem.fill_sq(0xa5);
    (a, b)
}

/// The requests of a run, each posted (`false`) or staged (`true`): under Miri (100 times
/// slower), one fixed list of eight, in which each operation, each combination of the flags,
/// each class of length (none, up to 4 KiB, 2 GiB) and both ways of posting appear; random
/// lists of 1 to 39 otherwise.
fn requests() -> BoxedStrategy<Vec<(Req, bool)>> {
    if cfg!(miri) {
        let reqs = (0..8u32)
            .map(|i| {
                let r = Req {
                    op: (i % 5) as u8,
                    flags: i,
                    lkey: 0x8000_0011 ^ i,
                    rkey: 0x0022_0080 ^ i,
                    c: Changes {
                        wr_id: 0x0102_0304_0506_0700 | u64::from(i),
                        addr: 0x8899_aabb_ccdd_0000 + 0x100 * u64::from(i),
                        len: [0, 100 + i, 1 << 31][i as usize % 3],
                        remote_addr: 0x7f00_0000_1000 + 0x40 * u64::from(i),
                        imm: 0xdead_be00 | i,
                    },
                };
                (r, i % 2 == 1)
            })
            .collect();
        Just(reqs).boxed()
    } else {
        proptest::collection::vec((req(), any::<bool>()), 1..40).boxed()
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Under Miri, the one fixed list of `requests`, with BlueFlame and without (below).
        cases: if cfg!(miri) { 1 } else { 256 },
        // Under Miri's isolation there is no file system for the regressions file.
        failure_persistence: if cfg!(miri) {
            None
        } else {
            ProptestConfig::default().failure_persistence
        },
        ..ProptestConfig::default()
    })]

    /// Prepared posts write the ring, the BlueFlame register and the doorbell record exactly
    /// as generic posts of the same requests do, and leave the same counters, with
    /// BlueFlame and without, posted or staged (a post rings what was staged before it).
    #[test]
    fn prepared_posts_write_what_generic_posts_write(
        reqs in requests(),
        bf in prop_oneof![Just(0u32), Just(256)],
    ) {
        let bfs = if cfg!(miri) { vec![0, 256] } else { vec![bf] };
        for bf in bfs {
            let (mut generic, mut prepared) = rigs(64, bf);
            let mut bf_view = BfView::new(&prepared);
            for (r, stage) in &reqs {
                let stage = *stage;
                let sgl = r.sgl();
                let wr = r.wr(&sgl);
                // SAFETY: as in `go`.
                let want = unsafe {
                    if stage { generic.sq.stage(&wr) } else { generic.sq.post(&wr) }
                };
                let got = post_prepared(&mut prepared, r, stage);
                prop_assert_eq!(got, want);
                prop_assert_eq!(seen_but_bf(&mut prepared), seen_but_bf(&mut generic));
                bf_view.update(&prepared);
                prop_assert!(bf_view.reads_as(&generic), "BlueFlame areas differ after {:?}", r);
            }
            generic.sq.ring();
            prepared.sq.ring();
            prop_assert_eq!(seen_but_bf(&mut prepared), seen_but_bf(&mut generic));
            bf_view.update(&prepared);
            prop_assert!(bf_view.reads_as(&generic), "BlueFlame areas differ after the ring");
        }
    }
}

fn write(len: u32) -> Req {
    Req {
        op: 0,
        flags: SendFlags::SIGNALED.bits(),
        lkey: 0x11,
        rkey: 0x22,
        c: Changes {
            wr_id: 1,
            addr: 0x1000,
            len,
            remote_addr: 0x2000,
            imm: 0,
        },
    }
}

/// A refused prepared post changes nothing the device may read and no counter.
#[test]
fn refused_prepared_posts_write_nothing() {
    let (mut rig, mut other) = rigs(4, 256);
    post_prepared(&mut rig, &write(8), false).unwrap();
    let before = seen(&mut rig);
    // Longer than 2 GiB.
    let p = rig.sq.prepare_rdma(&write(8).wr(&write(8).sgl())).unwrap();
    let long = Changes {
        len: (1 << 31) + 1,
        ..write(8).c
    };
    assert_eq!(
        go(&mut rig, &p, long, false),
        Err(PostError::MessageTooLong)
    );
    assert_eq!(seen(&mut rig), before);
    // Prepared for a queue with another QPN.
    other.sq.qpn ^= 1;
    let foreign = other
        .sq
        .prepare_rdma(&write(8).wr(&write(8).sgl()))
        .unwrap();
    assert_eq!(
        go(&mut rig, &foreign, write(8).c, false),
        Err(PostError::Unsupported)
    );
    assert_eq!(seen(&mut rig), before);
    // The ring full: three more fit, the fourth does not.
    for _ in 0..3 {
        go(&mut rig, &p, write(8).c, true).unwrap();
    }
    let before = seen(&mut rig);
    assert_eq!(
        go(&mut rig, &p, write(8).c, false),
        Err(PostError::QueueFull { needed: 1, free: 0 })
    );
    assert_eq!(seen(&mut rig), before);
}

/// What cannot be prepared is refused when preparing, with the generic check's error where
/// the request itself is invalid.
#[test]
fn prepare_refuses_what_it_cannot_prepare() {
    let (rig, _) = rigs(4, 256);
    let sgl = [Sge::new(0x1000, 8, 0x11)];
    let two = [sgl[0], sgl[0]];
    let remote = RemoteBuf::new(0x2000, 0x22);
    let sq = &rig.sq;
    let unsupported = Err(PostError::Unsupported);
    let unsupported_send = Err(PostError::Unsupported);
    assert_eq!(sq.prepare_rdma(&SendWr::send(1, &sgl)), unsupported);
    assert_eq!(
        sq.prepare_send(&SendWr::write(1, &sgl, remote)),
        unsupported_send
    );
    let faa = SendWr::fetch_add(1, Sge::new(0x1000, 8, 1), remote, 1);
    assert_eq!(sq.prepare_rdma(&faa), unsupported);
    assert_eq!(
        sq.prepare_rdma(&SendWr::write(1, &two, remote)),
        unsupported
    );
    assert_eq!(sq.prepare_rdma(&SendWr::write(1, &[], remote)), unsupported);
    assert_eq!(
        sq.prepare_send(&SendWr::send(1, &sgl).inline()),
        unsupported_send
    );
    // The generic check's own refusals come through.
    let five = [sgl[0]; 5];
    assert_eq!(
        sq.prepare_send(&SendWr::send(1, &five)),
        Err(PostError::TooManySges { got: 5, max: 4 })
    );
    assert_eq!(
        sq.prepare_rdma(&SendWr::read(1, &sgl, remote).inline()),
        Err(PostError::InlineNotAllowed)
    );
}

/// A prepared request tells the opcode, the completion asked for and the queue it was
/// prepared with.
#[test]
fn a_prepared_request_tells_what_it_was_prepared_as() {
    use crate::prm::opcode;
    use crate::testutil::QPN;
    let (rig, _) = rigs(4, 256);
    let sgl = [Sge::new(0x1000, 8, 0x11)];
    let remote = RemoteBuf::new(0x2000, 0x22);
    let read = rig
        .sq
        .prepare_rdma(&SendWr::read(1, &sgl, remote).signaled())
        .unwrap();
    assert_eq!(
        (read.opcode(), read.signaled(), read.qpn()),
        (opcode::RDMA_READ, true, QPN)
    );
    let send = rig.sq.prepare_send(&SendWr::send_imm(1, &sgl, 7)).unwrap();
    assert_eq!(
        (send.opcode(), send.signaled(), send.qpn()),
        (opcode::SEND_IMM, false, QPN)
    );
}

/// The gate refuses prepared posts as it refuses generic ones: a queue pair in the error
/// state or RESET takes nothing, on the fast path too (the queue's earlier posts made it the
/// common case), and writes nothing.
#[test]
fn a_closed_gate_refuses_prepared_posts_and_writes_nothing() {
    let (mut rig, _) = rigs(8, 256);
    let p = rig.sq.prepare_rdma(&write(8).wr(&write(8).sgl())).unwrap();
    // Twice: the second post takes the fast path.
    go(&mut rig, &p, write(8).c, false).unwrap();
    go(&mut rig, &p, write(8).c, false).unwrap();
    let before = seen(&mut rig);
    let gate = rig.bindings[0].sq.clone().unwrap();
    gate.gate().close();
    for stage in [false, true] {
        assert_eq!(
            go(&mut rig, &p, write(8).c, stage),
            Err(PostError::NotReady)
        );
        assert_eq!(seen(&mut rig), before);
    }
    // Open again (the same incarnation): posts are taken, where they left off.
    gate.gate().open();
    go(&mut rig, &p, write(8).c, false).unwrap();
    assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (3, 3));
}

/// A queue pair reset and connected again: the next prepared post restarts at producer
/// counter 0 (WQE index 0, doorbell record 1), whether a generic post passed the gate first
/// or the prepared post does.
#[test]
fn prepared_posts_restart_at_zero_in_a_later_incarnation() {
    for generic_first in [false, true] {
        let (mut rig, _) = rigs(8, 256);
        let p = rig.sq.prepare_rdma(&write(8).wr(&write(8).sgl())).unwrap();
        for _ in 0..3 {
            go(&mut rig, &p, write(8).c, false).unwrap();
        }
        let sq = rig.bindings[0].sq.clone().unwrap();
        sq.gate().close();
        // SAFETY: nothing polls or posts meanwhile.
        unsafe {
            crate::clear_doorbell_record(&rig.mem.qp_layout(crate::testutil::QPN, 8, 256));
            sq.restart();
        }
        assert_eq!(
            go(&mut rig, &p, write(8).c, false),
            Err(PostError::NotReady)
        );
        sq.gate().open();
        if generic_first {
            let sgl = write(8).sgl();
            // SAFETY: never executed.
            unsafe { rig.sq.post(&write(8).wr(&sgl)) }.unwrap();
        }
        go(&mut rig, &p, write(8).c, false).unwrap();
        let n = 1 + u32::from(generic_first);
        assert_eq!((rig.sq.producer(), rig.mem.dbrec(1)), (n, n));
        // The last WQE carries index n - 1, in its ring slot and in the BlueFlame copy.
        let ring = rig.mem.sq_bytes();
        let at = 64 * (n as usize - 1);
        let want = ((n - 1) << 8 | u32::from(crate::prm::opcode::RDMA_WRITE)).to_be_bytes();
        assert_eq!(&ring[at..at + 4], &want);
        let bf = rig.mem.bf_bytes();
        // The toggle is kept across the reset: this is the queue's ring number 3 + n.
        let copy = 256 * ((3 + n as usize - 1) % 2);
        assert_eq!(&bf[copy..copy + 4], &want);
    }
}

/// Prepared posts fill the ring and the CQ share up to their limits and no further, on the
/// fast path (each post after the first takes it): the post that does not fit is refused
/// with nothing written; an unsignaled one still fits when only the CQ share is used up.
#[test]
fn prepared_posts_stop_at_a_full_ring_and_a_full_cq() {
    let (mut rig, _) = rigs(4, 256);
    let p = rig.sq.prepare_rdma(&write(8).wr(&write(8).sgl())).unwrap();
    for _ in 0..4 {
        go(&mut rig, &p, write(8).c, false).unwrap();
    }
    let before = seen(&mut rig);
    assert_eq!(
        go(&mut rig, &p, write(8).c, false),
        Err(PostError::QueueFull { needed: 1, free: 0 })
    );
    assert_eq!(seen(&mut rig), before);

    let caps = SqCaps {
        max_signaled: 2,
        ..caps(4, 64)
    };
    let mut rig = Rig::new(8, 256, caps);
    rig.mem.fill_sq(0xa5);
    let signaled = rig.sq.prepare_rdma(&write(8).wr(&write(8).sgl())).unwrap();
    let quiet = Req {
        flags: 0,
        ..write(8)
    };
    let quiet = rig.sq.prepare_rdma(&quiet.wr(&quiet.sgl())).unwrap();
    for _ in 0..2 {
        go(&mut rig, &signaled, write(8).c, false).unwrap();
    }
    let before = seen(&mut rig);
    assert_eq!(
        go(&mut rig, &signaled, write(8).c, false),
        Err(PostError::CqFull { limit: 2 })
    );
    assert_eq!(seen(&mut rig), before);
    go(&mut rig, &quiet, write(8).c, false).unwrap();
    assert_eq!(rig.sq.producer(), 3);
}

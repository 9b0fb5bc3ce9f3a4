//! CQE compression end to end: the device writes compressed sessions on CQs created with it,
//! the direct poller expands them, and what comes out is what the same workload delivers
//! without compression: the same completions, in the same order.
//!
//! A property test (`proptest`): each case is rounds of messages in both directions (SENDs
//! with and without immediates, WRITEs with immediates, unsignaled WRITEs), run once on CQs
//! without compression and once on CQs compressing in one of the three mini-CQE formats,
//! each end polling with its own slice size (so polls stop inside sessions). The cases come
//! from a fixed seed; a failure is shrunk and replayed from `compressed.proptest-regressions`.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};

use common::{Pair, PairCfg, check, with_pair};
use proptest::collection::vec;
use proptest::prelude::*;
use zverbs_core::{Completion, PollCq, PostRecv, PostSend, RecvWr, SendWr};
use zverbs_mlx5dv::prm::mini::MiniCqeFormat;

#[derive(Clone, Copy, Debug)]
enum Kind {
    Send {
        imm: Option<u32>,
    },
    WriteImm {
        imm: u32,
    },
    /// An unsignaled WRITE: no CQE at either end, but it moves the send queue's counter.
    Write,
}

#[derive(Clone, Copy, Debug)]
struct Msg {
    /// From B to A (else A to B).
    back: bool,
    kind: Kind,
    len: u32,
    signaled: bool,
}

#[derive(Clone, Debug)]
struct Case {
    rounds: Vec<Vec<Msg>>,
    /// Poll slice sizes of A and B.
    slices: (usize, usize),
    format: usize,
}

fn msg() -> impl Strategy<Value = Msg> {
    let kind = prop_oneof![
        4 => prop::option::of(any::<u32>()).prop_map(|imm| Kind::Send { imm }),
        // Runs of equal immediates are what a session can carry.
        2 => prop::option::of(0u32..2).prop_map(|imm| Kind::Send { imm }),
        2 => (0u32..2).prop_map(|imm| Kind::WriteImm { imm }),
        1 => Just(Kind::Write),
    ];
    (any::<bool>(), kind, 0u32..=64, any::<bool>()).prop_map(|(back, kind, len, signaled)| Msg {
        back,
        kind,
        len,
        signaled,
    })
}

fn case() -> impl Strategy<Value = Case> {
    (
        vec(vec(msg(), 1..=12), 1..=8),
        (1usize..=16, 1usize..=16),
        0usize..3,
    )
        .prop_map(|(rounds, slices, format)| Case {
            rounds,
            slices,
            format,
        })
}

const RECV_AT: usize = 32 * 1024;

/// Runs `c`, compressing in `format` or not; returns each end's completions and the sessions
/// the device wrote.
fn run(c: &Case, format: Option<MiniCqeFormat>) -> (Vec<Completion>, Vec<Completion>, u64) {
    let cfg = PairCfg {
        qp: zverbs_sim::QpConfig {
            max_send_wr: 16,
            max_recv_wr: 16,
            ..zverbs_sim::QpConfig::default()
        },
        cqe: 63,
        ..PairCfg::default()
    };
    with_pair(cfg, |p: &mut Pair<'_>| {
        if let Some(f) = format {
            p.dev.enable_cq_compression(p.a.cq.cqn, f).unwrap();
            p.dev.enable_cq_compression(p.b.cq.cqn, f).unwrap();
        }
        let (mut got_a, mut got_b) = (Vec::new(), Vec::new());
        let mut id = 0u64;
        for round in &c.rounds {
            for m in round {
                id += 1;
                let (from, to) = if m.back {
                    (&mut p.b, &mut p.a)
                } else {
                    (&mut p.a, &mut p.b)
                };
                let src = [from.sge(0, m.len)];
                let needs_recv = !matches!(m.kind, Kind::Write);
                if needs_recv {
                    let dst = [to.sge(RECV_AT, 64)];
                    // SAFETY: the arena is registered and outlives the device's use of it.
                    unsafe { to.rq.post(&RecvWr::new(id | 1 << 32, &dst)) }.unwrap();
                }
                let remote = to.remote(1024);
                let wr = match m.kind {
                    Kind::Send { imm: Some(imm) } => SendWr::send_imm(id, &src, imm),
                    Kind::Send { imm: None } => SendWr::send(id, &src),
                    Kind::WriteImm { imm } => SendWr::write_imm(id, &src, remote, imm),
                    Kind::Write => SendWr::write(id, &src, remote),
                };
                let wr = if m.signaled { wr.signaled() } else { wr };
                // SAFETY: as above.
                unsafe { from.sq.post(&wr) }.unwrap();
            }
            p.dev.run_until_idle();
            drain(&mut p.a, c.slices.0, &mut got_a);
            drain(&mut p.b, c.slices.1, &mut got_b);
        }
        // Unsignaled sends of the last round are retired by nothing: one signaled NOP each.
        for (end, slice, got) in [
            (&mut p.a, c.slices.0, &mut got_a),
            (&mut p.b, c.slices.1, &mut got_b),
        ] {
            // SAFETY: a NOP names no memory.
            unsafe { end.sq.post(&SendWr::nop(u64::MAX).signaled()) }.unwrap();
            p.dev.run_until_idle();
            drain(end, slice, got);
        }
        (got_a, got_b, p.dev.stats().compressed_sessions)
    })
}

fn drain(end: &mut common::End<'_>, slice: usize, got: &mut Vec<Completion>) {
    let mut wc = [Completion::EMPTY; 16];
    loop {
        let n = end.cqp.poll(&mut wc[..slice]);
        got.extend_from_slice(&wc[..n]);
        if n == 0 {
            return;
        }
    }
}

static SESSIONS: AtomicU64 = AtomicU64::new(0);

#[test]
fn compressed_delivery_equals_plain_delivery() {
    check(file!(), 96, 0xc011_ec7e, &case(), |c| {
        let (want_a, want_b, plain) = run(&c, None);
        assert_eq!(plain, 0, "no session without compression");
        let f = MiniCqeFormat::ALL[c.format];
        let (got_a, got_b, sessions) = run(&c, Some(f));
        assert_eq!(got_a, want_a, "A's completions ({f:?})");
        assert_eq!(got_b, want_b, "B's completions ({f:?})");
        SESSIONS.fetch_add(sessions, Ordering::Relaxed);
    });
    let sessions = SESSIONS.load(Ordering::Relaxed);
    eprintln!("{sessions} compressed sessions");
    assert!(sessions > 50, "the workloads made the device compress");
}

/// A run of receives completed in one step is one session: the title's owner byte is the only
/// one the device writes, and the poller takes all of them, across polls of one completion.
#[test]
fn a_burst_of_sends_is_one_session() {
    let c = Case {
        rounds: vec![vec![
            Msg {
                back: false,
                kind: Kind::Send { imm: None },
                len: 8,
                signaled: false,
            };
            10
        ]],
        slices: (16, 1),
        format: 0,
    };
    let (_, b, sessions) = run(&c, Some(MiniCqeFormat::Hash));
    assert_eq!(sessions, 1);
    assert_eq!(b.len(), 11, "ten receives and the closing NOP");
    assert!(b.iter().all(Completion::is_success));
    assert!(b[..10].iter().all(|w| w.byte_len == 8));
    assert_eq!(
        b[..10].iter().map(|w| w.wr_id).collect::<Vec<_>>(),
        (1..=10).map(|i| i | 1 << 32).collect::<Vec<_>>()
    );
}

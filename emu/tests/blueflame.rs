//! BlueFlame registers under concurrent posting, on the emulated ConnectX, with the device
//! watching every store to the UAR pages (`ZVERBS_EMU_BF_WATCH=1`).
//!
//! Sixteen RC QPs, each looped back to itself with a CQ of its own, are created through the
//! `zverbs` control path on libmlx5; eight threads each drive two of them on the direct path,
//! posting signaled RDMA WRITEs of one and two basic blocks (every post a BlueFlame copy) and
//! waiting for each completion. Then the device's counts must show no torn copy, every copy
//! equal to the WQE in its ring, every write naming a QP of its register and alternating
//! buffers:
//!
//! - **shared**: a device that has no register left to dedicate (no dynamic bfregs:
//!   `ZVERBS_EMU_DYN_BFREGS=0`, so no thread domain) and a context that asked libmlx5 for
//!   four static bfregs, none low latency (`MLX5_TOTAL_UUARS=4`, `MLX5_NUM_LOW_LAT_UUARS=0`):
//!   the kernel puts the sixteen QPs on three shared registers, five or six each, and threads
//!   post on QPs of the same register at once. The control path must serialise them.
//! - **dedicated**: a thread domain per QP, each with a register of its own: no lock needed.
//! - **shared, UD**: the shared case with sixteen UD QPs, each sending datagrams to itself
//!   through an address handle (signaled SENDs of two and three basic blocks with inline data,
//!   each a BlueFlame copy) into receives it posted: UD QPs on a shared register take its lock
//!   and toggle as RC QPs do, and every datagram lands whole in its receive.
//!
//! Needs the shim (`libzverbs_emu.so`); run by `cargo xtask test --only connectx` (see
//! `differential.rs`).

mod common;

#[cfg(target_arch = "x86_64")]
use std::time::Duration;

#[cfg(target_arch = "x86_64")]
use common::in_emulator;

#[cfg(target_arch = "x86_64")]
mod run {
    use std::sync::Barrier;

    use zverbs::backend::Queues;
    use zverbs::connect::{Endpoint, random_psn};
    use zverbs::{
        AccessFlags, AhAttr, BlueFlame, Completion, ConnectAttr, ContextOptions, PollCq, PostRecv,
        PostSend, RecvWr, Registered, SendWr, Sge, UdAttr, UdDest, WcOpcode,
    };
    use zverbs_emu::watch::WatchStats;

    /// A QP's register report at creation and at the end, and its name.
    pub type Registers = (Option<BlueFlame>, Option<BlueFlame>, String);

    pub const QPS: usize = 16;
    pub const THREADS: usize = 8;
    /// Posts per QP: rounds of a burst on each of a thread's QPs, then their completions.
    pub const POSTS: usize = ROUNDS * BURST;
    const ROUNDS: usize = 20;
    /// Odd: a queue with a toggle of its own ends a burst in the other buffer than it began,
    /// so writes through a register whose toggle is not shared would not alternate.
    const BURST: usize = 7;
    /// Bytes of the buffer each QP writes into (its own part of one registered buffer).
    const PART: usize = 4096;
    /// Bytes of each receive of a UD QP in its part (the 40-byte GRH area, then the data).
    const SLOT: usize = 256;
    /// The Q_Key of the UD QPs.
    const QKEY: u32 = 0x1111_1111;

    /// The QPs' transport.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Kind {
        /// RC QPs looped back to themselves, posting RDMA WRITEs.
        Rc,
        /// UD QPs sending datagrams to themselves.
        Ud,
    }

    /// The device's counts (from whichever copy of the emulator serves libmlx5: the shim, or
    /// the copy linked into this binary).
    pub fn watch_stats() -> WatchStats {
        zverbs_emu::watch::active_stats().expect("the device watches BlueFlame writes")
    }

    /// Runs the sixteen QPs on eight threads; returns each QP's register report (at
    /// creation, and at the end) and the device's counts of this run.
    pub fn sixteen_qps(kind: Kind) -> (Vec<Registers>, WatchStats) {
        let ctx = zverbs::open_device(Some("mlx5_0"), &ContextOptions::default()).unwrap();
        let port = ctx.active_port().unwrap();
        let local = ctx.address(port, None).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let buf = pd.alloc_buf(QPS * PART, AccessFlags::ALL).unwrap();
        let mut qps = Vec::new();
        for _ in 0..QPS {
            let cq = ctx.cq_builder().cqe(64).build().unwrap();
            let qp = match kind {
                Kind::Rc => {
                    let qp = pd
                        .qp_builder(&cq, &cq)
                        .max_send_wr(32)
                        .max_recv_wr(1)
                        .max_inline_data(64)
                        .build()
                        .unwrap();
                    let me = Endpoint {
                        lid: local.lid,
                        qpn: qp.qpn(),
                        psn: random_psn(),
                        gid: local.gid,
                    };
                    qp.connect_with(&ConnectAttr::new(port, me.psn, &me, local.gid_index))
                        .unwrap();
                    qp
                }
                Kind::Ud => {
                    let qp = pd
                        .qp_builder(&cq, &cq)
                        .ud()
                        .max_send_wr(32)
                        .max_recv_wr(BURST as u32)
                        .max_inline_data(128)
                        .build()
                        .unwrap();
                    qp.ready_ud(&UdAttr::new(QKEY)).unwrap();
                    qp
                }
            };
            qps.push((qp, cq));
        }
        // The UD QPs' address handle: this port, no GRH; each QP sends to itself.
        let ah = pd
            .create_ah(&AhAttr {
                dlid: local.lid,
                port,
                ..AhAttr::default()
            })
            .unwrap();
        let before = watch_stats();
        let reports: Vec<_> = qps
            .iter()
            .map(|(qp, _)| {
                (
                    qp.backend().blueflame,
                    qp.blueflame(),
                    qp.backend().reason.clone(),
                )
            })
            .collect();
        let start = Barrier::new(THREADS);
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let mine: Vec<(usize, Queues)> = (0..QPS)
                    .filter(|q| q % THREADS == t)
                    .map(|q| (q, Queues::take(&qps[q].0, &qps[q].1).unwrap()))
                    .collect();
                let (buf, start) = (&buf, &start);
                let dests: Vec<UdDest> = mine
                    .iter()
                    .map(|(q, _)| ah.dest(qps[*q].0.qpn(), QKEY))
                    .collect();
                s.spawn(move || {
                    if kind == Kind::Ud {
                        return datagrams(buf, mine, &dests, start);
                    }
                    let mut mine: Vec<_> = mine
                        .into_iter()
                        .map(|(q, queues)| match queues {
                            Queues::Direct(d) => (q, d),
                            Queues::DirectUd(_) | Queues::Verbs(_) => {
                                panic!("QP {q}: not an RC QP on the direct path")
                            }
                        })
                        .collect();
                    start.wait();
                    for round in 0..ROUNDS {
                        let first = round * BURST;
                        for (q, d) in &mut mine {
                            for i in first..first + BURST {
                                post_one(buf, *q, i, &mut d.sq);
                                // Let the other threads in between posts: the posts of
                                // threads that share a register overlap in time.
                                std::thread::yield_now();
                            }
                        }
                        for (q, d) in &mut mine {
                            for i in first..first + BURST {
                                complete(*q, i, &mut d.cq);
                            }
                        }
                    }
                });
            }
        });
        // Every QP's part holds its last pattern (UD: checked at each receive).
        for q in (0..QPS).filter(|_| kind == Kind::Rc) {
            let mut got = [0u8; 64];
            buf.read(q * PART, &mut got).unwrap();
            assert_eq!(got, pattern(q, POSTS - 1)[..64], "QP {q}'s last write");
        }
        let after = watch_stats();
        (reports, since(&before, &after))
    }

    /// One thread's UD QPs: in each round, a burst of receives on each QP, then a burst of
    /// datagrams from each QP to itself (each rung at once), then their completions.
    fn datagrams(
        buf: &zverbs::MrBuf,
        mine: Vec<(usize, Queues)>,
        dests: &[UdDest],
        start: &Barrier,
    ) {
        let mut mine: Vec<_> = mine
            .into_iter()
            .zip(dests)
            .map(|((q, queues), dest)| match queues {
                Queues::DirectUd(d) => (q, d, dest),
                Queues::Direct(_) | Queues::Verbs(_) => {
                    panic!("QP {q}: not a UD QP on the direct path")
                }
            })
            .collect();
        start.wait();
        for round in 0..ROUNDS {
            let first = round * BURST;
            for (q, d, _) in &mut mine {
                for i in first..first + BURST {
                    let sgl = [buf.sge(slot(*q, i)..slot(*q, i) + SLOT).unwrap()];
                    // SAFETY: this QP's own slot of a registered buffer that outlives the run,
                    // read only after the receive's completion.
                    unsafe { d.rq.post(&RecvWr::new(i as u64, &sgl)) }.unwrap();
                }
            }
            for (q, d, dest) in &mut mine {
                for i in first..first + BURST {
                    let data = pattern(*q, i);
                    let sgl = [Sge::from_slice(&data[..datagram_len(i)], 0)];
                    let wr = SendWr::send_to(i as u64, &sgl, dest).inline().signaled();
                    // SAFETY: inline data is copied into the WQE.
                    unsafe { d.sq.post(&wr) }.unwrap();
                    std::thread::yield_now();
                }
            }
            for (q, d, _) in &mut mine {
                received(buf, *q, first, &mut d.cq);
            }
        }
    }

    /// Where QP `q`'s receive for its `i`-th datagram starts.
    fn slot(q: usize, i: usize) -> usize {
        q * PART + (i % BURST) * SLOT
    }

    /// The bytes of the `i`-th datagram: two basic blocks with its inline data, or three.
    fn datagram_len(i: usize) -> usize {
        if i.is_multiple_of(2) { 8 } else { 100 }
    }

    /// Waits for the completions of QP `q`'s burst from `first` (each send and its receive),
    /// and checks each datagram landed whole after the GRH area of its receive.
    fn received(buf: &zverbs::MrBuf, q: usize, first: usize, cq: &mut impl PollCq) {
        let mut got = Vec::new();
        let mut wc = [Completion::EMPTY; 8];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while got.len() < 2 * BURST {
            let n = cq.poll(&mut wc);
            got.extend_from_slice(&wc[..n]);
            assert!(
                std::time::Instant::now() < deadline,
                "QP {q}: {} of {} completions in 60 s",
                got.len(),
                2 * BURST
            );
            std::thread::yield_now();
        }
        assert!(got.iter().all(|c| c.is_success()), "QP {q}: {got:?}");
        let (recvs, sends): (Vec<&Completion>, Vec<&Completion>) =
            got.iter().partition(|c| c.opcode == WcOpcode::Recv);
        let want: Vec<u64> = (first..first + BURST).map(|i| i as u64).collect();
        assert_eq!(
            sends.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
            want,
            "QP {q}"
        );
        assert_eq!(
            recvs.iter().map(|c| c.wr_id).collect::<Vec<_>>(),
            want,
            "QP {q}"
        );
        for c in recvs {
            let i = c.wr_id as usize;
            let len = datagram_len(i);
            assert_eq!(c.byte_len as usize, 40 + len, "QP {q}: {c:?}");
            let mut data = vec![0u8; len];
            buf.read(slot(q, i) + 40, &mut data).unwrap();
            assert_eq!(data, pattern(q, i)[..len], "QP {q}, datagram {i}");
        }
    }

    /// The bytes QP `q` writes at its `i`-th post (64 for a WRITE, up to 100 for a datagram).
    fn pattern(q: usize, i: usize) -> [u8; 128] {
        std::array::from_fn(|k| (q * 31 + i * 7 + k) as u8)
    }

    /// Posts QP `q`'s `i`-th WRITE into its own part of `buf`: 24 inline bytes (one basic
    /// block) or 64 (two) in turn, each rung at once (a BlueFlame copy).
    fn post_one(buf: &zverbs::MrBuf, q: usize, i: usize, sq: &mut impl PostSend) {
        let data = pattern(q, i);
        let len = if i.is_multiple_of(2) { 24 } else { 64 };
        let data = &data[..64];
        let sgl = [zverbs::Sge::from_slice(&data[..len], 0)];
        let wr = SendWr::write(i as u64, &sgl, buf.remote(q * PART).unwrap())
            .inline()
            .signaled();
        // SAFETY: inline data is copied into the WQE; the target is this QP's part of a
        // registered buffer that outlives the run.
        unsafe { sq.post(&wr) }.unwrap();
    }

    /// Waits for QP `q`'s completion of its `i`-th WRITE (completions come in order).
    fn complete(q: usize, i: usize, cq: &mut impl PollCq) {
        let mut wc = [Completion::EMPTY; 1];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while cq.poll(&mut wc) == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "QP {q}: no completion in 60 s"
            );
            std::thread::yield_now();
        }
        assert!(
            wc[0].is_success() && wc[0].wr_id == i as u64,
            "QP {q}: {:?}",
            wc[0]
        );
    }

    fn since(a: &WatchStats, b: &WatchStats) -> WatchStats {
        WatchStats {
            stores: b.stores - a.stores,
            register_stores: b.register_stores - a.register_stores,
            writes: b.writes - a.writes,
            copies: b.copies - a.copies,
            torn: b.torn - a.torn,
            foreign: b.foreign - a.foreign,
            mismatched: b.mismatched - a.mismatched,
            toggle: b.toggle - a.toggle,
        }
    }

    /// Every post was one whole BlueFlame copy, clean.
    pub fn assert_clean(s: &WatchStats) {
        println!("device's counts: {s:?}");
        let posts = (QPS * POSTS) as u64;
        assert_eq!(s.torn, 0, "torn BlueFlame copies: {s:?}");
        assert_eq!(
            (s.foreign, s.mismatched, s.toggle),
            (0, 0, 0),
            "BlueFlame writes naming another QP, differing from the ring, or reusing a buffer: \
             {s:?}"
        );
        assert_eq!(
            (s.writes, s.copies),
            (posts, posts),
            "one whole copy per post: {s:?}"
        );
    }
}

/// The shared case's environment: no register left to dedicate, four static bfregs.
#[cfg(target_arch = "x86_64")]
const SHARED: &[(&str, &str)] = &[
    ("ZVERBS_EMU_BF_WATCH", "1"),
    ("ZVERBS_EMU_DYN_BFREGS", "0"),
    ("MLX5_TOTAL_UUARS", "4"),
    ("MLX5_NUM_LOW_LAT_UUARS", "0"),
];

/// Sixteen QPs of `kind` on three shared registers: reported so, and every copy clean.
#[cfg(target_arch = "x86_64")]
fn on_shared_registers(kind: run::Kind) {
    let (reports, stats) = run::sixteen_qps(kind);
    for (i, (at_creation, now, reason)) in reports.iter().enumerate() {
        println!("QP {i}: {reason}");
        assert!(
            matches!(at_creation, Some(zverbs::BlueFlame::Shared { .. })),
            "QP {i}: {reason}"
        );
        assert!(reason.contains("no thread domain"), "QP {i}: {reason}");
        // Sixteen QPs on three registers: five or six on each.
        assert!(
            matches!(now, Some(zverbs::BlueFlame::Shared { others: 4 | 5 })),
            "QP {i} now: {now:?}"
        );
    }
    run::assert_clean(&stats);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn shared_registers_are_serialised() {
    if !in_emulator(
        "shared_registers_are_serialised",
        SHARED,
        Duration::from_secs(600),
    ) {
        return;
    }
    on_shared_registers(run::Kind::Rc);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn ud_qps_on_shared_registers_are_serialised() {
    if !in_emulator(
        "ud_qps_on_shared_registers_are_serialised",
        SHARED,
        Duration::from_secs(600),
    ) {
        return;
    }
    on_shared_registers(run::Kind::Ud);
}

#[cfg(target_arch = "x86_64")]
#[test]
fn dedicated_registers_are_clean() {
    if !in_emulator(
        "dedicated_registers_are_clean",
        &[("ZVERBS_EMU_BF_WATCH", "1")],
        Duration::from_secs(600),
    ) {
        return;
    }
    let (reports, stats) = run::sixteen_qps(run::Kind::Rc);
    for (i, (at_creation, now, reason)) in reports.iter().enumerate() {
        println!("QP {i}: {reason}");
        assert_eq!(
            (at_creation, now),
            (
                &Some(zverbs::BlueFlame::Dedicated),
                &Some(zverbs::BlueFlame::Dedicated)
            ),
            "QP {i}: {reason}"
        );
        assert!(
            reason.contains("BlueFlame register: dedicated (thread domain)"),
            "QP {i}: {reason}"
        );
    }
    run::assert_clean(&stats);
}

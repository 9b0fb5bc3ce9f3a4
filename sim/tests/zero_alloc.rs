//! Zero allocation on the data path: a counting global allocator around a million post + poll
//! round trips through the direct backend on the stepped device (posting, the doorbell, the
//! device's execution and CQE write, polling and credit return), after set-up.
//!
//! The same for UD datagrams and receives from a shared receive queue, driven by hand
//! (`tests/raw`): a UD SEND with its receive, multicast to two attached QPs, and an RC SEND
//! into an SRQ, with the SRQ WQE freed again; and the same through the library's own queues
//! (`SendQueue::new_ud`, `RecvQueue`, `SharedRecvQueue`, `CompletionQueue`). And raw
//! Ethernet frames (`tests/raw/eth.rs`): sent, looped back, steered, received into an
//! ordinary and a striding queue; packets received in place through the library's
//! `StridingRq`; and the library's own Ethernet send queue (`SendQueue::new_eth`: frames by
//! reference, inline, in a batch, prepared; a fortieth of the iterations, five frames each).
//!
//! `ZVERBS_SIM_ALLOC_ITERS` overrides the count (at least 1 000 000 unless set; a quarter of
//! it for the UD and SRQ loops, an eighth for the raw Ethernet one, a 32nd of it for the polls
//! of three packets each from the striding queue, a fortieth for the library's Ethernet sends).

mod common;
mod raw;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{Arena, PairCfg, env_u64, with_pair};
use raw::{Body, Dest, RawCq, RawQp, RawSrq};
use zverbs_core::{Completion, PollCq, PostRecv, PostSend, RecvWr, SendWr};
use zverbs_mlx5dv::prm::cqe::{Cqe64, op};
use zverbs_mlx5dv::prm::{fm_ce_se, opcode};
use zverbs_sim::{Access, AhAttr, CqConfig, Device, QpConfig, QpType, SrqConfig};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Count only what the measuring thread does while measuring.
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

fn measuring() -> bool {
    MEASURING.try_with(Cell::get).unwrap_or(false)
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if measuring() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded with the caller's layout.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if measuring() {
            FREES.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded; `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if measuring() {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
            FREES.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: forwarded.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn a_million_round_trips_allocate_nothing() {
    let iters = env_u64("ZVERBS_SIM_ALLOC_ITERS", 1_000_000);
    with_pair(PairCfg::default(), |p| {
        let write_sgl = [p.a.sge(0, 8)];
        let send_sgl = [p.a.sge(64, 16)];
        let recv_sgl = [p.b.sge(0, 64)];
        let remote = p.b.remote(128);
        let mut wc = [Completion::EMPTY; 4];
        let mut polled = 0u64;
        MEASURING.with(|m| m.set(true));
        for i in 0..iters {
            // Alternate a signaled 1-SGE WRITE and a SEND/RECV pair.
            // SAFETY: entries in the registered arenas, not touched by this loop.
            unsafe {
                if i % 2 == 0 {
                    p.a.sq
                        .post(&SendWr::write(i, &write_sgl, remote).signaled())
                        .unwrap();
                } else {
                    p.b.rq.post(&RecvWr::new(i, &recv_sgl)).unwrap();
                    p.a.sq.post(&SendWr::send(i, &send_sgl).signaled()).unwrap();
                }
            }
            p.dev.step();
            let n = p.a.cqp.poll(&mut wc);
            assert!(n == 1 && wc[0].wr_id == i && wc[0].is_success());
            if i % 2 == 1 {
                let n = p.b.cqp.poll(&mut wc);
                assert!(n == 1 && wc[0].wr_id == i && wc[0].byte_len == 16);
            }
            polled += 1;
        }
        MEASURING.with(|m| m.set(false));
        let (allocs, frees) = (
            ALLOCS.load(Ordering::Relaxed),
            FREES.load(Ordering::Relaxed),
        );
        println!(
            "{polled} post+poll round trips: {allocs} allocations, {frees} frees during the loop"
        );
        assert_eq!(polled, iters);
        assert_eq!((allocs, frees), (0, 0));
    });
}

#[test]
fn ud_multicast_and_srq_round_trips_allocate_nothing() {
    let iters = env_u64("ZVERBS_SIM_ALLOC_ITERS", 1_000_000) / 4;
    let mem = Arena::new(8192);
    let dev = Device::new();
    // SAFETY: `mem` outlives `dev`.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 8192, Access::ALL) }.unwrap();
    let cq = |n| RawCq::new(dev.create_cq(CqConfig { cqe: n }).unwrap());
    let (mut scq, mut rcq) = (cq(64), cq(64));
    let cfg = QpConfig {
        send_cq: scq.cq.cqn,
        recv_cq: rcq.cq.cqn,
        ..QpConfig::default()
    };
    let ud = |c| {
        let q = dev.create_qp_ext(c, QpType::Ud, None).unwrap();
        dev.init_ud(q.qpn, 1, 0).unwrap();
        dev.ready_ud(q.qpn).unwrap();
        RawQp::new(q)
    };
    let (mut a, mut b, mut c) = (ud(cfg), ud(cfg), ud(cfg));
    let mgid = [0xff, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
    dev.attach_mcast(b.qpn(), mgid, 0xc001).unwrap();
    dev.attach_mcast(c.qpn(), mgid, 0xc001).unwrap();
    let ah = |dlid| {
        dev.create_ah(&AhAttr {
            dlid,
            ..AhAttr::default()
        })
        .unwrap()
        .av
    };
    let to_b = Dest {
        av: ah(dev.lid()),
        dqpn: b.qpn(),
        qkey: 1,
    };
    let to_group = Dest {
        av: ah(0xc001),
        dqpn: 0x00ff_ffff,
        qkey: 1,
    };
    let mut srq = RawSrq::new(dev.create_srq(SrqConfig::default()).unwrap());
    let r = RawQp::new(dev.create_qp(cfg).unwrap());
    let s = dev
        .create_qp_ext(
            QpConfig {
                max_recv_wr: 0,
                ..cfg
            },
            QpType::Rc,
            Some(srq.srq.srqn),
        )
        .unwrap();
    dev.connect(r.qpn(), s.qpn).unwrap();
    let mut r = r;
    let src = [(mem.addr(4096), 32, mr.lkey)];
    let recv = |off: usize| [(mem.addr(off), 128, mr.lkey)];
    let signaled = fm_ce_se::CQ_UPDATE;
    MEASURING.with(|m| m.set(true));
    for i in 0..iters {
        let want = match i % 3 {
            0 => {
                b.post_recv(&recv(0));
                a.post_send(opcode::SEND, Some(&to_b), Body::Sges(&src), 0, signaled);
                1
            }
            1 => {
                b.post_recv(&recv(0));
                c.post_recv(&recv(256));
                a.post_send(
                    opcode::SEND,
                    Some(&to_group),
                    Body::Inline(b"m"),
                    0,
                    signaled,
                );
                2
            }
            _ => {
                srq.post(&recv(512)).unwrap();
                r.post_send(opcode::SEND, None, Body::Sges(&src), 0, signaled);
                1
            }
        };
        dev.step();
        let sent = scq.poll().unwrap();
        assert_eq!(Cqe64::new_unchecked(&sent).op_own() >> 4, op::REQ);
        for _ in 0..want {
            let got = rcq.poll().unwrap();
            let v = Cqe64::new_unchecked(&got);
            assert_eq!(v.op_own() >> 4, op::RESP_SEND);
            if i % 3 == 2 {
                srq.free(v.wqe_counter());
            }
        }
    }
    MEASURING.with(|m| m.set(false));
    let (allocs, frees) = (
        ALLOCS.load(Ordering::Relaxed),
        FREES.load(Ordering::Relaxed),
    );
    println!("{iters} UD, multicast and SRQ round trips: {allocs} allocations, {frees} frees");
    assert_eq!((allocs, frees), (0, 0));
    assert_eq!(dev.stats().cq_overruns, 0);
}

fn leak<T>(v: T) -> &'static T {
    Box::leak(Box::new(v))
}

/// The library's own queues for datagrams and a shared receive queue: a UD SEND through
/// `SendQueue::new_ud` with its receive through `RecvQueue`, and an RC SEND into a
/// `SharedRecvQueue` whose WQE the `CompletionQueue` frees again, each polled through the
/// library's poller.
#[test]
fn library_ud_and_srq_round_trips_allocate_nothing() {
    use zverbs_core::{Sge, Transport, UdDest};
    use zverbs_mlx5dv::{
        CompletionQueue, CqBinding, RecvQueue, RqRef, RqState, SendQueue, SharedRecvQueue, SqCaps,
        SqRef, SqState, SrqRef, SrqSlot, SrqState,
    };
    type Binds = &'static [CqBinding<SqRef<'static>, RqRef<'static>, SrqRef<'static>>];

    let iters = env_u64("ZVERBS_SIM_ALLOC_ITERS", 1_000_000) / 4;
    let mem = leak(Arena::new(8192));
    let dev = leak(Device::new());
    // SAFETY: both are leaked: the arena outlives the device's use of it.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 8192, Access::ALL) }.unwrap();
    let cq = || dev.create_cq(CqConfig { cqe: 64 }).unwrap();
    let (acq, bcq, rcq, scq) = (cq(), cq(), cq(), cq());
    let ud = |c: zverbs_sim::SimCq| {
        let q = dev
            .create_qp_ext(
                QpConfig {
                    send_cq: c.cqn,
                    recv_cq: c.cqn,
                    ..QpConfig::default()
                },
                QpType::Ud,
                None,
            )
            .unwrap();
        dev.init_ud(q.qpn, 1, 0).unwrap();
        dev.ready_ud(q.qpn).unwrap();
        q
    };
    let (a, b) = (ud(acq), ud(bcq));
    let s = dev.create_srq(SrqConfig::default()).unwrap();
    let srq_layout = common::direct::srq_layout(&s);
    let r = dev
        .create_qp(QpConfig {
            send_cq: rcq.cqn,
            recv_cq: rcq.cqn,
            ..QpConfig::default()
        })
        .unwrap();
    let on_srq = dev
        .create_qp_ext(
            QpConfig {
                send_cq: scq.cqn,
                recv_cq: scq.cqn,
                max_recv_wr: 0,
                ..QpConfig::default()
            },
            QpType::Rc,
            Some(s.srqn),
        )
        .unwrap();
    dev.connect(r.qpn, on_srq.qpn).unwrap();

    let sq_state = |q: &zverbs_sim::SimQp| -> SqRef<'static> {
        leak(SqState::new(&*q.sq_slots().leak()).unwrap())
    };
    let (a_sq, r_sq) = (sq_state(&a), sq_state(&r));
    let b_rq: RqRef<'static> = leak(RqState::new(&*b.rq_slots().leak()).unwrap());
    let srq_slots: &'static [SrqSlot] = (0..s.wqe_cnt)
        .map(|_| SrqSlot::new())
        .collect::<Vec<_>>()
        .leak();
    // SAFETY: the device (leaked) keeps the ring alive; the SRQ is new.
    let srq_state: SrqRef<'static> =
        leak(unsafe { SrqState::new(&srq_layout, srq_slots) }.unwrap());
    let binds = |b: CqBinding<SqRef<'static>, RqRef<'static>, SrqRef<'static>>| -> Binds {
        Box::leak(Box::new([b]))
    };
    let ud_caps = SqCaps {
        transport: Transport::Ud { mtu: 4096 },
        ..a.caps()
    };
    // SAFETY: the device outlives the queues; each ring has one driver; each state is bound
    // to the CQ that serves it, and every QP on the SRQ completes its receives on `scq`.
    let (mut a_q, mut b_q, mut r_q, mut srq_q, mut acq_p, mut bcq_p, mut rcq_p, mut scq_p) = unsafe {
        (
            SendQueue::new_ud(&a.layout, ud_caps, a_sq, None).unwrap(),
            RecvQueue::new(&b.layout, b_rq).unwrap(),
            SendQueue::new(&r.layout, r.caps(), r_sq, None).unwrap(),
            SharedRecvQueue::new(&srq_layout, srq_state).unwrap(),
            CompletionQueue::new(&acq.layout, binds(CqBinding::new(a.qpn, Some(a_sq), None)))
                .unwrap(),
            CompletionQueue::new(&bcq.layout, binds(CqBinding::new(b.qpn, None, Some(b_rq))))
                .unwrap(),
            CompletionQueue::new(&rcq.layout, binds(CqBinding::new(r.qpn, Some(r_sq), None)))
                .unwrap(),
            CompletionQueue::new(
                &scq.layout,
                binds(CqBinding::with_srq(on_srq.qpn, None, srq_state)),
            )
            .unwrap(),
        )
    };
    let av = dev
        .create_ah(&AhAttr {
            dlid: dev.lid(),
            ..AhAttr::default()
        })
        .unwrap()
        .av;
    let dest = UdDest::new(av, 0, b.qpn, 1);
    let src = [Sge::new(mem.addr(4096), 32, mr.lkey)];
    let recv = [Sge::new(mem.addr(0), 128, mr.lkey)];
    let mut wc = [Completion::EMPTY; 2];
    MEASURING.with(|m| m.set(true));
    for i in 0..iters {
        // SAFETY: entries in the registered arena, not touched by this loop.
        unsafe {
            if i % 2 == 0 {
                b_q.post(&RecvWr::new(i, &recv)).unwrap();
                a_q.post(&SendWr::send_to_imm(i, &src, &dest, i as u32).signaled())
                    .unwrap();
            } else {
                srq_q.post(&RecvWr::new(i, &recv)).unwrap();
                r_q.post(&SendWr::send(i, &src).signaled()).unwrap();
            }
        }
        dev.step();
        let (tx, rx) = if i % 2 == 0 {
            (&mut acq_p, &mut bcq_p)
        } else {
            (&mut rcq_p, &mut scq_p)
        };
        assert!(tx.poll(&mut wc) == 1 && wc[0].wr_id == i && wc[0].is_success());
        assert!(rx.poll(&mut wc) == 1 && wc[0].wr_id == i && wc[0].is_success());
        if i % 2 == 0 {
            assert!(wc[0].src_qp == a.qpn && wc[0].byte_len == 72 && wc[0].imm == i as u32);
        } else {
            assert!(wc[0].qp_num == on_srq.qpn && wc[0].byte_len == 32);
        }
    }
    MEASURING.with(|m| m.set(false));
    let (allocs, frees) = (
        ALLOCS.load(Ordering::Relaxed),
        FREES.load(Ordering::Relaxed),
    );
    println!("{iters} library UD and SRQ round trips: {allocs} allocations, {frees} frees");
    assert_eq!((allocs, frees), (0, 0));
    assert_eq!(srq_q.free(), s.wqe_cnt - 1);
}

/// Raw Ethernet allocates nothing per frame: a raw SEND (18 inlined header bytes, checksum
/// offload) looped back into an ordinary receive by a destination-MAC rule, and one into a
/// striding work queue behind an RSS QP, its WQEs posted again as their strides run out.
#[test]
fn raw_ethernet_round_trips_allocate_nothing() {
    use raw::eth::{
        Body, GROUP, MAC_A, MAC_B, flow_attr, post_frame, post_wq, raw_qp, rss_qp, udp_frame,
        wq_config,
    };
    use std::net::Ipv4Addr;
    use zverbs_sim::{FlowDest, FlowSpec, RxHashFields};
    let iters = env_u64("ZVERBS_SIM_ALLOC_ITERS", 1_000_000) / 8;
    let dev = Device::new();
    let mem = Arena::new(8192);
    // SAFETY: the arena outlives the device's use of it (both live to the end of the test).
    let mr = unsafe { dev.reg_mr(mem.ptr(0), mem.len(), Access::ALL) }.unwrap();
    let (mut qp, mut cq) = raw_qp(&dev, 16);
    let to_qp = flow_attr(0, FlowSpec::dst_mac(MAC_A), FlowDest::RawQp(qp.qpn()), None);
    dev.create_flow(to_qp).unwrap();
    let wcq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    let w = dev.create_wq(wq_config(wcq.cqn, 4, Some(3))).unwrap();
    dev.ready_wq(w.wqn).unwrap();
    let (rss, _) = rss_qp(
        &dev,
        &[w.wqn],
        RxHashFields::SRC_IPV4 | RxHashFields::DST_IPV4,
    );
    let to_rss = flow_attr(0, FlowSpec::dst_mac(MAC_B), FlowDest::Rss(rss), None);
    dev.create_flow(to_rss).unwrap();
    let src = Ipv4Addr::new(10, 0, 0, 1);
    let a = udp_frame(MAC_A, src, GROUP, (1, 2), 22, 0);
    let b = udp_frame(MAC_B, src, GROUP, (1, 2), 22, 0);
    mem.write(0, &a);
    mem.write(64, &b);
    let bufs = |k: usize| [(mem.addr(1024 + (k & 3) * 512), 512, mr.lkey)];
    for k in 0..4 {
        post_wq(&w, k, &bufs(k));
    }
    let mut wcq = RawCq::new(wcq);
    let (mut posted, mut frames) = (4usize, 0u64);
    MEASURING.with(|m| m.set(true));
    for _ in 0..iters {
        qp.post_recv(&[(mem.addr(128), 256, mr.lkey)]);
        let rest_a = [(mem.addr(18), 46, mr.lkey)];
        post_frame(&mut qp, &a[..18], Body::Sges(&rest_a), 0xc0, 0);
        let rest_b = [(mem.addr(64 + 18), 46, mr.lkey)];
        post_frame(&mut qp, &b[..18], Body::Sges(&rest_b), 0xc0, 0);
        dev.run_until_idle();
        let mut kinds = [0u32; 16];
        while let Some(c) = cq.poll() {
            kinds[usize::from(c[63] >> 4)] += 1;
        }
        assert_eq!((kinds[0], kinds[2]), (2, 1), "two sends, one receive");
        let c = wcq.poll().expect("the striding queue's CQE");
        assert_eq!(Cqe64::new_unchecked(&c).byte_cnt(), (1 << 16) | 64);
        frames += 1;
        if frames.is_multiple_of(8) {
            // A WQE's eight strides are used: post it again.
            post_wq(&w, posted, &bufs(posted));
            posted += 1;
        }
    }
    MEASURING.with(|m| m.set(false));
    let (allocs, frees) = (
        ALLOCS.load(Ordering::Relaxed),
        FREES.load(Ordering::Relaxed),
    );
    println!("{frames} raw frames sent and received: {allocs} allocations, {frees} frees");
    assert_eq!(frames, iters);
    assert_eq!((allocs, frees), (0, 0));
}

/// Packets received in place from a striding queue through the library's `StridingRq`
/// (frames of three sizes arriving at the port, steered through an RSS QP, polled into a
/// burst, touched, some kept over the next poll, given back, WQEs posted again, fillers):
/// nothing allocated per packet.
#[test]
fn striding_packets_in_place_allocate_nothing() {
    use raw::eth::{GROUP, MAC_B, steered_wq, udp_frame, wq_config};
    use std::net::Ipv4Addr;
    use zverbs_mlx5dv::{
        CompletionQueue, CqBinding, Packet, RqRef, SqRef, StrideBuffer, StrideConfig, StrideSlot,
        StridingRq, StridingState,
    };
    use zverbs_sim::FlowSpec;
    // Three frames a poll: a 32nd of the count (about 94 000 packets by default).
    let iters = env_u64("ZVERBS_SIM_ALLOC_ITERS", 1_000_000) / 32;
    let dev = Device::new();
    let mem = Arena::new(16 * 512);
    // SAFETY: the arena outlives the device's use of it (both live to the end of the test).
    let mr = unsafe { dev.reg_mr(mem.ptr(0), mem.len(), Access::ALL) }.unwrap();
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    let cfg = wq_config(cq.cqn, 16, Some(3));
    let (w, _) = steered_wq(&dev, cfg, FlowSpec::dst_mac(MAC_B), None);
    let slots: Vec<StrideSlot> = (0..16).map(|_| StrideSlot::new()).collect();
    let state = StridingState::new(&slots[..]).unwrap();
    let cfg = StrideConfig {
        log_num_strides: 3,
        log_stride_size: 6,
    };
    let buffer = StrideBuffer {
        addr: std::ptr::NonNull::new(mem.ptr(0)).unwrap(),
        len: mem.len(),
        lkey: mr.lkey,
    };
    // SAFETY: the device and arena outlive the queue; the WQ is new and ready; only this
    // queue posts to it.
    let rq = unsafe { StridingRq::new(&w.layout, w.dbrec, cfg, buffer, &state) }.unwrap();
    let none: [CqBinding<SqRef<'_>, RqRef<'_>>; 0] = [];
    // SAFETY: as above; the only poller.
    let mut cq = unsafe { CompletionQueue::new(&cq.layout, &none[..]) }.unwrap();
    let src = Ipv4Addr::new(10, 0, 0, 1);
    // 100, 200 and 300 bytes: 2, 4 and 5 strides; fillers as WQEs run out.
    let frames = [58usize, 158, 258].map(|p| udp_frame(MAC_B, src, GROUP, (1, 2), p, 3));
    let mut burst: [Option<Packet<'_>>; 4] = [const { None }; 4];
    let mut kept: Option<Packet<'_>> = None;
    let (mut packets, mut sum) = (0u64, 0u64);
    MEASURING.with(|m| m.set(true));
    for _ in 0..iters {
        for f in &frames {
            dev.receive_frame(f);
        }
        dev.run_until_idle();
        let n = rq.poll_burst(&mut cq, &mut burst);
        assert_eq!(n, 3);
        for p in burst.iter_mut().take(n) {
            let p = p.take().unwrap();
            sum += u64::from(p.bytes()[p.len() - 1]) + p.len() as u64;
            packets += 1;
            // Keep the first of each burst until the next one: given back out of order.
            if p.len() == frames[0].len() {
                drop(kept.replace(p));
            }
        }
    }
    drop(kept);
    MEASURING.with(|m| m.set(false));
    let (allocs, frees) = (
        ALLOCS.load(Ordering::Relaxed),
        FREES.load(Ordering::Relaxed),
    );
    println!("{packets} packets received in place: {allocs} allocations, {frees} frees");
    assert_eq!(packets, 3 * iters);
    let last = |f: &Vec<u8>| u64::from(f[f.len() - 1]) + f.len() as u64;
    assert_eq!(sum, iters * frames.iter().map(last).sum::<u64>());
    assert_eq!(dev.stats().eth_no_wqe, 0);
    assert!(rq.head() > 16);
    assert_eq!((allocs, frees), (0, 0));
}

/// The library's Ethernet send queue allocates nothing per frame: a frame by reference with
/// checksum offload (18 inlined header bytes), an inline frame, a batch of two and a prepared
/// frame through `SendQueue<_, Ethernet>`, looped back into a hand-driven raw QP, each send
/// completed through the library's poller.
#[test]
fn library_raw_ethernet_sends_allocate_nothing() {
    use raw::eth::{MAC_B, flow_attr, raw_qp, udp_frame};
    use std::net::Ipv4Addr;
    use zverbs_core::{SendFlags, Sge, Transport};
    use zverbs_mlx5dv::{
        CompletionQueue, CqBinding, FrameLengths, RqRef, SendQueue, SqCaps, SqRef, SqState, SrqRef,
    };
    use zverbs_sim::{FlowDest, FlowSpec};
    type Binds = &'static [CqBinding<SqRef<'static>, RqRef<'static>, SrqRef<'static>>];

    // Five frames and a NOP a round: a fortieth of the iterations (125 000 frames by default),
    // so that the loop costs the test stage little.
    let iters = env_u64("ZVERBS_SIM_ALLOC_ITERS", 1_000_000) / 40;
    let mem = leak(Arena::new(8192));
    let dev = leak(Device::new());
    // SAFETY: both are leaked: the arena outlives the device's use of it.
    let mr = unsafe { dev.reg_mr(mem.ptr(0), 8192, Access::ALL) }.unwrap();
    let tcq = dev.create_cq(CqConfig { cqe: 64 }).unwrap();
    let tx = dev
        .create_qp_ext(
            QpConfig {
                send_cq: tcq.cqn,
                recv_cq: tcq.cqn,
                max_send_wr: 16,
                max_inline_data: 128,
                ..QpConfig::default()
            },
            QpType::RawPacket,
            None,
        )
        .unwrap();
    dev.ready_raw(tx.qpn).unwrap();
    let (mut rx, mut rx_cq) = raw_qp(dev, 16);
    dev.create_flow(flow_attr(
        0,
        FlowSpec::dst_mac(MAC_B),
        FlowDest::RawQp(rx.qpn()),
        None,
    ))
    .unwrap();
    let sqs: SqRef<'static> = leak(SqState::new(&*tx.sq_slots().leak()).unwrap());
    let binds: Binds = Box::leak(Box::new([CqBinding::send_only(tx.qpn, sqs)]));
    let caps = SqCaps {
        transport: Transport::Ethernet {
            max_frame: 1514,
            ip_csum: true,
        },
        ..tx.caps()
    };
    // SAFETY: the device (leaked) outlives the queues; the ring has one driver; the state is
    // bound to the CQ of its sends; frames are in the registered arena.
    let (mut sq, mut cq) = unsafe {
        (
            SendQueue::new_eth(&tx.layout, caps, 18, sqs, None).unwrap(),
            CompletionQueue::new(&tcq.layout, binds).unwrap(),
        )
    };
    let frame = udp_frame(
        MAC_B,
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        (1, 2),
        22,
        0,
    );
    mem.write(0, &frame);
    let p = sq
        .prepare_frame(&frame[..42], SendFlags::IP_CSUM, FrameLengths::IPV4_UDP)
        .unwrap();
    let one = [Sge::new(mem.addr(0), 64, mr.lkey)];
    let two = [
        Sge::new(mem.addr(0), 10, mr.lkey),
        Sge::new(mem.addr(10), 54, mr.lkey),
    ];
    let payload = Sge::new(mem.addr(42), 22, mr.lkey);
    let mut wc = [Completion::EMPTY; 8];
    MEASURING.with(|m| m.set(true));
    for i in 0..iters {
        for _ in 0..5 {
            rx.post_recv(&[(mem.addr(4096), 256, mr.lkey)]);
        }
        let batch = [
            SendWr::send(i, &two).with_flags(SendFlags::IP_CSUM),
            SendWr::send(i, &one).inline(),
        ];
        // SAFETY: entries in the registered arena, not touched by this loop.
        unsafe {
            sq.post(&SendWr::send(i, &one).with_flags(SendFlags::IP_CSUM))
                .unwrap();
            sq.post(&SendWr::send(i, &two).inline()).unwrap();
            sq.post_all(&batch).unwrap();
            sq.post_frame(&p, i, payload).unwrap();
        }
        // One signaled request retires the four before it.
        // SAFETY: as above.
        unsafe { sq.post(&SendWr::nop(i).signaled()) }.unwrap();
        dev.run_until_idle();
        assert!(cq.poll(&mut wc) == 1 && wc[0].wr_id == i && wc[0].is_success());
        let mut n = 0;
        while let Some(c) = rx_cq.poll() {
            assert_eq!(Cqe64::new_unchecked(&c).byte_cnt(), 64);
            n += 1;
        }
        assert_eq!(n, 5, "five frames");
    }
    MEASURING.with(|m| m.set(false));
    let (allocs, frees) = (
        ALLOCS.load(Ordering::Relaxed),
        FREES.load(Ordering::Relaxed),
    );
    println!("{iters} rounds of five library raw frames: {allocs} allocations, {frees} frees");
    assert_eq!((allocs, frees), (0, 0));
}

//! The direct path's striding receive queue (`zverbs_mlx5dv::StridingRq`) on the software
//! device: frames of mixed sizes steered through an RSS QP into a striding work queue, polled
//! in place, packets kept and given back out of order, fillers, WQEs posted again as their
//! strides come back and the ring wrapping many times, compressed sessions in the
//! stride-index format, timestamps, a CQ shared with a raw QP's ordinary receive queue, and an
//! ordinary work queue through the existing `RecvQueue` and poller.

mod common;
mod raw;

use std::collections::VecDeque;
use std::net::Ipv4Addr;

use common::Arena;
use common::direct::{device_with_arena, leak};
use raw::eth::*;
use zverbs_core::{Completion, PollCq, PostRecv, RecvWr, Sge, WcStatus};
use zverbs_mlx5dv::clock::ClockInfo;
use zverbs_mlx5dv::prm::mini::MiniCqeFormat;
use zverbs_mlx5dv::{
    CompletionQueue, CqBinding, CqLayout, Packet, QpLayout, RecvQueue, RqSlot, RqState,
    StrideBuffer, StrideConfig, StrideSlot, StridingRq, StridingState, WqLayout,
};
use zverbs_sim::{CqConfig, Device, FlowDest, FlowSpec, Mr, QpConfig, QpType, SimWq};

type Bindings =
    &'static [CqBinding<zverbs_mlx5dv::SqRef<'static>, zverbs_mlx5dv::RqRef<'static>>];
type Cq = CompletionQueue<Bindings>;
type Rq = StridingRq<&'static StridingState<&'static [StrideSlot]>>;

const SRC: Ipv4Addr = Ipv4Addr::new(10, 1, 1, 1);

/// A striding work queue of `wqes` WQEs of 2^`log_num` strides of 64 bytes on `cq`, ready,
/// behind a one-entry table and an RSS QP that a rule for frames to `mac` steers to.
fn striding_wq(dev: &Device, cq: u32, wqes: u32, log_num: u32, mac: [u8; 6]) -> SimWq {
    let cfg = wq_config(cq, wqes, Some(log_num));
    steered_wq(dev, cfg, FlowSpec::dst_mac(mac), Some(0x5a)).0
}

/// The direct path's queue over the software device's work queue `w`, its strides at `off`
/// of the arena.
fn direct(w: &SimWq, mem: &Arena, mr: &Mr, off: usize) -> Rq {
    let s = w.striding.unwrap();
    let cfg = StrideConfig {
        log_num_strides: s.log_num_strides,
        log_stride_size: s.log_stride_bytes,
    };
    let len = w.layout.wqe_cnt as usize * cfg.wqe_bytes() as usize;
    let slots: &'static [StrideSlot] = (0..w.layout.wqe_cnt)
        .map(|_| StrideSlot::new())
        .collect::<Vec<_>>()
        .leak();
    let state = leak(StridingState::new(slots).unwrap());
    let buffer = StrideBuffer {
        addr: std::ptr::NonNull::new(mem.ptr(off)).unwrap(),
        len,
        lkey: mr.lkey,
    };
    // SAFETY: the device and the arena are leaked, the WQ is new and ready, and only this
    // queue posts to it.
    unsafe { StridingRq::new(&w.layout, w.dbrec, cfg, buffer, state) }.unwrap()
}

/// A poller of CQ `layout` with no bindings (a CQ only a striding queue uses).
fn poller(layout: &CqLayout) -> Cq {
    // SAFETY: the device is leaked; this is the CQ's only poller.
    unsafe { CompletionQueue::new(layout, &[][..]) }.unwrap()
}

/// A small deterministic generator (xorshift), for sizes and orders.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Frames of mixed sizes (60 to 512 bytes: 1 to 8 strides of 64, a whole WQE at most) go in a
/// few at a time; the poller hands each out in place, whole and in order; some are kept over
/// later polls and given back out of order; fillers and posting again keep the 8-WQE ring
/// going through many passes, with no frame dropped for want of a WQE.
#[test]
fn packets_in_place_across_wqes_fillers_and_wraps() {
    let rounds = if cfg!(miri) { 40 } else { 1500 };
    let (dev, mem, mr) = device_with_arena(64 * 1024);
    let cq = dev.create_cq(CqConfig { cqe: 255 }).unwrap();
    let w = striding_wq(dev, cq.cqn, 16, 3, MAC_A);
    let rq = direct(&w, mem, &mr, 0);
    let mut cq = poller(&cq.layout);
    assert_eq!((rq.entries(), rq.head()), (16, 16));
    let mut g = Gen(0x2545_f491_4f6c_dd1d);
    let mut sent: VecDeque<Vec<u8>> = VecDeque::new();
    // Packets kept, with their place in the order received.
    let mut kept: Vec<(usize, Packet<'_>)> = Vec::new();
    let mut received = 0usize;
    let mut burst: [Option<Packet<'_>>; 4] = [const { None }; 4];
    for round in 0..rounds {
        for _ in 0..1 + g.below(3) {
            let len = 60 + g.below(512 - 60 + 1) as usize;
            let f = udp_frame(MAC_A, SRC, GROUP, (1, 2), len - 42, round as u8);
            dev.receive_frame(&f);
            sent.push_back(f);
        }
        dev.run_until_idle();
        loop {
            let n = rq.poll_burst(&mut cq, &mut burst);
            if n == 0 {
                break;
            }
            for slot in burst.iter_mut().take(n) {
                let p = slot.take().unwrap();
                let want = sent.pop_front().expect("a packet that was sent");
                assert_eq!(p.bytes(), &want[..], "packet {received}");
                assert_eq!(p.len(), want.len());
                assert_eq!(p.flow_tag(), 0x5a);
                assert!(
                    p.l2_ok() && p.l4_ok() && !p.l3_ok(),
                    "zero IPv4 checksum: L3 not OK"
                );
                assert!(!p.in_session());
                received += 1;
                // Keep about one in four for a while.
                if g.below(4) == 0 {
                    kept.push((received, p));
                }
            }
            // Give back a kept one, any of them, while more than two are kept, and every one
            // six packets old (a packet holds its WQE and those after it: the ring of 16
            // has room for what arrives meanwhile).
            while kept.len() > 2 {
                let i = g.below(kept.len() as u64) as usize;
                kept.swap_remove(i).1.release();
            }
            kept.retain(|(at, _)| received - at < 6);
        }
    }
    drop(kept);
    assert!(sent.is_empty(), "{} frames never came", sent.len());
    let st = dev.stats();
    assert_eq!(st.eth_no_wqe, 0, "a frame found no WQE");
    assert_eq!(st.eth_delivered as usize, received);
    assert!(st.eth_fillers > 0, "no filler in {received} packets");
    // Every WQE the device finished was posted again: passes over the ring.
    assert!(
        rq.head() > 16 * if cfg!(miri) { 2 } else { 20 },
        "head {}",
        rq.head()
    );
    assert_eq!(rq.malformed(), 0);
    assert_eq!(rq.error(), None);
}

/// A poll of plain CQEs hands out `max` packets at most, and stops there with more waiting:
/// five frames polled two at a time come as 2, 2, 1, then none.
#[test]
fn a_poll_takes_at_most_max_packets() {
    let (dev, mem, mr) = device_with_arena(16 * 1024);
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    let w = striding_wq(dev, cq.cqn, 4, 3, MAC_A);
    let rq = direct(&w, mem, &mr, 0);
    let mut cq = poller(&cq.layout);
    for i in 0..5u8 {
        dev.receive_frame(&udp_frame(MAC_A, SRC, GROUP, (1, 2), 64, i));
    }
    dev.run_until_idle();
    let mut order = Vec::new();
    for want in [2, 2, 1, 0] {
        // The first payload byte is the frame's seed.
        let n = rq.poll_packets(&mut cq, 2, |p| order.push(p.bytes()[42]));
        assert_eq!(n, want);
    }
    assert_eq!(order, [0, 1, 2, 3, 4]);
}

/// A packet kept holds its WQE, and the WQEs after it, from being posted again (they are
/// posted in ring order); given back, all of them go at once.
#[test]
fn a_kept_packet_holds_its_wqe_and_the_ones_after() {
    let (dev, mem, mr) = device_with_arena(16 * 1024);
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    let w = striding_wq(dev, cq.cqn, 4, 3, MAC_A);
    let rq = direct(&w, mem, &mr, 0);
    let mut cq = poller(&cq.layout);
    // Three whole-WQE frames (512 bytes: 8 strides each).
    let frames: Vec<Vec<u8>> = (0..3u8)
        .map(|i| udp_frame(MAC_A, SRC, GROUP, (1, 2), 512 - 42, i))
        .collect();
    for f in &frames {
        dev.receive_frame(f);
    }
    dev.run_until_idle();
    let mut got = Vec::new();
    assert_eq!(rq.poll_packets(&mut cq, 16, |p| got.push(p)), 3);
    assert_eq!(
        got.iter().map(|p| p.wqe_index()).collect::<Vec<_>>(),
        [0, 1, 2]
    );
    let third = got.pop().unwrap();
    let second = got.pop().unwrap();
    let first = got.pop().unwrap();
    // WQE 1 and 2 are done first: nothing posted, WQE 0 is still out.
    drop(third);
    drop(second);
    assert_eq!(rq.head(), 4);
    // SAFETY: word 0 of the WQ's doorbell record, written by the queue (now idle).
    assert_eq!(u32::from_be(unsafe { w.dbrec.as_ptr().read_volatile() }), 4);
    // WQE 0 back: all three posted again.
    first.release();
    assert_eq!(rq.head(), 7);
    // SAFETY: word 0 of the WQ's doorbell record, written by the queue (now idle).
    assert_eq!(u32::from_be(unsafe { w.dbrec.as_ptr().read_volatile() }), 7);
}

/// On a CQ that compresses in the stride-index format, every mini-CQE is a packet (and a
/// filler's strides are given back): polled a few at a time, so polls end inside sessions
/// and resume, with the title's timestamp and flow tag on each packet of a session.
#[test]
fn compressed_sessions_are_packets_one_by_one() {
    let (dev, mem, mr) = device_with_arena(64 * 1024);
    let cq = dev.create_cq(CqConfig { cqe: 255 }).unwrap();
    dev.enable_cq_compression(cq.cqn, MiniCqeFormat::CsumStridx)
        .unwrap();
    dev.enable_cq_timestamps(cq.cqn).unwrap();
    let w = striding_wq(dev, cq.cqn, 8, 5, MAC_A);
    let rq = direct(&w, mem, &mr, 0);
    let mut cq = poller(&cq.layout);
    let mut g = Gen(77);
    let mut sent = VecDeque::new();
    let mut received = 0;
    let rounds = if cfg!(miri) { 6 } else { 60 };
    for round in 0..rounds {
        // Up to 40 frames of 60..130 bytes (1 to 3 strides of a 32-stride WQE): sessions of
        // many packets, most with more than one array of mini-CQEs.
        for _ in 0..1 + g.below(40) {
            let len = 60 + g.below(71) as usize;
            let f = udp_frame(MAC_A, SRC, GROUP, (1, 2), len - 42, round as u8);
            dev.receive_frame(&f);
            sent.push_back(f);
        }
        dev.run_until_idle();
        loop {
            // Below and above a mini-CQE array's 8 entries: a poll stops at `max` or an empty
            // CQ, never at an array's end.
            let max = 1 + g.below(20) as usize;
            let waiting = sent.len();
            let mut ts = Vec::new();
            let n = rq.poll_packets(&mut cq, max, |p| {
                let want = sent.pop_front().unwrap();
                assert_eq!(p.bytes(), &want[..]);
                assert_eq!(p.flow_tag(), 0x5a);
                if p.in_session() {
                    ts.push(p.timestamp());
                }
            });
            assert_eq!(n, max.min(waiting));
            received += n;
            if n == 0 {
                break;
            }
            for t in ts {
                assert!(t <= dev.clock().ticks());
            }
        }
    }
    assert!(sent.is_empty());
    let st = dev.stats();
    assert!(st.compressed_sessions > 0);
    assert_eq!(st.eth_no_wqe, 0);
    assert_eq!(st.eth_delivered as usize, received);
    assert_eq!(rq.malformed(), 0);
    // An ordinary poll of the same CQ finds nothing left.
    assert_eq!(cq.poll(&mut [Completion::EMPTY; 4]), 0);
}

/// Per-packet timestamps: free-running ticks of the device clock, taken between the frames'
/// arrival and the poll; and the checksum bits of each packet (every other one with a right
/// IPv4 header checksum).
#[test]
fn packets_carry_their_timestamps() {
    let (dev, mem, mr) = device_with_arena(16 * 1024);
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    dev.enable_cq_timestamps(cq.cqn).unwrap();
    let w = striding_wq(dev, cq.cqn, 4, 3, MAC_A);
    let rq = direct(&w, mem, &mr, 0);
    let mut cq = poller(&cq.layout);
    let before = dev.clock().ticks();
    for i in 0..5u8 {
        let mut f = udp_frame(MAC_A, SRC, GROUP, (1, 2), 100, i);
        if i % 2 == 1 {
            // A right IPv4 header checksum (the UDP one is 0: none).
            let c = !fold(sum(&f[14..34]));
            f[24..26].copy_from_slice(&c.to_be_bytes());
        }
        dev.receive_frame(&f);
    }
    dev.run_until_idle();
    let after = dev.clock().ticks();
    let mut last = before;
    let mut k = 0;
    let n = rq.poll_packets(&mut cq, 8, |p| {
        assert!(p.timestamp() >= last && p.timestamp() <= after);
        last = p.timestamp();
        assert_eq!(
            (p.l3_ok(), p.l4_ok(), p.csum_ok()),
            (k % 2 == 1, true, k % 2 == 1),
            "{k}"
        );
        k += 1;
    });
    assert_eq!(n, 5);
}

/// A CQ in real-time mode: each packet's timestamp, converted with `ClockInfo::REAL_TIME`
/// (seconds in the high half, nanoseconds in the low), is the wall-clock time it came.
#[test]
#[cfg_attr(
    miri,
    ignore = "reads CLOCK_REALTIME, which Miri's isolation withholds"
)]
fn real_time_timestamps_convert_to_wall_clock_nanoseconds() {
    let (dev, mem, mr) = device_with_arena(16 * 1024);
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    dev.enable_cq_real_time_timestamps(cq.cqn).unwrap();
    let w = striding_wq(dev, cq.cqn, 4, 3, MAC_A);
    let rq = direct(&w, mem, &mr, 0);
    let mut cq = poller(&cq.layout);
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
    };
    let before = now();
    for i in 0..3u8 {
        dev.receive_frame(&udp_frame(MAC_A, SRC, GROUP, (1, 2), 100, i));
    }
    dev.run_until_idle();
    let after = now();
    let n = rq.poll_packets(&mut cq, 8, |p| {
        let ns = ClockInfo::REAL_TIME.ts_to_ns(p.timestamp());
        assert!(
            before <= ns && ns <= after,
            "{ns} not in {before}..={after} (raw {:#x})",
            p.timestamp()
        );
    });
    assert_eq!(n, 3);
}

/// An ordinary (one frame per WQE) work queue through the existing `RecvQueue` and poller:
/// its doorbell record is one word, and its CQEs name it by user index (the WQN here), the
/// rule's flow tag standing where a queue pair's CQE has its number.
#[test]
fn an_ordinary_work_queue_through_the_receive_queue_and_poller() {
    let (dev, mem, mr) = device_with_arena(16 * 1024);
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    let (w, _) = steered_wq(dev, wq_config(cq.cqn, 8, None), FlowSpec::ANY, Some(0x77));
    let layout = QpLayout {
        qpn: w.wqn,
        dbrec: w.dbrec,
        sq: WqLayout {
            buf: w.layout.buf,
            wqe_cnt: 0,
            stride: 64,
        },
        rq: w.layout,
        bf: zverbs_mlx5dv::BfLayout {
            reg: w.layout.buf,
            size: 0,
        },
    };
    let slots: &'static [RqSlot] = (0..w.layout.wqe_cnt)
        .map(|_| RqSlot::new())
        .collect::<Vec<_>>()
        .leak();
    let state = leak(RqState::new(slots).unwrap());
    // SAFETY: the device is leaked; only this queue posts to the WQ, which is new.
    let mut rq = unsafe { RecvQueue::new(&layout, state) }.unwrap();
    let bindings: Bindings = leak([CqBinding::recv_only(w.wqn, state)]);
    // SAFETY: as above; the binding names the WQ by its user index.
    let mut cq: Cq = unsafe { CompletionQueue::new(&cq.layout, bindings) }.unwrap();
    let rounds = if cfg!(miri) { 12 } else { 100 };
    for k in 0..rounds {
        let sge = [Sge::new(mem.addr((k % 8) * 1024), 1024, mr.lkey)];
        // SAFETY: the arena outlives the receive.
        unsafe { rq.post(&RecvWr::new(k as u64, &sge)) }.unwrap();
        let f = udp_frame(MAC_B, SRC, GROUP, (3, 4), 100 + k, k as u8);
        dev.receive_frame(&f);
        dev.run_until_idle();
        let mut wc = [Completion::EMPTY; 2];
        assert_eq!(cq.poll(&mut wc), 1, "frame {k}");
        assert_eq!(wc[0].status, WcStatus::Success);
        assert_eq!(wc[0].wr_id, k as u64);
        assert_eq!(wc[0].byte_len as usize, f.len());
        assert_eq!(wc[0].qp_num, w.wqn);
        assert_eq!(mem.read((k % 8) * 1024, f.len()), f);
    }
    assert_eq!(dev.stats().eth_no_wqe, 0);
}

/// One CQ for a raw packet QP's ordinary receive queue and a striding work queue: the
/// ordinary poll takes the QP's completions and stops at the striding queue's CQEs, the
/// packet poll takes those and stops at the QP's; alternating, both see every frame, in
/// order.
#[test]
fn a_cq_shared_with_a_raw_queue_pair() {
    let (dev, mem, mr) = device_with_arena(64 * 1024);
    let cq = dev.create_cq(CqConfig { cqe: 255 }).unwrap();
    let w = striding_wq(dev, cq.cqn, 8, 3, MAC_A);
    let qp = dev
        .create_qp_ext(
            QpConfig {
                send_cq: cq.cqn,
                recv_cq: cq.cqn,
                max_send_wr: 4,
                max_send_sge: 1,
                max_inline_data: 0,
                max_recv_wr: 16,
                max_recv_sge: 1,
                ..QpConfig::default()
            },
            QpType::RawPacket,
            None,
        )
        .unwrap();
    dev.ready_raw(qp.qpn).unwrap();
    let to_qp = FlowDest::RawQp(qp.qpn);
    dev.create_flow(flow_attr(0, FlowSpec::dst_mac(MAC_B), to_qp, None))
        .unwrap();
    let mut srq = direct(&w, mem, &mr, 0);
    srq.set_user_index(Some(w.wqn));
    let slots: &'static [RqSlot] = (0..qp.layout.rq.wqe_cnt)
        .map(|_| RqSlot::new())
        .collect::<Vec<_>>()
        .leak();
    let state = leak(RqState::new(slots).unwrap());
    // SAFETY: the device is leaked; only this queue posts to the QP's receive queue.
    let mut rq = unsafe { RecvQueue::new(&qp.layout, state) }.unwrap();
    let bindings: Bindings = leak([CqBinding::recv_only(qp.qpn, state)]);
    // SAFETY: as above.
    let mut cq: Cq = unsafe { CompletionQueue::new(&cq.layout, bindings) }.unwrap();
    cq.set_striding_user_index(Some(w.wqn));
    let base = 32 * 1024;
    let mut g = Gen(99);
    let (mut to_a, mut to_b) = (VecDeque::new(), VecDeque::new());
    let (mut posted, mut done_b) = (0u64, 0u64);
    let rounds = if cfg!(miri) { 10 } else { 300 };
    for round in 0..rounds {
        while posted - done_b < 16 {
            let at = base + (posted as usize % 16) * 1024;
            let sge = [Sge::new(mem.addr(at), 1024, mr.lkey)];
            // SAFETY: the arena outlives the receive.
            unsafe { rq.post(&RecvWr::new(posted, &sge)) }.unwrap();
            posted += 1;
        }
        for _ in 0..1 + g.below(3) {
            let mac = if g.below(2) == 0 { MAC_A } else { MAC_B };
            let f = udp_frame(
                mac,
                SRC,
                GROUP,
                (1, 2),
                30 + g.below(400) as usize,
                round as u8,
            );
            dev.receive_frame(&f);
            if mac == MAC_A {
                to_a.push_back(f);
            } else {
                to_b.push_back(f);
            }
        }
        dev.run_until_idle();
        loop {
            let mut wc = [Completion::EMPTY; 4];
            let n = cq.poll(&mut wc);
            for c in &wc[..n] {
                assert_eq!(c.status, WcStatus::Success);
                let f = to_b.pop_front().unwrap();
                assert_eq!(c.byte_len as usize, f.len());
                assert_eq!(c.wr_id, done_b);
                let at = base + (c.wr_id as usize % 16) * 1024;
                assert_eq!(mem.read(at, f.len()), f);
                done_b += 1;
            }
            let m = srq.poll_packets(&mut cq, 4, |p| {
                assert_eq!(p.bytes(), &to_a.pop_front().unwrap()[..]);
            });
            if n == 0 && m == 0 {
                break;
            }
        }
    }
    assert!(to_a.is_empty() && to_b.is_empty());
    assert_eq!(dev.stats().eth_no_wqe, 0);
}

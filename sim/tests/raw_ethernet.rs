//! Raw Ethernet on the software device: raw packet QPs send frames (Ethernet segment, inlined
//! header bytes, gathered data, checksum offload) out of the port, which loops them back or
//! hands them to an attached port; flow rules steer arriving frames to raw QPs or RSS QPs;
//! ordinary and striding receive queues take them, and their CQEs are checked byte by byte,
//! fillers, timestamps and compressed sessions with stride indexes included.
//!
//! WQEs and receives are written by hand (the direct backend has no raw send yet), the CQEs
//! read raw. Checksums are verified with a sum written here, not the device's.

mod common;
mod raw;

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

use common::Arena;
use common::direct::device_with_arena;
use raw::eth::*;
use raw::{RawCq, RawQp};
use zverbs_mlx5dv::prm::cqe::Cqe64;
use zverbs_mlx5dv::prm::mini::MiniCqeFormat;
use zverbs_mlx5dv::prm::wqe::CtrlSeg;
use zverbs_mlx5dv::prm::{CQ_SET_CI, opcode};
use zverbs_sim::{
    CqConfig, DEFAULT_RSS_KEY, Device, EthPort, FlowDest, FlowSpec, L4Proto, Mr, RxHashFields,
    SimWq, vendor,
};

/// Sends `frame` from `mem` at `off`: the first `inl` bytes inlined, the rest by one data
/// segment.
fn send(qp: &mut RawQp, mem: &Arena, mr: &Mr, off: usize, frame: &[u8], inl: usize, cs: u8) {
    mem.write(off, frame);
    let rest = (mem.addr(off + inl), (frame.len() - inl) as u32, mr.lkey);
    post_frame(qp, &frame[..inl], Body::Sges(&[rest]), cs, 0);
}

/// Every frame the attached port transmits.
#[derive(Default)]
struct Capture(Mutex<Vec<Vec<u8>>>);

impl EthPort for Capture {
    fn transmit(&self, frame: &[u8]) {
        self.0.lock().unwrap().push(frame.to_vec());
    }
}

/// A 64-byte UDP frame sent with checksum offload and 18 inlined header bytes loops back
/// into the raw QP a destination-MAC rule names: every byte of both CQEs, the frame with
/// checksums that an independent sum accepts (the research brief's vector: IPv4 `3fb6`,
/// UDP `a7ea`), and the CQE's raw checksum.
#[test]
fn a_frame_loops_back_into_an_ordinary_receive() {
    let (dev, mem, mr) = device_with_arena(8192);
    let (mut qp, mut cq) = raw_qp(dev, 4);
    let multicast = [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03];
    dev.create_flow(flow_attr(
        0,
        FlowSpec::dst_mac(multicast),
        FlowDest::RawQp(qp.qpn()),
        None,
    ))
    .unwrap();
    qp.post_recv(&[(mem.addr(4096), 256, mr.lkey)]);
    let frame = udp_frame(
        multicast,
        Ipv4Addr::new(10, 0, 0, 1),
        GROUP,
        (30000, 31000),
        22,
        0,
    );
    assert_eq!(frame.len(), 64);
    send(&mut qp, mem, &mr, 0, &frame, 18, 0xc0);
    dev.run_until_idle();

    let (s, r) = send_and_recv(&mut cq);
    let v = Cqe64::new_unchecked(&s);
    assert_eq!((v.op_own() >> 4, v.wqe_counter()), (0, 0), "REQ for WQE 0");
    assert_eq!(v.sop_drop_qpn(), (u32::from(opcode::SEND) << 24) | qp.qpn());

    let got = mem.read(4096, 64);
    assert_eq!(
        (&got[24..26], &got[40..42]),
        (&[0x3f, 0xb6][..], &[0xa7, 0xea][..])
    );
    assert_eq!(checksums_ok(&got), (true, true));
    let mut want = frame.clone();
    want[24..26].copy_from_slice(&[0x3f, 0xb6]);
    want[40..42].copy_from_slice(&[0xa7, 0xea]);
    assert_eq!(got, want, "the frame as sent, checksums filled in");

    let mut cqe = [0u8; 64];
    cqe[28] = 0x07; // L2, L3 and L4 OK
    cqe[29] = 0x28; // IPv4, UDP
    cqe[20..22].copy_from_slice(&fold(sum(&got[14..])).to_be_bytes());
    cqe[32..36].copy_from_slice(&qp.qpn().to_be_bytes());
    cqe[44..48].copy_from_slice(&64u32.to_be_bytes());
    cqe[63] = 0x20; // RESP_SEND, owner 0
    assert_eq!(r, cqe, "every byte of the receive CQE");
    let st = dev.stats();
    assert_eq!((st.eth_sent, st.eth_arrived, st.eth_delivered), (1, 1, 1));

    // An attached port gets the frame and loopback is off; turned on, both.
    let cap = Arc::new(Capture::default());
    dev.attach_port(Some(cap.clone()));
    qp.post_recv(&[(mem.addr(4096), 256, mr.lkey)]);
    send(&mut qp, mem, &mr, 0, &frame, 0, 0xc0);
    dev.run_until_idle();
    assert_eq!(cap.0.lock().unwrap().as_slice(), &[want.clone()]);
    assert_eq!(
        dev.stats().eth_arrived,
        1,
        "no loopback with a port attached"
    );
    dev.set_loopback(true);
    send(&mut qp, mem, &mr, 0, &frame, 0, 0xc0);
    dev.run_until_idle();
    assert_eq!(cap.0.lock().unwrap().len(), 2);
    assert_eq!(dev.stats().eth_delivered, 2);
}

/// Inlined headers of 0, 2, 18 and 42 bytes, gathered data and inline data, at every position
/// of a small ring (so the inlined bytes cross its end): each frame arrives whole.
#[test]
fn inline_headers_of_any_size_cross_the_ring_end() {
    let (dev, mem, mr) = device_with_arena(16384);
    let (mut qp, mut cq) = raw_qp(dev, 16);
    dev.create_flow(flow_attr(3, FlowSpec::ANY, FlowDest::RawQp(qp.qpn()), None))
        .unwrap();
    let mut n = 0;
    for round in 0..3u8 {
        for (k, inl) in [0usize, 2, 18, 42].into_iter().enumerate() {
            let frame = udp_frame(MAC_A, Ipv4Addr::LOCALHOST, GROUP, (1, 2), 40 + k, round);
            let rbuf = 8192 + (n % 8) * 256;
            qp.post_recv(&[(mem.addr(rbuf), 256, mr.lkey)]);
            if k == 3 && round == 1 {
                // The rest inline rather than gathered.
                post_frame(&mut qp, &frame[..inl], Body::Inline(&frame[inl..]), 0, 0);
            } else {
                send(&mut qp, mem, &mr, 0, &frame, inl, 0);
            }
            dev.run_until_idle();
            let (s, r) = send_and_recv(&mut cq);
            assert_eq!(s[63] >> 4, 0, "round {round}, {inl} inlined: {s:02x?}");
            assert_eq!(r[63] >> 4, 2, "round {round}, {inl} inlined: {r:02x?}");
            assert_eq!(be32(&r, 44) as usize, frame.len());
            assert_eq!(mem.read(rbuf, frame.len()), frame, "{inl} bytes inlined");
            n += 1;
        }
    }
    assert!(qp.sq_pi > qp.qp.layout.sq.wqe_cnt, "the ring wrapped");
}

/// Each malformed WQE completes with the error a ConnectX gives and sends nothing: a
/// non-zero `mss` without TSO and an inlined header running past `ds` are local QP
/// operation errors (a WQE the device cannot parse), a frame under 14 bytes or over the port
/// MTU (with a VLAN tag, 4 more) a local length error (a message the port cannot carry).
#[test]
fn malformed_wqes_fail_and_send_nothing() {
    let (dev, mem, mr) = device_with_arena(8192);
    dev.set_port_mtu(100).unwrap();
    let cap = Arc::new(Capture::default());
    dev.attach_port(Some(cap.clone()));
    let frame = udp_frame(MAC_A, Ipv4Addr::LOCALHOST, GROUP, (1, 2), 72, 0);
    assert_eq!(frame.len(), 114, "100 bytes of IP");
    let mut vlan = frame.clone();
    vlan.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
    mem.write(0, &frame);
    mem.write(1024, &vlan);
    let whole = |off: usize, len: usize| [(mem.addr(off), len as u32, mr.lkey)];
    type Post<'a> = Box<dyn Fn(&mut RawQp) + 'a>;
    /// What the case posts, and the (syndrome, vendor syndrome) it fails with, if it fails.
    type Case<'a> = (&'static str, Post<'a>, Option<(u8, u8)>);
    let cases: [Case<'_>; 6] = [
        (
            "mss without TSO",
            Box::new(|q| {
                post_frame(q, &[], Body::Sges(&whole(0, 114)), 0, 1460);
            }),
            Some((0x02, vendor::RAW_MSS)),
        ),
        (
            "an inlined header past ds",
            Box::new(|q| {
                let index = q.sq_pi as u16;
                let qpn = q.qpn();
                let mut w = [0u8; 64];
                w[16 + 13] = 40; // 40 bytes inlined: three segments, where ds leaves one
                CtrlSeg::new_unchecked(&mut w[..16]).set(index, opcode::SEND, 0, qpn, 8, 2, 0);
                q.write_blocks(&w);
            }),
            Some((0x02, vendor::RAW_INLINE_HDR)),
        ),
        (
            "13 bytes",
            Box::new(|q| {
                post_frame(q, &frame[..13], Body::Inline(&[]), 0, 0);
            }),
            Some((0x01, vendor::RAW_FRAME_LEN)),
        ),
        (
            "one byte over the MTU",
            Box::new(|q| {
                mem.write(2048, &[0; 1]);
                let sg = [whole(0, 114)[0], (mem.addr(2048), 1, mr.lkey)];
                post_frame(q, &[], Body::Sges(&sg), 0, 0);
            }),
            Some((0x01, vendor::RAW_FRAME_LEN)),
        ),
        (
            "the MTU with a VLAN tag",
            Box::new(|q| {
                post_frame(q, &[], Body::Sges(&whole(1024, 118)), 0, 0);
            }),
            None,
        ),
        (
            "the MTU",
            Box::new(|q| {
                post_frame(q, &frame[..18], Body::Sges(&whole(18, 96)), 0, 0);
            }),
            None,
        ),
    ];
    for (what, post, err) in cases {
        let (mut qp, mut cq) = raw_qp(dev, 1);
        let before = cap.0.lock().unwrap().len();
        post(&mut qp);
        dev.run_until_idle();
        let c = cq.poll().expect(what);
        let sent = cap.0.lock().unwrap().len() - before;
        match err {
            Some((syndrome, vendor)) => {
                assert_eq!((c[63] >> 4, c[55], c[54]), (13, syndrome, vendor), "{what}");
                assert_eq!(sent, 0, "{what}: nothing sent");
                assert_eq!(
                    dev.qp_status(qp.qpn()).unwrap(),
                    zverbs_sim::QpStatus::Error
                );
            }
            None => assert_eq!((c[63] >> 4, sent), (0, 1), "{what}"),
        }
    }
}

/// The receive CQE's `srqn_uidx`, counter and byte count, for locating where a frame went.
fn who(c: &[u8; 64]) -> (u32, u16, u32) {
    (be32(c, 32) & 0xff_ffff, be16(c, 60), be32(c, 44))
}

/// Rules are looked at by priority (lower first), the first that matches decides, identical
/// rules share the frame, a multicast-only rule sits below every regular priority, a removed
/// rule matches no more, and frames no rule takes or no receive waits for are dropped and
/// counted.
#[test]
fn flow_rules_by_priority() {
    let (dev, mem, mr) = device_with_arena(8192);
    let (mut a, mut cqa) = raw_qp(dev, 16);
    let (mut b, mut cqb) = raw_qp(dev, 16);
    for i in 0..8 {
        a.post_recv(&[(mem.addr(i * 256), 256, mr.lkey)]);
        b.post_recv(&[(mem.addr(2048 + i * 256), 256, mr.lkey)]);
    }
    let to = |q: &RawQp| FlowDest::RawQp(q.qpn());
    let by_mac = dev
        .create_flow(flow_attr(1, FlowSpec::dst_mac(MAC_A), to(&a), None))
        .unwrap();
    let host = Ipv4Addr::new(10, 0, 0, 9);
    let by_port = dev
        .create_flow(flow_attr(0, FlowSpec::udp_dst(host, 5000), to(&b), None))
        .unwrap();
    let src = Ipv4Addr::new(10, 0, 0, 1);
    let step = |f: &[u8]| {
        dev.receive_frame(f);
        dev.run_until_idle();
    };
    // Priority 0 beats priority 1.
    step(&udp_frame(MAC_A, src, host, (9, 5000), 10, 0));
    assert!(cqa.poll().is_none());
    assert_eq!(who(&cqb.poll().unwrap()), (b.qpn(), 0, 52));
    // Another port: only the MAC rule matches.
    step(&udp_frame(MAC_A, src, host, (9, 5001), 10, 0));
    assert_eq!(who(&cqa.poll().unwrap()), (a.qpn(), 0, 52));
    // Another MAC and port: no rule.
    step(&udp_frame(MAC_B, src, host, (9, 5001), 10, 0));
    assert_eq!(dev.stats().eth_no_rule, 1);
    // The port rule removed: the MAC rule takes it.
    dev.destroy_flow(by_port).unwrap();
    step(&udp_frame(MAC_A, src, host, (9, 5000), 10, 0));
    assert_eq!(who(&cqa.poll().unwrap()), (a.qpn(), 1, 52));
    assert!(cqb.poll().is_none());
    // The same match for B at the same priority: each QP gets a copy.
    let same = dev
        .create_flow(flow_attr(1, FlowSpec::dst_mac(MAC_A), to(&b), None))
        .unwrap();
    step(&udp_frame(MAC_A, src, host, (9, 1), 10, 7));
    assert_eq!(who(&cqa.poll().unwrap()), (a.qpn(), 2, 52));
    assert_eq!(who(&cqb.poll().unwrap()), (b.qpn(), 1, 52));
    assert_eq!(mem.read(2 * 256, 52), mem.read(2048 + 256, 52));
    dev.destroy_flow(same).unwrap();
    dev.destroy_flow(by_mac).unwrap();
    // A multicast-only rule of priority 0 comes after a catch-all of priority 15.
    let five = FlowSpec::five_tuple(L4Proto::Udp, (src, 9), (GROUP, 7000));
    dev.create_flow(flow_attr(0, five, to(&b), None)).unwrap();
    let any = dev
        .create_flow(flow_attr(15, FlowSpec::ANY, to(&a), None))
        .unwrap();
    let mc = udp_frame([1, 0, 0x5e, 1, 2, 3], src, GROUP, (9, 7000), 10, 0);
    step(&mc);
    assert_eq!(who(&cqa.poll().unwrap()).0, a.qpn());
    dev.destroy_flow(any).unwrap();
    step(&mc);
    assert_eq!(who(&cqb.poll().unwrap()).0, b.qpn());
    // The 5-tuple: another source port does not match.
    step(&udp_frame(
        [1, 0, 0x5e, 1, 2, 3],
        src,
        GROUP,
        (8, 7000),
        10,
        0,
    ));
    assert_eq!(dev.stats().eth_no_rule, 2);
    // No receive left at B: dropped and counted.
    let before = dev.stats().eth_no_wqe;
    for _ in 0..8 {
        step(&mc);
    }
    assert_eq!(
        dev.stats().eth_no_wqe - before,
        3,
        "B had five receives left"
    );
    // Refused rules.
    let bad = |priority, spec, dest| dev.create_flow(flow_attr(priority, spec, dest, None));
    assert!(bad(16, FlowSpec::ANY, to(&a)).is_err(), "priority above 15");
    let port_alone = FlowSpec {
        dst_port: Some(1),
        ..FlowSpec::ANY
    };
    assert!(
        bad(0, port_alone, to(&a)).is_err(),
        "a port without its transport"
    );
    assert!(bad(0, FlowSpec::ANY, FlowDest::Rss(999)).is_err());
    // A QP a rule steers to is not destroyed (its number could go to a new QP).
    let rule = dev
        .create_flow(flow_attr(2, FlowSpec::dst_mac(MAC_B), to(&a), None))
        .unwrap();
    assert!(dev.destroy_qp(a.qpn()).is_err(), "a rule names it");
    dev.destroy_flow(rule).unwrap();
    dev.destroy_qp(a.qpn()).unwrap();
    assert!(dev.destroy_flow(rule).is_err(), "gone already");
}

/// An RSS QP spreads flows over the receive work queues of its indirection table by the
/// Toeplitz hash of the fields it selects; the CQE carries the hash and its type, and each
/// work queue's completions its own WQN and counter.
#[test]
fn rss_spreads_flows_by_hash() {
    let (dev, mem, mr) = device_with_arena(65536);
    let cq = dev.create_cq(CqConfig { cqe: 255 }).unwrap();
    let mut wqs = Vec::new();
    for _ in 0..4 {
        wqs.push(dev.create_wq(wq_config(cq.cqn, 32, None)).unwrap());
    }
    let wqns: Vec<u32> = wqs.iter().map(|w| w.wqn).collect();
    let fields = RxHashFields::SRC_IPV4
        | RxHashFields::DST_IPV4
        | RxHashFields::SRC_PORT_UDP
        | RxHashFields::DST_PORT_UDP;
    let (rss, table) = rss_qp(dev, &wqns, fields);
    dev.create_flow(flow_attr(0, FlowSpec::ANY, FlowDest::Rss(rss), None))
        .unwrap();
    // A WQ in RESET takes nothing.
    let src = Ipv4Addr::new(192, 168, 1, 1);
    dev.receive_frame(&udp_frame(MAC_A, src, GROUP, (1, 2), 8, 0));
    assert_eq!(dev.stats().eth_no_wqe, 1);
    let mut posted = [0u16; 4];
    for (i, w) in wqs.iter().enumerate() {
        dev.ready_wq(w.wqn).unwrap();
        for k in 0..32 {
            post_wq(w, k, &[(mem.addr((i * 32 + k) * 128), 128, mr.lkey)]);
        }
        posted[i] = 32;
    }
    let mut cq = RawCq::new(cq);
    let mut seen = [0u16; 4];
    for sport in 0..64u16 {
        let f = udp_frame(MAC_A, src, GROUP, (40000 + sport, 7000), 8, sport as u8);
        dev.receive_frame(&f);
        dev.run_until_idle();
        let mut input = Vec::new();
        input.extend_from_slice(&src.octets());
        input.extend_from_slice(&GROUP.octets());
        input.extend_from_slice(&(40000 + sport).to_be_bytes());
        input.extend_from_slice(&7000u16.to_be_bytes());
        let hash = zverbs_sim::steering::toeplitz(&DEFAULT_RSS_KEY, &input);
        let i = hash as usize & 3;
        let c = cq.poll().expect("a receive CQE");
        assert_eq!(
            (be32(&c, 12), c[16]),
            (hash, 0x84),
            "hash and type IPv4 + UDP"
        );
        assert_eq!(who(&c), (wqs[i].wqn, seen[i], f.len() as u32));
        let off = (i * 32 + usize::from(seen[i])) * 128;
        assert_eq!(mem.read(off, f.len()), f);
        seen[i] += 1;
    }
    assert!(seen.iter().all(|&n| n > 4), "spread: {seen:?}");
    assert!(seen.iter().zip(posted).all(|(s, p)| *s <= p));
    assert!(dev.destroy_wq(wqs[0].wqn).is_err(), "in use by the table");
    assert!(
        dev.destroy_rwq_ind_table(table).is_err(),
        "in use by the RSS QP"
    );
}

/// A striding work queue (64-byte strides, 8 per WQE) behind a one-entry table, on `cq`.
fn striding_rig(dev: &Device, cq: u32) -> (SimWq, u32) {
    let (w, rss) = steered_wq(dev, wq_config(cq, 4, Some(3)), FlowSpec::ANY, None);
    assert_eq!((w.layout.stride, w.layout.wqe_cnt), (32, 4));
    (w, rss)
}

/// A striding queue places frames in consecutive strides of its WQE: one CQE each with the
/// WQE index (`wqe_id`), the stride index (`wqe_counter`) and the consumed strides with the
/// length (`byte_cnt`); a frame that does not fit the strides left gets a filler CQE
/// consuming them and goes to stride 0 of the next WQE; a frame longer than a whole WQE and
/// one with no WQE left are dropped. Timestamps from the free-running counter.
#[test]
fn striding_queue_cqes_and_fillers() {
    let (dev, mem, mr) = device_with_arena(8192);
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    dev.enable_cq_timestamps(cq.cqn).unwrap();
    let (w, _) = striding_rig(dev, cq.cqn);
    post_wq(&w, 0, &[(mem.addr(0), 512, mr.lkey)]);
    post_wq(&w, 1, &[(mem.addr(512), 512, mr.lkey)]);
    let mut cq = RawCq::new(cq);
    let src = Ipv4Addr::new(10, 1, 1, 1);
    // Frame lengths 100 (2 strides), 200 (4), 150 (3: only 2 left, so a filler), 64 (1), 600
    // (more than a WQE), 300 (5: 4 left in WQE 1, a filler, and no WQE 2).
    let lens = [100usize, 200, 150, 64, 600, 300];
    let frames: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| udp_frame(MAC_A, src, GROUP, (1, 2), l - 42, i as u8 * 16))
        .collect();
    for f in &frames {
        dev.receive_frame(f);
    }
    dev.run_until_idle();
    // (wqe_id, stride index, byte_cnt) of each CQE, in order.
    let filler = 1u32 << 31;
    let want = [
        (0u16, 0u16, (2 << 16) | 100),
        (0, 2, (4 << 16) | 200),
        (0, 6, filler | (2 << 16)),
        (1, 0, (3 << 16) | 150),
        (1, 3, (1 << 16) | 64),
        (1, 4, filler | (4 << 16)),
    ];
    let mut last = 0;
    for (k, &(wqe_id, stride, bc)) in want.iter().enumerate() {
        let c = cq.poll().unwrap_or_else(|| panic!("CQE {k}"));
        assert_eq!(
            (be16(&c, 2), be16(&c, 60), be32(&c, 44)),
            (wqe_id, stride, bc),
            "CQE {k}"
        );
        assert_eq!(c[63] >> 4, 2, "RESP_SEND");
        assert_eq!(be32(&c, 32), w.wqn);
        let ts = u64::from_be_bytes(c[48..56].try_into().unwrap());
        assert!(
            ts >= last && ts <= dev.clock().ticks(),
            "CQE {k}: the counter, {ts}"
        );
        last = ts;
        if bc & filler == 0 {
            // Sent with a zero IPv4 header checksum (wrong) and a zero UDP checksum (none).
            assert_eq!(c[28], 0x05, "L2 and L4 OK, L3 not");
        }
    }
    assert!(cq.poll().is_none());
    assert_eq!(mem.read(0, 100), frames[0]);
    assert_eq!(mem.read(2 * 64, 200), frames[1]);
    assert_eq!(mem.read(512, 150), frames[2]);
    assert_eq!(mem.read(512 + 3 * 64, 64), frames[3]);
    let st = dev.stats();
    assert_eq!((st.eth_fillers, st.eth_too_long, st.eth_no_wqe), (2, 1, 1));
    assert_eq!(st.eth_delivered, 4);
}

/// On a compressing CQ in the stride-index format, the completions of a striding queue come
/// as one session per WQE: the title with `wqe_id`, the first stride index and the count, each
/// mini-CQE with its raw checksum, stride index and striding byte count (a filler's too).
#[test]
fn compressed_sessions_carry_stride_indexes() {
    let (dev, mem, mr) = device_with_arena(8192);
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    dev.enable_cq_compression(cq.cqn, MiniCqeFormat::CsumStridx)
        .unwrap();
    let layout = cq.layout;
    let (w, _) = striding_rig(dev, cq.cqn);
    post_wq(&w, 0, &[(mem.addr(0), 512, mr.lkey)]);
    post_wq(&w, 1, &[(mem.addr(512), 512, mr.lkey)]);
    let src = Ipv4Addr::new(10, 1, 1, 1);
    // WQE 0: 70 (2 strides), 64 (1), 130 (3), then 150 (3) does not fit the 2 left: a filler;
    // WQE 1: 150, 64.
    let lens = [70usize, 64, 130, 150, 64];
    let frames: Vec<Vec<u8>> = lens
        .iter()
        .enumerate()
        .map(|(i, &l)| udp_frame(MAC_A, src, GROUP, (1, 2), l - 42, i as u8 * 3))
        .collect();
    for f in &frames {
        dev.receive_frame(f);
    }
    dev.run_until_idle();
    assert_eq!(dev.stats().compressed_sessions, 2);
    let read = |i: u32| {
        // SAFETY: the device is stepped and idle.
        unsafe { zverbs_sim::read_cqe(&layout, i) }
    };
    let csum = |f: &Vec<u8>| fold(sum(&f[14..]));
    let filler = 1u32 << 31;
    // Session 1 at entry 0: four completions (three frames and the filler), array at 1.
    let t = read(0);
    assert_eq!(t[63] & 0x0c, 0x0c, "a title");
    assert_eq!((be16(&t, 2), be16(&t, 60), be32(&t, 44)), (0, 0, 4));
    let a = read(1);
    let want = [
        (csum(&frames[0]), 0u16, (2u32 << 16) | 70),
        (csum(&frames[1]), 2, (1 << 16) | 64),
        (csum(&frames[2]), 3, (3 << 16) | 130),
        (0, 6, filler | (2 << 16)),
    ];
    for (m, &(c, s, bc)) in want.iter().enumerate() {
        let mini = &a[m * 8..m * 8 + 8];
        assert_eq!(
            (be16(mini, 0), be16(mini, 2), be32(mini, 4)),
            (c, s, bc),
            "mini {m}"
        );
    }
    // Session 2 at entry 4: WQE 1's two frames.
    let t = read(4);
    assert_eq!((be16(&t, 2), be16(&t, 60), be32(&t, 44)), (1, 0, 2));
    let a = read(5);
    assert_eq!((be16(&a, 2), be32(&a, 4)), (0, (3 << 16) | 150));
    assert_eq!(
        (be16(&a, 8), be16(&a, 10), be32(&a, 12)),
        (csum(&frames[4]), 3, (1 << 16) | 64)
    );
    assert_eq!(mem.read(512 + 3 * 64, 64), frames[4]);
    // The poller's consumer counter, for the record.
    // SAFETY: word 0 of the CQ's doorbell record.
    unsafe { layout.dbrec.as_ptr().add(CQ_SET_CI).write(6u32.to_be()) };
}

/// A TCP segment with the ACK flag and data: the device computes only the checksum each flag
/// asks for, an independent sum accepts it, and the receive CQE reports the header types and
/// which checksums are right.
#[test]
fn tcp_checksums_by_flag_and_header_types() {
    let (dev, mem, mr) = device_with_arena(8192);
    let (mut qp, mut cq) = raw_qp(dev, 4);
    let (src, dst) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    let five = FlowSpec::five_tuple(L4Proto::Tcp, (src, 40000), (dst, 80));
    let to_qp = FlowDest::RawQp(qp.qpn());
    dev.create_flow(flow_attr(0, five, to_qp, None)).unwrap();
    // Ethernet, IPv4 (protocol 6), TCP with a 20-byte header, ACK|PSH, 11 bytes of data.
    let mut f = udp_frame(MAC_A, src, dst, (40000, 80), 23, 0x41);
    f[23] = 6;
    f[38..42].copy_from_slice(&[0, 0, 0, 1]); // sequence number
    f[42..46].copy_from_slice(&[0, 0, 0, 2]); // acknowledgement number
    f[46] = 5 << 4;
    f[47] = 0x18;
    f[48..54].copy_from_slice(&[0xff, 0xff, 0, 0, 0, 0]); // window, checksum, urgent
    let tcp_ok = |g: &[u8]| {
        let seg = &g[34..];
        let mut pseudo = [0u8; 12];
        pseudo[..8].copy_from_slice(&g[26..34]);
        pseudo[9] = 6;
        pseudo[10..12].copy_from_slice(&(seg.len() as u16).to_be_bytes());
        fold(sum(&pseudo) + sum(seg)) == 0xffff
    };
    for (cs, l3, l4, ok) in [(0x80u8, false, true, 0x05u8), (0x40, true, false, 0x03)] {
        qp.post_recv(&[(mem.addr(4096), 256, mr.lkey)]);
        send(&mut qp, mem, &mr, 0, &f, 14, cs);
        dev.run_until_idle();
        let (_, r) = send_and_recv(&mut cq);
        let got = mem.read(4096, f.len());
        assert_eq!(checksums_ok(&got).0, l3, "cs_flags {cs:#x}: IPv4 header");
        assert_eq!(tcp_ok(&got), l4, "cs_flags {cs:#x}: TCP");
        assert_eq!(
            got[50..52] == [0, 0],
            !l4,
            "the TCP checksum left alone without 0x80"
        );
        assert_eq!(
            (r[28], r[29]),
            (ok, 0x48),
            "cs_flags {cs:#x}: OK bits, IPv4 + TCP ACK data"
        );
    }
}

/// A receive WQE naming memory the device may not write completes with a local protection
/// error: the raw QP enters the error state and takes no more frames; a work queue places
/// nothing more.
#[test]
fn a_receive_with_a_bad_key_fails() {
    let (dev, mem, mr) = device_with_arena(8192);
    let (mut qp, mut cq) = raw_qp(dev, 4);
    dev.create_flow(flow_attr(
        0,
        FlowSpec::dst_mac(MAC_A),
        FlowDest::RawQp(qp.qpn()),
        None,
    ))
    .unwrap();
    qp.post_recv(&[(mem.addr(0), 256, mr.lkey ^ 0x100)]);
    qp.post_recv(&[(mem.addr(256), 256, mr.lkey)]);
    let f = udp_frame(MAC_A, Ipv4Addr::LOCALHOST, GROUP, (1, 2), 20, 0);
    dev.receive_frame(&f);
    dev.run_until_idle();
    let c = cq.poll().expect("the error CQE");
    assert_eq!((c[63] >> 4, c[55], c[54]), (14, 0x04, vendor::RECV_LKEY));
    assert_eq!(
        dev.qp_status(qp.qpn()).unwrap(),
        zverbs_sim::QpStatus::Error
    );
    let flushed = cq.poll().expect("the second receive, flushed");
    assert_eq!((flushed[63] >> 4, flushed[55]), (14, 0x05));
    dev.receive_frame(&f);
    assert_eq!(dev.stats().eth_no_wqe, 1);

    let cqw = dev.create_cq(CqConfig { cqe: 15 }).unwrap();
    let cfg = wq_config(cqw.cqn, 2, None);
    let (w, _) = steered_wq(dev, cfg, FlowSpec::dst_mac(MAC_B), None);
    post_wq(&w, 0, &[(mem.addr(0), 256, mr.lkey ^ 0x100)]);
    post_wq(&w, 1, &[(mem.addr(256), 256, mr.lkey)]);
    let g = udp_frame(MAC_B, Ipv4Addr::LOCALHOST, GROUP, (1, 2), 20, 0);
    dev.receive_frame(&g);
    dev.receive_frame(&g);
    let mut cqw = RawCq::new(cqw);
    let c = cqw.poll().expect("the error CQE");
    assert_eq!((c[63] >> 4, c[55], be32(&c, 32)), (14, 0x04, w.wqn));
    assert!(cqw.poll().is_none(), "nothing placed after the error");
    assert_eq!(dev.stats().eth_no_wqe, 2);
}

/// A CQ stamping in the real-time format: seconds since the epoch in the high 32 bits,
/// nanoseconds in the low 32, on every receive CQE, a filler's too.
#[test]
#[cfg_attr(
    miri,
    ignore = "reads CLOCK_REALTIME, which Miri's isolation withholds"
)]
fn real_time_timestamps_are_seconds_and_nanoseconds() {
    let (dev, mem, mr) = device_with_arena(4096);
    let cq = dev.create_cq(CqConfig { cqe: 15 }).unwrap();
    dev.enable_cq_real_time_timestamps(cq.cqn).unwrap();
    let (w, _) = striding_rig(dev, cq.cqn);
    post_wq(&w, 0, &[(mem.addr(0), 512, mr.lkey)]);
    post_wq(&w, 1, &[(mem.addr(512), 512, mr.lkey)]);
    let src = Ipv4Addr::new(10, 1, 1, 1);
    let epoch = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    };
    let before = epoch();
    // 300 bytes (5 strides), then 300 more: a filler, then WQE 1.
    for _ in 0..2 {
        dev.receive_frame(&udp_frame(MAC_A, src, GROUP, (1, 2), 258, 0));
    }
    let after = epoch();
    let mut cq = RawCq::new(cq);
    for k in 0..3 {
        let c = cq.poll().unwrap_or_else(|| panic!("CQE {k}"));
        let ts = u64::from_be_bytes(c[48..56].try_into().unwrap());
        let (secs, nanos) = (ts >> 32, ts & 0xffff_ffff);
        assert!(
            nanos < 1_000_000_000,
            "CQE {k}: nanoseconds in the low half: {ts:#x}"
        );
        let t = std::time::Duration::new(secs, nanos as u32);
        assert!(
            before <= t && t <= after,
            "CQE {k}: {t:?} not in {before:?}..={after:?}"
        );
    }
    assert_eq!(dev.stats().eth_fillers, 1);
}

/// A rule's flow tag comes in the low 24 bits of `sop_drop_qpn` of each frame it steers; one
/// match at one priority has one tag.
#[test]
fn flow_tags_come_in_the_cqe() {
    let (dev, mem, mr) = device_with_arena(4096);
    let (mut qp, mut cq) = raw_qp(dev, 4);
    let (other, _) = raw_qp(dev, 4);
    let rule = |tag, qpn| flow_attr(4, FlowSpec::dst_mac(MAC_A), FlowDest::RawQp(qpn), tag);
    dev.create_flow(rule(Some(0xab_cdef), qp.qpn())).unwrap();
    assert!(
        dev.create_flow(rule(Some(7), other.qpn())).is_err(),
        "another tag on the same entry"
    );
    assert!(dev.create_flow(rule(None, other.qpn())).is_err());
    assert!(dev.create_flow(rule(Some(1 << 24), other.qpn())).is_err());
    qp.post_recv(&[(mem.addr(0), 256, mr.lkey)]);
    dev.receive_frame(&udp_frame(MAC_A, Ipv4Addr::LOCALHOST, GROUP, (1, 2), 8, 0));
    let c = cq.poll().expect("the receive CQE");
    assert_eq!(&c[56..60], &[0, 0xab, 0xcd, 0xef]);
}

/// A work queue over a ring and doorbell record the driver allocated (libmlx5 behind the
/// emulated ConnectX): its CQEs carry the driver's user index, not the WQN; RESET stops it
/// taking frames and ready starts it again at its first WQE.
#[test]
fn an_external_work_queue_answers_with_the_drivers_user_index() {
    let (dev, mem, mr) = device_with_arena(8192);
    let cq = dev.create_cq(CqConfig { cqe: 63 }).unwrap();
    // 8 WQEs of one data segment (16 bytes), as libmlx5 lays out an ordinary WQ of one SGE
    // (it adds the 16-byte next segment only for striding ones: the device reads from 0).
    let ring: &'static mut [u128] = Box::leak(vec![0u128; 8].into_boxed_slice());
    let dbrec: &'static mut [u32; 2] = Box::leak(Box::new([0u32; 2]));
    let buf = std::ptr::NonNull::new(ring.as_mut_ptr().cast::<u8>()).unwrap();
    let db = std::ptr::NonNull::from(&mut dbrec[0]);
    let cfg = wq_config(cq.cqn, 8, None);
    // SAFETY: the ring and record are leaked: valid for the device's life.
    let bad = unsafe { dev.create_wq_external(cfg, buf, 6, db, 0x1234) };
    assert!(bad.is_err(), "a count that is not a power of two");
    // SAFETY: as above.
    let wqn = unsafe { dev.create_wq_external(cfg, buf, 8, db, 0x1234) }.unwrap();
    let w = SimWq {
        wqn,
        layout: zverbs_mlx5dv::WqLayout {
            buf,
            wqe_cnt: 8,
            stride: 16,
        },
        dbrec: db,
        striding: None,
    };
    let (rss, _) = rss_qp(dev, &[wqn], RxHashFields::empty());
    dev.create_flow(flow_attr(0, FlowSpec::ANY, FlowDest::Rss(rss), None))
        .unwrap();
    dev.ready_wq(wqn).unwrap();
    for k in 0..2 {
        post_wq(&w, k, &[(mem.addr(k * 256), 256, mr.lkey)]);
    }
    let src = Ipv4Addr::new(10, 0, 0, 1);
    let f = udp_frame(MAC_A, src, GROUP, (1, 2), 16, 7);
    dev.receive_frame(&f);
    dev.run_until_idle();
    let mut cq = RawCq::new(cq);
    let c = cq.poll().expect("a receive CQE");
    assert_eq!(
        who(&c),
        (0x1234, 0, f.len() as u32),
        "the driver's user index"
    );
    assert_eq!(mem.read(0, f.len()), f);
    // RESET: nothing placed; ready again: from the first WQE on.
    dev.reset_wq(wqn).unwrap();
    let dropped = dev.stats().eth_no_wqe;
    dev.receive_frame(&f);
    dev.run_until_idle();
    assert_eq!(dev.stats().eth_no_wqe, dropped + 1);
    assert!(cq.poll().is_none());
    dev.ready_wq(wqn).unwrap();
    dev.receive_frame(&f);
    dev.run_until_idle();
    let c = cq.poll().expect("a receive CQE after ready");
    assert_eq!(who(&c), (0x1234, 0, f.len() as u32), "WQE 0 again");
}

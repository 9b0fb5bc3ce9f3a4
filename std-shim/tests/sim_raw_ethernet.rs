//! Raw Ethernet through the `zverbs` crate on the software device: raw packet QPs, flow rules
//! (by destination MAC, by multicast group and UDP port, by 5-tuple, with priorities and
//! tags), receive work queues behind an RSS QP, and the typed errors of bad rules. Frames
//! arrive at the device's port from outside (`SimControl::receive_frame`, as the emulated
//! ConnectX's veth feeds it) and land in the buffers the receives posted.
//!
//! The software device is one per process: the tests of this file take a lock, and each
//! uses addresses of its own, so that no test's rules see another's frames.
#![cfg(feature = "sim")]

use std::net::Ipv4Addr;
use std::sync::{Mutex, MutexGuard};

use zverbs::{
    AccessFlags, Completion, Context, ContextOptions, Error, FlowRule, FlowRuleError, FlowSpec,
    L4Proto, MrBuf, Poller, QpCaps, QpState, QpType, RecvQueue, RxHash, RxHashFields, WqShape,
};

static DEVICE: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    DEVICE.lock().unwrap_or_else(|p| p.into_inner())
}

fn ctx() -> Context {
    zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap()
}

const SRC_MAC: [u8; 6] = [0x02, 0x00, 0x00, 0x00, 0x00, 0x01];

/// A UDP/IPv4 frame from `src` to `dst` (addresses and ports) with `payload`; the checksums
/// are left 0 (the device does not drop a frame for them).
fn udp_frame(
    dst_mac: [u8; 6],
    src: (Ipv4Addr, u16),
    dst: (Ipv4Addr, u16),
    payload: &[u8],
) -> Vec<u8> {
    let mut f = Vec::with_capacity(42 + payload.len());
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&SRC_MAC);
    f.extend_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = 20 + 8 + payload.len();
    f.extend_from_slice(&[0x45, 0]);
    f.extend_from_slice(&(ip_len as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    f.extend_from_slice(&src.0.octets());
    f.extend_from_slice(&dst.0.octets());
    f.extend_from_slice(&src.1.to_be_bytes());
    f.extend_from_slice(&dst.1.to_be_bytes());
    f.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend_from_slice(payload);
    f
}

/// Posts `n` receives (`wr_id` 0 to `n - 1`) of `len` bytes each, one after the other from
/// the start of `buf`.
fn post_slices(rq: &mut RecvQueue, buf: &MrBuf, n: u64, len: usize) {
    for i in 0..n {
        let at = i as usize * len;
        rq.post(i, buf.slice(at..at + len).unwrap()).unwrap();
    }
}

fn bytes(buf: &MrBuf, at: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    buf.read(at, &mut v).unwrap();
    v
}

/// A raw packet QP is created in RTS on port 1; a destination-MAC rule steers a frame into
/// the receive its queue posted, byte for byte; dropping the rule stops the delivery (the
/// next frame is counted as matching no rule, and the posted receive stays untouched).
#[test]
fn a_mac_rule_steers_frames_to_a_raw_qp_until_dropped() {
    let _g = lock();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(256).build().unwrap();
    let qp = pd.create_raw_qp(1, &cq, &cq, QpCaps::default()).unwrap();
    assert_eq!(
        (qp.state(), qp.qp_type(), qp.raw_port()),
        (QpState::Rts, QpType::RawPacket, Some(1))
    );
    let caps = ctx.raw_caps(1).unwrap();
    assert!(caps.ip_csum && caps.flow_steering && caps.has_raw_qps());
    let mac = [0x02, 0x11, 0x22, 0x33, 0x44, 0x01];
    let flow = qp.create_flow(&FlowRule::dst_mac(mac)).unwrap();
    assert_eq!(flow.rule(), &FlowRule::dst_mac(mac));
    let buf = pd.alloc_buf(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let mut rq = qp.recv_queue().unwrap();
    rq.post(1, buf.slice(0..2048).unwrap()).unwrap();
    rq.post(2, buf.slice(2048..4096).unwrap()).unwrap();

    let frame = udp_frame(
        mac,
        (Ipv4Addr::new(10, 1, 0, 1), 4000),
        (Ipv4Addr::new(10, 1, 0, 2), 4001),
        b"first frame",
    );
    let before = sim.stats();
    sim.receive_frame(&frame);
    let after = sim.stats();
    assert_eq!(after.eth_delivered - before.eth_delivered, 1);
    assert_eq!(bytes(&buf, 0, frame.len()), frame);

    // Another MAC: no rule takes it.
    let other = udp_frame(
        [0x02, 0x11, 0x22, 0x33, 0x44, 0x02],
        (Ipv4Addr::new(10, 1, 0, 1), 4000),
        (Ipv4Addr::new(10, 1, 0, 2), 4001),
        b"not for us",
    );
    sim.receive_frame(&other);
    let later = sim.stats();
    assert_eq!(later.eth_no_rule - after.eth_no_rule, 1);
    assert_eq!(later.eth_delivered, after.eth_delivered);

    drop(flow);
    sim.receive_frame(&frame);
    let gone = sim.stats();
    assert_eq!(
        gone.eth_no_rule - later.eth_no_rule,
        1,
        "the rule was removed"
    );
    assert_eq!(gone.eth_delivered, later.eth_delivered);
    assert_eq!(
        bytes(&buf, 2048, 16),
        vec![0; 16],
        "the second receive is untouched"
    );
}

/// A multicast rule (group MAC, group address, UDP port) and a 5-tuple rule on two raw QPs:
/// each takes exactly its own frames; the group's other port and another source go nowhere.
#[test]
fn multicast_and_five_tuple_rules_take_their_own_frames() {
    let _g = lock();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(512).build().unwrap();
    let md = pd.create_raw_qp(1, &cq, &cq, QpCaps::default()).unwrap();
    let one = pd.create_raw_qp(1, &cq, &cq, QpCaps::default()).unwrap();
    let group = Ipv4Addr::new(239, 2, 3, 4);
    let feed = Ipv4Addr::new(10, 2, 0, 9);
    let _m = md
        .create_flow(&FlowRule::multicast(group, 31000).tag(0x42))
        .unwrap();
    let host = Ipv4Addr::new(10, 2, 0, 1);
    let _t = one
        .create_flow(&FlowRule::five_tuple(L4Proto::Udp, (feed, 5000), (host, 6000)).priority(3))
        .unwrap();
    let (bm, bo) = (
        pd.alloc_buf(8192, AccessFlags::LOCAL_WRITE).unwrap(),
        pd.alloc_buf(8192, AccessFlags::LOCAL_WRITE).unwrap(),
    );
    let (mut qm, mut qo) = (md.recv_queue().unwrap(), one.recv_queue().unwrap());
    post_slices(&mut qm, &bm, 4, 2048);
    post_slices(&mut qo, &bo, 4, 2048);
    let gmac = zverbs::multicast_mac(group);
    let m1 = udp_frame(gmac, (feed, 5000), (group, 31000), b"tick 1");
    let m_other_port = udp_frame(gmac, (feed, 5000), (group, 31001), b"not subscribed");
    let t1 = udp_frame(SRC_MAC, (feed, 5000), (host, 6000), b"unicast flow");
    let t_other_src = udp_frame(SRC_MAC, (feed, 5001), (host, 6000), b"another flow");
    let s0 = sim.stats();
    for f in [&m1, &m_other_port, &t1, &t_other_src] {
        sim.receive_frame(f);
    }
    let s1 = sim.stats();
    assert_eq!(s1.eth_delivered - s0.eth_delivered, 2);
    assert_eq!(s1.eth_no_rule - s0.eth_no_rule, 2);
    assert_eq!(bytes(&bm, 0, m1.len()), m1);
    assert_eq!(bytes(&bo, 0, t1.len()), t1);
    assert_eq!(bytes(&bm, 2048, 8), vec![0; 8]);
    assert_eq!(bytes(&bo, 2048, 8), vec![0; 8]);
}

/// The standard receive set-up: an RSS QP over two ordinary work queues, hashing source and
/// destination address and UDP port, under a rule for a group: frames of many flows are
/// spread over both queues, each frame whole in exactly one of them.
#[test]
fn an_rss_qp_spreads_a_groups_flows_over_its_work_queues() {
    let _g = lock();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(512).build().unwrap();
    let shape = WqShape::Ordinary { max_sge: 1 };
    let (w0, w1) = (
        pd.create_wq(&cq, 32, shape).unwrap(),
        pd.create_wq(&cq, 32, shape).unwrap(),
    );
    assert_ne!(w0.wqn(), w1.wqn());
    assert!(w0.caps().0 >= 32);
    let rss = pd
        .create_rss_qp(1, &[&w0, &w1], &RxHash::default())
        .unwrap();
    assert_eq!(rss.work_queues().len(), 2);
    let group = Ipv4Addr::new(239, 3, 4, 5);
    let _f = rss.create_flow(&FlowRule::multicast(group, 32000)).unwrap();
    let bufs = [
        pd.alloc_buf(32 * 256, AccessFlags::LOCAL_WRITE).unwrap(),
        pd.alloc_buf(32 * 256, AccessFlags::LOCAL_WRITE).unwrap(),
    ];
    for (w, b) in [&w0, &w1].into_iter().zip(&bufs) {
        let mut rq = w.recv_queue().unwrap();
        post_slices(&mut rq, b, 32, 256);
        assert!(matches!(w.recv_queue(), Err(Error::AlreadyTaken(_))));
        std::mem::forget(rq); // its receives stay posted for the frames below
    }
    let s0 = sim.stats();
    let n = 16u16;
    for i in 0..n {
        let f = udp_frame(
            zverbs::multicast_mac(group),
            (Ipv4Addr::new(10, 3, 0, 1 + i as u8), 7000 + i),
            (group, 32000),
            &[i as u8; 20],
        );
        sim.receive_frame(&f);
    }
    assert_eq!(sim.stats().eth_delivered - s0.eth_delivered, u64::from(n));
    // Every frame is in exactly one queue's buffers, and both queues got some.
    let mut per_queue = [0usize; 2];
    let mut seen = vec![false; n as usize];
    for (q, b) in bufs.iter().enumerate() {
        for slot in 0..32 {
            let got = bytes(b, slot * 256, 62);
            if got[..6] != zverbs::multicast_mac(group) {
                continue;
            }
            let i = got[42] as usize;
            assert!(!seen[i], "frame {i} landed twice");
            seen[i] = true;
            per_queue[q] += 1;
        }
    }
    assert!(seen.iter().all(|s| *s), "every frame landed: {seen:?}");
    assert!(
        per_queue[0] > 0 && per_queue[1] > 0,
        "spread: {per_queue:?}"
    );
}

/// Bad rules and set-ups are typed errors, and nothing is created: a priority above 15, a
/// port without its transport, a tag of more than 24 bits, a rule on an RC QP, a striding
/// queue out of range, a hash over both transports, a table that is not a power of two.
#[test]
fn bad_rules_and_setups_are_typed_errors() {
    let _g = lock();
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(1024).build().unwrap();
    let qp = pd.create_raw_qp(1, &cq, &cq, QpCaps::default()).unwrap();
    let fr = |r: &FlowRule| match qp.create_flow(r) {
        Err(Error::FlowRule(e)) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        fr(&FlowRule::dst_mac(SRC_MAC).priority(16)),
        FlowRuleError::Priority(16)
    );
    let port_only = FlowRule::of(FlowSpec {
        dst_port: Some(9),
        ..FlowSpec::ANY
    });
    assert_eq!(fr(&port_only), FlowRuleError::PortWithoutTransport);
    assert_eq!(
        fr(&FlowRule::dst_mac(SRC_MAC).tag(1 << 24)),
        FlowRuleError::TagTooLarge(1 << 24)
    );
    // The same match with another tag: the kernel's EEXIST.
    let mac = [0x02, 0x44, 0, 0, 0, 1];
    let _first = qp.create_flow(&FlowRule::dst_mac(mac).tag(1)).unwrap();
    assert_eq!(
        fr(&FlowRule::dst_mac(mac).tag(2)),
        FlowRuleError::ConflictingTag
    );
    let rc = pd.qp_builder(&cq, &cq).build().unwrap();
    assert!(matches!(
        rc.create_flow(&FlowRule::dst_mac(mac)),
        Err(Error::FlowRule(FlowRuleError::WrongQp))
    ));
    assert!(matches!(rc.ready_raw(), Err(Error::InvalidArgument(_))));
    let bad_strides = WqShape::Striding(zverbs::Strides {
        log_num_strides: 2,
        log_stride_size: 6,
    });
    assert!(matches!(
        pd.create_wq(&cq, 4, bad_strides),
        Err(Error::InvalidArgument(_))
    ));
    let w = pd
        .create_wq(&cq, 8, WqShape::Ordinary { max_sge: 1 })
        .unwrap();
    let both = RxHash {
        fields: RxHashFields::SRC_PORT_TCP | RxHashFields::DST_PORT_UDP,
        ..RxHash::default()
    };
    assert!(matches!(
        pd.create_rss_qp(1, &[&w], &both),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        pd.create_rss_qp(1, &[&w, &w, &w], &RxHash::default()),
        Err(Error::InvalidArgument(_))
    ));
    // A port the device does not have.
    assert!(pd.create_raw_qp(2, &cq, &cq, QpCaps::default()).is_err());
}

fn deadline() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(5)
}

/// At least `n` completions from `poller`, each a success, waiting for each at most until the
/// [`deadline`].
fn successes(poller: &mut Poller, n: usize) -> Vec<Completion> {
    let mut got = Vec::new();
    while got.len() < n {
        got.extend(
            poller
                .wait(1, deadline())
                .unwrap()
                .iter()
                .map(|c| *c.ok().unwrap()),
        );
    }
    got
}

/// Whether the IPv4 header at 14.. of `f` sums to its checksum.
fn ipv4_sum_ok(f: &[u8]) -> bool {
    let mut sum: u32 = f[14..34]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum == 0xffff
}

/// A raw packet QP's `SendQueue` on the direct backend sends frames that loop back through a
/// destination-MAC rule into a second raw QP's receive queue, polled on the CQ both share:
/// plain frames with checksum offload (the device fills the IPv4 checksum), inline frames,
/// and prepared frames whose IPv4 and UDP lengths each post sets for its payload; a frame
/// shorter than an Ethernet header and checksum offload on an RC QP are typed errors.
#[test]
fn frames_sent_through_the_send_queue_arrive_through_a_rule() {
    use zverbs::safe::SafePostError;
    use zverbs::{FrameLengths, PostError, SendFlags, WcOpcode};
    let _g = lock();
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(512).build().unwrap();
    let tx = pd.create_raw_qp(1, &cq, &cq, QpCaps::default()).unwrap();
    let rx = pd.create_raw_qp(1, &cq, &cq, QpCaps::default()).unwrap();
    let mac = [0x02, 0x55, 0, 0, 0, 7];
    let _flow = rx.create_flow(&FlowRule::dst_mac(mac)).unwrap();
    let sbuf = pd.alloc_buf(8192, AccessFlags::LOCAL_WRITE).unwrap();
    let rbuf = pd.alloc_buf(16 * 2048, AccessFlags::LOCAL_WRITE).unwrap();
    let mut sq = tx.send_queue().unwrap();
    assert_eq!(sq.kind(), zverbs::BackendKind::Direct);
    assert!(sq.caps().is_ethernet());
    let mut rq = rx.recv_queue().unwrap();
    post_slices(&mut rq, &rbuf, 16, 2048);
    let mut poller = cq.poller().unwrap();
    let src = (Ipv4Addr::new(10, 5, 0, 1), 9000);
    let dst = (Ipv4Addr::new(10, 5, 0, 2), 9001);

    // A plain frame, checksum offload: the device computes the IPv4 header checksum.
    let f = udp_frame(mac, src, dst, b"checksummed by the device");
    sbuf.write(0, &f).unwrap();
    sq.send_frame(
        100,
        sbuf.slice(0..f.len()).unwrap(),
        SendFlags::SIGNALED | SendFlags::IP_CSUM,
    )
    .unwrap();
    // An inline frame.
    let g = udp_frame(mac, src, dst, b"inline");
    sq.send_inline(101, &g, SendFlags::SIGNALED | SendFlags::IP_CSUM)
        .unwrap();
    let got = successes(&mut poller, 4);
    let sends: Vec<u64> = got
        .iter()
        .filter(|c| c.opcode == WcOpcode::Send)
        .map(|c| c.wr_id)
        .collect();
    let recvs: Vec<(u64, u32)> = got
        .iter()
        .filter(|c| c.opcode == WcOpcode::Recv)
        .map(|c| (c.wr_id, c.byte_len))
        .collect();
    assert_eq!(sends, [100, 101]);
    assert_eq!(recvs, [(0, f.len() as u32), (1, g.len() as u32)]);
    let r0 = bytes(&rbuf, 0, f.len());
    assert!(ipv4_sum_ok(&r0), "the device filled the IPv4 checksum");
    assert_eq!(r0[..24], f[..24]);
    assert_eq!(
        r0[26..40],
        f[26..40],
        "the frame as sent, bar the checksums"
    );
    assert_eq!(r0[42..], f[42..]);
    assert_ne!(r0[40..42], [0, 0], "the device filled the UDP checksum too");
    assert_eq!(bytes(&rbuf, 2048 + 42, 6), b"inline");

    // Prepared frames: the headers once, payloads of three lengths.
    let headers = udp_frame(mac, src, dst, b"");
    let p = sq
        .prepare_frame(
            &headers,
            SendFlags::SIGNALED | SendFlags::IP_CSUM,
            FrameLengths::IPV4_UDP,
        )
        .unwrap();
    assert_eq!(p.headers_len(), 42);
    let payloads: [&[u8]; 3] = [b"a", b"twenty bytes payload", &[7u8; 300]];
    let mut off = 4096;
    for (i, pl) in payloads.iter().enumerate() {
        sbuf.write(off, pl).unwrap();
        sq.post_frame(&p, 200 + i as u64, sbuf.slice(off..off + pl.len()).unwrap())
            .unwrap();
        off += 512;
    }
    let got = successes(&mut poller, 6);
    for (i, pl) in payloads.iter().enumerate() {
        let slot = 2 + i;
        let c = got
            .iter()
            .find(|c| c.opcode == WcOpcode::Recv && c.wr_id == slot as u64)
            .unwrap();
        assert_eq!(c.byte_len as usize, 42 + pl.len());
        let r = bytes(&rbuf, slot * 2048, 42 + pl.len());
        assert_eq!(
            u16::from_be_bytes([r[16], r[17]]) as usize,
            28 + pl.len(),
            "IPv4 total length"
        );
        assert_eq!(
            u16::from_be_bytes([r[38], r[39]]) as usize,
            8 + pl.len(),
            "UDP length"
        );
        assert!(ipv4_sum_ok(&r));
        assert_eq!(&r[42..], *pl);
        assert_eq!(r[..16], headers[..16]);
    }
    assert!(
        got.iter()
            .any(|c| c.opcode == WcOpcode::Send && c.wr_id == 202)
    );

    // Typed errors: a frame shorter than an Ethernet header; checksum offload on RC.
    assert!(matches!(
        sq.send_frame(1, sbuf.slice(0..10).unwrap(), SendFlags::NONE),
        Err(SafePostError::Post(PostError::FrameTooShort {
            len: 10,
            min: 14
        }))
    ));
    let rc = pd.qp_builder(&cq, &cq).build().unwrap();
    assert!(matches!(
        rc.send_queue().map(|_| ()),
        Err(Error::NotReady { .. })
    ));
}

/// A device without checksum offload (the software device told so) reports none, and a raw
/// packet QP created on it refuses `IP_CSUM` with a typed error and writes nothing: a whole
/// frame, an inline frame, a prepared frame; the same frames without the flag go out and
/// arrive, their checksum fields as sent.
#[test]
fn checksum_offload_is_refused_on_a_device_without_it() {
    use zverbs::safe::SafePostError;
    use zverbs::{FrameLengths, PostError, SendFlags, WcOpcode};
    let _g = lock();
    let ctx = ctx();
    let sim = ctx.sim().unwrap();
    /// Turns checksum offload back on however the test ends (the device is the process's).
    struct On<'a>(zverbs::SimControl<'a>);
    impl Drop for On<'_> {
        fn drop(&mut self) {
            self.0.set_checksum_offload(true);
        }
    }
    sim.set_checksum_offload(false);
    let _on = On(sim);
    let caps = ctx.raw_caps(1).unwrap();
    assert!(!caps.ip_csum, "{caps:?}");
    assert_eq!(
        caps.raw_packet_caps & zverbs::ffi::eth::IBV_RAW_PACKET_CAP_IP_CSUM,
        0
    );
    assert!(caps.has_raw_qps());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().cqe(512).build().unwrap();
    let tx = pd.create_raw_qp(1, &cq, &cq, QpCaps::default()).unwrap();
    let rx = pd.create_raw_qp(1, &cq, &cq, QpCaps::default()).unwrap();
    let mac = [0x02, 0x55, 0, 0, 0, 9];
    let _flow = rx.create_flow(&FlowRule::dst_mac(mac)).unwrap();
    let sbuf = pd.alloc_buf(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let rbuf = pd.alloc_buf(4 * 2048, AccessFlags::LOCAL_WRITE).unwrap();
    let mut sq = tx.send_queue().unwrap();
    let mut rq = rx.recv_queue().unwrap();
    post_slices(&mut rq, &rbuf, 4, 2048);
    let mut poller = cq.poller().unwrap();
    let src = (Ipv4Addr::new(10, 6, 0, 1), 9000);
    let dst = (Ipv4Addr::new(10, 6, 0, 2), 9001);
    let f = udp_frame(mac, src, dst, b"no checksum offload here");
    sbuf.write(0, &f).unwrap();
    let refused = |r: Result<(), SafePostError>| {
        assert!(
            matches!(r, Err(SafePostError::Post(PostError::ChecksumNotAvailable))),
            "{r:?}"
        );
    };
    let csum = SendFlags::SIGNALED | SendFlags::IP_CSUM;
    let sent = sim.stats().eth_sent;
    refused(sq.send_frame(1, sbuf.slice(0..f.len()).unwrap(), csum));
    refused(sq.send_inline(2, &f, csum));
    assert!(matches!(
        sq.prepare_frame(&f[..42], csum, FrameLengths::IPV4_UDP),
        Err(SafePostError::Post(PostError::ChecksumNotAvailable))
    ));
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert!(poller.ready().is_empty());
    assert_eq!(sim.stats().eth_sent, sent, "nothing left the device");
    // Without the flag: sent, and received as sent (the IPv4 checksum still 0).
    sq.send_frame(3, sbuf.slice(0..f.len()).unwrap(), SendFlags::SIGNALED)
        .unwrap();
    let p = sq
        .prepare_frame(&f[..42], SendFlags::SIGNALED, FrameLengths::IPV4_UDP)
        .unwrap();
    sq.post_frame(&p, 4, sbuf.slice(42..f.len()).unwrap())
        .unwrap();
    let got = successes(&mut poller, 4);
    let mut sends: Vec<u64> = got
        .iter()
        .filter(|c| c.opcode == WcOpcode::Send)
        .map(|c| c.wr_id)
        .collect();
    sends.sort_unstable();
    assert_eq!(sends, [3, 4]);
    assert_eq!(bytes(&rbuf, 0, f.len()), f);
    assert_eq!(bytes(&rbuf, 2048, f.len()), f);
}

/// The standard set-up with a striding work queue: a raw QP sends frames of mixed sizes that
/// loop back through a tagged multicast rule on an RSS QP into a striding queue, polled in
/// place, many times round its ring: every frame once, whole, in order, with the rule's tag, a
/// device timestamp that never goes back, good checksums; packets kept in a burst across a
/// poll are still intact; the CQ serves the striding queue alone.
#[test]
fn a_striding_queue_hands_packets_out_in_place() {
    use zverbs::{SendFlags, Strides};
    let _g = lock();
    let ctx = ctx();
    let pd = ctx.alloc_pd().unwrap();
    let strides = Strides {
        log_num_strides: 4,
        log_stride_size: 7,
    };
    // 4 WQEs of 16 strides of 128 bytes; one completion per stride at most.
    let rcq = ctx.cq_builder().cqe(64).timestamps(true).build().unwrap();
    let wq = pd.create_wq(&rcq, 4, WqShape::Striding(strides)).unwrap();
    // The CQ is the striding queue's alone.
    assert!(matches!(
        pd.qp_builder(&rcq, &rcq).build(),
        Err(Error::InvalidArgument(_))
    ));
    let rss = pd.create_rss_qp(1, &[&wq], &RxHash::default()).unwrap();
    let group = Ipv4Addr::new(239, 6, 7, 8);
    let _f = rss
        .create_flow(&FlowRule::multicast(group, 34000).tag(0x77))
        .unwrap();
    let rx = wq.striding_queue().unwrap();
    assert!(matches!(wq.striding_queue(), Err(Error::AlreadyTaken(_))));
    assert_eq!((rx.entries(), rx.strides()), (4, strides));

    let scq = ctx.cq_builder().cqe(256).build().unwrap();
    let tx = pd.create_raw_qp(1, &scq, &scq, QpCaps::default()).unwrap();
    let mut sq = tx.send_queue().unwrap();
    let mut sent_cq = scq.poller().unwrap();
    let sbuf = pd.alloc_buf(64 * 1024, AccessFlags::LOCAL_WRITE).unwrap();
    let gmac = zverbs::multicast_mac(group);
    let src = (Ipv4Addr::new(10, 6, 0, 1), 34001);
    let frame = |seq: u64| {
        // 50 to 300 bytes of payload: one to three strides each.
        let mut pl = vec![(seq % 251) as u8; 50 + (seq as usize * 37) % 251];
        pl[..8].copy_from_slice(&seq.to_be_bytes());
        udp_frame(gmac, src, (group, 34000), &pl)
    };
    let total = 600u64;
    let (mut next, mut seen, mut last_ts) = (0u64, 0u64, 0u64);
    // A packet kept over the next poll, and its sequence number; how many were kept.
    let mut held: Option<(zverbs::Packet<'_>, u64)> = None;
    let mut kept = 0;
    while seen < total {
        // A few frames at a time (Ethernet drops what finds no stride).
        let upto = (next + 8).min(total);
        while next < upto {
            let f = frame(next);
            let at = (next % 64) as usize * 1024;
            sbuf.write(at, &f).unwrap();
            sq.send_frame(
                next,
                sbuf.slice(at..at + f.len()).unwrap(),
                SendFlags::SIGNALED | SendFlags::IP_CSUM,
            )
            .unwrap();
            next += 1;
        }
        let deadline = deadline();
        while seen < next {
            assert!(
                std::time::Instant::now() < deadline,
                "frame {seen} did not arrive"
            );
            let mut burst: [Option<zverbs::Packet<'_>>; 4] = Default::default();
            let n = rx.poll_burst(&mut burst);
            if n > 0
                && let Some((p, seq)) = held.take()
            {
                // Kept over a poll that took more packets: still the frame it was.
                let want = frame(seq);
                assert_eq!((p.len(), &p.bytes()[42..]), (want.len(), &want[42..]));
            }
            let first = seen;
            for p in burst[..n].iter().flatten() {
                let want = frame(seen);
                assert_eq!(p.bytes()[..24], want[..24]);
                assert_eq!(p.bytes()[26..40], want[26..40]);
                assert_eq!(p.bytes()[42..], want[42..], "frame {seen} in order, whole");
                assert_eq!(p.flow_tag(), 0x77);
                assert!(
                    p.l3_ok() && p.l4_ok(),
                    "checksums the device filled and checked"
                );
                assert!(p.timestamp() >= last_ts && p.timestamp() != 0);
                last_ts = p.timestamp();
                seen += 1;
            }
            // Now and then keep a burst's first packet over the next poll.
            if n > 0 && first % 7 == 0 {
                held = burst[0].take().map(|p| (p, first));
                kept += 1;
            }
            drop(burst);
        }
        sent_cq.ready();
    }
    assert_eq!(seen, total);
    assert_eq!(rx.malformed(), 0);
    assert!(rx.error().is_none());
    assert!(kept > 0);
}

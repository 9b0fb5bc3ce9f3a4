//! Raw Ethernet sends through the direct backend on the software device: frames built by
//! `zverbs_mlx5dv::SendQueue<_, Ethernet>` (single posts, gathered entries, inline frames,
//! batches, prepared frames), with both minimum inlines, loop back through a flow rule into a
//! second raw packet QP driven by hand; each frame arrives whole, with the checksums the
//! device filled in (checked with a sum written here) and the lengths a prepared frame set,
//! and each send completes once through the library's poller.

mod common;
mod raw;

use std::net::Ipv4Addr;

use common::Arena;
use common::direct::{Cq, device_with_arena, drain, qp_with_cq, send_only};
use raw::eth::*;
use raw::{RawCq, RawQp};
use zverbs_core::{PostError, PostSend, SendFlags, SendWr, Sge, Transport, WcOpcode, WcStatus};
use zverbs_mlx5dv::prm::cqe::Cqe64;
use zverbs_mlx5dv::{Ethernet, FrameLengths, SendQueue, SqCaps, SqRef};
use zverbs_sim::{Device, FlowDest, FlowSpec, Mr, QpConfig, QpType, SimQp};

type Sq = SendQueue<SqRef<'static>, Ethernet>;

/// A raw packet QP whose send queue the library drives, with the CQ of its sends.
struct Sender {
    qp: SimQp,
    sq: Sq,
    cq: Cq,
}

/// A ready raw packet QP on `dev` with `max_send_wr` send WQEs, driven by the library with
/// `min_inline` frame bytes inlined.
fn sender(dev: &'static Device, max_send_wr: u32, min_inline: u16) -> Sender {
    let cfg = QpConfig {
        max_send_wr,
        max_send_sge: 4,
        max_inline_data: 128,
        ..QpConfig::default()
    };
    let (qp, cq) = qp_with_cq(dev, QpType::RawPacket, cfg);
    dev.ready_raw(qp.qpn).unwrap();
    let (sqs, cq) = send_only(&qp, &cq.layout);
    let caps = SqCaps {
        transport: Transport::Ethernet {
            max_frame: 1514,
            ip_csum: true,
        },
        ..qp.caps()
    };
    // SAFETY: the device (leaked) outlives the queue, its ring's only driver; the state is
    // bound to the CQ of its sends; frames are read from the registered arena.
    let sq = unsafe { SendQueue::new_eth(&qp.layout, caps, min_inline, sqs, None) }.unwrap();
    Sender { qp, sq, cq }
}

/// The receiving raw QP, hand-driven, and the rule that steers frames for [`MAC_B`] to it.
fn receiver(dev: &Device) -> (RawQp, RawCq) {
    let (qp, cq) = raw_qp(dev, 64);
    dev.create_flow(flow_attr(
        0,
        FlowSpec::dst_mac(MAC_B),
        FlowDest::RawQp(qp.qpn()),
        None,
    ))
    .unwrap();
    (qp, cq)
}

/// Where receives land in the arena (256 bytes apart, 2 KiB each at most).
const RECV: usize = 32768;

struct World {
    dev: &'static Device,
    mem: &'static Arena,
    mr: Mr,
    rx: RawQp,
    rx_cq: RawCq,
}

impl World {
    fn new() -> Self {
        let (dev, mem, mr) = device_with_arena(65536);
        let (rx, rx_cq) = receiver(dev);
        Self {
            dev,
            mem,
            mr,
            rx,
            rx_cq,
        }
    }

    fn sge(&self, off: usize, len: usize) -> Sge {
        Sge::new(self.mem.addr(off), len as u32, self.mr.lkey)
    }

    /// Posts `n` receives of 2 KiB for the next frames.
    fn expect(&mut self, n: usize) {
        for i in 0..n {
            let at = RECV + (i % 8) * 2048;
            self.rx
                .post_recv(&[(self.mem.addr(at), 2048, self.mr.lkey)]);
        }
    }

    /// Runs the device and returns the frames that arrived, in order.
    fn arrived(&mut self, n: usize) -> Vec<Vec<u8>> {
        self.dev.run_until_idle();
        (0..n)
            .map(|i| {
                let c = self.rx_cq.poll().expect("a receive CQE");
                let v = Cqe64::new_unchecked(&c);
                assert_eq!(v.op_own() >> 4, 2, "RESP_SEND");
                self.mem.read(RECV + (i % 8) * 2048, v.byte_cnt() as usize)
            })
            .collect()
    }
}

/// `frame` as the device sends it with checksum offload: its IPv4 and UDP checksums filled.
fn with_checksums(frame: &[u8]) -> Vec<u8> {
    let mut f = frame.to_vec();
    f[24..26].fill(0);
    f[40..42].fill(0);
    let ip = !fold(sum(&f[14..34]));
    f[24..26].copy_from_slice(&ip.to_be_bytes());
    let udp = &f[34..];
    let mut pseudo = [0u8; 12];
    pseudo[..8].copy_from_slice(&f[26..34]);
    pseudo[9] = 17;
    pseudo[10..12].copy_from_slice(&(udp.len() as u16).to_be_bytes());
    let mut l4 = !fold(sum(&pseudo) + sum(udp));
    if l4 == 0 {
        l4 = 0xffff;
    }
    f[40..42].copy_from_slice(&l4.to_be_bytes());
    f
}

/// Each send's completion, successful, in order.
fn completed(cq: &mut Cq, ids: &[u64]) {
    let got = drain(cq);
    let seen: Vec<u64> = got.iter().map(|c| c.wr_id).collect();
    assert_eq!(seen, ids);
    for c in &got {
        assert_eq!(
            (c.status, c.opcode),
            (WcStatus::Success, WcOpcode::Send),
            "{c:?}"
        );
    }
}

/// Frames by reference (one entry, gathered from three with a zero-length one, the first
/// shorter than the inlined bytes) and inline, with checksum offload: each arrives whole, its
/// checksums right; every send completes.
#[test]
fn frames_arrive_whole_with_their_checksums() {
    for min_inline in [0u16, 18] {
        let mut w = World::new();
        let mut tx = sender(w.dev, 16, min_inline);
        let frame = udp_frame(
            MAC_B,
            Ipv4Addr::new(10, 0, 0, 1),
            GROUP,
            (30000, 31000),
            22,
            7,
        );
        assert_eq!(frame.len(), 64);
        w.mem.write(0, &frame);
        let one = [w.sge(0, 64)];
        let gathered = [w.sge(0, 10), w.sge(10, 0), w.sge(10, 30), w.sge(40, 24)];
        let wrs = [
            SendWr::send(1, &one).with_flags(SendFlags::IP_CSUM | SendFlags::SIGNALED),
            SendWr::send(2, &gathered).with_flags(SendFlags::IP_CSUM | SendFlags::SIGNALED),
            SendWr::send(3, &gathered)
                .inline()
                .with_flags(SendFlags::IP_CSUM | SendFlags::INLINE | SendFlags::SIGNALED),
            SendWr::send(4, &one).inline().signaled(),
        ];
        w.expect(wrs.len());
        for wr in &wrs {
            // SAFETY: the entries name the registered arena, untouched until completion.
            unsafe { tx.sq.post(wr) }.unwrap();
        }
        let got = w.arrived(wrs.len());
        let csum = with_checksums(&frame);
        assert_eq!(checksums_ok(&csum), (true, true));
        for (i, f) in got.iter().enumerate() {
            let want = if i < 3 { &csum } else { &frame };
            assert_eq!(f, want, "frame {i}, min inline {min_inline}");
        }
        completed(&mut tx.cq, &[1, 2, 3, 4]);
        assert_eq!(tx.qp.qpn, tx.sq.qpn());
    }
}

/// A device set without checksum offload (`Device::set_checksum_offload(false)`, a ConnectX
/// that reports no `IBV_DEVICE_RAW_IP_CSUM`) says so and computes no checksums, whatever a
/// WQE's `cs_flags` ask: the frame arrives as it was sent.
#[test]
fn a_device_without_checksum_offload_leaves_the_checksums() {
    let mut w = World::new();
    assert!(w.dev.checksum_offload());
    w.dev.set_checksum_offload(false);
    assert!(!w.dev.checksum_offload());
    let mut tx = sender(w.dev, 16, 18);
    let frame = udp_frame(
        MAC_B,
        Ipv4Addr::new(10, 0, 0, 1),
        GROUP,
        (30000, 31000),
        22,
        8,
    );
    assert_ne!(with_checksums(&frame), frame);
    w.mem.write(0, &frame);
    let one = [w.sge(0, 64)];
    w.expect(1);
    let wr = SendWr::send(1, &one).with_flags(SendFlags::IP_CSUM | SendFlags::SIGNALED);
    // SAFETY: the entry names the registered arena, untouched until completion.
    unsafe { tx.sq.post(&wr) }.unwrap();
    assert_eq!(w.arrived(1), [frame]);
    completed(&mut tx.cq, &[1]);
}

/// A batch and staged frames go out in order behind one doorbell; a refused batch sends
/// nothing.
#[test]
fn batches_and_staged_frames_go_out_in_order() {
    let mut w = World::new();
    let mut tx = sender(w.dev, 32, 18);
    let frames: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            udp_frame(
                MAC_B,
                Ipv4Addr::LOCALHOST,
                GROUP,
                (1, 2),
                20 + 37 * i,
                i as u8,
            )
        })
        .collect();
    let mut at = 0;
    let sgls: Vec<[Sge; 1]> = frames
        .iter()
        .map(|f| {
            w.mem.write(at, f);
            let s = [w.sge(at, f.len())];
            at += 512;
            s
        })
        .collect();
    let wrs: Vec<SendWr<'_>> = sgls
        .iter()
        .enumerate()
        .map(|(i, s)| SendWr::send(i as u64, s).with_flags(SendFlags::IP_CSUM))
        .collect();
    let short = [w.sge(0, 17)];
    let bad = [wrs[0], SendWr::send(99, &short)];
    // SAFETY: refused: nothing written.
    let e = unsafe { tx.sq.post_all(&bad) }.unwrap_err();
    assert_eq!(
        (e.index, e.error),
        (1, PostError::FrameTooShort { len: 17, min: 18 })
    );
    w.dev.run_until_idle();
    assert!(w.rx_cq.is_empty());
    w.expect(6);
    // SAFETY: the entries name the registered arena.
    unsafe { tx.sq.post_all(&wrs[..3]) }.unwrap();
    for wr in &wrs[3..5] {
        // SAFETY: as above.
        unsafe { tx.sq.stage(wr) }.unwrap();
    }
    PostSend::ring(&mut tx.sq);
    // SAFETY: as above.
    unsafe { tx.sq.post(&wrs[5].signaled()) }.unwrap();
    let got = w.arrived(6);
    for (f, want) in got.iter().zip(&frames) {
        assert_eq!(f, &with_checksums(want));
    }
    completed(&mut tx.cq, &[5]);
}

/// A prepared frame: its posts set the IPv4 total length and the UDP length for each payload
/// (none too), the device its checksums; around a small ring several times.
#[test]
fn prepared_frames_carry_their_lengths() {
    for min_inline in [0u16, 18] {
        let mut w = World::new();
        let mut tx = sender(w.dev, 8, min_inline);
        let template = udp_frame(MAC_B, Ipv4Addr::new(10, 1, 2, 3), GROUP, (5000, 6000), 0, 0);
        assert_eq!(template.len(), 42);
        let p = tx
            .sq
            .prepare_frame(
                &template,
                SendFlags::IP_CSUM | SendFlags::SIGNALED,
                FrameLengths::IPV4_UDP,
            )
            .unwrap();
        let payload: Vec<u8> = (0..1400).map(|i| (i * 13) as u8).collect();
        w.mem.write(0, &payload);
        let lens = [22usize, 0, 1, 333, 1400, 58, 7, 100];
        let rounds = if cfg!(miri) { 1 } else { 3 };
        let mut id = 0u64;
        for _ in 0..rounds {
            w.expect(lens.len());
            for &len in &lens {
                // SAFETY: the payload is in the registered arena.
                unsafe { tx.sq.post_frame(&p, id, w.sge(0, len)) }.unwrap();
                id += 1;
            }
            let got = w.arrived(lens.len());
            for (f, &len) in got.iter().zip(&lens) {
                let mut want =
                    udp_frame(MAC_B, Ipv4Addr::new(10, 1, 2, 3), GROUP, (5000, 6000), 0, 0);
                want.extend_from_slice(&payload[..len]);
                assert_eq!(be16(f, 16), (28 + len) as u16, "IPv4 total length");
                assert_eq!(be16(f, 38), (8 + len) as u16, "UDP length");
                // `udp_frame` wrote the lengths of an empty payload: set them as the post does.
                want[16..18].copy_from_slice(&((28 + len) as u16).to_be_bytes());
                want[38..40].copy_from_slice(&((8 + len) as u16).to_be_bytes());
                assert_eq!(f, &with_checksums(&want), "payload {len}, min {min_inline}");
                assert_eq!(checksums_ok(f), (true, true));
            }
            let ids: Vec<u64> = (id - lens.len() as u64..id).collect();
            completed(&mut tx.cq, &ids);
        }
    }
}

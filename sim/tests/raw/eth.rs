//! Raw Ethernet by hand: frames, an independent checksum, raw packet QPs and their send WQEs
//! (control, Ethernet segment with inlined header bytes, data or inline segments), and
//! receive work queue WQEs, written as libmlx5 and DPDK write them. Nothing here allocates
//! but [`udp_frame`], so the zero-allocation test can drive it.
#![allow(dead_code)]

use std::net::Ipv4Addr;

use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::prm::wqe::{CtrlSeg, DataSeg, inline_byte_count};
use zverbs_sim::{
    CqConfig, DEFAULT_RSS_KEY, Device, FlowAttr, FlowDest, FlowSpec, QpConfig, QpType, RssConfig,
    RxHashFields, SimWq, Striding, WqConfig,
};

use super::{RawCq, RawQp, Sg};

pub const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0a];
pub const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x0b];
pub const SRC_MAC: [u8; 6] = [0x0c, 0x42, 0xa1, 0x11, 0x22, 0x33];
pub const GROUP: Ipv4Addr = Ipv4Addr::new(239, 1, 2, 3);
pub const SIGNALED: u8 = 0x08;

/// An IPv4/UDP frame with both checksums 0 and `payload` bytes counting up from `seed`.
pub fn udp_frame(
    dst_mac: [u8; 6],
    src: Ipv4Addr,
    dst: Ipv4Addr,
    ports: (u16, u16),
    payload: usize,
    seed: u8,
) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&dst_mac);
    f.extend_from_slice(&SRC_MAC);
    f.extend_from_slice(&[0x08, 0x00]);
    let ip_len = (20 + 8 + payload) as u16;
    f.extend_from_slice(&[0x45, 0x00]);
    f.extend_from_slice(&ip_len.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0x40, 0, 0x40, 17, 0, 0]);
    f.extend_from_slice(&src.octets());
    f.extend_from_slice(&dst.octets());
    f.extend_from_slice(&ports.0.to_be_bytes());
    f.extend_from_slice(&ports.1.to_be_bytes());
    f.extend_from_slice(&((8 + payload) as u16).to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    f.extend((0..payload).map(|i| seed.wrapping_add(i as u8)));
    f
}

/// The 32-bit sum of `b` as big-endian 16-bit words, an odd byte padded.
pub fn sum(b: &[u8]) -> u32 {
    let mut s = 0u32;
    let mut i = 0;
    while i < b.len() {
        let hi = u32::from(b[i]) << 8;
        let lo = b.get(i + 1).map_or(0, |&x| u32::from(x));
        s += hi | lo;
        i += 2;
    }
    s
}

pub fn fold(mut s: u32) -> u16 {
    while s >> 16 != 0 {
        s = (s >> 16) + (s & 0xffff);
    }
    s as u16
}

/// Whether the IPv4 header and UDP checksums of an untagged UDP frame are right.
pub fn checksums_ok(f: &[u8]) -> (bool, bool) {
    let ip = &f[14..34];
    let l3 = fold(sum(ip)) == 0xffff;
    let udp = &f[34..];
    let mut pseudo = [0u8; 12];
    pseudo[..8].copy_from_slice(&ip[12..20]);
    pseudo[9] = 17;
    pseudo[10..12].copy_from_slice(&(udp.len() as u16).to_be_bytes());
    let l4 = fold(sum(&pseudo) + sum(udp)) == 0xffff;
    (l3, l4)
}

/// A raw packet QP on `dev`, its CQ, in RTS.
pub fn raw_qp(dev: &Device, recv_wr: u32) -> (RawQp, RawCq) {
    let cq = dev.create_cq(CqConfig { cqe: 64 }).unwrap();
    let cfg = QpConfig {
        send_cq: cq.cqn,
        recv_cq: cq.cqn,
        max_send_wr: 4,
        max_send_sge: 2,
        max_inline_data: 64,
        max_recv_wr: recv_wr,
        max_recv_sge: 1,
        ..QpConfig::default()
    };
    let qp = dev.create_qp_ext(cfg, QpType::RawPacket, None).unwrap();
    dev.ready_raw(qp.qpn).unwrap();
    (RawQp::new(qp), RawCq::new(cq))
}

/// A flow rule of `spec` at `priority` steering to `dest`, tagging with `tag`.
pub fn flow_attr(priority: u16, spec: FlowSpec, dest: FlowDest, tag: Option<u32>) -> FlowAttr {
    FlowAttr {
        priority,
        spec,
        dest,
        tag,
    }
}

/// A receive work queue on CQ `cq` of `max_wr` WQEs of one scatter entry: an ordinary one, or
/// one of 2^`log_num_strides` strides of 64 bytes per WQE.
pub fn wq_config(cq: u32, max_wr: u32, log_num_strides: Option<u32>) -> WqConfig {
    WqConfig {
        cq,
        max_wr,
        max_sge: 1,
        striding: log_num_strides.map(|log_num_strides| Striding {
            log_stride_bytes: 6,
            log_num_strides,
        }),
        two_byte_shift: false,
    }
}

/// An RSS QP over a new indirection table of the work queues `wqns`, hashing `fields` under
/// the default key: the RSS QP's handle and the table's.
pub fn rss_qp(dev: &Device, wqns: &[u32], fields: RxHashFields) -> (u32, u32) {
    let ind_table = dev.create_rwq_ind_table(wqns).unwrap();
    let rss = dev
        .create_rss_qp(RssConfig {
            ind_table,
            fields,
            key: DEFAULT_RSS_KEY,
        })
        .unwrap();
    (rss, ind_table)
}

/// A ready work queue of `cfg` alone behind an RSS QP that hashes nothing, and a rule at
/// priority 0 that steers frames of `spec` there, tagged with `tag`: the queue and the RSS QP.
pub fn steered_wq(dev: &Device, cfg: WqConfig, spec: FlowSpec, tag: Option<u32>) -> (SimWq, u32) {
    let w = dev.create_wq(cfg).unwrap();
    dev.ready_wq(w.wqn).unwrap();
    let (rss, _) = rss_qp(dev, &[w.wqn], RxHashFields::empty());
    dev.create_flow(flow_attr(0, spec, FlowDest::Rss(rss), tag))
        .unwrap();
    (w, rss)
}

/// What follows a raw WQE's Ethernet segment.
pub enum Body<'a> {
    /// Data segments.
    Sges(&'a [Sg]),
    /// One inline segment.
    Inline(&'a [u8]),
}

/// Posts a raw SEND: control, the Ethernet segment with `hdr` inlined, then `body`.
pub fn post_frame(qp: &mut RawQp, hdr: &[u8], body: Body<'_>, cs_flags: u8, mss: u16) -> u16 {
    let mut w = [0u8; 1024];
    let e = 16;
    w[e + 4] = cs_flags;
    w[e + 6..e + 8].copy_from_slice(&mss.to_be_bytes());
    w[e + 12..e + 14].copy_from_slice(&(hdr.len() as u16).to_be_bytes());
    w[e + 14..e + 14 + hdr.len()].copy_from_slice(hdr);
    let mut ds = 1 + 1 + hdr.len().saturating_sub(2).div_ceil(16);
    match body {
        Body::Sges(sges) => {
            for &(addr, len, lkey) in sges {
                DataSeg::new_unchecked(&mut w[ds * 16..ds * 16 + 16]).set(len, lkey, addr);
                ds += 1;
            }
        }
        Body::Inline(data) => {
            let o = ds * 16;
            w[o..o + 4].copy_from_slice(&inline_byte_count(data.len() as u32).to_be_bytes());
            w[o + 4..o + 4 + data.len()].copy_from_slice(data);
            ds += (data.len() + 4).div_ceil(16);
        }
    }
    let index = qp.sq_pi as u16;
    let qpn = qp.qpn();
    CtrlSeg::new_unchecked(&mut w[..16]).set(index, opcode::SEND, 0, qpn, SIGNALED, ds as u8, 0);
    qp.write_blocks(&w[..ds.div_ceil(4) * 64]);
    index
}

/// The send's CQE and the loopback receive's, in whichever order the CQ holds them.
pub fn send_and_recv(cq: &mut RawCq) -> ([u8; 64], [u8; 64]) {
    let a = cq.poll().expect("a first CQE");
    let b = cq.poll().expect("a second CQE");
    if a[63] >> 4 == 0 { (a, b) } else { (b, a) }
}

pub fn be16(c: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([c[at], c[at + 1]])
}

pub fn be32(c: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([c[at], c[at + 1], c[at + 2], c[at + 3]])
}

/// Writes WQE `k` of work queue `w` (an ordinary one: data segments from offset 0; a
/// striding one: the next segment, then one data segment) and publishes `k + 1` WQEs.
pub fn post_wq(w: &SimWq, k: usize, sges: &[Sg]) {
    let stride = w.layout.stride as usize;
    let slot = k & (w.layout.wqe_cnt as usize - 1);
    let first = if w.striding.is_some() { 1 } else { 0 };
    for (i, &(addr, len, lkey)) in sges.iter().enumerate() {
        let mut seg = [0u8; 16];
        DataSeg::new_unchecked(&mut seg).set(len, lkey, addr);
        // SAFETY: segment `first + i` of WQE `slot` in the device's ring.
        unsafe {
            std::ptr::copy_nonoverlapping(
                seg.as_ptr(),
                w.layout.buf.as_ptr().add(slot * stride + (first + i) * 16),
                16,
            )
        };
    }
    // SAFETY: word 0 of the WQ's doorbell record, which the device loads atomically.
    unsafe { std::sync::atomic::AtomicU32::from_ptr(w.dbrec.as_ptr()) }
        .store((k as u32 + 1).to_be(), std::sync::atomic::Ordering::Release);
}

//! Receive steering as plain data: flow rules (`ibv_create_flow`), receive work queues
//! (`ibv_create_wq`, striding or not), indirection tables (`ibv_create_rwq_ind_table`), RSS
//! QPs (`ibv_create_qp_ex` with `rx_hash_conf`) and the Toeplitz hash they spread by.
//!
//! The engine applies them (`engine/raw.rs`); this module only says whether a frame matches a
//! rule (what a rule matches, [`FlowSpec`], is `zverbs-core`'s, shared with `zverbs`) and what
//! a hash is, so the facts are written once.

use crate::eth::{Headers, IPPROTO_TCP};

/// What a flow rule matches, and the transport a rule or hash names: the one definition every
/// backend shares.
pub use zverbs_core::flow::{DEFAULT_RSS_KEY, FLOW_PRIORITIES, FlowSpec, L4Proto, MAX_FLOW_TAG};

/// Whether a frame with headers `h` matches `spec`.
pub(crate) fn matches(spec: &FlowSpec, h: &Headers) -> bool {
    let eq = |want: Option<[u8; 6]>, got: [u8; 6]| want.is_none_or(|w| w == got);
    if !eq(spec.dst_mac, h.dst_mac)
        || !eq(spec.src_mac, h.src_mac)
        || spec.ether_type.is_some_and(|t| t != h.ether_type)
    {
        return false;
    }
    if !spec.needs_ipv4() {
        return true;
    }
    let Some(ip) = h.ipv4 else { return false };
    if spec.src_ip.is_some_and(|a| a.octets() != ip.src)
        || spec.dst_ip.is_some_and(|a| a.octets() != ip.dst)
    {
        return false;
    }
    let Some(proto) = spec.l4 else { return true };
    let Some(l4) = h.l4.filter(|l| l.proto == proto.number()) else {
        return false;
    };
    spec.src_port.is_none_or(|p| p == l4.src_port) && spec.dst_port.is_none_or(|p| p == l4.dst_port)
}

/// Where a flow rule sends the frames it matches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlowDest {
    /// The receive queue of a raw packet QP, by QPN.
    RawQp(u32),
    /// An RSS QP ([`Device::create_rss_qp`](crate::Device::create_rss_qp)), by its handle.
    Rss(u32),
}

/// A flow rule to create (`ibv_create_flow` with `IBV_FLOW_ATTR_NORMAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowAttr {
    /// `attr.priority`, 0 to 15: lower is looked at first.
    pub priority: u16,
    /// What the rule matches.
    pub spec: FlowSpec,
    /// Where the frames go.
    pub dest: FlowDest,
    /// A flow tag (`IBV_FLOW_SPEC_ACTION_TAG`, below 2^24), reported in the low 24 bits of
    /// `sop_drop_qpn` of the receive CQE of every frame the rule steers; `None` reports 0.
    pub tag: Option<u32>,
}

/// The table a rule of `attr` sits in, looked at in ascending order: user priority *p* is the
/// ConnectX's `2p + 1` (don't-trap rules, not modelled, would take `2p`), a multicast-only rule
/// the multicast table 32.
pub(crate) fn core_priority(attr: &FlowAttr) -> u16 {
    if attr.spec.multicast_only() {
        32
    } else {
        2 * attr.priority + 1
    }
}

bitflags::bitflags! {
    /// The fields an RSS QP hashes (`rx_hash_fields_mask`, the values of `IBV_RX_HASH_*`).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct RxHashFields: u64 {
        /// IPv4 source address.
        const SRC_IPV4 = 1 << 0;
        /// IPv4 destination address.
        const DST_IPV4 = 1 << 1;
        /// IPv6 source address (not modelled: refused).
        const SRC_IPV6 = 1 << 2;
        /// IPv6 destination address (not modelled: refused).
        const DST_IPV6 = 1 << 3;
        /// TCP source port.
        const SRC_PORT_TCP = 1 << 4;
        /// TCP destination port.
        const DST_PORT_TCP = 1 << 5;
        /// UDP source port.
        const SRC_PORT_UDP = 1 << 6;
        /// UDP destination port.
        const DST_PORT_UDP = 1 << 7;
    }
}

/// The Toeplitz hash of `input` under `key`: for every set bit of the input (most significant
/// first) the 32 key bits starting at that bit's position are XORed into the result.
pub fn toeplitz(key: &[u8; 40], input: &[u8]) -> u32 {
    let key_bit = |i: usize| -> u32 {
        key.get(i / 8)
            .map_or(0, |b| u32::from((b >> (7 - i % 8)) & 1))
    };
    let mut window = u32::from_be_bytes([key[0], key[1], key[2], key[3]]);
    let mut result = 0;
    for (j, byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                result ^= window;
            }
            window = (window << 1) | key_bit(j * 8 + bit + 32);
        }
    }
    result
}

/// An RSS QP to create: the indirection table its hash picks a receive work queue from, the
/// fields it hashes and the key (`rx_hash_conf` with `IBV_RX_HASH_FUNC_TOEPLITZ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RssConfig {
    /// The indirection table's handle ([`Device::create_rwq_ind_table`](crate::Device::create_rwq_ind_table)).
    pub ind_table: u32,
    /// The fields hashed; empty: every frame goes to the table's first entry.
    pub fields: RxHashFields,
    /// The 40-byte Toeplitz key.
    pub key: [u8; 40],
}

impl RssConfig {
    /// Why the configuration cannot be an RSS QP, if it cannot (the kernel's rules).
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        if self
            .fields
            .intersects(RxHashFields::SRC_IPV6 | RxHashFields::DST_IPV6)
        {
            return Err("IPv6 hash fields are not modelled by the software device");
        }
        let tcp = RxHashFields::SRC_PORT_TCP | RxHashFields::DST_PORT_TCP;
        let udp = RxHashFields::SRC_PORT_UDP | RxHashFields::DST_PORT_UDP;
        if self.fields.intersects(tcp) && self.fields.intersects(udp) {
            return Err("an RSS QP hashes the ports of one transport only (TCP or UDP)");
        }
        Ok(())
    }

    /// The hash of a frame with headers `h` and the `rss_hash_type` byte of its CQE (bits 3:2
    /// IPv4 = 1, bits 7:6 TCP = 1 / UDP = 2), over the selected fields the frame has, in the
    /// order source address, destination address, source port, destination port. A frame
    /// with none of them hashes to 0 with type 0.
    pub(crate) fn hash(&self, h: &Headers) -> (u32, u8) {
        let f = self.fields;
        let mut input = [0u8; 12];
        let mut n = 0;
        let mut ty = 0;
        let mut put = |bytes: &[u8], n: &mut usize| {
            input[*n..*n + bytes.len()].copy_from_slice(bytes);
            *n += bytes.len();
        };
        if let Some(ip) = h.ipv4 {
            if f.contains(RxHashFields::SRC_IPV4) {
                put(&ip.src, &mut n);
            }
            if f.contains(RxHashFields::DST_IPV4) {
                put(&ip.dst, &mut n);
            }
            if n != 0 {
                ty |= 1 << 2;
            }
        }
        if let Some(l4) = h.l4 {
            let (src, dst, t) = if l4.proto == IPPROTO_TCP {
                (RxHashFields::SRC_PORT_TCP, RxHashFields::DST_PORT_TCP, 1)
            } else {
                (RxHashFields::SRC_PORT_UDP, RxHashFields::DST_PORT_UDP, 2)
            };
            let before = n;
            if f.contains(src) {
                put(&l4.src_port.to_be_bytes(), &mut n);
            }
            if f.contains(dst) {
                put(&l4.dst_port.to_be_bytes(), &mut n);
            }
            if n != before {
                ty |= t << 6;
            }
        }
        if n == 0 {
            return (0, 0);
        }
        (toeplitz(&self.key, &input[..n]), ty)
    }
}

/// The layout of a striding ("multi-packet") receive work queue's WQEs
/// (`mlx5dv_striding_rq_init_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Striding {
    /// log2 of the stride size in bytes, 6 to 13.
    pub log_stride_bytes: u32,
    /// log2 of the strides per WQE, 3 to 16 (a ConnectX with `ext_stride_num_range`).
    pub log_num_strides: u32,
}

impl Striding {
    /// Bytes per stride.
    pub const fn stride_bytes(&self) -> u32 {
        1 << self.log_stride_bytes
    }

    /// Strides per WQE.
    pub const fn num_strides(&self) -> u32 {
        1 << self.log_num_strides
    }
}

/// A receive work queue to create (`ibv_create_wq` with `IBV_WQT_RQ`, and
/// `mlx5dv_create_wq`'s striding attributes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WqConfig {
    /// CQN of the CQ its completions go to.
    pub cq: u32,
    /// WQEs the ring must hold, 1 to 32768 (rounded up to a power of two).
    pub max_wr: u32,
    /// Scatter entries per WQE of an ordinary queue, 1 to 64; a striding WQE has exactly one.
    pub max_sge: u32,
    /// Striding WQEs (one buffer of strides each); `None`: one packet per WQE.
    pub striding: Option<Striding>,
    /// The two-byte shift of a striding queue (`two_byte_shift_en`): not modelled, refused.
    pub two_byte_shift: bool,
}

/// A created receive work queue: its number, the ring as `mlx5dv_init_obj(MLX5DV_OBJ_RWQ)`
/// reports it, and its doorbell record (word 0: the count of WQEs posted, big-endian).
///
/// An ordinary queue's WQE is `stride / 16` data segments from offset 0, a short list ending
/// with `MLX5_INVALID_LKEY`, as libmlx5's `ibv_post_wq_recv` writes it. A striding queue's WQE
/// is 32 bytes: a 16-byte `mlx5_wqe_srq_next_seg` (left zero for a cyclic queue; the device
/// ignores it) and one data segment over `num_strides × stride_bytes` bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimWq {
    /// The WQ number.
    pub wqn: u32,
    /// The WQE ring. Valid until the WQ is destroyed or the device dropped.
    pub layout: zverbs_mlx5dv::WqLayout,
    /// The doorbell record.
    pub dbrec: core::ptr::NonNull<u32>,
    /// The striding layout, for a striding queue.
    pub striding: Option<Striding>,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Microsoft's RSS verification vectors for IPv4: 66.9.149.187:2794 → 161.142.100.80:1766.
    #[test]
    fn toeplitz_matches_the_verification_suite() {
        let ips = [66, 9, 149, 187, 161, 142, 100, 80];
        assert_eq!(toeplitz(&DEFAULT_RSS_KEY, &ips), 0x323e_8fc2);
        let mut with_ports = [0u8; 12];
        with_ports[..8].copy_from_slice(&ips);
        with_ports[8..10].copy_from_slice(&2794u16.to_be_bytes());
        with_ports[10..].copy_from_slice(&1766u16.to_be_bytes());
        assert_eq!(toeplitz(&DEFAULT_RSS_KEY, &with_ports), 0x51cc_c178);
    }
}

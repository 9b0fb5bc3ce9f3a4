//! Raw Ethernet's plain data: what a flow rule matches, how an RSS QP hashes, the shape of a
//! receive work queue, what a device can do with raw packets, and the checks of the process's
//! `CAP_NET_RAW` capability.

use std::net::Ipv4Addr;

pub use zverbs_core::flow::{
    DEFAULT_RSS_KEY, FLOW_PRIORITIES, FlowSpec, FlowSpecError, L4Proto, MAX_FLOW_TAG, multicast_mac,
};

/// A flow steering rule (`ibv_create_flow`, `IBV_FLOW_ATTR_NORMAL`): which arriving frames a
/// raw packet QP or an RSS QP receives ([`FlowSpec`], the match every backend shares: each
/// field given must be equal, each `None` is a wildcard), at which priority, and with which
/// flow tag.
///
/// The three rules market data needs have constructors: [`FlowRule::dst_mac`] (perftest's),
/// [`FlowRule::multicast`] (a group and UDP port) and [`FlowRule::five_tuple`]; any other
/// match is a [`FlowSpec`] made a rule with [`FlowRule::of`].
///
/// ```
/// use std::net::Ipv4Addr;
/// use zverbs::{FlowRule, FlowSpec, L4Proto};
///
/// let group = Ipv4Addr::new(239, 1, 2, 3);
/// let rule = FlowRule::multicast(group, 31000).tag(7);
/// assert_eq!(rule.spec.dst_mac, Some([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]));
/// let one = FlowRule::five_tuple(L4Proto::Udp, (Ipv4Addr::new(10, 0, 0, 1), 5000), (group, 31000))
///     .priority(2);
/// assert_eq!(one.priority, 2);
/// let arp = FlowRule::of(FlowSpec { ether_type: Some(0x0806), ..FlowSpec::ANY });
/// assert!(arp.check().is_ok());
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowRule {
    /// What the rule matches.
    pub spec: FlowSpec,
    /// 0 to 15, lower looked at first. A multicast-only rule (a multicast destination MAC, or
    /// no MAC and a multicast destination address) sits in the device's one multicast table
    /// whatever its priority, as on a ConnectX.
    pub priority: u16,
    /// A flow tag (`IBV_FLOW_SPEC_ACTION_TAG`, at most [`MAX_FLOW_TAG`]) that the receive
    /// completion of every frame the rule steers carries.
    pub tag: Option<u32>,
}

impl FlowRule {
    /// Every frame (an `ETH` spec with a zero mask).
    pub const ANY: Self = Self::of(FlowSpec::ANY);

    /// A rule of `spec`, at priority 0, untagged.
    pub const fn of(spec: FlowSpec) -> Self {
        Self {
            spec,
            priority: 0,
            tag: None,
        }
    }

    /// Frames to `mac` (perftest's rule: the port's own MAC).
    pub const fn dst_mac(mac: [u8; 6]) -> Self {
        Self::of(FlowSpec::dst_mac(mac))
    }

    /// UDP datagrams to multicast group `group`, port `port` ([`FlowSpec::multicast`]: the
    /// group's MAC, address and port, as every subscriber of the group writes them).
    pub const fn multicast(group: Ipv4Addr, port: u16) -> Self {
        Self::of(FlowSpec::multicast(group, port))
    }

    /// UDP datagrams to `ip`:`port`, any MAC.
    pub const fn udp_dst(ip: Ipv4Addr, port: u16) -> Self {
        Self::of(FlowSpec::udp_dst(ip, port))
    }

    /// One flow by its 5-tuple (transport, source and destination address and port).
    pub const fn five_tuple(l4: L4Proto, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16)) -> Self {
        Self::of(FlowSpec::five_tuple(l4, src, dst))
    }

    /// The same rule at priority `p`.
    pub const fn priority(mut self, p: u16) -> Self {
        self.priority = p;
        self
    }

    /// The same rule, tagging what it steers with `tag`.
    pub const fn tag(mut self, tag: u32) -> Self {
        self.tag = Some(tag);
        self
    }

    /// Whether a frame's destination is multicast for this rule (a ConnectX puts such rules
    /// in its multicast table).
    pub const fn multicast_only(&self) -> bool {
        self.spec.multicast_only()
    }

    /// Why the rule cannot be created, checked before the device is asked (the kernel's own
    /// checks, `ib_uverbs_ex_create_flow` and mlx5's `parse_flow_attr`).
    pub fn check(&self) -> Result<(), FlowRuleError> {
        if self.priority >= FLOW_PRIORITIES {
            return Err(FlowRuleError::Priority(self.priority));
        }
        self.spec.check()?;
        if let Some(t) = self.tag
            && t > MAX_FLOW_TAG
        {
            return Err(FlowRuleError::TagTooLarge(t));
        }
        Ok(())
    }
}

impl From<FlowSpec> for FlowRule {
    fn from(spec: FlowSpec) -> Self {
        Self::of(spec)
    }
}

/// Why a [`FlowRule`] was refused: by the library's check before the device was asked, or by
/// the kernel (its errno mapped to what it means for a rule).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FlowRuleError {
    /// A priority above 15.
    #[error("flow rule priority {0} is above 15")]
    Priority(u16),
    /// A port without its transport.
    #[error("a flow rule that names a port needs its transport (l4: UDP or TCP)")]
    PortWithoutTransport,
    /// An IPv4 or transport field with another EtherType than IPv4.
    #[error("a flow rule with IPv4 or transport fields needs EtherType 0x0800, not {0:#06x}")]
    EtherTypeNotIpv4(u16),
    /// A flow tag of more than 24 bits.
    #[error("flow tag {0:#x} has more than 24 bits")]
    TagTooLarge(u32),
    /// Another rule with the same match carries another tag (EEXIST).
    #[error("a rule with the same match and another flow tag exists on this port")]
    ConflictingTag,
    /// The QP cannot take flow rules (only raw packet and RSS QPs, and UD, do: EINVAL).
    #[error("the QP cannot take flow rules: only raw packet and RSS QPs can")]
    WrongQp,
    /// The device cannot match what the rule asks (EOPNOTSUPP).
    #[error("the device cannot match this rule: {0}")]
    Unsupported(String),
}

impl From<FlowSpecError> for FlowRuleError {
    fn from(e: FlowSpecError) -> Self {
        match e {
            FlowSpecError::PortWithoutTransport => FlowRuleError::PortWithoutTransport,
            FlowSpecError::EtherTypeNotIpv4(t) => FlowRuleError::EtherTypeNotIpv4(t),
        }
    }
}

/// The hash an RSS QP spreads frames with (`rx_hash_conf`, `IBV_RX_HASH_FUNC_TOEPLITZ`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RxHash {
    /// The fields hashed; empty: every frame goes to the indirection table's first queue
    /// (allowed only with a table of one queue).
    pub fields: RxHashFields,
    /// The Toeplitz key: a ConnectX takes exactly 40 bytes.
    pub key: [u8; 40],
}

impl Default for RxHash {
    /// Source and destination IPv4 address and UDP port, under Microsoft's verification key.
    fn default() -> Self {
        Self {
            fields: RxHashFields::SRC_IPV4
                | RxHashFields::DST_IPV4
                | RxHashFields::SRC_PORT_UDP
                | RxHashFields::DST_PORT_UDP,
            key: DEFAULT_RSS_KEY,
        }
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

impl RxHash {
    /// Why the hash cannot be an RSS QP's (the kernel's `create_rss_raw_qp_tir` rules).
    pub(crate) fn check(&self, table_len: usize) -> Result<(), &'static str> {
        let tcp = RxHashFields::SRC_PORT_TCP | RxHashFields::DST_PORT_TCP;
        let udp = RxHashFields::SRC_PORT_UDP | RxHashFields::DST_PORT_UDP;
        if self.fields.intersects(tcp) && self.fields.intersects(udp) {
            return Err("an RSS QP hashes the ports of one transport only (TCP or UDP)");
        }
        if self.fields.is_empty() && table_len != 1 {
            return Err("an RSS QP that hashes no field needs an indirection table of one queue");
        }
        Ok(())
    }
}

/// The strides of a striding ("multi-packet") receive work queue
/// (`mlx5dv_striding_rq_init_attr`): each WQE is one buffer of `2^log_num_strides` strides
/// of `2^log_stride_size` bytes, and packets land in consecutive strides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Strides {
    /// log2 of the strides per WQE: 9 to 16 on a ConnectX (3 to 16 with
    /// `ext_stride_num_range`, which the software device models).
    pub log_num_strides: u8,
    /// log2 of the stride size in bytes, 6 to 13.
    pub log_stride_size: u8,
}

impl Strides {
    /// Bytes per stride.
    pub const fn stride_bytes(&self) -> u32 {
        1 << self.log_stride_size
    }

    /// Strides per WQE.
    pub const fn num_strides(&self) -> u32 {
        1 << self.log_num_strides
    }

    /// Bytes of one WQE's buffer.
    pub const fn wqe_bytes(&self) -> u32 {
        self.stride_bytes() * self.num_strides()
    }

    /// Why the strides cannot be a work queue's (a ConnectX's ranges, brief §4.1).
    pub(crate) fn check(&self) -> Result<(), &'static str> {
        if !(6..=13).contains(&self.log_stride_size) {
            return Err("a stride is 2^6 to 2^13 bytes");
        }
        if !(3..=16).contains(&self.log_num_strides) {
            return Err("a striding WQE has 2^3 to 2^16 strides");
        }
        Ok(())
    }
}

/// What a receive work queue's WQEs are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WqShape {
    /// One packet per WQE, `max_sge` scatter entries each (`ibv_create_wq`).
    Ordinary {
        /// Scatter entries per WQE.
        max_sge: u32,
    },
    /// Many packets per WQE (`mlx5dv_create_wq` with `MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ`):
    /// driven directly only.
    Striding(Strides),
}

/// What a device can do with raw packets (`ibv_query_device_ex`'s `raw_packet_caps` and
/// capability flags).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RawCaps {
    /// `IBV_RAW_PACKET_CAP_*` (`CVLAN_STRIPPING` 1, `SCATTER_FCS` 2, `IP_CSUM` 4).
    pub raw_packet_caps: u32,
    /// `IBV_DEVICE_RAW_IP_CSUM`: the device computes IPv4/UDP/TCP checksums on send.
    pub ip_csum: bool,
    /// `IBV_DEVICE_MANAGED_FLOW_STEERING`: flow rules can steer to QPs.
    pub flow_steering: bool,
}

impl RawCaps {
    /// Whether the device has raw packet QPs at all: one that reports none of the raw packet
    /// capabilities and no managed flow steering (rxe, siw) cannot receive what a raw QP is
    /// for, and rxe refuses the QP type.
    pub fn has_raw_qps(&self) -> bool {
        self.raw_packet_caps != 0 || self.ip_csum || self.flow_steering
    }
}

/// The bit of `CAP_NET_RAW` in a capability set (`linux/capability.h`).
pub const CAP_NET_RAW_BIT: u32 = 13;

/// Whether the effective capabilities in a `/proc/<pid>/status` text (`CapEff:`, hexadecimal)
/// hold `CAP_NET_RAW`; `None` when the line is missing or unreadable.
pub fn cap_net_raw_in_status(status: &str) -> Option<bool> {
    let line = status.lines().find(|l| l.starts_with("CapEff:"))?;
    let bits = u64::from_str_radix(line["CapEff:".len()..].trim(), 16).ok()?;
    Some(bits & (1 << CAP_NET_RAW_BIT) != 0)
}

/// What a raw packet QP was created with: its port and its frame limits (kept in the QP).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RawInfo {
    /// The port it sends from and its rules match on.
    pub(crate) port: u8,
    /// Bytes of each frame its send WQEs inline (0 or 18).
    pub(crate) min_inline: u16,
    /// The largest frame it sends.
    pub(crate) max_frame: u32,
    /// Whether its device computes checksums on send ([`RawCaps::ip_csum`]): without it a
    /// send asking for them is refused.
    pub(crate) ip_csum: bool,
}

/// Whether the calling thread holds `CAP_NET_RAW` in its effective set (its
/// `/proc/thread-self/status`'s `CapEff`: capabilities are per thread, and the kernel checks
/// the caller's); `None` where that cannot be read (not Linux, no procfs).
pub fn has_cap_net_raw() -> Option<bool> {
    let status = std::fs::read_to_string("/proc/thread-self/status")
        .or_else(|_| std::fs::read_to_string("/proc/self/status"))
        .ok()?;
    cap_net_raw_in_status(&status)
}

/// The minimum inline header size (bytes of the frame copied into the Ethernet segment) a
/// device of PCI part `vendor_part_id` needs, decided by device ID as DPDK does without DevX:
/// 18 (the L2 header with one VLAN tag) for ConnectX-4 and ConnectX-4 Lx and their VFs, and
/// for any device not known to need none; 0 for ConnectX-5 and later PFs. libmlx5 learns it
/// from the context answer's `eth_min_inline`, which no verb reports (brief §1.2).
pub const fn min_inline_for_part(vendor_part_id: u32) -> u16 {
    match vendor_part_id {
        // ConnectX-5, -5 Ex, -6, -6 Dx, -6 Lx, -7, -8; BlueField, -2, -3.
        0x1017 | 0x1019 | 0x101b | 0x101d | 0x101f | 0x1021 | 0x1023 | 0xa2d2 | 0xa2d6 | 0xa2dc => {
            0
        }
        _ => 18,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_rules_are_named() {
        assert_eq!(
            FlowRule::ANY.priority(16).check(),
            Err(FlowRuleError::Priority(16))
        );
        assert_eq!(FlowRule::ANY.priority(15).check(), Ok(()));
        let port_only = FlowRule::of(FlowSpec {
            dst_port: Some(1),
            ..FlowSpec::ANY
        });
        assert_eq!(port_only.check(), Err(FlowRuleError::PortWithoutTransport));
        let arp = FlowRule::of(FlowSpec {
            ether_type: Some(0x0806),
            ..FlowSpec::udp_dst(Ipv4Addr::LOCALHOST, 1)
        });
        assert_eq!(arp.check(), Err(FlowRuleError::EtherTypeNotIpv4(0x0806)));
        assert_eq!(
            FlowRule::ANY.tag(1 << 24).check(),
            Err(FlowRuleError::TagTooLarge(1 << 24))
        );
        assert_eq!(FlowRule::ANY.tag(MAX_FLOW_TAG).check(), Ok(()));
    }

    #[test]
    fn multicast_only_rules() {
        assert!(FlowRule::multicast(Ipv4Addr::new(239, 1, 2, 3), 1).multicast_only());
        assert!(FlowRule::udp_dst(Ipv4Addr::new(239, 1, 2, 3), 1).multicast_only());
        assert!(!FlowRule::udp_dst(Ipv4Addr::new(10, 0, 0, 1), 1).multicast_only());
        assert!(!FlowRule::dst_mac([2, 0, 0, 0, 0, 1]).multicast_only());
    }

    #[test]
    fn cap_net_raw_is_bit_13_of_cap_eff() {
        let with = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t0000000000002000\n";
        let without = "CapEff:\t000001ffffffdfff\n";
        assert_eq!(cap_net_raw_in_status(with), Some(true));
        assert_eq!(cap_net_raw_in_status(without), Some(false));
        assert_eq!(cap_net_raw_in_status("CapPrm:\t0\n"), None);
    }

    #[test]
    fn strides_and_hashes_are_checked() {
        let ok = Strides {
            log_num_strides: 9,
            log_stride_size: 6,
        };
        assert_eq!((ok.check(), ok.wqe_bytes()), (Ok(()), 512 * 64));
        for (n, s) in [(2, 6), (17, 6), (9, 5), (9, 14)] {
            let bad = Strides {
                log_num_strides: n,
                log_stride_size: s,
            };
            assert!(bad.check().is_err(), "{bad:?}");
        }
        let both = RxHash {
            fields: RxHashFields::SRC_PORT_TCP | RxHashFields::DST_PORT_UDP,
            key: DEFAULT_RSS_KEY,
        };
        assert!(both.check(4).is_err());
        let none = RxHash {
            fields: RxHashFields::empty(),
            key: DEFAULT_RSS_KEY,
        };
        assert!(none.check(2).is_err() && none.check(1).is_ok());
        assert!(RxHash::default().check(4).is_ok());
    }

    #[test]
    fn min_inline_by_part() {
        assert_eq!(min_inline_for_part(0x1013), 18); // ConnectX-4
        assert_eq!(min_inline_for_part(0x1015), 18); // ConnectX-4 Lx
        assert_eq!(min_inline_for_part(0x101b), 0); // ConnectX-6
        assert_eq!(min_inline_for_part(0), 18); // unknown: the safe size
    }
}

//! What a flow steering rule matches (`ibv_create_flow`, `IBV_FLOW_ATTR_NORMAL`), as plain
//! data: one [`FlowSpec`] for every backend, so that the facts (which fields imply an IPv4
//! frame, which rule is multicast-only, the multicast MAC of a group) are written once. The
//! `zverbs` crate's `FlowRule` is a `FlowSpec` with a priority and a flow tag; the software
//! device matches frames against it; the verbs backend writes it as `ibv_flow_spec`s.

use core::net::Ipv4Addr;

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;

/// The most flow rule priorities (`ibv_flow_attr.priority` 0..=15: lower is looked at first;
/// the kernel answers ENOMEM above, older kernels ENOSPC).
pub const FLOW_PRIORITIES: u16 = 16;

/// The largest flow tag (`IBV_FLOW_SPEC_ACTION_TAG`'s `tag_id` has 24 bits on mlx5; the tag
/// comes back in the low 24 bits of the receive CQE's `sop_drop_qpn`).
pub const MAX_FLOW_TAG: u32 = (1 << 24) - 1;

/// The transport a flow rule or an RSS hash names (`IBV_FLOW_SPEC_UDP` / `IBV_FLOW_SPEC_TCP`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum L4Proto {
    /// UDP.
    Udp,
    /// TCP.
    Tcp,
}

impl L4Proto {
    /// The IPv4 protocol number (17 for UDP, 6 for TCP).
    pub const fn number(self) -> u8 {
        match self {
            L4Proto::Udp => 17,
            L4Proto::Tcp => 6,
        }
    }
}

/// What a flow rule matches: each field given must be equal, each `None` is a wildcard (a
/// zero mask; a field is matched whole or not at all). Naming an IPv4 address or a transport
/// implies an IPv4 frame (as the kernel adds `ethertype == 0x0800`); naming a port needs its
/// transport ([`FlowSpec::check`]).
///
/// ```
/// use core::net::Ipv4Addr;
/// use zverbs_core::flow::{FlowSpec, L4Proto};
///
/// let group = Ipv4Addr::new(239, 1, 2, 3);
/// let md = FlowSpec::multicast(group, 31000);
/// assert_eq!(md.dst_mac, Some([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]));
/// assert!(md.multicast_only() && md.check().is_ok());
/// let one = FlowSpec::five_tuple(L4Proto::Tcp, (Ipv4Addr::LOCALHOST, 1), (group, 2));
/// assert_eq!(one.l4, Some(L4Proto::Tcp));
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FlowSpec {
    /// Destination MAC (`IBV_FLOW_SPEC_ETH` `dst_mac`).
    pub dst_mac: Option<[u8; 6]>,
    /// Source MAC.
    pub src_mac: Option<[u8; 6]>,
    /// EtherType, after a VLAN tag if the frame has one.
    pub ether_type: Option<u16>,
    /// IPv4 source address (`IBV_FLOW_SPEC_IPV4_EXT`).
    pub src_ip: Option<Ipv4Addr>,
    /// IPv4 destination address.
    pub dst_ip: Option<Ipv4Addr>,
    /// The transport.
    pub l4: Option<L4Proto>,
    /// Source port; needs `l4`.
    pub src_port: Option<u16>,
    /// Destination port; needs `l4`.
    pub dst_port: Option<u16>,
}

impl FlowSpec {
    /// Every frame (an `ETH` spec with a zero mask: promiscuous).
    pub const ANY: Self = Self {
        dst_mac: None,
        src_mac: None,
        ether_type: None,
        src_ip: None,
        dst_ip: None,
        l4: None,
        src_port: None,
        dst_port: None,
    };

    /// Frames to `mac` (perftest's rule: the port's own MAC).
    pub const fn dst_mac(mac: [u8; 6]) -> Self {
        Self {
            dst_mac: Some(mac),
            ..Self::ANY
        }
    }

    /// UDP datagrams to multicast group `group`, port `port`: the group's MAC
    /// ([`multicast_mac`]), its address and the port, as the three specs (`ETH`, `IPV4_EXT`,
    /// `UDP`) every subscriber of the group writes, so that subscribers share one entry and
    /// each gets a copy.
    pub const fn multicast(group: Ipv4Addr, port: u16) -> Self {
        Self {
            dst_mac: Some(multicast_mac(group)),
            ..Self::udp_dst(group, port)
        }
    }

    /// UDP datagrams to `ip`:`port`, any MAC.
    pub const fn udp_dst(ip: Ipv4Addr, port: u16) -> Self {
        Self {
            dst_ip: Some(ip),
            l4: Some(L4Proto::Udp),
            dst_port: Some(port),
            ..Self::ANY
        }
    }

    /// One flow by its 5-tuple (transport, source and destination address and port).
    pub const fn five_tuple(l4: L4Proto, src: (Ipv4Addr, u16), dst: (Ipv4Addr, u16)) -> Self {
        Self {
            src_ip: Some(src.0),
            dst_ip: Some(dst.0),
            l4: Some(l4),
            src_port: Some(src.1),
            dst_port: Some(dst.1),
            ..Self::ANY
        }
    }

    /// Whether the spec names an IPv4 or transport field (and so matches IPv4 frames only).
    pub const fn needs_ipv4(&self) -> bool {
        self.src_ip.is_some() || self.dst_ip.is_some() || self.l4.is_some()
    }

    /// Why the spec cannot be a rule (the kernel's checks, `ib_uverbs_ex_create_flow` and
    /// mlx5's `parse_flow_attr`), if it cannot.
    pub const fn check(&self) -> Result<(), FlowSpecError> {
        if (self.src_port.is_some() || self.dst_port.is_some()) && self.l4.is_none() {
            return Err(FlowSpecError::PortWithoutTransport);
        }
        if let Some(t) = self.ether_type
            && self.needs_ipv4()
            && t != ETHERTYPE_IPV4
        {
            return Err(FlowSpecError::EtherTypeNotIpv4(t));
        }
        Ok(())
    }

    /// A multicast-only rule: its destination MAC is a multicast one, or it names no MAC and
    /// its destination IPv4 address is multicast. A ConnectX puts such rules in its one
    /// multicast table, whatever their own priority.
    pub const fn multicast_only(&self) -> bool {
        match (self.dst_mac, self.dst_ip) {
            (Some(m), _) => m[0] & 1 == 1,
            (None, Some(ip)) => ip.is_multicast(),
            (None, None) => false,
        }
    }
}

/// Why a [`FlowSpec`] cannot be a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FlowSpecError {
    /// A port without its transport.
    #[error("a flow rule that names a port needs its transport (l4: UDP or TCP)")]
    PortWithoutTransport,
    /// An IPv4 or transport field with another EtherType than IPv4.
    #[error("a flow rule with IPv4 or transport fields needs EtherType 0x0800, not {0:#06x}")]
    EtherTypeNotIpv4(u16),
}

impl FlowSpecError {
    /// What is wrong, without the values (for an error that holds a `&'static str`).
    pub const fn reason(self) -> &'static str {
        match self {
            FlowSpecError::PortWithoutTransport => {
                "a flow rule with a port needs its transport (l4)"
            }
            FlowSpecError::EtherTypeNotIpv4(_) => {
                "an IPv4 or transport field with an EtherType other than IPv4"
            }
        }
    }
}

/// The MAC an IPv4 multicast group's frames carry: `01:00:5e` and the group's low 23 bits
/// (RFC 1112).
pub const fn multicast_mac(group: Ipv4Addr) -> [u8; 6] {
    let o = group.octets();
    [0x01, 0x00, 0x5e, o[1] & 0x7f, o[2], o[3]]
}

/// The Toeplitz key most RSS implementations start from (Microsoft's RSS verification key);
/// a ConnectX takes exactly 40 bytes.
pub const DEFAULT_RSS_KEY: [u8; 40] = [
    0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0,
    0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c,
    0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multicast_mac_takes_the_low_23_bits() {
        assert_eq!(
            multicast_mac(Ipv4Addr::new(239, 1, 2, 3)),
            [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]
        );
        // The 24th bit is not carried: 239.129.2.3 shares 239.1.2.3's MAC.
        assert_eq!(
            multicast_mac(Ipv4Addr::new(239, 129, 2, 3)),
            multicast_mac(Ipv4Addr::new(239, 1, 2, 3))
        );
    }

    #[test]
    fn bad_specs_are_named() {
        let port_only = FlowSpec {
            dst_port: Some(1),
            ..FlowSpec::ANY
        };
        assert_eq!(port_only.check(), Err(FlowSpecError::PortWithoutTransport));
        let arp = FlowSpec {
            ether_type: Some(0x0806),
            ..FlowSpec::udp_dst(Ipv4Addr::LOCALHOST, 1)
        };
        assert_eq!(arp.check(), Err(FlowSpecError::EtherTypeNotIpv4(0x0806)));
        let ipv4 = FlowSpec {
            ether_type: Some(ETHERTYPE_IPV4),
            ..FlowSpec::udp_dst(Ipv4Addr::LOCALHOST, 1)
        };
        assert_eq!(ipv4.check(), Ok(()));
        let arp_alone = FlowSpec {
            ether_type: Some(0x0806),
            ..FlowSpec::ANY
        };
        assert_eq!(arp_alone.check(), Ok(()));
    }

    #[test]
    fn multicast_only_specs() {
        assert!(FlowSpec::multicast(Ipv4Addr::new(239, 1, 2, 3), 1).multicast_only());
        assert!(FlowSpec::dst_mac([1, 0, 0x5e, 1, 2, 3]).multicast_only());
        assert!(!FlowSpec::dst_mac([2, 0, 0, 0, 0, 1]).multicast_only());
        assert!(FlowSpec::udp_dst(Ipv4Addr::new(239, 1, 2, 3), 1).multicast_only());
        assert!(!FlowSpec::udp_dst(Ipv4Addr::new(10, 0, 0, 1), 1).multicast_only());
        assert!(!FlowSpec::ANY.multicast_only());
        // A unicast MAC decides even with a multicast address.
        let unicast_mac = FlowSpec {
            dst_mac: Some([2, 0, 0, 0, 0, 1]),
            ..FlowSpec::udp_dst(Ipv4Addr::new(239, 1, 2, 3), 1)
        };
        assert!(!unicast_mac.multicast_only());
    }
}

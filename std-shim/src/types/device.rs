//! A device's plain data: its attributes, its ports, their GIDs and states, and the name of
//! the software device.

use std::fmt;
use std::net::Ipv6Addr;

/// The name of the software mlx5 device (feature `sim`), listed last by
/// [`devices`](crate::devices). It is opened only when asked for by this name, through
/// [`open_device`](crate::open_device) or [`DEVICE_ENV`](crate::DEVICE_ENV): never in place of
/// a missing NIC.
pub const SOFTWARE_DEVICE: &str = "zverbs_sim0";

/// Where this side of a connection is: what the peer needs to reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalAddress {
    /// The port.
    pub port: u8,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// The GID (zero when unused on InfiniBand).
    pub gid: Gid,
    /// The GID's index in the port's table, when a GID is used.
    pub gid_index: Option<u32>,
    /// The link layer.
    pub link_layer: LinkLayer,
    /// The port's active MTU.
    pub active_mtu: Mtu,
}

/// A 16-byte global identifier (an IPv6 address in form).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether every byte is zero (an unused table entry).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The interface identifier (bytes 8..16) as a big-endian number; `ibv_rc_pingpong` uses a
    /// GRH exactly when it is non-zero.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().unwrap_or([0; 8]))
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), as RoCE v2 uses.
    pub fn to_ipv4(&self) -> Option<std::net::Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ipv6Addr::from(self.0).fmt(f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The kind of a GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, not routable).
    RoceV1,
    /// RoCE v2 (UDP/IP, routable).
    RoceV2,
    /// A value this crate does not know.
    Unknown(u32),
}

impl GidType {
    pub(crate) fn from_raw(raw: u32) -> Self {
        match raw {
            0 => GidType::Ib,
            1 => GidType::RoceV1,
            2 => GidType::RoceV2,
            x => GidType::Unknown(x),
        }
    }
}

/// A GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the table.
    pub index: u32,
    /// The port.
    pub port: u8,
    /// Its type.
    pub gid_type: GidType,
}

/// A port's logical state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortState {
    /// No link.
    Down,
    /// Link up, not configured by the subnet manager.
    Init,
    /// Configured, not yet active.
    Armed,
    /// Ready.
    Active,
    /// Active, deferring.
    ActiveDefer,
    /// No state change.
    Nop,
    /// A value this crate does not know.
    Unknown(u32),
}

impl PortState {
    pub(crate) fn from_raw(raw: u32) -> Self {
        match raw {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            x => PortState::Unknown(x),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Down => f.write_str("DOWN"),
            PortState::Init => f.write_str("INIT"),
            PortState::Armed => f.write_str("ARMED"),
            PortState::Active => f.write_str("ACTIVE"),
            PortState::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            PortState::Nop => f.write_str("NOP"),
            PortState::Unknown(x) => write!(f, "state {x}"),
        }
    }
}

/// A port's link layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand: LIDs route.
    InfiniBand,
    /// Ethernet (RoCE): GIDs route; LIDs are 0.
    Ethernet,
    /// Not reported (older providers: treat as InfiniBand).
    Unspecified,
}

/// A path MTU, as `enum ibv_mtu`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes (`ibv_rc_pingpong`'s default).
    #[default]
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

impl Mtu {
    /// The MTU for `ibv_mtu` number `raw`, if valid.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            1 => Mtu::M256,
            2 => Mtu::M512,
            3 => Mtu::M1024,
            4 => Mtu::M2048,
            5 => Mtu::M4096,
            _ => return None,
        })
    }

    /// The MTU of `bytes` bytes, if it is one of the five.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        Self::from_raw(match bytes {
            256 => 1,
            512 => 2,
            1024 => 3,
            2048 => 4,
            4096 => 5,
            _ => 0,
        })
    }

    /// Bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// A port's attributes (the part of `ibv_port_attr` that connection set-up uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Subnet manager's LID.
    pub sm_lid: u16,
    /// GID table size.
    pub gid_tbl_len: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Link layer.
    pub link_layer: LinkLayer,
}

/// Device attributes (the part of `ibv_device_attr` applications use to size queues).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// PCI vendor ID (0x02c9 and 0x15b3: Mellanox/NVIDIA).
    pub vendor_id: u32,
    /// PCI part ID.
    pub vendor_part_id: u32,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Most QPs.
    pub max_qp: u32,
    /// Most work requests per queue.
    pub max_qp_wr: u32,
    /// Most scatter entries per request.
    pub max_sge: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most outstanding READ/atomic requests a QP can answer.
    pub max_qp_rd_atom: u32,
    /// Most outstanding READ/atomic requests a QP can issue.
    pub max_qp_init_rd_atom: u32,
    /// Atomic support (0 none, 1 within the HCA, 2 global).
    pub atomic_cap: u32,
    /// Number of ports.
    pub phys_port_cnt: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_views() {
        let mut g = Gid::default();
        assert!(g.is_zero());
        g.0[10] = 0xff;
        g.0[11] = 0xff;
        g.0[12..].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(g.to_ipv4(), Some(std::net::Ipv4Addr::new(10, 0, 0, 7)));
        assert_eq!(g.to_string(), "::ffff:10.0.0.7");
        assert_eq!(g.interface_id(), 0x0000_ffff_0a00_0007);
    }

    #[test]
    fn mtu_numbers() {
        assert_eq!(Mtu::M1024.bytes(), 1024);
        assert_eq!(Mtu::M4096.bytes(), 4096);
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::M2048));
        assert_eq!(Mtu::from_raw(6), None);
        assert_eq!(PortState::from_raw(4), PortState::Active);
        assert_eq!(PortState::from_raw(1).to_string(), "DOWN");
    }
}

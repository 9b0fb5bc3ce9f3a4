//! A queue pair's plain data: its transport, its state, its capabilities and the attributes of
//! its transitions.

use std::fmt;

use super::access::AccessFlags;
use super::device::{Gid, Mtu};
use super::endpoint::Endpoint;

/// A queue pair's capabilities (`struct ibv_qp_cap`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCaps {
    /// Outstanding send requests.
    pub max_send_wr: u32,
    /// Outstanding receive requests.
    pub max_recv_wr: u32,
    /// Scatter entries per send request.
    pub max_send_sge: u32,
    /// Scatter entries per receive request.
    pub max_recv_sge: u32,
    /// Bytes of inline data per send request.
    pub max_inline_data: u32,
}

impl Default for QpCaps {
    fn default() -> Self {
        Self {
            max_send_wr: 128,
            max_recv_wr: 128,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 64,
        }
    }
}

/// A queue pair's transport (`enum ibv_qp_type`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`): one peer, acknowledged and retried.
    #[default]
    Rc,
    /// Unreliable datagram (`IBV_QPT_UD`): no peer; each send names its destination through
    /// an [`AddressHandle`](crate::AddressHandle).
    Ud,
    /// Dynamically connected initiator (mlx5 `MLX5DV_DCTYPE_DCI`): no peer; each request
    /// names the DC target it goes to ([`QpBuilder::dc_initiator`](crate::QpBuilder::dc_initiator), [`crate::dc`]).
    Dci,
    /// Dynamically connected target (mlx5 `MLX5DV_DCTYPE_DCT`): serves any initiator that
    /// names its number and access key; receives through an SRQ ([`QpBuilder::dc_target`](crate::QpBuilder::dc_target)).
    Dct,
    /// A raw packet QP (`IBV_QPT_RAW_PACKET`): sends whole Ethernet frames and receives the
    /// frames flow rules steer to it ([`Pd::create_raw_qp`](crate::Pd::create_raw_qp)).
    RawPacket,
}

impl QpType {
    /// libibverbs' number for it.
    pub const fn to_raw(self) -> u32 {
        match self {
            Self::Rc => zverbs_ffi::types::IBV_QPT_RC,
            Self::Ud => zverbs_ffi::types::IBV_QPT_UD,
            Self::Dci | Self::Dct => zverbs_ffi::types::IBV_QPT_DRIVER,
            Self::RawPacket => zverbs_ffi::types::IBV_QPT_RAW_PACKET,
        }
    }
}

/// The state of a queue pair (`enum ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QpState {
    /// Created, not yet usable (`IBV_QPS_RESET`).
    Reset,
    /// Receives may be posted; nothing is sent or received yet (`IBV_QPS_INIT`).
    Init,
    /// Ready to receive: incoming messages are accepted (`IBV_QPS_RTR`).
    Rtr,
    /// Ready to send (`IBV_QPS_RTS`).
    Rts,
    /// Send queue drained (`IBV_QPS_SQD`).
    Sqd,
    /// Send queue error (`IBV_QPS_SQE`).
    Sqe,
    /// Error: every outstanding request completes as flushed (`IBV_QPS_ERR`).
    Error,
    /// A number this crate does not know.
    Unknown(u32),
}

impl QpState {
    /// The state for libibverbs' number.
    pub const fn from_raw(raw: u32) -> Self {
        match raw {
            0 => Self::Reset,
            1 => Self::Init,
            2 => Self::Rtr,
            3 => Self::Rts,
            4 => Self::Sqd,
            5 => Self::Sqe,
            6 => Self::Error,
            n => Self::Unknown(n),
        }
    }

    /// libibverbs' number for the state.
    pub const fn to_raw(self) -> u32 {
        match self {
            Self::Reset => 0,
            Self::Init => 1,
            Self::Rtr => 2,
            Self::Rts => 3,
            Self::Sqd => 4,
            Self::Sqe => 5,
            Self::Error => 6,
            Self::Unknown(n) => n,
        }
    }
}

impl fmt::Display for QpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Reset => f.write_str("RESET"),
            Self::Init => f.write_str("INIT"),
            Self::Rtr => f.write_str("RTR"),
            Self::Rts => f.write_str("RTS"),
            Self::Sqd => f.write_str("SQD"),
            Self::Sqe => f.write_str("SQE"),
            Self::Error => f.write_str("ERROR"),
            Self::Unknown(n) => write!(f, "state {n}"),
        }
    }
}

/// RESET → INIT attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitAttr {
    /// The port (from 1).
    pub port: u8,
    /// P_Key table index.
    pub pkey_index: u16,
    /// What the peer may do to this side's memory through this QP.
    pub access: AccessFlags,
}

/// The GRH of an address vector: needed on RoCE and across IB subnets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalRoute {
    /// The peer's GID.
    pub dgid: Gid,
    /// This side's GID index.
    pub sgid_index: u8,
    /// Hop limit (TTL).
    pub hop_limit: u8,
    /// Traffic class (DSCP/ECN on RoCE v2).
    pub traffic_class: u8,
    /// Flow label.
    pub flow_label: u32,
}

/// INIT → RTR attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtrAttr {
    /// The port (from 1).
    pub port: u8,
    /// Path MTU.
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qpn: u32,
    /// The peer's first PSN.
    pub rq_psn: u32,
    /// READ/atomic requests the peer may have outstanding at this side.
    pub max_dest_rd_atomic: u8,
    /// RNR NAK timer code (12: 0.64 ms).
    pub min_rnr_timer: u8,
    /// The peer's LID (0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// The GRH, or `None` for LID routing.
    pub grh: Option<GlobalRoute>,
}

/// RTR → RTS attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtsAttr {
    /// This side's first PSN.
    pub sq_psn: u32,
    /// ACK timeout code (4.096 µs × 2^timeout; 14 ≈ 67 ms).
    pub timeout: u8,
    /// Transport retries (7 max).
    pub retry_cnt: u8,
    /// RNR retries: how many times a request that finds no receive posted at the peer is
    /// sent again, each after the peer's RNR timer, before it fails with "RNR retry counter
    /// exceeded" (0–6); 7 retries for ever.
    pub rnr_retry: u8,
    /// READ/atomic requests this side may have outstanding.
    pub max_rd_atomic: u8,
}

/// Everything to take a QP from RESET to RTS against a peer, with `ibv_rc_pingpong`'s
/// defaults; the three steps' attributes are public to adjust.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectAttr {
    /// RESET → INIT.
    pub init: InitAttr,
    /// INIT → RTR.
    pub rtr: RtrAttr,
    /// RTR → RTS.
    pub rts: RtsAttr,
}

impl ConnectAttr {
    /// Attributes to connect to `remote` from `port`, sending from PSN `local_psn`.
    ///
    /// A GRH is used when the peer's GID is set (as `ibv_rc_pingpong` decides: non-zero
    /// interface id), with this side's GID `sgid_index` (from
    /// [`LocalAddress::gid_index`](crate::LocalAddress::gid_index)). Defaults: MTU 1024, every
    /// remote access right, one outstanding READ/atomic each way, RNR timer 12 (0.64 ms),
    /// timeout 14, 7 retries, **6 RNR retries**.
    ///
    /// The RNR retries bound how long a request that needs a receive at the peer (a SEND, a
    /// WRITE with immediate) waits when none is posted: it is sent again 6 times, each after
    /// the peer's RNR timer (its `min_rnr_timer`, 12 = 0.64 ms with these defaults on both
    /// sides), then fails with [`WcStatus::RnrRetryExcErr`](zverbs_core::WcStatus) and moves
    /// the QP to the error state: about 6 × 0.64 ≈ 4 ms, not a hang. The software device
    /// retries once per step of its engine instead of waiting a timer, so there the error
    /// comes within microseconds. `.rnr(7, 12)` retries for ever (`ibv_rc_pingpong`'s choice),
    /// for a peer that is known to post its receives in time.
    pub fn new(port: u8, local_psn: u32, remote: &Endpoint, sgid_index: Option<u32>) -> Self {
        let grh = (remote.gid.interface_id() != 0).then(|| GlobalRoute {
            dgid: remote.gid,
            sgid_index: sgid_index.unwrap_or(0) as u8,
            hop_limit: 64,
            traffic_class: 0,
            flow_label: 0,
        });
        Self {
            init: InitAttr {
                port,
                pkey_index: 0,
                access: AccessFlags::ALL,
            },
            rtr: RtrAttr {
                port,
                path_mtu: Mtu::M1024,
                dest_qpn: remote.qpn,
                rq_psn: remote.psn,
                max_dest_rd_atomic: 1,
                min_rnr_timer: 12,
                dlid: remote.lid,
                sl: 0,
                grh,
            },
            rts: RtsAttr {
                sq_psn: local_psn,
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 6,
                max_rd_atomic: 1,
            },
        }
    }

    /// The path MTU.
    pub fn mtu(mut self, mtu: Mtu) -> Self {
        self.rtr.path_mtu = mtu;
        self
    }

    /// Outstanding READ/atomic requests, both ways.
    pub fn rd_atomic(mut self, n: u8) -> Self {
        self.rtr.max_dest_rd_atomic = n;
        self.rts.max_rd_atomic = n;
        self
    }

    /// The service level.
    pub fn sl(mut self, sl: u8) -> Self {
        self.rtr.sl = sl;
        self
    }

    /// ACK timeout code and transport retries.
    pub fn timeout(mut self, timeout: u8, retry_cnt: u8) -> Self {
        self.rts.timeout = timeout;
        self.rts.retry_cnt = retry_cnt;
        self
    }

    /// RNR retries (0–6, or 7: for ever) and this side's RNR timer code (the wait a peer's
    /// retry makes: 12 is 0.64 ms, 0 is 655 ms; see the IB specification's table).
    pub fn rnr(mut self, rnr_retry: u8, min_rnr_timer: u8) -> Self {
        self.rts.rnr_retry = rnr_retry;
        self.rtr.min_rnr_timer = min_rnr_timer;
        self
    }

    /// What the peer may do to this side's memory.
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.init.access = access;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grh_only_when_the_peer_has_a_gid() {
        let mut ep = Endpoint {
            lid: 5,
            qpn: 0x11,
            psn: 0x22,
            gid: Gid::default(),
        };
        let c = ConnectAttr::new(1, 7, &ep, None);
        assert_eq!(c.rtr.grh, None);
        assert_eq!((c.rtr.dlid, c.rtr.dest_qpn, c.rtr.rq_psn), (5, 0x11, 0x22));
        // A finite RNR retry count: a request without a receive at the peer fails, not hangs.
        assert_eq!(
            (
                c.rts.timeout,
                c.rts.retry_cnt,
                c.rts.rnr_retry,
                c.rtr.min_rnr_timer
            ),
            (14, 7, 6, 12)
        );
        assert_eq!(c.rnr(7, 12).rts.rnr_retry, 7);
        ep.gid.0[15] = 1;
        let c = ConnectAttr::new(1, 7, &ep, Some(3)).mtu(Mtu::M4096);
        let g = c.rtr.grh.unwrap();
        assert_eq!((g.sgid_index, g.dgid), (3, ep.gid));
        assert_eq!(c.rtr.path_mtu, Mtu::M4096);
    }
}

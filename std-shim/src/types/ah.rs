//! What an address handle and a UD QP are made with.

use super::endpoint::Endpoint;
use super::qp::GlobalRoute;

/// The destination QP number of a multicast datagram.
pub const MULTICAST_QPN: u32 = 0xff_ffff;

/// What a UD QP is readied with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdAttr {
    /// The port (from 1).
    pub port: u8,
    /// P_Key table index.
    pub pkey_index: u16,
    /// The Q_Key: a datagram reaches the QP only when it carries this key.
    pub qkey: u32,
    /// The first PSN of its sends.
    pub sq_psn: u32,
}

impl UdAttr {
    /// Port 1, P_Key index 0, send PSN 0, and `qkey`.
    pub fn new(qkey: u32) -> Self {
        Self {
            port: 1,
            pkey_index: 0,
            qkey,
            sq_psn: 0,
        }
    }
}

/// An address: where a UD send goes (`struct ibv_ah_attr`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// The destination LID (0 on RoCE; a multicast LID, `0xc000..=0xfffe`, for a group).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate (0: the port's).
    pub static_rate: u8,
    /// The port (from 1).
    pub port: u8,
    /// The GRH: needed on RoCE, across subnets, and to name a multicast GID.
    pub grh: Option<GlobalRoute>,
}

impl AhAttr {
    /// The address of `remote` from `port`: its LID, and a GRH to its GID when it has one
    /// (as [`ConnectAttr::new`](crate::ConnectAttr::new) decides), from this side's GID
    /// `sgid_index`.
    pub fn to(port: u8, remote: &Endpoint, sgid_index: Option<u32>) -> Self {
        Self {
            dlid: remote.lid,
            port,
            grh: (remote.gid.interface_id() != 0).then(|| GlobalRoute {
                dgid: remote.gid,
                sgid_index: sgid_index.unwrap_or(0) as u8,
                hop_limit: 64,
                traffic_class: 0,
                flow_label: 0,
            }),
            ..Self::default()
        }
    }

    /// The rdma-core form.
    pub(crate) fn to_verbs(self) -> zverbs_ffi::types::ibv_ah_attr {
        let mut a = zverbs_ffi::types::ibv_ah_attr {
            dlid: self.dlid,
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            static_rate: self.static_rate,
            port_num: self.port,
            ..Default::default()
        };
        if let Some(g) = self.grh {
            a.is_global = 1;
            a.grh.dgid.raw = g.dgid.0;
            a.grh.sgid_index = g.sgid_index;
            a.grh.hop_limit = g.hop_limit;
            a.grh.traffic_class = g.traffic_class;
            a.grh.flow_label = g.flow_label;
        }
        a
    }
}

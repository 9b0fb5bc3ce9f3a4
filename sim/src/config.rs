//! What the software device is asked to create, and what it hands back.

use zverbs_mlx5dv::{CqLayout, QpLayout, SqCaps};
use zverbs_mlx5dv::{RqSlot, SqSlot};

bitflags::bitflags! {
    /// Access rights of a memory region, with the values of `enum ibv_access_flags` (the same
    /// bits as `zverbs::AccessFlags`, which converts with `From`).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
    pub struct Access: u32 {
        /// The device may write the region for local requests: READ and atomic results,
        /// incoming SENDs (`IBV_ACCESS_LOCAL_WRITE`).
        const LOCAL_WRITE = 1 << 0;
        /// Peers may RDMA WRITE into the region (`IBV_ACCESS_REMOTE_WRITE`).
        const REMOTE_WRITE = 1 << 1;
        /// Peers may RDMA READ the region (`IBV_ACCESS_REMOTE_READ`).
        const REMOTE_READ = 1 << 2;
        /// Peers may run atomics on the region (`IBV_ACCESS_REMOTE_ATOMIC`).
        const REMOTE_ATOMIC = 1 << 3;
    }
}

impl Access {
    /// Local reads only: the region can be the source of WRITE and SEND payloads.
    pub const NONE: Self = Self::empty();
    /// Every right above.
    pub const ALL: Self = Self::all();
}

/// A registered memory region.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mr {
    /// First byte.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// Key for local scatter/gather entries.
    pub lkey: u32,
    /// Key peers use in RDMA and atomic requests. Differs from `lkey`, so that a backend which
    /// mixes them up is caught.
    pub rkey: u32,
    /// The rights granted.
    pub access: Access,
}

/// Size limits of a device, fixed at creation (all tables are allocated then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Queue pairs the device can create: at most 2^24 − 256 (QP numbers are 24 bits and
    /// start at 0x100).
    pub max_qps: u32,
    /// Completion queues the device can create: at most 2^24 − 64 (CQ numbers are 24 bits and
    /// start at 0x40).
    pub max_cqs: u32,
    /// Memory regions that can be registered at once: at most 2^24 − 1 (a key carries its
    /// region's table entry in 24 bits).
    pub max_mrs: u32,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            max_qps: 64,
            max_cqs: 64,
            max_mrs: 256,
        }
    }
}

/// A completion queue to create, as `ibv_create_cq`'s `cqe`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CqConfig {
    /// Completions the CQ must hold, 1 to 2^22 − 1. As libmlx5 does, the ring gets the next
    /// power of two of `cqe + 1` entries.
    pub cqe: u32,
}

/// The RNR retry count meaning "retry for ever" (`rnr_retry = 7` in `ibv_qp_attr`).
pub const RNR_RETRY_INFINITE: u8 = 7;

/// A queue pair to create, as `ibv_qp_init_attr` plus the connection attributes the device
/// honours.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpConfig {
    /// CQN of the CQ for send completions.
    pub send_cq: u32,
    /// CQN of the CQ for receive completions.
    pub recv_cq: u32,
    /// Send requests of the largest size the ring must hold, at least 1; the ring (that many
    /// WQEs in 64-byte basic blocks, to a power of two) holds at most 32768 basic blocks.
    pub max_send_wr: u32,
    /// Gather entries per send request, at most 61 (a WQE has at most 63 segments).
    pub max_send_sge: u32,
    /// Inline bytes per send request, at most 972 (the device may report more, as libmlx5
    /// does).
    pub max_inline_data: u32,
    /// Receive requests the ring must hold, at most 32768 (0: no receive queue).
    pub max_recv_wr: u32,
    /// Scatter entries per receive request, at most 64.
    pub max_recv_sge: u32,
    /// Every send request asks for a CQE (`sq_sig_all`). The device itself only looks at each
    /// WQE's `CQ_UPDATE` bit; this is handed back in [`SimQp::caps`].
    pub sig_all: bool,
    /// BlueFlame buffer size in bytes (a multiple of 64); 0 for doorbell-only mode.
    pub bf_size: u32,
    /// How many times a request that finds no receive at the peer is retried (one retry per
    /// device step) before it fails with "RNR retry exceeded"; [`RNR_RETRY_INFINITE`] (7) waits
    /// for a receive for ever, as on real hardware.
    pub rnr_retry: u8,
}

impl Default for QpConfig {
    fn default() -> Self {
        Self {
            send_cq: 0,
            recv_cq: 0,
            max_send_wr: 64,
            max_send_sge: 4,
            max_inline_data: 64,
            max_recv_wr: 64,
            max_recv_sge: 4,
            sig_all: false,
            bf_size: 256,
            rnr_retry: 0,
        }
    }
}

/// A created completion queue: its number and the layout `mlx5dv_init_obj` would report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimCq {
    /// The CQ number.
    pub cqn: u32,
    /// Its memory. Valid until it is destroyed or the [`Device`](crate::Device) dropped.
    pub layout: CqLayout,
}

/// A created queue pair: its number, the layout `mlx5dv_init_obj` would report, and the
/// capabilities the device granted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimQp {
    /// The QP number.
    pub qpn: u32,
    /// Its memory. Valid until it is destroyed or the [`Device`](crate::Device) dropped.
    pub layout: QpLayout,
    /// Gather entries per send request.
    pub max_send_sge: u32,
    /// Inline bytes per send request: what fits the largest WQE, which may exceed the request.
    pub max_inline_data: u32,
    /// Scatter entries per receive request (`rq.stride / 16`).
    pub max_recv_sge: u32,
    /// `sq_sig_all` as requested.
    pub sig_all: bool,
    /// Entries of the send CQ.
    pub send_cqe_cnt: u32,
}

impl SimQp {
    /// The capabilities to build a [`SendQueue`](zverbs_mlx5dv::SendQueue) with. `max_signaled` is the
    /// whole send CQ; give less when several queues share that CQ.
    pub fn caps(&self) -> SqCaps {
        SqCaps {
            max_send_sge: self.max_send_sge,
            max_inline_data: self.max_inline_data,
            sig_all: self.sig_all,
            max_signaled: self.send_cqe_cnt,
            transport: zverbs_mlx5dv::Transport::Rc,
        }
    }

    /// Bookkeeping storage for the send queue: one slot per basic block.
    pub fn sq_slots(&self) -> Vec<SqSlot> {
        (0..self.layout.sq.wqe_cnt).map(|_| SqSlot::new()).collect()
    }

    /// Bookkeeping storage for the receive queue: one slot per entry.
    pub fn rq_slots(&self) -> Vec<RqSlot> {
        (0..self.layout.rq.wqe_cnt).map(|_| RqSlot::new()).collect()
    }
}

/// The state of a queue pair as the device sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpStatus {
    /// Created, not connected: its send queue is not executed yet.
    Init,
    /// Connected and working (ready to send).
    Rts,
    /// In the error state: every work request completes with "WR flushed".
    Error,
}

/// Why the device refused a control request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SimError {
    /// The device's table for this object is full.
    #[error("device table full")]
    TooMany,
    /// A size or count the device does not support (zero, too large, not a multiple of 64).
    #[error("invalid configuration: {0}")]
    InvalidConfig(&'static str),
    /// No such CQ number.
    #[error("no CQ {0:#x}")]
    NoSuchCq(u32),
    /// No such QP number.
    #[error("no QP {0:#x}")]
    NoSuchQp(u32),
    /// No such SRQ number.
    #[error("no SRQ {0:#x}")]
    NoSuchSrq(u32),
    /// No registered region with this key.
    #[error("no memory region with key {0:#x}")]
    NoSuchMr(u32),
    /// No such receive work queue.
    #[error("no WQ {0:#x}")]
    NoSuchWq(u32),
    /// No such receive work queue indirection table.
    #[error("no indirection table {0:#x}")]
    NoSuchIndTable(u32),
    /// No such RSS QP.
    #[error("no RSS QP {0:#x}")]
    NoSuchRssQp(u32),
    /// No such flow rule.
    #[error("no flow rule {0:#x}")]
    NoSuchFlow(u32),
    /// The QP is already connected.
    #[error("QP {0:#x} is already connected")]
    AlreadyConnected(u32),
    /// QP `qpn` named QP `peer` as its peer, but `peer` is connected to another QP: it would
    /// accept no request from `qpn`.
    #[error("QP {peer:#x} is connected to another QP, not to QP {qpn:#x}")]
    PeerTaken {
        /// The QP being connected.
        qpn: u32,
        /// The peer it named.
        peer: u32,
    },
    /// Remote write or remote atomic access without local write (as `ibv_reg_mr`'s `EINVAL`).
    #[error("remote write or atomic access requires local write")]
    InvalidAccess,
    /// Memory the device cannot allocate.
    #[error("out of memory")]
    OutOfMemory,
}

/// Counters of what the device did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Calls of `step` (by the caller or the progress thread).
    pub steps: u64,
    /// Send WQEs that completed successfully.
    pub wqes_ok: u64,
    /// Send WQEs that completed with an error other than a flush.
    pub wqes_failed: u64,
    /// Send and receive WQEs flushed.
    pub flushed: u64,
    /// Receive WQEs consumed by incoming messages.
    pub recvs: u64,
    /// CQEs written to CQ rings.
    pub cqes: u64,
    /// CQEs that found their CQ full and were dropped (CQ overrun). Tests assert it stays 0.
    pub cq_overruns: u64,
    /// Times a request found no receive posted at the peer (RNR NAKs).
    pub rnr_naks: u64,
    /// Doorbell records that claimed more than a ring of new entries.
    pub bad_doorbells: u64,
    /// Payload bytes moved.
    pub bytes: u64,
    /// Messages from other device instances that could not be parsed or matched no request
    /// in flight.
    pub bad_messages: u64,
    /// Requests refused because the requester is not the responder's peer (the QP, and for a
    /// peer in another process the LID, its connection names), and responses ignored because
    /// they did not come from the requester's peer.
    pub not_peer: u64,
    /// Requests a responder found ahead of the PSN it expects (out of sequence): not carried
    /// out; the first of a run is answered with a PSN sequence error NAK, the rest dropped.
    pub seq_errors: u64,
    /// Requests a responder found behind the PSN it expects (duplicates): acknowledged again
    /// without being carried out again (a READ is read again; an atomic answered with its
    /// kept result).
    pub duplicates: u64,
    /// Requests sent again because no valid acknowledgement came (a lost acknowledgement, a
    /// sequence error NAK, an acknowledgement whose PSN is not the request's, a transport
    /// timer that ran out).
    pub retries: u64,
    /// Requests to another process whose transport timer ran out with no answer (a peer
    /// process that died, a lost message): each was sent again, or failed with "transport
    /// retry exceeded" when its retries had run out (counted in `retries` too).
    pub timeouts: u64,
    /// UD datagrams sent (each multicast send once).
    pub datagrams: u64,
    /// UD datagrams delivered into a receive (a multicast send once per attached QP).
    pub datagrams_delivered: u64,
    /// UD datagrams a receiver dropped because their Q_Key is not its QP's.
    pub qkey_drops: u64,
    /// UD datagrams dropped because the receiving QP had no receive posted (UD has no RNR).
    pub ud_no_recv: u64,
    /// UD datagrams that reached no QP: an unknown destination QP or LID, a QP that is not a
    /// UD QP ready to receive, a multicast group with no member, a multicast address with a
    /// QPN other than `0xffffff`.
    pub ud_no_dest: u64,
    /// DC requests a target dropped because they carried another access key than the
    /// target's (a DC access key violation): the initiator's retries run out.
    pub dc_key_violations: u64,
    /// DC requests that reached no target: an unknown DCT number, or a target not ready.
    pub dc_no_target: u64,
    /// Compressed CQE sessions written (each counts its completions in `cqes` too).
    pub compressed_sessions: u64,
    /// Received SENDs delivered in the CQE (scatter-to-CQE), their receive buffers untouched.
    pub scattered: u64,
    /// Ethernet frames raw packet QPs sent out of the port (to the attached port, looped
    /// back, or both).
    pub eth_sent: u64,
    /// Ethernet frames that arrived at the port (looped back or from outside).
    pub eth_arrived: u64,
    /// Frames placed into a receive queue (a frame a rule copies to two queues counts twice).
    pub eth_delivered: u64,
    /// Frames that matched no flow rule: dropped (no raw QP sees them).
    pub eth_no_rule: u64,
    /// Frames whose receive queue had no WQE posted, was not ready or is gone: dropped
    /// (Ethernet has no RNR).
    pub eth_no_wqe: u64,
    /// Frames longer than the receive WQE they would go to (a striding queue: longer than a
    /// whole WQE's strides): dropped.
    pub eth_too_long: u64,
    /// Frames shorter than an Ethernet header or longer than the largest frame, arriving from
    /// outside: dropped.
    pub eth_bad_frames: u64,
    /// Filler CQEs written by striding queues.
    pub eth_fillers: u64,
}

/// A created DC target: its number (in the QP number space) and its access key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimDct {
    /// The DCT number an initiator names.
    pub dctn: u32,
    /// The access key it was created with.
    pub access_key: u64,
}

/// A DC target to create ([`Device::create_dct`](crate::Device::create_dct)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DctConfig {
    /// CQN of the CQ its receive completions go to.
    pub cq: u32,
    /// SRQN of the shared receive queue its SENDs and WRITEs with immediate consume.
    pub srq: u32,
    /// The access key every request must carry (`dct_access_key`).
    pub access_key: u64,
}

/// The transport of a queue pair.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum QpType {
    /// Reliable connected (`IBV_QPT_RC`): connected to one peer, acknowledged, retried.
    #[default]
    Rc,
    /// Unreliable datagram (`IBV_QPT_UD`): no connection; each SEND names its destination
    /// through an address vector, completes once sent, and is dropped at a receiver that
    /// cannot take it.
    Ud,
    /// Dynamically connected initiator (`mlx5dv_create_qp` with `MLX5DV_DCTYPE_DCI`): no
    /// peer; each WQE carries the DC target it goes to (the datagram segment after the
    /// control segment, with the DCT number and access key) and otherwise the operations of
    /// RC. Ready it with [`Device::ready_dci`](crate::Device::ready_dci).
    Dci,
    /// Dynamically connected target (`MLX5DV_DCTYPE_DCT`): serves the requests of any DCI
    /// that names its number and access key; receives from a shared receive queue; has no
    /// send queue. Made with [`Device::create_dct`](crate::Device::create_dct).
    Dct,
    /// Raw packet (`IBV_QPT_RAW_PACKET`): its send WQEs carry an Ethernet segment and whole
    /// frames, which leave through the device's Ethernet port; its receive queue takes the
    /// frames flow rules steer to it ([`Device::create_flow`](crate::Device::create_flow)).
    /// Its QPN is its send queue's number (as the kernel answers). It receives from creation
    /// (a ConnectX's RQ is ready at INIT) and sends once
    /// [`Device::ready_raw`](crate::Device::ready_raw) moved it to RTS.
    RawPacket,
}

/// The global routing header of an address handle (`struct ibv_global_route`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Grh {
    /// The destination GID (a multicast GID begins with `0xff`).
    pub dgid: [u8; 16],
    /// The index of the source GID in the port's GID table ([`Device::gid`](crate::Device::gid)
    /// is entry 0, the only one).
    pub sgid_index: u8,
    /// The flow label, 20 bits.
    pub flow_label: u32,
    /// The hop limit.
    pub hop_limit: u8,
    /// The traffic class.
    pub traffic_class: u8,
}

/// What an address handle is created from (`struct ibv_ah_attr` on an InfiniBand port).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// The destination LID (a multicast LID is in `0xc000..=0xfffe`).
    pub dlid: u16,
    /// The service level, 4 bits.
    pub sl: u8,
    /// The source path bits, 7 bits (0 on this device's port: its LMC is 0).
    pub src_path_bits: u8,
    /// The global routing header, for a packet that carries one (`is_global`).
    pub grh: Option<Grh>,
    /// The destination is a multicast group: the device checks that `dlid` is a multicast LID
    /// and, with a GRH, that `dgid` is a multicast GID. (`ibv_ah_attr` has no such flag and
    /// the address vector no such bit: a ConnectX knows multicast by the address alone.)
    pub multicast: bool,
}

/// An address handle: the 48-byte address vector (`struct mlx5_wqe_av`, device byte order)
/// `mlx5dv_init_obj(MLX5DV_OBJ_AH)` points to, laid out as libmlx5's `mlx5_create_ah` lays it
/// out for an InfiniBand port. A UD send copies it into its datagram segment
/// (`DatagramSeg::set_from_av`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimAh {
    /// The address vector.
    pub av: [u8; 48],
}

/// A shared receive queue to create, as `ibv_srq_init_attr`'s `attr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrqConfig {
    /// Receive requests the queue must hold, 1 to 32767.
    pub max_wr: u32,
    /// Scatter entries per receive request, at most 63.
    pub max_sge: u32,
}

impl Default for SrqConfig {
    fn default() -> Self {
        Self {
            max_wr: 64,
            max_sge: 1,
        }
    }
}

/// A created shared receive queue: its number and the layout `mlx5dv_init_obj` reports for
/// it (`struct mlx5dv_srq`), as libmlx5 sets it up: `wqe_cnt` WQEs of `stride` bytes, each
/// beginning with a `mlx5_wqe_srq_next_seg` whose `next_wqe_index` links the free list
/// (WQE `i` to `i + 1`, the last to 0), followed by up to `max_gs` data segments; the free
/// list runs from `head` (0) to `tail` (`wqe_cnt - 1`); the doorbell record is one big-endian
/// word, the count of receives posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimSrq {
    /// The SRQ number (24 bits).
    pub srqn: u32,
    /// The WQE ring. Valid until the SRQ is destroyed or the [`Device`](crate::Device)
    /// dropped.
    pub buf: core::ptr::NonNull<u8>,
    /// The doorbell record: the receive counter, big-endian.
    pub dbrec: core::ptr::NonNull<u32>,
    /// Bytes per WQE, a power of two.
    pub stride: u32,
    /// WQEs in the ring, a power of two.
    pub wqe_cnt: u32,
    /// The first WQE of the free list (the next one posted).
    pub head: u32,
    /// The last WQE of the free list.
    pub tail: u32,
    /// Data segments per WQE.
    pub max_gs: u32,
}

/// An asynchronous event of a shared receive queue, as the control path reads it
/// (`ibv_get_async_event`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqEvent {
    /// The receives posted and not yet consumed dropped below the armed limit
    /// (`IBV_EVENT_SRQ_LIMIT_REACHED`); the limit is disarmed.
    LimitReached,
    /// The SRQ met a malformed ring (a doorbell record claiming more than the ring, or a free
    /// list link outside it) and entered the error state (`IBV_EVENT_SRQ_ERR`): it serves no
    /// message any more.
    Error,
}

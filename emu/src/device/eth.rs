//! The Ethernet function (`mlx5_1`): the uverbs commands a raw packet program sends, answered
//! as the kernel's mlx5 driver answers them on a ConnectX-6 whose port 1 is Ethernet and whose
//! kernel has no DEVX, with the software device's raw Ethernet model behind them.
//!
//! - `GET_CONTEXT` refuses `MLX5_IB_ALLOC_UCTX_DEVX` (EINVAL, as `mlx5_ib_devx_create` does
//!   without the firmware's `log_max_uctx`) and reports `eth_min_inline`; the first context
//!   attaches the port to its Linux interface ([`crate::port`]).
//! - `QUERY_PORT` says link layer Ethernet; `QUERY_DEVICE` adds what a raw program reads:
//!   `IBV_DEVICE_RAW_IP_CSUM` and `MANAGED_FLOW_STEERING`, the RSS, raw packet and striding
//!   receive queue capabilities.
//! - `CREATE_QP` of `IBV_QPT_RAW_PACKET` (separate send and receive rings, the QPN is the send
//!   queue's number) and of an RSS QP (extended, with an indirection table: QPN 0, no rings);
//!   both need `CAP_NET_RAW` (EPERM), as `create_qp` checks it in the kernel.
//! - `CREATE_FLOW`/`DESTROY_FLOW`, `CREATE_WQ`/`MODIFY_WQ`/`DESTROY_WQ`,
//!   `CREATE_RWQ_IND_TBL`/`DESTROY_RWQ_IND_TBL`, checked as the kernel checks them; what the
//!   software device does not model (partial masks, VLAN matching, don't-trap, default and
//!   sniffer rules, drop actions, IPv6) is refused with EOPNOTSUPP, never half done.
//!
//! A raw QP's states: RESET → INIT (with the port) readies its receive queue, RTS its send
//! queue, as `modify_raw_packet_qp` does in the kernel; an RSS QP is never modified (libmlx5
//! refuses) and receives from creation.

use std::net::Ipv4Addr;
use std::sync::OnceLock;

use zverbs_sim::{
    FlowAttr, FlowDest, FlowSpec, L4Proto, RssConfig, RxHashFields, SimError, Striding, WqConfig,
};

use super::{Emu, Qp, Res, errno, ptr, sim_errno};
use crate::abi::{self, get, put, qps};

/// What kind of raw object a QP handle is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Raw {
    /// A raw packet QP with rings.
    Qp,
    /// An RSS QP: the software device's handle.
    Rss(u32),
}

/// `CAP_NET_RAW`'s bit in the capability sets.
const CAP_NET_RAW: u32 = 13;
/// `MLX5_IB_ALLOC_UCTX_DEVX` in `mlx5_ib_alloc_ucontext_req_v2.flags` (byte 8).
const UCTX_DEVX: u64 = 1 << 0;
/// `IB_DEVICE_RAW_IP_CSUM` and `IB_DEVICE_MANAGED_FLOW_STEERING`.
const RAW_IP_CSUM: u64 = 1 << 26;
const MANAGED_FLOW_STEERING: u64 = 1 << 29;
/// `IBV_RAW_PACKET_CAP_IP_CSUM`.
const RAW_PACKET_CAP_IP_CSUM: u64 = 1 << 2;
/// `IB_UVERBS_CREATE_QP_MASK_IND_TABLE` in the extended create's `comp_mask`.
const CREATE_QP_MASK_IND_TABLE: u64 = 1 << 0;
/// `mlx5_ib_create_qp.sq_buf_addr`: a raw QP's separate send ring.
const SQ_BUF_ADDR: usize = 40;
/// `MLX5_RX_HASH_FUNC_TOEPLITZ` and the only key length a TIR takes.
const TOEPLITZ: u64 = 1;
const RSS_KEY_LEN: u64 = 40;
/// The flow spec types (`IB_FLOW_SPEC_*`) and `IB_FLOW_SPEC_ACTION_TAG`.
const SPEC_ETH: u32 = 0x20;
const SPEC_IPV4: u32 = 0x30;
const SPEC_TCP: u32 = 0x40;
const SPEC_UDP: u32 = 0x41;
const SPEC_ACTION_TAG: u32 = 0x1000;
/// `IB_FLOW_SPEC_SUPPORT_LAYERS`: the most specs of one rule.
const MAX_SPECS: u64 = 10;
/// The first RQT number an indirection table is given.
const RQTN_BASE: u32 = 0x500;

/// `eth_min_inline` of the context answer: the firmware's inline mode plus one
/// (`MLX5_USER_INLINE_MODE_*`). `ZVERBS_EMU_ETH_MIN_INLINE=l2` reports L2 (libmlx5 then
/// inlines 18 header bytes); the default is NONE (0 bytes), as a ConnectX-5 or later reports.
fn eth_min_inline() -> u64 {
    match std::env::var("ZVERBS_EMU_ETH_MIN_INLINE").as_deref() {
        Ok("l2") => 2,
        Ok("ip") => 3,
        Ok("tcp_udp") => 4,
        _ => 1,
    }
}

/// Whether the process holds `CAP_NET_RAW` in its effective set (the check the kernel makes
/// before it creates a raw packet QP or a flow rule).
fn has_net_raw() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_NET_RAW) != 0)
}

fn need_net_raw() -> Res {
    if has_net_raw() {
        Ok(())
    } else {
        Err(errno::EPERM)
    }
}

/// The port attached once per process: `Ok` with no interface configured (the port then
/// loops frames back into its own rules), or the reason the interface could not be opened.
static PORT: OnceLock<Result<(), String>> = OnceLock::new();

/// A masked field of a flow spec: all mask bits clear is a wildcard, all set an exact match;
/// anything between is a partial mask the software device does not model.
fn field<const N: usize>(val: &[u8], mask: &[u8]) -> Result<Option<[u8; N]>, i32> {
    let (Some(v), Some(m)) = (val.get(..N), mask.get(..N)) else {
        return Err(errno::EINVAL);
    };
    if m.iter().all(|&b| b == 0) {
        Ok(None)
    } else if m.iter().all(|&b| b == 0xff) {
        Ok(Some(v.try_into().map_err(|_| errno::EINVAL)?))
    } else {
        Err(errno::EOPNOTSUPP)
    }
}

fn be16(b: [u8; 2]) -> u16 {
    u16::from_be_bytes(b)
}

/// The rule the kernel-layout specs `specs` (`n` of them, `ib_uverbs_flow_spec_*`) describe,
/// and its flow tag.
fn parse_specs(specs: &[u8], n: u64) -> Result<(FlowSpec, Option<u32>), i32> {
    let mut spec = FlowSpec::ANY;
    let mut tag = None;
    let mut at = 0;
    let mut count = 0;
    while at < specs.len() {
        let ty = get::<4>(specs, at) as u32;
        let size = get::<2>(specs, at + 4) as usize;
        let Some(s) = specs.get(at..at + size).filter(|_| size >= 8) else {
            return Err(errno::EINVAL);
        };
        // A spec's value follows its 8-byte header; its mask follows the value.
        let half = (size - 8) / 2;
        let (val, mask) = (&s[8..8 + half], &s[8 + half..]);
        match ty {
            SPEC_ETH if size == 40 => {
                spec.dst_mac = field::<6>(&val[0..], &mask[0..])?;
                spec.src_mac = field::<6>(&val[6..], &mask[6..])?;
                spec.ether_type = field::<2>(&val[12..], &mask[12..])?.map(be16);
                if mask[14..16] != [0, 0] {
                    // Matching a VLAN tag is not modelled.
                    return Err(errno::EOPNOTSUPP);
                }
            }
            SPEC_IPV4 if size == 24 || size == 32 => {
                let ip = |b: Option<[u8; 4]>| b.map(Ipv4Addr::from);
                spec.src_ip = ip(field::<4>(&val[0..], &mask[0..])?);
                spec.dst_ip = ip(field::<4>(&val[4..], &mask[4..])?);
                if size == 32 {
                    // proto, tos, ttl, flags: a protocol of UDP or TCP is what the transport
                    // spec says; the rest is not modelled (the kernel refuses ttl and flags).
                    match field::<1>(&val[8..], &mask[8..])? {
                        None => {}
                        Some([17]) => spec.l4 = spec.l4.or(Some(L4Proto::Udp)),
                        Some([6]) => spec.l4 = spec.l4.or(Some(L4Proto::Tcp)),
                        Some(_) => return Err(errno::EOPNOTSUPP),
                    }
                    if mask[9..12] != [0, 0, 0] {
                        return Err(errno::EOPNOTSUPP);
                    }
                }
            }
            SPEC_TCP | SPEC_UDP if size == 16 => {
                let proto = if ty == SPEC_TCP {
                    L4Proto::Tcp
                } else {
                    L4Proto::Udp
                };
                if spec.l4.is_some_and(|p| p != proto) {
                    return Err(errno::EINVAL);
                }
                spec.l4 = Some(proto);
                spec.dst_port = field::<2>(&val[0..], &mask[0..])?.map(be16);
                spec.src_port = field::<2>(&val[2..], &mask[2..])?.map(be16);
            }
            SPEC_ACTION_TAG if size == 16 => {
                let t = get::<4>(s, 8) as u32;
                if t >= 1 << 24 {
                    return Err(errno::EINVAL);
                }
                tag = Some(t);
            }
            SPEC_ETH | SPEC_IPV4 | SPEC_TCP | SPEC_UDP | SPEC_ACTION_TAG => {
                return Err(errno::EINVAL);
            }
            // IPv6, tunnels, inner headers, drop and count actions: not modelled.
            _ => return Err(errno::EOPNOTSUPP),
        }
        at += size;
        count += 1;
    }
    if count != n {
        return Err(errno::EINVAL);
    }
    Ok((spec, tag))
}

impl Emu {
    /// Whether `fd` is a context of the Ethernet function.
    pub(super) fn ethernet(fd: i32) -> bool {
        crate::fds::is_ethernet(fd)
    }

    /// `GET_CONTEXT` on the Ethernet function, before the common answer: DEVX refused.
    pub(super) fn eth_context_request(drv_in: &[u8]) -> Res {
        if get::<4>(drv_in, 8) & UCTX_DEVX != 0 {
            return Err(errno::EINVAL);
        }
        Ok(())
    }

    /// `GET_CONTEXT` on the Ethernet function, after the common answer: `eth_min_inline`, and
    /// the port attached to its interface.
    pub(super) fn eth_context_answer(&self, drv_out: &mut [u8]) -> Res {
        put::<1>(drv_out, 46, eth_min_inline());
        let attached = PORT.get_or_init(|| {
            let Some(ifname) = std::env::var_os("ZVERBS_EMU_ETH_IF") else {
                crate::log(format_args!(
                    "Ethernet port: no ZVERBS_EMU_ETH_IF; frames loop back into this device"
                ));
                return Ok(());
            };
            let ifname = ifname.to_string_lossy().into_owned();
            let dev = Emu::running()
                .ok_or_else(|| "no device instance".to_string())?
                .device();
            // The port's thread, like the device's, in SCHED_FIFO with `ZVERBS_EMU_RT=1`.
            let port = super::with_realtime(|| crate::port::open(dev, &ifname))
                .map_err(|e| e.to_string())?;
            dev.attach_port(Some(std::sync::Arc::new(port)));
            Ok(())
        });
        attached.as_ref().map(drop).map_err(|why| {
            crate::log(format_args!("Ethernet port: {why}"));
            libc::ENODEV
        })
    }

    /// With `ZVERBS_EMU_ETH_STATS=1`, says on stderr what the port and the device counted
    /// (when an Ethernet context closes): where every frame went, drops included.
    pub(super) fn eth_report(&self) {
        if std::env::var_os("ZVERBS_EMU_ETH_STATS").is_none_or(|v| v != "1") {
            return;
        }
        let s = self.dev.stats();
        let (mut sent, mut failed, mut received, mut long, mut ring) = (0, 0, 0, 0, 0);
        if let Some(c) = crate::port::counters() {
            use std::sync::atomic::Ordering::Relaxed;
            sent = c.sent.load(Relaxed);
            failed = c.send_failed.load(Relaxed);
            received = c.received.load(Relaxed);
            long = c.too_long.load(Relaxed);
            ring = c.ring_dropped.load(Relaxed);
        }
        eprintln!(
            "[zverbs-emu {}] Ethernet: device sent {} arrived {} delivered {} no_rule {} \
             no_wqe {} too_long {} bad {} fillers {}; port sent {sent} send_failed {failed} \
             received {received} too_long {long} ring_dropped {ring}",
            std::process::id(),
            s.eth_sent,
            s.eth_arrived,
            s.eth_delivered,
            s.eth_no_rule,
            s.eth_no_wqe,
            s.eth_too_long,
            s.eth_bad_frames,
            s.eth_fillers
        );
    }

    /// `QUERY_PORT` of the Ethernet function's port 1.
    pub(super) fn eth_query_port(&self, o: &mut [u8]) {
        // IB_PORT_CM_SUP | IB_PORT_IP_BASED_GIDS, as a RoCE port reports.
        put::<4>(o, 0, (1 << 16) | (1 << 26));
        put::<4>(o, 4, 1 << 30); // max_msg_sz
        put::<4>(o, 16, 1); // gid_tbl_len
        put::<2>(o, 20, 1); // pkey_tbl_len
        let down = self.dev.port_state() == zverbs_sim::PortState::Down;
        put::<1>(o, 26, if down { 1 } else { 4 }); // state
        put::<1>(o, 27, 5); // max_mtu: 4096
        put::<1>(o, 28, 3); // active_mtu: 1024 (a 1500-byte netdev MTU)
        put::<1>(o, 34, 2); // active_width: 4X
        put::<1>(o, 35, 64); // active_speed: HDR (200 Gb/s)
        put::<1>(o, 36, if down { 3 } else { 5 }); // phys_state
        put::<1>(o, 37, 2); // link_layer: Ethernet
    }

    /// `QUERY_DEVICE` of the Ethernet function, on top of the common answer.
    pub(super) fn eth_query_device(core_out: &mut [u8], drv_out: &mut [u8], extended: bool) {
        let flags = get::<4>(core_out, 60) | RAW_IP_CSUM | MANAGED_FLOW_STEERING;
        put::<4>(core_out, 60, flags);
        // The function's own node GUID (the sysfs tree's), big-endian as the kernel gives it.
        let guid = super::ETH_NODE_GUID.swap_bytes();
        put::<8>(core_out, 8, guid);
        put::<8>(core_out, 16, guid);
        if !extended {
            return;
        }
        put::<8>(core_out, 224, flags); // device_cap_flags_ex
        put::<4>(core_out, 232, 1 << abi::QPT_RAW_PACKET); // rss_caps.supported_qpts
        put::<4>(core_out, 236, 1 << 16); // max_rwq_indirection_tables
        put::<4>(core_out, 240, 1 << 13); // max_rwq_indirection_table_size
        put::<4>(core_out, 248, 4096); // max_wq_type_rq
        put::<4>(core_out, 252, RAW_PACKET_CAP_IP_CSUM); // raw_packet_caps
        // mlx5_ib_query_device_resp: the RSS hash (IPv4 addresses, TCP and UDP ports,
        // Toeplitz) and striding receive queues of 2^6..2^13-byte strides, 2^3..2^16 per WQE,
        // for raw packet QPs.
        let fields = RxHashFields::SRC_IPV4
            | RxHashFields::DST_IPV4
            | RxHashFields::SRC_PORT_TCP
            | RxHashFields::DST_PORT_TCP
            | RxHashFields::SRC_PORT_UDP
            | RxHashFields::DST_PORT_UDP;
        put::<8>(drv_out, 16, fields.bits());
        put::<1>(drv_out, 24, TOEPLITZ);
        for (at, v) in [(72, 6), (76, 13), (80, 3), (84, 16)] {
            put::<4>(drv_out, at, v);
        }
        put::<4>(drv_out, 88, 1 << abi::QPT_RAW_PACKET);
    }

    /// The extended `CREATE_QP` of an RSS QP (`comp_mask` names an indirection table).
    pub(super) fn create_rss_qp(&self, fd: i32, i: &[u8], d: &[u8], o: &mut [u8]) -> Res {
        need_net_raw()?;
        let table_h = get::<4>(i, 56) as u32;
        let fields_raw = get::<8>(d, 0);
        if get::<1>(d, 8) != TOEPLITZ || get::<4>(d, 144) != 0 {
            return Err(errno::EOPNOTSUPP);
        }
        if get::<1>(d, 9) != RSS_KEY_LEN {
            return Err(errno::EINVAL);
        }
        let fields = RxHashFields::from_bits(fields_raw).ok_or(errno::EOPNOTSUPP)?;
        let mut key = [0u8; 40];
        key.copy_from_slice(d.get(16..56).ok_or(errno::EINVAL)?);
        let mut ctl = self.ctl();
        let table = *ctl.ind_tables.get(&table_h).ok_or(errno::EINVAL)?;
        let rss = self
            .dev
            .create_rss_qp(RssConfig {
                ind_table: table,
                fields,
                key,
            })
            .map_err(|e| match e {
                SimError::InvalidConfig(_) => errno::EOPNOTSUPP,
                e => sim_errno(e),
            })?;
        let h = ctl.handle();
        ctl.qps.insert(
            h,
            Qp {
                state: qps::RESET,
                fd,
                raw: Some(Raw::Rss(rss)),
                ..Qp::default()
            },
        );
        put::<4>(o, 0, u64::from(h));
        put::<4>(o, 4, 0); // qpn: 0 for every RSS QP
        put::<4>(o, abi::create_qp::EX_R_RESPONSE_LENGTH, o.len() as u64);
        crate::log(format_args!(
            "  RSS QP {rss}: table {table}, fields {fields:?}"
        ));
        Ok(())
    }

    /// The checks of `CREATE_QP` of a raw packet QP, and whether it is an RSS QP.
    pub(super) fn raw_qp_request(fd: i32, i: &[u8], extended: bool) -> Result<bool, i32> {
        if !Self::ethernet(fd) {
            // A raw packet QP needs an Ethernet port.
            return Err(errno::EOPNOTSUPP);
        }
        need_net_raw()?;
        Ok(extended && get::<4>(i, 48) & CREATE_QP_MASK_IND_TABLE != 0)
    }

    /// A raw QP's send ring: its own buffer (`sq_buf_addr`), not after the receive ring.
    pub(super) fn raw_sq_buf(d: &[u8]) -> u64 {
        get::<8>(d, SQ_BUF_ADDR)
    }

    /// A raw packet QP's transitions, after `modify_qp` recorded the attributes (`prev`: the
    /// state before).
    pub(super) fn modify_raw(&self, qp: &mut Qp, m: u32, prev: u8) -> Res {
        let Some(Raw::Qp) = qp.raw else {
            // libmlx5 never modifies an RSS QP.
            return Err(errno::EOPNOTSUPP);
        };
        if m & abi::mask::STATE == 0 {
            return Ok(());
        }
        match qp.state {
            qps::INIT if prev == qps::RESET && m & abi::mask::PORT == 0 => Err(errno::EINVAL),
            qps::INIT | qps::RTR => Ok(()),
            qps::RTS => match self.dev.ready_raw(qp.qpn) {
                Ok(()) | Err(SimError::AlreadyConnected(_)) => Ok(()),
                Err(e) => Err(sim_errno(e)),
            },
            qps::ERR => self.dev.set_error(qp.qpn).map_err(sim_errno),
            qps::RESET => self.dev.reset_qp(qp.qpn).map(drop).map_err(sim_errno),
            _ => Err(errno::EINVAL),
        }
    }

    /// `CREATE_FLOW` (extended): one rule on a raw packet QP or an RSS QP.
    pub(super) fn create_flow(&self, fd: i32, i: &[u8], o: &mut [u8]) -> Res {
        if get::<4>(i, 0) != 0 || get::<2>(i, 17) != 0 {
            return Err(errno::EINVAL);
        }
        need_net_raw()?;
        let qp_h = get::<4>(i, 4) as u32;
        let ty = get::<4>(i, 8);
        let size = get::<2>(i, 12) as usize;
        let priority = get::<2>(i, 14) as u16;
        let n = get::<1>(i, 16);
        let port = get::<1>(i, 19);
        let flags = get::<4>(i, 20);
        if flags >= 1 << 3 || n > MAX_SPECS || port != 1 || !Self::ethernet(fd) {
            return Err(errno::EINVAL);
        }
        if ty != 0 || flags != 0 {
            // ALL_DEFAULT, MC_DEFAULT, SNIFFER, DONT_TRAP and EGRESS are not modelled.
            return Err(errno::EOPNOTSUPP);
        }
        if priority > 15 {
            return Err(errno::ENOMEM);
        }
        let specs = i.get(24..24 + size).ok_or(errno::EINVAL)?;
        let (spec, tag) = parse_specs(specs, n)?;
        let mut ctl = self.ctl();
        let dest = match ctl.qps.get(&qp_h).ok_or(errno::EINVAL)? {
            Qp {
                raw: Some(Raw::Qp),
                qpn,
                ..
            } => FlowDest::RawQp(*qpn),
            Qp {
                raw: Some(Raw::Rss(h)),
                ..
            } => FlowDest::Rss(*h),
            _ => return Err(errno::EINVAL),
        };
        let id = self
            .dev
            .create_flow(FlowAttr {
                priority,
                spec,
                dest,
                tag,
            })
            .map_err(|e| match e {
                SimError::InvalidConfig(why) if why.contains("tag") => libc::EEXIST,
                e => sim_errno(e),
            })?;
        let h = ctl.handle();
        ctl.flows.insert(h, id);
        put::<4>(o, 0, 0);
        put::<4>(o, 4, u64::from(h));
        crate::log(format_args!(
            "  flow {id}: priority {priority} {spec:?} tag {tag:?} -> {dest:?}"
        ));
        Ok(())
    }

    /// `DESTROY_FLOW` (extended).
    pub(super) fn destroy_flow(&self, i: &[u8]) -> Res {
        let h = get::<4>(i, 4) as u32;
        let mut ctl = self.ctl();
        let id = *ctl.flows.get(&h).ok_or(errno::EINVAL)?;
        self.dev.destroy_flow(id).map_err(sim_errno)?;
        ctl.flows.remove(&h);
        Ok(())
    }

    /// `CREATE_WQ` (extended): a receive work queue over libmlx5's ring, ordinary or striding.
    pub(super) fn create_wq(
        &self,
        fd: i32,
        i: &[u8],
        d: &[u8],
        o: &mut [u8],
        dout: &mut [u8],
    ) -> Res {
        if !Self::ethernet(fd) || get::<4>(i, 0) != 0 || get::<4>(i, 4) != 0 {
            return Err(errno::EINVAL);
        }
        if get::<4>(i, 32) != 0 {
            // VLAN stripping, FCS scatter, delay drop, end padding: not modelled.
            return Err(errno::EOPNOTSUPP);
        }
        if d.len() < 40 {
            return Err(errno::EINVAL);
        }
        let cq_h = get::<4>(i, 20) as u32;
        let max_wr = get::<4>(i, 24) as u32;
        let max_sge = get::<4>(i, 28) as u32;
        let (Some(buf), Some(db)) = (ptr(get::<8>(d, 0)), ptr(get::<8>(d, 8))) else {
            return Err(errno::EINVAL);
        };
        let cnt = get::<4>(d, 16) as u32;
        let shift = get::<4>(d, 20) as u32;
        let uidx = get::<4>(d, 24) as u32;
        let comp = get::<4>(d, 32);
        if comp & !1 != 0 {
            return Err(errno::EOPNOTSUPP);
        }
        if cnt == 0 || !(4..=10).contains(&shift) {
            return Err(errno::EINVAL);
        }
        let striding = if comp & 1 != 0 {
            let s = Striding {
                log_stride_bytes: get::<4>(d, 36) as u32,
                log_num_strides: get::<4>(d, 40) as u32,
            };
            if !(6..=13).contains(&s.log_stride_bytes) || !(3..=16).contains(&s.log_num_strides) {
                return Err(errno::EINVAL);
            }
            Some(s)
        } else {
            None
        };
        let mut ctl = self.ctl();
        let cqn = *ctl.cqs.get(&cq_h).ok_or(errno::EINVAL)?;
        let cfg = WqConfig {
            cq: cqn,
            max_wr: cnt,
            max_sge: if striding.is_some() {
                1
            } else {
                (1 << shift) / 16
            },
            striding,
            two_byte_shift: get::<4>(d, 44) != 0,
        };
        // SAFETY: libmlx5 allocated the ring (`cnt` WQEs of `1 << shift` bytes) and the
        // doorbell record for this WQ and frees them only after DESTROY_WQ, after which the
        // device forgets them.
        let wqn = unsafe { self.dev.create_wq_external(cfg, buf, cnt, db.cast(), uidx) }.map_err(
            |e| match e {
                SimError::InvalidConfig(_) => errno::EINVAL,
                e => sim_errno(e),
            },
        )?;
        let h = ctl.handle();
        ctl.wqs.insert(h, wqn);
        put::<4>(o, 4, o.len() as u64);
        put::<4>(o, 8, u64::from(h));
        // The kernel echoes the sizes asked for (DPDK checks that it does).
        put::<4>(o, 12, u64::from(max_wr));
        put::<4>(o, 16, u64::from(max_sge));
        put::<4>(o, 20, u64::from(wqn));
        put::<4>(dout, 0, dout.len() as u64);
        crate::log(format_args!(
            "  WQ {wqn:#x} uidx {uidx}: {cnt}×{} at {buf:p}{}",
            1u32 << shift,
            match striding {
                Some(s) => format!(", striding {s:?}"),
                None => String::new(),
            }
        ));
        Ok(())
    }

    fn wqn(&self, h: u32) -> Result<u32, i32> {
        self.ctl().wqs.get(&h).copied().ok_or(errno::EINVAL)
    }

    /// `MODIFY_WQ` (extended): RESET, RDY or ERR.
    pub(super) fn modify_wq(&self, i: &[u8], d: &[u8]) -> Res {
        let m = get::<4>(i, 0);
        if m == 0 || m >= 1 << 3 {
            return Err(errno::EINVAL);
        }
        if get::<8>(d, 0) != 0 {
            return Err(errno::EOPNOTSUPP);
        }
        let wqn = self.wqn(get::<4>(i, 4) as u32)?;
        if m & 1 == 0 {
            return Ok(());
        }
        match get::<4>(i, 8) {
            1 => self.dev.ready_wq(wqn).map_err(sim_errno),
            0 | 2 => self.dev.reset_wq(wqn).map_err(sim_errno),
            _ => Err(errno::EINVAL),
        }
    }

    /// `DESTROY_WQ` (extended).
    pub(super) fn destroy_wq(&self, i: &[u8], o: &mut [u8]) -> Res {
        let h = get::<4>(i, 4) as u32;
        let wqn = self.wqn(h)?;
        self.dev.destroy_wq(wqn).map_err(|e| match e {
            SimError::InvalidConfig(_) => errno::EBUSY,
            e => sim_errno(e),
        })?;
        self.ctl().wqs.remove(&h);
        put::<4>(o, 4, o.len() as u64);
        Ok(())
    }

    /// `CREATE_RWQ_IND_TBL` (extended): 2^log work queues by handle.
    pub(super) fn create_ind_table(&self, i: &[u8], o: &mut [u8]) -> Res {
        let log = get::<4>(i, 4);
        if get::<4>(i, 0) != 0 || log > 13 {
            return Err(errno::EINVAL);
        }
        let n = 1usize << log;
        let mut wqns = Vec::with_capacity(n);
        for k in 0..n {
            let at = 8 + 4 * k;
            if at + 4 > i.len() {
                return Err(errno::EINVAL);
            }
            wqns.push(self.wqn(get::<4>(i, at) as u32)?);
        }
        let table = self.dev.create_rwq_ind_table(&wqns).map_err(sim_errno)?;
        let mut ctl = self.ctl();
        let h = ctl.handle();
        ctl.ind_tables.insert(h, table);
        put::<4>(o, 4, o.len() as u64);
        put::<4>(o, 8, u64::from(h));
        put::<4>(o, 12, u64::from(RQTN_BASE + table));
        Ok(())
    }

    /// `DESTROY_RWQ_IND_TBL` (extended).
    pub(super) fn destroy_ind_table(&self, i: &[u8]) -> Res {
        let h = get::<4>(i, 4) as u32;
        let mut ctl = self.ctl();
        let table = *ctl.ind_tables.get(&h).ok_or(errno::EINVAL)?;
        self.dev.destroy_rwq_ind_table(table).map_err(|e| match e {
            SimError::InvalidConfig(_) => errno::EBUSY,
            e => sim_errno(e),
        })?;
        ctl.ind_tables.remove(&h);
        Ok(())
    }

    /// `DESTROY_QP` of a raw packet QP or an RSS QP: refused while a flow rule steers to it
    /// (the kernel's use count: EBUSY).
    pub(super) fn destroy_raw(&self, h: u32, qp: Qp) -> Res {
        let r = match qp.raw {
            Some(Raw::Rss(rss)) => self.dev.destroy_rss_qp(rss),
            _ => self.dev.destroy_qp(qp.qpn),
        };
        r.map_err(|e| match e {
            SimError::InvalidConfig(_) => errno::EBUSY,
            e => sim_errno(e),
        })?;
        self.ctl().qps.remove(&h);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A spec in the kernel's layout: type, size, value, mask.
    fn spec(ty: u32, val: &[u8], mask: &[u8]) -> Vec<u8> {
        let mut v = ty.to_le_bytes().to_vec();
        v.extend_from_slice(&((8 + val.len() + mask.len()) as u16).to_le_bytes());
        v.extend_from_slice(&[0, 0]);
        v.extend_from_slice(val);
        v.extend_from_slice(mask);
        v
    }

    #[test]
    fn market_data_rule_from_kernel_specs() {
        let mut eth_val = [0u8; 16];
        eth_val[..6].copy_from_slice(&[0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]);
        let mut eth_mask = [0u8; 16];
        eth_mask[..6].fill(0xff);
        let mut specs = spec(SPEC_ETH, &eth_val, &eth_mask);
        let mut ip_val = [0u8; 12];
        ip_val[4..8].copy_from_slice(&[239, 1, 2, 3]);
        ip_val[8] = 17;
        let mut ip_mask = [0u8; 12];
        ip_mask[4..9].fill(0xff);
        specs.extend(spec(SPEC_IPV4, &ip_val, &ip_mask));
        specs.extend(spec(SPEC_UDP, &[0x79, 0x18, 0, 0], &[0xff, 0xff, 0, 0]));
        specs.extend(spec(SPEC_ACTION_TAG, &[7, 0, 0, 0], &[0, 0, 0, 0]));
        let (s, tag) = parse_specs(&specs, 4).unwrap();
        assert_eq!(s.dst_mac, Some([0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]));
        assert_eq!(s.dst_ip, Some(Ipv4Addr::new(239, 1, 2, 3)));
        assert_eq!(
            (s.l4, s.dst_port, s.src_port),
            (Some(L4Proto::Udp), Some(31000), None)
        );
        assert_eq!(tag, Some(7));
        assert_eq!(parse_specs(&specs, 3), Err(errno::EINVAL), "count differs");
        // A partial mask (DPDK's IPv6 multicast rule) is refused, not widened.
        let mut half = eth_mask;
        half[2..6].fill(0);
        let partial = spec(SPEC_ETH, &eth_val, &half);
        assert_eq!(parse_specs(&partial, 1), Err(errno::EOPNOTSUPP));
        // IPv6: not modelled.
        assert_eq!(
            parse_specs(&spec(0x31, &[0; 40], &[0; 40]), 1),
            Err(errno::EOPNOTSUPP)
        );
    }
}

//! Raw Ethernet through rdma-core: what a device can do with raw packets, receive work
//! queues (`ibv_create_wq`, `mlx5dv_create_wq` with striding parameters), indirection
//! tables, RSS QPs (`ibv_create_qp_ex` with `rx_hash_conf`) and flow rules
//! (`ibv_create_flow`, the specs written as `verbs.h` lays them out).

use std::any::Any;
use std::ptr::{self, NonNull};

use super::{VerbsContext, VerbsPd, VerbsQp, init_obj};
use crate::error::{Error, Result};
use crate::provider::{
    CqProvider, FlowProvider, FlowTarget, IndTableProvider, RawSupport, RssProvider, WqEngine,
    WqProvider,
};
use crate::types::device::LinkLayer;
use crate::types::eth::{FlowRule, L4Proto, RawCaps, RxHash, WqShape, min_inline_for_part};
use zverbs_ffi::eth::*;
use zverbs_ffi::types::{
    IBV_QP_INIT_ATTR_PD, IBV_QPT_RAW_PACKET, MLX5DV_OBJ_RWQ, ibv_device_attr, ibv_device_attr_ex,
    ibv_qp, ibv_qp_cap, ibv_qp_init_attr_ex, ibv_rx_hash_conf,
};

/// The largest frame of a port whose netdev's MTU is `mtu`: the IP packet, the Ethernet
/// header and one VLAN tag.
fn frame_of_mtu(mtu: u32) -> u32 {
    mtu + 18
}

/// The MTU of the device's network interface (`/sys/class/net/<netdev>/mtu`); 1500 when it
/// cannot be read.
fn netdev_mtu(ctx: &VerbsContext) -> u32 {
    let root = std::env::var_os("SYSFS_PATH").map_or_else(
        || std::path::PathBuf::from("/sys"),
        std::path::PathBuf::from,
    );
    let net = root
        .join("class/infiniband")
        .join(&ctx.name)
        .join("device/net");
    std::fs::read_dir(net)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .find_map(|ifname| {
            std::fs::read_to_string(format!("/sys/class/net/{ifname}/mtu"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
        })
        .unwrap_or(1500)
}

/// `raw_support` of an rdma-core device: an Ethernet port, and raw packet capabilities
/// (`ibv_query_device_ex`'s `raw_packet_caps`, or the checksum and flow steering flags).
pub(super) fn raw_support(ctx: &VerbsContext, port: u8) -> Result<RawSupport> {
    use crate::provider::ContextProvider;
    let none = |reason: String| Error::NoRawPacket {
        device: ctx.name.clone(),
        reason,
    };
    let p = ctx.query_port(port)?;
    if p.link_layer != LinkLayer::Ethernet {
        return Err(none(format!(
            "port {port}'s link layer is {:?}, not Ethernet",
            p.link_layer
        )));
    }
    // SAFETY: all-zero bytes are a valid `ibv_device_attr`.
    let mut base: ibv_device_attr = unsafe { core::mem::zeroed() };
    // SAFETY: a live context and a valid out-pointer.
    let ret = unsafe { (ctx.verbs.ibv_query_device)(ctx.ctx, &mut base) };
    if ret != 0 {
        return Err(Error::from_ret("ibv_query_device", ret));
    }
    // SAFETY: all-zero bytes are a valid `ibv_device_attr_ex`.
    let mut ex: ibv_device_attr_ex = unsafe { core::mem::zeroed() };
    // SAFETY: a live context and a writable struct of the size the call passes.
    let raw_packet_caps = match unsafe { zverbs_ffi::ibv_query_device_ex(ctx.ctx, &mut ex) } {
        0 => ex.raw_packet_caps,
        _ => 0,
    };
    let flags = base.device_cap_flags;
    let caps = RawCaps {
        raw_packet_caps,
        ip_csum: flags & IBV_DEVICE_RAW_IP_CSUM != 0,
        flow_steering: flags & IBV_DEVICE_MANAGED_FLOW_STEERING != 0,
    };
    if !caps.has_raw_qps() {
        return Err(none(format!(
            "it reports no raw packet capability (raw_packet_caps {raw_packet_caps:#x}), no \
             IBV_DEVICE_RAW_IP_CSUM and no IBV_DEVICE_MANAGED_FLOW_STEERING (device_cap_flags \
             {flags:#x}); rxe and siw have no raw packet QPs"
        )));
    }
    Ok(RawSupport {
        caps,
        min_inline: min_inline_for_part(base.vendor_part_id),
        max_frame: frame_of_mtu(netdev_mtu(ctx)),
        needs_cap_net_raw: true,
    })
}

/// A receive work queue: ordinary through `ibv_create_wq`, or `mlx5dv_create_wq` (striding
/// or not) for the direct backend, whose ring `mlx5dv_init_obj(MLX5DV_OBJ_RWQ)` reports. It
/// is moved to ready here.
pub(super) fn create_wq(
    pd: &VerbsPd,
    cq: &dyn CqProvider,
    max_wr: u32,
    shape: WqShape,
    direct: bool,
) -> Result<Box<dyn WqProvider>> {
    let cq = cq
        .verbs_cq()
        .ok_or_else(|| Error::InvalidArgument("the CQ belongs to another kind of device".into()))?;
    let (max_sge, striding) = match shape {
        WqShape::Ordinary { max_sge } => (max_sge, None),
        WqShape::Striding(s) => (1, Some(s)),
    };
    let mut attr = ibv_wq_init_attr {
        wq_context: ptr::null_mut(),
        wq_type: IBV_WQT_RQ,
        max_wr,
        max_sge,
        pd: pd.pd,
        cq,
        comp_mask: 0,
        create_flags: 0,
    };
    let wq = if direct {
        let m = zverbs_ffi::load::mlx5()?;
        let Some(create) = m.mlx5dv_create_wq else {
            return Err(Error::Backend {
                requested: crate::types::backend::BackendKind::Direct,
                reason: "this libmlx5 has no mlx5dv_create_wq".into(),
            });
        };
        let mut dv = mlx5dv_wq_init_attr::default();
        if let Some(s) = striding {
            dv.comp_mask = MLX5DV_WQ_INIT_ATTR_MASK_STRIDING_RQ;
            dv.striding_rq_attrs = mlx5dv_striding_rq_init_attr {
                single_stride_log_num_of_bytes: u32::from(s.log_stride_size),
                single_wqe_log_num_of_strides: u32::from(s.log_num_strides),
                two_byte_shift_en: 0,
            };
        }
        // SAFETY: a live context, PD and CQ; valid attribute structs.
        let wq = unsafe { create(pd.ctx, &mut attr, &mut dv) };
        if !wq.is_null() {
            // SAFETY: a WQ just made, ours alone.
            unsafe { init_wq_events(wq, ptr::null_mut()) };
        }
        wq
    } else {
        if striding.is_some() {
            return Err(Error::StridingNeedsDirect(
                "libibverbs' ibv_post_wq_recv writes no striding WQE".into(),
            ));
        }
        // SAFETY: a live context, PD and CQ; a valid attribute struct.
        unsafe { ibv_create_wq(pd.ctx, &mut attr) }
    };
    let Some(wq) = NonNull::new(wq) else {
        let verb = if direct {
            "mlx5dv_create_wq"
        } else {
            "ibv_create_wq"
        };
        return Err(Error::last_os(verb));
    };
    let mut out = VerbsWq {
        wq,
        max_wr: attr.max_wr,
        max_sge: attr.max_sge,
        ring: None,
    };
    if direct {
        let mut dv = mlx5dv_rwq {
            buf: ptr::null_mut(),
            dbrec: ptr::null_mut(),
            wqe_cnt: 0,
            stride: 0,
            comp_mask: 0,
        };
        // SAFETY: a live WQ of an mlx5 context, and `dv` is a valid out-struct.
        unsafe {
            init_obj(MLX5DV_OBJ_RWQ, |obj| {
                obj.rwq.r#in = wq.as_ptr().cast();
                obj.rwq.out = (&raw mut dv).cast();
            })
        }?;
        let (Some(buf), Some(dbrec)) = (NonNull::new(dv.buf.cast::<u8>()), NonNull::new(dv.dbrec))
        else {
            return Err(Error::Backend {
                requested: crate::types::backend::BackendKind::Direct,
                reason: "mlx5dv_init_obj(RWQ) reported a null ring or doorbell record".into(),
            });
        };
        out.ring = Some((
            zverbs_mlx5dv::WqLayout {
                buf,
                wqe_cnt: dv.wqe_cnt,
                stride: dv.stride,
            },
            dbrec,
        ));
    }
    Ok(Box::new(out))
}

/// A receive work queue, destroyed on drop.
#[derive(Debug)]
struct VerbsWq {
    wq: NonNull<ibv_wq>,
    max_wr: u32,
    max_sge: u32,
    /// Its ring and doorbell record, for the direct backend.
    ring: Option<(zverbs_mlx5dv::WqLayout, NonNull<u32>)>,
}

// SAFETY: an rdma-core WQ handle; its control verbs may be called from any thread, and its
// data path is the one receive queue taken from it.
unsafe impl Send for VerbsWq {}
// SAFETY: as above.
unsafe impl Sync for VerbsWq {}

impl WqProvider for VerbsWq {
    fn wqn(&self) -> u32 {
        // SAFETY: a live WQ.
        unsafe { (*self.wq.as_ptr()).wq_num }
    }
    fn caps(&self) -> (u32, u32) {
        match self.ring {
            Some((l, _)) => (l.wqe_cnt, self.max_sge),
            None => (self.max_wr, self.max_sge),
        }
    }
    fn ready(&self) -> Result<()> {
        let mut a = ibv_wq_attr {
            attr_mask: IBV_WQ_ATTR_STATE,
            wq_state: IBV_WQS_RDY,
            ..Default::default()
        };
        // SAFETY: a live WQ and a valid attribute struct.
        let ret = unsafe { ibv_modify_wq(self.wq.as_ptr(), &mut a) };
        if ret != 0 {
            return Err(Error::from_ret("ibv_modify_wq", ret));
        }
        Ok(())
    }
    fn engine(&self) -> WqEngine {
        match self.ring {
            Some((layout, dbrec)) => WqEngine::Direct { layout, dbrec },
            None => WqEngine::Verbs(self.wq),
        }
    }
}

impl Drop for VerbsWq {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once; its queue and the tables over it hold it
        // alive, so none is left.
        unsafe { ibv_destroy_wq(self.wq.as_ptr()) };
    }
}

/// An indirection table over work queues of one context.
pub(super) fn create_ind_table(
    ctx: &VerbsContext,
    wqs: &[&dyn WqProvider],
) -> Result<Box<dyn IndTableProvider>> {
    let mut table = wqs
        .iter()
        .map(|w| {
            (*w as &dyn Any)
                .downcast_ref::<VerbsWq>()
                .map(|w| w.wq.as_ptr())
                .ok_or_else(|| Error::InvalidArgument("the work queue is not rdma-core's".into()))
        })
        .collect::<Result<Vec<*mut ibv_wq>>>()?;
    let mut attr = ibv_rwq_ind_table_init_attr {
        log_ind_tbl_size: table.len().trailing_zeros(),
        ind_tbl: table.as_mut_ptr(),
        comp_mask: 0,
    };
    // SAFETY: a live context; the table names `2^log` live WQs and lives across the call.
    let t = unsafe { ibv_create_rwq_ind_table(ctx.ctx, &mut attr) };
    let t = NonNull::new(t).ok_or_else(|| Error::last_os("ibv_create_rwq_ind_table"))?;
    Ok(Box::new(VerbsIndTable(t)))
}

/// An indirection table, destroyed on drop.
#[derive(Debug)]
struct VerbsIndTable(NonNull<ibv_rwq_ind_table>);

// SAFETY: an rdma-core handle used only by its creation and destruction.
unsafe impl Send for VerbsIndTable {}
// SAFETY: as above.
unsafe impl Sync for VerbsIndTable {}

impl IndTableProvider for VerbsIndTable {}

impl Drop for VerbsIndTable {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once, after the RSS QPs over it (they hold it).
        unsafe { ibv_destroy_rwq_ind_table(self.0.as_ptr()) };
    }
}

/// An RSS QP over `table` (`ibv_create_qp_ex`: a raw packet QP with an indirection table and
/// a Toeplitz hash; no CQs, no queues).
pub(super) fn create_rss_qp(
    pd: &VerbsPd,
    table: &dyn IndTableProvider,
    hash: &RxHash,
) -> Result<Box<dyn RssProvider>> {
    let t = (table as &dyn Any)
        .downcast_ref::<VerbsIndTable>()
        .ok_or_else(|| Error::InvalidArgument("the indirection table is not rdma-core's".into()))?;
    let mut key = hash.key;
    let mut attr = ibv_qp_init_attr_ex {
        qp_context: ptr::null_mut(),
        send_cq: ptr::null_mut(),
        recv_cq: ptr::null_mut(),
        srq: ptr::null_mut(),
        cap: ibv_qp_cap {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        },
        qp_type: IBV_QPT_RAW_PACKET,
        sq_sig_all: 0,
        comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_IND_TABLE | IBV_QP_INIT_ATTR_RX_HASH,
        pd: pd.pd,
        xrcd: ptr::null_mut(),
        create_flags: 0,
        max_tso_header: 0,
        rwq_ind_tbl: t.0.as_ptr().cast(),
        rx_hash_conf: ibv_rx_hash_conf {
            rx_hash_function: IBV_RX_HASH_FUNC_TOEPLITZ,
            rx_hash_key_len: key.len() as u8,
            rx_hash_key: key.as_mut_ptr(),
            rx_hash_fields_mask: hash.fields.bits(),
        },
        source_qpn: 0,
        send_ops_flags: 0,
    };
    // SAFETY: a live context, PD and table; the key lives across the call.
    let qp = unsafe { ibv_create_qp_ex(pd.ctx, &mut attr) };
    let Some(qp) = NonNull::new(qp) else {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err(Error::raw_verb("ibv_create_qp_ex", errno));
    };
    Ok(Box::new(VerbsRss {
        qp,
        destroy: pd.verbs.ibv_destroy_qp,
    }))
}

/// An RSS QP, destroyed on drop.
#[derive(Debug)]
struct VerbsRss {
    qp: NonNull<ibv_qp>,
    destroy: unsafe extern "C" fn(*mut ibv_qp) -> core::ffi::c_int,
}

// SAFETY: an rdma-core QP handle used only by flow creation and its destruction.
unsafe impl Send for VerbsRss {}
// SAFETY: as above.
unsafe impl Sync for VerbsRss {}

impl FlowTarget for VerbsRss {
    fn create_flow(&self, rule: &FlowRule, port: u8) -> Result<Box<dyn FlowProvider>> {
        create_flow(self.qp, rule, port)
    }
}

impl RssProvider for VerbsRss {}

impl Drop for VerbsRss {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once, after the rules steering to it (they hold it).
        unsafe { (self.destroy)(self.qp.as_ptr()) };
    }
}

impl FlowTarget for VerbsQp {
    fn create_flow(&self, rule: &FlowRule, port: u8) -> Result<Box<dyn FlowProvider>> {
        create_flow(self.qp, rule, port)
    }
}

/// The bytes of `ibv_create_flow`'s argument for `rule` on `port`: the attribute, then an
/// `ETH` spec (always: a zero mask matches every frame), an `IPV4_EXT` spec when the rule
/// names an address or a transport, a `UDP`/`TCP` spec when it names a transport, and an
/// `ACTION_TAG` when it carries a tag; each spec's `size` is its struct's, and the attribute's
/// `size` the whole (as perftest writes it). Returns the words (4-aligned) and the spec count.
pub(crate) fn flow_bytes(rule: &FlowRule, port: u8) -> (Vec<u32>, u8) {
    use core::mem::{offset_of, size_of};
    // Written byte by byte at the structs' offsets, so that their padding is zero bytes (a
    // copy of a `repr(C)` value leaves it uninitialised): host order for the headers and
    // tags, network order for the filters.
    fn spec(b: &mut Vec<u8>, ty: u32, size: usize) -> usize {
        let at = b.len();
        b.resize(at + size, 0);
        b[at..at + 4].copy_from_slice(&ty.to_ne_bytes());
        b[at + 4..at + 6].copy_from_slice(&(size as u16).to_ne_bytes());
        at
    }
    let mut b = vec![0u8; size_of::<ibv_flow_attr>()];
    let mut n = 0u8;
    // ETH: the filter's value, then its mask (`struct ibv_flow_eth_filter`, 16 bytes each).
    let eth = spec(&mut b, IBV_FLOW_SPEC_ETH, size_of::<ibv_flow_spec_eth>());
    let (val, mask) = (
        eth + offset_of!(ibv_flow_spec_eth, val),
        eth + offset_of!(ibv_flow_spec_eth, mask),
    );
    let f = &rule.spec;
    let dst = offset_of!(ibv_flow_eth_filter, dst_mac);
    let src = offset_of!(ibv_flow_eth_filter, src_mac);
    let et = offset_of!(ibv_flow_eth_filter, ether_type);
    if let Some(m) = f.dst_mac {
        b[val + dst..val + dst + 6].copy_from_slice(&m);
        b[mask + dst..mask + dst + 6].fill(0xff);
    }
    if let Some(m) = f.src_mac {
        b[val + src..val + src + 6].copy_from_slice(&m);
        b[mask + src..mask + src + 6].fill(0xff);
    }
    if let Some(t) = f.ether_type {
        b[val + et..val + et + 2].copy_from_slice(&t.to_be_bytes());
        b[mask + et..mask + et + 2].fill(0xff);
    }
    n += 1;
    if f.needs_ipv4() {
        let ip = spec(
            &mut b,
            IBV_FLOW_SPEC_IPV4_EXT,
            size_of::<ibv_flow_spec_ipv4_ext>(),
        );
        let (val, mask) = (
            ip + offset_of!(ibv_flow_spec_ipv4_ext, val),
            ip + offset_of!(ibv_flow_spec_ipv4_ext, mask),
        );
        for (addr, at) in [
            (f.src_ip, offset_of!(ibv_flow_ipv4_ext_filter, src_ip)),
            (f.dst_ip, offset_of!(ibv_flow_ipv4_ext_filter, dst_ip)),
        ] {
            if let Some(a) = addr {
                b[val + at..val + at + 4].copy_from_slice(&a.octets());
                b[mask + at..mask + at + 4].fill(0xff);
            }
        }
        n += 1;
    }
    if let Some(l4) = f.l4 {
        let ty = match l4 {
            L4Proto::Udp => IBV_FLOW_SPEC_UDP,
            L4Proto::Tcp => IBV_FLOW_SPEC_TCP,
        };
        let t = spec(&mut b, ty, size_of::<ibv_flow_spec_tcp_udp>());
        let (val, mask) = (
            t + offset_of!(ibv_flow_spec_tcp_udp, val),
            t + offset_of!(ibv_flow_spec_tcp_udp, mask),
        );
        for (p, at) in [
            (f.dst_port, offset_of!(ibv_flow_tcp_udp_filter, dst_port)),
            (f.src_port, offset_of!(ibv_flow_tcp_udp_filter, src_port)),
        ] {
            if let Some(p) = p {
                b[val + at..val + at + 2].copy_from_slice(&p.to_be_bytes());
                b[mask + at..mask + at + 2].fill(0xff);
            }
        }
        n += 1;
    }
    if let Some(tag) = rule.tag {
        let t = spec(
            &mut b,
            IBV_FLOW_SPEC_ACTION_TAG,
            size_of::<ibv_flow_spec_action_tag>(),
        );
        let at = t + offset_of!(ibv_flow_spec_action_tag, tag_id);
        b[at..at + 4].copy_from_slice(&tag.to_ne_bytes());
        n += 1;
    }
    // The attribute: NORMAL, the whole size, the priority, the specs, the port.
    let total = b.len() as u16;
    let mut put = |at: usize, bytes: &[u8]| b[at..at + bytes.len()].copy_from_slice(bytes);
    put(
        offset_of!(ibv_flow_attr, r#type),
        &IBV_FLOW_ATTR_NORMAL.to_ne_bytes(),
    );
    put(offset_of!(ibv_flow_attr, size), &total.to_ne_bytes());
    put(
        offset_of!(ibv_flow_attr, priority),
        &rule.priority.to_ne_bytes(),
    );
    put(offset_of!(ibv_flow_attr, num_of_specs), &[n]);
    put(offset_of!(ibv_flow_attr, port), &[port]);
    let words = b
        .chunks(4)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..c.len()].copy_from_slice(c);
            u32::from_ne_bytes(w)
        })
        .collect();
    (words, n)
}

/// `ibv_create_flow` of `rule` on `port` steering to `qp`.
fn create_flow(qp: NonNull<ibv_qp>, rule: &FlowRule, port: u8) -> Result<Box<dyn FlowProvider>> {
    rule.check()?;
    let (mut words, _) = flow_bytes(rule, port);
    // SAFETY: a live QP; the attribute and its specs, `size` bytes, in `words`.
    let flow = unsafe { ibv_create_flow(qp.as_ptr(), words.as_mut_ptr().cast()) };
    let Some(flow) = NonNull::new(flow) else {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        return Err(Error::flow_verb(errno, rule.priority));
    };
    Ok(Box::new(VerbsFlow(flow)))
}

/// A flow rule, removed on drop.
#[derive(Debug)]
struct VerbsFlow(NonNull<ibv_flow>);

// SAFETY: an rdma-core handle used only by its destruction.
unsafe impl Send for VerbsFlow {}
// SAFETY: as above.
unsafe impl Sync for VerbsFlow {}

impl FlowProvider for VerbsFlow {}

impl Drop for VerbsFlow {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once.
        unsafe { ibv_destroy_flow(self.0.as_ptr()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    /// perftest's multicast rule, byte for byte: the attribute (size 20 + 40 + 32 + 16 = 108,
    /// three specs, port 1), an ETH spec with the group's MAC under a full mask, an IPV4_EXT
    /// spec with the group address, a UDP spec with the port, all in network byte order.
    #[test]
    fn a_multicast_rule_in_verbs_layout() {
        let group = Ipv4Addr::new(239, 1, 2, 3);
        let (words, n) = flow_bytes(&FlowRule::multicast(group, 31000), 1);
        let b: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(n, 3);
        assert_eq!(
            &b[8..14],
            &[108, 0, 0, 0, 3, 1],
            "size, priority, specs, port"
        );
        assert_eq!(&b[20..26], &[0x20, 0, 0, 0, 40, 0], "ETH, 40 bytes");
        assert_eq!(&b[26..32], &[0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]);
        assert_eq!(&b[42..48], &[0xff; 6], "the destination MAC's mask");
        assert_eq!(&b[48..54], &[0; 6], "no source MAC");
        assert_eq!(&b[60..66], &[0x32, 0, 0, 0, 32, 0], "IPV4_EXT, 32 bytes");
        assert_eq!(&b[72..76], &[239, 1, 2, 3], "the group");
        assert_eq!(&b[84..88], &[0xff; 4]);
        assert_eq!(&b[92..98], &[0x41, 0, 0, 0, 16, 0], "UDP, 16 bytes");
        assert_eq!(&b[98..100], &31000u16.to_be_bytes());
        assert_eq!(&b[102..104], &[0xff, 0xff]);
        assert_eq!(b.len(), 108);
        let tagged = flow_bytes(&FlowRule::dst_mac([2, 0, 0, 0, 0, 1]).tag(7).priority(5), 1);
        let t: Vec<u8> = tagged.0.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!((tagged.1, &t[8..11]), (2, &[72, 0, 5][..]));
        assert_eq!(&t[60..66], &[0, 0x10, 0, 0, 12, 0], "ACTION_TAG, 12 bytes");
        assert_eq!(&t[68..72], &7u32.to_ne_bytes());
    }
}

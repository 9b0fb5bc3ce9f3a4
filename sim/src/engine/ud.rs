//! Unreliable datagrams: address handles, the UD requester, delivery to one QP or to every
//! QP attached to a multicast group, and the UD receive.
//!
//! Contract: a UD SEND is checked on the sender's side like an RC one (layout, keys, bounds,
//! length), and longer than the path MTU fails there with a local length error; once sent it
//! completes at once (UD is not acknowledged). What becomes of the datagram never reaches the
//! sender: a destination that does not exist, is no UD QP ready to receive, holds another
//! Q_Key or has no receive posted drops it, and the drop is counted in [`Stats`]. A receive
//! gets the 40-byte GRH area first — the GRH written there when the datagram carries one,
//! left as it was when not — then the payload; its CQE reports the source QP, SLID, SL, path
//! bits, GRH presence, P_Key index and a byte count that includes the 40 bytes. A receive too
//! short for both completes with a local length error and its QP enters the error state. A
//! multicast datagram (a multicast DLID and destination QPN `0xffffff`) is delivered to every
//! QP attached to the group, the sender included when it is attached, each with its own
//! receive. A datagram for another LID, and a multicast one, also goes out through the wire
//! when the device has one (a [`wire::Datagram`], which allocates); nothing else here
//! allocates.
//!
//! [`Stats`]: crate::Stats

use zverbs_mlx5dv::prm::fm_ce_se;
use zverbs_mlx5dv::prm::wqe::DatagramSeg;

use super::copy::{Span, Spans, copy_spans};
use super::responder::{Nak, RecvCqe};
use super::{Engine, Fault, LOC_LEN, LOC_QP_OP, PMTU};
use crate::config::{Access, AhAttr, QpStatus, QpType, SimAh, SimError};
use crate::cq::{UdInfo, op};
use crate::vendor;
use crate::wire::{self, Message};
use crate::wqe::Wqe;

/// The LID of the device's port when no wire gave it one.
pub(crate) const DEFAULT_LID: u16 = 1;
/// The high 48 bits of the port GUID; the low 16 are the port's LID.
const GUID_BASE: u64 = 0x7a76_6572_6273_0000;
/// The destination QPN of a multicast datagram.
pub(crate) const MCAST_QPN: u32 = 0x00ff_ffff;
/// The bytes of a receive a UD datagram's GRH takes, present or not.
pub(crate) const GRH_LEN: u64 = 40;
/// `grh_gid_fl`: the GRH bit libmlx5 sets for an InfiniBand port.
const AV_GRH: u32 = 1 << 30;
/// IBA's "next header" value for an IBA transport header after the GRH.
const NXT_HDR_IBA: u8 = 0x1b;

/// Whether `lid` is a multicast LID.
pub(crate) fn is_mcast_lid(lid: u16) -> bool {
    (0xc000..0xffff).contains(&lid)
}

/// The Q_Key of the controlled range: a send carrying one with bit 31 set uses its QP's
/// Q_Key instead (IBA 10.2.5).
const QKEY_CONTROLLED: u32 = 1 << 31;

/// A multicast group: its MGID, its MLID and the table entries of the QPs attached.
#[derive(Debug)]
pub(crate) struct Group {
    mgid: [u8; 16],
    mlid: u16,
    members: Vec<usize>,
}

/// A datagram on its way: what the receivers check and report.
#[derive(Clone, Copy, Debug)]
struct Datagram {
    src_qpn: u32,
    slid: u16,
    sl: u8,
    dlid: u16,
    dqpn: u32,
    qkey: u32,
    len: u64,
    imm: Option<[u8; 4]>,
    solicited: bool,
    /// The GRH bytes, when the datagram carries one.
    grh: Option<[u8; 40]>,
}

impl Engine {
    /// The LID of the device's port: the wire's, else [`DEFAULT_LID`].
    pub(crate) fn lid(&self) -> u16 {
        self.wire.as_ref().map_or(DEFAULT_LID, |w| w.1)
    }

    /// GID 0 of the port: the link-local prefix and the port GUID.
    pub(crate) fn gid(&self) -> [u8; 16] {
        let mut g = [0u8; 16];
        g[0] = 0xfe;
        g[1] = 0x80;
        g[8..].copy_from_slice(&(GUID_BASE | u64::from(self.lid())).to_be_bytes());
        g
    }

    /// The address vector of `attr`, as libmlx5's `mlx5_create_ah` builds it on an
    /// InfiniBand port: the SL in `stat_rate_sl` (rate 0, the port's), the source path bits
    /// in `fl_mlid`, the DLID; with a GRH, the traffic class, hop limit, `grh_gid_fl` (the
    /// GRH bit 30, the SGID index in bits 27..20, the flow label in 19..0) and the DGID.
    pub(crate) fn create_ah(&self, attr: &AhAttr) -> Result<SimAh, SimError> {
        if attr.sl > 15 {
            return Err(SimError::InvalidConfig("SL above 15"));
        }
        if attr.multicast
            && (!is_mcast_lid(attr.dlid) || attr.grh.is_some_and(|g| g.dgid[0] != 0xff))
        {
            return Err(SimError::InvalidConfig(
                "a multicast address needs a multicast DLID (0xc000..=0xfffe) and MGID (0xff..)",
            ));
        }
        if attr.grh.is_some_and(|g| g.sgid_index != 0) {
            return Err(SimError::InvalidConfig(
                "the port's GID table has one entry: sgid_index must be 0",
            ));
        }
        let mut av = [0u8; 48];
        let mut v = DatagramSeg::new_unchecked(&mut av);
        v.set_stat_rate_sl(attr.sl & 0xf);
        v.set_fl_mlid(attr.src_path_bits & 0x7f);
        v.set_rlid(attr.dlid);
        if let Some(g) = attr.grh {
            v.set_tclass(g.traffic_class);
            v.set_hop_limit(g.hop_limit);
            v.set_grh_gid_fl(
                AV_GRH | (u32::from(g.sgid_index) << 20) | (g.flow_label & 0x000f_ffff),
            );
            v.set_rgid(&g.dgid);
        }
        Ok(SimAh { av })
    }

    /// Sets a UD QP's Q_Key and P_Key index (the INIT transition's attributes).
    pub(crate) fn init_ud(&mut self, qpn: u32, qkey: u32, pkey_index: u16) -> Result<(), SimError> {
        let qp = self.qp_mut(qpn)?;
        if qp.qp_type != QpType::Ud {
            return Err(SimError::InvalidConfig("not a UD QP"));
        }
        if qp.status != QpStatus::Init {
            return Err(SimError::AlreadyConnected(qpn));
        }
        if pkey_index != 0 {
            return Err(SimError::InvalidConfig(
                "the port's P_Key table has one entry (0xffff): pkey_index must be 0",
            ));
        }
        qp.qkey = qkey;
        qp.pkey_index = pkey_index;
        Ok(())
    }

    /// Moves a UD QP to RTS (through RTR): it receives and sends from now on.
    pub(crate) fn ready_ud(&mut self, qpn: u32) -> Result<(), SimError> {
        let qp = self.qp_mut(qpn)?;
        if qp.qp_type != QpType::Ud {
            return Err(SimError::InvalidConfig("not a UD QP"));
        }
        if qp.status != QpStatus::Init {
            return Err(SimError::AlreadyConnected(qpn));
        }
        qp.status = QpStatus::Rts;
        Ok(())
    }

    /// Attaches UD QP `qpn` to the multicast group `mgid` / `mlid` (`ibv_attach_mcast`);
    /// attaching it again changes nothing.
    pub(crate) fn attach_mcast(
        &mut self,
        qpn: u32,
        mgid: [u8; 16],
        mlid: u16,
    ) -> Result<(), SimError> {
        let q = self.qp_index(qpn)?;
        if self.qps[q].qp_type != QpType::Ud {
            return Err(SimError::InvalidConfig(
                "only a UD QP joins a multicast group",
            ));
        }
        if mgid[0] != 0xff || !is_mcast_lid(mlid) {
            return Err(SimError::InvalidConfig(
                "a multicast group needs an MGID (0xff..) and an MLID (0xc000..=0xfffe)",
            ));
        }
        let g = match self.groups.iter().position(|g| g.mgid == mgid) {
            Some(g) if self.groups[g].mlid != mlid => {
                return Err(SimError::InvalidConfig(
                    "the MGID is known with another MLID",
                ));
            }
            Some(g) => g,
            None => {
                self.groups
                    .try_reserve(1)
                    .map_err(|_| SimError::OutOfMemory)?;
                self.groups.push(Group {
                    mgid,
                    mlid,
                    members: Vec::new(),
                });
                self.groups.len() - 1
            }
        };
        let members = &mut self.groups[g].members;
        if !members.contains(&q) {
            members.try_reserve(1).map_err(|_| SimError::OutOfMemory)?;
            members.push(q);
        }
        Ok(())
    }

    /// Detaches UD QP `qpn` from the group `mgid` / `mlid` (`ibv_detach_mcast`).
    pub(crate) fn detach_mcast(
        &mut self,
        qpn: u32,
        mgid: [u8; 16],
        mlid: u16,
    ) -> Result<(), SimError> {
        let q = self.qp_index(qpn)?;
        let g = self
            .groups
            .iter()
            .position(|g| g.mgid == mgid && g.mlid == mlid && g.members.contains(&q))
            .ok_or(SimError::InvalidConfig(
                "the QP is not attached to this group",
            ))?;
        self.groups[g].members.retain(|&m| m != q);
        if self.groups[g].members.is_empty() {
            self.groups.swap_remove(g);
        }
        Ok(())
    }

    /// Takes a destroyed QP's table entry `q` out of every group.
    pub(super) fn leave_groups(&mut self, q: usize) {
        for g in &mut self.groups {
            g.members.retain(|&m| m != q);
        }
        self.groups.retain(|g| !g.members.is_empty());
    }

    /// Sends the UD WQE `w` of QP `q`: the sender's checks, then delivery. `Ok` once sent
    /// (whatever becomes of the datagram), `Err` for a WQE that fails at the sender.
    pub(super) fn execute_ud(&mut self, q: usize, w: &Wqe) -> Result<(), Fault> {
        if w.opcode == zverbs_mlx5dv::prm::opcode::NOP {
            return Ok(());
        }
        let (spans, len) = self.local_spans(q, w, Access::NONE)?;
        if len > PMTU {
            return Err(Fault::new(LOC_LEN, vendor::UD_MTU));
        }
        let av = DatagramSeg::new_unchecked(&w.av);
        let gid_fl = av.grh_gid_fl();
        let grh = if gid_fl & AV_GRH != 0 {
            if (gid_fl >> 20) & 0xff != 0 {
                // A source GID index the port does not have.
                return Err(Fault::new(LOC_QP_OP, vendor::SGID_INDEX));
            }
            Some(self.grh(&av, len, w.opcode == zverbs_mlx5dv::prm::opcode::SEND_IMM))
        } else {
            None
        };
        let qkey = match av.qkey() {
            k if k & QKEY_CONTROLLED != 0 => self.qps[q].qkey,
            k => k,
        };
        let d = Datagram {
            src_qpn: self.qps[q].qpn,
            slid: self.lid() | u16::from(av.fl_mlid() & 0x7f),
            sl: av.stat_rate_sl() & 0xf,
            dlid: av.rlid(),
            dqpn: av.dqp(),
            qkey,
            len,
            imm: (w.opcode == zverbs_mlx5dv::prm::opcode::SEND_IMM).then_some(w.imm),
            solicited: w.fm_ce_se & fm_ce_se::SOLICITED != 0,
            grh,
        };
        self.stats.datagrams += 1;
        // SAFETY: the gather spans were checked against registered regions (or lie in the
        // send ring).
        unsafe { self.route(&d, spans.as_slice(), true) };
        Ok(())
    }

    /// A datagram from another instance: delivered here as one sent here would be, and never
    /// sent on.
    pub(super) fn deliver_datagram(&mut self, m: &wire::Datagram) {
        if m.payload.len() as u64 > PMTU {
            self.stats.bad_messages += 1;
            return;
        }
        let d = Datagram {
            src_qpn: m.src_qpn & MCAST_QPN,
            slid: m.src_lid,
            sl: m.sl & 0xf,
            dlid: m.dlid,
            dqpn: m.dqpn & MCAST_QPN,
            qkey: m.qkey,
            len: m.payload.len() as u64,
            imm: m.imm,
            solicited: m.solicited,
            grh: m.grh,
        };
        let src = [Span::own(m.payload.as_ptr() as u64, d.len)];
        // SAFETY: the payload is the message's own bytes.
        unsafe { self.route(&d, &src, false) };
    }

    /// Sends datagram `d` (payload `src`) to the instance at `lid` through the wire.
    ///
    /// # Safety
    ///
    /// As [`Engine::route`].
    unsafe fn send_datagram(&mut self, lid: u16, d: &Datagram, src: &[Span]) {
        let Some((wire, _)) = self.wire.clone() else {
            self.stats.ud_no_dest += 1;
            return;
        };
        let mut payload = std::vec![0u8; d.len as usize];
        let dst = [Span::own(payload.as_mut_ptr() as u64, d.len)];
        // SAFETY: (caller) the source is valid; the destination is the new buffer.
        unsafe { copy_spans(src, &dst, d.len) };
        let m = wire::Datagram {
            src_lid: d.slid,
            src_qpn: d.src_qpn,
            dlid: d.dlid,
            dqpn: d.dqpn,
            qkey: d.qkey,
            sl: d.sl,
            solicited: d.solicited,
            imm: d.imm,
            grh: d.grh,
            payload,
        };
        wire.send(lid, Message::Datagram(m).encode());
    }

    /// The GRH of a datagram of `len` payload bytes sent with address vector `av`: version 6,
    /// traffic class, flow label; the payload length (BTH, DETH, the immediate, the payload
    /// and its pad, the ICRC); next header IBA; hop limit; SGID (the port's GID 0); DGID.
    fn grh(&self, av: &DatagramSeg<&[u8; 48]>, len: u64, imm: bool) -> [u8; 40] {
        let mut h = [0u8; 40];
        let word0 = (6 << 28) | (u32::from(av.tclass()) << 20) | (av.grh_gid_fl() & 0x000f_ffff);
        h[0..4].copy_from_slice(&word0.to_be_bytes());
        let pad = (4 - len % 4) % 4;
        let paylen = 12 + 8 + if imm { 4 } else { 0 } + len + pad + 4;
        h[4..6].copy_from_slice(&(paylen as u16).to_be_bytes());
        h[6] = NXT_HDR_IBA;
        h[7] = av.hop_limit();
        h[8..24].copy_from_slice(&self.gid());
        h[24..40].copy_from_slice(&av.rgid());
        h
    }

    /// Delivers datagram `d` (payload `src`) to the QP it names, or to every QP of its
    /// multicast group; when `outward` (it was sent here), one for another LID, or for a
    /// multicast group (whose members elsewhere the transport reaches), also goes out
    /// through the wire.
    ///
    /// # Safety
    ///
    /// `src` covers `d.len` bytes valid for reads.
    unsafe fn route(&mut self, d: &Datagram, src: &[Span], outward: bool) {
        let dgid = d.grh.map(|h| {
            let mut g = [0u8; 16];
            g.copy_from_slice(&h[24..40]);
            g
        });
        if is_mcast_lid(d.dlid) {
            if d.dqpn != MCAST_QPN {
                self.stats.ud_no_dest += 1;
                return;
            }
            let mut reached = false;
            for g in 0..self.groups.len() {
                let group = &self.groups[g];
                if group.mlid != d.dlid || dgid.is_some_and(|x| x != group.mgid) {
                    continue;
                }
                for k in 0..self.groups[g].members.len() {
                    let p = self.groups[g].members[k];
                    reached = true;
                    // SAFETY: (caller) the payload is valid.
                    unsafe { self.receive(p, d, src) };
                }
            }
            if outward && self.wire.is_some() {
                // SAFETY: (caller) the payload is valid.
                unsafe { self.send_datagram(d.dlid, d, src) };
            } else if !reached {
                self.stats.ud_no_dest += 1;
            }
            return;
        }
        if outward && d.dlid != self.lid() && self.wire.is_some() {
            // SAFETY: (caller) the payload is valid.
            unsafe { self.send_datagram(d.dlid, d, src) };
            return;
        }
        let here = d.dlid == self.lid() && dgid.is_none_or(|g| g == self.gid());
        match self.qp_index(d.dqpn) {
            // SAFETY: (caller) the payload is valid.
            Ok(p) if here && d.dqpn != MCAST_QPN => unsafe { self.receive(p, d, src) },
            _ => self.stats.ud_no_dest += 1,
        }
    }

    /// The receiving side of datagram `d` at QP `p`.
    ///
    /// # Safety
    ///
    /// As [`Engine::route`].
    unsafe fn receive(&mut self, p: usize, d: &Datagram, src: &[Span]) {
        let qp = &self.qps[p];
        if qp.qp_type != QpType::Ud || qp.status != QpStatus::Rts {
            self.stats.ud_no_dest += 1;
            return;
        }
        if qp.qkey != d.qkey {
            self.stats.qkey_drops += 1;
            return;
        }
        let recv = match self.next_recv(p) {
            Ok(r) => r,
            Err(Nak::Rnr) => {
                self.stats.ud_no_recv += 1;
                return;
            }
            // A malformed receive ring: handled there (the receive or the SRQ in error).
            Err(_) => return,
        };
        let total = GRH_LEN + d.len;
        let Ok(dst) = self.recv_spans(p, recv, total, vendor::UD_RECV_TOO_SHORT) else {
            return;
        };
        if let Some(mut grh) = d.grh {
            let h = [Span::own(
                core::ptr::from_mut(&mut grh).expose_provenance() as u64,
                GRH_LEN,
            )];
            // SAFETY: the source is the local GRH (writable, as the copy needs), the
            // destination spans were checked against regions with local write.
            unsafe { copy_spans(&h, dst.as_slice(), GRH_LEN) };
        }
        let payload = skip(&dst, GRH_LEN);
        // SAFETY: (caller) the source is valid; the destination as above.
        unsafe { copy_spans(src, payload.as_slice(), d.len) };
        self.stats.bytes += d.len;
        self.stats.datagrams_delivered += 1;
        let lmc_mask = 0; // The port's LMC is 0: no DLID path bits.
        let m = RecvCqe {
            resp_op: if d.imm.is_some() {
                op::RESP_SEND_IMM
            } else {
                op::RESP_SEND
            },
            len: total,
            imm: d.imm.unwrap_or([0; 4]),
            solicited: d.solicited,
            ud: Some(UdInfo {
                src_qpn: d.src_qpn,
                slid: d.slid,
                sl: d.sl,
                dlid_path_bits: (d.dlid & lmc_mask) as u8,
                grh: d.grh.is_some(),
            }),
        };
        self.complete_recv(p, recv, m);
    }
}

/// The spans of `s` after its first `n` bytes.
fn skip(s: &Spans, mut n: u64) -> Spans {
    let mut out = Spans::new();
    for sp in s.as_slice() {
        if n >= sp.len {
            n -= sp.len;
            continue;
        }
        out.push(sp.tail(n));
        n = 0;
    }
    out
}

//! Unreliable datagram: queue pair set-up without a peer, address handles, multicast groups.
//!
//! A UD QP ([`QpType::Ud`], [`QpBuilder::ud`](crate::QpBuilder::ud)) goes
//! RESET → INIT (Q_Key, P_Key index, port) → RTR → RTS (send PSN) in one call,
//! [`Qp::ready_ud`]; each send then names its destination through an [`AddressHandle`] made
//! by [`Pd::create_ah`] (or [`Pd::create_ah_to`] from a peer's [`Endpoint`]) and the peer's QP
//! number and Q_Key. A QP joins a multicast group with [`Qp::attach_mcast`]; a datagram sent
//! to the group's LID (and GID) with destination QPN [`MULTICAST_QPN`] reaches every attached
//! QP.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::provider::AhProvider;
use crate::qp::Qp;
#[cfg(doc)]
use crate::types::ah::MULTICAST_QPN;
use crate::types::ah::{AhAttr, UdAttr};
use crate::types::device::Gid;
use crate::types::endpoint::Endpoint;
use crate::types::qp::QpType;
use zverbs_ffi::types::{ibv_ah, ibv_qp_attr, qp_attr_mask as m};

/// An address handle (`ibv_create_ah`), destroyed on drop (`ibv_destroy_ah`). Cloning is
/// cheap.
#[derive(Clone, Debug)]
pub struct AddressHandle {
    inner: Arc<AhInner>,
}

#[derive(Debug)]
struct AhInner {
    // Field order is drop order: the handle goes before its PD.
    provider: Box<dyn AhProvider>,
    attr: AhAttr,
    _pd: Pd,
}

impl AddressHandle {
    /// The mlx5 address vector (`struct mlx5_wqe_av`, 48 bytes in device byte order) that a
    /// UD send WQE's datagram segment carries: from `mlx5dv_init_obj(MLX5DV_OBJ_AH)` on an
    /// mlx5 device, the software device's own on it; `None` on other devices.
    pub fn av(&self) -> Option<&[u8; 48]> {
        self.inner.provider.av()
    }

    /// The rdma-core handle for an `ibv_send_wr`'s `wr.ud.ah` (the fallback's sends); null on
    /// the software device. Valid while this handle (or a clone) lives.
    pub fn as_raw(&self) -> *mut ibv_ah {
        self.inner.provider.raw()
    }

    /// The address it was made for.
    pub fn attr(&self) -> &AhAttr {
        &self.inner.attr
    }

    /// The protection domain it was made in.
    pub(crate) fn pd(&self) -> &Pd {
        &self.inner._pd
    }

    /// The destination of UD sends through this handle to QP `remote_qpn` (24 bits;
    /// [`MULTICAST_QPN`] for a group) with Q_Key `qkey`: its address vector for the direct
    /// path (zeros on a device that has none) and its verbs handle for the fallback. Made once
    /// per peer, for the [`PostSend`](zverbs_core::PostSend) queues; it borrows nothing, so
    /// the handle must outlive every post that names it (the fallback's provider reads the
    /// `ibv_ah` when the request is posted). The safe layer takes a [`UdTarget`]
    /// ([`AddressHandle::target`]), which holds the handle.
    pub fn dest(&self, remote_qpn: u32, qkey: u32) -> zverbs_core::UdDest {
        zverbs_core::UdDest::new(
            self.av().copied().unwrap_or([0; 48]),
            self.as_raw() as usize,
            remote_qpn & 0xff_ffff,
            qkey,
        )
    }
}

/// A UD destination that keeps its address handle alive: what the [`safe`](crate::safe)
/// [`SendQueue::send_to`](crate::SendQueue::send_to) takes, so that the verbs handle a
/// fallback send hands to the provider is always a live one. Made by
/// [`AddressHandle::target`]; cloning is cheap.
#[derive(Clone, Debug)]
pub struct UdTarget {
    dest: zverbs_core::UdDest,
    _ah: AddressHandle,
}

impl UdTarget {
    /// The destination the request carries.
    #[inline(always)]
    pub fn dest(&self) -> &zverbs_core::UdDest {
        &self.dest
    }

    /// The address handle it holds.
    pub(crate) fn address_handle(&self) -> &AddressHandle {
        &self._ah
    }
}

impl AddressHandle {
    /// As [`AddressHandle::dest`], holding a clone of this handle: for the safe layer.
    pub fn target(&self, remote_qpn: u32, qkey: u32) -> UdTarget {
        UdTarget {
            dest: self.dest(remote_qpn, qkey),
            _ah: self.clone(),
        }
    }
}

impl Pd {
    /// An address handle for `attr`.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `ibv_create_ah` (or the software device's check of the address:
    /// an SL above 15, a GID index it does not have); [`Error::Backend`] when `mlx5dv_init_obj`
    /// cannot give the address vector of an mlx5 device's handle.
    pub fn create_ah(&self, attr: &AhAttr) -> Result<AddressHandle> {
        Ok(AddressHandle {
            inner: Arc::new(AhInner {
                provider: self.inner.provider.create_ah(attr)?,
                attr: *attr,
                _pd: self.clone(),
            }),
        })
    }

    /// An address handle to `remote` from `port` ([`AhAttr::to`]).
    ///
    /// # Errors
    ///
    /// As [`Pd::create_ah`].
    pub fn create_ah_to(
        &self,
        port: u8,
        remote: &Endpoint,
        sgid_index: Option<u32>,
    ) -> Result<AddressHandle> {
        self.create_ah(&AhAttr::to(port, remote, sgid_index))
    }
}

impl Qp {
    /// RESET → INIT (`IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY`) → RTR
    /// (`IBV_QP_STATE`) → RTS (`IBV_QP_STATE | IBV_QP_SQ_PSN`): a UD QP has no peer, so this is
    /// all it needs to send and receive. [`Qp::to_init_ud`] and [`Qp::to_rts_ud`] are its two
    /// halves, for receives posted in INIT before the QP sends.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a QP that is not UD; [`Error::Verbs`] from
    /// `ibv_modify_qp` or the port query (the port's MTU bounds the datagrams).
    pub fn ready_ud(&self, a: &UdAttr) -> Result<()> {
        self.to_init_ud(a)?;
        self.to_rts_ud(a)
    }

    /// RESET → INIT of a UD QP (`IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
    /// IBV_QP_QKEY`): receives can be posted from here on.
    ///
    /// # Errors
    ///
    /// As [`Qp::ready_ud`].
    pub fn to_init_ud(&self, a: &UdAttr) -> Result<()> {
        if self.qp_type() != QpType::Ud {
            return Err(Error::InvalidArgument(
                "Qp::ready_ud needs a UD QP (QpBuilder::ud); connect an RC QP with Qp::connect"
                    .into(),
            ));
        }
        let mut attr = ibv_qp_attr {
            qp_state: 1,
            pkey_index: a.pkey_index,
            port_num: a.port,
            qkey: a.qkey,
            ..Default::default()
        };
        self.modify_raw(
            &mut attr,
            m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT | m::IBV_QP_QKEY,
        )
    }

    /// INIT → RTR (`IBV_QP_STATE`) → RTS (`IBV_QP_STATE | IBV_QP_SQ_PSN`) of a UD QP, noting
    /// the port's active MTU as its largest datagram.
    ///
    /// # Errors
    ///
    /// As [`Qp::ready_ud`].
    pub fn to_rts_ud(&self, a: &UdAttr) -> Result<()> {
        if self.qp_type() != QpType::Ud {
            return Err(Error::InvalidArgument(
                "Qp::to_rts_ud needs a UD QP (QpBuilder::ud)".into(),
            ));
        }
        let mtu = self
            .inner
            .send_cq
            .context()
            .port(a.port)?
            .active_mtu
            .bytes();
        let mut attr = ibv_qp_attr {
            qp_state: 2,
            ..Default::default()
        };
        self.modify_raw(&mut attr, m::IBV_QP_STATE)?;
        let mut attr = ibv_qp_attr {
            qp_state: 3,
            sq_psn: a.sq_psn & 0xff_ffff,
            ..Default::default()
        };
        self.modify_raw(&mut attr, m::IBV_QP_STATE | m::IBV_QP_SQ_PSN)?;
        self.inner
            .ud_mtu
            .store(mtu, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// Attaches this UD QP to the multicast group `gid` / `lid` (`ibv_attach_mcast`).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a QP that is not UD; [`Error::Verbs`] from
    /// `ibv_attach_mcast` (an address that is not a multicast one, on the software device).
    pub fn attach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        self.mcast(true, gid, lid)
    }

    /// Detaches this UD QP from the group (`ibv_detach_mcast`).
    ///
    /// # Errors
    ///
    /// As [`Qp::attach_mcast`]; the software device refuses a QP that is not attached.
    pub fn detach_mcast(&self, gid: &Gid, lid: u16) -> Result<()> {
        self.mcast(false, gid, lid)
    }

    fn mcast(&self, attach: bool, gid: &Gid, lid: u16) -> Result<()> {
        if self.qp_type() != QpType::Ud {
            return Err(Error::InvalidArgument(
                "only a UD QP joins a multicast group".into(),
            ));
        }
        self.inner.provider.mcast(attach, gid, lid)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use crate::*;

    #[test]
    fn ready_ud_sends_the_ud_masks_and_an_rc_qp_is_refused() {
        let log = Arc::new(Mutex::new(Vec::new()));
        let ctx = crate::tests::ctx(&log);
        let pd = ctx.alloc_pd().unwrap();
        // Room for an RC and a UD QP of the default sizes.
        let cq = ctx.cq_builder().cqe(512).build().unwrap();
        let rc = pd.qp_builder(&cq, &cq).build().unwrap();
        assert!(matches!(
            rc.ready_ud(&UdAttr::new(7)),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            rc.attach_mcast(&Gid::default(), 0xc001),
            Err(Error::InvalidArgument(_))
        ));
        let ud = pd.qp_builder(&cq, &cq).ud().build().unwrap();
        assert_eq!(ud.qp_type(), QpType::Ud);
        log.lock().unwrap().clear();
        ud.ready_ud(&UdAttr::new(0x1111_1111)).unwrap();
        assert_eq!(ud.state(), QpState::Rts);
        let modifies: Vec<String> = log
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.starts_with("modify"))
            .cloned()
            .collect();
        assert_eq!(
            modifies,
            [
                // STATE | PKEY_INDEX | PORT | QKEY
                "modify state=1 mask=0x71",
                // STATE
                "modify state=2 mask=0x1",
                // STATE | SQ_PSN
                "modify state=3 mask=0x10001",
            ]
        );
    }
}

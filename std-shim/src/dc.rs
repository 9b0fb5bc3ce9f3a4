//! The dynamically connected transport (DC, mlx5 only): one initiator reaches any number of
//! targets, each request naming its own.
//!
//! A DC target (DCT, [`QpBuilder::dc_target`](crate::QpBuilder::dc_target)) is created with an
//! access key and an SRQ, readied once ([`Qp::ready_dc`]: INIT, then RTR, where a target
//! stays) and announced by its [`DcAddr`] (LID, GID, DCT number, access key), which
//! serialises to [`DcAddr::LEN`] bytes for any out-of-band exchange. A DC initiator (DCI,
//! [`QpBuilder::dc_initiator`](crate::QpBuilder::dc_initiator)) is readied once too (INIT,
//! RTR, RTS, with no remote QP number); each peer's address becomes a [`DcPeer`]
//! ([`Pd::dc_peer`]: an address handle to the target's port, the number and the key), and
//! every request on the initiator's [`SendQueue`](crate::SendQueue) names one
//! ([`SendQueue::to`](crate::SendQueue::to)): RDMA WRITE (with immediate),
//! SEND (with immediate), READ, and the atomics, as on an RC QP. A request to a target that
//! does not exist, or with the wrong key, fails the initiator with "transport retry counter
//! exceeded" (the target drops it); the initiator then flushes its other requests and is
//! recovered as an RC QP is ([`Qp::reset`](crate::Qp::reset), then [`Qp::ready_dc`] again).
//!
//! DC exists on mlx5 devices driven directly (and on the software device). libibverbs has no
//! DC: creating either kind on the fallback is an [`Error::Backend`].
//!
//! ```
//! # #[cfg(feature = "sim")] {
//! # fn main() -> zverbs::Result<()> {
//! # let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &zverbs::ContextOptions::default())?;
//! use zverbs::dc::DcAddr;
//! use zverbs::{AccessFlags, Registered, SendFlags};
//!
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.cq_builder().build()?;
//! // The target side: an SRQ for its receives, an access key, its address for the peers.
//! let srq = pd.create_srq(16, 1)?;
//! let dct = pd.qp_builder(&cq, &cq).srq(&srq).dc_target(0x5eed).build()?;
//! dct.ready_dc()?;
//! let wire: [u8; DcAddr::LEN] = dct.dc_addr()?.to_bytes(); // send these bytes to the peers
//! let window = pd.alloc_buf(4096, AccessFlags::ALL)?;
//!
//! // The initiator side: one DCI, a peer per target, each request names its peer.
//! let dci = pd.qp_builder(&cq, &cq).dc_initiator().build()?;
//! dci.ready_dc()?;
//! let peer = pd.dc_peer(&DcAddr::from_bytes(&wire)?)?;
//! let mut sq = dci.send_queue()?;
//! let buf = pd.alloc_buf(64, AccessFlags::ALL)?;
//! buf.write(0, b"over DC")?;
//! sq.to(&peer).write(1, buf.slice(0..7)?, window.remote(0)?, SendFlags::SIGNALED)?;
//! let mut poller = cq.poller()?;
//! let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
//! assert_eq!(poller.wait(1, deadline)?[0].ok()?.wr_id, 1);
//! let mut got = [0u8; 7];
//! window.read(0, &mut got)?;
//! assert_eq!(&got, b"over DC");
//! # Ok(()) }
//! # main().unwrap(); }
//! ```

use zverbs_core::DcDest;
#[allow(unused_imports)] // named in the docs
use zverbs_core::PostSend;

use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::qp::Qp;
use crate::types::ah::AhAttr;
use crate::types::device::Gid;
use crate::types::qp::QpType;
use crate::ud::AddressHandle;
use zverbs_ffi::types::{ibv_qp_attr, qp_attr_mask as m};

/// A DC target's address: what an initiator needs to reach it. Serialises to
/// [`DcAddr::LEN`] bytes ([`DcAddr::to_bytes`], [`DcAddr::from_bytes`]) for an exchange.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DcAddr {
    /// The LID of the target's port (0 on RoCE).
    pub lid: u16,
    /// The GID of the target's port (zero when LID routing is used).
    pub gid: Gid,
    /// The DCT number (24 bits).
    pub dctn: u32,
    /// The target's access key.
    pub access_key: u64,
}

/// The first bytes of a serialised [`DcAddr`]: a tag and the format's version.
const TAG: [u8; 4] = *b"zDC\x01";

impl DcAddr {
    /// The length of [`DcAddr::to_bytes`]: a 4-byte tag, the LID (2), the GID (16), the DCT
    /// number (4) and the access key (8), big-endian.
    pub const LEN: usize = 34;

    /// The address as bytes, in a fixed big-endian layout any peer decodes alike.
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&TAG);
        b[4..6].copy_from_slice(&self.lid.to_be_bytes());
        b[6..22].copy_from_slice(&self.gid.0);
        b[22..26].copy_from_slice(&self.dctn.to_be_bytes());
        b[26..34].copy_from_slice(&self.access_key.to_be_bytes());
        b
    }

    /// The address [`DcAddr::to_bytes`] wrote.
    ///
    /// # Errors
    ///
    /// [`Error::Protocol`] for bytes of another length, without the tag, or with a DCT number
    /// above 24 bits.
    pub fn from_bytes(b: &[u8]) -> Result<Self> {
        let bad = |detail: String| Error::Protocol { detail };
        let b: &[u8; Self::LEN] = b.try_into().map_err(|_| {
            bad(format!(
                "a DC address is {} bytes, got {}",
                Self::LEN,
                b.len()
            ))
        })?;
        if b[0..4] != TAG {
            return Err(bad(format!(
                "not a DC address (tag {:02x?}, expected {TAG:02x?})",
                &b[0..4]
            )));
        }
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[6..22]);
        let dctn = u32::from_be_bytes([b[22], b[23], b[24], b[25]]);
        if dctn > 0xff_ffff {
            return Err(bad(format!("DCT number {dctn:#x} above 24 bits")));
        }
        let mut key = [0u8; 8];
        key.copy_from_slice(&b[26..34]);
        Ok(Self {
            lid: u16::from_be_bytes([b[4], b[5]]),
            gid: Gid(gid),
            dctn,
            access_key: u64::from_be_bytes(key),
        })
    }
}

/// A DC target as an initiator addresses it: an address handle to the target's port, with
/// the DCT number and access key. Made once per target ([`Pd::dc_peer`]); requests borrow it.
#[derive(Clone, Debug)]
pub struct DcPeer {
    dest: DcDest,
    addr: DcAddr,
    _ah: AddressHandle,
}

impl DcPeer {
    /// What the WQE's datagram segment carries (the address vector, number and key).
    pub fn dest(&self) -> &DcDest {
        &self.dest
    }

    /// The target's address.
    pub fn addr(&self) -> &DcAddr {
        &self.addr
    }

    /// The address handle to the target's port it holds.
    pub(crate) fn address_handle(&self) -> &AddressHandle {
        &self._ah
    }
}

impl Pd {
    /// A peer for the DC target at `addr`, reached from the device's first active port (an
    /// address handle to its LID, and to its GID when it has one).
    ///
    /// # Errors
    ///
    /// [`Error::NoActivePort`]; the errors of [`Pd::create_ah`]; [`Error::Backend`] on a
    /// device whose address handles carry no mlx5 address vector (no DC there).
    pub fn dc_peer(&self, addr: &DcAddr) -> Result<DcPeer> {
        let ctx = self.context();
        let port = ctx.active_port()?;
        let local = ctx.address(port, None)?;
        let endpoint = crate::types::endpoint::Endpoint {
            lid: addr.lid,
            qpn: addr.dctn,
            psn: 0,
            gid: addr.gid,
        };
        let ah = self.create_ah(&AhAttr::to(port, &endpoint, local.gid_index))?;
        let av = *ah.av().ok_or_else(|| no_dc("its address handles"))?;
        Ok(DcPeer {
            dest: DcDest::new(av, addr.dctn, addr.access_key),
            addr: *addr,
            _ah: ah,
        })
    }
}

/// The refusal of DC where the device is not driven directly.
fn no_dc(what: &str) -> Error {
    Error::Backend {
        requested: crate::types::backend::BackendKind::Direct,
        reason: format!(
            "the dynamically connected transport is an mlx5 feature of the direct backend; \
             {what} cannot carry it (libibverbs has no DC)"
        ),
    }
}

impl Qp {
    /// Readies a DC QP on the device's first active port, in one call: a DC initiator goes
    /// RESET → INIT (P_Key index 0, port) → RTR (path MTU: the port's active MTU) → RTS
    /// (send PSN, retries, the timeout, 16 outstanding READs and atomics), naming no remote
    /// QP; a DC target goes RESET → INIT (also its access rights: remote write, read and
    /// atomics) → RTR, where it stays.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a QP that is not DC; [`Error::NoActivePort`];
    /// [`Error::Verbs`] from `ibv_modify_qp`.
    pub fn ready_dc(&self) -> Result<()> {
        let target = match self.qp_type() {
            QpType::Dci => false,
            QpType::Dct => true,
            _ => {
                return Err(Error::InvalidArgument(
                    "Qp::ready_dc needs a DC QP (QpBuilder::dc_initiator or dc_target)".into(),
                ));
            }
        };
        let ctx = self.inner._pd.context();
        let port = ctx.active_port()?;
        let local = ctx.address(port, None)?;
        let mut init = ibv_qp_attr {
            qp_state: 1,
            pkey_index: 0,
            port_num: port,
            qp_access_flags: crate::types::access::AccessFlags::REMOTE_WRITE.bits()
                | crate::types::access::AccessFlags::REMOTE_READ.bits()
                | crate::types::access::AccessFlags::REMOTE_ATOMIC.bits(),
            ..Default::default()
        };
        let mut mask = m::IBV_QP_STATE | m::IBV_QP_PKEY_INDEX | m::IBV_QP_PORT;
        if target {
            mask |= m::IBV_QP_ACCESS_FLAGS;
        }
        self.modify_raw(&mut init, mask)?;
        let mut rtr = ibv_qp_attr {
            qp_state: 2,
            path_mtu: local.active_mtu as u32,
            min_rnr_timer: 12,
            ..Default::default()
        };
        rtr.ah_attr.port_num = port;
        if let Some(index) = local.gid_index {
            rtr.ah_attr.is_global = 1;
            rtr.ah_attr.grh.sgid_index = index as u8;
            rtr.ah_attr.grh.hop_limit = 64;
        }
        let mut mask = m::IBV_QP_STATE | m::IBV_QP_AV | m::IBV_QP_PATH_MTU;
        if target {
            mask |= m::IBV_QP_MIN_RNR_TIMER;
        }
        self.modify_raw(&mut rtr, mask)?;
        if target {
            // A ConnectX's driver numbers a target only at RTR: the pollers of its CQs get a
            // table with the number its completions carry.
            self.republish();
            return Ok(());
        }
        let mut rts = ibv_qp_attr {
            qp_state: 3,
            sq_psn: self.psn(),
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 16,
            ..Default::default()
        };
        self.modify_raw(
            &mut rts,
            m::IBV_QP_STATE
                | m::IBV_QP_TIMEOUT
                | m::IBV_QP_RETRY_CNT
                | m::IBV_QP_RNR_RETRY
                | m::IBV_QP_SQ_PSN
                | m::IBV_QP_MAX_QP_RD_ATOMIC,
        )
    }

    /// Gives the pollers of the QP's CQs a new table of their QPs (with this QP's number as
    /// it is now).
    fn republish(&self) {
        let (send, recv) = (&self.inner.send_cq, &self.inner.recv_cq);
        for (i, cq) in [send, recv].into_iter().enumerate() {
            if i == 1 && send.is(recv) {
                break;
            }
            let mut reg = cq.inner.registry.lock().unwrap_or_else(|p| p.into_inner());
            let reached = crate::qp::republish(cq, &mut reg);
            drop(reg);
            drop(reached);
        }
    }

    /// This DC target's address on the device's first active port, for initiators
    /// ([`Pd::dc_peer`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a QP that is not a DC target; as [`Qp::endpoint`].
    pub fn dc_addr(&self) -> Result<DcAddr> {
        if self.qp_type() != QpType::Dct {
            return Err(Error::InvalidArgument(
                "Qp::dc_addr is a DC target's address (QpBuilder::dc_target)".into(),
            ));
        }
        let ctx = self.inner._pd.context();
        let local = ctx.address(ctx.active_port()?, None)?;
        Ok(DcAddr {
            lid: local.lid,
            gid: local.gid,
            dctn: self.qpn(),
            access_key: self.inner.provider.dc_access_key(),
        })
    }
}

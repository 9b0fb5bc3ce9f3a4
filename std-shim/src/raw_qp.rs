//! Raw packet QPs: their checks before anything is created (the device has raw packet QPs on
//! the port, the process has `CAP_NET_RAW`), creation, and RESET → INIT (port) → RTR → RTS.
//!
//! A raw packet QP ([`QpType::RawPacket`]) sends whole Ethernet frames, from the destination
//! MAC on, through its [`SendQueue`](crate::SendQueue), and receives into its
//! [`RecvQueue`](crate::RecvQueue) the frames that [`Flow`](crate::Flow) rules steer to it.
//! Its transitions carry no peer: INIT names the port (`IBV_QP_STATE | IBV_QP_PORT`), RTR and
//! RTS only the state (brief §2.2, as perftest and DPDK do). A ConnectX's receive queue is
//! ready from INIT, but libmlx5 rewrites the receive doorbell record when the QP reaches RTR,
//! so the receive queue is handed out from RTR on ([`Qp::recv_queue`]); [`Qp::ready_raw`]
//! goes all the way to RTS in one call.

use std::sync::Arc;

use crate::cq::Cq;
use crate::error::{Error, Result};
use crate::pd::Pd;
use crate::qp::Qp;
use crate::types::qp::{QpCaps, QpState, QpType};
use zverbs_ffi::types::{ibv_qp_attr, qp_attr_mask as m};

impl Pd {
    /// A raw packet QP on `port`, in RTS: it sends Ethernet frames at once and receives what
    /// flow rules ([`Qp::create_flow`]) steer to it. Its send completions go to `send_cq`, its
    /// receive completions to `recv_cq` (which may be the same CQ); `caps` as for any QP
    /// (`max_recv_wr` at least 1).
    ///
    /// Checked first, before anything is created: the device has raw packet QPs on the port
    /// ([`Error::NoRawPacket`]: rxe has none, nor has a port whose link layer is not Ethernet),
    /// and the process holds `CAP_NET_RAW` where the kernel asks for it
    /// ([`Error::NeedsCapNetRaw`]; the software device asks for no privilege).
    ///
    /// ```
    /// # #[cfg(feature = "sim")] {
    /// # fn main() -> zverbs::Result<()> {
    /// let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &Default::default())?;
    /// let pd = ctx.alloc_pd()?;
    /// let cq = ctx.cq_builder().cqe(256).build()?;
    /// let qp = pd.create_raw_qp(1, &cq, &cq, zverbs::QpCaps::default())?;
    /// assert_eq!(qp.state(), zverbs::QpState::Rts);
    /// assert_eq!(qp.qp_type(), zverbs::QpType::RawPacket);
    /// # Ok(()) }
    /// # main().unwrap(); }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoRawPacket`], [`Error::NeedsCapNetRaw`]; as [`QpBuilder::build`](crate::QpBuilder::build)
    /// and [`Qp::ready_raw`].
    pub fn create_raw_qp(&self, port: u8, send_cq: &Cq, recv_cq: &Cq, caps: QpCaps) -> Result<Qp> {
        let qp = self
            .qp_builder(send_cq, recv_cq)
            .caps(caps)
            .raw_packet(port)
            .build()?;
        qp.ready_raw()?;
        Ok(qp)
    }
}

impl Qp {
    /// The port a raw packet QP was created on; `None` for other QPs.
    pub fn raw_port(&self) -> Option<u8> {
        self.inner.raw.map(|r| r.port)
    }

    /// RESET → INIT (`IBV_QP_STATE | IBV_QP_PORT`, its port) → RTR → RTS (`IBV_QP_STATE`) of
    /// a raw packet QP ([`Pd::create_raw_qp`] does it).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a QP that is not a raw packet QP; [`Error::Verbs`]
    /// from `ibv_modify_qp`.
    pub fn ready_raw(&self) -> Result<()> {
        let Some(raw) = self.inner.raw else {
            return Err(Error::InvalidArgument(
                "Qp::ready_raw needs a raw packet QP (Pd::create_raw_qp, QpBuilder::raw_packet)"
                    .into(),
            ));
        };
        let mut attr = ibv_qp_attr {
            qp_state: QpState::Init.to_raw(),
            port_num: raw.port,
            ..Default::default()
        };
        self.modify_raw(&mut attr, m::IBV_QP_STATE | m::IBV_QP_PORT)?;
        for state in [QpState::Rtr, QpState::Rts] {
            let mut attr = ibv_qp_attr {
                qp_state: state.to_raw(),
                ..Default::default()
            };
            self.modify_raw(&mut attr, m::IBV_QP_STATE)?;
        }
        Ok(())
    }

    /// Refuses a raw packet QP's receive queue before RTR (libmlx5 rewrites the receive
    /// doorbell record at the transition to RTR).
    /// On the direct backend, a raw packet QP whose receive completions name it only by the
    /// user index libmlx5 chose (an rdma-core device; the software device's is the QP number)
    /// makes its receive CQ serve its receive queue alone ([`Cq::claim_sole_receiver`]), or
    /// is refused ([`Error::SoleReceiverCq`]).
    pub(crate) fn raw_recv_cq(&self) -> Result<()> {
        let qp = &self.inner;
        if qp.qp_type != QpType::RawPacket
            || !matches!(qp.data, crate::qp::QpData::Direct(_))
            || qp.provider.user_index().is_some()
        {
            return Ok(());
        }
        let own = qp.holds.recv
            + if qp.send_cq.is(&qp.recv_cq) {
                qp.holds.send
            } else {
                0
            };
        qp.recv_cq.claim_sole_receiver(
            Arc::as_ptr(qp).cast(),
            own,
            &qp.sole_receiver,
            "a raw packet QP's receive queue",
        )
    }

    pub(crate) fn raw_recv_ready(&self) -> Result<()> {
        if self.qp_type() != QpType::RawPacket {
            return Ok(());
        }
        let state = self.state();
        if matches!(state, QpState::Rtr | QpState::Rts) {
            return Ok(());
        }
        Err(Error::NotReady {
            queue: "receive queue",
            state,
            needs: QpState::Rtr,
            advice: "ready the raw packet QP first (Qp::ready_raw, or Pd::create_raw_qp)",
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use crate::*;

    /// The child's side: set by the parent test, which runs this test binary again.
    const CHILD: &str = "ZVERBS_TEST_DROP_NET_RAW";

    /// Removes `CAP_NET_RAW` from this process's effective capabilities (`capset`).
    fn drop_cap_net_raw() {
        #[repr(C)]
        struct Header {
            version: u32,
            pid: i32,
        }
        #[repr(C)]
        #[derive(Clone, Copy, Default)]
        struct Data {
            effective: u32,
            permitted: u32,
            inheritable: u32,
        }
        let mut h = Header {
            version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
            pid: 0,
        };
        let mut d = [Data::default(); 2];
        // SAFETY: the header and two data words `capget` fills.
        let r = unsafe { libc::syscall(libc::SYS_capget, &raw mut h, d.as_mut_ptr()) };
        assert_eq!(r, 0, "capget: {}", std::io::Error::last_os_error());
        d[0].effective &= !(1 << CAP_NET_RAW_BIT);
        // SAFETY: the header and the two data words, as `capset` reads them.
        let r = unsafe { libc::syscall(libc::SYS_capset, &raw mut h, d.as_ptr()) };
        assert_eq!(r, 0, "capset: {}", std::io::Error::last_os_error());
    }

    /// Without `CAP_NET_RAW` (dropped in a child process, whatever the parent holds), a raw
    /// packet QP on a device whose kernel asks for it is refused with
    /// `Error::NeedsCapNetRaw`, naming the capability, before the device is asked.
    #[test]
    #[cfg_attr(miri, ignore = "runs a child process")]
    fn a_raw_qp_without_cap_net_raw_is_a_typed_error() {
        if std::env::var_os(CHILD).is_none() {
            let me = std::env::current_exe().unwrap();
            let out = std::process::Command::new(me)
                .args([
                    "--exact",
                    "raw_qp::tests::a_raw_qp_without_cap_net_raw_is_a_typed_error",
                    "--nocapture",
                ])
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "{text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(text.contains("1 passed"), "the child ran the test: {text}");
            return;
        }
        drop_cap_net_raw();
        assert_eq!(has_cap_net_raw(), Some(false));
        let log = Arc::new(Mutex::new(Vec::new()));
        let ctx = crate::tests::ctx(&log);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.cq_builder().cqe(512).build().unwrap();
        let e = pd
            .create_raw_qp(1, &cq, &cq, QpCaps::default())
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::NeedsCapNetRaw {
                    verb: "ibv_create_qp"
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("CAP_NET_RAW"), "{e}");
        let log = log.lock().unwrap();
        assert!(
            !log.iter().any(|l| l.contains("qp")),
            "no QP reached the device: {log:?}"
        );
    }
}

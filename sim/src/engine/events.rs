//! The engine's side of asynchronous events: the port's state, the faults injected on
//! demand, and the events the data path raises (see [`crate::faults`]).

use super::{Engine, Fault, RETRY_EXC};
use crate::config::{QpStatus, QpType, SimError};
use crate::faults::{DeviceEvent, EventSubscription, PortState};
use crate::vendor;

impl Engine {
    /// A new subscriber to the device's events.
    pub(crate) fn subscribe_events(
        &mut self,
        wake: Box<dyn Fn() + Send + Sync>,
    ) -> EventSubscription {
        self.faults.subscribe(wake)
    }

    /// Sets the port's state; a change raises `PortError` or `PortActive`.
    pub(crate) fn set_port_state(&mut self, port: u8, state: PortState) -> Result<(), SimError> {
        if port != 1 {
            return Err(SimError::InvalidConfig("the device has one port, port 1"));
        }
        if self.faults.port == state {
            return Ok(());
        }
        self.faults.port = state;
        self.faults.raise(match state {
            PortState::Active => DeviceEvent::PortActive { port },
            PortState::Down => DeviceEvent::PortError { port },
        });
        Ok(())
    }

    /// With the port down, fails the RC request at QP `q`'s send consumer counter with
    /// "transport retry exceeded" (the QP enters the error state, the requests after it are
    /// flushed) and raises the QP's event; returns whether it did.
    pub(super) fn port_down_fails(&mut self, q: usize, opcode: u8, blocks: u32) -> bool {
        if self.faults.port == PortState::Active
            || !matches!(self.qps[q].qp_type, QpType::Rc | QpType::Dci)
        {
            return false;
        }
        self.fail(q, Fault::new(RETRY_EXC, vendor::PORT_DOWN), opcode, blocks);
        self.qp_event(
            q,
            DeviceEvent::QpFatal {
                qpn: self.qps[q].qpn,
            },
        );
        true
    }

    /// Raises `ev` for QP `q`, which has entered the error state, and, when it takes its
    /// receives from a shared receive queue, `QpLastWqeReached` after it.
    pub(super) fn qp_event(&mut self, q: usize, ev: DeviceEvent) {
        let qpn = self.qps[q].qpn;
        self.faults.raise(ev);
        if self.qps[q].srq.is_some() {
            self.faults.raise(DeviceEvent::QpLastWqeReached { qpn });
        }
    }

    /// Injects an event of QP `qpn`: `QpFatal`, `QpRequestError` and `QpAccessError` move
    /// it to the error state first (as the condition does on hardware); `QpLastWqeReached`
    /// is raised alone.
    pub(crate) fn inject_qp_event(&mut self, ev: DeviceEvent) -> Result<(), SimError> {
        let (qpn, to_error) = match ev {
            DeviceEvent::QpFatal { qpn }
            | DeviceEvent::QpRequestError { qpn }
            | DeviceEvent::QpAccessError { qpn } => (qpn, true),
            DeviceEvent::QpLastWqeReached { qpn } => (qpn, false),
            _ => return Err(SimError::InvalidConfig("not an event of a QP")),
        };
        let q = self.qp_index(qpn)?;
        if to_error {
            self.qps[q].status = QpStatus::Error;
            self.qp_event(q, ev);
        } else {
            self.faults.raise(ev);
        }
        Ok(())
    }

    /// The device fails: every QP enters the error state, and `DeviceFatal` is raised.
    pub(crate) fn inject_device_fatal(&mut self) {
        for qp in self.qps.iter_mut().filter(|q| !q.dead) {
            qp.status = QpStatus::Error;
        }
        self.faults.raise(DeviceEvent::DeviceFatal);
    }

    /// CQ `cq` (table entry) overran: its first overrun raises `CqError`.
    pub(super) fn cq_overrun(&mut self, cq: usize) {
        let c = &mut self.cqs[cq];
        if !c.overrun_reported {
            c.overrun_reported = true;
            let cqn = c.cqn;
            self.faults.raise(DeviceEvent::CqError { cqn });
        }
    }
}

//! An asynchronous event of a device, with the object it concerns.

use zverbs_ffi::types::ibv_event_type as ty;

/// Identifies a CQ in an [`AsyncEvent`]: compare with [`Cq::event_id`](crate::Cq::event_id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqId(pub(crate) u64);

/// Identifies an SRQ in an [`AsyncEvent`]: compare with [`Srq::event_id`](crate::Srq::event_id).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SrqId(pub(crate) u64);

/// An asynchronous event (`enum ibv_event_type`) with the object it concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// `IBV_EVENT_PORT_ACTIVE`: the port came up.
    PortActive {
        /// The port.
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR`: the port went down (its link is lost).
    PortError {
        /// The port.
        port: u8,
    },
    /// `IBV_EVENT_LID_CHANGE`, `IBV_EVENT_PKEY_CHANGE`, `IBV_EVENT_SM_CHANGE`,
    /// `IBV_EVENT_CLIENT_REREGISTER`, `IBV_EVENT_GID_CHANGE`: something of the port changed.
    PortChange {
        /// The port.
        port: u8,
        /// The raw `ibv_event_type`.
        event_type: u32,
    },
    /// `IBV_EVENT_QP_FATAL`: the QP entered the error state outside a completion error.
    QpFatal {
        /// The QP's number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_REQ_ERR`: an invalid request reached the QP as a responder; it is in
    /// the error state.
    QpRequestError {
        /// The QP's number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_ACCESS_ERR`: a request violated the QP's access rights as a responder;
    /// it is in the error state.
    QpAccessError {
        /// The QP's number.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on a shared receive queue entered the error
    /// state; none of the SRQ's receives will complete on it any more.
    QpLastWqeReached {
        /// The QP's number.
        qpn: u32,
    },
    /// `IBV_EVENT_COMM_EST`, `IBV_EVENT_SQ_DRAINED`, `IBV_EVENT_PATH_MIG`,
    /// `IBV_EVENT_PATH_MIG_ERR`: other events of a QP.
    QpOther {
        /// The QP's number.
        qpn: u32,
        /// The raw `ibv_event_type`.
        event_type: u32,
    },
    /// `IBV_EVENT_CQ_ERR`: the CQ overran (a completion found it full) and is in error.
    CqError {
        /// The CQ.
        cq: CqId,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer receives than [`Srq::arm`](crate::Srq::arm)'s limit are posted;
    /// the limit is disarmed (arm it again to hear of it again).
    SrqLimitReached {
        /// The SRQ.
        srq: SrqId,
    },
    /// `IBV_EVENT_SRQ_ERR`: the SRQ entered the error state.
    SrqError {
        /// The SRQ.
        srq: SrqId,
    },
    /// `IBV_EVENT_DEVICE_FATAL`: the device failed; the context must be closed.
    DeviceFatal,
    /// An event this crate does not know (`IBV_EVENT_WQ_FATAL`, later ones).
    Other {
        /// The raw `ibv_event_type`.
        event_type: u32,
    },
}

impl AsyncEvent {
    /// The QP number, for an event of a QP.
    pub fn qpn(&self) -> Option<u32> {
        match *self {
            AsyncEvent::QpFatal { qpn }
            | AsyncEvent::QpRequestError { qpn }
            | AsyncEvent::QpAccessError { qpn }
            | AsyncEvent::QpLastWqeReached { qpn }
            | AsyncEvent::QpOther { qpn, .. } => Some(qpn),
            _ => None,
        }
    }

    /// The port, for an event of a port.
    pub fn port(&self) -> Option<u8> {
        match *self {
            AsyncEvent::PortActive { port }
            | AsyncEvent::PortError { port }
            | AsyncEvent::PortChange { port, .. } => Some(port),
            _ => None,
        }
    }

    /// The event of `event_type` about the object `element` names (a QP number, a CQ or SRQ
    /// id, a port number, by the type).
    pub(crate) fn from_raw(event_type: u32, element: u64) -> Self {
        let qpn = element as u32;
        let port = element as u8;
        match event_type {
            ty::IBV_EVENT_CQ_ERR => AsyncEvent::CqError { cq: CqId(element) },
            ty::IBV_EVENT_QP_FATAL => AsyncEvent::QpFatal { qpn },
            ty::IBV_EVENT_QP_REQ_ERR => AsyncEvent::QpRequestError { qpn },
            ty::IBV_EVENT_QP_ACCESS_ERR => AsyncEvent::QpAccessError { qpn },
            ty::IBV_EVENT_QP_LAST_WQE_REACHED => AsyncEvent::QpLastWqeReached { qpn },
            ty::IBV_EVENT_COMM_EST
            | ty::IBV_EVENT_SQ_DRAINED
            | ty::IBV_EVENT_PATH_MIG
            | ty::IBV_EVENT_PATH_MIG_ERR => AsyncEvent::QpOther { qpn, event_type },
            ty::IBV_EVENT_DEVICE_FATAL => AsyncEvent::DeviceFatal,
            ty::IBV_EVENT_PORT_ACTIVE => AsyncEvent::PortActive { port },
            ty::IBV_EVENT_PORT_ERR => AsyncEvent::PortError { port },
            ty::IBV_EVENT_LID_CHANGE
            | ty::IBV_EVENT_PKEY_CHANGE
            | ty::IBV_EVENT_SM_CHANGE
            | ty::IBV_EVENT_CLIENT_REREGISTER
            | ty::IBV_EVENT_GID_CHANGE => AsyncEvent::PortChange { port, event_type },
            ty::IBV_EVENT_SRQ_ERR => AsyncEvent::SrqError {
                srq: SrqId(element),
            },
            ty::IBV_EVENT_SRQ_LIMIT_REACHED => AsyncEvent::SrqLimitReached {
                srq: SrqId(element),
            },
            _ => AsyncEvent::Other { event_type },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each raw type becomes the variant of its kind, with the element read as its kind's.
    #[test]
    fn raw_events_convert_by_kind() {
        let e = 0x1_0000_0203u64;
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_QP_FATAL, e),
            AsyncEvent::QpFatal { qpn: 0x203 }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_PORT_ERR, 1),
            AsyncEvent::PortError { port: 1 }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_PORT_ACTIVE, 2),
            AsyncEvent::PortActive { port: 2 }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_CQ_ERR, e),
            AsyncEvent::CqError { cq: CqId(e) }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_SRQ_LIMIT_REACHED, e),
            AsyncEvent::SrqLimitReached { srq: SrqId(e) }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_SRQ_ERR, e),
            AsyncEvent::SrqError { srq: SrqId(e) }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_QP_LAST_WQE_REACHED, 7),
            AsyncEvent::QpLastWqeReached { qpn: 7 }
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_DEVICE_FATAL, 0),
            AsyncEvent::DeviceFatal
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_LID_CHANGE, 1).port(),
            Some(1)
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_PATH_MIG, 9).qpn(),
            Some(9)
        );
        assert_eq!(
            AsyncEvent::from_raw(ty::IBV_EVENT_WQ_FATAL, 9),
            AsyncEvent::Other { event_type: 19 }
        );
    }
}

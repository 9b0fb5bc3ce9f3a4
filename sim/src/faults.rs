//! Asynchronous device events and the faults that raise them.
//!
//! A NIC tells the control path about things no completion carries through its asynchronous
//! event queue, which the kernel hands to every user context as the context's async fd
//! (`ibv_get_async_event`): the port going down or up, a QP or SRQ that failed outside any
//! work request, a CQ that overran, the SRQ limit, the device itself failing. The software
//! device keeps the same events as [`DeviceEvent`]s and hands each one to every
//! [`EventSubscription`] ([`Device::subscribe_events`](crate::Device::subscribe_events)),
//! calling the subscription's waker so that a program can turn it into a readable fd.
//!
//! What raises each event here:
//!
//! | event | raised by |
//! |---|---|
//! | [`DeviceEvent::PortError`] / [`DeviceEvent::PortActive`] | [`Device::set_port_state`](crate::Device::set_port_state) changing the state |
//! | [`DeviceEvent::QpFatal`] | [`Device::inject_qp_fatal`](crate::Device::inject_qp_fatal); an RC QP whose request failed because the port is down |
//! | [`DeviceEvent::QpRequestError`] / [`DeviceEvent::QpAccessError`] | a responder's class C error (an invalid request: a misaligned atomic, a message above 2 GiB; a remote access violation), which moves the responder to the error state; [`Device::inject_qp_event`](crate::Device::inject_qp_event) |
//! | [`DeviceEvent::QpLastWqeReached`] | a QP on a shared receive queue entering the error state through one of the above |
//! | [`DeviceEvent::CqError`] | a CQE that found its CQ full (CQ overrun), once per CQ |
//! | [`DeviceEvent::SrqLimitReached`] | a message that left fewer receives posted than the armed limit (the limit is disarmed) |
//! | [`DeviceEvent::SrqError`] | an SRQ that entered the error state (a malformed ring) |
//! | [`DeviceEvent::DeviceFatal`] | [`Device::inject_device_fatal`](crate::Device::inject_device_fatal): every QP enters the error state |
//!
//! **A port that goes down** does what a link that goes down does to a ConnectX: every RC
//! request the device takes while the port is down finds no acknowledgement, its retries run
//! out and it fails with "transport retry exceeded" (vendor syndrome
//! [`vendor::PORT_DOWN`](crate::vendor::PORT_DOWN)); its QP enters the error state, where the
//! requests after it are flushed. So every request posted completes exactly once. A ConnectX
//! says this through the completions alone; the software device also raises
//! [`DeviceEvent::QpFatal`] for each QP the port took down, so a program reading the events
//! learns which QPs to recover. Bringing the port up again leaves those QPs in the error
//! state, as on hardware.
//!
//! A subscription holds at most [`EVENT_QUEUE`] unread events; the ones that find it full
//! are counted ([`EventSubscription::lost`]), never kept, as the kernel's queue does.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// The unread events a subscription keeps; more are lost (and counted).
pub const EVENT_QUEUE: usize = 4096;

/// The state of the device's port, as `ibv_query_port` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PortState {
    /// `IBV_PORT_ACTIVE`: the link is up.
    #[default]
    Active,
    /// `IBV_PORT_DOWN`: no link; requests find no acknowledgement.
    Down,
}

/// An asynchronous event of the device (`enum ibv_event_type`, with the object it concerns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeviceEvent {
    /// `IBV_EVENT_PORT_ACTIVE`: the port came up.
    PortActive {
        /// The port (1).
        port: u8,
    },
    /// `IBV_EVENT_PORT_ERR`: the port went down.
    PortError {
        /// The port (1).
        port: u8,
    },
    /// `IBV_EVENT_QP_FATAL`: the QP entered the error state outside a completion error.
    QpFatal {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_REQ_ERR`: an invalid request reached the QP as a responder.
    QpRequestError {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_ACCESS_ERR`: a request violated the QP's access rights as a responder.
    QpAccessError {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on a shared receive queue entered the error
    /// state; no receive of the SRQ will complete on it any more.
    QpLastWqeReached {
        /// The QP.
        qpn: u32,
    },
    /// `IBV_EVENT_CQ_ERR`: a CQE found the CQ full (overrun).
    CqError {
        /// The CQ.
        cqn: u32,
    },
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer receives than the armed limit are posted; the
    /// limit is disarmed.
    SrqLimitReached {
        /// The SRQ.
        srqn: u32,
    },
    /// `IBV_EVENT_SRQ_ERR`: the SRQ entered the error state.
    SrqError {
        /// The SRQ.
        srqn: u32,
    },
    /// `IBV_EVENT_DEVICE_FATAL`: the device failed; every QP is in the error state.
    DeviceFatal,
}

/// What a subscriber shares with the device: its queue and its waker.
struct Sub {
    queue: Mutex<VecDeque<DeviceEvent>>,
    lost: AtomicU64,
    wake: Box<dyn Fn() + Send + Sync>,
}

impl core::fmt::Debug for Sub {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sub")
            .field("lost", &self.lost.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// Events of the device, as one reader sees them: every event raised after
/// [`Device::subscribe_events`](crate::Device::subscribe_events), in order. Dropping it ends
/// the subscription.
#[derive(Debug)]
pub struct EventSubscription {
    sub: Arc<Sub>,
}

impl EventSubscription {
    /// The oldest unread event, if any. Never blocks on the device (the device's lock is not
    /// taken).
    pub fn try_next(&self) -> Option<DeviceEvent> {
        self.sub
            .queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pop_front()
    }

    /// Events that found the queue full ([`EVENT_QUEUE`] unread) and were lost.
    pub fn lost(&self) -> u64 {
        self.sub.lost.load(Ordering::Relaxed)
    }
}

/// The device's fault state and its subscribers (part of the engine, under the device's lock).
#[derive(Debug, Default)]
pub(crate) struct Faults {
    pub(crate) port: PortState,
    subs: Vec<Weak<Sub>>,
}

impl Faults {
    /// A new subscriber, woken by `wake` (called under the device's lock: it must not call
    /// back into the device) after each event it is handed.
    pub(crate) fn subscribe(&mut self, wake: Box<dyn Fn() + Send + Sync>) -> EventSubscription {
        self.subs.retain(|s| s.strong_count() > 0);
        let sub = Arc::new(Sub {
            // Sized once: raising an event on the data path allocates nothing.
            queue: Mutex::new(VecDeque::with_capacity(EVENT_QUEUE)),
            lost: AtomicU64::new(0),
            wake,
        });
        self.subs.push(Arc::downgrade(&sub));
        EventSubscription { sub }
    }

    /// Hands `ev` to every live subscriber and wakes it.
    pub(crate) fn raise(&mut self, ev: DeviceEvent) {
        self.subs.retain(|s| s.strong_count() > 0);
        for s in self.subs.iter().filter_map(Weak::upgrade) {
            {
                let mut q = s.queue.lock().unwrap_or_else(|p| p.into_inner());
                if q.len() >= EVENT_QUEUE {
                    s.lost.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                q.push_back(ev);
            }
            (s.wake)();
        }
    }
}

impl crate::Device {
    /// A new reader of the device's asynchronous events: every event raised from now on is
    /// queued for it, and `wake` is called after each one (on the thread that raised it,
    /// the progress thread or a caller, with the device's lock held: `wake` must not call the
    /// device; writing to a pipe or an eventfd is what it is for).
    pub fn subscribe_events(&self, wake: Box<dyn Fn() + Send + Sync>) -> EventSubscription {
        self.engine().subscribe_events(wake)
    }

    /// Sets the state of port `port` (the device has one, port 1). Going down raises
    /// [`DeviceEvent::PortError`] and makes every RC request taken from then on fail with
    /// "transport retry exceeded" (vendor syndrome [`vendor::PORT_DOWN`](crate::vendor::PORT_DOWN)),
    /// its QP entering the error state with [`DeviceEvent::QpFatal`]; coming up raises
    /// [`DeviceEvent::PortActive`]. Setting the state it has raises nothing.
    ///
    /// # Errors
    ///
    /// [`SimError::InvalidConfig`](crate::SimError::InvalidConfig) for a port other than 1.
    pub fn set_port_state(&self, port: u8, state: PortState) -> Result<(), crate::SimError> {
        self.engine().set_port_state(port, state)
    }

    /// The state of the port.
    pub fn port_state(&self) -> PortState {
        self.engine().faults.port
    }

    /// Moves QP `qpn` to the error state outside any work request and raises
    /// [`DeviceEvent::QpFatal`] (and [`DeviceEvent::QpLastWqeReached`] for a QP on a shared
    /// receive queue): its outstanding and later requests complete with "WR flushed".
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`](crate::SimError::NoSuchQp).
    pub fn inject_qp_fatal(&self, qpn: u32) -> Result<(), crate::SimError> {
        self.engine().inject_qp_event(DeviceEvent::QpFatal { qpn })
    }

    /// Raises an event of a QP: [`DeviceEvent::QpFatal`], [`DeviceEvent::QpRequestError`]
    /// and [`DeviceEvent::QpAccessError`] move the QP to the error state first (as on
    /// hardware), [`DeviceEvent::QpLastWqeReached`] is raised alone.
    ///
    /// # Errors
    ///
    /// [`SimError::NoSuchQp`](crate::SimError::NoSuchQp),
    /// [`SimError::InvalidConfig`](crate::SimError::InvalidConfig) for an event of no QP.
    pub fn inject_qp_event(&self, ev: DeviceEvent) -> Result<(), crate::SimError> {
        self.engine().inject_qp_event(ev)
    }

    /// The device fails: every QP enters the error state and [`DeviceEvent::DeviceFatal`] is
    /// raised.
    pub fn inject_device_fatal(&self) {
        self.engine().inject_device_fatal();
    }
}

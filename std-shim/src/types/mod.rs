//! Plain data: what devices, queue pairs, address handles and memory are created with and
//! report, and the values that travel between them (GIDs, endpoints, states, capabilities,
//! access rights, backend reports, clock snapshots, asynchronous events, why a buffer access
//! was refused).
//!
//! This is the crate's ground floor: nothing here holds a resource, and nothing here imports
//! a module of this crate outside it. The errors stand on it, the provider seam on those, and
//! the handles on the seam (`docs/architecture.md`, "The zverbs crate's floors").

pub(crate) mod access;
pub(crate) mod ah;
pub(crate) mod backend;
pub(crate) mod buf;
pub(crate) mod clock;
pub(crate) mod device;
pub(crate) mod endpoint;
pub(crate) mod eth;
pub(crate) mod event;
pub(crate) mod qp;

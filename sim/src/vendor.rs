//! The `vendor_err_synd` values the device writes into error CQEs.
//!
//! Real ConnectX firmware reports its own codes there, undocumented; these are the device's
//! own, chosen so that a test (or a user reading `Completion::vendor_err`) can tell exactly
//! which check failed. The high nibble groups them by syndrome.

/// The WQE's lkey names no live region (local protection, 0x04).
pub const LKEY: u8 = 0x41;
/// A local span lies outside its region or its end overflows (local protection, 0x04).
pub const LOCAL_BOUNDS: u8 = 0x42;
/// The local region lacks local write for a READ or atomic result (local protection, 0x04).
pub const LOCAL_ACCESS: u8 = 0x43;
/// A receive entry names no live region (responder: local protection, 0x04).
pub const RECV_LKEY: u8 = 0x44;
/// A receive entry lies outside its region (responder: local protection, 0x04).
pub const RECV_BOUNDS: u8 = 0x45;
/// A receive entry's region lacks local write (responder: local protection, 0x04).
pub const RECV_ACCESS: u8 = 0x46;

/// The message is longer than 2 GiB (local length, 0x01; a request from another process
/// that claims more: remote invalid request, 0x12).
pub const MSG_TOO_LONG: u8 = 0x11;
/// The message is longer than the receive it consumes (responder: local length, 0x01;
/// requester: remote invalid request, 0x12).
pub const RECV_TOO_SHORT: u8 = 0x12;

/// The remote key names no live region (remote access, 0x13).
pub const RKEY: u8 = 0x31;
/// The remote span lies outside its region (remote access, 0x13).
pub const REMOTE_BOUNDS: u8 = 0x32;
/// The remote region lacks the right for the operation (remote access, 0x13).
pub const REMOTE_ACCESS: u8 = 0x33;
/// An atomic's remote address is not 8-byte aligned (remote invalid request, 0x12).
pub const ATOMIC_ALIGN: u8 = 0x34;
/// The receive WQE at the responder was malformed (requester: remote operation error, 0x14).
pub const REMOTE_RECV: u8 = 0x35;

/// `ds` is 0 (local QP operation, 0x02).
pub const DS_ZERO: u8 = 0x21;
/// The WQE runs past the doorbell record's producer counter (local QP operation, 0x02).
pub const PAST_PRODUCER: u8 = 0x22;
/// Unknown opcode (local QP operation, 0x02).
pub const OPCODE: u8 = 0x23;
/// The segments do not fit the opcode (count, kind, or an atomic's data length)
/// (local QP operation, 0x02).
pub const LAYOUT: u8 = 0x24;
/// An inline segment's length runs past `ds` (local QP operation, 0x02).
pub const INLINE_LEN: u8 = 0x25;
/// The control segment's WQE index is not the WQE's basic block (local QP operation, 0x02).
pub const WQE_INDEX: u8 = 0x26;
/// The control segment names another QP (local QP operation, 0x02).
pub const QPN: u8 = 0x27;
/// The doorbell record claims more than a ring of new WQEs (local QP operation, 0x02).
pub const DOORBELL: u8 = 0x28;
/// A UD SEND without its datagram segment: `ds` leaves no room for the 48-byte address
/// vector after the control segment (local QP operation, 0x02).
pub const NO_DATAGRAM: u8 = 0x29;

/// A UD SEND's address vector asks for a GRH with a source GID index the port does not
/// have (local QP operation, 0x02).
pub const SGID_INDEX: u8 = 0x2a;

/// A raw packet SEND without its Ethernet segment: `ds` leaves no room for it after the
/// control segment (local QP operation, 0x02).
pub const NO_ETH_SEG: u8 = 0x2b;
/// A raw packet SEND whose Ethernet segment has a non-zero `mss`: segmentation belongs to the
/// TSO opcode alone (local QP operation, 0x02).
pub const RAW_MSS: u8 = 0x2c;
/// A raw packet SEND whose inlined header (`inline_hdr_sz`) runs past the WQE's `ds` (local
/// QP operation, 0x02).
pub const RAW_INLINE_HDR: u8 = 0x2d;
/// A raw packet SEND whose frame is shorter than an Ethernet header (14 bytes) or longer
/// than the port MTU with the Ethernet header (and a VLAN tag when it carries one) (local
/// length, 0x01).
pub const RAW_FRAME_LEN: u8 = 0x15;

/// A UD SEND longer than the path MTU (local length, 0x01).
pub const UD_MTU: u8 = 0x13;
/// A UD receive too short for the 40-byte GRH area and the datagram (responder: local
/// length, 0x01; the sender never knows).
pub const UD_RECV_TOO_SHORT: u8 = 0x14;
/// The shared receive queue is in the error state, or entered it on this message (a
/// doorbell record claiming more than its ring, a free list link outside the ring): the
/// message finds no receive (requester: remote operation error, 0x14).
pub const SRQ_ERROR: u8 = 0x36;

/// The peer QP is in the error state or gone: no acknowledgement ever comes (transport retry
/// counter exceeded, 0x15).
pub const PEER_DOWN: u8 = 0x51;
/// The peer QP is connected to another QP (or, across processes, to a QP at another LID): it
/// drops the request, as a responder drops a packet from a source QP other than its own
/// connection's, and the requester's retries run out (transport retry counter exceeded, 0x15).
pub const NOT_PEER: u8 = 0x53;
/// No valid acknowledgement came within the transport retries: the responder expects another
/// PSN (a sequence error NAK, or acknowledgements whose PSN is not the request's) or kept
/// losing them (transport retry counter exceeded, 0x15). The value ConnectX reports for it.
pub const RETRY: u8 = 0x81;
/// The port is down (`Device::set_port_state`): no acknowledgement comes, the transport
/// retries run out (transport retry counter exceeded, 0x15).
pub const PORT_DOWN: u8 = 0x54;
/// No receive was posted at the peer within the RNR retries (RNR retry exceeded, 0x16).
pub const RNR: u8 = 0x52;

/// Default value for an injected failure (see `Device::fail_next_wqe`).
pub const INJECTED: u8 = 0xee;
/// A WQE flushed because its QP is in the error state (WR flushed, 0x05); the value ConnectX
/// reports for flushes.
pub const FLUSH: u8 = 0xf9;

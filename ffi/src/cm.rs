//! `repr(C)` mirrors of the librdmacm structs the connection manager path uses, as in
//! rdma-core 44's `<rdma/rdma_cma.h>`. The workspace's `zverbs-abi` crate checks every size,
//! offset and constant against the header.
// Every struct, field and constant here carries the name it has in `<rdma/rdma_cma.h>`, where
// its meaning is documented; repeating each field's header comment would add nothing.
#![allow(non_camel_case_types, missing_docs)]

use core::ffi::{c_int, c_uint, c_void};

use crate::types::{ibv_ah_attr, ibv_comp_channel, ibv_context, ibv_cq, ibv_gid, ibv_pd, ibv_qp};

/// `struct rdma_event_channel`.
#[repr(C)]
pub struct rdma_event_channel {
    pub fd: c_int,
}

/// `struct rdma_ib_addr`.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct rdma_ib_addr {
    pub sgid: ibv_gid,
    pub dgid: ibv_gid,
    pub pkey: u16,
}

/// `struct rdma_addr`: source and destination as `sockaddr_storage` (the unions' largest
/// member), then the IB addresses.
#[repr(C)]
pub struct rdma_addr {
    pub src_storage: libc::sockaddr_storage,
    pub dst_storage: libc::sockaddr_storage,
    pub ibaddr: rdma_ib_addr,
}

/// `struct rdma_route`.
#[repr(C)]
pub struct rdma_route {
    pub addr: rdma_addr,
    pub path_rec: *mut c_void,
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct rdma_cm_id {
    pub verbs: *mut ibv_context,
    pub channel: *mut rdma_event_channel,
    pub context: *mut c_void,
    pub qp: *mut ibv_qp,
    pub route: rdma_route,
    pub ps: c_uint,
    pub port_num: u8,
    pub event: *mut rdma_cm_event,
    pub send_cq_channel: *mut ibv_comp_channel,
    pub send_cq: *mut ibv_cq,
    pub recv_cq_channel: *mut ibv_comp_channel,
    pub recv_cq: *mut ibv_cq,
    pub srq: *mut c_void,
    pub pd: *mut ibv_pd,
    pub qp_type: c_uint,
}

/// `struct rdma_conn_param`.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct rdma_conn_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    pub flow_control: u8,
    pub retry_count: u8,
    pub rnr_retry_count: u8,
    pub srq: u8,
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[derive(Clone, Copy)]
#[repr(C)]
pub struct rdma_ud_param {
    pub private_data: *const c_void,
    pub private_data_len: u8,
    pub ah_attr: ibv_ah_attr,
    pub qp_num: u32,
    pub qkey: u32,
}

/// `struct rdma_cm_event`'s `param` union.
#[derive(Clone, Copy)]
#[repr(C)]
pub union rdma_cm_event_param {
    pub conn: rdma_conn_param,
    pub ud: rdma_ud_param,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct rdma_cm_event {
    pub id: *mut rdma_cm_id,
    pub listen_id: *mut rdma_cm_id,
    pub event: c_uint,
    pub status: c_int,
    pub param: rdma_cm_event_param,
}

/// `RDMA_PS_TCP`.
pub const RDMA_PS_TCP: c_uint = 0x0106;
/// `RDMA_PS_UDP`: unreliable datagrams (UD QPs, multicast).
pub const RDMA_PS_UDP: c_uint = 0x0111;

/// `enum rdma_cm_event_type`.
pub mod event {
    use core::ffi::c_uint;
    pub const ADDR_RESOLVED: c_uint = 0;
    pub const ADDR_ERROR: c_uint = 1;
    pub const ROUTE_RESOLVED: c_uint = 2;
    pub const ROUTE_ERROR: c_uint = 3;
    pub const CONNECT_REQUEST: c_uint = 4;
    pub const CONNECT_RESPONSE: c_uint = 5;
    pub const CONNECT_ERROR: c_uint = 6;
    pub const UNREACHABLE: c_uint = 7;
    pub const REJECTED: c_uint = 8;
    pub const ESTABLISHED: c_uint = 9;
    pub const DISCONNECTED: c_uint = 10;
    pub const MULTICAST_JOIN: c_uint = 12;
    pub const MULTICAST_ERROR: c_uint = 13;
}

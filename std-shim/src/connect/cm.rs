//! Connection set-up through the RDMA connection manager (librdmacm).
//!
//! The client resolves the server's IP address and route ([`CmClient::resolve`]), which binds
//! it to a local device; the server takes connection requests from a [`CmListener`]. Either way
//! the caller then creates its PD, CQs and QP on the connection's own device context
//! ([`CmClient::context`], [`CmRequest::context`]) — so the QP can use the direct backend on
//! mlx5 — and finishes with [`CmClient::connect`] or [`CmRequest::accept`], which move the QP
//! through INIT, RTR and RTS with the attributes the connection manager computes
//! (`rdma_init_qp_attr`). Up to [`MAX_PRIVATE`] bytes of private data travel with the request
//! and the answer; [`encode_region`] puts a remote buffer in them.
//!
//! The connection manager chooses each side's first PSN and tells the peer itself (the kernel
//! draws it; `rdma_conn_param` has no field for it), so [`Qp::endpoint`] is not sent here:
//! once connected, [`Qp::psn`] reports the PSN rdma_cm set at RTS.

use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr};
use std::ptr;
use std::sync::Arc;
use std::time::Duration;

use super::RemoteRegion;
use crate::backend::BackendChoice;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::provider::verbs::borrow_context;
use crate::qp::Qp;
use crate::types::access::AccessFlags;
use crate::types::ah::{AhAttr, MULTICAST_QPN, UdAttr};
use crate::types::device::Gid;
use crate::types::qp::{GlobalRoute, QpState, QpType};
use zverbs_ffi::cm::*;
use zverbs_ffi::load::{self, Rdmacm};
use zverbs_ffi::types::{ibv_qp_attr, qp_attr_mask};

/// Private data a connect request can carry on RC (the answer may carry more, but this crate
/// sends at most this much either way).
pub const MAX_PRIVATE: usize = 56;
const REGION_MAGIC: &[u8; 4] = b"zvR1";

/// Encodes a remote buffer as private data (24 bytes).
pub fn encode_region(r: &RemoteRegion) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[..4].copy_from_slice(REGION_MAGIC);
    out[4..12].copy_from_slice(&r.addr.to_be_bytes());
    out[12..16].copy_from_slice(&r.rkey.to_be_bytes());
    out[16..24].copy_from_slice(&r.len.to_be_bytes());
    out
}

/// Decodes a remote buffer from private data.
///
/// # Errors
///
/// [`Error::Protocol`] when the data does not hold one.
pub fn decode_region(data: &[u8]) -> Result<RemoteRegion> {
    if data.len() < 24 || &data[..4] != REGION_MAGIC {
        return Err(Error::Protocol {
            detail: format!(
                "expected a zverbs buffer in the connection's private data, got {} bytes \
                 starting {:02x?}",
                data.len(),
                &data[..data.len().min(8)]
            ),
        });
    }
    let u64_at = |i: usize| u64::from_be_bytes(data[i..i + 8].try_into().unwrap_or([0; 8]));
    Ok(RemoteRegion {
        addr: u64_at(4),
        rkey: u32::from_be_bytes(data[12..16].try_into().unwrap_or([0; 4])),
        len: u64_at(16),
    })
}

#[derive(Debug)]
struct Channel {
    ch: *mut rdma_event_channel,
    cm: &'static Rdmacm,
}

// SAFETY: an event channel is a file descriptor wrapper usable from any thread.
unsafe impl Send for Channel {}
// SAFETY: as above; events are taken under `&self` one at a time by blocking calls that
// librdmacm serialises.
unsafe impl Sync for Channel {}

impl Drop for Channel {
    fn drop(&mut self) {
        // SAFETY: created by us, destroyed once, after every id on it (they hold it).
        unsafe { (self.cm.rdma_destroy_event_channel)(self.ch) };
    }
}

#[derive(Debug)]
struct Id {
    id: *mut rdma_cm_id,
    cm: &'static Rdmacm,
    connected: std::sync::atomic::AtomicBool,
    _ch: Arc<Channel>,
}

// SAFETY: librdmacm ids may be used from any thread.
unsafe impl Send for Id {}
// SAFETY: as above.
unsafe impl Sync for Id {}

impl Drop for Id {
    fn drop(&mut self) {
        if self.connected.load(std::sync::atomic::Ordering::Relaxed) {
            // SAFETY: a live, connected id.
            unsafe { (self.cm.rdma_disconnect)(self.id) };
        }
        // SAFETY: created by us (or handed over by a connect request), destroyed once, after
        // every object using its context (they hold this `Id`).
        unsafe { (self.cm.rdma_destroy_id)(self.id) };
    }
}

/// An event, copied out of librdmacm before it is acknowledged.
struct Event {
    kind: u32,
    status: i32,
    id: *mut rdma_cm_id,
    private: Vec<u8>,
}

fn event_name(cm: &Rdmacm, kind: u32) -> String {
    // SAFETY: `rdma_event_str` returns a static string for any value.
    let p = unsafe { (cm.rdma_event_str)(kind) };
    if p.is_null() {
        return format!("event {kind}");
    }
    // SAFETY: non-null, NUL-terminated, static.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Waits up to `timeout` for the next event on `ch` (`name` is what the caller expects, for
/// the error when none comes), hands it to `read` and acknowledges it.
fn next_event<T>(
    ch: &Channel,
    name: &'static str,
    timeout: Duration,
    read: impl FnOnce(&rdma_cm_event) -> T,
) -> Result<T> {
    // SAFETY: a live channel.
    let fd = unsafe { (*ch.ch).fd };
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms(timeout)) };
    if r < 0 {
        return Err(Error::last_os("poll"));
    }
    if r == 0 {
        return Err(Error::Cm {
            expected: name,
            got: format!("nothing within {} ms", timeout.as_millis()),
            status: -libc::ETIMEDOUT,
        });
    }
    let mut ev: *mut rdma_cm_event = ptr::null_mut();
    // SAFETY: a live channel and a valid out-pointer.
    if unsafe { (ch.cm.rdma_get_cm_event)(ch.ch, &mut ev) } != 0 {
        return Err(Error::last_os("rdma_get_cm_event"));
    }
    // SAFETY: librdmacm returned a valid event, owned until acknowledged.
    let out = read(unsafe { &*ev });
    // SAFETY: acknowledged once, after copying what is needed.
    unsafe { (ch.cm.rdma_ack_cm_event)(ev) };
    Ok(out)
}

fn wait(ch: &Channel, expected: u32, name: &'static str, timeout: Duration) -> Result<Event> {
    let out = next_event(ch, name, timeout, |e| {
        // SAFETY: for connection events the `conn` view is the one librdmacm filled.
        let conn = unsafe { e.param.conn };
        let private = if conn.private_data.is_null() {
            Vec::new()
        } else {
            // SAFETY: librdmacm provides `private_data_len` readable bytes.
            unsafe {
                std::slice::from_raw_parts(
                    conn.private_data.cast::<u8>(),
                    conn.private_data_len.into(),
                )
            }
            .to_vec()
        };
        Event {
            kind: e.event,
            status: e.status,
            id: e.id,
            private,
        }
    })?;
    if out.kind != expected {
        return Err(Error::Cm {
            expected: name,
            got: event_name(ch.cm, out.kind),
            status: out.status,
        });
    }
    Ok(out)
}

fn sockaddr(addr: SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: all-zero bytes are a valid `sockaddr_storage`.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: a.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(a.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: a `sockaddr_in` fits in a `sockaddr_storage` at offset 0.
            unsafe { ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
        }
        SocketAddr::V6(a) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: a.port().to_be(),
                sin6_flowinfo: a.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: a.ip().octets(),
                },
                sin6_scope_id: a.scope_id(),
            };
            // SAFETY: as above.
            unsafe { ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
        }
    }
    ss
}

fn new_id(cm: &'static Rdmacm) -> Result<Arc<Id>> {
    new_id_in(cm, RDMA_PS_TCP)
}

/// A new id in port space `ps` (`RDMA_PS_TCP`: RC connections; `RDMA_PS_UDP`: datagrams and
/// multicast) on an event channel of its own.
fn new_id_in(cm: &'static Rdmacm, ps: u32) -> Result<Arc<Id>> {
    // SAFETY: no preconditions.
    let ch = unsafe { (cm.rdma_create_event_channel)() };
    if ch.is_null() {
        let e = Error::last_os("rdma_create_event_channel");
        if matches!(e.errno(), Some(libc::ENODEV | libc::ENOENT)) {
            return Err(Error::NoDevice {
                library: None,
                hint: Some(String::from(
                    "rdma_cm finds no RDMA device (/dev/infiniband/rdma_cm is missing: load \
                     the driver and rdma_ucm)",
                )),
            });
        }
        return Err(e);
    }
    let ch = Arc::new(Channel { ch, cm });
    let mut id = ptr::null_mut();
    // SAFETY: a live channel and a valid out-pointer.
    let ret = unsafe { (cm.rdma_create_id)(ch.ch, &mut id, ptr::null_mut(), ps) };
    if ret != 0 {
        return Err(Error::from_ret("rdma_create_id", ret));
    }
    Ok(Arc::new(Id {
        id,
        cm,
        connected: false.into(),
        _ch: ch,
    }))
}

/// A timeout in milliseconds, as `poll` and librdmacm take it.
fn timeout_ms(timeout: Duration) -> i32 {
    timeout.as_millis().min(i32::MAX as u128) as i32
}

/// `rdma_resolve_addr` of `dst` (from `src`, when given) on `id`, then its ADDR_RESOLVED event
/// within `timeout`.
fn resolve_addr(
    cm: &Rdmacm,
    id: &Id,
    src: Option<&mut libc::sockaddr_storage>,
    mut dst: libc::sockaddr_storage,
    timeout: Duration,
) -> Result<()> {
    let src_ptr = src.map_or(ptr::null_mut(), |s| {
        (s as *mut libc::sockaddr_storage).cast()
    });
    // SAFETY: a live id and valid addresses that outlive the call.
    let ret = unsafe {
        (cm.rdma_resolve_addr)(
            id.id,
            src_ptr,
            (&mut dst as *mut libc::sockaddr_storage).cast(),
            timeout_ms(timeout),
        )
    };
    if ret != 0 {
        return Err(Error::from_ret("rdma_resolve_addr", ret));
    }
    wait(&id._ch, event::ADDR_RESOLVED, "ADDR_RESOLVED", timeout)?;
    Ok(())
}

fn context_of(id: &Arc<Id>) -> Result<Context> {
    // SAFETY: a live id bound to a device.
    let verbs = unsafe { (*id.id).verbs };
    if verbs.is_null() {
        return Err(Error::NoDevice {
            library: None,
            hint: Some("rdma_cm bound the address to no RDMA device".into()),
        });
    }
    // SAFETY: librdmacm keeps the context open while the id lives, and the context keeps the
    // id (the `Arc`) alive.
    let provider = unsafe { borrow_context(verbs, id.clone())? };
    Ok(Context::from_provider(
        Box::new(provider),
        BackendChoice::resolve(None)?,
    ))
}

/// Moves `qp` to `state` with the attributes rdma_cm computes for `id`. At INIT the access
/// rights are `access`: the kernel gives the active side none (it computes them from the
/// connection, which does not exist yet), so the caller's are applied on both sides.
fn transition(id: &Id, qp: &Qp, state: u32, access: AccessFlags) -> Result<()> {
    let mut attr = ibv_qp_attr {
        qp_state: state,
        ..Default::default()
    };
    let mut mask = 0;
    // SAFETY: a live id; valid out-pointers.
    let ret = unsafe { (id.cm.rdma_init_qp_attr)(id.id, &mut attr, &mut mask) };
    if ret != 0 {
        return Err(Error::from_ret("rdma_init_qp_attr", ret));
    }
    if state == 1 {
        attr.qp_access_flags = access.bits();
        mask |= qp_attr_mask::IBV_QP_ACCESS_FLAGS;
    }
    qp.modify_raw(&mut attr, mask)
}

fn conn_param(qp: &Qp, private: &[u8]) -> Result<rdma_conn_param> {
    if private.len() > MAX_PRIVATE {
        return Err(Error::InvalidArgument(format!(
            "{} bytes of private data, at most {MAX_PRIVATE}",
            private.len()
        )));
    }
    Ok(rdma_conn_param {
        private_data: private.as_ptr().cast(),
        private_data_len: private.len() as u8,
        responder_resources: 1,
        initiator_depth: 1,
        flow_control: 0,
        retry_count: 7,
        rnr_retry_count: 7,
        srq: 0,
        qp_num: qp.qpn(),
    })
}

/// A connection made through rdma_cm; disconnected and destroyed when dropped (after the QP
/// and everything else on its context, which keep it alive).
#[derive(Debug)]
pub struct CmConnection {
    _id: Arc<Id>,
    private: Vec<u8>,
}

impl CmConnection {
    /// The private data the peer sent.
    pub fn private_data(&self) -> &[u8] {
        &self.private
    }
}

/// The active side, with address and route resolved.
#[derive(Debug)]
pub struct CmClient {
    id: Arc<Id>,
    ctx: Context,
    timeout: Duration,
    access: AccessFlags,
}

impl CmClient {
    /// Resolves `server`'s address and route (within `timeout` each).
    ///
    /// # Errors
    ///
    /// [`Error::Library`] without librdmacm; [`Error::Cm`] when the address or route cannot
    /// be resolved (ADDR_ERROR, ROUTE_ERROR: no RDMA device reaches it).
    pub fn resolve(server: SocketAddr, timeout: Duration) -> Result<Self> {
        Self::resolve_inner(None, server, timeout)
    }

    /// As [`CmClient::resolve`], from the local address `source`: the connection leaves
    /// through the device that holds it (when several devices could reach the server).
    ///
    /// # Errors
    ///
    /// As [`CmClient::resolve`].
    pub fn resolve_from(source: IpAddr, server: SocketAddr, timeout: Duration) -> Result<Self> {
        Self::resolve_inner(Some(SocketAddr::new(source, 0)), server, timeout)
    }

    fn resolve_inner(
        source: Option<SocketAddr>,
        server: SocketAddr,
        timeout: Duration,
    ) -> Result<Self> {
        let cm = load::rdmacm()?;
        let id = new_id(cm)?;
        let mut src = source.map(sockaddr);
        resolve_addr(cm, &id, src.as_mut(), sockaddr(server), timeout)?;
        // SAFETY: a live id with a resolved address.
        let ret = unsafe { (cm.rdma_resolve_route)(id.id, timeout_ms(timeout)) };
        if ret != 0 {
            return Err(Error::from_ret("rdma_resolve_route", ret));
        }
        wait(&id._ch, event::ROUTE_RESOLVED, "ROUTE_RESOLVED", timeout)?;
        let ctx = context_of(&id)?;
        Ok(Self {
            id,
            ctx,
            timeout,
            access: AccessFlags::ALL,
        })
    }

    /// What the peer may do to this side's memory through the QP (default: everything).
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.access = access;
        self
    }

    /// The device context the route goes through: create the PD, CQs and QP on it.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The local port the route uses.
    pub fn port(&self) -> u8 {
        // SAFETY: a live id.
        unsafe { (*self.id.id).port_num }
    }

    /// Connects `qp` (created on [`CmClient::context`], in RESET), sending `private` data.
    ///
    /// # Errors
    ///
    /// [`Error::Cm`] when the server rejects or does not answer; [`Error::Verbs`] from the QP
    /// transitions.
    pub fn connect(self, qp: &Qp, private: &[u8]) -> Result<CmConnection> {
        transition(&self.id, qp, 1, self.access)?;
        let mut p = conn_param(qp, private)?;
        // SAFETY: a live id with a resolved route; `p` and its private data outlive the call.
        let ret = unsafe { (self.id.cm.rdma_connect)(self.id.id, &mut p) };
        if ret != 0 {
            return Err(Error::from_ret("rdma_connect", ret));
        }
        let ev = wait(
            &self.id._ch,
            event::CONNECT_RESPONSE,
            "CONNECT_RESPONSE",
            self.timeout,
        )?;
        transition(&self.id, qp, 2, self.access)?;
        transition(&self.id, qp, 3, self.access)?;
        // SAFETY: a live id that received its connect response.
        let ret = unsafe { (self.id.cm.rdma_establish)(self.id.id) };
        if ret != 0 {
            return Err(Error::from_ret("rdma_establish", ret));
        }
        self.id
            .connected
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(CmConnection {
            _id: self.id,
            private: ev.private,
        })
    }
}

/// The passive side: a bound, listening id.
#[derive(Debug)]
pub struct CmListener {
    id: Arc<Id>,
    timeout: Duration,
}

impl CmListener {
    /// Listens on `addr` (use `0.0.0.0:port` for every interface).
    ///
    /// # Errors
    ///
    /// [`Error::Library`] without librdmacm; [`Error::Verbs`] from `rdma_bind_addr` /
    /// `rdma_listen` (EADDRINUSE, ENODEV when no RDMA device has the address).
    pub fn bind(addr: SocketAddr, timeout: Duration) -> Result<Self> {
        let cm = load::rdmacm()?;
        let id = new_id(cm)?;
        let mut a = sockaddr(addr);
        // SAFETY: a live id and a valid address.
        let ret =
            unsafe { (cm.rdma_bind_addr)(id.id, (&mut a as *mut libc::sockaddr_storage).cast()) };
        if ret != 0 {
            return Err(Error::from_ret("rdma_bind_addr", ret));
        }
        // SAFETY: a live, bound id.
        let ret = unsafe { (cm.rdma_listen)(id.id, 8) };
        if ret != 0 {
            return Err(Error::from_ret("rdma_listen", ret));
        }
        Ok(Self { id, timeout })
    }

    /// Waits (without limit) for the next connection request.
    ///
    /// # Errors
    ///
    /// [`Error::Cm`] for any other event.
    pub fn next_request(&self) -> Result<CmRequest> {
        let ev = wait(
            &self.id._ch,
            event::CONNECT_REQUEST,
            "CONNECT_REQUEST",
            Duration::from_secs(u32::MAX.into()),
        )?;
        let id = Arc::new(Id {
            id: ev.id,
            cm: self.id.cm,
            connected: false.into(),
            _ch: self.id._ch.clone(),
        });
        let ctx = context_of(&id)?;
        Ok(CmRequest {
            id,
            ctx,
            private: ev.private,
            timeout: self.timeout,
            access: AccessFlags::ALL,
        })
    }
}

/// A connection request, to accept or drop (dropping rejects it).
#[derive(Debug)]
pub struct CmRequest {
    id: Arc<Id>,
    ctx: Context,
    private: Vec<u8>,
    timeout: Duration,
    access: AccessFlags,
}

impl CmRequest {
    /// The device context the request arrived on: create the PD, CQs and QP on it.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The local port the request arrived on.
    pub fn port(&self) -> u8 {
        // SAFETY: a live id.
        unsafe { (*self.id.id).port_num }
    }

    /// The private data the client sent.
    pub fn private_data(&self) -> &[u8] {
        &self.private
    }

    /// What the peer may do to this side's memory through the QP (default: everything).
    pub fn access(mut self, access: AccessFlags) -> Self {
        self.access = access;
        self
    }

    /// Accepts with `qp` (created on [`CmRequest::context`], in RESET), answering `private`.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from the QP transitions or `rdma_accept`; [`Error::Cm`] when the
    /// connection is not established.
    pub fn accept(self, qp: &Qp, private: &[u8]) -> Result<CmConnection> {
        transition(&self.id, qp, 1, self.access)?;
        transition(&self.id, qp, 2, self.access)?;
        transition(&self.id, qp, 3, self.access)?;
        let mut p = conn_param(qp, private)?;
        // SAFETY: a live id with a pending request; `p` outlives the call.
        let ret = unsafe { (self.id.cm.rdma_accept)(self.id.id, &mut p) };
        if ret != 0 {
            return Err(Error::from_ret("rdma_accept", ret));
        }
        wait(
            &self.id._ch,
            event::ESTABLISHED,
            "ESTABLISHED",
            self.timeout,
        )?;
        self.id
            .connected
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Ok(CmConnection {
            _id: self.id,
            private: self.private,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Multicast

/// What a member of a multicast group needs to send to it, from the MULTICAST_JOIN event's
/// `param.ud` (`struct rdma_ud_param`): the address (the group's GID and multicast LID, the
/// port and source GID index), the destination QP number ([`MULTICAST_QPN`]) and the group's
/// Q_Key. Make the handle with [`Pd::create_ah`](crate::Pd::create_ah)`(&join.ah)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct McastJoin {
    /// The address of the group.
    pub ah: AhAttr,
    /// The destination QP number of a send to the group ([`MULTICAST_QPN`]).
    pub qpn: u32,
    /// The group's Q_Key: sends carry it, and a member's QP holds it.
    pub qkey: u32,
}

impl McastJoin {
    /// The group's GID (the GRH's destination; zero when the event had no GRH).
    pub fn mgid(&self) -> Gid {
        self.ah.grh.map(|g| g.dgid).unwrap_or_default()
    }

    /// The group's multicast LID (0 on RoCE).
    pub fn mlid(&self) -> u16 {
        self.ah.dlid
    }
}

/// The group address `group` as rdma_cm takes it, refused unless it is an IPv4 or IPv6
/// multicast address.
fn mcast_sockaddr(group: IpAddr) -> Result<libc::sockaddr_storage> {
    if !group.is_multicast() {
        return Err(Error::InvalidArgument(format!(
            "{group} is not a multicast address (IPv4 224.0.0.0/4, e.g. 239.1.1.1, or IPv6 ff00::/8)"
        )));
    }
    Ok(sockaddr(SocketAddr::new(group, 0)))
}

/// Reads a multicast event: the join's address, or the error a MULTICAST_ERROR (or any other
/// event) stands for.
fn decode_join(cm_name: impl Fn(u32) -> String, e: &rdma_cm_event) -> Result<McastJoin> {
    if e.event != event::MULTICAST_JOIN || e.status != 0 {
        return Err(Error::Cm {
            expected: "MULTICAST_JOIN",
            got: cm_name(e.event),
            status: e.status,
        });
    }
    // SAFETY: for MULTICAST_JOIN the `ud` view is the one librdmacm filled.
    let ud = unsafe { e.param.ud };
    let a = ud.ah_attr;
    let grh = (a.is_global != 0).then_some(GlobalRoute {
        dgid: Gid(a.grh.dgid.raw),
        sgid_index: a.grh.sgid_index,
        hop_limit: a.grh.hop_limit,
        traffic_class: a.grh.traffic_class,
        flow_label: a.grh.flow_label,
    });
    Ok(McastJoin {
        ah: AhAttr {
            dlid: a.dlid,
            sl: a.sl,
            src_path_bits: a.src_path_bits,
            static_rate: a.static_rate,
            port: a.port_num,
            grh,
        },
        qpn: ud.qp_num & MULTICAST_QPN,
        qkey: ud.qkey,
    })
}

/// A multicast group address resolved to a local RDMA device through rdma_cm (port space
/// `RDMA_PS_UDP`), as `mckey` does it: create the PD, CQs and a UD QP on
/// [`CmMulticast::context`], ready the QP with [`CmMulticast::ready`], post receives, then
/// [`CmMulticast::join`].
#[derive(Debug)]
pub struct CmMulticast {
    // Field order is drop order: the context (and everything made on it) before the id.
    ctx: Context,
    id: Arc<Id>,
    group: IpAddr,
    timeout: Duration,
}

impl CmMulticast {
    /// Resolves the multicast address `group` to a local device (within `timeout`); with
    /// `bind`, from the device holding that local address (`mckey -b`), else from the one the
    /// routing table picks.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when `group` is not a multicast address;
    /// [`Error::Library`] without librdmacm; [`Error::Verbs`] from `rdma_bind_addr` (no RDMA
    /// device has the address) or `rdma_resolve_addr`; [`Error::Cm`] on ADDR_ERROR or when
    /// nothing arrives in time.
    pub fn resolve(group: IpAddr, bind: Option<IpAddr>, timeout: Duration) -> Result<Self> {
        let dst = mcast_sockaddr(group)?;
        let cm = load::rdmacm()?;
        let id = new_id_in(cm, RDMA_PS_UDP)?;
        let mut src = bind.map(|a| sockaddr(SocketAddr::new(a, 0)));
        if let Some(s) = src.as_mut() {
            // SAFETY: a live id and a valid address.
            let ret =
                unsafe { (cm.rdma_bind_addr)(id.id, (s as *mut libc::sockaddr_storage).cast()) };
            if ret != 0 {
                return Err(Error::from_ret("rdma_bind_addr", ret));
            }
        }
        resolve_addr(cm, &id, src.as_mut(), dst, timeout)?;
        let ctx = context_of(&id)?;
        Ok(Self {
            ctx,
            id,
            group,
            timeout,
        })
    }

    /// The device context the group is reached through: create the PD, CQs and UD QP on it.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The local port.
    pub fn port(&self) -> u8 {
        // SAFETY: a live id.
        unsafe { (*self.id.id).port_num }
    }

    /// The group address.
    pub fn group(&self) -> IpAddr {
        self.group
    }

    /// The UD attributes rdma_cm gives a QP of this id (`rdma_init_qp_attr` at INIT: port,
    /// P_Key index and the port space's Q_Key), send PSN 0.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `rdma_init_qp_attr`.
    pub fn ud_attr(&self) -> Result<UdAttr> {
        let mut attr = ibv_qp_attr {
            qp_state: 1,
            ..Default::default()
        };
        let mut mask = 0;
        // SAFETY: a live id with a resolved address; valid out-pointers.
        let ret = unsafe { (self.id.cm.rdma_init_qp_attr)(self.id.id, &mut attr, &mut mask) };
        if ret != 0 {
            return Err(Error::from_ret("rdma_init_qp_attr", ret));
        }
        Ok(UdAttr {
            port: attr.port_num,
            pkey_index: attr.pkey_index,
            qkey: attr.qkey,
            sq_psn: 0,
        })
    }

    /// Moves the UD QP `qp` (in RESET, made on [`CmMulticast::context`]) to RTS with
    /// [`CmMulticast::ud_attr`], ready for receives to be posted before the join.
    ///
    /// # Errors
    ///
    /// As [`CmMulticast::ud_attr`] and [`Qp::ready_ud`].
    pub fn ready(&self, qp: &Qp) -> Result<()> {
        qp.ready_ud(&self.ud_attr()?)
    }

    /// Joins the group with `qp` (readied, e.g. by [`CmMulticast::ready`]; post its receives
    /// first): `rdma_join_multicast`, then waits (within the timeout given to
    /// [`CmMulticast::resolve`]) for MULTICAST_JOIN, attaches `qp` to the group's GID and LID
    /// (`ibv_attach_mcast`: librdmacm does it only for a QP it created itself) and sets its
    /// Q_Key to the group's if they differ. The membership ends when the [`McastGroup`] is
    /// dropped.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for a QP that is not UD or still in RESET;
    /// [`Error::Verbs`] from `rdma_join_multicast`, `ibv_attach_mcast` or `ibv_modify_qp`;
    /// [`Error::Cm`] on MULTICAST_ERROR (with its status) or when nothing arrives in time.
    pub fn join(self, qp: &Qp) -> Result<McastGroup> {
        if qp.qp_type() != QpType::Ud {
            return Err(Error::InvalidArgument(
                "only a UD QP (QpBuilder::ud) joins a multicast group".into(),
            ));
        }
        if qp.state() == QpState::Reset {
            return Err(Error::InvalidArgument(
                "ready the QP (CmMulticast::ready) and post its receives before the join".into(),
            ));
        }
        let qkey = self.ud_attr()?.qkey;
        let mut addr = mcast_sockaddr(self.group)?;
        // SAFETY: a live id with a resolved address; `addr` outlives the call.
        let ret = unsafe {
            (self.id.cm.rdma_join_multicast)(
                self.id.id,
                (&mut addr as *mut libc::sockaddr_storage).cast(),
                ptr::null_mut(),
            )
        };
        if ret != 0 {
            return Err(Error::from_ret("rdma_join_multicast", ret));
        }
        // From here on the membership is left on drop, whatever fails.
        let mut group = McastGroup {
            qp: None,
            join: McastJoin {
                ah: AhAttr::default(),
                qpn: MULTICAST_QPN,
                qkey,
            },
            addr,
            cm: self,
        };
        let cm = group.cm.id.cm;
        group.join = next_event(&group.cm.id._ch, "MULTICAST_JOIN", group.cm.timeout, |e| {
            decode_join(|k| event_name(cm, k), e)
        })??;
        qp.attach_mcast(&group.join.mgid(), group.join.mlid())?;
        group.qp = Some(qp.clone());
        if group.join.qkey != qkey {
            let mut attr = ibv_qp_attr {
                qkey: group.join.qkey,
                ..Default::default()
            };
            qp.modify_raw(&mut attr, qp_attr_mask::IBV_QP_QKEY)?;
        }
        Ok(group)
    }
}

/// Membership of a multicast group ([`CmMulticast::join`]): on drop the QP is detached and
/// the group left (`ibv_detach_mcast`, `rdma_leave_multicast`).
#[derive(Debug)]
pub struct McastGroup {
    qp: Option<Qp>,
    join: McastJoin,
    addr: libc::sockaddr_storage,
    cm: CmMulticast,
}

impl McastGroup {
    /// Where sends to the group go.
    pub fn join_info(&self) -> &McastJoin {
        &self.join
    }

    /// The device context (as [`CmMulticast::context`]).
    pub fn context(&self) -> &Context {
        &self.cm.ctx
    }

    /// The group address.
    pub fn group(&self) -> IpAddr {
        self.cm.group
    }
}

impl Drop for McastGroup {
    fn drop(&mut self) {
        if let Some(qp) = self.qp.take() {
            // Nothing to do about a failure here: the QP is being released anyway.
            let _ = qp.detach_mcast(&self.join.mgid(), self.join.mlid());
        }
        // SAFETY: a live id that joined the group at `addr`.
        unsafe {
            (self.cm.id.cm.rdma_leave_multicast)(
                self.cm.id.id,
                (&mut self.addr as *mut libc::sockaddr_storage).cast(),
            )
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_in_private_data() {
        let r = RemoteRegion {
            addr: 0x7f12_3456_7000,
            rkey: 0xabcd,
            len: 1 << 20,
        };
        let b = encode_region(&r);
        assert_eq!(&b[..4], b"zvR1");
        let mut padded = b.to_vec();
        padded.resize(MAX_PRIVATE, 0);
        assert_eq!(decode_region(&padded).unwrap(), r);
        let e = decode_region(&[0u8; 56]).unwrap_err();
        assert!(matches!(e, Error::Protocol { .. }), "{e}");
    }

    #[test]
    fn sockaddr_v4_layout() {
        let ss = sockaddr("10.1.2.3:4791".parse().unwrap());
        // SAFETY: written as a `sockaddr_in` above.
        let sin: libc::sockaddr_in =
            unsafe { ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
        assert_eq!(sin.sin_family, libc::AF_INET as libc::sa_family_t);
        assert_eq!(u16::from_be(sin.sin_port), 4791);
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [10, 1, 2, 3]);
    }

    fn mcast_event(kind: u32, status: i32) -> rdma_cm_event {
        // SAFETY: all-zero bytes are a valid event (null pointers, zero numbers).
        let mut e: rdma_cm_event = unsafe { std::mem::zeroed() };
        e.event = kind;
        e.status = status;
        // SAFETY: writing the `ud` view of a zeroed union.
        let ud = unsafe { &mut e.param.ud };
        ud.ah_attr.is_global = 1;
        ud.ah_attr.grh.dgid.raw = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 239, 1, 2, 3];
        ud.ah_attr.grh.sgid_index = 1;
        ud.ah_attr.grh.hop_limit = 1;
        ud.ah_attr.dlid = 0xc004;
        ud.ah_attr.sl = 2;
        ud.ah_attr.port_num = 1;
        ud.qp_num = 0xff_ffff;
        ud.qkey = 0x0123_4567;
        e
    }

    #[test]
    fn a_join_event_gives_the_group_address() {
        let j = decode_join(
            |k| format!("event {k}"),
            &mcast_event(event::MULTICAST_JOIN, 0),
        )
        .unwrap();
        assert_eq!(j.qpn, MULTICAST_QPN);
        assert_eq!(j.qkey, 0x0123_4567);
        assert_eq!(j.mlid(), 0xc004);
        assert_eq!(
            j.mgid().to_ipv4(),
            Some(std::net::Ipv4Addr::new(239, 1, 2, 3))
        );
        assert_eq!((j.ah.port, j.ah.sl), (1, 2));
        let g = j.ah.grh.unwrap();
        assert_eq!((g.sgid_index, g.hop_limit), (1, 1));
        // The address converts back to what the event held.
        let v = j.ah.to_verbs();
        assert_eq!((v.is_global, v.dlid, v.grh.dgid.raw[15]), (1, 0xc004, 3));
    }

    #[test]
    fn a_multicast_error_is_a_cm_error_with_its_status() {
        let e = decode_join(
            |k| format!("event {k}"),
            &mcast_event(event::MULTICAST_ERROR, -libc::ENETUNREACH),
        )
        .unwrap_err();
        match e {
            Error::Cm {
                expected,
                got,
                status,
            } => {
                assert_eq!(expected, "MULTICAST_JOIN");
                assert_eq!(got, "event 13");
                assert_eq!(status, -libc::ENETUNREACH);
            }
            other => panic!("{other}"),
        }
        // A join that reports a failure status is refused too.
        let e = decode_join(
            |k| format!("event {k}"),
            &mcast_event(event::MULTICAST_JOIN, -5),
        );
        assert!(matches!(e, Err(Error::Cm { status: -5, .. })));
    }

    #[test]
    fn only_multicast_addresses_are_groups() {
        for ok in ["239.1.1.1", "224.0.0.251", "ff0e::1"] {
            assert!(mcast_sockaddr(ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for bad in ["10.1.1.1", "255.255.255.255", "fe80::1", "0.0.0.0"] {
            let e = mcast_sockaddr(bad.parse().unwrap()).unwrap_err();
            assert!(
                matches!(&e, Error::InvalidArgument(m) if m.contains("not a multicast")),
                "{bad}: {e}"
            );
        }
        let ss = mcast_sockaddr("239.9.8.7".parse().unwrap()).unwrap();
        // SAFETY: written as a `sockaddr_in`.
        let sin: libc::sockaddr_in =
            unsafe { ptr::read((&ss as *const libc::sockaddr_storage).cast()) };
        assert_eq!(sin.sin_addr.s_addr.to_ne_bytes(), [239, 9, 8, 7]);
    }
}

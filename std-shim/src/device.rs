//! Devices, contexts, ports and GIDs.

use std::fmt;
use std::net::Ipv6Addr;
use std::sync::Arc;

use crate::backend::{BackendChoice, BackendRequest, DirectSupport};
use crate::cq::CqBuilder;
use crate::error::{Error, Result};
use crate::ffi::load::LoadError;
use crate::pd::Pd;
use crate::provider::ContextProvider;
#[cfg(feature = "sim")]
use crate::provider::sim;
use crate::provider::verbs::{self, DeviceList};

/// The name of the software mlx5 device (feature `sim`), listed last by [`devices`]. It is
/// opened only when asked for by this name, through [`open_device`] or [`DEVICE_ENV`]: never
/// in place of a missing NIC.
pub const SOFTWARE_DEVICE: &str = "zverbs_sim0";

/// The environment variable naming the device [`open_device`] opens when the caller names
/// none (`ZVERBS_DEVICE=mlx5_1`, `ZVERBS_DEVICE=zverbs_sim0`).
pub const DEVICE_ENV: &str = "ZVERBS_DEVICE";

/// An RDMA device that can be opened.
#[derive(Clone, Debug)]
pub struct Device {
    name: String,
    guid: u64,
    kind: DeviceKind,
}

#[derive(Clone, Debug)]
enum DeviceKind {
    /// A device found by libibverbs: index into a device list kept alive by the `Arc`.
    Verbs { list: Arc<DeviceList>, index: usize },
    /// The software mlx5 device of this process.
    #[cfg(feature = "sim")]
    Sim,
}

impl Device {
    /// The device's name (`mlx5_0`, `rxe0`, ...).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this is the software mlx5 device (which exists in this process only: both
    /// ends of its connections must be here too).
    pub fn is_software(&self) -> bool {
        match self.kind {
            DeviceKind::Verbs { .. } => false,
            #[cfg(feature = "sim")]
            DeviceKind::Sim => true,
        }
    }

    /// The node GUID (host order).
    pub fn guid(&self) -> u64 {
        self.guid
    }

    /// Opens the device with default options (backend from `ZVERBS_BACKEND`, else automatic).
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from `ibv_open_device`; [`Error::InvalidArgument`] for a bad
    /// `ZVERBS_BACKEND`.
    pub fn open(&self) -> Result<Context> {
        self.open_with(&ContextOptions::default())
    }

    /// Opens the device.
    ///
    /// # Errors
    ///
    /// As [`Device::open`].
    pub fn open_with(&self, options: &ContextOptions) -> Result<Context> {
        let choice = BackendChoice::resolve(options.backend)?;
        let provider: Box<dyn ContextProvider> = match &self.kind {
            DeviceKind::Verbs { list, index } => Box::new(verbs::open(list, *index)?),
            #[cfg(feature = "sim")]
            DeviceKind::Sim => Box::new(sim::open()),
        };
        Ok(Context::from_provider(provider, choice))
    }
}

/// Every RDMA device on this machine, in libibverbs' order, then (with the `sim` feature, on
/// by default) the software mlx5 device [`SOFTWARE_DEVICE`], which is always there.
///
/// Without rdma-core installed, the list holds the software device only; opening a real device
/// by name then fails with [`Error::Library`], naming the package to install.
///
/// # Errors
///
/// [`Error::Verbs`] from `ibv_get_device_list`.
pub fn devices() -> Result<Vec<Device>> {
    Ok(list()?.0)
}

/// The devices, and why libibverbs could not be loaded if it could not.
fn list() -> Result<(Vec<Device>, Option<LoadError>)> {
    #[allow(unused_mut)] // pushed to with the `sim` feature only
    let (mut all, missing) = match DeviceList::get() {
        Ok(list) => {
            let list = Arc::new(list);
            let real = (0..list.len())
                .map(|index| Device {
                    name: list.name(index),
                    guid: list.guid(index),
                    kind: DeviceKind::Verbs {
                        list: list.clone(),
                        index,
                    },
                })
                .collect();
            (real, None)
        }
        Err(Error::Library(e)) => (Vec::new(), Some(e)),
        Err(e) => return Err(e),
    };
    #[cfg(feature = "sim")]
    all.push(Device {
        name: SOFTWARE_DEVICE.to_string(),
        guid: sim::GUID,
        kind: DeviceKind::Sim,
    });
    Ok((all, missing))
}

/// Opens a device: the one called `name`; when `name` is `None`, the one [`DEVICE_ENV`]
/// (`ZVERBS_DEVICE`) names; when that is unset too, the first NIC.
///
/// The software device ([`SOFTWARE_DEVICE`]) is opened only by its name, given here or in
/// `ZVERBS_DEVICE`: a machine without a NIC gets [`Error::NoDevice`], never the simulator in
/// a NIC's place. The error says what is missing (rdma-core's library and its package, or a
/// device) and how to ask for the software device.
///
/// # Errors
///
/// [`Error::NoDevice`] when no name is given and there is no NIC; [`Error::Library`] for a
/// device name other than the software device's when rdma-core is not installed;
/// [`Error::DeviceNotFound`] when no device has that name; [`Error::InvalidArgument`] when
/// `ZVERBS_DEVICE` is not UTF-8; and the errors of [`devices`] and [`Device::open_with`].
pub fn open_device(name: Option<&str>, options: &ContextOptions) -> Result<Context> {
    let env = crate::env::var(DEVICE_ENV)?;
    open_device_env(name, env.as_deref(), options)
}

/// [`open_device`] with `ZVERBS_DEVICE`'s value given.
fn open_device_env(
    name: Option<&str>,
    env: Option<&str>,
    options: &ContextOptions,
) -> Result<Context> {
    let (all, missing) = list()?;
    let listed: Vec<(&str, bool)> = all.iter().map(|d| (d.name(), d.is_software())).collect();
    let i = choose(name, env, &listed, missing)?;
    all[i].open_with(options)
}

/// Which of the `listed` devices (name, whether software) [`open_device`] opens: its index.
/// `missing` is why libibverbs could not be loaded, if it could not.
fn choose(
    name: Option<&str>,
    env: Option<&str>,
    listed: &[(&str, bool)],
    missing: Option<LoadError>,
) -> Result<usize> {
    let wanted = match name.or(env.filter(|v| !v.is_empty())) {
        Some(n) => n,
        None => {
            return listed
                .iter()
                .position(|&(_, software)| !software)
                .ok_or_else(|| no_device(missing));
        }
    };
    if let Some(i) = listed.iter().position(|&(n, _)| n == wanted) {
        return Ok(i);
    }
    match missing {
        Some(e) if wanted != SOFTWARE_DEVICE => Err(Error::Library(e)),
        _ => Err(Error::DeviceNotFound {
            name: wanted.to_string(),
            available: listed.iter().map(|&(n, _)| n.to_string()).collect(),
        }),
    }
}

/// The error for "no device named, and no NIC": what is missing, and how to ask for the
/// software device instead.
fn no_device(missing: Option<LoadError>) -> Error {
    let software = if cfg!(feature = "sim") {
        format!(
            "to run on the software mlx5 device instead, ask for it by name: \
             {DEVICE_ENV}={SOFTWARE_DEVICE}, or open_device(Some(\"{SOFTWARE_DEVICE}\"), ..)"
        )
    } else {
        format!(
            "the software mlx5 device ({SOFTWARE_DEVICE}) is left out of this build (feature \
             `sim` of zverbs)"
        )
    };
    let hint = match &missing {
        Some(_) => software,
        None => format!("{}; {software}", verbs::no_device_hint()),
    };
    Error::NoDevice {
        library: missing,
        hint: Some(hint),
    }
}

/// How to open a device.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    /// The backend for this context's queues unless a builder says otherwise; `None` reads
    /// `ZVERBS_BACKEND`, then chooses automatically.
    pub backend: Option<BackendRequest>,
}

impl ContextOptions {
    /// Options with the backend set.
    pub fn backend(mut self, backend: BackendRequest) -> Self {
        self.backend = Some(backend);
        self
    }
}

/// An open device. Cloning is cheap (a reference count); the device is closed when the last
/// clone and every object made from it are gone.
///
/// # Example
///
/// Open the software device (no NIC needed), find where it is, and make the objects of a
/// connection:
///
/// ```
/// # #[cfg(feature = "sim")] {
/// # fn main() -> zverbs::Result<()> {
/// use zverbs::{AccessFlags, ContextOptions};
///
/// let ctx = zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default())?;
/// assert_eq!(ctx.name(), "zverbs_sim0");
/// let port = ctx.active_port()?; // the first port in the ACTIVE state
/// let local = ctx.address(port, None)?; // what a peer needs to reach this port: LID, GID
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.cq_builder().cqe(256).build()?;
/// assert!(cq.cqe() >= 256);
/// let buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
/// println!("{} port {port}: LID {}, GID {}, {} bytes registered", ctx.name(), local.lid, local.gid, buf.len());
/// # Ok(()) }
/// # main().unwrap(); }
/// ```
#[derive(Clone, Debug)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

#[derive(Debug)]
pub(crate) struct ContextInner {
    pub(crate) provider: Box<dyn ContextProvider>,
    pub(crate) choice: BackendChoice,
}

impl Context {
    pub(crate) fn from_provider(provider: Box<dyn ContextProvider>, choice: BackendChoice) -> Self {
        Self {
            inner: Arc::new(ContextInner { provider, choice }),
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        self.inner.provider.name()
    }

    /// Control of the software device ([`SOFTWARE_DEVICE`]) this context is open on: stepping
    /// it by hand, faults on demand, its idle behaviour. `None` on any other device.
    #[cfg(feature = "sim")]
    pub fn sim(&self) -> Option<crate::SimControl<'_>> {
        self.inner
            .provider
            .is_sim()
            .then(crate::provider::sim::SimControl::new)
    }

    /// The backend this context's queues get unless their builder says otherwise.
    pub fn backend_choice(&self) -> BackendChoice {
        self.inner.choice
    }

    /// Whether the direct backend can drive this device, and why (or why not).
    pub fn direct_support(&self) -> std::result::Result<String, String> {
        match self.inner.provider.direct_support() {
            DirectSupport::Yes(s) => Ok(s),
            DirectSupport::No(s) => Err(s),
        }
    }

    /// Whether the device's 8-byte atomics (compare-and-swap, fetch-and-add) treat the remote
    /// value, and the original value they return, as big-endian rather than in host order:
    /// true only for a Mellanox/NVIDIA HCA whose driver could not set it to host endianness
    /// (it then reports `atomic_cap` `IBV_ATOMIC_NONE`). rxe, ConnectX-4 and later under the
    /// mlx5 driver, and the software device use host order. Convert with
    /// `u64::from_be`/`to_be` when this is true.
    pub fn atomics_big_endian(&self) -> bool {
        self.inner.provider.atomics_big_endian()
    }

    /// Device attributes (`ibv_query_device`).
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`].
    pub fn attr(&self) -> Result<DeviceAttr> {
        self.inner.provider.query_device()
    }

    /// Port attributes (`ibv_query_port`); ports count from 1.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`].
    pub fn port(&self, port: u8) -> Result<PortAttr> {
        self.inner.provider.query_port(port)
    }

    /// One GID table entry with its type (`ibv_query_gid_ex`).
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`].
    pub fn gid(&self, port: u8, index: u32) -> Result<GidEntry> {
        self.inner.provider.query_gid(port, index)
    }

    /// The non-empty entries of a port's GID table.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`] from the port query.
    pub fn gids(&self, port: u8) -> Result<Vec<GidEntry>> {
        let attr = self.port(port)?;
        Ok((0..attr.gid_tbl_len)
            .filter_map(|i| self.gid(port, i).ok())
            .filter(|e| !e.gid.is_zero())
            .collect())
    }

    /// The first port in the ACTIVE state.
    ///
    /// # Errors
    ///
    /// [`Error::NoActivePort`] listing every port's state.
    pub fn active_port(&self) -> Result<u8> {
        let n = self.attr()?.phys_port_cnt.max(1);
        let mut ports = Vec::new();
        for p in 1..=n {
            let a = self.port(p)?;
            if a.state == PortState::Active {
                return Ok(p);
            }
            ports.push((p, a.state));
        }
        Err(Error::NoActivePort {
            device: self.name().to_string(),
            ports,
        })
    }

    /// This side's address on `port` for connecting a QP: its LID and, when `gid_index` is
    /// given or the link is Ethernet (RoCE), a GID. Without an index, RoCE picks the first
    /// RoCE v2 GID holding an IPv4 address, else the first RoCE v2 GID, else the first GID.
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`]; [`Error::InvalidArgument`] when a RoCE port has no usable GID.
    pub fn address(&self, port: u8, gid_index: Option<u32>) -> Result<LocalAddress> {
        let attr = self.port(port)?;
        let entry = match gid_index {
            Some(i) => Some(self.gid(port, i)?),
            None if attr.link_layer == LinkLayer::Ethernet => {
                let gids = self.gids(port)?;
                let pick = gids
                    .iter()
                    .find(|e| e.gid_type == GidType::RoceV2 && e.gid.to_ipv4().is_some())
                    .or_else(|| gids.iter().find(|e| e.gid_type == GidType::RoceV2))
                    .or_else(|| gids.first())
                    .copied();
                Some(pick.ok_or_else(|| {
                    Error::InvalidArgument(format!(
                        "port {port} of {} is Ethernet (RoCE) but has no GID; give the \
                         interface an IP address",
                        self.name()
                    ))
                })?)
            }
            None => None,
        };
        Ok(LocalAddress {
            port,
            lid: attr.lid,
            gid: entry.map(|e| e.gid).unwrap_or_default(),
            gid_index: entry.map(|e| e.index),
            link_layer: attr.link_layer,
            active_mtu: attr.active_mtu,
        })
    }

    /// A protection domain (`ibv_alloc_pd`).
    ///
    /// # Errors
    ///
    /// [`Error::Verbs`].
    pub fn alloc_pd(&self) -> Result<Pd> {
        Pd::new(self)
    }

    /// A builder for a completion queue.
    pub fn cq_builder(&self) -> CqBuilder<'_> {
        CqBuilder::new(self)
    }
}

/// Where this side of a connection is: what the peer needs to reach it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalAddress {
    /// The port.
    pub port: u8,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// The GID (zero when unused on InfiniBand).
    pub gid: Gid,
    /// The GID's index in the port's table, when a GID is used.
    pub gid_index: Option<u32>,
    /// The link layer.
    pub link_layer: LinkLayer,
    /// The port's active MTU.
    pub active_mtu: Mtu,
}

/// A 16-byte global identifier (an IPv6 address in form).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// Whether every byte is zero (an unused table entry).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The interface identifier (bytes 8..16) as a big-endian number; `ibv_rc_pingpong` uses a
    /// GRH exactly when it is non-zero.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().unwrap_or([0; 8]))
    }

    /// The IPv4 address of an IPv4-mapped GID (`::ffff:a.b.c.d`), as RoCE v2 uses.
    pub fn to_ipv4(&self) -> Option<std::net::Ipv4Addr> {
        Ipv6Addr::from(self.0).to_ipv4_mapped()
    }
}

impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ipv6Addr::from(self.0).fmt(f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

/// The kind of a GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GidType {
    /// InfiniBand.
    Ib,
    /// RoCE v1 (Ethernet, not routable).
    RoceV1,
    /// RoCE v2 (UDP/IP, routable).
    RoceV2,
    /// A value this crate does not know.
    Unknown(u32),
}

impl GidType {
    pub(crate) fn from_raw(raw: u32) -> Self {
        match raw {
            0 => GidType::Ib,
            1 => GidType::RoceV1,
            2 => GidType::RoceV2,
            x => GidType::Unknown(x),
        }
    }
}

/// A GID table entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the table.
    pub index: u32,
    /// The port.
    pub port: u8,
    /// Its type.
    pub gid_type: GidType,
}

/// A port's logical state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PortState {
    /// No link.
    Down,
    /// Link up, not configured by the subnet manager.
    Init,
    /// Configured, not yet active.
    Armed,
    /// Ready.
    Active,
    /// Active, deferring.
    ActiveDefer,
    /// No state change.
    Nop,
    /// A value this crate does not know.
    Unknown(u32),
}

impl PortState {
    pub(crate) fn from_raw(raw: u32) -> Self {
        match raw {
            0 => PortState::Nop,
            1 => PortState::Down,
            2 => PortState::Init,
            3 => PortState::Armed,
            4 => PortState::Active,
            5 => PortState::ActiveDefer,
            x => PortState::Unknown(x),
        }
    }
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PortState::Down => f.write_str("DOWN"),
            PortState::Init => f.write_str("INIT"),
            PortState::Armed => f.write_str("ARMED"),
            PortState::Active => f.write_str("ACTIVE"),
            PortState::ActiveDefer => f.write_str("ACTIVE_DEFER"),
            PortState::Nop => f.write_str("NOP"),
            PortState::Unknown(x) => write!(f, "state {x}"),
        }
    }
}

/// A port's link layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LinkLayer {
    /// InfiniBand: LIDs route.
    InfiniBand,
    /// Ethernet (RoCE): GIDs route; LIDs are 0.
    Ethernet,
    /// Not reported (older providers: treat as InfiniBand).
    Unspecified,
}

/// A path MTU, as `enum ibv_mtu`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    M256 = 1,
    /// 512 bytes.
    M512 = 2,
    /// 1024 bytes (`ibv_rc_pingpong`'s default).
    #[default]
    M1024 = 3,
    /// 2048 bytes.
    M2048 = 4,
    /// 4096 bytes.
    M4096 = 5,
}

impl Mtu {
    /// The MTU for `ibv_mtu` number `raw`, if valid.
    pub fn from_raw(raw: u32) -> Option<Self> {
        Some(match raw {
            1 => Mtu::M256,
            2 => Mtu::M512,
            3 => Mtu::M1024,
            4 => Mtu::M2048,
            5 => Mtu::M4096,
            _ => return None,
        })
    }

    /// The MTU of `bytes` bytes, if it is one of the five.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        Self::from_raw(match bytes {
            256 => 1,
            512 => 2,
            1024 => 3,
            2048 => 4,
            4096 => 5,
            _ => 0,
        })
    }

    /// Bytes.
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

/// A port's attributes (the part of `ibv_port_attr` that connection set-up uses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Subnet manager's LID.
    pub sm_lid: u16,
    /// GID table size.
    pub gid_tbl_len: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Link layer.
    pub link_layer: LinkLayer,
}

/// Device attributes (the part of `ibv_device_attr` applications use to size queues).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: String,
    /// Node GUID (host order).
    pub node_guid: u64,
    /// PCI vendor ID (0x02c9 and 0x15b3: Mellanox/NVIDIA).
    pub vendor_id: u32,
    /// PCI part ID.
    pub vendor_part_id: u32,
    /// Largest memory region.
    pub max_mr_size: u64,
    /// Most QPs.
    pub max_qp: u32,
    /// Most work requests per queue.
    pub max_qp_wr: u32,
    /// Most scatter entries per request.
    pub max_sge: u32,
    /// Most CQs.
    pub max_cq: u32,
    /// Most entries per CQ.
    pub max_cqe: u32,
    /// Most outstanding READ/atomic requests a QP can answer.
    pub max_qp_rd_atom: u32,
    /// Most outstanding READ/atomic requests a QP can issue.
    pub max_qp_init_rd_atom: u32,
    /// Atomic support (0 none, 1 within the HCA, 2 global).
    pub atomic_cap: u32,
    /// Number of ports.
    pub phys_port_cnt: u8,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_views() {
        let mut g = Gid::default();
        assert!(g.is_zero());
        g.0[10] = 0xff;
        g.0[11] = 0xff;
        g.0[12..].copy_from_slice(&[10, 0, 0, 7]);
        assert_eq!(g.to_ipv4(), Some(std::net::Ipv4Addr::new(10, 0, 0, 7)));
        assert_eq!(g.to_string(), "::ffff:10.0.0.7");
        assert_eq!(g.interface_id(), 0x0000_ffff_0a00_0007);
    }

    fn libibverbs_missing() -> LoadError {
        LoadError {
            library: "libibverbs.so.1",
            package: "libibverbs1",
            detail: "libibverbs.so.1: cannot open shared object file".into(),
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "loads libibverbs: Miri calls no C library")]
    fn without_a_nic_nothing_named_is_an_error_not_the_software_device() {
        let sim = [(SOFTWARE_DEVICE, true)];
        // rdma-core present, no device.
        let e = choose(None, None, &sim, None).unwrap_err();
        assert!(matches!(e, Error::NoDevice { library: None, .. }), "{e}");
        let text = e.to_string();
        assert!(text.starts_with("no RDMA device"), "{text}");
        if cfg!(feature = "sim") {
            assert!(text.contains("ZVERBS_DEVICE=zverbs_sim0"), "{text}");
            assert!(text.contains("open_device(Some(\"zverbs_sim0\")"), "{text}");
        } else {
            assert!(text.contains("feature"), "{text}");
        }
        // rdma-core missing: the package is named, and the way to the software device.
        let e = choose(None, None, &sim, Some(libibverbs_missing())).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NoDevice {
                    library: Some(_),
                    ..
                }
            ),
            "{e}"
        );
        let text = e.to_string();
        assert!(
            text.contains("`libibverbs1`") && text.contains("rdma-core"),
            "{text}"
        );
        if cfg!(feature = "sim") {
            assert!(text.contains("ZVERBS_DEVICE=zverbs_sim0"), "{text}");
        }
        assert!(std::error::Error::source(&e).is_some());
        // An empty ZVERBS_DEVICE is unset.
        let e = choose(None, Some(""), &sim, None).unwrap_err();
        assert!(matches!(e, Error::NoDevice { .. }), "{e}");
    }

    #[test]
    fn the_software_device_is_opened_by_name_or_by_the_environment() {
        let listed = [
            ("mlx5_0", false),
            ("mlx5_1", false),
            (SOFTWARE_DEVICE, true),
        ];
        assert_eq!(choose(None, None, &listed, None).unwrap(), 0);
        assert_eq!(choose(None, Some("zverbs_sim0"), &listed, None).unwrap(), 2);
        assert_eq!(choose(Some("zverbs_sim0"), None, &listed, None).unwrap(), 2);
        assert_eq!(choose(None, Some("mlx5_1"), &listed, None).unwrap(), 1);
        // The caller's name wins over the environment's.
        assert_eq!(
            choose(Some("mlx5_0"), Some("mlx5_1"), &listed, None).unwrap(),
            0
        );
        let sim = [(SOFTWARE_DEVICE, true)];
        assert_eq!(
            choose(
                None,
                Some(SOFTWARE_DEVICE),
                &sim,
                Some(libibverbs_missing())
            )
            .unwrap(),
            0
        );
        // A NIC named without rdma-core: the package to install.
        match choose(Some("mlx5_0"), None, &sim, Some(libibverbs_missing())) {
            Err(Error::Library(e)) => assert_eq!(e.package, "libibverbs1"),
            other => panic!("{other:?}"),
        }
        match choose(None, Some("rxe9"), &listed, None) {
            Err(Error::DeviceNotFound { name, available }) => {
                assert_eq!(name, "rxe9");
                assert_eq!(available, ["mlx5_0", "mlx5_1", "zverbs_sim0"]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    #[cfg_attr(miri, ignore = "loads libibverbs: Miri calls no C library")]
    fn open_device_on_this_machine_never_substitutes_the_software_device() {
        // Whatever this machine has: a NIC opens, and no NIC is the typed error.
        match open_device_env(None, None, &ContextOptions::default()) {
            Ok(ctx) => assert_ne!(ctx.name(), SOFTWARE_DEVICE),
            Err(Error::NoDevice { hint, .. }) => {
                assert!(hint.is_some_and(|h| h.contains(SOFTWARE_DEVICE)))
            }
            Err(e) => panic!("unexpected {e}"),
        }
        #[cfg(feature = "sim")]
        {
            let ctx =
                open_device_env(None, Some(SOFTWARE_DEVICE), &ContextOptions::default()).unwrap();
            assert_eq!(ctx.name(), SOFTWARE_DEVICE);
        }
    }

    #[test]
    fn mtu_numbers() {
        assert_eq!(Mtu::M1024.bytes(), 1024);
        assert_eq!(Mtu::M4096.bytes(), 4096);
        assert_eq!(Mtu::from_bytes(2048), Some(Mtu::M2048));
        assert_eq!(Mtu::from_raw(6), None);
        assert_eq!(PortState::from_raw(4), PortState::Active);
        assert_eq!(PortState::from_raw(1).to_string(), "DOWN");
    }
}

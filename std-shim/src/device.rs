//! Devices, contexts, ports and GIDs.

use std::sync::Arc;

use crate::backend::{BackendChoice, BackendRequest, DirectSupport};
use crate::error::{Error, Result};
use crate::provider::ContextProvider;
#[cfg(feature = "sim")]
use crate::provider::sim;
use crate::provider::verbs::{self, DeviceList};
use crate::types::device::{
    DeviceAttr, GidEntry, GidType, LinkLayer, LocalAddress, PortAttr, PortState, SOFTWARE_DEVICE,
};
use zverbs_ffi::load::LoadError;

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
/// use zverbs::{AccessFlags, ContextOptions, Registered};
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
    pub fn sim(&self) -> Option<crate::provider::sim::SimControl<'_>> {
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
}

/// Raw Ethernet: what the device does with raw packets, and the checks before a raw packet
/// object is created.
impl Context {
    /// What the device does with raw packets on `port`: checksum offload, flow steering.
    ///
    /// # Errors
    ///
    /// [`Error::NoRawPacket`] for a device without raw packet QPs (rxe, siw) or a port whose
    /// link layer is not Ethernet; [`Error::Verbs`] from the queries.
    pub fn raw_caps(&self, port: u8) -> Result<crate::types::eth::RawCaps> {
        Ok(self.inner.provider.raw_support(port)?.caps)
    }

    /// The checks before a raw packet object is created on `port`: the device has raw packet
    /// QPs there, and the calling thread has `CAP_NET_RAW` where the kernel asks for it
    /// (`verb` names what would be created).
    pub(crate) fn raw_ready(
        &self,
        port: u8,
        verb: &'static str,
    ) -> Result<crate::provider::RawSupport> {
        let support = self.inner.provider.raw_support(port)?;
        if support.needs_cap_net_raw && crate::types::eth::has_cap_net_raw() == Some(false) {
            return Err(Error::NeedsCapNetRaw { verb });
        }
        Ok(support)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

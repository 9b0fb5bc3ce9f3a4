//! The RDMA devices that device tests and interop checks run on, and the environment variables
//! that name them to the tests.
//!
//! Inside the VM the topology is fixed: `rxe0` on a dummy interface (both ends of a connection
//! on one device) and `rxe1`/`rxe2` on the two ends of a veth pair (packets cross a link). The
//! guest's init script builds exactly what [`Topology::vm`] describes, reading the same
//! variables. On a host with real devices (rxe or a ConnectX), the variables are set by the
//! user and read by [`Topology::from_env`].

use crate::util::{Result, bail};

/// The single device: both ends of a connection on it (`rxe0`, `mlx5_0`).
pub const DEVICE: &str = "ZVERBS_TEST_DEVICE";
/// The IPv4 address of [`DEVICE`]'s network interface, for rdma_cm (optional).
pub const ADDR: &str = "ZVERBS_TEST_ADDR";
/// Two devices linked to each other, `a,b` (optional).
pub const PAIR: &str = "ZVERBS_TEST_PAIR";
/// The IPv4 addresses of [`PAIR`]'s interfaces, `a,b` (optional).
pub const PAIR_ADDRS: &str = "ZVERBS_TEST_PAIR_ADDRS";
/// The GID index to address ports with (RoCE: the IPv4-mapped GID; rxe: 1).
pub const GID_INDEX: &str = "ZVERBS_TEST_GID_INDEX";

/// The devices checks and device tests use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    /// One device, for tests with both ends on it.
    pub device: String,
    /// The IPv4 address of its interface (rdma_cm), if known.
    pub addr: Option<String>,
    /// Two linked devices, if any.
    pub pair: Option<(String, String)>,
    /// Their IPv4 addresses, if known.
    pub pair_addrs: Option<(String, String)>,
    /// The GID index of the ports' IPv4 (RoCE v2) GIDs.
    pub gid_index: u32,
}

impl Topology {
    /// What the VM's init script builds. The addresses are in 198.18.0.0/15, the range set
    /// aside for benchmarking (RFC 2544); they exist only inside the guest, which has no
    /// network card.
    pub fn vm() -> Self {
        Self {
            device: "rxe0".into(),
            addr: Some("198.18.0.1".into()),
            pair: Some(("rxe1".into(), "rxe2".into())),
            pair_addrs: Some(("198.18.1.1".into(), "198.18.1.2".into())),
            gid_index: 1,
        }
    }

    /// Read from the variables, for a host with real devices. [`DEVICE`] is required; the
    /// GID index defaults to 1.
    pub fn from_env() -> Result<Self> {
        Self::from_vars(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// Read through `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let Some(device) = var(DEVICE) else {
            bail!(
                "{DEVICE} is not set: name the device to test on (e.g. {DEVICE}=rxe0 or \
                 mlx5_0), and optionally {ADDR}, {PAIR}=a,b, {PAIR_ADDRS}=a,b and {GID_INDEX} \
                 (docs/testing.md)"
            );
        };
        let two = |name: &str| -> Result<Option<(String, String)>> {
            match var(name) {
                None => Ok(None),
                Some(v) => match v.split_once(',') {
                    Some((a, b)) if !a.is_empty() && !b.is_empty() && !b.contains(',') => {
                        Ok(Some((a.to_string(), b.to_string())))
                    }
                    _ => bail!("{name}={v:?}: expected two names separated by a comma"),
                },
            }
        };
        let gid_index = match var(GID_INDEX) {
            None => 1,
            Some(v) => match v.parse() {
                Ok(i) => i,
                Err(_) => bail!("{GID_INDEX}={v:?}: not a number"),
            },
        };
        Ok(Self {
            device,
            addr: var(ADDR),
            pair: two(PAIR)?,
            pair_addrs: two(PAIR_ADDRS)?,
            gid_index,
        })
    }

    /// The variables that describe this topology, for the processes of checks and tests.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut env = vec![
            (DEVICE.to_string(), self.device.clone()),
            (GID_INDEX.to_string(), self.gid_index.to_string()),
        ];
        if let Some(a) = &self.addr {
            env.push((ADDR.into(), a.clone()));
        }
        if let Some((a, b)) = &self.pair {
            env.push((PAIR.into(), format!("{a},{b}")));
        }
        if let Some((a, b)) = &self.pair_addrs {
            env.push((PAIR_ADDRS.into(), format!("{a},{b}")));
        }
        env
    }

    /// Every device named.
    pub fn devices(&self) -> Vec<&str> {
        let mut d = vec![self.device.as_str()];
        if let Some((a, b)) = &self.pair {
            d.push(a);
            d.push(b);
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_vm_topology_round_trips_through_its_variables() {
        let vm = Topology::vm();
        let env = vm.env();
        let var = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(Topology::from_vars(var).unwrap(), vm);
        assert_eq!(vm.devices(), ["rxe0", "rxe1", "rxe2"]);
    }

    #[test]
    fn a_host_needs_only_a_device() {
        let t = Topology::from_vars(|k| (k == DEVICE).then(|| "mlx5_0".to_string())).unwrap();
        assert_eq!(t.device, "mlx5_0");
        assert_eq!((t.addr, t.pair, t.gid_index), (None, None, 1));
        let e = Topology::from_vars(|_| None).unwrap_err();
        assert!(e.to_string().contains(DEVICE), "{e}");
        let bad = Topology::from_vars(|k| match k {
            DEVICE => Some("rxe0".into()),
            PAIR => Some("rxe1".into()),
            _ => None,
        });
        assert!(bad.unwrap_err().to_string().contains(PAIR));
    }
}

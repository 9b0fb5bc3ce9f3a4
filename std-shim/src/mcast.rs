//! Multicast joins: a [`McastMembership`] is a kernel UDP socket that joined an IPv4 group on
//! an interface (`IP_ADD_MEMBERSHIP`), so that the kernel answers IGMP queries for it and the
//! switches forward the group's traffic to the port, as NVIDIA's VMA does for its raw packet
//! queues. The frames themselves reach a raw packet or RSS QP through a flow rule
//! ([`FlowRule::multicast`](crate::FlowRule::multicast)); the socket receives nothing the
//! application reads. Dropping it leaves the group (`IP_DROP_MEMBERSHIP`, and the close).

use std::ffi::CString;
use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use crate::device::Context;
use crate::error::{Error, Result};

/// Membership of an IPv4 multicast group on one interface, held while this value lives.
#[derive(Debug)]
pub struct McastMembership {
    sock: OwnedFd,
    group: Ipv4Addr,
    ifindex: u32,
    interface: String,
}

impl McastMembership {
    /// Joins `group` on the interface named `interface` (`eth0`, a veth end, ...).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] for an address that is not multicast or an interface that
    /// does not exist; [`Error::McastJoin`] when the kernel refuses the join.
    pub fn join(group: Ipv4Addr, interface: &str) -> Result<Self> {
        if !group.is_multicast() {
            return Err(Error::InvalidArgument(format!(
                "{group} is not an IPv4 multicast address (224.0.0.0/4)"
            )));
        }
        let name = CString::new(interface).map_err(|_| {
            Error::InvalidArgument(format!("interface name {interface:?} contains a NUL byte"))
        })?;
        // SAFETY: a NUL-terminated name.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if ifindex == 0 {
            return Err(Error::InvalidArgument(format!(
                "no network interface named {interface:?}"
            )));
        }
        let fail = |source: io::Error| Error::McastJoin {
            group,
            interface: interface.to_string(),
            source,
        };
        // SAFETY: plain socket creation.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(fail(io::Error::last_os_error()));
        }
        // SAFETY: a descriptor just created, owned by nothing else.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        let m = Self {
            sock,
            group,
            ifindex,
            interface: interface.to_string(),
        };
        m.membership(libc::IP_ADD_MEMBERSHIP).map_err(fail)?;
        Ok(m)
    }

    /// `IP_ADD_MEMBERSHIP` or `IP_DROP_MEMBERSHIP` of the group on the interface.
    fn membership(&self, op: i32) -> io::Result<()> {
        let mreq = libc::ip_mreqn {
            imr_multiaddr: libc::in_addr {
                s_addr: u32::from_ne_bytes(self.group.octets()),
            },
            imr_address: libc::in_addr { s_addr: 0 },
            imr_ifindex: self.ifindex as i32,
        };
        // SAFETY: a live socket and a valid option of the size given.
        let ret = unsafe {
            libc::setsockopt(
                self.sock.as_raw_fd(),
                libc::IPPROTO_IP,
                op,
                (&raw const mreq).cast(),
                size_of::<libc::ip_mreqn>() as libc::socklen_t,
            )
        };
        if ret != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The group.
    pub fn group(&self) -> Ipv4Addr {
        self.group
    }

    /// The interface it was joined on.
    pub fn interface(&self) -> &str {
        &self.interface
    }
}

impl Drop for McastMembership {
    fn drop(&mut self) {
        // Closing the socket leaves the group too; leaving first says so at once.
        let _ = self.membership(libc::IP_DROP_MEMBERSHIP);
    }
}

impl Context {
    /// The Linux network interfaces of the device (`/sys/class/infiniband/<device>/device/net`,
    /// under `SYSFS_PATH` when set, as libibverbs reads it): a ConnectX's Ethernet port's
    /// netdev, the emulated ConnectX's. Empty for a device without one (the software device).
    pub fn netdevs(&self) -> Vec<String> {
        let root =
            std::env::var_os("SYSFS_PATH").map_or_else(|| PathBuf::from("/sys"), PathBuf::from);
        let dir = root
            .join("class/infiniband")
            .join(self.name())
            .join("device/net");
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        names
    }

    /// Joins `group` on `interface`, or when none is given on the device's network interface
    /// ([`Context::netdevs`]; the software device has none: name one).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidArgument`] when no interface is given and the device has none (or
    /// several); as [`McastMembership::join`].
    pub fn join_multicast(
        &self,
        group: Ipv4Addr,
        interface: Option<&str>,
    ) -> Result<McastMembership> {
        match interface {
            Some(i) => McastMembership::join(group, i),
            None => match self.netdevs().as_slice() {
                [one] => McastMembership::join(group, one),
                [] => Err(Error::InvalidArgument(format!(
                    "device `{}` has no network interface to join {group} on: name one",
                    self.name()
                ))),
                many => Err(Error::InvalidArgument(format!(
                    "device `{}` has several network interfaces ({}): name the one to join {group} on",
                    self.name(),
                    many.join(", ")
                ))),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A join on the loopback interface holds the group while the value lives: the kernel
    /// lists it in `/proc/net/igmp` under `lo`, and not after the drop. Not a multicast
    /// address, or no such interface: typed errors before the kernel is asked.
    #[test]
    #[cfg_attr(miri, ignore = "sockets")]
    fn a_join_holds_the_group_until_dropped() {
        let group = Ipv4Addr::new(239, 7, 8, 9);
        // /proc/net/igmp lists groups in hexadecimal, in the kernel's (network-order word
        // printed as a host number) order.
        let hex = format!("{:08X}", u32::from_ne_bytes(group.octets()));
        let listed = || {
            std::fs::read_to_string("/proc/net/igmp")
                .map(|t| t.contains(&hex))
                .unwrap_or(false)
        };
        let m = match McastMembership::join(group, "lo") {
            Ok(m) => m,
            // A sandbox without multicast on `lo` (no IGMP in this kernel): nothing to see.
            Err(Error::McastJoin { source, .. }) if source.raw_os_error() == Some(libc::ENODEV) => {
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert_eq!((m.group(), m.interface()), (group, "lo"));
        assert!(listed(), "the group is joined on lo");
        drop(m);
        assert!(!listed(), "the group is left on drop");
        assert!(matches!(
            McastMembership::join(Ipv4Addr::new(10, 0, 0, 1), "lo"),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            McastMembership::join(group, "no-such-if0"),
            Err(Error::InvalidArgument(_))
        ));
    }
}

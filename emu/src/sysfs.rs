//! The fake sysfs tree libibverbs reads to find the emulated device (through `SYSFS_PATH`).
//!
//! rdma-core 44 enumerates devices by netlink and, where that finds none, from sysfs; these
//! are the only files it (and libmlx5) read for `ibv_get_device_list`, `ibv_open_device` and
//! `ibv_query_gid`:
//!
//! | file | content | read by |
//! |---|---|---|
//! | `class/infiniband_verbs/abi_version` | `6` (`IB_USER_VERBS_ABI_VERSION`) | libibverbs |
//! | `class/infiniband_verbs/uverbs0/ibdev` | `mlx5_0` | libibverbs |
//! | `class/infiniband_verbs/uverbs0/dev` | `1:3`: `/dev/null`'s `major:minor`, which the shim opens for the device | libibverbs' `open_cdev` |
//! | `class/infiniband_verbs/uverbs0/abi_version` | `1` (mlx5's ABI) | libibverbs |
//! | `class/infiniband/mlx5_0/node_type` | `1: CA` | libibverbs |
//! | `class/infiniband/mlx5_0/device/modalias` | a ConnectX-6 (`v000015B3d0000101B`), matched against libmlx5's PCI table | libibverbs |
//! | `class/infiniband/mlx5_0/node_guid` | the node GUID, as QUERY_DEVICE reports it | `ibv_get_device_guid` (`ibv_devices`) |
//! | `class/infiniband/mlx5_0/ports/1/gids/0`, `gid_attrs/types/0` | the port's GID and its type | `ibv_query_gid` |
//!
//! | `class/infiniband/mlx5_0/ports/1/pkeys/0` .. `127` | the P_Key table: `0xffff` (the default partition) at index 0, `0x0000` (an empty slot) elsewhere | `ibv_query_pkey` |
//! | `devices/pci0000:00/0000:03:00.0/vendor`, `device` | `0x15b3`, `0x101b`: the PCI function's IDs | UCX (picks its mlx5 transports by them) |
//! | `devices/pci0000:00/0000:03:00.0/current_link_width`, `current_link_speed` | `16`, `16.0 GT/s PCIe`: a ConnectX-6's PCIe 4.0 x16 link | UCX (its bandwidth estimate) |
//!
//! As in the kernel's sysfs, `class/infiniband/mlx5_0` is a symbolic link to the device's
//! directory under its PCI function (`devices/pci0000:00/0000:03:00.0/infiniband/mlx5_0`,
//! whose `device` links back to the function): a program that resolves the class entry finds
//! the function's directory two levels up, with its `device` file, as UCX does.
//!
//! The GID file holds the node GUID's link-local GID, but a process with the shim loaded and
//! its device instance created reads its own port's GID there instead (the link-local prefix
//! and a port GUID ending in the instance's LID, [`zverbs_sim::Device::gid`]): each process is
//! another port on the fabric, and a datagram with a GRH reaches a port only when its DGID is
//! that port's GID, as on InfiniBand.

use std::io;
use std::path::Path;

use crate::device::{ETH_NODE_GUID, NODE_GUID};

/// The file of the port's GID 0, under the tree's root.
pub const GID_FILE: &str = "class/infiniband/mlx5_0/ports/1/gids/0";

/// A GID as sysfs writes it: eight groups of four hex digits.
pub fn gid_text(gid: [u8; 16]) -> String {
    let groups: Vec<String> = gid
        .chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect();
    groups.join(":")
}

/// The device name the tree announces.
pub const IBDEV: &str = "mlx5_0";

/// The PCI function's directory under the tree's root.
pub const PCI_FUNCTION: &str = "devices/pci0000:00/0000:03:00.0";

/// The P_Key table's length (`pkey_tbl_len` of QUERY_PORT), one sysfs file per entry.
pub const PKEY_TABLE_LEN: usize = 128;

/// The symbolic links of the tree: (path under the root, target).
pub fn links() -> Vec<(String, String)> {
    vec![
        (
            format!("class/infiniband/{IBDEV}"),
            format!("../../{PCI_FUNCTION}/infiniband/{IBDEV}"),
        ),
        (
            format!("{PCI_FUNCTION}/infiniband/{IBDEV}/device"),
            "../../../0000:03:00.0".into(),
        ),
    ]
}

/// The files of the tree: (path under the root, content).
pub fn files() -> Vec<(String, String)> {
    let g = NODE_GUID;
    let gid = format!(
        "fe80:0000:0000:0000:{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    );
    let dev = format!("class/infiniband/{IBDEV}");
    let guid = format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        (g >> 48) & 0xffff,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    );
    let pkeys = (0..PKEY_TABLE_LEN).map(|i| {
        let key = if i == 0 { "0xffff" } else { "0x0000" };
        (format!("{dev}/ports/1/pkeys/{i}"), key.to_string())
    });
    let pci = [
        ("vendor", "0x15b3"),
        ("device", "0x101b"),
        ("current_link_width", "16"),
        ("current_link_speed", "16.0 GT/s PCIe"),
    ]
    .map(|(f, v)| (format!("{PCI_FUNCTION}/{f}"), v.to_string()));
    let mut v = base_files(&dev, guid, gid);
    v.extend(pkeys);
    v.extend(pci);
    v
}

/// The files rdma-core reads.
fn base_files(dev: &str, guid: String, gid: String) -> Vec<(String, String)> {
    vec![
        ("class/infiniband_verbs/abi_version".into(), "6".into()),
        ("class/infiniband_verbs/uverbs0/ibdev".into(), IBDEV.into()),
        ("class/infiniband_verbs/uverbs0/dev".into(), "1:3".into()),
        (
            "class/infiniband_verbs/uverbs0/abi_version".into(),
            "1".into(),
        ),
        (format!("{dev}/node_type"), "1: CA".into()),
        (format!("{dev}/node_guid"), guid),
        (
            format!("{dev}/device/modalias"),
            "pci:v000015B3d0000101Bsv000015B3sd00000007bc02sc00i00".into(),
        ),
        (format!("{dev}/ports/1/gids/0"), gid),
        (
            format!("{dev}/ports/1/gid_attrs/types/0"),
            "IB/RoCE v1".into(),
        ),
    ]
}

/// Writes the tree under `root` (replacing any tree there), and the key of its fabric
/// ([`KEY_FILE`](crate::fabric::hello::KEY_FILE)) when it has none: the processes that run
/// with this tree admit one another, and no one else, to their device instances and fault
/// sockets ([`crate::fabric::hello`]). A key already there is kept, so that a tree written
/// again (each `cargo xtask emu`) serves the processes still running with it.
///
/// # Errors
///
/// When a directory or file cannot be written.
pub fn write_tree(root: &Path) -> io::Result<()> {
    crate::fabric::hello::Key::ensure(root)?;
    for top in ["class", "devices"] {
        if root.join(top).exists() {
            std::fs::remove_dir_all(root.join(top))?;
        }
    }
    for (path, target) in links() {
        let p = root.join(path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::os::unix::fs::symlink(target, p)?;
    }
    for (path, content) in files() {
        let p = root.join(path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(p, format!("{content}\n"))?;
    }
    Ok(())
}

/// The Ethernet function's device name: a second PCI function of the same ConnectX-6, whose
/// port 1 has link layer Ethernet (raw packet QPs, flow rules, work queues), beside the
/// InfiniBand `mlx5_0` that RC, UD and DC use.
pub const ETH_IBDEV: &str = "mlx5_1";

/// The Ethernet function's uverbs device (`/dev/infiniband/uverbs1`).
pub const ETH_UVERBS: &str = "uverbs1";

/// The Ethernet function's PCI address and directory under the tree's root.
pub const ETH_PCI_SLOT: &str = "0000:03:00.1";

/// The Ethernet function's directory under the tree's root.
pub const ETH_PCI_FUNCTION: &str = "devices/pci0000:00/0000:03:00.1";

/// The files of the Ethernet function, with `ifname` (the Linux interface its port is, see
/// `docs/ethernet.md`) under the function's `net/` as a ConnectX's netdev is, with
/// `dev_port` 0: what DPDK's mlx5 driver reads to find the port's interface.
pub fn ethernet_files(ifname: Option<&str>) -> Vec<(String, String)> {
    let g = ETH_NODE_GUID;
    let group = |shift: u32| (g >> shift) & 0xffff;
    let guid = format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        group(48),
        group(32),
        group(16),
        group(0)
    );
    let dev = format!("class/infiniband/{ETH_IBDEV}");
    let verbs = format!("class/infiniband_verbs/{ETH_UVERBS}");
    let mut v: Vec<(String, String)> = vec![
        (format!("{verbs}/ibdev"), ETH_IBDEV.into()),
        (format!("{verbs}/dev"), "1:3".into()),
        (format!("{verbs}/abi_version"), "1".into()),
        (format!("{dev}/node_type"), "1: CA".into()),
        (format!("{dev}/node_guid"), guid),
        (
            format!("{dev}/ports/1/gids/0"),
            format!(
                "fe80:0000:0000:0000:{:04x}:{:04x}:{:04x}:{:04x}",
                group(48),
                group(32),
                group(16),
                group(0)
            ),
        ),
        (format!("{dev}/ports/1/gid_attrs/types/0"), "RoCE v2".into()),
        (format!("{dev}/ports/1/pkeys/0"), "0xffff".into()),
    ];
    let pci = [
        (
            "modalias",
            "pci:v000015B3d0000101Bsv000015B3sd00000007bc02sc00i00".to_string(),
        ),
        ("vendor", "0x15b3".into()),
        ("device", "0x101b".into()),
        ("subsystem_vendor", "0x15b3".into()),
        ("subsystem_device", "0x0007".into()),
        ("class", "0x020000".into()),
        ("numa_node", "-1".into()),
        (
            "uevent",
            format!("DRIVER=mlx5_core\nPCI_SLOT_NAME={ETH_PCI_SLOT}"),
        ),
        // Six BARs, as the kernel lists them (start, end, flags): BAR 0 of 32 MiB.
        (
            "resource",
            format!(
                "0x00000000e2000000 0x00000000e3ffffff 0x000000000014220c{}",
                "\n0x0000000000000000 0x0000000000000000 0x0000000000000000".repeat(5)
            ),
        ),
        ("current_link_width", "16".into()),
        ("current_link_speed", "16.0 GT/s PCIe".into()),
    ];
    for (f, c) in pci {
        v.push((format!("{ETH_PCI_FUNCTION}/{f}"), c));
    }
    if let Some(ifname) = ifname {
        v.push((
            format!("{ETH_PCI_FUNCTION}/net/{ifname}/dev_port"),
            "0".into(),
        ));
        v.push((
            format!("{ETH_PCI_FUNCTION}/net/{ifname}/dev_id"),
            "0x0".into(),
        ));
    }
    v
}

/// Adds the Ethernet function (`mlx5_1`, [`ethernet_files`]) to the tree under `root`, which
/// [`write_tree`] wrote: programs then list two devices and pick the Ethernet one by name.
///
/// # Errors
///
/// When a directory, link or file cannot be written.
pub fn write_ethernet(root: &Path, ifname: Option<&str>) -> io::Result<()> {
    let links = [
        (
            format!("class/infiniband/{ETH_IBDEV}"),
            format!("../../{ETH_PCI_FUNCTION}/infiniband/{ETH_IBDEV}"),
        ),
        (
            format!("{ETH_PCI_FUNCTION}/infiniband/{ETH_IBDEV}/device"),
            format!("../../../{ETH_PCI_SLOT}"),
        ),
        // The kernel driver bound to the function (DPDK's PCI scan skips a function
        // without one, and takes `mlx5_core` for a kernel driver it leaves bound).
        (
            format!("{ETH_PCI_FUNCTION}/driver"),
            "../../../bus/pci/drivers/mlx5_core".into(),
        ),
    ];
    std::fs::create_dir_all(root.join("bus/pci/drivers/mlx5_core"))?;
    for (path, target) in links {
        let p = root.join(path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if p.symlink_metadata().is_ok() {
            std::fs::remove_file(&p)?;
        }
        std::os::unix::fs::symlink(target, p)?;
    }
    for (path, content) in ethernet_files(ifname) {
        let p = root.join(path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(p, format!("{content}\n"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tree_names_a_connectx6_at_dev_null() {
        let f = files();
        let get = |p: &str| f.iter().find(|(k, _)| k == p).map(|(_, v)| v.as_str());
        assert_eq!(get("class/infiniband_verbs/uverbs0/dev"), Some("1:3"));
        assert!(
            get("class/infiniband/mlx5_0/device/modalias")
                .unwrap()
                .contains("v000015B3d0000101B")
        );
        assert_eq!(
            get("class/infiniband/mlx5_0/node_guid"),
            Some("0c42:a103:00aa:bbcc")
        );
        assert_eq!(
            get("class/infiniband/mlx5_0/ports/1/gids/0"),
            Some("fe80:0000:0000:0000:0c42:a103:00aa:bbcc")
        );
        let dir = std::env::temp_dir().join(format!("zverbs-emu-sysfs-{}", std::process::id()));
        write_tree(&dir).unwrap();
        let dev = std::fs::read_to_string(dir.join("class/infiniband_verbs/uverbs0/dev")).unwrap();
        assert_eq!(dev, "1:3\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn ethernet_function_beside_the_infiniband_one() {
        let dir = std::env::temp_dir().join(format!("zverbs-emu-sysfs-eth-{}", std::process::id()));
        write_tree(&dir).unwrap();
        write_ethernet(&dir, Some("zve0")).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.join(p)).unwrap();
        assert_eq!(read("class/infiniband_verbs/uverbs1/ibdev"), "mlx5_1\n");
        assert_eq!(read("class/infiniband_verbs/uverbs0/ibdev"), "mlx5_0\n");
        assert!(
            read("class/infiniband/mlx5_1/device/uevent").contains("PCI_SLOT_NAME=0000:03:00.1\n")
        );
        assert_eq!(
            read("class/infiniband/mlx5_1/device/net/zve0/dev_port"),
            "0\n"
        );
        assert_eq!(
            read("class/infiniband/mlx5_1/device/resource")
                .lines()
                .count(),
            6
        );
        assert!(read("class/infiniband/mlx5_1/device/modalias").contains("v000015B3d0000101B"));
        assert_eq!(
            read("class/infiniband/mlx5_1/ports/1/gid_attrs/types/0"),
            "RoCE v2\n"
        );
        let driver = std::fs::read_link(dir.join(ETH_PCI_FUNCTION).join("driver")).unwrap();
        assert!(driver.ends_with("mlx5_core"));
        assert!(dir.join(ETH_PCI_FUNCTION).join("driver").is_dir());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn class_entry_resolves_under_a_pci_function_with_ids_and_pkeys() {
        let dir = std::env::temp_dir().join(format!("zverbs-emu-sysfs-pci-{}", std::process::id()));
        write_tree(&dir).unwrap();
        let key = crate::fabric::hello::Key::load(&dir).unwrap();
        // Written twice: the second write replaces the tree, links included, and keeps the
        // fabric's key.
        write_tree(&dir).unwrap();
        assert_eq!(crate::fabric::hello::Key::load(&dir).unwrap(), key);
        let class = dir.join("class/infiniband/mlx5_0");
        let real = std::fs::canonicalize(&class).unwrap();
        assert_eq!(
            real,
            std::fs::canonicalize(dir.join(PCI_FUNCTION))
                .unwrap()
                .join("infiniband/mlx5_0")
        );
        // Two levels up from the resolved entry: the PCI function, with its `device` file.
        let function = real.parent().and_then(Path::parent).unwrap();
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&function.join("vendor")), "0x15b3\n");
        assert_eq!(read(&function.join("device")), "0x101b\n");
        assert_eq!(read(&function.join("current_link_width")), "16\n");
        // The device link of the class entry is the function; rdma-core's files are there.
        assert!(read(&class.join("device/modalias")).contains("v000015B3d0000101B"));
        assert_eq!(read(&class.join("node_type")), "1: CA\n");
        assert_eq!(read(&class.join("ports/1/pkeys/0")), "0xffff\n");
        assert_eq!(read(&class.join("ports/1/pkeys/127")), "0x0000\n");
        assert!(!class.join("ports/1/pkeys/128").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

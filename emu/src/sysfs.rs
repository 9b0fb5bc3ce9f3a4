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
//! The GID file holds the node GUID's link-local GID, but a process with the shim loaded and
//! its device instance created reads its own port's GID there instead (the link-local prefix
//! and a port GUID ending in the instance's LID, [`zverbs_sim::Device::gid`]): each process is
//! another port on the fabric, and a datagram with a GRH reaches a port only when its DGID is
//! that port's GID, as on InfiniBand.

use std::io;
use std::path::Path;

use crate::device::NODE_GUID;

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

/// Writes the tree under `root` (replacing any tree there).
///
/// # Errors
///
/// When a directory or file cannot be written.
pub fn write_tree(root: &Path) -> io::Result<()> {
    if root.join("class").exists() {
        std::fs::remove_dir_all(root.join("class"))?;
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
}

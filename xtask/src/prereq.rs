//! System prerequisites: Debian packages the build and the tests need, installed with apt when
//! running as root, and the Rust components the checks use.

use std::path::Path;
use std::process::Command;

use crate::util::{self, Result, bail};

/// Something the tests need from the system, and the Debian package that provides it.
struct Need {
    /// What it is, for messages.
    what: &'static str,
    /// Whether it is there.
    present: fn() -> bool,
    /// The Debian package that provides it.
    package: &'static str,
}

/// What the build and the tests need from the system.
const NEEDS: &[Need] = &[
    Need {
        what: "rdma-core's <infiniband/mlx5dv.h> (cross-checks)",
        present: || Path::new("/usr/include/infiniband/mlx5dv.h").exists(),
        package: "libibverbs-dev",
    },
    Need {
        what: "librdmacm's <rdma/rdma_cma.h> (ABI probe of the control path's FFI)",
        present: || Path::new("/usr/include/rdma/rdma_cma.h").exists(),
        package: "librdmacm-dev",
    },
    Need {
        what: "a C compiler `cc` (cross-check probes, linking)",
        present: || util::succeeds(Command::new("cc").arg("--version")),
        package: "gcc",
    },
    Need {
        what: "the C library headers (cross-check probes)",
        present: || Path::new("/usr/include/stdio.h").exists(),
        package: "libc6-dev",
    },
    Need {
        what: "libmlx5, rdma-core's mlx5 provider (the emulated ConnectX)",
        present: has_libmlx5,
        package: "ibverbs-providers",
    },
    Need {
        what: "perftest's ib_write_lat and friends (the emulated ConnectX)",
        present: || Path::new("/usr/bin/ib_write_lat").exists(),
        package: "perftest",
    },
    Need {
        what: "ibv_rc_pingpong (the emulated ConnectX)",
        present: || Path::new("/usr/bin/ibv_rc_pingpong").exists(),
        package: "ibverbs-utils",
    },
];

/// Whether `libmlx5.so.1` is in a library directory (`/usr/lib/<triplet>/` on Debian).
fn has_libmlx5() -> bool {
    let dirs = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten();
    Path::new("/usr/lib/libmlx5.so.1").exists()
        || dirs
            .into_iter()
            .any(|d| d.path().join("libmlx5.so.1").exists())
}

/// Rust toolchain components the checks run.
const COMPONENTS: &[(&str, &str)] = &[("fmt", "rustfmt"), ("clippy", "clippy")];

/// Checks the system and installs what is missing when root; otherwise fails naming the exact
/// command to run.
pub fn ensure() -> Result<Option<String>> {
    let missing: Vec<&Need> = NEEDS.iter().filter(|n| !(n.present)()).collect();
    let mut note = String::from("all present");
    if !missing.is_empty() {
        let mut packages: Vec<&str> = missing.iter().map(|n| n.package).collect();
        packages.dedup();
        for n in &missing {
            println!("missing: {} (Debian package {})", n.what, n.package);
        }
        let list = packages.join(" ");
        if !is_root() {
            bail!(
                "missing system packages; as root, run:\n    \
                 apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
                 --no-install-recommends {list}\nor with sudo:\n    \
                 sudo apt-get update && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y \
                 --no-install-recommends {list}"
            );
        }
        if !util::succeeds(Command::new("apt-get").arg("--version")) {
            bail!(
                "missing system packages and no apt-get: install the equivalent of {list} \
                 (Debian package names)"
            );
        }
        util::run(
            Command::new("apt-get")
                .arg("update")
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        util::run(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends"])
                .args(&packages)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        let still: Vec<&str> = NEEDS
            .iter()
            .filter(|n| !(n.present)())
            .map(|n| n.what)
            .collect();
        if !still.is_empty() {
            bail!("still missing after installing: {}", still.join("; "));
        }
        note = format!("installed {list}");
    }
    for (sub, component) in COMPONENTS {
        if !util::succeeds(&mut util::cargo([*sub, "--version"])) {
            bail!("`cargo {sub}` is not installed; run:\n    rustup component add {component}");
        }
    }
    println!("system packages and toolchain components present");
    Ok(Some(note))
}

/// Whether this process runs as root (effective uid 0).
fn is_root() -> bool {
    // `Uid:` in /proc/self/status lists real, effective, saved and filesystem uids.
    if let Ok(status) = std::fs::read_to_string("/proc/self/status")
        && let Some(uids) = status.lines().find_map(|l| l.strip_prefix("Uid:"))
    {
        return uids.split_whitespace().nth(1) == Some("0");
    }
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

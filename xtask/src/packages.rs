//! What the machine needs from Debian: a need and the package that provides it, installed with
//! apt when running as root (otherwise the exact command to run is named), and what the rxe VM
//! needs from the host. The `prerequisites` stage lists everything the checks need
//! ([`crate::stages::prerequisites`]); `cargo xtask rxe` asks only for the VM's needs.

use std::process::Command;

use crate::util::{self, Result, bail};

/// Something the tests need from the system, and the Debian package that provides it.
pub struct Need {
    /// What it is, for messages.
    pub what: &'static str,
    /// Whether it is there.
    pub present: fn() -> bool,
    /// The Debian package that provides it.
    pub package: &'static str,
}

/// What the rxe VM needs from the host (`cargo xtask rxe` and the `rxe` stage). Building its
/// image also uses apt-get, dpkg and ldd, which every Debian system has.
pub const VM_NEEDS: &[Need] = &[
    Need {
        what: "qemu-system-x86_64 (the rxe VM)",
        present: || util::succeeds(Command::new("qemu-system-x86_64").arg("--version")),
        package: "qemu-system-x86",
    },
    Need {
        what: "xz (uncompressing the VM's kernel, which then boots seconds faster)",
        present: || util::succeeds(Command::new("xz").arg("--version")),
        package: "xz-utils",
    },
];

/// What the rxe VM needs, installed when missing (as the `prerequisites` stage does: [`crate::stages::prerequisites::ensure`]).
pub fn ensure_vm() -> Result {
    let needs: Vec<&Need> = VM_NEEDS.iter().collect();
    install_missing(&needs)?;
    Ok(())
}

/// Installs the packages of the needs that are missing, with apt when root; otherwise fails
/// naming the exact command to run. Returns a note for the summary.
pub fn install_missing(needs: &[&Need]) -> Result<String> {
    let missing: Vec<&Need> = needs.iter().copied().filter(|n| !(n.present)()).collect();
    if missing.is_empty() {
        return Ok("all present".into());
    }
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
            .args(["-o", "DPkg::Lock::Timeout=600"])
            .args(&packages)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    let still: Vec<&str> = missing
        .iter()
        .filter(|n| !(n.present)())
        .map(|n| n.what)
        .collect();
    if !still.is_empty() {
        bail!("still missing after installing: {}", still.join("; "));
    }
    Ok(format!("installed {list}"))
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
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

//! The no_std proof: `proofs/nostd` is a `#![no_std] #![no_main]` binary with `panic =
//! "abort"` and no global allocator that drives the mlx5 data path (send, receive and
//! completion queues over static memory). It is its own workspace, so nothing of the main
//! workspace's dev-dependencies or features leaks into it. If a data-path crate starts using
//! `std`, the build fails with E0152 (duplicate `panic_impl` lang item); if it allocates, with
//! "no global memory allocator found". Its panic handler calls a function defined nowhere, so
//! if any panic path (a bounds check, an `unwrap`, an overflow check) is reachable anywhere in
//! the linked data path, the link fails with "undefined symbol: zverbs_data_path_can_panic":
//! the data path provably cannot panic. The binary exits 0 when every check passes. Last, the
//! linked binary is inspected: it imports nothing from the C library but memory copies and
//! fills and holds no system-call instruction, so nothing in the data path can make one.

use std::process::Command;

use crate::test::{NOSTD_MANIFEST, Run};
use crate::util::{self, Result, bail};

/// The proof's own target directory (`nostd` in cargo's), so that building it never waits on
/// the workspace's lock.
fn target_dir() -> std::path::PathBuf {
    util::target_dir().join("nostd")
}

/// The binary the proof builds.
const BINARY: &str = "zverbs-nostd-proof";

/// Lints, builds in release and runs the proof.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    let dir = target_dir();
    let common = [
        "--manifest-path".as_ref(),
        NOSTD_MANIFEST.as_ref(),
        "--target-dir".as_ref(),
        dir.as_os_str(),
    ];
    util::run(
        util::cargo(["clippy", "--release"])
            .args(common)
            .args(["--", "-D", "warnings"]),
    )?;
    util::run(util::cargo(["build", "--release"]).args(common))?;
    let exe = dir.join("release").join(BINARY);
    println!("$ {}", exe.display());
    let status = Command::new(&exe)
        .status()
        .map_err(|e| util::Error(format!("cannot run {}: {e}", exe.display())))?;
    match status.code() {
        Some(0) => {}
        Some(code) => {
            bail!("{BINARY} exited with {code}: check {code} of proofs/nostd/src/main.rs failed")
        }
        None => bail!("{BINARY} was killed ({status})"),
    }
    let imports = no_system_calls(&exe)?;
    let size = std::fs::metadata(&exe)?.len();
    Ok(Some(format!(
        "built (no panic path linked), ran, exit 0; imports only {imports}, no syscall \
         instruction ({} KiB)",
        size / 1024
    )))
}

/// C library functions the data path may use: memory copies and fills, which make no system
/// call. The start-up code's own import (`__libc_start_main`) is not the data path's.
const ALLOWED_IMPORTS: &[&str] = &[
    "__libc_start_main",
    "memcpy",
    "memmove",
    "memset",
    "memcmp",
    "bcmp",
];

/// Checks that nothing linked can make a system call: the binary imports no C library
/// function but memory copies and fills (so no `read`, `write`, `ioctl`, `futex`, `malloc`,
/// ...), and its code holds no `syscall` instruction. Returns the imports, for the summary.
fn no_system_calls(exe: &std::path::Path) -> Result<String> {
    let out = Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(exe)
        .output()
        .map_err(|e| util::Error(format!("cannot run nm (binutils): {e}")))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let mut imports = Vec::new();
    for line in text.lines() {
        let mut cols = line.split_whitespace();
        let (Some(kind), Some(sym)) = (cols.next(), cols.next()) else {
            continue;
        };
        if kind == "w" {
            continue; // weak references the start-up code leaves unresolved
        }
        let name = sym.split('@').next().unwrap_or(sym);
        if !ALLOWED_IMPORTS.contains(&name) {
            bail!("{BINARY} imports `{name}` from the C library: the data path must not call it");
        }
        imports.push(name.to_string());
    }
    let dis = Command::new("objdump")
        .args(["-d", "--no-show-raw-insn"])
        .arg(exe)
        .output()
        .map_err(|e| util::Error(format!("cannot run objdump (binutils): {e}")))?;
    let dis = String::from_utf8_lossy(&dis.stdout);
    if let Some(l) = dis.lines().find(|l| {
        l.split_whitespace()
            .any(|w| w == "syscall" || w == "sysenter")
    }) {
        bail!("{BINARY} holds a system call instruction: {}", l.trim());
    }
    imports.sort();
    Ok(imports.join(", "))
}

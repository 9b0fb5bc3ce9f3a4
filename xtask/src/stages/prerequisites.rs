//! The `prerequisites` stage: the Debian packages the build and the checks need (apt when
//! running as root, [`crate::packages`]), and the Rust toolchains, components and targets they
//! use (rustup).

use std::path::Path;
use std::process::Command;

use crate::packages::{Need, VM_NEEDS, install_missing};
use crate::util::{self, Result, bail};

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
    Need {
        what: "Open MPI's mpirun, a PMIx launcher (jobs of the emulated ConnectX)",
        present: || Path::new("/usr/bin/mpirun").exists(),
        package: "openmpi-bin",
    },
    Need {
        what: "PMIx's <pmix.h> and libpmix.so.2 (ABI probe of the PMIx binding)",
        present: has_pmix_header,
        package: "libpmix-dev",
    },
    Need {
        what: "UCX's ucx_info and ucx_perftest (the emulated ConnectX)",
        present: || Path::new("/usr/bin/ucx_perftest").exists(),
        package: "ucx-utils",
    },
    Need {
        what: "tcpreplay (a capture replayed onto the emulated ConnectX's Ethernet port)",
        present: || Path::new("/usr/bin/tcpreplay").exists(),
        package: "tcpreplay",
    },
    Need {
        what: "iproute2's ip (the network namespace and veth pair of the Ethernet port)",
        present: || Path::new("/usr/sbin/ip").exists() || Path::new("/sbin/ip").exists(),
        package: "iproute2",
    },
    Need {
        what: "dpdk-testpmd (DPDK's mlx5 driver tried on the emulated ConnectX)",
        present: || Path::new("/usr/bin/dpdk-testpmd").exists(),
        // Debian 12 ships testpmd in the development tools, not in `dpdk` (the runtime).
        package: "dpdk-dev",
    },
    Need {
        what: "DPDK's mlx5 driver, librte_net_mlx5 (dpdk-testpmd on the emulated ConnectX)",
        present: has_dpdk_mlx5,
        package: "librte-net-mlx5-23",
    },
];

/// Whether `<pmix.h>` is installed: in `/usr/include`, or where Debian keeps PMIx's headers
/// (`/usr/lib/<triplet>/pmix2/include`).
fn has_pmix_header() -> bool {
    Path::new("/usr/include/pmix.h").exists()
        || std::fs::read_dir("/usr/lib")
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| d.path().join("pmix2/include/pmix.h").exists())
}

/// What the `aarch64` stage needs: a cross linker with the aarch64 C library, binutils that
/// read aarch64 code (the no_std proof's checks) and qemu-user to run the tests.
const AARCH64_NEEDS: &[Need] = &[
    Need {
        what: "aarch64-linux-gnu-gcc (the linker for aarch64-unknown-linux-gnu)",
        present: || util::succeeds(Command::new("aarch64-linux-gnu-gcc").arg("--version")),
        package: "gcc-aarch64-linux-gnu",
    },
    Need {
        what: "the aarch64 C library to link against (/usr/aarch64-linux-gnu)",
        present: || Path::new("/usr/aarch64-linux-gnu/lib/libc.so").exists(),
        package: "libc6-dev-arm64-cross",
    },
    Need {
        what: "aarch64-linux-gnu-nm and -objdump (the aarch64 no_std proof's checks)",
        present: || {
            util::succeeds(Command::new(crate::stages::aarch64::NM).arg("--version"))
                && util::succeeds(Command::new(crate::stages::aarch64::OBJDUMP).arg("--version"))
        },
        package: "binutils-aarch64-linux-gnu",
    },
    Need {
        what: "qemu-aarch64 (running the aarch64 tests)",
        present: || util::succeeds(Command::new("qemu-aarch64").arg("--version")),
        package: "qemu-user",
    },
];

/// Whether DPDK's mlx5 poll-mode driver is in a library directory (Debian keeps DPDK's
/// drivers under `/usr/lib/<triplet>/dpdk/pmds-23/`).
fn has_dpdk_mlx5() -> bool {
    std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| d.path().join("librte_net_mlx5.so.23").exists())
}

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

/// Targets the checks build for besides the host, added with rustup when missing.
const TARGETS: &[&str] = &[crate::stages::aarch64::TARGET];

/// Checks the system and installs what is missing when root; otherwise fails naming the exact
/// command to run.
pub fn ensure() -> Result<Option<String>> {
    let needs: Vec<&Need> = NEEDS.iter().chain(VM_NEEDS).chain(AARCH64_NEEDS).collect();
    let mut note = install_missing(&needs)?;
    for (sub, component) in COMPONENTS {
        if !util::succeeds(&mut util::cargo([*sub, "--version"])) {
            bail!("`cargo {sub}` is not installed; run:\n    rustup component add {component}");
        }
    }
    let added = add_missing_targets()?;
    if !added.is_empty() {
        note.push_str(&format!("; added target {}", added.join(", ")));
    }
    match ensure_msrv_toolchain()? {
        Msrv::Present => {}
        Msrv::Installed(toolchain) => {
            note.push_str(&format!("; installed the Rust {toolchain} toolchain"));
        }
        Msrv::Missing(toolchain) => note.push_str(&format!(
            "; the Rust {toolchain} toolchain could not be installed (the crates stage checks \
             with the default toolchain instead)"
        )),
    }
    if ensure_miri()? {
        note.push_str(&format!(
            "; added miri and rust-src to the {} toolchain",
            crate::stages::miri::TOOLCHAIN
        ));
    }
    println!("system packages, toolchain components and targets present");
    Ok(Some(note))
}

/// What [`ensure_msrv_toolchain`] found or did.
enum Msrv {
    Present,
    Installed(String),
    /// Not installed and rustup could not install it (no way to its download server).
    Missing(String),
}

/// Makes sure the toolchain of the workspace's `rust-version` is installed (`1.95` → `1.95.0`),
/// which the `crates` stage builds the published crates with: `rustup toolchain install
/// <version> --profile minimal` when missing. Toolchains come from rustup's own server, not
/// from a package registry: where it cannot be reached this warns and goes on, and the `crates`
/// stage checks with the default toolchain instead, saying how much that proves.
fn ensure_msrv_toolchain() -> Result<Msrv> {
    let toolchain = crate::stages::crates::workspace_msrv_toolchain()?;
    if crate::stages::crates::toolchain_present(&toolchain) {
        return Ok(Msrv::Present);
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["toolchain", "install", &toolchain, "--profile", "minimal"]);
    if util::run(&mut cmd).is_err() {
        eprintln!(
            "warning: the Rust {toolchain} toolchain (the workspace's rust-version) is missing \
             and rustup could not install it; where rustup's server can be reached, run:\n    \
             rustup toolchain install {toolchain} --profile minimal"
        );
        return Ok(Msrv::Missing(toolchain));
    }
    Ok(Msrv::Installed(toolchain))
}

/// Makes sure Miri runs: the nightly toolchain with its `miri` and `rust-src` components
/// (`rustup +nightly component add miri rust-src` when missing). Returns whether it added them.
fn ensure_miri() -> Result<bool> {
    let toolchain = crate::stages::miri::TOOLCHAIN;
    if util::succeeds(&mut crate::stages::miri::cargo_miri(["--version"])) {
        return Ok(false);
    }
    let mut cmd = Command::new("rustup");
    if util::succeeds(Command::new("rustup").args(["run", toolchain, "rustc", "--version"])) {
        cmd.args([
            "component",
            "add",
            "--toolchain",
            toolchain,
            "miri",
            "rust-src",
        ]);
    } else {
        cmd.args(["toolchain", "install", toolchain, "--profile", "minimal"])
            .args(["--component", "miri,rust-src"]);
    }
    if util::run(&mut cmd).is_err() {
        bail!(
            "Miri is missing from the {toolchain} toolchain and rustup could not add it; run:\n    \
             rustup toolchain install {toolchain} && rustup +{toolchain} component add miri rust-src"
        );
    }
    if !util::succeeds(&mut crate::stages::miri::cargo_miri(["--version"])) {
        bail!("`cargo +{toolchain} miri --version` still fails after adding the components");
    }
    Ok(true)
}

/// Adds the [`TARGETS`] whose standard library is missing from the toolchain, with rustup.
/// Returns the targets it added.
fn add_missing_targets() -> Result<Vec<&'static str>> {
    let missing: Vec<&str> = TARGETS.iter().copied().filter(|t| !has_target(t)).collect();
    if missing.is_empty() {
        return Ok(missing);
    }
    let mut cmd = Command::new("rustup");
    cmd.args(["target", "add"]).args(&missing);
    if util::run(&mut cmd).is_err() {
        bail!(
            "the standard library for {} is missing and rustup could not add it; run:\n    \
             rustup target add {}",
            missing.join(", "),
            missing.join(" ")
        );
    }
    if let Some(t) = missing.iter().find(|t| !has_target(t)) {
        bail!("still no standard library for {t} after `rustup target add {t}`");
    }
    Ok(missing)
}

/// Whether the toolchain that runs this xtask has the standard library for `target`: its
/// `lib/rustlib/<target>/lib` holds `libcore-*.rlib`.
fn has_target(target: &str) -> bool {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let Ok(out) = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", target])
        .output()
    else {
        return false;
    };
    let dir = String::from_utf8_lossy(&out.stdout);
    std::fs::read_dir(dir.trim())
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.file_name().to_string_lossy().starts_with("libcore-"))
}

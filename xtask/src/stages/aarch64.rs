//! The `aarch64` stage: the data path built for `aarch64-unknown-linux-gnu` (Grace and Graviton
//! hosts drive ConnectX too), its tests run under qemu-user, and the no_std proof made for it.
//!
//! The barriers and the doorbell have an arm64 form (`dmb` and `dsb` instructions) that no x86
//! build compiles. This stage lints it with clippy, runs the tests of `zverbs-core`,
//! `zverbs-mlx5dv` and `zverbs-sim` as aarch64 binaries under `qemu-aarch64` (so every barrier
//! instruction executes, and the data path as the compiler builds it for arm64, its atomics
//! included, posts, rings and polls against the software device), then builds, runs and
//! inspects the no_std proof for aarch64: no panic path links, nothing is imported from the C
//! library but memory copies and what the start-up code calls, and no `svc` (aarch64's
//! system-call instruction) is in the code.
//!
//! Cargo gets the cross linker and the runner through its per-target variables, set on these
//! commands only; the artifacts go to the usual target directory's `aarch64-unknown-linux-gnu/`
//! subfolder. The tests build optimised, as aarch64 users will run the code (and the host's
//! `test` stage does not), with the debug assertions and overflow checks that stage has: so
//! built, every test runs as on the host, with its full counts (a million round trips of
//! `sim/tests/zero_alloc.rs` take about 4 s under emulation; a debug build, ten times that).
//!
//! What emulation cannot show: qemu-user runs the guest's threads on the host's cores with
//! x86's strong ordering, so a missing or too weak arm64 barrier does not fail here (the loom
//! models in `loom-tests/`, stage `loom`, are what check the orderings); it maps all memory as
//! ordinary memory, so nothing here behaves like device or write-combining memory; and
//! aarch64 Linux is little-endian like x86_64, so byte order is checked by the literal bytes
//! of the unit tests, not by the second architecture.

use crate::run::{Run, counted_tests};
use crate::stages::nostd::{self, Target};
use crate::util::{self, Result, bail};

/// The Rust target.
pub const TARGET: &str = "aarch64-unknown-linux-gnu";

/// The cross toolchain's binutils (Debian's `binutils-aarch64-linux-gnu`).
pub const NM: &str = "aarch64-linux-gnu-nm";
/// See [`NM`].
pub const OBJDUMP: &str = "aarch64-linux-gnu-objdump";

/// Cargo's linker and runner for [`TARGET`]: Debian's cross gcc, and qemu-user with the
/// aarch64 C library's root for the dynamic loader.
const CARGO_ENV: &[(&str, &str)] = &[
    (
        "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER",
        "aarch64-linux-gnu-gcc",
    ),
    (
        "CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER",
        "qemu-aarch64 -L /usr/aarch64-linux-gnu",
    ),
];

/// The crates whose tests run: the data path and the software device it is tested against.
const CRATES: &[&str] = &["zverbs-core", "zverbs-mlx5dv", "zverbs-sim"];

/// The no_std proof for aarch64.
const PROOF: Target = Target {
    triple: Some(TARGET),
    env: CARGO_ENV,
    runner: &["qemu-aarch64", "-L", "/usr/aarch64-linux-gnu"],
    nm: NM,
    objdump: OBJDUMP,
    syscall: &["svc"],
};

/// The release profile with the checks of a debug build, for the tests.
const CHECKED_RELEASE: &[(&str, &str)] = &[
    ("CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS", "true"),
    ("CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS", "true"),
];

/// A cargo command for [`TARGET`] on [`CRATES`].
fn cargo(sub: &str) -> std::process::Command {
    let mut cmd = util::cargo([sub, "--target", TARGET]);
    for c in CRATES {
        cmd.args(["-p", c]);
    }
    cmd.envs(CARGO_ENV.iter().copied());
    cmd
}

/// Lints for aarch64, runs the tests under qemu-user, makes the no_std proof for aarch64.
pub fn run(run: &mut Run) -> Result<Option<String>> {
    util::run(
        cargo("clippy")
            .arg("--all-targets")
            .args(["--", "-D", "warnings"]),
    )?;

    let mut test = cargo("test");
    test.arg("--release").envs(CHECKED_RELEASE.iter().copied());
    let (total, crates) = counted_tests(test, &[], run)?;
    if total.passed == 0 {
        bail!("no test ran under qemu-aarch64");
    }
    let per_crate: Vec<String> = crates
        .iter()
        .map(|(name, c)| format!("{name} {}", c.passed))
        .collect();

    let proof = nostd::prove(&PROOF)?;
    Ok(Some(format!(
        "{} passed, {} failed, {} ignored under qemu-aarch64 ({}); no_std proof: {proof}",
        total.passed,
        total.failed,
        total.ignored,
        per_crate.join(", ")
    )))
}

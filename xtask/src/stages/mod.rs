//! The stages of `cargo xtask test`, one file each, in the order they run ([`STAGES`]).
//!
//! A stage is a function that runs its checks and returns a note for the summary; stages that
//! run `cargo test` go through [`crate::run::counted_tests`], so their tests join the table
//! and the final count. The `rxe` stage is [`crate::rxe::stage`] (with the VM it boots,
//! [`crate::vm`]); the `connectx` stage also provides `cargo xtask emu`.

pub mod aarch64;
pub mod clippy;
pub mod connectx;
pub mod crates;
pub mod doc;
pub mod fmt;
pub mod loom;
pub mod miri;
pub mod nostd;
pub mod prerequisites;
pub mod test;
pub mod unsafe_blocks;

use std::time::Duration;

use crate::run::Run;
use crate::util::Result;

/// The whole run's budget on CI's machine (2 cores, a fresh clone, `CI=true`,
/// `CARGO_INCREMENTAL=0`, line tables only): CI stops a run at 90 minutes, and a run that
/// keeps half of that in hand leaves room for the next test without deciding whether it lands.
pub const TOTAL_BUDGET: Duration = minutes(45);

/// `m` minutes.
const fn minutes(m: u64) -> Duration {
    Duration::from_secs(m * 60)
}

/// `s` seconds.
const fn seconds(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// One step of `cargo xtask test`.
pub struct Stage {
    /// Short name, for `--only` / `--skip` and the summary.
    pub name: &'static str,
    /// What it checks.
    pub about: &'static str,
    /// Runs it; `Some(note)` is shown in the summary.
    pub run: fn(&mut Run) -> Result<Option<String>>,
    /// Directories under the target directory that only this stage builds and reads (a
    /// trailing `*` matches a prefix): removed after it passes when the disk is short
    /// ([`crate::disk::free_scratch`]).
    pub scratch: &'static [&'static str],
    /// The most it may take in a fresh-clone run on CI's machine; the summary marks a stage
    /// over it. The budgets add up to at most [`TOTAL_BUDGET`].
    pub budget: Duration,
}

/// The stages, in the order they run.
pub const STAGES: &[Stage] = &[
    Stage {
        name: "prerequisites",
        about: "system packages (apt when root) and toolchain components",
        run: |_| prerequisites::ensure(),
        scratch: &[],
        budget: minutes(1),
    },
    Stage {
        name: "fmt",
        about: "cargo fmt --check, workspace and proofs",
        run: fmt::run,
        scratch: &[],
        budget: seconds(30),
    },
    Stage {
        name: "unsafe",
        about: "mlx5dv's unsafe blocks in product code counted per file, held under a ceiling",
        run: unsafe_blocks::run,
        scratch: &[],
        budget: seconds(5),
    },
    Stage {
        name: "clippy",
        about: "clippy on every target and feature (and without default features), warnings denied",
        run: clippy::run,
        scratch: &[],
        budget: seconds(90),
    },
    Stage {
        name: "test",
        about: "the workspace's tests (unit, cross-checks, doc-tests), counted per crate",
        run: test::run,
        scratch: &[],
        budget: minutes(4),
    },
    Stage {
        name: "doc",
        about: "rustdoc with warnings denied",
        run: doc::run,
        scratch: &["doc"],
        budget: minutes(1),
    },
    Stage {
        name: "crates",
        about: "the published crates: packaged and built (sizes), built with the rust-version \
                toolchain, loom kept out of dependents' lockfiles, semver-checks once released",
        run: crates::run,
        scratch: &["package", "dependent"],
        budget: minutes(1),
    },
    Stage {
        name: "nostd",
        about: "the no_std proof: the data-path crates linked into a no_std, no-alloc binary",
        run: nostd::run,
        scratch: &["nostd"],
        budget: seconds(30),
    },
    Stage {
        name: "miri",
        about: "Miri (Stacked and Tree Borrows) on every test that needs no C library",
        run: miri::run,
        scratch: &["miri"],
        budget: minutes(15),
    },
    Stage {
        name: "aarch64",
        about: "the data path for aarch64: clippy, its tests under qemu-user, the no_std proof",
        run: aarch64::run,
        scratch: &["aarch64-unknown-linux-gnu"],
        budget: minutes(3),
    },
    Stage {
        name: "loom",
        about: "loom models of the lock-free protocols, and each mutant rejected",
        run: loom::run,
        scratch: &["loom*"],
        budget: minutes(2),
    },
    Stage {
        name: "rxe",
        about: "rdma-core's tools and the device tests on rxe devices in a qemu VM",
        run: crate::rxe::stage,
        scratch: &[],
        budget: seconds(330),
    },
    Stage {
        name: "connectx",
        about: "the emulated ConnectX: WQEs and CQEs against libmlx5, perftest, ibv_rc_pingpong",
        run: connectx::run,
        scratch: &[],
        budget: seconds(390),
    },
];

/// Packages built with their default features off, each checked by clippy and tested on its
/// own (a workspace build unifies features, so it would not see them): `zverbs` and
/// `zverbs-tools` without the software device (feature `sim`).
pub const NO_DEFAULT_FEATURES: &[&str] = &["zverbs", "zverbs-tools"];

/// The packages of [`NO_DEFAULT_FEATURES`] whose own tests, examples and doc-tests turn the
/// software device back on (a dev-dependency on the package itself with `sim`): without their
/// default features only their library is linted (clippy) and built (crates); testing them so
/// would run the workspace pass's tests a second time.
pub const LIBRARY_ONLY_WITHOUT_DEFAULTS: &[&str] = &["zverbs"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stage_budgets_fit_the_run_s() {
        let sum: Duration = STAGES.iter().map(|s| s.budget).sum();
        assert!(
            sum <= TOTAL_BUDGET,
            "the stages' budgets add up to {sum:?}, over the run's {TOTAL_BUDGET:?}"
        );
        assert!(STAGES.iter().all(|s| s.budget > Duration::ZERO));
    }

    /// A package is tested only with its defaults exactly when its tests turn them back on:
    /// listed in [`LIBRARY_ONLY_WITHOUT_DEFAULTS`] if and only if its manifest has a
    /// dev-dependency on itself.
    #[test]
    fn library_only_packages_are_those_whose_tests_turn_their_features_on() {
        let meta = crate::util::cargo(["metadata", "--no-deps", "--format-version", "1"])
            .output()
            .expect("cargo metadata");
        let meta = String::from_utf8(meta.stdout).expect("utf-8");
        for p in NO_DEFAULT_FEATURES {
            let dir = match *p {
                "zverbs" => "std-shim",
                "zverbs-tools" => "tools",
                other => panic!("no directory known for {other}"),
            };
            assert!(
                meta.contains(&format!("\"name\":\"{p}\"")),
                "{p} is not a package"
            );
            let manifest =
                std::fs::read_to_string(crate::util::root().join(dir).join("Cargo.toml"))
                    .expect("manifest");
            let dev = manifest
                .split("[dev-dependencies]")
                .nth(1)
                .map(|d| d.split("\n[").next().unwrap_or(""))
                .unwrap_or("");
            let on_itself = dev
                .lines()
                .any(|l| l.starts_with(&format!("{p} = ")) && l.contains("path = \".\""));
            assert_eq!(
                LIBRARY_ONLY_WITHOUT_DEFAULTS.contains(p),
                on_itself,
                "{p}: listed in LIBRARY_ONLY_WITHOUT_DEFAULTS: {}, tests depend on itself: \
                 {on_itself}",
                LIBRARY_ONLY_WITHOUT_DEFAULTS.contains(p)
            );
        }
    }

    #[test]
    fn stage_names_are_unique_and_in_ci_order() {
        let names: Vec<&str> = STAGES.iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            [
                "prerequisites",
                "fmt",
                "unsafe",
                "clippy",
                "test",
                "doc",
                "crates",
                "nostd",
                "miri",
                "aarch64",
                "loom",
                "rxe",
                "connectx"
            ]
        );
    }
}

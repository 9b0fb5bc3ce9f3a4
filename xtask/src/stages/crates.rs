//! The `crates` stage: what someone who depends on the published crates gets.
//!
//! - **Packages.** `cargo publish --workspace --dry-run` packages exactly the published crates
//!   ([`PUBLISHED`]; every other member says `publish = false`) and builds each from its
//!   package, against the registry, as a user's build would. Each package's file count and
//!   size are printed; each must hold its README and both license texts (equal to the root's:
//!   the crates carry copies, as a symlink is not packaged reliably) and state the workspace's
//!   `rust-version`.
//! - **The minimum supported Rust version.** The published crates are checked with the
//!   toolchain of the workspace's `rust-version` (`1.95` → `1.95.0`, which the
//!   `prerequisites` stage installs), with every feature and without the default ones, from
//!   the committed lockfile: a crate that needs a newer Rust fails here.
//! - **A dependent's lockfile.** A crate outside the workspace that depends on `zverbs` by path
//!   must not resolve any crate of [`NEVER_IN_A_DEPENDENT`]: `loom` is an optional dependency
//!   of `zverbs-core` behind its `loom` feature, and so stays out of users' lockfiles.
//! - **API compatibility.** For each published crate the registry is asked for its last
//!   version (`cargo info`). A crate not published yet has nothing to compare with and is
//!   skipped, saying so; a crate of the same name whose repository is not ours is someone
//!   else's, and is skipped, saying that too. Otherwise `cargo semver-checks` compares the
//!   crate with that version; it is installed (`cargo install cargo-semver-checks --locked`,
//!   minutes of building) only then.

use std::fmt::Write as _;
use std::process::{Command, Stdio};

use crate::run::Run;
use crate::util::{self, Result, Table, anyhow, bail};

/// The crates published to crates.io, as cargo names them. Every other workspace member says
/// `publish = false`; the stage fails when cargo would publish another set.
pub const PUBLISHED: &[&str] = &[
    "zverbs-core",
    "zverbs-mlx5dv",
    "zverbs-sim",
    "zverbs-ffi",
    "zverbs",
];

/// Files every published package must hold (besides its manifest and sources).
const PACKAGE_FILES: &[&str] = &["README.md", "LICENSE-MIT", "LICENSE-APACHE"];

/// Crates that must never be in the lockfile of a crate depending on `zverbs`: `loom` (and its
/// dependency tree) serves only the workspace's loom models.
pub const NEVER_IN_A_DEPENDENT: &[&str] = &["loom"];

/// Runs the stage.
pub fn run(_: &mut Run) -> Result<Option<String>> {
    let msrv = workspace_package_key("rust-version")?;
    let repository = workspace_package_key("repository")?;

    let packages = package()?;
    let (size, compressed) = packages.iter().fold((0.0, 0.0), |(s, c), p| {
        (
            s + kib(&p.size).unwrap_or(0.0),
            c + kib(&p.compressed).unwrap_or(0.0),
        )
    });
    let mut note = format!(
        "{} crates packaged and built ({size:.0} KiB, {compressed:.0} KiB compressed)",
        packages.len()
    );

    println!("\n--> the published crates with Rust {msrv} (the workspace's rust-version)");
    let _ = write!(note, "; {}", check_msrv(&msrv)?);

    println!("\n--> a crate depending on zverbs: its lockfile");
    let n = dependent_lockfile()?;
    let _ = write!(note, "; a dependent locks {n} crates, no loom");

    println!("\n--> API compatibility with the last published versions");
    let _ = write!(note, "; {}", semver_checks(&repository)?);
    Ok(Some(note))
}

/// One package that `cargo publish --dry-run` made.
#[derive(Debug, PartialEq)]
struct Packaged {
    name: String,
    version: String,
    files: u32,
    /// As cargo prints it (`143.0KiB`).
    size: String,
    compressed: String,
}

/// Removes what an earlier dry run unpacked of our crates in cargo's home. Cargo verifies each
/// package against the ones before it through a registry in the target directory, and
/// unpacks those into `$CARGO_HOME/registry/src/-<hash of that path>/<crate>-<version>`; the
/// version does not change between runs, so a later run from the same path would build
/// against the sources the first one unpacked (an old `zverbs-core` under a new
/// `zverbs-mlx5dv`) instead of the tree as it is.
fn forget_verified_packages() -> Result {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return Ok(());
    };
    let Ok(registries) = std::fs::read_dir(&src) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        // Local registries are named `-<hash>`; crates.io's `index.crates.io-<hash>`.
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        for unpacked in std::fs::read_dir(registry.path())?.flatten() {
            let name = unpacked.file_name().to_string_lossy().into_owned();
            let ours = PUBLISHED.iter().any(|c| {
                // `<crate>-<version>`: a digit after the crate's name and a dash.
                name.strip_prefix(c)
                    .and_then(|v| v.strip_prefix('-'))
                    .is_some_and(|v| v.starts_with(|ch: char| ch.is_ascii_digit()))
            });
            if ours {
                std::fs::remove_dir_all(unpacked.path())?;
            }
        }
    }
    Ok(())
}

/// `cargo publish --workspace --dry-run`: packages and builds the published crates, prints the
/// table of their sizes, and checks the set of crates and what each package holds.
fn package() -> Result<Vec<Packaged>> {
    forget_verified_packages()?;
    // `--allow-dirty`: what is checked is the tree as it is, committed or not.
    let mut cmd = util::cargo(["publish", "--workspace", "--dry-run", "--allow-dirty"]);
    let mut lines = Vec::new();
    let status = util::run_lines(&mut cmd, |l| {
        lines.push(l.to_string());
        // Cargo's progress lines and its note per package; the compiler's output is long.
        !l.trim_start().starts_with("Compiling")
    })?;
    util::check(&cmd, status)?;
    let packages = parse_packaged(&lines);

    let mut table = Table::new(&["crate", "version", ">files", ">size", ">compressed"]);
    for p in &packages {
        table.row(vec![
            p.name.clone(),
            p.version.clone(),
            p.files.to_string(),
            p.size.clone(),
            p.compressed.clone(),
        ]);
    }
    println!("\npackages (cargo publish --dry-run):");
    table.print(false);

    let mut names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    names.sort_unstable();
    let mut expected = PUBLISHED.to_vec();
    expected.sort_unstable();
    if names != expected {
        bail!(
            "cargo would publish {names:?}, the published crates are {expected:?}: give a crate \
             that is not published `publish = false`, or add a new one to PUBLISHED in {}",
            file!()
        );
    }
    let root = util::root();
    let msrv = workspace_package_key("rust-version")?;
    for p in &packages {
        let dir = util::target_dir()
            .join("package")
            .join(format!("{}-{}", p.name, p.version));
        for f in PACKAGE_FILES {
            let Ok(packaged) = std::fs::read(dir.join(f)) else {
                bail!("the package of {} has no {f} ({})", p.name, dir.display());
            };
            if f.starts_with("LICENSE") && std::fs::read(root.join(f))? != packaged {
                bail!(
                    "{f} of {} differs from the workspace's: copy the root's over it",
                    p.name
                );
            }
        }
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml"))?;
        if toml_value(&manifest, "rust-version").as_deref() != Some(msrv.as_str()) {
            bail!(
                "the packaged manifest of {} does not say rust-version = \"{msrv}\"",
                p.name
            );
        }
    }
    println!(
        "each package holds {} and states rust-version {msrv}",
        PACKAGE_FILES.join(", ")
    );
    Ok(packages)
}

/// The packages in `cargo publish` output: a `Packaging <name> v<version> (<path>)` line, then
/// `Packaged <n> files, <size> (<compressed> compressed)`.
fn parse_packaged(lines: &[String]) -> Vec<Packaged> {
    let mut out = Vec::new();
    let mut current: Option<(String, String)> = None;
    for l in lines {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.as_slice() {
            ["Packaging", name, version, ..] => {
                current = Some((name.to_string(), version.trim_start_matches('v').into()));
            }
            ["Packaged", files, "files,", size, compressed, "compressed)"] => {
                if let (Some((name, version)), Ok(files)) = (current.take(), files.parse()) {
                    out.push(Packaged {
                        name,
                        version,
                        files,
                        size: size.to_string(),
                        compressed: compressed.trim_start_matches('(').to_string(),
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// A size as cargo prints it (`143.0KiB`, `1.2MiB`, `512B`) in KiB.
fn kib(size: &str) -> Option<f64> {
    let (number, unit) = size.split_at(size.find(|c: char| c.is_ascii_alphabetic())?);
    let n: f64 = number.parse().ok()?;
    Some(match unit {
        "B" => n / 1024.0,
        "KiB" => n,
        "MiB" => n * 1024.0,
        "GiB" => n * 1024.0 * 1024.0,
        _ => return None,
    })
}

/// The toolchain of a `rust-version`: `1.95` → `1.95.0`; a full version is its own.
pub fn msrv_toolchain(rust_version: &str) -> String {
    if rust_version.matches('.').count() == 1 {
        format!("{rust_version}.0")
    } else {
        rust_version.to_string()
    }
}

/// The toolchain of the workspace's `rust-version`, for the `prerequisites` stage.
pub fn workspace_msrv_toolchain() -> Result<String> {
    Ok(msrv_toolchain(&workspace_package_key("rust-version")?))
}

/// Whether rustup has `toolchain` installed (and it runs).
pub fn toolchain_present(toolchain: &str) -> bool {
    util::succeeds(
        Command::new("rustup")
            .args(["run", toolchain, "rustc", "--version"])
            .env("RUSTUP_AUTO_INSTALL", "0"),
    )
}

/// Checks the published crates with the `rust-version` toolchain: every feature, then the
/// packages of [`crate::stages::NO_DEFAULT_FEATURES`] that are published without theirs.
///
/// Without that toolchain (the `prerequisites` stage could not install it) the default one
/// checks them instead, which proves less unless it is the same release: cargo refuses a
/// crate whose `rust-version` is newer than the compiler, but a newer compiler accepts APIs
/// the stated version lacks. Returns what was checked, for the summary.
fn check_msrv(msrv: &str) -> Result<String> {
    let toolchain = msrv_toolchain(msrv);
    let present = toolchain_present(&toolchain);
    let cargo = |args: &[&str]| {
        if present {
            util::rustup_cargo(&toolchain, args)
        } else {
            util::cargo(args)
        }
    };
    let note = if present {
        format!("built with Rust {toolchain}")
    } else {
        let out = util::cargo(["--version"]).output()?;
        let version = String::from_utf8_lossy(&out.stdout);
        let version = version.split_whitespace().nth(1).unwrap_or("?").to_string();
        let proves = if version == toolchain {
            "the same release, so the check holds"
        } else {
            "a newer release: only that rust-version is not above it is checked"
        };
        println!(
            "warning: the Rust {toolchain} toolchain is missing (the prerequisites stage could \
             not install it): checking with the default toolchain, cargo {version}, {proves}"
        );
        format!("Rust {toolchain} missing, built with the default cargo {version} ({proves})")
    };
    let mut all = vec!["check", "--locked", "--all-features"];
    for p in PUBLISHED {
        all.extend(["-p", p]);
    }
    util::run(&mut cargo(&all))?;
    for p in crate::stages::NO_DEFAULT_FEATURES
        .iter()
        .filter(|p| PUBLISHED.contains(p))
    {
        util::run(&mut cargo(&[
            "check",
            "--locked",
            "--no-default-features",
            "-p",
            p,
        ]))?;
    }
    Ok(note)
}

/// Makes a crate outside the workspace (in cargo's target directory) that depends on `zverbs`
/// by path, locks it, and fails if its lockfile names a crate of [`NEVER_IN_A_DEPENDENT`].
/// Returns the number of crates it locks.
fn dependent_lockfile() -> Result<usize> {
    let dir = util::target_dir().join("dependent");
    std::fs::create_dir_all(dir.join("src"))?;
    let shim = util::root().join("std-shim");
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"zverbs-dependent\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
             publish = false\n\n[dependencies]\nzverbs = {{ path = {:?} }}\n\n[workspace]\n",
            shim.display().to_string()
        ),
    )?;
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n")?;
    let _ = std::fs::remove_file(dir.join("Cargo.lock"));
    let mut cmd = util::cargo(["generate-lockfile"]);
    cmd.current_dir(&dir);
    util::run(&mut cmd)?;
    let lock = std::fs::read_to_string(dir.join("Cargo.lock"))?;
    let names = locked_names(&lock);
    let bad: Vec<&str> = names
        .iter()
        .map(String::as_str)
        .filter(|n| NEVER_IN_A_DEPENDENT.contains(n))
        .collect();
    if !bad.is_empty() {
        bail!(
            "a crate depending on zverbs locks {}: make it an optional dependency behind a \
             feature, or a dev-dependency ({})",
            bad.join(", "),
            dir.join("Cargo.lock").display()
        );
    }
    println!(
        "{} crates locked, none of {}",
        names.len(),
        NEVER_IN_A_DEPENDENT.join(", ")
    );
    Ok(names.len())
}

/// The package names of a `Cargo.lock`.
fn locked_names(lock: &str) -> Vec<String> {
    lock.lines()
        .filter_map(|l| l.strip_prefix("name = "))
        .map(|n| n.trim_matches('"').to_string())
        .collect()
}

/// What the registry says of a crate name.
#[derive(Debug, PartialEq)]
enum Published {
    /// Nothing by that name.
    No,
    /// Ours, last published at this version.
    Ours(String),
    /// Someone else's crate of the same name (its repository, if it names one).
    Other(Option<String>),
}

/// Asks the registry about `name` with `cargo info` (which reads the index, then the newest
/// package's manifest); fails when the registry cannot be asked.
fn published(name: &str, repository: &str) -> Result<Published> {
    let mut cmd = util::cargo(["info", name, "--registry", "crates-io", "--color", "never"]);
    cmd.stdin(Stdio::null());
    let out = cmd
        .output()
        .map_err(|e| anyhow!("cannot start `{}`: {e}", util::show(&cmd)))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    classify(name, out.status.success(), &stdout, &stderr, repository).ok_or_else(|| {
        anyhow!(
            "`{}` failed and did not say the crate is missing: is the registry reachable?\n{}",
            util::show(&cmd),
            stderr.trim()
        )
    })
}

/// What `cargo info`'s answer says, or `None` if it failed for another reason than an unknown
/// crate.
fn classify(
    name: &str,
    success: bool,
    stdout: &str,
    stderr: &str,
    repository: &str,
) -> Option<Published> {
    if !success {
        return stderr
            .contains(&format!("could not find `{name}` in registry"))
            .then_some(Published::No);
    }
    let field = |key: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().to_string())
    };
    let repo = field("repository:");
    let ours = repo
        .as_deref()
        .is_some_and(|r| same_repository(r, repository));
    if !ours {
        return Some(Published::Other(repo));
    }
    // `version: 0.1.0` or, when it is not the newest, `version: 0.1.0 (latest 0.2.0)`.
    let version = field("version:")?;
    let version = version.split_whitespace().next()?.to_string();
    Some(Published::Ours(version))
}

/// Whether two repository URLs name the same repository (case, a trailing `/` or `.git` aside).
fn same_repository(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        s.trim()
            .trim_end_matches('/')
            .trim_end_matches(".git")
            .to_ascii_lowercase()
    };
    norm(a) == norm(b)
}

/// `cargo semver-checks` for each published crate with a version of ours on the registry;
/// returns a note for the summary.
fn semver_checks(repository: &str) -> Result<String> {
    let mut baselines = Vec::new();
    for name in PUBLISHED {
        match published(name, repository)? {
            Published::No => {
                println!("{name}: not published yet: no version to compare with, skipped");
            }
            Published::Other(repo) => println!(
                "{name}: the registry's crate of that name is another project's (repository: \
                 {}), not a version of ours: skipped",
                repo.as_deref().unwrap_or("none given")
            ),
            Published::Ours(v) => {
                println!("{name}: last published {v}");
                baselines.push((*name, v));
            }
        }
    }
    if baselines.is_empty() {
        return Ok("semver-checks: nothing published yet, skipped".into());
    }
    if !util::succeeds(&mut util::cargo(["semver-checks", "--version"])) {
        util::run(&mut util::cargo([
            "install",
            "cargo-semver-checks",
            "--locked",
        ]))?;
    }
    for (name, version) in &baselines {
        util::run(&mut util::cargo([
            "semver-checks",
            "check-release",
            "--package",
            name,
            "--baseline-version",
            version,
        ]))?;
    }
    Ok(format!(
        "semver-checks: {} crates compatible with their last release",
        baselines.len()
    ))
}

/// The value of `key` in the root manifest's `[workspace.package]` table.
fn workspace_package_key(key: &str) -> Result<String> {
    let manifest = std::fs::read_to_string(util::root().join("Cargo.toml"))?;
    let table = manifest
        .split("\n[")
        .find(|t| t.starts_with("workspace.package]"))
        .ok_or_else(|| anyhow!("the workspace's Cargo.toml has no [workspace.package]"))?;
    toml_value(table, key)
        .ok_or_else(|| anyhow!("[workspace.package] of Cargo.toml has no string `{key}`"))
}

/// The string value of a top-level `key = "value"` line of a TOML text (the first one).
fn toml_value(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once('=')?;
        (k.trim() == key)
            .then(|| v.trim().trim_matches('"').to_string())
            .filter(|_| v.trim().starts_with('"'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packaged_lines_are_read_as_cargo_prints_them() {
        let lines: Vec<String> = [
            "    Updating crates.io index",
            "   Packaging zverbs-core v0.1.0 (/w/core)",
            "    Updating crates.io index",
            "    Packaged 20 files, 143.0KiB (40.8KiB compressed)",
            "   Packaging zverbs v0.1.0 (/w/std-shim)",
            "    Packaged 65 files, 1.2MiB (126.9KiB compressed)",
            "   Verifying zverbs-core v0.1.0 (/w/core)",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            parse_packaged(&lines),
            [
                Packaged {
                    name: "zverbs-core".into(),
                    version: "0.1.0".into(),
                    files: 20,
                    size: "143.0KiB".into(),
                    compressed: "40.8KiB".into(),
                },
                Packaged {
                    name: "zverbs".into(),
                    version: "0.1.0".into(),
                    files: 65,
                    size: "1.2MiB".into(),
                    compressed: "126.9KiB".into(),
                },
            ]
        );
        assert_eq!(kib("1.5MiB"), Some(1536.0));
        assert_eq!(kib("512B"), Some(0.5));
        assert_eq!(kib("12"), None);
    }

    #[test]
    fn the_msrv_toolchain_is_the_first_release_of_the_rust_version() {
        assert_eq!(msrv_toolchain("1.95"), "1.95.0");
        assert_eq!(msrv_toolchain("1.95.1"), "1.95.1");
    }

    const OURS: &str = "https://github.com/zverbs/zverbs";

    #[test]
    fn the_registry_s_answer_tells_ours_from_another_project_s() {
        let info = |repo: &str| {
            format!(
                "zverbs #rdma\nZero-allocation RDMA verbs\nversion: 0.2.0 (latest 0.3.0)\n\
                 license: MIT OR Apache-2.0\nrust-version: 1.95\nrepository: {repo}\n"
            )
        };
        assert_eq!(
            classify("zverbs", true, &info(OURS), "", OURS),
            Some(Published::Ours("0.2.0".into()))
        );
        assert_eq!(
            classify(
                "zverbs",
                true,
                &info("https://GitHub.com/zverbs/zverbs.git/"),
                "",
                OURS
            ),
            Some(Published::Ours("0.2.0".into()))
        );
        assert_eq!(
            classify(
                "zverbs",
                true,
                &info("https://github.com/someone/zverbs"),
                "",
                OURS
            ),
            Some(Published::Other(Some(
                "https://github.com/someone/zverbs".into()
            )))
        );
        assert_eq!(
            classify("zverbs", true, "zverbs\nversion: 0.0.1\n", "", OURS),
            Some(Published::Other(None))
        );
        // A crate the registry does not know; a registry that cannot be reached.
        assert_eq!(
            classify(
                "zverbs",
                false,
                "",
                "error: could not find `zverbs` in registry `https://github.com/rust-lang/crates.io-index`",
                OURS
            ),
            Some(Published::No)
        );
        assert_eq!(
            classify(
                "zverbs",
                false,
                "",
                "error: failed to get `zverbs` as a dependency: network unreachable",
                OURS
            ),
            None
        );
    }

    #[test]
    fn lockfile_names_and_manifest_values_are_read() {
        let lock = "version = 4\n\n[[package]]\nname = \"loom\"\nversion = \"0.7.3\"\n\n\
                    [[package]]\nname = \"zverbs\"\n";
        assert_eq!(locked_names(lock), ["loom", "zverbs"]);
        let manifest = "[package]\nname = \"x\"\nrust-version = \"1.95\"\nedition = 2024\n";
        assert_eq!(
            toml_value(manifest, "rust-version").as_deref(),
            Some("1.95")
        );
        assert_eq!(toml_value(manifest, "edition"), None);
        assert_eq!(toml_value(manifest, "version"), None);
    }

    #[test]
    fn the_workspace_states_the_values_the_stage_reads() {
        assert_eq!(
            workspace_package_key("repository").unwrap(),
            "https://github.com/zverbs/zverbs"
        );
        assert!(workspace_package_key("rust-version").is_ok());
    }
}

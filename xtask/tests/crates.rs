//! What each published crate carries beside its code, checked against the workspace: its
//! README (stating the workspace's minimum supported Rust version, as the root README does)
//! and copies of the root's license texts, which must not drift from them. The `crates` stage
//! of `cargo xtask test` checks the same in the packages cargo builds. And `loom` stays out of
//! the lockfile of a crate that depends on `zverbs`.

use std::path::Path;

/// The folders of the published crates.
const PUBLISHED: &[&str] = &["core", "mlx5dv", "sim", "ffi", "std-shim"];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `rust-version` of the root manifest's `[workspace.package]`.
fn msrv() -> String {
    let manifest = read(&root().join("Cargo.toml"));
    let table = &manifest[manifest.find("[workspace.package]").unwrap()..];
    let line = table
        .lines()
        .find(|l| l.starts_with("rust-version"))
        .expect("[workspace.package] states rust-version");
    line.split('"').nth(1).unwrap().to_string()
}

#[test]
fn each_published_crate_has_a_readme_stating_the_msrv() {
    let stated = format!("Rust {}", msrv());
    assert!(
        read(&root().join("README.md")).contains(&stated),
        "README.md does not say {stated:?}"
    );
    for dir in PUBLISHED {
        let manifest = read(&root().join(dir).join("Cargo.toml"));
        assert!(
            manifest.contains("readme = \"README.md\""),
            "{dir}/Cargo.toml has no `readme = \"README.md\"`"
        );
        let readme = read(&root().join(dir).join("README.md"));
        assert!(
            readme.contains(&stated),
            "{dir}/README.md does not say {stated:?}"
        );
        assert!(
            readme.contains("## License"),
            "{dir}/README.md has no License section"
        );
    }
}

#[test]
fn each_published_crate_carries_the_root_s_license_texts() {
    for file in ["LICENSE-MIT", "LICENSE-APACHE"] {
        let text = read(&root().join(file));
        for dir in PUBLISHED {
            assert!(
                read(&root().join(dir).join(file)) == text,
                "{dir}/{file} differs from the root's {file}: copy it over"
            );
        }
    }
}

/// A crate outside the workspace that depends on `zverbs` by path, as a user's does: its
/// `Cargo.lock` must not name `loom`, which serves only the workspace's loom models (an
/// optional dependency of `zverbs-core` behind its `loom` feature). A plain or
/// `cfg(zverbs_loom)` target dependency would be locked by every dependent, built or not.
#[test]
fn a_crate_depending_on_zverbs_locks_no_loom() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dependent-of-zverbs");
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let manifest = format!(
        "[package]\nname = \"dependent-of-zverbs\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\
         publish = false\n\n[dependencies]\nzverbs = {{ path = {:?} }}\n\n[workspace]\n",
        root().join("std-shim").display().to_string()
    );
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/main.rs"), "fn main() {}\n").unwrap();
    let _ = std::fs::remove_file(dir.join("Cargo.lock"));
    let out = std::process::Command::new(env!("CARGO"))
        .arg("generate-lockfile")
        .current_dir(&dir)
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "cargo generate-lockfile in {} failed:\n{}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let lock = read(&dir.join("Cargo.lock"));
    let names: Vec<&str> = lock
        .lines()
        .filter_map(|l| l.strip_prefix("name = "))
        .map(|n| n.trim_matches('"'))
        .collect();
    assert!(
        names.contains(&"zverbs") && names.contains(&"zverbs-core"),
        "the dependent's lockfile does not lock zverbs: {names:?}"
    );
    assert!(
        !names.contains(&"loom"),
        "a crate depending on zverbs locks loom ({}): make it an optional dependency behind a \
         feature, or a dev-dependency",
        dir.join("Cargo.lock").display()
    );
}

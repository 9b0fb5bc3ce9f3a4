//! What each published crate carries beside its code, checked against the workspace: its
//! README (stating the workspace's minimum supported Rust version, as the root README does)
//! and copies of the root's license texts, which must not drift from them. The `crates` stage
//! of `cargo xtask test` checks the same in the packages cargo builds.

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

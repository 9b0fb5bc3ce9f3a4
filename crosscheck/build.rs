//! Compiles the C probe (`c/probe.c`) against rdma-core's installed `<infiniband/mlx5dv.h>`.
//!
//! The header is required: without it the build fails with a message naming the package that
//! provides it, so the cross-checks can never be skipped silently.

use std::path::{Path, PathBuf};

/// Where rdma-core's headers are looked for, unless `ZVERBS_RDMA_INCLUDE` names a directory.
const DEFAULT_INCLUDE_DIRS: &[&str] = &["/usr/include", "/usr/local/include"];

fn main() {
    println!("cargo:rerun-if-changed=c/probe.c");
    println!("cargo:rerun-if-changed=c/probe.h");
    println!("cargo:rerun-if-changed=c/probe_x86.c");
    println!("cargo:rerun-if-env-changed=ZVERBS_RDMA_INCLUDE");

    let include = find_headers();
    for h in ["mlx5dv.h", "verbs.h"] {
        println!(
            "cargo:rerun-if-changed={}",
            include.join("infiniband").join(h).display()
        );
    }

    cc::Build::new()
        .file("c/probe.c")
        .include(&include)
        .include("c")
        .flag_if_supported("-std=gnu11")
        .compile("zverbs_probe");

    if std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64") {
        cc::Build::new()
            .file("c/probe_x86.c")
            .include(&include)
            .flag("-mssse3")
            .compile("zverbs_probe_x86");
    }
}

/// The directory holding `infiniband/mlx5dv.h` and `infiniband/verbs.h`, or a build failure
/// that says how to install them.
fn find_headers() -> PathBuf {
    let candidates: Vec<PathBuf> = match std::env::var_os("ZVERBS_RDMA_INCLUDE") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => DEFAULT_INCLUDE_DIRS.iter().map(PathBuf::from).collect(),
    };
    if let Some(dir) = candidates.iter().find(|d| has_headers(d)) {
        return dir.clone();
    }
    let looked: Vec<String> = candidates
        .iter()
        .map(|d| d.join("infiniband/mlx5dv.h").display().to_string())
        .collect();
    eprintln!(
        "\nerror: zverbs-crosscheck compares zverbs' mlx5 layouts with rdma-core's own header, \
         and that header is missing (looked for {}).\n\
         Install the package that provides it: libibverbs-dev (Debian/Ubuntu: \
         `sudo apt-get install libibverbs-dev`), or run `cargo xtask test`, which installs it.\n\
         Headers in another place: set ZVERBS_RDMA_INCLUDE to the directory holding \
         infiniband/mlx5dv.h.\n",
        looked.join(", ")
    );
    std::process::exit(1);
}

fn has_headers(dir: &Path) -> bool {
    let ib = dir.join("infiniband");
    ib.join("mlx5dv.h").is_file() && ib.join("verbs.h").is_file()
}

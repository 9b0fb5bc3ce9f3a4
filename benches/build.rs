//! Compiles the C baselines (`c/baseline.c`, `c/verbs_loop.c`) against rdma-core's installed
//! `<infiniband/mlx5dv.h>` and `<infiniband/verbs.h>`, with the optimisation level of the
//! profile (release for `cargo bench`), so the C side is built as a C user would build it.
//!
//! The headers are required: without them the build fails with a message naming the package
//! that provides them, so the comparison can never be skipped silently.

use std::path::{Path, PathBuf};

/// Where rdma-core's headers are looked for, unless `ZVERBS_RDMA_INCLUDE` names a directory.
const DEFAULT_INCLUDE_DIRS: &[&str] = &["/usr/include", "/usr/local/include"];

fn main() {
    for f in ["baseline.c", "baseline.h", "verbs_loop.c", "verbs_loop.h"] {
        println!("cargo:rerun-if-changed=c/{f}");
    }
    println!("cargo:rerun-if-env-changed=ZVERBS_RDMA_INCLUDE");

    let include = find_headers();
    for h in ["mlx5dv.h", "verbs.h"] {
        println!(
            "cargo:rerun-if-changed={}",
            include.join("infiniband").join(h).display()
        );
    }

    let mut build = cc::Build::new();
    build
        .file("c/baseline.c")
        .file("c/verbs_loop.c")
        .include(&include)
        .include("c")
        .flag_if_supported("-std=gnu11")
        .flag_if_supported("-Wall")
        .flag_if_supported("-Wextra")
        .flag_if_supported("-Wno-unused-parameter");
    // `cc` follows the profile: -O0 for `cargo test`, the release level for `cargo bench`.
    // The baselines are always optimised as C users build them (gcc -O2).
    build.opt_level(2);
    build.compile("zverbs_baseline");
    // `verbs_loop.c` loads libibverbs with dlopen (in libc since glibc 2.34; libdl before).
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-link-lib=dl");
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
        "\nerror: zverbs-benches compares the direct path with C baselines written against \
         rdma-core's own headers, and those headers are missing (looked for {}).\n\
         Install the package that provides them: libibverbs-dev (Debian/Ubuntu: \
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

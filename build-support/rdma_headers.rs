//! Finding rdma-core's headers, for the build scripts that compile C against them
//! (`crosscheck/`, `benches/`; included with `#[path]`).
//!
//! The headers are required: without them the build fails with a message naming the package
//! that provides them, so what they are built for can never be skipped silently.

use std::path::{Path, PathBuf};

/// Where rdma-core's headers are looked for, unless `ZVERBS_RDMA_INCLUDE` names a directory.
const DEFAULT_INCLUDE_DIRS: &[&str] = &["/usr/include", "/usr/local/include"];

/// The directory holding `infiniband/mlx5dv.h` and `infiniband/verbs.h`, with the
/// `rerun-if-changed` lines for both; or a build failure that says `what` needs them and how
/// to install them.
pub fn find(what: &str) -> PathBuf {
    println!("cargo:rerun-if-env-changed=ZVERBS_RDMA_INCLUDE");
    let candidates: Vec<PathBuf> = match std::env::var_os("ZVERBS_RDMA_INCLUDE") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => DEFAULT_INCLUDE_DIRS.iter().map(PathBuf::from).collect(),
    };
    if let Some(dir) = candidates.iter().find(|d| has_headers(d)) {
        for h in ["mlx5dv.h", "verbs.h"] {
            println!(
                "cargo:rerun-if-changed={}",
                dir.join("infiniband").join(h).display()
            );
        }
        return dir.clone();
    }
    let looked: Vec<String> = candidates
        .iter()
        .map(|d| d.join("infiniband/mlx5dv.h").display().to_string())
        .collect();
    eprintln!(
        "\nerror: {what} rdma-core's own headers, and they are missing (looked for {}).\n\
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

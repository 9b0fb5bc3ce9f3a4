//! Compiles the C baselines (`c/baseline.c`, `c/verbs_loop.c`) against rdma-core's installed
//! `<infiniband/mlx5dv.h>` and `<infiniband/verbs.h>`, with the optimisation level of the
//! profile (release for `cargo bench`), so the C side is built as a C user would build it.
//!
//! The headers are required: without them the build fails with a message naming the package
//! that provides them, so the comparison can never be skipped silently.

#[path = "../build-support/rdma_headers.rs"]
mod rdma_headers;

fn main() {
    for f in ["baseline.c", "baseline.h", "verbs_loop.c", "verbs_loop.h"] {
        println!("cargo:rerun-if-changed=c/{f}");
    }
    let include = rdma_headers::find(
        "zverbs-benches compares the direct path with C baselines written against",
    );

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

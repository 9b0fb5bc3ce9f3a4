//! Compiles the C probe (`c/probe.c`) against rdma-core's installed `<infiniband/mlx5dv.h>`.
//!
//! The header is required: without it the build fails with a message naming the package that
//! provides it, so the cross-checks can never be skipped silently.

#[path = "../build-support/rdma_headers.rs"]
mod rdma_headers;

fn main() {
    println!("cargo:rerun-if-changed=c/probe.c");
    println!("cargo:rerun-if-changed=c/probe.h");
    println!("cargo:rerun-if-changed=c/probe_x86.c");
    let include = rdma_headers::find("zverbs-crosscheck compares zverbs' mlx5 layouts with");

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

//! The FFI declarations match the system's rdma-core headers.

#[test]
fn every_size_offset_and_constant_matches_the_headers() {
    let (n, bad) = zverbs_abi::compare();
    eprintln!("checked {n} sizes, alignments, offsets and constants");
    assert!(bad.is_empty(), "mismatches: {bad:#?}");
    // Every struct contributes its size and alignment, and most fields an offset.
    assert!(n > 400, "only {n} items checked");
}

#[test]
fn the_probe_sees_real_values() {
    let c = zverbs_abi::c_table();
    let get = |k: &str| c.iter().find(|(n, _)| n == k).map(|(_, v)| *v);
    // Known from verbs.h on LP64: a ibv_sge is 16 bytes, ibv_wc 48, ibv_send_wr 128.
    assert_eq!(get("ibv_sge size"), Some(16));
    assert_eq!(get("ibv_wc size"), Some(48));
    assert_eq!(get("ibv_send_wr size"), Some(128));
    assert_eq!(get("IBV_WR_ATOMIC_FETCH_AND_ADD"), Some(6));
    // And from pmix_common.h: a 256-byte namespace and a rank; a type tag and a 24-byte union;
    // a 512-byte key, the directives and a value.
    assert_eq!(get("pmix_proc_t size"), Some(260));
    assert_eq!(get("pmix_value_t size"), Some(32));
    assert_eq!(get("pmix_info_t size"), Some(552));
    assert_eq!(get("PMIX_BYTE_OBJECT"), Some(27));
}

/// The `pub struct`, `pub union` and `pub const` names declared in `src` (not the associated
/// constants of type `Self`, which are values built in Rust).
fn declared(src: &str) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    for line in src.lines().map(str::trim_start) {
        if line.contains(": Self =") {
            continue;
        }
        for (kind, prefix) in [
            ("type", "pub struct "),
            ("type", "pub union "),
            ("const", "pub const "),
        ] {
            if let Some(rest) = line.strip_prefix(prefix) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.push((kind, name));
            }
        }
    }
    out
}

/// Every struct, union and constant of the binding, and the `mlx5dv_init_obj` out-structs the
/// direct path declares, is in the check: a declaration added without its entry in
/// `build.rs` fails here. What the check reaches another way is listed with the reason.
#[test]
fn every_declaration_is_in_the_check() {
    // Members that C declares inline (anonymous structs and unions), checked through the
    // offsets of the struct that holds them.
    const INLINE_IN_C: &[&str] = &[
        "ibv_send_wr_rdma",
        "ibv_send_wr_atomic",
        "ibv_send_wr_ud",
        "ibv_send_wr_qp_type",
        "ibv_send_wr_bind_mw",
        "ibv_send_wr_tso",
        "ibv_send_wr_ext",
        "mlx5dv_obj_pair",
        "mlx5dv_dc_init_attr_u",
        "rdma_cm_event_param",
        "mlx5dv_qp_wq",
        "mlx5dv_qp_bf",
        "ibv_async_event_element",
    ];
    // Opaque in C (only pointers are handled), or not a number the probe can print.
    // `MLX5_IB_MMAP_CMD_SHIFT` is in libmlx5's own header, not an installed one (the clock
    // page's offset is pinned by a const assert beside it, and the emulator test maps it).
    const UNCHECKABLE: &[&str] = &[
        "ibv_device",
        "VERBS_ABI_IS_EXTENDED",
        "MLX5_IB_MMAP_CMD_SHIFT",
        "CLOCK_INFO_PGOFF",
        // The head of `struct mlx5dv_context` (its offsets are asserted in `zverbs-ffi`; the
        // C struct is longer) and the room given for the whole of it.
        "mlx5dv_context_head",
        "MLX5DV_CONTEXT_ROOM",
        // The PMIx loader's own items (not C types), and the PMIx keys, which are strings:
        // their lengths are in the table as `sizeof(PMIX_…)`.
        "Pmix",
        "PmixLoadError",
        "FILE",
        "PACKAGE",
        "PMIX_JOB_SIZE",
        "PMIX_COLLECT_DATA",
        "PMIX_TIMEOUT",
    ];
    let sources = [
        include_str!("../../ffi/src/types.rs"),
        include_str!("../../ffi/src/cm.rs"),
        include_str!("../../ffi/src/pmix.rs"),
        include_str!("../../mlx5dv/src/prm/dv.rs"),
        include_str!("../../mlx5dv/src/prm/clock.rs"),
    ];
    let table = zverbs_abi::rust_table();
    let has = |name: &str| table.iter().any(|(n, _)| *n == name);
    let mut missing = Vec::new();
    let mut seen = 0;
    for (kind, name) in sources.iter().flat_map(|s| declared(s)) {
        seen += 1;
        if INLINE_IN_C.contains(&name.as_str()) || UNCHECKABLE.contains(&name.as_str()) {
            continue;
        }
        let checked = match kind {
            "type" => has(&format!("{name} size")),
            // librdmacm's event types are `RDMA_CM_EVENT_*` in C, `cm::event::*` here.
            _ => has(&name) || has(&format!("RDMA_CM_EVENT_{name}")),
        };
        if !checked {
            missing.push(name);
        }
    }
    assert!(seen > 100, "only {seen} declarations found");
    assert!(missing.is_empty(), "declared but not checked: {missing:?}");
}

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
}

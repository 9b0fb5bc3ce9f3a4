//! Prints the ABI check: every mismatch, then the count of checked sizes, offsets and
//! constants. Exits 1 on a mismatch.

fn main() {
    let (n, bad) = zverbs_abi::compare();
    for m in &bad {
        println!("MISMATCH {}: header {} declaration {}", m.name, m.c, m.rust);
    }
    println!(
        "checked {n} sizes, alignments, offsets and constants against rdma-core's headers: {} mismatches",
        bad.len()
    );
    if !bad.is_empty() {
        std::process::exit(1);
    }
}

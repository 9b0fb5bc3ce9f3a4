//! The memory of a process that creates and destroys queues on the software device for ever
//! stays flat: the device frees what is destroyed. Measured as the resident set of a child
//! process (this test binary run again, alone) over create/destroy cycles of a CQ and two QPs,
//! and over context open/close cycles (each with a CQ and a QP), after a warm-up; it prints
//! the figures.
//!
//! `ZVERBS_MEMORY_CYCLES=<create/destroy>,<context>` scales the cycle counts (20 000 and
//! 2 000 by default).
#![cfg(feature = "sim")]

use std::process::Command;

use zverbs::{ContextOptions, Pd};

/// Set in the child: run the cycles and report.
const CHILD: &str = "ZVERBS_MEMORY_CHILD";

/// Growth of the resident set allowed over all cycles (the allocator's own slack; the leak
/// this guards against was 72 KB a cycle).
const SLACK_KB: u64 = 16 * 1024;

fn rss_kb() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

fn cycles() -> (u32, u32) {
    std::env::var("ZVERBS_MEMORY_CYCLES")
        .ok()
        .and_then(|v| {
            let (a, b) = v.split_once(',')?;
            Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
        })
        .unwrap_or((20_000, 2_000))
}

/// A CQ and two connected QPs on `pd`, made and dropped.
fn queues(pd: &Pd) {
    let ctx = pd.context();
    let cq = ctx.cq_builder().cqe(256).build().unwrap();
    let a = pd.qp_builder(&cq, &cq).max_signaled(64).build().unwrap();
    let b = pd.qp_builder(&cq, &cq).max_signaled(64).build().unwrap();
    zverbs::connect_pair(&a, &b).unwrap();
}

/// A context with a CQ and a QP, opened and closed.
fn context() {
    let ctx =
        zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.cq_builder().build().unwrap();
    let _qp = pd.qp_builder(&cq, &cq).build().unwrap();
}

fn child() {
    let (n, m) = cycles();
    let ctx =
        zverbs::open_device(Some(zverbs::SOFTWARE_DEVICE), &ContextOptions::default()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    for _ in 0..n / 20 {
        queues(&pd);
    }
    let start = rss_kb();
    for _ in 0..n {
        queues(&pd);
    }
    let queues_end = rss_kb();
    for _ in 0..m / 20 {
        context();
    }
    let ctx_start = rss_kb();
    for _ in 0..m {
        context();
    }
    let ctx_end = rss_kb();
    println!("rss queues {n} {start} {queues_end}");
    println!("rss contexts {m} {ctx_start} {ctx_end}");
}

#[test]
fn memory_stays_flat_over_create_destroy_and_context_cycles() {
    if std::env::var_os(CHILD).is_some() {
        return child();
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "memory_stays_flat_over_create_destroy_and_context_cycles",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the child failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut seen = Vec::new();
    for l in text.lines() {
        // The harness may have printed the test's name before the first line on the same line.
        let Some(at) = l.find("rss ") else { continue };
        let f: Vec<&str> = l[at..].split_whitespace().collect();
        if let ["rss", what, cycles, before, after] = f[..] {
            let (before, after): (u64, u64) = (before.parse().unwrap(), after.parse().unwrap());
            println!("{what}: {cycles} cycles, resident {before} kB -> {after} kB");
            seen.push((what.to_string(), cycles.to_string(), before, after));
        }
    }
    assert_eq!(seen.len(), 2, "the child's report: {text}");
    for (what, cycles, before, after) in seen {
        assert!(
            after <= before + SLACK_KB,
            "{what}: the resident set grew from {before} kB to {after} kB over {cycles} cycles"
        );
    }
}

//! Runs one benchmark case on one side many times, for instruction counting under callgrind:
//!
//! ```text
//! cargo build --release -p zverbs-benches --example count
//! valgrind --tool=callgrind --toggle-collect='zverbs_benches::ours::post_write' \
//!     target/release/examples/count write ours 10000
//! ```
//!
//! `Collected` divided by the calls (and by the case's units) is the count per operation.
//! `count --list` prints the cases: name, units per call, the zverbs function and the C
//! function to toggle on, and what the case does (tab-separated); `cargo xtask bench
//! --instructions` reads it.

use std::process::ExitCode;

use zverbs_benches::cases::{CASES, Side, find, runner};

const USAGE: &str = "usage: count --list | count <case> <ours|c> [calls]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--list") {
        for c in CASES {
            if let (Some(ours), Some(c_fn)) = (c.ours_fn, c.c_fn) {
                println!("{}\t{}\t{}\t{}\t{}", c.name, c.units, ours, c_fn, c.about);
            }
        }
        return ExitCode::SUCCESS;
    }
    let (Some(name), Some(side)) = (args.first(), args.get(1)) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let Some(case) = find(name) else {
        eprintln!("count: no case {name:?}; `count --list` shows them");
        return ExitCode::from(2);
    };
    let side = match side.as_str() {
        "ours" => Side::Ours,
        "c" => Side::C,
        other => {
            eprintln!("count: side {other:?} is neither `ours` nor `c`");
            return ExitCode::from(2);
        }
    };
    let calls: u64 = match args.get(2).map(|a| a.parse()) {
        None => 10_000,
        Some(Ok(n)) => n,
        Some(Err(e)) => {
            eprintln!("count: calls: {e}");
            return ExitCode::from(2);
        }
    };
    let Some(mut r) = runner(case, side) else {
        eprintln!("count: {name} has no {} runner", side.name());
        return ExitCode::from(2);
    };
    r.run(calls);
    ExitCode::SUCCESS
}

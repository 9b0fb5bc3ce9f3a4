//! `cargo xtask <command>`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Commands:
//! - `demo`: the main job (see the README).
//! - `test`: everything CI runs.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprintln!("usage: cargo xtask <demo|test> [args]");
        return ExitCode::from(2);
    };
    match cmd.as_str() {
        other => {
            eprintln!("unknown command {other:?}; try: demo, test");
            ExitCode::from(2)
        }
    }
}

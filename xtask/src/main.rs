//! `cargo xtask <command>`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Commands:
//! - `demo [-- args]`: the main job (see the README).
//! - `test [--list] [--only a,b] [--skip a,b]`: everything CI runs, stage by stage.
//! - `loom`: the loom models and their mutants.
//! - `emu [--] program [args]`: runs a program on the emulated ConnectX.
//!
//! One module per command; `util` holds what they share (running commands, tables).

mod demo;
mod emu;
mod libtest;
mod loom;
mod nostd;
mod prereq;
mod test;
mod util;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command> [args]

commands:
  demo [-- args]                   the main job: build WQEs over ordinary memory and show them
  test [--list] [--only a,b] [--skip a,b]
                                   everything CI runs (prerequisites, fmt, clippy, tests, doc,
                                   no_std proof, loom models), with a summary
  loom                             the loom models, then each mutant (which loom must reject)
  emu [--] program [args]          runs a program on the emulated ConnectX (libibverbs and
                                   libmlx5 unmodified, the software device behind them)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    let result = match cmd.as_str() {
        "demo" => demo::main(rest),
        "test" => test::main(rest),
        "loom" => loom::main(rest),
        "emu" => emu::main(rest),
        "help" | "-h" | "--help" => {
            println!("{USAGE}");
            Ok(())
        }
        other => {
            eprintln!("unknown command {other:?}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nerror: {e}");
            ExitCode::FAILURE
        }
    }
}

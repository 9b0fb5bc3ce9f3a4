//! `cargo xtask <command>`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Commands:
//! - `demo [-- args]`: the main job (see the README).
//! - `test [--list] [--only a,b] [--skip a,b]`: everything CI runs, stage by stage.
//! - `loom`: the loom models and their mutants.
//! - `rxe [-- cmd]`: a command in the rxe VM (or on this host's RDMA devices).
//! - `run-checks PLAN RESULTS`: runs a plan of device checks; the rxe stage runs it inside
//!   the VM, where the xtask binary itself is reachable over the workspace share.
//!
//! One module per command (`vm` is the VM that `rxe` boots); `util` holds what they share
//! (running commands, tables).

mod demo;
mod libtest;
mod loom;
mod nostd;
mod prereq;
mod rxe;
mod test;
mod util;
mod vm;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command> [args]

commands:
  demo [-- args]                   the main job: build WQEs over ordinary memory and show them
  test [--list] [--only a,b] [--skip a,b]
                                   everything CI runs (prerequisites, fmt, clippy, tests, doc,
                                   no_std proof, loom models), with a summary
  loom                             the loom models, then each mutant (which loom must reject)
  rxe [--timeout S] -- CMD [ARGS]  run CMD in a qemu VM with rxe devices (rxe0; rxe1<->rxe2),
                                   in this directory, and exit with its code (125: VM failed);
                                   `cargo xtask rxe --help` for --host, --shell, --image";

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
        "rxe" => return rxe::main(rest),
        "run-checks" => rxe::checks::main(rest),
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

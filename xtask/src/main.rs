//! `cargo xtask <command>`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Commands:
//! - `demo [-- args]`: the main job (see the README).
//! - `test [--list] [--only a,b] [--skip a,b]`: everything CI runs, stage by stage.
//! - `loom`: the loom models and their mutants.
//! - `rxe [-- cmd]`: a command in the rxe VM (or on this host's RDMA devices).
//! - `run-checks PLAN RESULTS`: runs a plan of device checks; the rxe stage runs it inside
//!   the VM, where the xtask binary itself is reachable over the workspace share.
//! - `bench [--instructions | --fallback] [--quick] [--write-docs] [-- args]`: the direct
//!   path against the C baselines (criterion times, or callgrind instruction counts), or the
//!   libibverbs fallback against raw libibverbs on a device, with the ratios.
//! - `emu [--] program [args]`: runs a program on the emulated ConnectX.
//!
//! One module per command (`vm` is the VM that `rxe` boots); `util` holds what they share
//! (running commands, tables).

mod aarch64;
mod bench;
mod demo;
mod emu;
mod libtest;
mod loom;
mod miri;
mod nostd;
mod prereq;
mod rxe;
mod test;
mod util;
mod vm;

use std::process::ExitCode;

const USAGE: &str = "usage: cargo xtask <command> [args]

commands:
  demo [-- args]                   the main job: SEND and WRITE ping-pong on the software device
  test [--list] [--only a,b] [--skip a,b]
                                   everything CI runs (prerequisites, fmt, clippy, tests, doc,
                                   no_std proof, aarch64 under qemu-user, loom models), with a
                                   summary
  loom                             the loom models, then each mutant (which loom must reject)
  rxe [--timeout S] -- CMD [ARGS]  run CMD in a qemu VM with rxe devices (rxe0; rxe1<->rxe2),
                                   in this directory, and exit with its code (125: VM failed);
                                   `cargo xtask rxe --help` for --host, --shell, --image
  bench [--instructions] [--quick] [--write-docs] [--calls N] [-- criterion args]
                                   the direct path against C baselines on mlx5dv.h: criterion
                                   times (or callgrind instruction counts) with the ratios
  bench --fallback [--host] [--write-docs] [-- args]
                                   the libibverbs fallback against raw libibverbs, on rxe in
                                   the VM (or this machine's device with --host)
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
        "rxe" => return rxe::main(rest),
        "run-checks" => rxe::checks::main(rest),
        "bench" => bench::main(rest),
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

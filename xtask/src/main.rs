//! `cargo xtask <command>`: the project's automation, in Rust so it runs wherever cargo does.
//!
//! Commands:
//! - `demo [-- args]`: the main job (see the README).
//! - `test [--list] [--only a,b] [--skip a,b]`: everything CI runs, stage by stage
//!   ([`stages`], one file each; [`mod@test`] runs them).
//! - `loom`: the loom models and their mutants.
//! - `mutants [--crate core|mlx5dv] [-j N] [--timeout S] [--file GLOB] [--re RE] [--no-loom]`:
//!   mutation testing of the data-path crates with cargo-mutants, the score per crate
//!   ([`mutants`]).
//! - `rxe [-- cmd]`: a command in the rxe VM (or on this host's RDMA devices).
//! - `run-checks PLAN RESULTS`: runs a plan of device checks; the rxe stage runs it inside
//!   the VM, where the xtask binary itself is reachable over the workspace share.
//! - `bench [--instructions | --fallback | --rxe] [--quick] [--write-docs] [-- args]`: the
//!   direct path against the C baselines (criterion times, or callgrind instruction counts),
//!   the libibverbs fallback against raw libibverbs on a device, or `zverbs-perf` against
//!   perftest on rxe, with the ratios; `bench --ucx`: `zverbs-perf` against UCX's
//!   `ucx_perftest` on the emulated ConnectX.
//! - `emu [--] program [args]`: runs a program on the emulated ConnectX.
//!
//! Arguments are parsed with lexopt ([`cli`]); errors are `anyhow`'s ([`util::Result`]). Bad
//! arguments exit with 2, a failed command with 1.

mod bench;
mod cli;
mod demo;
mod disk;
mod libtest;
mod mutants;
mod packages;
mod report;
mod run;
mod rxe;
mod stages;
mod test;
mod util;
mod vm;

use std::process::ExitCode;

use cli::{Arg, Parser};

const USAGE: &str = "usage: cargo xtask <command> [args]

commands:
  demo [-- args]                   the main job: SEND and WRITE ping-pong on the software device
  test [--list] [--only a,b] [--skip a,b]
                                   everything CI runs (prerequisites, fmt, clippy, tests, doc,
                                   no_std proof, aarch64 under qemu-user, loom models), with a
                                   summary
  loom                             the loom models, then each mutant (which loom must reject)
  mutants [--crate core|mlx5dv] [-j N] [--timeout S] [--file GLOB] [--re REGEX] [--no-loom]
                                   cargo-mutants on zverbs-core and zverbs-mlx5dv with the
                                   tests that exercise them: caught / viable per crate and the
                                   survivors (hours for both crates; not part of `test`)
  rxe [--timeout S] -- CMD [ARGS]  run CMD in a qemu VM with rxe devices (rxe0; rxe1<->rxe2),
                                   in this directory, and exit with its code (125: VM failed);
                                   `cargo xtask rxe --help` for --host, --shell, --image
  bench [--instructions] [--quick] [--write-docs] [--calls N] [-- criterion args]
                                   the direct path against C baselines on mlx5dv.h: criterion
                                   times (or callgrind instruction counts) with the ratios
  bench --fallback [--host] [--write-docs] [-- args]
                                   the libibverbs fallback against raw libibverbs, on rxe in
                                   the VM (or this machine's device with --host)
  bench --rxe [--host] [--write-docs] [-- --rounds N --iters N --sizes A,B --inline N]
                                   zverbs-perf against perftest on rxe, as ratios
  bench --ucx [-- --rounds N --iters N]
                                   zverbs-perf against UCX's ucx_perftest (rc_mlx5) on the
                                   emulated ConnectX, as ratios
  emu [--] program [args]          runs a program on the emulated ConnectX (libibverbs and
                                   libmlx5 unmodified, the software device behind them)";

fn main() -> ExitCode {
    let mut p = Parser::from_env();
    let command = match p.next() {
        Ok(Some(Arg::Value(cmd))) => cmd,
        Ok(Some(Arg::Short('h') | Arg::Long("help"))) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Ok(None) => return bad_command("which command?"),
        Ok(Some(arg)) => return bad_command(&arg.unexpected().to_string()),
        Err(e) => return bad_command(&e.to_string()),
    };
    let result = match command.to_str() {
        Some("demo") => demo::main(p),
        Some("test") => test::main(p),
        Some("loom") => stages::loom::main(p),
        Some("mutants") => mutants::main(p),
        Some("rxe") => return rxe::main(p),
        Some("run-checks") => rxe::checks::main(p),
        Some("bench") => bench::main(p),
        Some("emu") => stages::connectx::main(p),
        Some("help") => {
            println!("{USAGE}");
            Ok(())
        }
        _ => return bad_command(&format!("unknown command {command:?}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if cli::is_usage(&e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("\nerror: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// No command, or one that does not exist: exit 2 with the usage.
fn bad_command(why: &str) -> ExitCode {
    eprintln!("{why}\n\n{USAGE}");
    ExitCode::from(2)
}

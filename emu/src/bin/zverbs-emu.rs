//! `zverbs-emu sysfs DIR`: writes the fake sysfs tree of the emulated ConnectX under `DIR`
//! (for `SYSFS_PATH`).
//!
//! `zverbs-emu inject PID FAULT`: injects a fault (`port-down`, `port-up`, `qp-fatal QPN`,
//! `device-fatal`) into the emulated device of process `PID` (in the namespace
//! `ZVERBS_EMU_NS` names, of the fabric whose sysfs tree `SYSFS_PATH` names), whose programs
//! read it with `ibv_get_async_event`.

use std::path::Path;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [cmd, dir] if cmd == "sysfs" => match zverbs_emu::sysfs::write_tree(Path::new(dir)) {
            Ok(()) => {
                println!("{dir}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("zverbs-emu: cannot write the sysfs tree under {dir}: {e}");
                ExitCode::FAILURE
            }
        },
        [cmd, pid, fault @ ..] if cmd == "inject" && !fault.is_empty() => {
            let ns = zverbs_emu::fabric::namespace();
            let Ok(pid) = pid.parse::<u32>() else {
                eprintln!("zverbs-emu: not a process id: {pid}");
                return ExitCode::from(2);
            };
            let key = zverbs_emu::fabric::hello::Key::from_env();
            match zverbs_emu::async_events::send_fault(&ns, key, pid, &fault.join(" ")) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("zverbs-emu: cannot inject into process {pid}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!(
                "usage: zverbs-emu sysfs DIR | zverbs-emu inject PID FAULT\n\nsysfs writes the fake sysfs tree of the emulated \
                 ConnectX under DIR; then run a program with\n  SYSFS_PATH=DIR \
                 LD_PRELOAD=<path to libzverbs_emu.so> program ...\n(`cargo xtask emu -- \
                 program ...` does all of it)\ninject sends FAULT (port-down, port-up, qp-fatal QPN, \
                 device-fatal) to the emulator of process PID, as a member of the fabric of the tree \
                 SYSFS_PATH names"
            );
            ExitCode::from(2)
        }
    }
}

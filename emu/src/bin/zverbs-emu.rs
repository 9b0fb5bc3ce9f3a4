//! `zverbs-emu sysfs DIR`: writes the fake sysfs tree of the emulated ConnectX under `DIR`
//! (for `SYSFS_PATH`).

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
        _ => {
            eprintln!(
                "usage: zverbs-emu sysfs DIR\n\nwrites the fake sysfs tree of the emulated \
                 ConnectX under DIR; then run a program with\n  SYSFS_PATH=DIR \
                 LD_PRELOAD=<path to libzverbs_emu.so> program ...\n(`cargo xtask emu -- \
                 program ...` does all of it)"
            );
            ExitCode::from(2)
        }
    }
}

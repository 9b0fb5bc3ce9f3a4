//! `zverbs-emu sysfs DIR [--ethernet [IFNAME]]`: writes the fake sysfs tree of the emulated
//! ConnectX under `DIR` (for `SYSFS_PATH`), with the key of its fabric (kept when the tree is
//! written again); with `--ethernet`, its Ethernet function `mlx5_1` too, whose port is the
//! interface `IFNAME` (named again by `ZVERBS_EMU_ETH_IF` in the programs, `docs/ethernet.md`).
//!
//! `zverbs-emu inject PID FAULT`: injects a fault (`port-down`, `port-up`, `qp-fatal QPN`,
//! `device-fatal`) into the emulated device of process `PID` (in the namespace
//! `ZVERBS_EMU_NS` names, of the fabric whose sysfs tree `SYSFS_PATH` names), whose programs
//! read it with `ibv_get_async_event`.

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

const USAGE: &str = "\
usage: zverbs-emu sysfs DIR [--ethernet [IFNAME]] | zverbs-emu inject PID FAULT

sysfs writes the fake sysfs tree of the emulated ConnectX under DIR, with its fabric's key;
then run a program with
  SYSFS_PATH=DIR LD_PRELOAD=<path to libzverbs_emu.so> program ...
(`cargo xtask emu -- program ...` does all of it)
inject sends FAULT (port-down, port-up, qp-fatal QPN, device-fatal) to the emulator of process
PID, as a member of the fabric of the tree SYSFS_PATH names (ZVERBS_EMU_NS its namespace)";

/// `sysfs DIR [--ethernet [IFNAME]]`: writes the tree under `dir`, with the Ethernet function
/// (its port the interface `IFNAME`) when `ethernet` is given.
fn sysfs(dir: &str, ethernet: Option<Option<&str>>) -> ExitCode {
    let root = Path::new(dir);
    let written = zverbs_emu::sysfs::write_tree(root).and_then(|()| match ethernet {
        Some(ifname) => zverbs_emu::sysfs::write_ethernet(root, ifname),
        None => Ok(()),
    });
    match written {
        Ok(()) => {
            println!("{dir}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("zverbs-emu: cannot write the sysfs tree under {dir}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let args: Vec<String> = match args.into_iter().map(OsString::into_string).collect() {
        Ok(a) => a,
        Err(bad) => {
            eprintln!(
                "zverbs-emu: argument `{}` is not UTF-8\n\n{USAGE}",
                bad.to_string_lossy()
            );
            return ExitCode::from(2);
        }
    };
    match args.as_slice() {
        [cmd, dir, eth, ifname @ ..]
            if cmd == "sysfs" && eth == "--ethernet" && ifname.len() <= 1 =>
        {
            sysfs(dir, Some(ifname.first().map(String::as_str)))
        }
        [cmd, dir] if cmd == "sysfs" => sysfs(dir, None),
        [cmd, pid, fault @ ..] if cmd == "inject" && !fault.is_empty() => {
            let ns = zverbs_emu::fabric::namespace();
            let Ok(pid) = pid.parse::<u32>() else {
                eprintln!("zverbs-emu: not a process id: {pid}");
                return ExitCode::from(2);
            };
            let key = zverbs_emu::fabric::hello::Key::from_env();
            match zverbs_emu::async_events::send_fault(&ns, key, pid, &fault.join(" ")) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => {
                    eprintln!("zverbs-emu: {e}");
                    ExitCode::from(2)
                }
                Err(e) => {
                    eprintln!("zverbs-emu: cannot inject into process {pid}: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

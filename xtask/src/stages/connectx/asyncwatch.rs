//! rdma-core's `ibv_asyncwatch`, unmodified, on the emulated ConnectX: it must print the
//! port-down and port-up that `zverbs-emu inject` sends its process (`docs/emulator.md`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{Proc, emulated, which};
use crate::util::{self, Result, Table, bail};

/// How long each line may take to appear.
const WAIT: Duration = Duration::from_secs(30);

/// Waits until the file `out` contains `text`; its contents.
fn wait_for(out: &Path, text: &str, what: &str) -> Result<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let s = std::fs::read_to_string(out).unwrap_or_default();
        if s.contains(text) {
            return Ok(s);
        }
        if Instant::now() > deadline {
            bail!("ibv_asyncwatch did not show {what} within {WAIT:?}:\n{s}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Runs `ibv_asyncwatch -d mlx5_0` (line-buffered through `stdbuf`, so that its lines reach
/// the file while it runs), injects a port-down and a port-up into its process, and checks
/// that it printed both events, in order.
pub(super) fn check(emu: &(PathBuf, PathBuf), table: &mut Table) -> Result<()> {
    let Some(watch) = which("ibv_asyncwatch") else {
        bail!("ibv_asyncwatch is not installed (Debian package ibverbs-utils)");
    };
    let Some(stdbuf) = which("stdbuf") else {
        bail!("stdbuf is not installed (Debian package coreutils)");
    };
    let ns = format!("xtask-{}-events", std::process::id());
    let mut c = Command::new(stdbuf);
    c.arg("-oL").arg(&watch).args(["-d", "mlx5_0"]);
    emulated(&mut c, &emu.0, &emu.1);
    c.env("ZVERBS_EMU_NS", &ns);
    println!("$ {}", util::show(&c));
    let dir = util::target_dir().join("emu/runs");
    std::fs::create_dir_all(&dir)?;
    let out = dir.join("ibv_asyncwatch.txt");
    let p = Proc::spawn(c, out.clone(), "ibv_asyncwatch".into())?;
    // `stdbuf` executes the program in its own process.
    let pid = p.child.id().to_string();
    wait_for(&out, "async event FD", "its async fd")?;
    let tool = emu.0.with_file_name("zverbs-emu");
    for fault in ["port-down", "port-up"] {
        let mut inject = Command::new(&tool);
        // A member of the watched program's fabric: its namespace and its sysfs tree (the key).
        inject
            .args(["inject", &pid, fault])
            .env("ZVERBS_EMU_NS", &ns)
            .env("SYSFS_PATH", &emu.1);
        util::run(&mut inject)?;
    }
    let text = wait_for(&out, "IBV_EVENT_PORT_ACTIVE", "the port coming up")?;
    drop(p);
    for l in text.lines() {
        println!("    {l}");
    }
    let down = text.find("event_type IBV_EVENT_PORT_ERR (10), port 1");
    let up = text.find("event_type IBV_EVENT_PORT_ACTIVE (9), port 1");
    if !matches!((down, up), (Some(d), Some(u)) if d < u) {
        bail!("ibv_asyncwatch: expected PORT_ERR then PORT_ACTIVE on port 1:\n{text}");
    }
    table.row(vec![
        "ibv_asyncwatch".into(),
        "an injected port-down and port-up".into(),
        "ok".into(),
    ]);
    Ok(())
}

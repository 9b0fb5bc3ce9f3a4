//! What every command shares: the workspace root, running commands with their command line
//! shown, stage timing and plain-text tables.

use std::ffi::{OsStr, OsString};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

pub use anyhow::{Error, anyhow, bail};

/// The result of a command or stage: its error is the message the user sees (`anyhow`, as
/// nothing matches on it).
pub type Result<T = ()> = anyhow::Result<T>;

/// The workspace root: the parent of this crate's directory.
pub fn root() -> PathBuf {
    // `cargo run` sets CARGO_MANIFEST_DIR at run time too; prefer it, so a moved checkout
    // still finds itself.
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    dir.parent().map(PathBuf::from).unwrap_or(dir)
}

/// Cargo's target directory, where the commands this xtask runs put what they build: as
/// `cargo metadata` reports it (so `CARGO_TARGET_DIR`, `build.target-dir` in a cargo config,
/// and a relative path, which those commands resolve in the workspace root, all count). Asked
/// once per run.
pub fn target_dir() -> PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let metadata = cargo(["metadata", "--format-version", "1", "--no-deps"])
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned());
        resolve_target_dir(
            metadata.as_deref(),
            std::env::var_os("CARGO_TARGET_DIR"),
            &root(),
        )
    })
    .clone()
}

/// The target directory: `target_directory` of `cargo metadata`'s output when there is one;
/// else `CARGO_TARGET_DIR` (relative to the workspace root, where this xtask runs cargo);
/// else the workspace's `target`.
pub fn resolve_target_dir(metadata: Option<&str>, env: Option<OsString>, root: &Path) -> PathBuf {
    if let Some(dir) = metadata.and_then(|m| crate::libtest::json_str(m, "target_directory")) {
        return PathBuf::from(dir);
    }
    match env.filter(|v| !v.is_empty()) {
        Some(v) => root.join(v),
        None => root.join("target"),
    }
}

/// A `cargo` command (the cargo that runs this xtask), in the workspace root.
pub fn cargo<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let program = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(program);
    cmd.args(args).current_dir(root());
    cmd
}

/// `rustup run <toolchain> cargo ARGS` in the workspace root, into the same target directory,
/// with the variables of the cargo that runs this xtask removed so that the toolchain's own
/// cargo, rustc and rustdoc are used.
pub fn rustup_cargo<I, S>(toolchain: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new("rustup");
    cmd.args(["run", toolchain, "cargo"])
        .args(args)
        .current_dir(root());
    for var in [
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTUP_TOOLCHAIN",
        "RUSTC_WRAPPER",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("CARGO_TARGET_DIR", target_dir());
    cmd
}

/// The command line as a shell would show it: environment assignments, then the program's
/// file name and the arguments.
pub fn show(cmd: &Command) -> String {
    let mut parts = Vec::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            parts.push(format!(
                "{}={}",
                k.to_string_lossy(),
                quote(&v.to_string_lossy())
            ));
        }
    }
    let program = PathBuf::from(cmd.get_program());
    let program = program
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| program.to_string_lossy().into_owned());
    parts.push(program);
    parts.extend(cmd.get_args().map(|a| quote(&a.to_string_lossy())));
    parts.join(" ")
}

/// Quotes `s` for a shell when it needs it.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Prints the command line, runs it with the terminal's stdio and fails unless it succeeds.
pub fn run(cmd: &mut Command) -> Result {
    println!("$ {}", show(cmd));
    let status = cmd
        .status()
        .map_err(|e| anyhow!("cannot start `{}`: {e}", show(cmd)))?;
    check(cmd, status)
}

/// Whether `cmd` runs and exits successfully, with its output discarded.
pub fn succeeds(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Prints the command line, runs it with its stdout and stderr merged into one stream (in the
/// order they were written), and hands every line to `on_line`, which says whether to echo it.
/// Returns the exit status; failing to start is an error.
pub fn run_lines(cmd: &mut Command, mut on_line: impl FnMut(&str) -> bool) -> Result<ExitStatus> {
    println!("$ {}", show(cmd));
    let (reader, writer) = std::io::pipe()?;
    cmd.stdin(Stdio::null())
        .stdout(writer.try_clone()?)
        .stderr(writer);
    let child = cmd.spawn();
    // `cmd` still holds this process's copies of the pipe's write end: replace them, so that
    // the reader sees end-of-file once the child and everything it started have exited.
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = child.map_err(|e| anyhow!("cannot start `{}`: {e}", show(cmd)))?;
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        if reader.read_until(b'\n', &mut buf)? == 0 {
            break;
        }
        let line = String::from_utf8_lossy(&buf);
        let line = line.trim_end_matches(['\n', '\r']);
        if on_line(line) {
            println!("{line}");
        }
    }
    Ok(child.wait()?)
}

/// Fails with the command line and its exit status unless `status` is success.
pub fn check(cmd: &Command, status: ExitStatus) -> Result {
    if status.success() {
        Ok(())
    } else {
        bail!("`{}` failed ({status})", show(cmd))
    }
}

/// A duration as seconds with one decimal, or minutes and seconds past a minute.
pub fn duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        format!("{}m{:04.1}s", (s / 60.0) as u64, s % 60.0)
    }
}

/// A plain-text table with a header row. Columns are left-aligned, except those whose header
/// is given with a leading `>`, which are right-aligned (numbers).
#[derive(Debug, Default)]
pub struct Table {
    rows: Vec<Vec<String>>,
    right: Vec<bool>,
}

impl Table {
    /// A table with these column headers (`">passed"`: right-aligned column "passed").
    pub fn new(headers: &[&str]) -> Self {
        Self {
            rows: vec![
                headers
                    .iter()
                    .map(|h| h.trim_start_matches('>').to_string())
                    .collect(),
            ],
            right: headers.iter().map(|h| h.starts_with('>')).collect(),
        }
    }

    /// Appends a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Prints the table, with a rule under the header and before the last row when `total`.
    pub fn print(&self, total: bool) {
        let cols = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let width: Vec<usize> = (0..cols)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        let rule = width
            .iter()
            .map(|w| "-".repeat(*w))
            .collect::<Vec<_>>()
            .join("  ");
        for (i, row) in self.rows.iter().enumerate() {
            if i == 1 || (total && i + 1 == self.rows.len() && i > 1) {
                println!("  {rule}");
            }
            let cells: Vec<String> = row
                .iter()
                .enumerate()
                .map(|(c, s)| {
                    if self.right.get(c).copied().unwrap_or(false) {
                        format!("{s:>w$}", w = width[c])
                    } else {
                        format!("{s:<w$}", w = width[c])
                    }
                })
                .collect();
            println!("  {}", cells.join("  ").trim_end());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn show_quotes_only_what_needs_it() {
        let mut cmd = Command::new("/usr/bin/cargo");
        cmd.args(["doc", "--workspace", "it's"])
            .env("RUSTDOCFLAGS", "-D warnings");
        assert_eq!(
            show(&cmd),
            r"RUSTDOCFLAGS='-D warnings' cargo doc --workspace 'it'\''s'"
        );
    }

    #[test]
    fn the_target_directory_is_cargo_s_own() {
        let root = Path::new("/w");
        // What cargo metadata reports wins (it knows the configs too).
        let meta =
            r#"{"packages":[],"target_directory":"/tmp/ztd","version":1,"workspace_root":"/w"}"#;
        assert_eq!(
            resolve_target_dir(Some(meta), Some("elsewhere".into()), root),
            Path::new("/tmp/ztd")
        );
        // Without it: CARGO_TARGET_DIR, a relative one in the workspace root.
        assert_eq!(
            resolve_target_dir(None, Some("/tmp/abs".into()), root),
            Path::new("/tmp/abs")
        );
        assert_eq!(
            resolve_target_dir(Some("not json"), Some("rel/t".into()), root),
            Path::new("/w/rel/t")
        );
        assert_eq!(resolve_target_dir(None, None, root), Path::new("/w/target"));
        assert_eq!(
            resolve_target_dir(None, Some("".into()), root),
            Path::new("/w/target")
        );
    }

    #[test]
    fn the_target_directory_follows_cargo_target_dir() {
        // The real cargo, with the variable set for it as a user would.
        let meta = cargo(["metadata", "--format-version", "1", "--no-deps"])
            .env("CARGO_TARGET_DIR", "some/relative/dir")
            .output()
            .unwrap();
        assert!(meta.status.success());
        let text = String::from_utf8_lossy(&meta.stdout);
        assert_eq!(
            resolve_target_dir(Some(&text), None, &root()),
            root().join("some/relative/dir")
        );
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(duration(Duration::from_millis(1234)), "1.2s");
        assert_eq!(duration(Duration::from_millis(83_400)), "1m23.4s");
    }

    #[test]
    fn run_lines_merges_stdout_and_stderr() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo one; echo two >&2; echo three"]);
        let mut seen = Vec::new();
        let status = run_lines(&mut cmd, |l| {
            seen.push(l.to_string());
            false
        })
        .unwrap();
        assert!(status.success());
        assert_eq!(seen, ["one", "two", "three"]);
    }
}

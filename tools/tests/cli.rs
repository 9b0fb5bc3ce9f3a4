//! The tools and examples as their users run them, on the software device: bad arguments and
//! bad environments are refused with a message and a non-zero exit, a peer that fails or falls
//! silent ends the run, and the device chosen is said. Every run has a deadline: a run that
//! passes it is killed and the test fails ("did not finish"), which is how a hang shows.
//!
//! The examples are built (by cargo, with this test's features) before they run. The runs that
//! need a device use the software device (feature `sim`).

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long any one run may take before it counts as hung.
const DEADLINE: Duration = Duration::from_secs(60);

/// What a run printed and how it ended.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Outcome {
    fn text(&self) -> String {
        format!(
            "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code, self.stdout, self.stderr
        )
    }
}

/// Runs `cmd` to its end, or kills it at [`DEADLINE`] and fails the test.
fn run(mut cmd: Command) -> Outcome {
    let shown = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {shown}: {e}"));
    // Drain the pipes while waiting, so a chatty child never blocks on a full one.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let o = Outcome {
        code: status.and_then(|s| s.code()),
        stdout: String::from_utf8_lossy(&out.join().unwrap()).into_owned(),
        stderr: String::from_utf8_lossy(&err.join().unwrap()).into_owned(),
    };
    assert!(
        status.is_some(),
        "{shown} did not finish within {DEADLINE:?} (hung):\n{}",
        o.text()
    );
    o
}

/// `program args`, with no device named by the environment and the backend chosen by the
/// program.
fn command(program: PathBuf, args: &[&str]) -> Command {
    let mut c = Command::new(program);
    c.args(args)
        .env_remove("ZVERBS_DEVICE")
        .env_remove("ZVERBS_BACKEND");
    c
}

fn perf(args: &[&str]) -> Command {
    command(env!("CARGO_BIN_EXE_zverbs-perf").into(), args)
}

/// An example of this package, built now (a no-op when `cargo test` already built it with these
/// features) so that the binary run is the one of this source and these features.
fn example(name: &str, args: &[&str]) -> Command {
    command(example_exe("zverbs-tools", name), args)
}

/// The executable of example `name` of `package` (this one, or the `zverbs` library's), built
/// once per test run.
fn example_exe(package: &str, name: &str) -> PathBuf {
    static BUILT: Mutex<Vec<(String, PathBuf)>> = Mutex::new(Vec::new());
    let key = format!("{package}/{name}");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    match built.iter().find(|(n, _)| *n == key) {
        Some((_, exe)) => exe.clone(),
        None => {
            let exe = build_example(package, name);
            built.push((key, exe.clone()));
            exe
        }
    }
}

/// `cargo build -p package --example name` with this test's profile and features (the
/// software device's, for the `zverbs` library's examples); the executable.
fn build_example(package: &str, name: &str) -> PathBuf {
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "-p", package, "--example", name])
        .arg("--message-format=json-render-diagnostics")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit());
    if !cfg!(debug_assertions) {
        c.arg("--release");
    }
    if !cfg!(feature = "sim") {
        c.arg("--no-default-features");
    }
    let out = c.output().expect("run cargo");
    assert!(out.status.success(), "cargo build --example {name} failed");
    let json = String::from_utf8_lossy(&out.stdout);
    let key = "\"executable\":\"";
    json.lines()
        .filter_map(|l| Some(&l[l.find(key)? + key.len()..]))
        .filter_map(|rest| rest.split_once('"').map(|(path, _)| PathBuf::from(path)))
        .find(|p| p.ends_with(Path::new("examples").join(name)))
        .unwrap_or_else(|| panic!("cargo built no example {name}"))
}

/// Asserts a refusal: exit code `code` and `message` on stderr.
fn refused(o: &Outcome, code: i32, message: &str) {
    assert_eq!(o.code, Some(code), "{}", o.text());
    assert!(
        o.stderr.contains(message),
        "expected {message:?}:\n{}",
        o.text()
    );
}

#[test]
fn zverbs_perf_refuses_out_of_range_numbers_at_once() {
    let max = u64::MAX.to_string();
    let cases: &[(&[&str], &str)] = &[
        (
            &["write_lat", "-s", "2147483649"],
            "-s 2147483649: use 1 to 2147483648",
        ),
        (&["write_lat", "-s", &max], "use 1 to 2147483648"),
        (&["write_lat", "-s", "0"], "-s 0: use 1 to"),
        (
            &["write_lat", "-n", "1000000000000"],
            "-n 1000000000000: use 1 to 1000000000",
        ),
        (&["write_lat", "-n", &max], "use 1 to 1000000000"),
        (&["send_bw", "-n", &max], "use 1 to 1000000000"),
        (&["write_lat", "--warmup", &max], "--warmup"),
        (
            &["write_bw", "-t", "4294967295"],
            "-t 4294967295: use 2 to 65536",
        ),
        (
            &["write_bw", "-r", "4294967295"],
            "-r 4294967295: use 2 to 65536",
        ),
        (&["write_lat", "-p", "0"], "-p 0: use 1 to 65535"),
        (&["write_lat", "--timeout", "0"], "--timeout 0: use 1 to"),
    ];
    for (args, message) in cases {
        let mut args = args.to_vec();
        args.extend(["-d", "zverbs_sim0"]);
        refused(&run(perf(&args)), 2, message);
    }
}

/// The raw Ethernet tests' own arguments are checked before any device is opened.
#[test]
fn zverbs_perf_refuses_raw_arguments_at_once() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["raw_lat", "-s", "59"],
            "a raw Ethernet frame is 60 to 9014 bytes",
        ),
        (
            &["raw_bw", "-s", "9015"],
            "a raw Ethernet frame is 60 to 9014 bytes",
        ),
        (&["raw_lat", "--cm"], "raw_lat takes none of --cm"),
        (&["raw_bw", "--ud"], "raw_bw takes none of --cm"),
        (&["raw_lat", "-D", "1"], "-D is for raw_bw"),
        (
            &["raw_lat", "--receive-only"],
            "--receive-only is for a raw_bw server",
        ),
        (
            &["raw_bw", "host", "--receive-only"],
            "--receive-only is for a raw_bw server",
        ),
        (
            &["raw_bw", "--histogram", "x.svg"],
            "--histogram is for latency tests",
        ),
        (
            &["raw_lat", "-B", "02:00:00:00:00"],
            "-B 02:00:00:00:00: not a MAC address",
        ),
        (&["raw_lat", "-E", "zz:00:00:00:00:00"], "not a MAC address"),
        (
            &["write_lat", "-B", "02:00:00:00:00:01"],
            "-B, -E, -D and --receive-only are for raw_lat and raw_bw",
        ),
    ];
    for (args, message) in cases {
        let mut args = args.to_vec();
        args.extend(["-d", "zverbs_sim0"]);
        refused(&run(perf(&args)), 2, message);
    }
}

/// `all2all` outside a PMIx launcher says how to launch it, before it opens any device; bad
/// options are refused first.
#[cfg(feature = "pmix")]
#[test]
#[ignore = "needs libpmix2 (PMIx): `cargo xtask test` installs it and runs this"]
fn zverbs_perf_all2all_outside_a_launcher_says_how_to_launch() {
    let mut c = perf(&["all2all", "-n", "10"]);
    c.env_remove("PMIX_NAMESPACE");
    let o = run(c);
    refused(&o, 1, "not started by a PMIx launcher");
    assert!(o.stderr.contains("mpirun -n N"), "{}", o.text());
    refused(
        &run(perf(&["all2all", "-s", "0"])),
        2,
        "-s 0: use 1 to 65536",
    );
}

/// Under Open MPI's `mpirun` (a PMIx launcher), `all2all` joins the job: alone, on the
/// software device, it runs (no peers) and reports, over RC and over DC; two processes cannot share the software
/// device, and are told so.
#[cfg(feature = "pmix")]
#[test]
#[ignore = "needs mpirun and libpmix2 (openmpi-bin): `cargo xtask test` installs them and runs this"]
fn zverbs_perf_all2all_joins_an_mpirun_job() {
    let mpirun = std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("mpirun"))
                .find(|p| p.is_file())
        })
        .expect("mpirun is not installed (Debian package openmpi-bin)");
    let job_with = |n: &str, extra: &[&str]| {
        let mut c = command(
            mpirun.clone(),
            &["--allow-run-as-root", "--oversubscribe", "-n", n],
        );
        c.arg(env!("CARGO_BIN_EXE_zverbs-perf"))
            .args(["all2all", "-d", "zverbs_sim0", "-n", "10"])
            .args(extra)
            .env("OMPI_MCA_mca_base_component_show_load_errors", "0");
        run(c)
    };
    let job = |n: &str| job_with(n, &[]);
    // Over DC a process has one DCI and one DCT, peers or none.
    let dc = job_with("1", &["--dc"]);
    assert_eq!(dc.code, Some(0), "{}", dc.text());
    assert!(dc.stdout.contains("RDMA WRITE over DC"), "{}", dc.text());
    assert!(
        dc.stdout.contains("scale: processes=1 qps=2.0"),
        "{}",
        dc.text()
    );
    let alone = job("1");
    assert_eq!(alone.code, Some(0), "{}", alone.text());
    assert!(
        alone.stdout.contains("all2all: 1 processes"),
        "{}",
        alone.text()
    );
    assert!(
        alone.stdout.contains("scale: processes=1 qps=0.0"),
        "{}",
        alone.text()
    );
    let two = job("2");
    assert_ne!(two.code, Some(0), "{}", two.text());
    assert!(
        two.stderr.contains("exists inside one process only"),
        "{}",
        two.text()
    );
}

#[test]
fn zverbs_perf_refuses_arguments_that_are_not_utf8() {
    let mut c = perf(&["write_lat", "-d"]);
    c.arg(OsStr::from_bytes(b"zverbs_sim\xff"));
    refused(&run(c), 2, "is not UTF-8");
}

#[test]
fn the_examples_refuse_out_of_range_arguments() {
    let max = u64::MAX.to_string();
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "pingpong",
            &["--iters", &max],
            "--iters 18446744073709551615: use 1 to 100000000",
        ),
        ("pingpong", &["--iters", "0"], "--iters 0: use 1 to"),
        ("pingpong", &["--size", &max], "at most 1073741824"),
        (
            "pingpong",
            &["--rc", "-r", "4294967295"],
            "-r 4294967295: use 2 to",
        ),
        ("pingpong", &["--rc", "-n", "0"], "-n 0: use 1 to"),
        ("pingpong", &["--rc", "-s", &max], "use 1 to 1073741824"),
        ("pingpong", &["--rc", "-d"], "-d needs a device name"),
        ("loopback", &["--gid-idx", "x"], "--gid-idx x: not a number"),
        ("loopback", &["--bogus"], "unknown option --bogus"),
        ("market_data", &["-C", "0"], "-C 0: use 1 to"),
        (
            "market_data",
            &["--group", "10.0.0.1"],
            "not a multicast address",
        ),
        (
            "market_data",
            &["--port", "65536"],
            "--port 65536: use 1 to 65535",
        ),
    ];
    for (name, args, message) in cases {
        refused(&run(example(name, args)), 2, message);
    }
}

/// Every program a user runs (`zverbs-perf`, the examples of this package and of the `zverbs`
/// library), given arguments that it does not take: it refuses them (or runs briefly on the
/// software device), and never panics (exit code 101, "panicked") or hangs. No argument names
/// a host: a client would wait for a server.
#[test]
fn no_program_panics_on_any_argument() {
    let big = "18446744073709551616"; // 2^64: fits no number type
    let max = u64::MAX.to_string();
    let not_utf8 = || OsStr::from_bytes(b"a\xffb").to_os_string();
    let words = |a: &[&str]| -> Vec<OsString> { a.iter().map(OsString::from).collect() };
    // What no program takes, alone and after each program's first words.
    let mut common: Vec<Vec<OsString>> = ["-1", "1.5", "", "-", "--bogus", "-x", big]
        .iter()
        .map(|a| words(&[a]))
        .collect();
    common.push(vec![not_utf8()]);
    let after = |first: &[&str]| -> Vec<Vec<OsString>> {
        let mut v: Vec<Vec<OsString>> = ["-1", "--bogus", "-s", "--size", big]
            .iter()
            .map(|a| words(&[first, &[*a][..]].concat()))
            .collect();
        let mut n = words(first);
        n.push(not_utf8());
        v.push(n);
        v
    };
    // Each program, with the arguments out of range in each place it takes a number.
    let perf: Vec<Vec<OsString>> = [
        vec!["write_lat", "-s", &max],
        vec!["write_lat", "-s", "2147483649"],
        vec!["send_bw", "-t", &max],
        vec!["send_bw", "-r", "1"],
        vec!["write_lat", "-n", "0"],
        vec!["write_lat", "--warmup", &max],
        vec!["write_lat", "--timeout", &max],
        vec!["write_lat", "-m", "1500"],
        vec!["write_lat", "-p", "65536"],
        vec!["write_lat", "-I", &max],
        vec!["write_lat", "-g", &max, "-n", "1"],
        vec!["write_lat", "-i", "300", "-n", "1"],
        vec!["send_lat", "--ud", "-s", "65536", "-n", "1"],
        vec!["all2all", "-s", &max],
        vec!["devices", "extra"],
    ]
    .iter()
    .map(|a| words(a))
    .chain(after(&["write_lat"]))
    .chain(after(&["all2all"]))
    .collect();
    let pingpong: Vec<Vec<OsString>> = [
        vec!["--size", &max],
        vec!["--iters", "0"],
        vec!["--rc", "-s", &max],
        vec!["--rc", "-n", &max],
        vec!["--ud", "-s", &max],
        vec!["--srq", "-q", &max],
        vec!["--srq", "-q", "0"],
    ]
    .iter()
    .map(|a| words(a))
    .chain(after(&["--rc"]))
    .chain(after(&["--ud"]))
    .chain(after(&["--srq"]))
    .collect();
    let positional =
        |sets: &[&[&str]]| -> Vec<Vec<OsString>> { sets.iter().map(|a| words(a)).collect() };
    let mut programs: Vec<(&str, PathBuf, Vec<Vec<OsString>>)> = vec![
        (
            "zverbs-perf",
            env!("CARGO_BIN_EXE_zverbs-perf").into(),
            perf,
        ),
        (
            "pingpong",
            example_exe("zverbs-tools", "pingpong"),
            pingpong,
        ),
        (
            "loopback",
            example_exe("zverbs-tools", "loopback"),
            positional(&[&["--gid-idx", &max], &["--backend", "x"], &["a", "b"]]),
        ),
        (
            "mcast",
            example_exe("zverbs-tools", "mcast"),
            positional(&[
                &["--send", "-S", &max],
                &["--recv", "-m", "x"],
                &["--send", "--recv"],
            ]),
        ),
        (
            "newcomer",
            example_exe("zverbs-tools", "newcomer"),
            positional(&[&["abc"], &["4294967296"]]),
        ),
        (
            "wqe_demo",
            example_exe("zverbs-tools", "wqe_demo"),
            Vec::new(),
        ),
        (
            "market_data",
            example_exe("zverbs-tools", "market_data"),
            positional(&[&["-C", &max], &["--group", "x"], &["--timeout", "0"]]),
        ),
    ];
    if cfg!(feature = "pmix") {
        programs.push((
            "pmix_rounds",
            example_exe("zverbs-tools", "pmix_rounds"),
            positional(&[&["abc"], &["4294967296"], &["1", "2"]]),
        ));
    }
    if cfg!(feature = "sim") {
        programs.extend([
            (
                "batched_writer",
                example_exe("zverbs", "batched_writer"),
                positional(&[
                    &["abc"],
                    &["10", "abc"],
                    &["10", "0"],
                    &["10", &max, &max],
                    &["10", "1", "0"],
                    &["10", "1", "1", &max],
                    &["10", "1", "1", "0"],
                    &["1", "1", "1", "1", "1"],
                ]),
            ),
            (
                "last_byte",
                example_exe("zverbs", "last_byte"),
                positional(&[
                    &["abc"],
                    &["10", "abc"],
                    &["10", &max],
                    &["10", "1"],
                    &["1", "2", "3"],
                ]),
            ),
            (
                "latency",
                example_exe("zverbs", "latency"),
                positional(&[
                    &["read"],
                    &["write", "abc"],
                    &["write", "0"],
                    &["send", "10", &max],
                    &["send", "10", "0"],
                    &["write", "1", "1", "1"],
                ]),
            ),
            (
                "rpc",
                example_exe("zverbs", "rpc"),
                positional(&[&["abc"], &["0"], &["1", "2"]]),
            ),
        ]);
    }
    for (name, exe, own) in &programs {
        for args in common.iter().chain(own) {
            let mut c = command(exe.clone(), &[]);
            c.args(args).env("ZVERBS_DEVICE", "zverbs_sim0");
            let o = run(c);
            assert!(
                o.code != Some(101) && !o.stderr.contains("panicked"),
                "{name} {args:?} panicked:\n{}",
                o.text()
            );
        }
    }
}

/// What needs a device: the software device.
#[cfg(feature = "sim")]
mod software_device {
    use super::*;
    use std::io::Write;
    use std::net::TcpListener;
    use zverbs::connect::RemoteRegion;
    use zverbs::connect::exchange::{
        DONE, EXT_LEN, MSG_LEN, decode, decode_ext, encode, encode_ext,
    };

    /// Whether this machine has no NIC (the software device is then the only one listed).
    fn no_nic() -> bool {
        zverbs::devices().is_ok_and(|l| l.iter().all(|d| d.is_software()))
    }

    /// The first line a tool prints when it takes the software device for want of a NIC: the
    /// reason names rdma-core when it is not installed (a fresh machine) and the missing
    /// device when it is (after `cargo xtask test` installed it).
    fn software_device_line() -> String {
        let missing = match zverbs::open_device(None, &zverbs::ContextOptions::default()) {
            Err(zverbs::Error::NoDevice {
                library: Some(l), ..
            }) => format!("rdma-core is not installed (package {})", l.package),
            _ => "no RDMA device on this machine".into(),
        };
        format!(
            "device: zverbs_sim0 (the software mlx5 device: {missing}; pass --device to choose)\n"
        )
    }

    /// The market-data receiver on the software device, its own feed: every datagram of the
    /// feed through a multicast rule into a striding queue, in order, none lost, with the
    /// latency percentiles from the send time in each packet to its device timestamp.
    #[test]
    fn the_market_data_receiver_takes_its_own_feed_in_order() {
        let o = run(example("market_data", &["-C", "5000"]));
        assert_eq!(o.code, Some(0), "{}", o.text());
        assert!(
            o.stdout
                .contains("striding queue of 8 WQEs x 512 strides of 128 bytes, device timestamps"),
            "{}",
            o.text()
        );
        assert!(
            o.stdout
                .contains("received 5000 in_order 5000 gaps 0 lost 0 late 0"),
            "{}",
            o.text()
        );
        assert!(
            o.stdout.contains("latency send -> receive (ns): min "),
            "{}",
            o.text()
        );
    }

    /// The newcomer's program runs every step (RC operations, SRQ, prepared requests, DC,
    /// round trips) with no `unsafe` in its source.
    #[test]
    fn the_newcomer_example_runs_every_step_without_unsafe() {
        let src = include_str!("../examples/newcomer.rs");
        assert!(
            src.contains("#![forbid(unsafe_code)]"),
            "the example forbids unsafe"
        );
        let code: Vec<&str> = src
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect();
        assert!(
            !code
                .iter()
                .any(|l| l.contains("unsafe {") || l.contains("unsafe fn")),
            "no unsafe in the example"
        );
        let o = run(example("newcomer", &["3"]));
        assert_eq!(o.code, Some(0), "{}", o.text());
        for step in [
            "write_imm: \"hello, B\"",
            "send/recv: \"a message\"",
            "read: \"read me\"",
            "fetch_add: old 40, new 42",
            "srq: 6 bytes into receive 10",
            "prepared: \"prepared\"",
            "dc: write \"over DC\", send of 7 bytes",
            "3 round trips",
        ] {
            assert!(o.stdout.contains(step), "{step}: {}", o.text());
        }
    }

    #[test]
    fn a_backend_variable_that_is_not_utf8_is_an_error_not_ignored() {
        let mut c = perf(&[
            "write_lat",
            "-d",
            "zverbs_sim0",
            "-n",
            "10",
            "--warmup",
            "0",
        ]);
        c.env("ZVERBS_BACKEND", OsStr::from_bytes(b"dir\xffect"));
        let o = run(c);
        refused(&o, 1, "ZVERBS_BACKEND=");
        assert!(o.stderr.contains("not UTF-8"), "{}", o.text());

        let mut c = example("pingpong", &["--iters", "10"]);
        c.env("ZVERBS_BACKEND", OsStr::from_bytes(b"\xff"));
        refused(&run(c), 1, "ZVERBS_BACKEND=");
    }

    /// A server that answers a `zverbs-perf` client's exchange with the client's own QP under
    /// LID 0 (which the software device takes for itself: the QP connects to itself; the exact
    /// address sent back would be refused as an echo) and a target one slot into the client's
    /// own buffer: the client's WRITEs then never change the byte it waits on, so it waits for
    /// a peer that never answers. `close` ends the connection right after the exchange;
    /// otherwise it stays open until the client ends.
    fn silent_peer(close: bool, client_args: &[&str]) -> Outcome {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port().to_string();
        let mut args = vec!["write_lat", "127.0.0.1", "-p", &port, "-d", "zverbs_sim0"];
        args.extend(client_args);
        let client = std::thread::spawn({
            let c = perf(&args);
            move || run(c)
        });
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut hello = [0u8; MSG_LEN + EXT_LEN];
        s.read_exact(&mut hello).unwrap();
        let mut endpoint = decode(hello[..MSG_LEN].try_into().unwrap()).unwrap();
        assert_ne!(endpoint.lid, 0);
        endpoint.lid = 0;
        let (region, app) = decode_ext(hello[MSG_LEN..].try_into().unwrap()).unwrap();
        let region = region.expect("the client offers its buffer");
        let shifted = RemoteRegion {
            addr: region.addr + 64,
            ..region
        };
        s.write_all(&encode(&endpoint)).unwrap();
        s.write_all(&encode_ext(Some(shifted), &app).unwrap())
            .unwrap();
        let mut done = [0u8; 5];
        s.read_exact(&mut done).unwrap();
        assert_eq!(&done, DONE);
        if close {
            drop(s);
            client.join().unwrap()
        } else {
            let o = client.join().unwrap();
            drop(s);
            o
        }
    }

    #[test]
    fn zverbs_perf_ends_when_the_peer_closes_the_connection() {
        let o = silent_peer(true, &["-n", "10", "--warmup", "0", "--timeout", "600"]);
        refused(&o, 1, "the peer closed the connection");
        assert!(
            o.stderr.contains("waiting for the peer's WRITE"),
            "{}",
            o.text()
        );
    }

    #[test]
    fn zverbs_perf_ends_when_the_peer_falls_silent_for_its_timeout() {
        let o = silent_peer(false, &["-n", "10", "--warmup", "0", "--timeout", "1"]);
        refused(&o, 1, "nothing from the peer for 1 s");
        assert!(o.stderr.contains("--timeout"), "{}", o.text());
    }

    #[test]
    fn zverbs_perf_runs_both_sides_on_the_software_device() {
        for (test, port) in [("write_lat", "18601"), ("send_bw", "18602")] {
            let o = run(perf(&[
                test,
                "-n",
                "200",
                "--warmup",
                "10",
                "-p",
                port,
                "-d",
                "zverbs_sim0",
            ]));
            assert_eq!(o.code, Some(0), "{test}: {}", o.text());
            assert!(o.stdout.contains("zverbs_sim0"), "{}", o.text());
            assert!(
                o.stdout.contains(" 200 "),
                "{test} reports its iterations: {}",
                o.text()
            );
        }
    }

    /// The numbers of the row under a perftest-style header line that contains `header`.
    fn row_under(out: &str, header: &str) -> Vec<f64> {
        let mut lines = out.lines();
        while let Some(l) = lines.next() {
            if l.contains(header) {
                return lines
                    .next()
                    .unwrap_or("")
                    .split_whitespace()
                    .filter_map(|w| w.parse().ok())
                    .collect();
            }
        }
        Vec::new()
    }

    /// `raw_lat` and `raw_bw` on the software device, both sides in this process, each
    /// steering frames to its own MAC into a striding queue read in place (the device loops
    /// the port back): every ping answered, its latency row complete; the server's count of
    /// the streamed frames told back to the client, within what was sent.
    #[test]
    fn zverbs_perf_raw_tests_run_both_sides_on_the_software_device() {
        let o = run(perf(&[
            "raw_lat",
            "-n",
            "300",
            "--warmup",
            "10",
            "-p",
            "18611",
            "-d",
            "zverbs_sim0",
            "--timeout",
            "5",
        ]));
        assert_eq!(o.code, Some(0), "{}", o.text());
        assert!(
            o.stdout
                .contains("receive: a striding work queue behind an RSS QP, packets in place"),
            "{}",
            o.text()
        );
        // #bytes #iterations t_min t_typical t_p99 t_p99.9 t_max t_avg t_stdev
        let r = row_under(&o.stdout, "t_typical[us]");
        assert_eq!(r.len(), 9, "{}", o.text());
        assert_eq!((r[0], r[1]), (64.0, 300.0), "{}", o.text());
        assert!(r[2] > 0.0 && r[2] <= r[3] && r[3] <= r[6], "{}", o.text());

        let o = run(perf(&[
            "raw_bw",
            "-n",
            "20000",
            "-s",
            "128",
            "-p",
            "18612",
            "-d",
            "zverbs_sim0",
        ]));
        assert_eq!(o.code, Some(0), "{}", o.text());
        // #bytes #iterations BW average BW Gbit/s MsgRate
        let r = row_under(&o.stdout, "MsgRate[Mpps]");
        assert_eq!(r.len(), 5, "{}", o.text());
        assert_eq!((r[0], r[1]), (128.0, 20000.0), "{}", o.text());
        assert!(r[4] > 0.0, "{}", o.text());
        let told = o
            .stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("the server received "))
            .unwrap_or_else(|| panic!("the server's count: {}", o.text()));
        let w: Vec<&str> = told.split_whitespace().collect();
        let (got, sent): (u64, u64) = (w[0].parse().unwrap(), w[2].parse().unwrap());
        assert_eq!(sent, 20000, "{}", o.text());
        // Ethernet has no flow control: frames the receive queue had no room for are lost;
        // most arrive.
        assert!(got > 0 && got <= sent, "{}", o.text());
    }

    /// A client whose window (`-t`) is deeper than the server's receive queue (`-r`): SENDs
    /// that find no receive posted are sent again until one is, and the test completes. (Small
    /// messages: the device then outruns the server's reposting at once; with 6 RNR retries the
    /// 65th SEND failed every time.)
    #[test]
    fn zverbs_perf_send_bw_outruns_a_shallow_receive_queue_and_completes() {
        let o = run(perf(&[
            "send_bw",
            "-t",
            "128",
            "-r",
            "64",
            "-s",
            "8",
            "-n",
            "3000",
            "-p",
            "18606",
            "-d",
            "zverbs_sim0",
        ]));
        assert_eq!(o.code, Some(0), "{}", o.text());
        assert!(o.stdout.contains(" 3000 "), "{}", o.text());
    }

    /// `--hw-ts` with `--events`: one CQ with both timestamps and a channel, the waits sleeping
    /// on it and reading the timestamps.
    #[test]
    fn zverbs_perf_sleeps_on_events_with_completion_timestamps() {
        let o = run(perf(&[
            "send_lat",
            "-n",
            "200",
            "--warmup",
            "10",
            "-p",
            "18605",
            "-d",
            "zverbs_sim0",
            "--hw-ts",
            "--events",
        ]));
        assert_eq!(o.code, Some(0), "{}", o.text());
        assert!(o.stdout.contains("measured by the NIC"), "{}", o.text());
        assert!(
            o.stdout.contains("with completion timestamps"),
            "{}",
            o.text()
        );
    }

    #[test]
    fn zverbs_perf_draws_the_latency_picture_and_writes_the_counts() {
        let dir = std::env::temp_dir().join(format!("zverbs-perf-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, port) in [("lat.svg", "18603"), ("lat.csv", "18604")] {
            let file = dir.join(name);
            let o = run(perf(&[
                "write_lat",
                "-n",
                "300",
                "--warmup",
                "0",
                "-p",
                port,
                "-d",
                "zverbs_sim0",
                "--histogram",
                file.to_str().unwrap(),
            ]));
            assert_eq!(o.code, Some(0), "{}", o.text());
            assert!(o.stdout.contains("histogram written to"), "{}", o.text());
            let text = std::fs::read_to_string(&file).unwrap();
            if name.ends_with(".svg") {
                for part in ["Latency by percentile", "Histogram", ">99.9%<", "p99.9 "] {
                    assert!(text.contains(part), "{part:?} missing from the SVG");
                }
            } else {
                let mut lines = text.lines();
                assert_eq!(lines.next(), Some("bin_start_ns,bin_end_ns,count"));
                let counted: u64 = lines
                    .map(|l| l.rsplit(',').next().unwrap().parse::<u64>().unwrap())
                    .sum();
                assert_eq!(counted, 300, "every measured iteration, once:\n{text}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn zverbs_perf_says_which_device_and_why() {
        let mut c = perf(&["write_lat", "-n", "20", "--warmup", "0"]);
        c.env("ZVERBS_DEVICE", "zverbs_sim0");
        let o = run(c);
        assert_eq!(o.code, Some(0), "{}", o.text());
        assert!(
            o.stdout
                .starts_with("device: zverbs_sim0 (named by ZVERBS_DEVICE)\n"),
            "{}",
            o.text()
        );
        if no_nic() {
            // Both sides here: the software device, asked for by name, and said so.
            let o = run(perf(&["write_lat", "-n", "20", "--warmup", "0"]));
            assert_eq!(o.code, Some(0), "{}", o.text());
            assert!(
                o.stdout.starts_with(&software_device_line()),
                "{}",
                o.text()
            );
            // A client of a server elsewhere: the software device cannot reach it, so no
            // substitute; the error says how to ask for it.
            let o = run(perf(&["write_lat", "127.0.0.1", "-p", "9"]));
            refused(&o, 1, "no RDMA device");
            assert!(
                o.stderr.contains("ZVERBS_DEVICE=zverbs_sim0"),
                "{}",
                o.text()
            );
        }
    }

    #[test]
    fn the_demo_says_which_device_and_why() {
        let mut c = example("pingpong", &["--iters", "50"]);
        c.env("ZVERBS_DEVICE", "zverbs_sim0");
        let o = run(c);
        assert_eq!(o.code, Some(0), "{}", o.text());
        assert!(
            o.stdout
                .starts_with("device: zverbs_sim0 (named by ZVERBS_DEVICE)\n"),
            "{}",
            o.text()
        );
        if no_nic() {
            let o = run(example("pingpong", &["--op", "write", "--iters", "50"]));
            assert_eq!(o.code, Some(0), "{}", o.text());
            assert!(
                o.stdout.starts_with(&software_device_line()),
                "{}",
                o.text()
            );
            // The `--rc` peer is another process: no substitute.
            let o = run(example("pingpong", &["--rc", "127.0.0.1", "-p", "9"]));
            refused(&o, 1, "no RDMA device");
        }
    }
}

/// Without the software device in the build and without a NIC, nothing runs, and the error
/// says why.
#[cfg(not(feature = "sim"))]
#[test]
fn without_the_software_device_and_a_nic_the_tools_say_what_is_missing() {
    if !zverbs::devices().is_ok_and(|l| l.is_empty()) {
        return;
    }
    let o = run(perf(&["write_lat", "-n", "20"]));
    refused(&o, 1, "no RDMA device");
    assert!(o.stderr.contains("left out of this build"), "{}", o.text());
    let o = run(example("pingpong", &["--iters", "20"]));
    refused(&o, 1, "no RDMA device");
}

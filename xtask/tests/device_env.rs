//! What device tests rely on, checked where they run: inside the rxe VM (the `rxe` stage of
//! `cargo xtask test`) or on a host with real devices (`ZVERBS_RXE=host`). The devices are the
//! ones the `ZVERBS_TEST_*` variables name (docs/testing.md). Without `ZVERBS_TEST_DEVICE` (an
//! ordinary `cargo test` on a machine without devices) each test returns at once.
//!
//! These tests also prove the harness itself: they are built on the host, run in the guest
//! one process per test, and reach rdma-core through `dlopen` as the library does.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fs;

/// The devices named by the environment, with their addresses when given.
fn devices() -> Option<Vec<(String, Option<String>)>> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(device) = var("ZVERBS_TEST_DEVICE") else {
        println!("skipped: ZVERBS_TEST_DEVICE is not set");
        return None;
    };
    let mut d = vec![(device, var("ZVERBS_TEST_ADDR"))];
    if let Some(pair) = var("ZVERBS_TEST_PAIR") {
        let addrs = var("ZVERBS_TEST_PAIR_ADDRS");
        let addrs: Vec<Option<String>> = match &addrs {
            Some(a) => a.split(',').map(|s| Some(s.to_string())).collect(),
            None => vec![None, None],
        };
        for (name, addr) in pair.split(',').zip(addrs) {
            d.push((name.to_string(), addr));
        }
    }
    Some(d)
}

fn gid_index() -> u32 {
    std::env::var("ZVERBS_TEST_GID_INDEX")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

#[test]
fn every_named_device_has_an_active_port() {
    let Some(devices) = devices() else { return };
    for (d, _) in devices {
        let path = format!("/sys/class/infiniband/{d}/ports/1/state");
        let state = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert!(state.contains("ACTIVE"), "{d}: port 1 is {state:?}");
    }
}

#[test]
fn every_named_device_has_a_verbs_node_that_opens() {
    let Some(devices) = devices() else { return };
    let nodes: Vec<(String, String)> = fs::read_dir("/sys/class/infiniband_verbs")
        .expect("/sys/class/infiniband_verbs (is ib_uverbs loaded?)")
        .filter_map(|e| {
            let e = e.ok()?;
            let ibdev = fs::read_to_string(e.path().join("ibdev")).ok()?;
            Some((ibdev.trim().to_string(), e.file_name().into_string().ok()?))
        })
        .collect();
    for (d, _) in devices {
        let (_, node) = nodes
            .iter()
            .find(|(ibdev, _)| *ibdev == d)
            .unwrap_or_else(|| panic!("{d}: no uverbs node among {nodes:?}"));
        let dev = format!("/dev/infiniband/{node}");
        fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&dev)
            .unwrap_or_else(|e| panic!("{dev} ({d}): {e}"));
    }
}

/// The sysfs form of an IPv4-mapped GID: `0000:0000:0000:0000:0000:ffff:c612:0001`.
fn ipv4_gid(addr: &str) -> String {
    let o: Vec<u8> = addr
        .split('.')
        .map(|p| p.parse().expect("an IPv4 address"))
        .collect();
    assert_eq!(o.len(), 4, "{addr}: not an IPv4 address");
    format!(
        "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}",
        o[0], o[1], o[2], o[3]
    )
}

#[test]
fn the_gid_index_holds_each_device_address() {
    let Some(devices) = devices() else { return };
    let idx = gid_index();
    for (d, addr) in devices {
        let Some(addr) = addr else { continue };
        let path = format!("/sys/class/infiniband/{d}/ports/1/gids/{idx}");
        let gid = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        assert_eq!(gid.trim(), ipv4_gid(&addr), "{d}: GID {idx} is not {addr}");
    }
}

#[test]
fn locked_memory_allows_registering_buffers() {
    if devices().is_none() {
        return;
    }
    let limits = fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max locked memory"))
        .expect("a locked-memory line");
    let soft = line.split_whitespace().nth(3).expect("a soft limit");
    if soft != "unlimited" {
        let bytes: u64 = soft.parse().expect("a number of bytes");
        assert!(
            bytes >= 64 << 20,
            "locked memory is limited to {bytes} bytes; raise it (`ulimit -l unlimited`)"
        );
    }
}

type GetDeviceList = unsafe extern "C" fn(*mut c_int) -> *mut *mut c_void;
type GetDeviceName = unsafe extern "C" fn(*mut c_void) -> *const c_char;
type FreeDeviceList = unsafe extern "C" fn(*mut *mut c_void);

/// `dlopen`s a library and looks up a symbol, panicking with `dlerror` on failure.
fn symbol(lib: &str, name: &str) -> *mut c_void {
    let lib_c = CString::new(lib).expect("no NUL");
    let name_c = CString::new(name).expect("no NUL");
    // SAFETY: dlopen gets a NUL-terminated name; loading rdma-core runs only its own
    // initialisers, which have no preconditions.
    let handle = unsafe { libc::dlopen(lib_c.as_ptr(), libc::RTLD_NOW) };
    assert!(!handle.is_null(), "dlopen {lib}: {}", dlerror());
    // SAFETY: `handle` is a live handle from dlopen (never closed); the name is NUL-terminated.
    let sym = unsafe { libc::dlsym(handle, name_c.as_ptr()) };
    assert!(!sym.is_null(), "dlsym {name}: {}", dlerror());
    sym
}

fn dlerror() -> String {
    // SAFETY: dlerror returns NULL or a NUL-terminated string valid until the next dl call
    // on this thread; it is copied at once.
    unsafe {
        let e = libc::dlerror();
        if e.is_null() {
            String::from("(no error)")
        } else {
            CStr::from_ptr(e).to_string_lossy().into_owned()
        }
    }
}

#[test]
fn libibverbs_lists_every_named_device() {
    let Some(devices) = devices() else { return };
    // SAFETY: the symbols have these C signatures in <infiniband/verbs.h>.
    let (get, name, free) = unsafe {
        (
            std::mem::transmute::<*mut c_void, GetDeviceList>(symbol(
                "libibverbs.so.1",
                "ibv_get_device_list",
            )),
            std::mem::transmute::<*mut c_void, GetDeviceName>(symbol(
                "libibverbs.so.1",
                "ibv_get_device_name",
            )),
            std::mem::transmute::<*mut c_void, FreeDeviceList>(symbol(
                "libibverbs.so.1",
                "ibv_free_device_list",
            )),
        )
    };
    let mut n: c_int = 0;
    // SAFETY: `n` is a valid out-pointer; the list is freed below and not used after.
    let list = unsafe { get(&mut n) };
    assert!(!list.is_null(), "ibv_get_device_list failed");
    let mut names = Vec::new();
    for i in 0..usize::try_from(n).unwrap_or(0) {
        // SAFETY: the list holds `n` device pointers; each name is a NUL-terminated string
        // owned by the device, copied before the list is freed.
        names.push(unsafe {
            CStr::from_ptr(name(*list.add(i)))
                .to_string_lossy()
                .into_owned()
        });
    }
    // SAFETY: `list` came from ibv_get_device_list and is freed once.
    unsafe { free(list) };
    for (d, _) in devices {
        assert!(names.contains(&d), "libibverbs lists {names:?}, not {d}");
    }
    // librdmacm loads too (connection set-up through rdma_cm needs it).
    symbol("librdmacm.so.1", "rdma_create_event_channel");
}

#[test]
fn ipv4_gids_are_spelled_as_sysfs_does() {
    assert_eq!(
        ipv4_gid("198.18.0.1"),
        "0000:0000:0000:0000:0000:ffff:c612:0001"
    );
}

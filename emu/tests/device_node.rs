//! What UCX asks of the emulated ConnectX beyond rdma-core's own calls, checked through the
//! unmodified libibverbs and libmlx5 (or libc) under the emulator:
//!
//! - the device node passes the checks a program makes before opening it: `stat`, `lstat`,
//!   `access`, `faccessat` (a character device, `1:3` as sysfs says, readable and writable),
//!   and an opened descriptor's `fstat` says the same;
//! - a UAR page can be mapped from the descriptor by a raw `mmap` system call, around the
//!   shim's `mmap` (as UCX's memory hooks do it), and the page is memory;
//! - a CQ of 128-byte CQEs (libmlx5's `MLX5_CQE_SIZE=128`, what UCX's `rc_mlx5` asks for its
//!   receive CQ) gets its completions where libmlx5 polls them.
//!
//! Run by the `connectx` stage (`cargo test --release -p zverbs-emu --test device_node`).

mod common;

use std::ffi::CString;
use std::time::{Duration, Instant};

use common::in_emulator;
use zverbs_emu::verbs::Context;
use zverbs_ffi::types::{
    IBV_SEND_SIGNALED, IBV_WR_RDMA_WRITE, ibv_qp_cap, ibv_send_wr, ibv_send_wr_rdma, ibv_sge,
    ibv_wc,
};

const NODE: &str = "/dev/infiniband/uverbs0";

fn stat_of(what: &str, r: libc::c_int, st: &libc::stat) {
    assert_eq!(
        r,
        0,
        "{what} of {NODE}: {}",
        std::io::Error::last_os_error()
    );
    assert_eq!(
        st.st_mode & libc::S_IFMT,
        libc::S_IFCHR,
        "{what}: not a character device"
    );
    assert_eq!(st.st_rdev, libc::makedev(1, 3), "{what}: not 1:3");
}

#[test]
fn the_device_node_passes_checks_and_maps_by_a_raw_system_call() {
    if !in_emulator(
        "the_device_node_passes_checks_and_maps_by_a_raw_system_call",
        &[],
        Duration::from_secs(60),
    ) {
        return;
    }
    let path = CString::new(NODE).unwrap();
    let zeroed = || {
        // SAFETY: `struct stat` is plain integers, for which all zeroes is a value.
        unsafe { core::mem::zeroed::<libc::stat>() }
    };
    let mut st = zeroed();
    // SAFETY: a NUL-terminated path and an out-struct of ours.
    stat_of("stat", unsafe { libc::stat(path.as_ptr(), &mut st) }, &st);
    let mut st = zeroed();
    // SAFETY: as above.
    stat_of("lstat", unsafe { libc::lstat(path.as_ptr(), &mut st) }, &st);
    let rw = libc::R_OK | libc::W_OK;
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::access(path.as_ptr(), rw) }, 0, "access");
    assert_eq!(
        // SAFETY: as above.
        unsafe { libc::faccessat(libc::AT_FDCWD, path.as_ptr(), rw, 0) },
        0,
        "faccessat"
    );
    // SAFETY: as above; the descriptor is closed at the end.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    assert!(fd >= 0, "open {NODE}");
    let mut st = zeroed();
    // SAFETY: a descriptor of ours and an out-struct of ours.
    stat_of("fstat", unsafe { libc::fstat(fd, &mut st) }, &st);
    // A raw mmap of the first static UAR page, which the shim's `mmap` never sees.
    // SAFETY: no arguments; reads a constant of the system.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    // SAFETY: a new shared mapping (no address asked for) of the open node: it replaces no
    // memory of ours; it is unmapped below.
    let p = unsafe {
        libc::syscall(
            libc::SYS_mmap,
            core::ptr::null_mut::<libc::c_void>(),
            page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd,
            0,
        )
    };
    assert!(
        p != -1 && p != 0,
        "raw mmap of a UAR page: {}",
        std::io::Error::last_os_error()
    );
    let p = p as usize as *mut u64;
    // SAFETY: a fresh page-sized shared mapping of ours, readable and writable.
    unsafe {
        p.write_volatile(0x1234_5678);
        assert_eq!(p.read_volatile(), 0x1234_5678);
        assert_eq!(libc::munmap(p.cast(), page), 0);
        libc::close(fd);
    }
}

#[test]
fn completions_land_in_cqes_of_128_bytes() {
    if !in_emulator(
        "completions_land_in_cqes_of_128_bytes",
        &[("MLX5_CQE_SIZE", "128")],
        Duration::from_secs(60),
    ) {
        return;
    }
    let ctx = Context::open().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let caps = ibv_qp_cap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let a = ctx.create_qp(cq, caps).unwrap();
    let b = ctx.create_qp(cq, caps).unwrap();
    ctx.connect(a, ctx.lid, b.qpn).unwrap();
    ctx.connect(b, ctx.lid, a.qpn).unwrap();
    let (_, layout) = ctx.dv(a, cq).unwrap();
    assert_eq!(layout.cqe_size, 128, "libmlx5 made a CQ of 128-byte CQEs");
    let buf: &'static mut [u8] = Box::leak(vec![0u8; 8192].into_boxed_slice());
    // SAFETY: leaked, so valid for the process's life.
    let mr = unsafe { ctx.reg_mr(buf.as_mut_ptr(), buf.len()) }.unwrap();
    let base = buf.as_mut_ptr() as u64;
    // More WRITEs than the CQ has CQEs, so that the ring wraps (owner bit flips).
    for i in 0..200u64 {
        buf[..8].copy_from_slice(&i.to_le_bytes());
        let mut sge = ibv_sge {
            addr: base,
            length: 8,
            lkey: mr.lkey,
        };
        let mut wr = ibv_send_wr {
            wr_id: i,
            opcode: IBV_WR_RDMA_WRITE,
            send_flags: IBV_SEND_SIGNALED,
            sg_list: &mut sge,
            num_sge: 1,
            ..ibv_send_wr::ZERO
        };
        wr.wr.rdma = ibv_send_wr_rdma {
            remote_addr: base + 4096,
            rkey: mr.rkey,
        };
        // SAFETY: a valid request on registered memory that stays mapped.
        assert_eq!(unsafe { ctx.post_send(a, &mut wr) }, 0);
        let mut wc = [ibv_wc::default(); 1];
        let deadline = Instant::now() + Duration::from_secs(30);
        let n = loop {
            let n = ctx.poll_cq(cq, &mut wc);
            if n != 0 || Instant::now() > deadline {
                break n;
            }
            std::hint::spin_loop();
        };
        assert_eq!(n, 1, "completion {i}");
        // IBV_WC_SUCCESS is 0.
        assert_eq!((wc[0].status, wc[0].wr_id), (0, i));
        // SAFETY: the completion says the device wrote the 8 bytes.
        let got = unsafe { core::ptr::read_volatile(buf.as_ptr().add(4096).cast::<u64>()) };
        assert_eq!(u64::from_le(got), i);
    }
    println!("200 WRITEs completed through CQEs of 128 bytes");
}

//! The no_std proof: a freestanding binary that links the zverbs data path.
//!
//! `#![no_std]`, `#![no_main]`, `panic = "abort"`, no global allocator: the C library's
//! start-up code calls [`main`]. Everything the binary does goes through the data-path crates
//! (`zverbs-core`, `zverbs-mlx5dv`), over static memory laid out as libmlx5 lays out a queue
//! pair and a completion queue: it posts a receive, posts and rings an RDMA WRITE (BlueFlame),
//! plays the device by writing a requester and a responder CQE, and polls them; a striding
//! receive work queue hands out packets in place, plain and from a compressed session. Inputs pass
//! through [`black_box`] so nothing is folded away or dead-stripped before linking.
//!
//! If a data-path crate used `std`, the build would fail with E0152 (a second
//! `panic_impl` lang item); if it allocated, with "no global memory allocator found".
//!
//! It also proves that nothing linked can panic: the panic handler calls a function that is
//! declared but defined nowhere, so if any panic path (an `unwrap`, a bounds-checked index, an
//! overflow check, a `panic!`) survives optimisation anywhere in the program, the link fails
//! with "undefined symbol: zverbs_data_path_can_panic". Every operation goes through the
//! generic post path (inputs through `black_box`), so the check covers all of it: posting,
//! batches, receives, ringing (BlueFlame and doorbell), polling, error CQEs.
//!
//! The exit status is 0 when every check passes, else the number of the first failed check.
#![no_std]
#![no_main]

use core::cell::UnsafeCell;
use core::ffi::{c_char, c_int};
use core::hint::black_box;
use core::ptr::NonNull;

use zverbs_core::{
    Completion, PollCq, PostRecv, PostSend, RecvWr, RemoteBuf, SendFlags, SendWr, Sge, UdDest,
    WcOpcode, WcStatus,
};
use zverbs_mlx5dv::prm::cqe::Cqe64;
use zverbs_mlx5dv::prm::opcode;
use zverbs_mlx5dv::{
    BfLayout, Changes, CompletionQueue, CqArm, CqBinding, CqLayout, FrameLengths, QpLayout,
    RecvQueue, RqRef, RqSlot, RqState, SendQueue, SharedRecvQueue, SqCaps, SqRef, SqSlot, SqState,
    SrqLayout, SrqSlot, SrqState, StrideBuffer, StrideConfig, StrideSlot, StridingRq,
    StridingState, Transport, WqLayout,
};

#[link(name = "c")]
unsafe extern "C" {
    /// The C library's `abort(3)`.
    safe fn abort() -> !;
}

unsafe extern "C" {
    /// Never defined: a reference to it that survives optimisation fails the link.
    fn zverbs_data_path_can_panic() -> !;
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: never executed: if any panic path remains in the linked program, the link fails
    // on this undefined symbol before a binary exists.
    unsafe { zverbs_data_path_can_panic() }
}

/// The precompiled `core` refers to the unwinding personality routine from its unwind tables,
/// although with `panic = "abort"` nothing unwinds and nothing calls it. `std` provides it;
/// without `std` the binary must, or the link fails.
#[unsafe(no_mangle)]
extern "C" fn rust_eh_personality() {}

/// Send ring size in 64-byte basic blocks.
const SQ_BBS: usize = 16;
/// Receive ring entries and their stride (two data segments each).
const RQ_ENTRIES: usize = 8;
const RQ_STRIDE: usize = 32;
/// CQEs in the completion ring.
const CQES: usize = 8;
/// Bytes per BlueFlame buffer (the register holds two).
const BF_SIZE: usize = 256;
/// The QP number the CQEs name.
const QPN: u32 = 0x123;
/// The UD QP's number (its own rings; its receives come from the SRQ).
const UD_QPN: u32 = 0x124;
/// Shared receive queue WQEs and their stride (a next segment and one data segment).
const SRQ_WQES: usize = 4;
const SRQ_STRIDE: usize = 32;
/// A striding work queue's WQEs, each of 8 strides of 64 bytes.
const MPRQ_WQES: usize = 4;
const MPRQ_WQE_BYTES: usize = 8 * 64;

/// The memory a device shares with software, laid out as libmlx5 lays it out: every ring and
/// BlueFlame buffer at a multiple of 16 bytes (the records after them).
#[repr(C, align(4096))]
struct DeviceMemory {
    sq: [u8; SQ_BBS * 64],
    rq: [u8; RQ_ENTRIES * RQ_STRIDE],
    cq: [u8; CQES * 64],
    bf: [u8; 2 * BF_SIZE],
    qp_dbrec: [u32; 2],
    cq_dbrec: [u32; 2],
    ud_sq: [u8; SQ_BBS * 64],
    ud_bf: [u8; 2 * BF_SIZE],
    srq: [u8; SRQ_WQES * SRQ_STRIDE],
    ud_dbrec: [u32; 2],
    srq_dbrec: [u32; 1],
    /// Stands in for the CQ's UAR page: the arm writes its CQ doorbell at 0x20.
    cq_uar: [u64; 8],
    /// A striding work queue: its WQEs, its record, its strides, its CQ.
    mprq: [u8; MPRQ_WQES * 32],
    mprq_dbrec: [u32; 2],
    strides: [u8; MPRQ_WQES * MPRQ_WQE_BYTES],
    mprq_cq: [u8; CQES * 64],
    mprq_cq_dbrec: [u32; 2],
    /// A raw packet QP's send ring, its BlueFlame buffers and record.
    eth_sq: [u8; SQ_BBS * 64],
    eth_bf: [u8; 2 * BF_SIZE],
    eth_dbrec: [u32; 2],
}

/// Static device memory, reached only through raw pointers.
struct Shared(UnsafeCell<DeviceMemory>);

// SAFETY: the program is single-threaded; the memory is only reached through raw pointers.
unsafe impl Sync for Shared {}

static MEMORY: Shared = Shared(UnsafeCell::new(DeviceMemory {
    sq: [0; SQ_BBS * 64],
    rq: [0; RQ_ENTRIES * RQ_STRIDE],
    cq: [0; CQES * 64],
    bf: [0; 2 * BF_SIZE],
    qp_dbrec: [0; 2],
    cq_dbrec: [0; 2],
    ud_sq: [0; SQ_BBS * 64],
    ud_bf: [0; 2 * BF_SIZE],
    srq: [0; SRQ_WQES * SRQ_STRIDE],
    ud_dbrec: [0; 2],
    srq_dbrec: [0; 1],
    cq_uar: [0; 8],
    mprq: [0; MPRQ_WQES * 32],
    mprq_dbrec: [0; 2],
    strides: [0; MPRQ_WQES * MPRQ_WQE_BYTES],
    mprq_cq: [0; CQES * 64],
    mprq_cq_dbrec: [0; 2],
    eth_sq: [0; SQ_BBS * 64],
    eth_bf: [0; 2 * BF_SIZE],
    eth_dbrec: [0; 2],
}));

/// Called by the C library's start-up code.
#[unsafe(no_mangle)]
pub extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    match run() {
        Ok(()) => 0,
        Err(check) => check,
    }
}

/// Fails with `code` unless `ok`.
fn check(ok: bool, code: c_int) -> Result<(), c_int> {
    if ok { Ok(()) } else { Err(code) }
}

fn run() -> Result<(), c_int> {
    let mem = MEMORY.0.get();
    // SAFETY: `mem` points to the static, which lives for the whole program; no reference to
    // it exists, and only `main` (one thread) runs.
    let (sq_buf, rq_buf, cq_buf, bf, qp_dbrec, cq_dbrec) = unsafe {
        (
            (&raw mut (*mem).sq).cast::<u8>(),
            (&raw mut (*mem).rq).cast::<u8>(),
            (&raw mut (*mem).cq).cast::<u8>(),
            (&raw mut (*mem).bf).cast::<u8>(),
            (&raw mut (*mem).qp_dbrec).cast::<u32>(),
            (&raw mut (*mem).cq_dbrec).cast::<u32>(),
        )
    };
    // libmlx5 starts every CQE invalid and owned by hardware: op_own = 0xf1.
    for i in 0..CQES {
        // SAFETY: byte 63 of CQE `i` is inside the CQ ring; no queue exists yet.
        unsafe { cq_buf.add(i * 64 + 63).write(0xf1) };
    }

    let qp = QpLayout {
        qpn: black_box(QPN),
        dbrec: nonnull(qp_dbrec),
        sq: WqLayout {
            buf: nonnull(sq_buf),
            wqe_cnt: black_box(SQ_BBS as u32),
            stride: 64,
        },
        rq: WqLayout {
            buf: nonnull(rq_buf),
            wqe_cnt: black_box(RQ_ENTRIES as u32),
            stride: RQ_STRIDE as u32,
        },
        bf: BfLayout {
            reg: nonnull(bf),
            size: black_box(BF_SIZE as u32),
        },
    };
    let cq_layout = CqLayout {
        buf: nonnull(cq_buf),
        dbrec: nonnull(cq_dbrec),
        cqe_cnt: black_box(CQES as u32),
        cqe_size: 64,
        cqn: 7,
    };
    let caps = sq_caps(64, zverbs_core::Transport::Rc);

    let sq_slots: [SqSlot; SQ_BBS] = core::array::from_fn(|_| SqSlot::new());
    let rq_slots: [RqSlot; RQ_ENTRIES] = core::array::from_fn(|_| RqSlot::new());
    let sq_state = SqState::new(&sq_slots[..]).map_err(|_| 1)?;
    let rq_state = RqState::new(&rq_slots[..]).map_err(|_| 2)?;
    let bindings = [CqBinding::new(QPN, Some(&sq_state), Some(&rq_state))];
    // SAFETY: the layouts describe the static memory above, which lives for the whole program;
    // these are the only queues over it, new (counters at 0), and the CQ serves exactly this
    // QP with these states.
    let (mut sq, mut rq, mut cq) = unsafe {
        (
            SendQueue::new(&qp, caps, &sq_state, None).map_err(|_| 3)?,
            RecvQueue::new(&qp, &rq_state).map_err(|_| 4)?,
            CompletionQueue::new(&cq_layout, &bindings[..]).map_err(|_| 5)?,
        )
    };

    let payload = black_box([0x5au8; 64]);
    let recv_buf = [0u8; 64];
    let sgl = [Sge::from_slice(&payload, 0x1100)];
    let rsgl = [Sge::from_slice(&recv_buf, 0x1100)];
    // SAFETY: nothing reads or writes the local buffers (no device runs), and they outlive
    // the completions polled below.
    unsafe {
        rq.post(&RecvWr::new(black_box(11), &rsgl)).map_err(|_| 6)?;
        let remote = RemoteBuf::new(black_box(0x7f00_0000_1000), 0xdead_beef);
        sq.stage(&SendWr::write(black_box(42), &sgl, remote).signaled())
            .map_err(|_| 7)?;
    }
    sq.ring();

    // What the device sees: one basic block produced, one receive posted, and the WQE copied
    // whole into the first BlueFlame buffer.
    // SAFETY: the doorbell words and the rings are inside the static; plain loads of them
    // race with nothing (single thread).
    unsafe {
        check(qp_dbrec.add(1).read_volatile() == 1u32.to_be(), 8)?;
        check(qp_dbrec.read_volatile() == 1u32.to_be(), 9)?;
        check(sq_buf.add(3).read_volatile() == opcode::RDMA_WRITE, 10)?;
        for i in 0..64 {
            check(
                bf.add(i).read_volatile() == sq_buf.add(i).read_volatile(),
                11,
            )?;
        }
    }

    // Play the device: a requester CQE for the WRITE, a responder CQE for a 16-byte SEND.
    let mut req = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut req);
    c.set_sop_drop_qpn((u32::from(opcode::RDMA_WRITE) << 24) | QPN);
    c.set_wqe_counter(0);
    c.set_op_own(0x00); // REQ, owner 0 (first pass)
    let mut resp = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut resp);
    c.set_sop_drop_qpn(QPN);
    c.set_byte_cnt(16);
    c.set_op_own(0x20); // RESP_SEND, owner 0
    // SAFETY: CQEs 0 and 1 are inside the CQ ring, and the poller is not running.
    unsafe {
        core::ptr::copy_nonoverlapping(req.as_ptr(), cq_buf, 64);
        core::ptr::copy_nonoverlapping(resp.as_ptr(), cq_buf.add(64), 64);
    }

    let mut wc = [Completion::EMPTY; 4];
    let n = cq.poll(&mut wc);
    check(n == 2, 12)?;
    check(wc[0].wr_id == 42 && wc[0].status == WcStatus::Success, 13)?;
    check(
        wc[0].opcode == WcOpcode::RdmaWrite && wc[0].qp_num == QPN,
        14,
    )?;
    check(wc[1].wr_id == 11 && wc[1].opcode == WcOpcode::Recv, 15)?;
    check(wc[1].byte_len == 16, 16)?;
    check(cq.poll(&mut wc) == 0, 17)?;
    // SAFETY: inside the static; single thread.
    check(unsafe { cq_dbrec.read_volatile() } == 2u32.to_be(), 18)?;
    // Arming the CQ for a solicited completion (libmlx5's `mlx5_arm_cq` sequence): the arm
    // word (sequence 0, solicited, consumer index 2) in the record, then the CQ doorbell.
    // SAFETY: the record and the UAR stand-in are in the static, which lives for the whole
    // program; nothing else writes the arm word or the doorbell; single thread.
    let mut arm = unsafe { CqArm::new(&cq_layout, nonnull((&raw mut (*mem).cq_uar).cast::<u8>())) };
    arm.arm(cq.consumer(), true);
    // SAFETY: word 1 of the record, inside the static; single thread.
    let arm_word = unsafe { cq_dbrec.add(1).read_volatile() };
    check(arm_word == 0x0100_0002u32.to_be(), 48)?;
    check(sq.free_blocks() == SQ_BBS as u32, 19)?;
    check(rq.free() == RQ_ENTRIES as u32, 20)?;

    // Every operation through the generic post path: the requests pass through `black_box`,
    // so the code for each kind (inline, gather lists, atomics, NOP, the checks that refuse
    // bad input) is compiled in and linked, and the no-panic link check below covers it.
    let local = Sge::new(payload.as_ptr() as u64, 8, 0x1100);
    let remote = RemoteBuf::new(black_box(0x7f00_0000_2000), 0xbeef);
    let two = [sgl[0], Sge::new(payload.as_ptr() as u64 + 8, 8, 0x1100)];
    let all = black_box([
        SendWr::write(1, &two, remote),
        SendWr::write_imm(2, &sgl, remote, 7).inline(),
        SendWr::send(3, &sgl).inline().solicited(),
        SendWr::send_imm(4, &two, 9),
        SendWr::read(5, &two, remote).fenced(),
        SendWr::compare_swap(6, local, remote, 1, 2),
        SendWr::fetch_add(7, local, remote, 3),
        SendWr::nop(8).signaled(),
    ]);
    let rwrs = black_box([RecvWr::new(21, &rsgl), RecvWr::new(22, &rsgl)]);
    // SAFETY: as above: nothing runs the requests.
    unsafe {
        sq.post_all(&all).map_err(|_| 21)?;
        for wr in black_box(&all[..2]) {
            sq.stage(wr).map_err(|_| 22)?;
        }
        // Refused without writing: a gather list longer than the queue allows.
        let three = [sgl[0]; 3];
        check(sq.stage(black_box(&SendWr::send(9, &three))).is_err(), 23)?;
        rq.post_all(&rwrs).map_err(|_| 24)?;
    }
    sq.ring();
    // Prepared requests: prepared once, posted with what changes (twice: the first post
    // takes the checks out of line, the second the common case), staged and rung; a length
    // over 2 GiB refused.
    let pw = sq
        .prepare_rdma(black_box(&SendWr::write(0, &sgl, remote).signaled()))
        .map_err(|_| 26)?;
    let ps = sq
        .prepare_send(black_box(&SendWr::send_imm(0, &sgl, 0)))
        .map_err(|_| 27)?;
    let changes = black_box(Changes {
        wr_id: 31,
        addr: payload.as_ptr() as u64,
        len: 8,
        remote_addr: 0x7f00_0000_3000,
        imm: 5,
    });
    // SAFETY: as above: nothing runs the requests.
    unsafe {
        let long = Changes {
            len: (1 << 31) + 1,
            ..changes
        };
        check(sq.post_prepared(&pw, black_box(long)).is_err(), 28)?;
        sq.post_prepared(&pw, changes).map_err(|_| 29)?;
        // Again: the common case, the words built in registers.
        sq.post_prepared(&pw, changes).map_err(|_| 29)?;
        sq.stage_prepared(&ps, changes).map_err(|_| 30)?;
    }
    sq.ring();
    // The device fails the first WQE of the batch (remote access error) and flushes the rest
    // of what is outstanding; the poller sees each with its wr_id.
    let first = 1u16; // the batch starts after the first WRITE's block
    let mut err = [0u8; 64];
    let mut e = Cqe64::new_unchecked(&mut err);
    e.set_sop_drop_qpn(QPN);
    e.set_wqe_counter(first);
    e.set_syndrome(0x13);
    e.set_op_own(0xd0); // REQ_ERR, owner 0
    // SAFETY: CQE 2 is inside the CQ ring; the poller is not running.
    unsafe { core::ptr::copy_nonoverlapping(err.as_ptr(), cq_buf.add(2 * 64), 64) };
    let n = cq.poll(&mut wc);
    check(
        n == 1 && wc[0].wr_id == 1 && wc[0].status == WcStatus::RemAccessErr,
        25,
    )?;
    datagrams_and_srq()
}

/// A UD send queue posts datagrams (and refuses a connected operation), a shared receive
/// queue takes receives along its free list, and the CQ resolves an SRQ receive by its WQE.
fn datagrams_and_srq() -> Result<(), c_int> {
    let mem = MEMORY.0.get();
    // SAFETY: as in `run`: the static lives for the whole program, one thread.
    let (sq_buf, dbrec, bf, srq_buf, srq_dbrec, cq_buf, cq_dbrec) = unsafe {
        (
            (&raw mut (*mem).ud_sq).cast::<u8>(),
            (&raw mut (*mem).ud_dbrec).cast::<u32>(),
            (&raw mut (*mem).ud_bf).cast::<u8>(),
            (&raw mut (*mem).srq).cast::<u8>(),
            (&raw mut (*mem).srq_dbrec).cast::<u32>(),
            (&raw mut (*mem).cq).cast::<u8>(),
            (&raw mut (*mem).cq_dbrec).cast::<u32>(),
        )
    };
    // libmlx5's SRQ: WQE i links to i + 1, the last to 0.
    for i in 0..SRQ_WQES {
        let next = ((i + 1) % SRQ_WQES) as u16;
        // SAFETY: bytes 2..4 of WQE `i`, inside the SRQ ring; no queue exists yet.
        unsafe {
            core::ptr::copy_nonoverlapping(
                next.to_be_bytes().as_ptr(),
                srq_buf.add(i * SRQ_STRIDE + 2),
                2,
            )
        };
    }
    let qp = send_only_layout(black_box(UD_QPN), sq_buf, dbrec, bf);
    let srq_layout = SrqLayout {
        srqn: 5,
        buf: nonnull(srq_buf),
        dbrec: nonnull(srq_dbrec),
        stride: SRQ_STRIDE as u32,
        wqe_cnt: black_box(SRQ_WQES as u32),
        head: 0,
        tail: SRQ_WQES as u32 - 1,
    };
    // The CQ continues where `run` left it: three CQEs consumed.
    let cq_layout = CqLayout {
        buf: nonnull(cq_buf),
        dbrec: nonnull(cq_dbrec),
        cqe_cnt: black_box(CQES as u32),
        cqe_size: 64,
        cqn: 8,
    };
    let caps = sq_caps(
        64,
        Transport::Ud {
            mtu: black_box(4096),
        },
    );
    let sq_slots: [SqSlot; SQ_BBS] = core::array::from_fn(|_| SqSlot::new());
    let srq_slots: [SrqSlot; SRQ_WQES] = core::array::from_fn(|_| SrqSlot::new());
    let sq_state = SqState::new(&sq_slots[..]).map_err(|_| 30)?;
    // SAFETY: the layout describes the static SRQ ring, new, which lives for the program.
    let srq_state = unsafe { SrqState::new(&srq_layout, &srq_slots[..]) }.map_err(|_| 31)?;
    let bindings = [CqBinding::with_srq(UD_QPN, Some(&sq_state), &srq_state)];
    // SAFETY: the layouts describe the static memory, which lives for the whole program;
    // these are the only queues over the UD rings and the SRQ; the CQ's earlier poller is
    // gone, and this one starts at the consumer counter it left (`skip` below).
    let (mut sq, mut srq, mut cq) = unsafe {
        (
            SendQueue::new_ud(&qp, caps, &sq_state, None).map_err(|_| 32)?,
            SharedRecvQueue::new(&srq_layout, &srq_state).map_err(|_| 33)?,
            CompletionQueue::new(&cq_layout, &bindings[..]).map_err(|_| 34)?,
        )
    };
    let payload = black_box([0x3cu8; 32]);
    let sgl = [Sge::from_slice(&payload, 0x1100)];
    let dest = black_box(UdDest::new([7; 48], 0, 0x00ab_cdef, 0x1111_2222));
    let wrs = black_box([
        SendWr::send_to(40, &sgl, &dest).signaled(),
        SendWr::send_to_imm(41, &sgl, &dest, 5).inline(),
        SendWr::nop(42),
    ]);
    let recv = [0u8; 64];
    let rsgl = [Sge::from_slice(&recv, 0x1100)];
    // SAFETY: nothing runs the requests; the buffers outlive the polls below.
    unsafe {
        for wr in &wrs {
            sq.stage(wr).map_err(|_| 35)?;
        }
        check(sq.stage(black_box(&SendWr::send(43, &sgl))).is_err(), 36)?;
        srq.post(&RecvWr::new(black_box(50), &rsgl))
            .map_err(|_| 37)?;
        srq.post_all(black_box(&[RecvWr::new(51, &rsgl), RecvWr::new(52, &rsgl)]))
            .map_err(|_| 38)?;
        check(srq.post(&RecvWr::new(53, &rsgl)).is_err(), 39)?;
    }
    sq.ring();
    // SAFETY: inside the static; single thread.
    unsafe {
        check(dbrec.add(1).read_volatile() == 5u32.to_be(), 40)?;
        check(sq_buf.add(3).read_volatile() == opcode::SEND, 41)?;
        check(srq_dbrec.read_volatile() == 3u32.to_be(), 42)?;
    }
    // Play the device: the SEND's requester CQE, then the second SRQ WQE's receive (CQEs 3
    // and 4, owner 0: the first pass). The new poller starts at CQE 0: it is shown the three
    // `run` consumed as CQEs of no QP it knows, which it reports and skips.
    let mut req = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut req);
    c.set_sop_drop_qpn((u32::from(opcode::SEND) << 24) | UD_QPN);
    c.set_wqe_counter(0);
    c.set_op_own(0x00);
    let mut resp = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut resp);
    c.set_sop_drop_qpn(UD_QPN);
    c.set_byte_cnt(40 + 32);
    c.set_wqe_counter(1);
    c.set_flags_rqpn(0x0500_0077);
    c.set_op_own(0x20);
    // SAFETY: CQEs 3 and 4 are inside the CQ ring; the poller is not running.
    unsafe {
        core::ptr::copy_nonoverlapping(req.as_ptr(), cq_buf.add(3 * 64), 64);
        core::ptr::copy_nonoverlapping(resp.as_ptr(), cq_buf.add(4 * 64), 64);
    }
    let mut wc = [Completion::EMPTY; 8];
    let n = cq.poll(&mut wc);
    check(n == 5, 43)?;
    check(wc[3].wr_id == 40 && wc[3].opcode == WcOpcode::Send, 44)?;
    check(wc[4].wr_id == 51 && wc[4].qp_num == UD_QPN, 45)?;
    check(
        wc[4].src_qp == 0x77 && wc[4].sl == 5 && wc[4].byte_len == 72,
        46,
    )?;
    check(srq.free() == 1, 47)?;
    striding()?;
    ethernet()
}

/// A raw packet QP's send queue: a frame by reference with checksum offload (18 bytes
/// inlined), an inline frame, a prepared frame, and a frame too short refused.
fn ethernet() -> Result<(), c_int> {
    let mem = MEMORY.0.get();
    // SAFETY: as in `run`: the static lives for the whole program, one thread.
    let (sq_buf, dbrec, bf) = unsafe {
        (
            (&raw mut (*mem).eth_sq).cast::<u8>(),
            (&raw mut (*mem).eth_dbrec).cast::<u32>(),
            (&raw mut (*mem).eth_bf).cast::<u8>(),
        )
    };
    let qp = send_only_layout(black_box(0x125), sq_buf, dbrec, bf);
    let caps = sq_caps(
        128,
        Transport::Ethernet {
            max_frame: black_box(1514),
            ip_csum: true,
        },
    );
    let sq_slots: [SqSlot; SQ_BBS] = core::array::from_fn(|_| SqSlot::new());
    let sq_state = SqState::new(&sq_slots[..]).map_err(|_| 60)?;
    // SAFETY: the layout describes the static ring and record, which live for the whole
    // program; this is the only queue over them.
    let mut sq =
        unsafe { SendQueue::new_eth(&qp, caps, black_box(18), &sq_state, None) }.map_err(|_| 61)?;
    let frame = black_box([0x45u8; 64]);
    let sgl = [Sge::from_slice(&frame, 0x1100)];
    let short = [Sge::from_slice(&frame[..10], 0x1100)];
    let headers = black_box([0x11u8; 42]);
    let lengths = FrameLengths {
        ipv4_total_at: Some(16),
        udp_len_at: Some(38),
    };
    let prepared = sq
        .prepare_frame(&headers, SendFlags::IP_CSUM, lengths)
        .map_err(|_| 62)?;
    // SAFETY: nothing runs the requests; the frames outlive the program's use of the ring.
    unsafe {
        sq.post(&SendWr::send(60, &sgl).with_flags(SendFlags::IP_CSUM))
            .map_err(|_| 63)?;
        sq.post(&SendWr::send(61, &sgl).inline()).map_err(|_| 64)?;
        sq.post_frame(&prepared, 62, Sge::from_slice(&frame[..22], 0x1100))
            .map_err(|_| 65)?;
        check(sq.post(&SendWr::send(63, &short)).is_err(), 66)?;
    }
    // The first WQE is a SEND (opcode 0x0a) with the checksum flags in its Ethernet segment.
    // SAFETY: bytes 3 and 20 of the first WQE, inside the ring; nothing writes it now.
    let (op, cs) = unsafe { (sq_buf.add(3).read(), sq_buf.add(20).read()) };
    check(op == opcode::SEND && cs == 0xc0, 67)
}

/// A striding receive work queue hands out a packet in place, takes a filler, gives its
/// strides back and posts its WQE again; then a compressed session of two packets.
fn striding() -> Result<(), c_int> {
    let mem = MEMORY.0.get();
    // SAFETY: as in `run`: the static lives for the whole program, one thread.
    let (ring, dbrec, strides, cq_buf, cq_dbrec) = unsafe {
        (
            (&raw mut (*mem).mprq).cast::<u8>(),
            (&raw mut (*mem).mprq_dbrec).cast::<u32>(),
            (&raw mut (*mem).strides).cast::<u8>(),
            (&raw mut (*mem).mprq_cq).cast::<u8>(),
            (&raw mut (*mem).mprq_cq_dbrec).cast::<u32>(),
        )
    };
    for i in 0..CQES {
        // SAFETY: byte 63 of CQE `i` is inside the ring; no queue exists yet.
        unsafe { cq_buf.add(i * 64 + 63).write(0xf1) };
    }
    let layout = WqLayout {
        buf: nonnull(ring),
        wqe_cnt: black_box(MPRQ_WQES as u32),
        stride: 32,
    };
    let cfg = StrideConfig {
        log_num_strides: black_box(3),
        log_stride_size: 6,
    };
    let buffer = StrideBuffer {
        addr: nonnull(strides),
        len: MPRQ_WQES * MPRQ_WQE_BYTES,
        lkey: black_box(0x77),
    };
    let slots = [const { StrideSlot::new() }; MPRQ_WQES];
    let state = StridingState::new(&slots[..]).map_err(|_| 50)?;
    // SAFETY: the static's ring, record and strides outlive the queue; nothing else uses them.
    let rq =
        unsafe { StridingRq::new(&layout, nonnull(dbrec), cfg, buffer, &state) }.map_err(|_| 51)?;
    let cq_layout = CqLayout {
        buf: nonnull(cq_buf),
        dbrec: nonnull(cq_dbrec),
        cqe_cnt: black_box(CQES as u32),
        cqe_size: 64,
        cqn: 9,
    };
    let none: [CqBinding<SqRef<'_>, RqRef<'_>>; 0] = [];
    // SAFETY: as above; the only poller of the ring.
    let mut cq = unsafe { CompletionQueue::new(&cq_layout, &none[..]) }.map_err(|_| 52)?;
    // The device: a 100-byte packet at WQE 0's first stride, a filler for its last 6.
    // SAFETY: inside the strides; the queue does not read them until a CQE says so.
    unsafe { core::ptr::write_bytes(strides, 0xa5, 100) };
    let put = |at: usize, wqe_id: u16, stride: u16, byte_cnt: u32, op_own: u8| {
        let mut c = [0u8; 64];
        let mut v = Cqe64::new_unchecked(&mut c);
        v.set_wqe_id(wqe_id);
        v.set_wqe_counter(stride);
        v.set_byte_cnt(byte_cnt);
        v.set_timestamp(black_box(77));
        v.set_op_own(op_own);
        // SAFETY: CQE `at` is inside the ring; the poller is not running.
        unsafe { core::ptr::copy_nonoverlapping(c.as_ptr(), cq_buf.add(at * 64), 64) };
    };
    put(0, 0, 0, 2 << 16 | 100, 0x20);
    put(1, 0, 2, 1 << 31 | 6 << 16, 0x20);
    let mut sum = 0usize;
    let n = rq.poll_packets(&mut cq, black_box(8), |p| {
        sum += p.bytes().iter().map(|&b| usize::from(b)).sum::<usize>() + p.timestamp() as usize;
    });
    check(n == 1 && sum == 100 * 0xa5 + 77, 53)?;
    check(rq.head() == MPRQ_WQES as u32 + 1, 54)?;
    // A session of two packets in WQE 1: the title at 2, its array at 3.
    let mut array = [0u8; 64];
    array[2..4].copy_from_slice(&0u16.to_be_bytes());
    array[4..8].copy_from_slice(&(1u32 << 16 | 60).to_be_bytes());
    array[10..12].copy_from_slice(&1u16.to_be_bytes());
    array[12..16].copy_from_slice(&(1u32 << 16 | 61).to_be_bytes());
    // SAFETY: CQE 3 is inside the ring; the poller is not running.
    unsafe { core::ptr::copy_nonoverlapping(array.as_ptr(), cq_buf.add(3 * 64), 64) };
    put(2, 1, 0, 2, 0x2c);
    let mut burst = [const { None }; 4];
    let n = rq.poll_burst(&mut cq, black_box(&mut burst[..]));
    let lens = burst.each_ref().map(|p| p.as_ref().map_or(0, |p| p.len()));
    check(n == 2 && lens == [60, 61, 0, 0], 55)?;
    Ok(())
}

/// The layout of a QP that only sends (QPN `qpn`, no receive queue) over a static send ring
/// of [`SQ_BBS`] basic blocks, its doorbell record and its BlueFlame register.
fn send_only_layout(qpn: u32, sq_buf: *mut u8, dbrec: *mut u32, bf: *mut u8) -> QpLayout {
    QpLayout {
        qpn,
        dbrec: nonnull(dbrec),
        sq: WqLayout {
            buf: nonnull(sq_buf),
            wqe_cnt: black_box(SQ_BBS as u32),
            stride: 64,
        },
        rq: WqLayout {
            buf: nonnull(sq_buf),
            wqe_cnt: 0,
            stride: 16,
        },
        bf: BfLayout {
            reg: nonnull(bf),
            size: black_box(BF_SIZE as u32),
        },
    }
}

/// The send queue limits every queue here has (two entries, requests signaled one by one, up
/// to the CQ's size outstanding), with `max_inline_data` bytes inline, for `transport`.
fn sq_caps(max_inline_data: u32, transport: Transport) -> SqCaps {
    SqCaps {
        max_send_sge: 2,
        max_inline_data,
        sig_all: false,
        max_signaled: CQES as u32,
        transport,
    }
}

/// A pointer into the static, which is never null.
fn nonnull<T>(p: *mut T) -> NonNull<T> {
    match NonNull::new(p) {
        Some(p) => p,
        None => abort(),
    }
}

//! The mlx5 send path over ordinary memory, byte by byte.
//!
//! Ordinary memory stands in for what `mlx5dv_init_obj` reports for a real queue pair and
//! completion queue: the send ring, the doorbell record, the BlueFlame register and the CQE
//! ring. The example posts an RDMA WRITE, a SEND with inline data, an RDMA READ with two
//! scatter entries and a WRITE with immediate, and after each ring shows the work queue entry,
//! the doorbell record and what reached the BlueFlame register. Then it plays the NIC: it
//! writes a requester CQE for the last request (the only signaled one) into the CQ ring, polls
//! it and prints the completion, which retires all four requests.
//!
//! ```text
//! cargo run --release -p zverbs-tools --example wqe_demo [-- --batch] [-- --doorbell-only]
//! ```
//!
//! `--batch` posts the four requests as one batch, rung once: a chain rings with the 8-byte
//! doorbell (the first 8 bytes of the last control segment). `--doorbell-only` gives the queue
//! no BlueFlame buffer (`bf.size == 0`, as when the kernel withholds write-combining), so every
//! ring is the 8-byte doorbell.

use std::process::ExitCode;
use std::ptr::NonNull;

use zverbs::mlx5::prm::cqe::{Cqe64, CqeOpcode};
use zverbs::mlx5::prm::wqe::{AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, parse_inline_header};
use zverbs::mlx5::prm::{CQ_SET_CI, SND_DBR, fm_ce_se, opcode};
use zverbs::mlx5::{
    BfLayout, CompletionQueue, CqBinding, CqLayout, QpLayout, SendQueue, SqCaps, SqSlot, SqState,
    WqLayout,
};
use zverbs::{Completion, PollCq, PostSend, RemoteBuf, SendWr, Sge, WcFlags};
use zverbs_tools::args::{self, Arg::*, Parser};

/// Send ring size in 64-byte basic blocks.
const SQ_BBS: u32 = 16;
/// Bytes per BlueFlame buffer; the register holds two, used alternately.
const BF_SIZE: u32 = 256;
/// CQEs in the CQ ring.
const CQES: u32 = 8;
/// The queue pair's number.
const QPN: u32 = 0x00_0123;
/// The local key of the (pretend) registered memory region holding the local buffers.
const LKEY: u32 = 0x0000_1100;
/// The peer's memory: its address and remote key.
const REMOTE: RemoteBuf = RemoteBuf::new(0x7f00_0000_1000, 0xdead_beef);

/// A 64-byte-aligned block of memory.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; 64]);

/// Zeroed memory standing in for memory shared with the NIC. It lives for the whole program
/// (as a real mapping lives as long as its QP) and is reached only through its raw pointer,
/// because the queues write it through raw pointers too.
#[derive(Clone, Copy)]
struct Region {
    base: NonNull<u8>,
    len: usize,
}

impl Region {
    fn new(len: usize) -> Self {
        let blocks: &'static mut [Block] = Vec::leak(vec![Block([0; 64]); len.div_ceil(64)]);
        Self {
            base: NonNull::from(blocks).cast(),
            len,
        }
    }

    /// A copy of `len` bytes at `off`.
    fn read(self, off: usize, len: usize) -> Vec<u8> {
        assert!(off + len <= self.len);
        // SAFETY: in bounds (asserted); the memory lives for the program, and nothing writes
        // it during the copy (one thread; the queues write only inside their calls).
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off), len).to_vec() }
    }

    /// Writes `bytes` at `off`.
    fn write(self, off: usize, bytes: &[u8]) {
        assert!(off + bytes.len() <= self.len);
        // SAFETY: in bounds (asserted); no reference to the memory exists, and the queues do
        // not run during the copy (one thread).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(off), bytes.len())
        }
    }

    /// The big-endian 32-bit word `i`, as the device reads a doorbell record.
    fn be32(self, i: usize) -> u32 {
        let b = self.read(4 * i, 4);
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
}

struct Options {
    batch: bool,
    doorbell_only: bool,
}

const USAGE: &str = "usage: wqe_demo [--batch] [--doorbell-only]";

/// The options; `Err("")` asks for the usage text.
fn options() -> Result<Options, String> {
    let mut o = Options {
        batch: false,
        doorbell_only: false,
    };
    let mut p = Parser::from_env();
    while let Some(arg) = p.next().map_err(args::explain)? {
        match arg {
            Long("batch") => o.batch = true,
            Long("doorbell-only") => o.doorbell_only = true,
            Short('h') | Long("help") => return Err(String::new()),
            arg => return Err(format!("{}; try --help", args::unexpected(arg))),
        }
    }
    Ok(o)
}

fn main() -> ExitCode {
    match args::or_usage(options(), "wqe_demo", USAGE) {
        Ok(o) => {
            run(&o);
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

fn run(o: &Options) {
    let bf_size = if o.doorbell_only { 0 } else { BF_SIZE };
    let sq_ring = Region::new((SQ_BBS * 64) as usize);
    let qp_dbrec = Region::new(8);
    let bf_reg = Region::new(2 * BF_SIZE as usize);
    let cq_ring = Region::new((CQES * 64) as usize);
    let cq_dbrec = Region::new(8);
    // libmlx5 starts every CQE invalid and owned by the hardware: op_own = 0xf1.
    for i in 0..CQES as usize {
        cq_ring.write(i * 64 + 63, &[0xf1]);
    }

    let qp = QpLayout {
        qpn: QPN,
        dbrec: qp_dbrec.base.cast(),
        sq: WqLayout {
            buf: sq_ring.base,
            wqe_cnt: SQ_BBS,
            stride: 64,
        },
        rq: WqLayout {
            buf: NonNull::dangling(),
            wqe_cnt: 0,
            stride: 0,
        },
        bf: BfLayout {
            reg: bf_reg.base,
            size: bf_size,
        },
    };
    let caps = SqCaps {
        max_send_sge: 2,
        max_inline_data: 64,
        sig_all: false,
        max_signaled: CQES,
        transport: zverbs::mlx5::Transport::Rc,
    };
    let cq_layout = CqLayout {
        buf: cq_ring.base,
        dbrec: cq_dbrec.base.cast(),
        cqe_cnt: CQES,
        cqe_size: 64,
        cqn: 0x42,
    };

    println!("zverbs wqe_demo: the mlx5 direct send path over ordinary memory\n");
    println!("memory standing in for what mlx5dv_init_obj reports:");
    println!("  send ring           {SQ_BBS} basic blocks x 64 B (QP 0x{QPN:06x})");
    println!("  doorbell record     2 x be32 (MLX5_RCV_DBR, MLX5_SND_DBR)");
    if bf_size == 0 {
        println!("  doorbell register   8 B (bf.size = 0: no BlueFlame)");
    } else {
        println!("  BlueFlame register  2 buffers x {bf_size} B, used alternately");
    }
    println!("  CQ ring             {CQES} CQEs x 64 B, all op_own = 0xf1 (invalid, owner 1)");

    let slots: Vec<SqSlot> = (0..SQ_BBS).map(|_| SqSlot::new()).collect();
    let state = SqState::new(&slots[..]).expect("slots are a power of two");
    let bindings = [CqBinding::send_only(QPN, &state)];
    // SAFETY: the layouts describe the leaked regions above, which live for the program; these
    // are the only queues over them, both new; the register spans 2 x bf.size bytes (8 when
    // bf.size is 0); the CQ serves this QP's send queue with the same state; no CQE
    // compression or scatter-to-CQE is used.
    let (mut sq, mut cq) = unsafe {
        (
            SendQueue::new(&qp, caps, &state, None).expect("valid send queue layout"),
            CompletionQueue::new(&cq_layout, &bindings[..]).expect("valid CQ layout"),
        )
    };

    // Local buffers, in (pretend) registered memory with key LKEY.
    let payload: Vec<u8> = (0..=255).collect();
    let text = b"hello from zverbs: an inline SEND";
    let read_head = vec![0u8; 64];
    let read_tail = vec![0u8; 192];
    let write_sgl = [Sge::from_slice(&payload, LKEY)];
    let send_sgl = [Sge::from_slice(text, LKEY)];
    let read_sgl = [
        Sge::from_slice(&read_head, LKEY),
        Sge::from_slice(&read_tail, LKEY),
    ];
    let imm = 0x1234_abcd;
    let wrs = [
        SendWr::write(1, &write_sgl, REMOTE),
        SendWr::send(2, &send_sgl).inline(),
        SendWr::read(3, &read_sgl, REMOTE.offset(0x1000)),
        SendWr::write_imm(4, &write_sgl, REMOTE.offset(0x2000), imm).signaled(),
    ];
    let titles = [
        format!("RDMA WRITE of {} bytes, unsignaled", payload.len()),
        format!("SEND of {} bytes inline, unsignaled", text.len()),
        format!(
            "RDMA READ of {} + {} bytes into 2 scatter entries, unsignaled",
            read_head.len(),
            read_tail.len()
        ),
        format!("RDMA WRITE with immediate 0x{imm:08x}, signaled"),
    ];

    let mut starts = Vec::new();
    let mut bf_buffer = 0;
    if o.batch {
        println!("\n== posting all four requests as one batch, rung once");
        let mut start = sq.producer();
        // SAFETY: the local buffers outlive the queue's use of them (no NIC reads them here;
        // a real one would until the completion), and the inline source is readable.
        unsafe { sq.post_all(&wrs) }.expect("the batch fits");
        // Where each WQE starts, read back from the ring: each control segment's `ds`.
        for _ in &wrs {
            starts.push(start);
            let ctrl = sq_ring.read((start % SQ_BBS) as usize * 64, 16);
            let ds = u32::from(CtrlSeg::new_unchecked(&ctrl[..]).ds());
            start += ds.div_ceil(4);
        }
        starts.push(start);
        for (i, title) in titles.iter().enumerate() {
            println!("\n-- request {} (wr_id {}): {title}", i + 1, wrs[i].wr_id);
            show_wqe(sq_ring, starts[i], starts[i + 1] - starts[i]);
        }
        show_doorbell(qp_dbrec, bf_reg, bf_size, &mut bf_buffer, false, 0);
    } else {
        for (i, (wr, title)) in wrs.iter().zip(&titles).enumerate() {
            println!("\n== request {} (wr_id {}): {title}", i + 1, wr.wr_id);
            let start = sq.producer();
            starts.push(start);
            // SAFETY: as for the batch: the local buffers outlive the queue's use of them,
            // and the inline source is readable.
            unsafe { sq.post(wr) }.expect("the request fits");
            let blocks = sq.producer() - start;
            show_wqe(sq_ring, start, blocks);
            show_doorbell(qp_dbrec, bf_reg, bf_size, &mut bf_buffer, true, blocks);
        }
        starts.push(sq.producer());
    }

    // Play the NIC: the last request was the only signaled one; its CQE retires all four.
    let last = starts[3];
    let mut cqe = [0u8; 64];
    let mut c = Cqe64::new_unchecked(&mut cqe);
    c.set_sop_drop_qpn((u32::from(opcode::RDMA_WRITE_IMM) << 24) | QPN);
    c.set_wqe_counter(last as u16);
    c.set_op_own(CqeOpcode::Req.to_raw() << 4); // owner bit 0: the first pass over the ring
    cq_ring.write(0, &cqe);
    println!("\n== the NIC completes request 4: a requester CQE in slot 0 of the CQ ring");
    hexdump(&cq_ring.read(0, 64), |off| match off {
        0x20 => "srqn_uidx | imm_inval_pkey | reserved | byte_cnt".into(),
        0x30 => "timestamp | sop_drop_qpn | wqe_counter, signature, op_own".into(),
        _ => String::new(),
    });
    let c = Cqe64::new_unchecked(&cqe);
    println!(
        "  sop_drop_qpn 0x{:08x} (send opcode 0x{:02x}, qpn 0x{:06x}), wqe_counter {}, op_own 0x{:02x} (opcode {:?}, owner {})",
        c.sop_drop_qpn(),
        c.send_opcode(),
        c.qpn(),
        c.wqe_counter(),
        c.op_own(),
        c.opcode(),
        c.owner()
    );

    let before = sq.free_blocks();
    let mut wc = [Completion::EMPTY; 4];
    let n = cq.poll(&mut wc);
    println!("\n== CompletionQueue::poll returned {n} completion(s)");
    for w in &wc[..n] {
        println!(
            "  wr_id {}  status {:?} ({})  opcode {:?}  qp_num 0x{:06x}  byte_len {}  \
             immediate {}",
            w.wr_id,
            w.status,
            w.status,
            w.opcode,
            w.qp_num,
            w.byte_len,
            if w.flags.contains(WcFlags::WITH_IMM) {
                "flag set (the requester side reports no value)"
            } else {
                "none"
            }
        );
        println!("  {w:?}");
    }
    println!(
        "  CQ doorbell record: dbrec[MLX5_CQ_SET_CI] = {} (consumer counter {})",
        hex(&cq_dbrec.read(4 * CQ_SET_CI, 4)),
        cq_dbrec.be32(CQ_SET_CI)
    );
    println!(
        "  send queue credits: {before} free basic blocks before the poll, {} after (the \
         unsignaled requests 1-3 were retired with request 4)",
        sq.free_blocks()
    );
}

/// Shows the WQE of `blocks` basic blocks starting at producer counter `start`.
fn show_wqe(ring: Region, start: u32, blocks: u32) {
    let mut wqe = Vec::new();
    for b in 0..blocks {
        let slot = (start + b) % SQ_BBS;
        wqe.extend(ring.read(slot as usize * 64, 64));
    }
    println!(
        "  WQE at basic block {} ({} block{}):",
        start % SQ_BBS,
        blocks,
        if blocks == 1 { "" } else { "s" }
    );
    let labels = describe(&wqe);
    hexdump(&wqe, |off| {
        labels.get(off / 16).cloned().unwrap_or_default()
    });
}

/// Shows the doorbell record and what the ring wrote to the register.
fn show_doorbell(
    dbrec: Region,
    reg: Region,
    bf_size: u32,
    bf_buffer: &mut u32,
    single: bool,
    blocks: u32,
) {
    println!(
        "  doorbell record: dbrec[MLX5_SND_DBR] = {} (send producer counter {})",
        hex(&dbrec.read(4 * SND_DBR, 4)),
        dbrec.be32(SND_DBR)
    );
    let off = (*bf_buffer * bf_size) as usize;
    if single && bf_size != 0 && blocks * 64 <= bf_size {
        println!(
            "  BlueFlame buffer {} (register offset 0x{off:03x}): the whole WQE, in 64-bit stores",
            *bf_buffer
        );
        hexdump(&reg.read(off, (blocks * 64) as usize), |_| String::new());
    } else {
        println!(
            "  doorbell (register offset 0x{off:03x}): {}  the first 8 bytes of the last \
             control segment",
            hex(&reg.read(off, 8))
        );
    }
    if bf_size != 0 {
        *bf_buffer ^= 1;
    }
}

/// A label for each 16-byte segment of a send WQE, decoded from its bytes.
fn describe(wqe: &[u8]) -> Vec<String> {
    let ctrl = CtrlSeg::new_unchecked(&wqe[..16]);
    let op = ctrl.opcode();
    let ds = usize::from(ctrl.ds());
    let mut flags = Vec::new();
    let f = ctrl.fm_ce_se();
    if f & fm_ce_se::CQ_UPDATE != 0 {
        flags.push("CQ_UPDATE");
    }
    if f & fm_ce_se::SOLICITED != 0 {
        flags.push("SOLICITED");
    }
    if f & fm_ce_se::FENCE != 0 {
        flags.push("FENCE");
    }
    let mut labels = vec![format!(
        "ctrl   {} (0x{op:02x}) wqe_index {} qpn 0x{:06x} ds {ds} fm_ce_se 0x{f:02x}{} imm 0x{:08x}",
        opcode_name(op),
        ctrl.wqe_index(),
        ctrl.qpn(),
        if flags.is_empty() {
            String::new()
        } else {
            format!(" ({})", flags.join("|"))
        },
        ctrl.imm()
    )];
    let mut seg = 1;
    let seg_bytes = |i: usize| &wqe[16 * i..16 * i + 16];
    if matches!(
        op,
        opcode::RDMA_WRITE
            | opcode::RDMA_WRITE_IMM
            | opcode::RDMA_READ
            | opcode::ATOMIC_CS
            | opcode::ATOMIC_FA
    ) && seg < ds
    {
        let r = RaddrSeg::new_unchecked(seg_bytes(seg));
        labels.push(format!("raddr  0x{:x} rkey 0x{:08x}", r.raddr(), r.rkey()));
        seg += 1;
    }
    if matches!(op, opcode::ATOMIC_CS | opcode::ATOMIC_FA) && seg < ds {
        let a = AtomicSeg::new_unchecked(seg_bytes(seg));
        labels.push(format!(
            "atomic swap_add 0x{:x} compare 0x{:x}",
            a.swap_add(),
            a.compare()
        ));
        seg += 1;
    }
    while seg < ds {
        if let Some(len) = parse_inline_header(seg_bytes(seg)) {
            let n = (4 + len as usize).div_ceil(16);
            let data = &wqe[16 * seg + 4..(16 * seg + 4 + len as usize).min(wqe.len())];
            labels.push(format!(
                "inline byte_count {len} | MLX5_INLINE_SEG: {:?}",
                String::from_utf8_lossy(data)
            ));
            for _ in 1..n {
                labels.push("       (inline data)".into());
            }
            seg += n;
        } else {
            let d = DataSeg::new_unchecked(seg_bytes(seg));
            labels.push(format!(
                "data   byte_count {} lkey 0x{:08x} addr 0x{:x}",
                d.byte_count(),
                d.lkey(),
                d.addr()
            ));
            seg += 1;
        }
    }
    while labels.len() < wqe.len() / 16 {
        labels.push("(past ds: not part of the WQE)".into());
    }
    labels
}

fn opcode_name(op: u8) -> &'static str {
    match op {
        opcode::NOP => "NOP",
        opcode::RDMA_WRITE => "RDMA_WRITE",
        opcode::RDMA_WRITE_IMM => "RDMA_WRITE_IMM",
        opcode::SEND => "SEND",
        opcode::SEND_IMM => "SEND_IMM",
        opcode::RDMA_READ => "RDMA_READ",
        opcode::ATOMIC_CS => "ATOMIC_CS",
        opcode::ATOMIC_FA => "ATOMIC_FA",
        _ => "unknown",
    }
}

/// Bytes as space-separated hex.
fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// 16 bytes a line, with the offset and a label for each line.
fn hexdump(bytes: &[u8], label: impl Fn(usize) -> String) {
    for (i, line) in bytes.chunks(16).enumerate() {
        let off = i * 16;
        let (a, b) = line.split_at(line.len().min(8));
        let l = label(off);
        let text = format!("    {off:04x}  {:<23}  {:<23}  {l}", hex(a), hex(b));
        println!("{}", text.trim_end());
    }
}

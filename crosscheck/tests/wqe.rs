//! Whole WQEs: zverbs' `SendQueue` writes, request after request, the bytes that libmlx5's
//! `_mlx5_post_send` lays out for the same requests (modelled by the C probe with
//! `mlx5dv_set_ctrl_seg`, `mlx5dv_set_data_seg` and the header's structs), writes the doorbell
//! record as `post_send_db` does, rings BlueFlame or the doorbell, and gets its credits back
//! through CQEs.
//!
//! Both queues run side by side in `zverbs_crosscheck::send_run`'s harness, which compares
//! the WQEs after every post, and the doorbell record and the BlueFlame register after every
//! ring. Requests are random (every operation, 0..=max SGEs with zero-length ones among them,
//! inline payloads up to the limit, signaled or not, fence, solicited, edge values in every
//! field); where libmlx5 stores nothing and leaves stale ring bytes (the padding after inline
//! data, the compare word of a fetch-and-add), ours must write zero. The BlueFlame register
//! holds the WQE whenever it is the one WQE since the last ring and fits the buffer: that is
//! zverbs' policy; libmlx5 44 takes the BlueFlame path only when, in addition, the WQE has
//! more than one segment and carries inline data or the context prefers BlueFlame, and rings
//! the doorbell otherwise. Both are valid for the device.

use zverbs_core::{RemoteBuf, SendFlags, SendOp, SendWr, Sge, Transport};
use zverbs_crosscheck::SplitMix64;
use zverbs_crosscheck::ffi::op;
use zverbs_crosscheck::probe::CRequest;
use zverbs_crosscheck::send_run::{self, Config, Driver, Harness, Request, split};
use zverbs_mlx5dv::Connected;
use zverbs_mlx5dv::prm::opcode;

const CONFIGS: &[Config] = &[
    Config {
        name: "4 blocks, 1-block WQEs, BlueFlame 64",
        wqe_cnt: 4,
        max_send_sge: 2,
        max_inline_data: 28,
        transport: Transport::Rc,
        bf_size: 64,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "8 blocks, BlueFlame 256",
        wqe_cnt: 8,
        max_send_sge: 4,
        max_inline_data: 60,
        transport: Transport::Rc,
        bf_size: 256,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "16 blocks, doorbell only, sq_sig_all",
        wqe_cnt: 16,
        max_send_sge: 8,
        max_inline_data: 124,
        transport: Transport::Rc,
        bf_size: 0,
        sig_all: true,
        min_wqes: 10_000,
    },
    Config {
        name: "64 blocks, BlueFlame 256",
        wqe_cnt: 64,
        max_send_sge: 16,
        max_inline_data: 220,
        transport: Transport::Rc,
        bf_size: 256,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "32 blocks, 63-segment WQEs, BlueFlame 1024",
        wqe_cnt: 32,
        max_send_sge: 61,
        max_inline_data: 972,
        transport: Transport::Rc,
        bf_size: 1024,
        sig_all: false,
        min_wqes: 10_000,
    },
    Config {
        name: "128 blocks, no inline, BlueFlame 512",
        wqe_cnt: 128,
        max_send_sge: 30,
        max_inline_data: 0,
        transport: Transport::Rc,
        bf_size: 512,
        sig_all: false,
        min_wqes: 10_000,
    },
];

/// A random request, in a form both sides can be given.
#[derive(Clone, Debug)]
struct Req {
    op: u32,
    sgl: Vec<Sge>,
    flags: SendFlags,
    remote: RemoteBuf,
    imm: u32,
    compare: u64,
    swap_add: u64,
}

impl Request for Req {
    fn send_wr(&self, wr_id: u64) -> SendWr<'_> {
        let (sgl, remote) = (&self.sgl[..], self.remote);
        let op = match self.op {
            op::WRITE => SendOp::Write { sgl, remote },
            op::WRITE_IMM => SendOp::WriteImm {
                sgl,
                remote,
                imm: self.imm,
            },
            op::SEND => SendOp::Send { sgl },
            op::SEND_IMM => SendOp::SendImm { sgl, imm: self.imm },
            op::READ => SendOp::Read { sgl, remote },
            op::CS => SendOp::CompareSwap {
                local: sgl[0],
                remote,
                compare: self.compare,
                swap: self.swap_add,
            },
            op::FA => SendOp::FetchAdd {
                local: sgl[0],
                remote,
                add: self.swap_add,
            },
            _ => SendOp::Nop,
        };
        SendWr::new(wr_id, op).with_flags(self.flags)
    }

    /// The same request for the C side; the `IBV_SEND_*` values equal `SendFlags`' bits
    /// (checked by the layout test).
    fn c_request(&self) -> CRequest<'_> {
        CRequest {
            op: self.op,
            sgl: &self.sgl,
            send_flags: self.flags.bits(),
            remote_addr: self.remote.addr,
            rkey: self.remote.rkey,
            imm: self.imm,
            compare_add: if self.op == op::FA {
                self.swap_add
            } else {
                self.compare
            },
            swap: self.swap_add,
            ..CRequest::default()
        }
    }

    fn mlx5_opcode(&self) -> u8 {
        match self.op {
            op::WRITE => opcode::RDMA_WRITE,
            op::WRITE_IMM => opcode::RDMA_WRITE_IMM,
            op::SEND => opcode::SEND,
            op::SEND_IMM => opcode::SEND_IMM,
            op::READ => opcode::RDMA_READ,
            op::CS => opcode::ATOMIC_CS,
            op::FA => opcode::ATOMIC_FA,
            _ => opcode::NOP,
        }
    }

    fn flags(&self) -> SendFlags {
        self.flags
    }

    fn sgl(&self) -> &[Sge] {
        &self.sgl
    }
}

impl Req {
    fn nop(flags: SendFlags) -> Self {
        Self {
            op: op::NOP,
            sgl: Vec::new(),
            flags,
            remote: RemoteBuf::default(),
            imm: 0,
            compare: 0,
            swap_add: 0,
        }
    }
}

fn random_req(rng: &mut SplitMix64, cfg: &Config, payload: &[u8]) -> Req {
    let ops = [
        op::WRITE,
        op::WRITE_IMM,
        op::SEND,
        op::SEND_IMM,
        op::READ,
        op::CS,
        op::FA,
        op::NOP,
    ];
    let op = rng.pick(&ops);
    let mut flags = SendFlags::NONE;
    if rng.chance(1, 3) {
        flags |= SendFlags::SIGNALED;
    }
    if rng.chance(1, 8) {
        flags |= SendFlags::FENCE;
    }
    if rng.chance(1, 8) {
        flags |= SendFlags::SOLICITED;
    }
    let mut remote = RemoteBuf::new(rng.edgy_u64(), rng.edgy_u32());
    let mut sgl = Vec::new();
    match op {
        op::CS | op::FA => {
            remote.addr &= !7;
            sgl.push(Sge::new(rng.edgy_u64() & !7, 8, rng.edgy_u32()));
        }
        op::NOP => {}
        _ => {
            let n = rng.range(0, u64::from(cfg.max_send_sge)) as usize;
            let can_inline = op != op::READ && cfg.max_inline_data > 0;
            if can_inline && rng.chance(1, 3) {
                flags |= SendFlags::INLINE;
                let max = u64::from(cfg.max_inline_data);
                let total = if rng.chance(1, 4) {
                    rng.pick(&[0, 1, 12, 13, max - 1, max]).min(max)
                } else {
                    rng.range(0, max)
                };
                for len in split(rng, total, n) {
                    let off = rng.range(0, payload.len() as u64 - len);
                    let addr = payload.as_ptr() as u64 + off;
                    sgl.push(Sge::new(addr, len as u32, rng.edgy_u32()));
                }
            } else {
                // Keep the message within 2 GiB, the largest an RDMA message may be.
                let per = (1u64 << 31) / n.max(1) as u64;
                for _ in 0..n {
                    let len = match rng.below(6) {
                        0 => 0,
                        1 => rng.range(1, 64),
                        2 => per,
                        _ => rng.range(1, per),
                    };
                    sgl.push(Sge::new(rng.edgy_u64(), len as u32, rng.edgy_u32()));
                }
            }
        }
    }
    Req {
        op,
        sgl,
        flags,
        remote,
        imm: rng.edgy_u32(),
        compare: rng.edgy_u64(),
        swap_add: rng.edgy_u64(),
    }
}

/// The RC requests, and how many of each operation were compared.
#[derive(Default)]
struct Rc {
    per_op: [u64; 8],
}

impl Driver for Rc {
    type Kind = Connected;
    type Req = Req;

    fn random(&mut self, h: &mut Harness<'_, Connected>) -> Req {
        random_req(h.rng, &h.cfg, &h.payload)
    }

    fn close(&mut self, _: &mut Harness<'_, Connected>) -> Req {
        Req::nop(SendFlags::SIGNALED)
    }

    fn posted(&mut self, req: &Req) {
        self.per_op[req.op as usize] += 1;
    }
}

#[test]
fn send_queue_wqes_match_libmlx5() {
    let (mut rng, seed) = SplitMix64::for_test(0x5eed_e0e0, 7);
    let mut rc = Rc::default();
    let stats = send_run::run_all("wqe", CONFIGS, &mut rng, seed, &mut rc);
    let s = &stats;
    eprintln!(
        "wqe: {} randomized WQEs compared with libmlx5's layout (WRITE {}, WRITE_IMM {}, SEND {}, \
         SEND_IMM {}, READ {}, CS {}, FA {}, NOP {}); {} inline, {} zero-length SGEs skipped, \
         {} WQEs wrapping the ring end ({} inline), {} WQE-index wraps, {} bytes libmlx5 leaves stale (zero in \
         ours); {} batches; {} BlueFlame rings, {} doorbell rings; {} completions",
        s.wqes,
        rc.per_op[0],
        rc.per_op[1],
        rc.per_op[2],
        rc.per_op[3],
        rc.per_op[4],
        rc.per_op[5],
        rc.per_op[6],
        rc.per_op[7],
        s.inline,
        s.zero_len_sges,
        s.wrapped,
        s.inline_wrapped,
        s.index_wraps,
        s.left_by_libmlx5,
        s.batches,
        s.blueflame,
        s.doorbell,
        s.completions,
    );
    s.assert_coverage(CONFIGS.len());
}

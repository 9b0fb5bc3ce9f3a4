//! rdma-core completion channels: `ibv_create_comp_channel`, CQs created on one, their events
//! taken with `ibv_get_cq_event` and acknowledged with `ibv_ack_cq_events` in batches.

use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use super::{VerbsContext, VerbsCq, init_obj};
use crate::error::{Error, Result};
use crate::provider::{ChannelProvider, CqEngine, CqProvider, EngineNote};
use zverbs_ffi::load::Verbs;
use zverbs_ffi::types::{ibv_comp_channel, ibv_cq, ibv_cq_ex};
use zverbs_mlx5dv::prm::dv::mlx5dv_cq;

/// Events acknowledged together (one `ibv_ack_cq_events` takes the CQ's mutex).
const ACK_BATCH: u32 = 64;

/// An rdma-core completion channel, its descriptor made non-blocking.
#[derive(Debug)]
pub(super) struct VerbsChannel {
    ch: NonNull<ibv_comp_channel>,
    verbs: &'static Verbs,
}

// SAFETY: libibverbs' channel may be used from any thread; the fields are immutable.
unsafe impl Send for VerbsChannel {}
// SAFETY: as above.
unsafe impl Sync for VerbsChannel {}

impl VerbsChannel {
    pub(super) fn new(ctx: &VerbsContext) -> Result<Self> {
        // SAFETY: a live context.
        let ch = unsafe { (ctx.verbs.ibv_create_comp_channel)(ctx.ctx) };
        let ch = NonNull::new(ch).ok_or_else(|| Error::last_os("ibv_create_comp_channel"))?;
        let out = Self {
            ch,
            verbs: ctx.verbs,
        };
        let fd = out.fd();
        // SAFETY: the channel's open descriptor; flags only.
        let ok = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            flags >= 0 && libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
        };
        if !ok {
            return Err(Error::last_os(
                "fcntl(O_NONBLOCK) on the completion channel",
            ));
        }
        Ok(out)
    }
}

impl ChannelProvider for VerbsChannel {
    fn fd(&self) -> RawFd {
        // SAFETY: a live channel.
        unsafe { (*self.ch.as_ptr()).fd }
    }

    fn take_event(&self) -> Result<Option<usize>> {
        let mut cq: *mut ibv_cq = std::ptr::null_mut();
        let mut cq_ctx = std::ptr::null_mut();
        // SAFETY: a live channel; two out-pointers. The descriptor is non-blocking.
        let r = unsafe { (self.verbs.ibv_get_cq_event)(self.ch.as_ptr(), &mut cq, &mut cq_ctx) };
        if r == 0 {
            return Ok(Some(cq as usize));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::WouldBlock {
            return Ok(None);
        }
        Err(Error::Verbs {
            verb: "ibv_get_cq_event",
            source: e,
        })
    }

    fn verbs_channel(&self) -> Option<*mut ibv_comp_channel> {
        Some(self.ch.as_ptr())
    }
}

impl Drop for VerbsChannel {
    fn drop(&mut self) {
        // SAFETY: ours, destroyed once, after every CQ on it (they hold the channel alive).
        unsafe { (self.verbs.ibv_destroy_comp_channel)(self.ch.as_ptr()) };
    }
}

/// A CQ created on a channel: the CQ (an extended one when it has completion timestamps), its
/// events taken and not yet acknowledged, and for a direct CQ the UAR page its arm writes.
#[derive(Debug)]
pub(super) struct ChannelCq {
    // Field order is drop order, but the events are acknowledged in `drop` first.
    cq: VerbsCq,
    unacked: AtomicU32,
    cq_uar: Option<NonNull<u8>>,
}

// SAFETY: as `VerbsCq`; the UAR pointer is only handed to the one arm of the CQ.
unsafe impl Send for ChannelCq {}
// SAFETY: as above; `unacked` is atomic.
unsafe impl Sync for ChannelCq {}

impl ChannelCq {
    fn ack(&self, n: u32) {
        if n > 0 {
            // SAFETY: a live CQ; `n` events of it were taken with ibv_get_cq_event.
            unsafe { (self.cq.verbs.ibv_ack_cq_events)(self.cq.cq.as_ptr(), n) };
        }
    }
}

impl CqProvider for ChannelCq {
    fn cqe(&self) -> u32 {
        self.cq.cqe()
    }
    fn engine(&self) -> CqEngine {
        self.cq.engine()
    }
    fn verbs_cq(&self) -> Option<*mut ibv_cq> {
        self.cq.verbs_cq()
    }
    fn timestamps(&self) -> bool {
        self.cq.timestamps()
    }
    fn verbs_cq_ex(&self) -> Option<*mut ibv_cq_ex> {
        self.cq.verbs_cq_ex()
    }
    fn event_token(&self) -> usize {
        self.cq.cq.as_ptr() as usize
    }
    fn cq_uar(&self) -> Option<NonNull<u8>> {
        self.cq_uar
    }
    fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: a live CQ with a channel; the provider's own entry.
        let r = unsafe {
            zverbs_ffi::ibv_req_notify_cq(self.cq.cq.as_ptr(), i32::from(solicited_only))
        };
        if r != 0 {
            return Err(Error::from_ret("ibv_req_notify_cq", r));
        }
        Ok(())
    }
    fn event_taken(&self) {
        let n = self.unacked.fetch_add(1, Ordering::Relaxed) + 1;
        if n >= ACK_BATCH {
            self.ack(self.unacked.swap(0, Ordering::Relaxed));
        }
    }
}

impl Drop for ChannelCq {
    fn drop(&mut self) {
        // Before `ibv_destroy_cq` (which waits until every event taken is acknowledged).
        self.ack(self.unacked.swap(0, Ordering::Relaxed));
    }
}

/// A CQ of at least `cqe` entries on `channel`; with `timestamps`, an extended CQ whose
/// completions carry the device clock (`ibv_create_cq_ex`).
pub(super) fn create_cq(
    ctx: &VerbsContext,
    cqe: u32,
    direct: bool,
    channel: &dyn ChannelProvider,
    timestamps: bool,
) -> Result<(Box<dyn CqProvider>, EngineNote)> {
    let ch = channel.verbs_channel().ok_or_else(|| {
        Error::InvalidArgument("the completion channel is not an rdma-core one".into())
    })?;
    let (cq, cq_ex) = if timestamps {
        let ex = ctx.create_cq_ex(cqe, ch)?;
        // `ibv_cq_ex_to_cq`: an extended CQ starts as `struct ibv_cq`.
        (ex.cast::<ibv_cq>(), Some(ex))
    } else {
        let n = i32::try_from(cqe.max(1))
            .map_err(|_| Error::InvalidArgument(format!("CQ of {cqe} entries")))?;
        // SAFETY: a live context and a channel of it; vector 0.
        let cq = unsafe { (ctx.verbs.ibv_create_cq)(ctx.ctx, n, std::ptr::null_mut(), ch, 0) };
        let Some(cq) = NonNull::new(cq) else {
            return Err(Error::last_os("ibv_create_cq"));
        };
        (cq, None)
    };
    let mut out = ChannelCq {
        cq: VerbsCq {
            cq,
            verbs: ctx.verbs,
            layout: None,
            cq_ex,
        },
        unacked: AtomicU32::new(0),
        cq_uar: None,
    };
    let stamped = if timestamps {
        "ibv_create_cq_ex with completion timestamps; "
    } else {
        ""
    };
    let note = if direct {
        let mut dv = mlx5dv_cq::default();
        // SAFETY: a live CQ of an mlx5 context, and `dv` is a valid out-struct.
        let r = unsafe {
            init_obj(zverbs_ffi::types::MLX5DV_OBJ_CQ, |obj| {
                obj.cq.r#in = cq.as_ptr();
                obj.cq.out = &mut dv;
            })
        };
        match (r, dv.layout(), NonNull::new(dv.cq_uar.cast::<u8>())) {
            (Ok(()), Some(l), Some(uar)) => {
                out.cq.layout = Some(l);
                out.cq_uar = Some(uar);
                format!(
                    "{stamped}mlx5dv_init_obj: CQ {:#x}, {} CQEs of {} bytes, armed through its \
                     UAR",
                    l.cqn, l.cqe_cnt, l.cqe_size
                )
            }
            (Err(e), _, _) => format!("CQ: {e}"),
            _ => String::from("mlx5dv_init_obj(CQ) reported a null buffer or UAR"),
        }
    } else if timestamps {
        String::from("libibverbs ibv_start_poll with completion timestamps, ibv_req_notify_cq")
    } else {
        String::from("libibverbs ibv_poll_cq, ibv_req_notify_cq")
    };
    Ok((Box::new(out), EngineNote(note)))
}

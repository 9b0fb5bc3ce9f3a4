//! Posting without `unsafe`: queues that only take buffers the library owns.
//!
//! The [`PostSend`] / [`PostRecv`] methods are `unsafe` because the device touches memory by
//! address. Here every local buffer is a [`BufSlice`] of an [`MrBuf`]: bounds-checked against
//! the buffer, with the buffer's own key. That is enough for memory safety:
//!
//! - Rust code never holds a reference into an [`MrBuf`] (it copies in and out, with atomic
//!   accesses: see its memory model), so the device writing at any time can neither break an
//!   aliasing guarantee nor race with a read;
//! - an `MrBuf` is deregistered before its memory is freed, and after deregistration the device
//!   no longer accesses it: dropping a buffer while a request still uses it makes that request
//!   fail with a protection error, never a write into freed memory;
//! - inline payloads are plain `&[u8]`, copied during the call.
//!
//! Remote addresses are the peer's memory, protected by its keys on the peer's side.
//!
//! What stays the caller's business is meaning, not safety: reading a buffer before the
//! completion of the request that fills it gives whatever bytes have landed so far.

use std::ops::Range;

use zverbs_core::{PostError, PostRecv, PostSend, RecvWr, RemoteBuf, SendFlags, SendWr, Sge};

use crate::mr::{AccessFlags, MrBuf};

/// A bounds-checked span of an [`MrBuf`].
#[derive(Clone, Copy, Debug)]
pub struct BufSlice<'a> {
    buf: &'a MrBuf,
    sge: Sge,
}

impl MrBuf {
    /// The span `range` of the buffer, or `None` if it is out of bounds.
    pub fn slice(&self, range: Range<usize>) -> Option<BufSlice<'_>> {
        Some(BufSlice {
            buf: self,
            sge: self.sge(range)?,
        })
    }
}

impl BufSlice<'_> {
    /// The scatter entry it stands for.
    pub fn sge(&self) -> Sge {
        self.sge
    }

    /// Its length.
    pub fn len(&self) -> u32 {
        self.sge.length
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.sge.length == 0
    }

    fn writable(&self) -> Result<Sge, SafePostError> {
        if self.buf.access().contains(AccessFlags::LOCAL_WRITE) {
            Ok(self.sge)
        } else {
            Err(SafePostError::NotWritable)
        }
    }
}

/// Why a safe post was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SafePostError {
    /// The device would write into a buffer registered without `LOCAL_WRITE`.
    NotWritable,
    /// The queue refused the request.
    Post(PostError),
}

impl std::fmt::Display for SafePostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::NotWritable => {
                f.write_str("the device would write into a buffer registered without LOCAL_WRITE")
            }
            Self::Post(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SafePostError {}

impl From<PostError> for SafePostError {
    fn from(e: PostError) -> Self {
        Self::Post(e)
    }
}

/// A send queue that posts only [`BufSlice`]s and inline bytes. Requests are written by the
/// methods and made visible by [`SafeSendQueue::ring`].
#[derive(Debug)]
pub struct SafeSendQueue<Q> {
    q: Q,
}

impl<Q: PostSend> SafeSendQueue<Q> {
    /// Wraps a send queue of either backend.
    pub fn new(q: Q) -> Self {
        Self { q }
    }

    /// The wrapped queue (posting through it directly is `unsafe`).
    pub fn get_mut(&mut self) -> &mut Q {
        &mut self.q
    }

    fn post(&mut self, wr: &SendWr<'_>) -> Result<(), SafePostError> {
        // SAFETY: every local entry is a bounds-checked span of an `MrBuf` with its own key
        // (see the module docs: such memory is never referenced by Rust and is deregistered
        // before it is freed); inline sources are `&[u8]` live for this call.
        unsafe { self.q.post_send(wr) }.map_err(Into::into)
    }

    /// RDMA WRITE of `local` to `remote`.
    ///
    /// # Errors
    ///
    /// [`SafePostError::Post`] when the queue refuses it.
    pub fn write(
        &mut self,
        wr_id: u64,
        local: BufSlice<'_>,
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let sgl = [local.sge];
        self.post(&SendWr::write(wr_id, &sgl, remote).with_flags(flags))
    }

    /// RDMA WRITE with immediate.
    ///
    /// # Errors
    ///
    /// As [`SafeSendQueue::write`].
    pub fn write_imm(
        &mut self,
        wr_id: u64,
        local: BufSlice<'_>,
        remote: RemoteBuf,
        imm: u32,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let sgl = [local.sge];
        self.post(&SendWr::write_imm(wr_id, &sgl, remote, imm).with_flags(flags))
    }

    /// RDMA WRITE of `data`, copied into the request (inline).
    ///
    /// # Errors
    ///
    /// As [`SafeSendQueue::write`] (including `InlineTooLarge`).
    pub fn write_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let sgl = [Sge::from_slice(data, 0)];
        self.post(&SendWr::write(wr_id, &sgl, remote).with_flags(flags | SendFlags::INLINE))
    }

    /// SEND of `local`.
    ///
    /// # Errors
    ///
    /// As [`SafeSendQueue::write`].
    pub fn send(
        &mut self,
        wr_id: u64,
        local: BufSlice<'_>,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let sgl = [local.sge];
        self.post(&SendWr::send(wr_id, &sgl).with_flags(flags))
    }

    /// SEND with immediate.
    ///
    /// # Errors
    ///
    /// As [`SafeSendQueue::write`].
    pub fn send_imm(
        &mut self,
        wr_id: u64,
        local: BufSlice<'_>,
        imm: u32,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let sgl = [local.sge];
        self.post(&SendWr::send_imm(wr_id, &sgl, imm).with_flags(flags))
    }

    /// SEND of `data`, copied into the request (inline).
    ///
    /// # Errors
    ///
    /// As [`SafeSendQueue::write_inline`].
    pub fn send_inline(
        &mut self,
        wr_id: u64,
        data: &[u8],
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let sgl = [Sge::from_slice(data, 0)];
        self.post(&SendWr::send(wr_id, &sgl).with_flags(flags | SendFlags::INLINE))
    }

    /// RDMA READ of `remote` into `local`.
    ///
    /// # Errors
    ///
    /// [`SafePostError::NotWritable`] unless `local`'s buffer has `LOCAL_WRITE`; as
    /// [`SafeSendQueue::write`].
    pub fn read(
        &mut self,
        wr_id: u64,
        local: BufSlice<'_>,
        remote: RemoteBuf,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let sgl = [local.writable()?];
        self.post(&SendWr::read(wr_id, &sgl, remote).with_flags(flags))
    }

    /// Atomic fetch-and-add at `remote`; the old value lands in `local` (8 bytes).
    ///
    /// # Errors
    ///
    /// As [`SafeSendQueue::read`] (including `AtomicSize`, `AtomicAlignment`).
    pub fn fetch_add(
        &mut self,
        wr_id: u64,
        local: BufSlice<'_>,
        remote: RemoteBuf,
        add: u64,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let local = local.writable()?;
        self.post(&SendWr::fetch_add(wr_id, local, remote, add).with_flags(flags))
    }

    /// Atomic compare-and-swap at `remote`; the old value lands in `local` (8 bytes).
    ///
    /// # Errors
    ///
    /// As [`SafeSendQueue::fetch_add`].
    pub fn compare_swap(
        &mut self,
        wr_id: u64,
        local: BufSlice<'_>,
        remote: RemoteBuf,
        compare: u64,
        swap: u64,
        flags: SendFlags,
    ) -> Result<(), SafePostError> {
        let local = local.writable()?;
        self.post(&SendWr::compare_swap(wr_id, local, remote, compare, swap).with_flags(flags))
    }

    /// Makes every request posted since the last ring visible to the device.
    pub fn ring(&mut self) {
        self.q.ring();
    }
}

/// A receive queue that posts only [`BufSlice`]s of writable buffers.
#[derive(Debug)]
pub struct SafeRecvQueue<Q> {
    q: Q,
}

impl<Q: PostRecv> SafeRecvQueue<Q> {
    /// Wraps a receive queue of either backend.
    pub fn new(q: Q) -> Self {
        Self { q }
    }

    /// The wrapped queue (posting through it directly is `unsafe`).
    pub fn get_mut(&mut self) -> &mut Q {
        &mut self.q
    }

    /// Posts a receive into `local`.
    ///
    /// # Errors
    ///
    /// [`SafePostError::NotWritable`] unless the buffer has `LOCAL_WRITE`;
    /// [`SafePostError::Post`] when the queue refuses it.
    pub fn post(&mut self, wr_id: u64, local: BufSlice<'_>) -> Result<(), SafePostError> {
        let sgl = [local.writable()?];
        // SAFETY: a bounds-checked span of an `MrBuf` with its own key (module docs).
        unsafe { self.q.post_recv(&RecvWr::new(wr_id, &sgl)) }.map_err(Into::into)
    }
}

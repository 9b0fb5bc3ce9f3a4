//! Jobs launched through PMIx: every process of an `mpirun -n N` (or `srun --mpi=pmix`) job
//! connected to every other, with no address on any command line.
//!
//! A PMIx launcher starts each process with the address of its local PMIx server in the
//! environment (`PMIX_NAMESPACE`, `PMIX_RANK`, `PMIX_SERVER_URI*`). [`Job::init`] opens the
//! client library (`libpmix.so.2`, loaded at run time like rdma-core: nothing links against
//! it) and calls `PMIx_Init`; the job then knows this process's [rank](Job::rank) and the job's
//! [size](Job::size) (`PMIX_JOB_SIZE`). [`Job::exchange`] publishes one byte string per process
//! (`PMIx_Put` with `PMIX_GLOBAL` scope, `PMIx_Commit`), waits for every process
//! (`PMIx_Fence` with `PMIX_COLLECT_DATA`) and reads every peer's (`PMIx_Get`).
//! `PMIx_Finalize` runs when the [`Job`] is dropped.
//!
//! Every fence and every get has a [deadline](Job::deadline) ([`Job::DEFAULT_DEADLINE`], 30 s,
//! unless [`Job::set_deadline`] says otherwise), passed to PMIx as `PMIX_TIMEOUT`: a process of
//! the job that never arrives (it crashed before its fence, hangs, or never started) makes
//! every other fail with [`PmixError::Timeout`], naming the step and the deadline, instead of
//! waiting until the launcher kills the job.
//!
//! [`Job::connect_all`] builds the full mesh of RC connections on that exchange: each process
//! creates one QP per peer (N−1), publishes their QP numbers and PSNs with its LID, GID and an
//! optional registered region in one record ([`MeshRecord`]), fences, reads its peers' records,
//! connects QP *j* to peer *j*'s QP for it, and fences again so that no process sends before
//! every QP it may reach is ready to receive.
//!
//! ```no_run
//! use zverbs::connect::pmix::Job;
//! use zverbs::{AccessFlags, ContextOptions, Registered};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let job = Job::init()?; // fails with a message naming the fix outside a PMIx launcher
//! let ctx = zverbs::open_device(None, &ContextOptions::default())?;
//! let pd = ctx.alloc_pd()?;
//! let buf = pd.alloc_buf(4096, AccessFlags::ALL)?;
//! let cq = ctx.cq_builder().cqe(1024).build()?;
//! let region = zverbs::connect::RemoteRegion { addr: buf.addr(), rkey: buf.rkey(), len: 4096 };
//! let mesh = job.connect_all(Some(region), |_peer| pd.qp_builder(&cq, &cq).build())?;
//! for peer in mesh.peers() {
//!     println!("rank {} -> rank {}: QP {:#x}", job.rank(), peer.rank, peer.qp.qpn());
//! }
//! # Ok(()) }
//! ```
//!
//! The mesh costs N−1 QPs per process, N(N−1) in the job, and a record of 48 + 8·N bytes per
//! process. [`Job::connect_all_dc`] is the way past that with the dynamically connected
//! transport (mlx5, direct backend): each process has one DC initiator (DCI) and one DC target
//! (DCT, on an SRQ), publishes the target's address with its region in a record of constant
//! size ([`DcRecord`], 60 bytes), fences, and makes a [`DcPeer`] of every peer's record. Two
//! QPs per process whatever N; each request names its peer.
//!
//! Needs the crate feature `pmix` and, at run time, the `libpmix2` package.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString, c_char, c_int};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use zverbs_ffi::pmix::{
    PMIX_BOOL, PMIX_BYTE_OBJECT, PMIX_COLLECT_DATA, PMIX_ERR_TIMEOUT, PMIX_GLOBAL, PMIX_INFO_REQD,
    PMIX_INT, PMIX_JOB_SIZE, PMIX_MAX_KEYLEN, PMIX_RANK_WILDCARD, PMIX_SUCCESS, PMIX_TIMEOUT,
    PMIX_UINT32, Pmix, PmixLoadError, pmix_byte_object_t, pmix_info_t, pmix_proc_t, pmix_status_t,
    pmix_value_data, pmix_value_t,
};

use super::{Endpoint, RemoteRegion};
use crate::dc::{DcAddr, DcPeer};
use crate::pd::Pd;
use crate::qp::Qp;
use crate::types::device::Gid;

/// What went wrong in a PMIx job.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PmixError {
    /// The PMIx client library is not installed.
    #[error("{0}")]
    Library(#[from] PmixLoadError),
    /// The process was not started by a PMIx launcher: there is no server to ask.
    #[error(
        "this process was not started by a PMIx launcher ({detail}): run it under \
         `mpirun -n N` (Open MPI; as root add --allow-run-as-root), `srun --mpi=pmix` (Slurm) \
         or `prterun`"
    )]
    NotLaunched {
        /// What was missing, or what `PMIx_Init` said.
        detail: String,
    },
    /// A PMIx call failed.
    #[error("{call} failed: {text} (status {status})")]
    Call {
        /// The call (`PMIx_Fence`, ...).
        call: &'static str,
        /// Its `pmix_status_t`.
        status: i32,
        /// `PMIx_Error_string`'s text for it.
        text: String,
    },
    /// A fence or a get did not complete within the job's [deadline](Job::deadline)
    /// (`PMIX_ERR_TIMEOUT`): a process of the job has not reached the fence, or has not
    /// published what is read.
    #[error(
        "{step} did not complete within the job's deadline of {} s: a process of the job has \
         not arrived (it exited, hangs or never started); Job::set_deadline gives slow jobs \
         longer",
        deadline.as_secs()
    )]
    Timeout {
        /// The step that gave up (`PMIx_Fence`, `PMIx_Get(zverbs.mesh.1 of rank 3)`, ...).
        step: String,
        /// The deadline it was given.
        deadline: Duration,
    },
    /// A key or value that PMIx cannot carry (a key longer than 511 bytes or with a NUL).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A peer published something this process cannot use.
    #[error("rank {rank} published {detail}")]
    Peer {
        /// The peer's rank.
        rank: u32,
        /// What was wrong with it.
        detail: String,
    },
    /// Creating or connecting a queue pair failed.
    #[error(transparent)]
    Verbs(#[from] crate::error::Error),
}

/// A `Result` with a [`PmixError`].
pub type Result<T> = std::result::Result<T, PmixError>;

/// The environment variable every PMIx server gives the processes it starts (Open MPI's
/// `mpirun`, Slurm's `srun --mpi=pmix`, PRRTE): the job's namespace.
pub const NAMESPACE_ENV: &str = "PMIX_NAMESPACE";

/// This process's membership of a PMIx job: `PMIx_Init` done, `PMIx_Finalize` on drop.
pub struct Job {
    lib: &'static Pmix,
    me: pmix_proc_t,
    size: u32,
    /// Whole seconds, 1 to `c_int::MAX`: `PMIX_TIMEOUT`'s value.
    deadline: c_int,
    /// The keys this process has published ([`Job::put`] refuses a key a second time).
    published: Mutex<BTreeSet<String>>,
    /// [`Job::exchange`] calls made: the round number in each one's key.
    rounds: AtomicU32,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("namespace", &nspace(&self.me))
            .field("rank", &self.me.rank)
            .field("size", &self.size)
            .field("deadline", &self.deadline())
            .finish()
    }
}

fn nspace(p: &pmix_proc_t) -> String {
    let bytes: Vec<u8> = p
        .nspace
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Job {
    /// The deadline of every fence and get unless [`Job::set_deadline`] gives another: long
    /// enough for a job whose processes start seconds apart on a busy machine, short enough
    /// that a missing process is reported long before a batch system's time limit.
    pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(30);

    /// Joins the job this process was launched in: opens `libpmix.so.2`, checks that a PMIx
    /// launcher started the process, calls `PMIx_Init` and reads the job's size.
    ///
    /// # Errors
    ///
    /// [`PmixError::Library`] naming the package to install; [`PmixError::NotLaunched`] when
    /// the process was not started by a PMIx launcher (no `PMIX_NAMESPACE` in the
    /// environment, or `PMIx_Init` refused); [`PmixError::Call`] when the job size cannot be
    /// read.
    pub fn init() -> Result<Self> {
        Self::init_from(zverbs_ffi::pmix::pmix(), |k| std::env::var_os(k).is_some())
    }

    /// [`Job::init`] with the library and the environment given: what the tests use.
    fn init_from(
        lib: std::result::Result<&'static Pmix, PmixLoadError>,
        has_env: impl Fn(&str) -> bool,
    ) -> Result<Self> {
        let lib = lib?;
        // Without a server, `PMIx_Init` fails only after looking for one (`PMIX_ERR_UNREACH`
        // with PMIx 4.2), and some PMIx versions start a singleton job of one instead, in which
        // a program meant for a job would run alone. The launcher's variable answers at once,
        // the same way with every version.
        if !has_env(NAMESPACE_ENV) {
            return Err(PmixError::NotLaunched {
                detail: format!("{NAMESPACE_ENV} is not set"),
            });
        }
        // SAFETY: all-zero is a valid `pmix_proc_t` (an empty namespace, rank 0).
        let mut me: pmix_proc_t = unsafe { std::mem::zeroed() };
        // SAFETY: `me` is writable; no info array is passed.
        let rc = unsafe { (lib.PMIx_Init)(&mut me, std::ptr::null_mut(), 0) };
        if rc != PMIX_SUCCESS {
            return Err(PmixError::NotLaunched {
                detail: format!("PMIx_Init: {} (status {rc})", error_text(lib, rc)),
            });
        }
        let mut job = Self {
            lib,
            me,
            size: 0,
            deadline: Self::DEFAULT_DEADLINE.as_secs() as c_int,
            published: Mutex::new(BTreeSet::new()),
            rounds: AtomicU32::new(0),
        };
        let mut wildcard = me;
        wildcard.rank = PMIX_RANK_WILDCARD;
        let v = job.get_value(&wildcard, PMIX_JOB_SIZE, || {
            "PMIx_Get(PMIX_JOB_SIZE)".into()
        })?;
        job.size = match v.get() {
            // SAFETY: the value's type says the union holds `uint32`.
            Some(v) if v.r#type == PMIX_UINT32 => unsafe { v.data.uint32 },
            Some(v) => {
                return Err(PmixError::Call {
                    call: "PMIx_Get(PMIX_JOB_SIZE)",
                    status: 0,
                    text: format!("a value of type {} where a uint32 was expected", v.r#type),
                });
            }
            None => 0,
        };
        if job.size == 0 || job.me.rank >= job.size {
            return Err(PmixError::Call {
                call: "PMIx_Get(PMIX_JOB_SIZE)",
                status: 0,
                text: format!("job size {} for rank {}", job.size, job.me.rank),
            });
        }
        Ok(job)
    }

    /// This process's rank, 0 to [`Job::size`] − 1.
    pub fn rank(&self) -> u32 {
        self.me.rank
    }

    /// The number of processes in the job (`PMIX_JOB_SIZE`).
    pub fn size(&self) -> u32 {
        self.size
    }

    /// The job's namespace (as the launcher names it).
    pub fn namespace(&self) -> String {
        nspace(&self.me)
    }

    /// How long a [fence](Job::fence) or a [get](Job::get) (and so [`Job::exchange`],
    /// [`Job::connect_all`], [`Job::connect_all_dc`]) waits for the other processes before it
    /// fails with [`PmixError::Timeout`]: [`Job::DEFAULT_DEADLINE`] unless set.
    pub fn deadline(&self) -> Duration {
        Duration::from_secs(self.deadline as u64)
    }

    /// Sets the [deadline](Job::deadline) of the fences and gets that follow. PMIx counts it
    /// in whole seconds (`PMIX_TIMEOUT`): a fraction of a second rounds up.
    ///
    /// Every process of a job should set the same deadline: the one that gives up first
    /// reports the missing process, the others then fail as the job ends.
    ///
    /// # Errors
    ///
    /// [`PmixError::InvalidArgument`], the deadline unchanged, for zero (which PMIx reads as
    /// "wait for ever") or more than `i32::MAX` seconds.
    pub fn set_deadline(&mut self, deadline: Duration) -> Result<()> {
        self.deadline = deadline_secs(deadline)?;
        Ok(())
    }

    /// Publishes `value` under the key `name` for every process of the job (`PMIx_Put` with
    /// `PMIX_GLOBAL` scope, then `PMIx_Commit`); the others read it after the next
    /// [`Job::fence`].
    ///
    /// A key is published once per process: PMIx does not carry a second value under a key
    /// to the other processes (their `PMIx_Get` of it fails with `NOT-FOUND` after the next
    /// fence), so a second `put` of a key is refused here. Rounds of the same exchange take a
    /// key each ([`Job::exchange`] numbers them).
    ///
    /// # Errors
    ///
    /// [`PmixError::InvalidArgument`] for a key PMIx cannot carry or one this process has
    /// published already; [`PmixError::Call`].
    pub fn put(&self, name: &str, value: &[u8]) -> Result<()> {
        let key = c_key(name)?;
        let mut published = self
            .published
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if published.contains(name) {
            return Err(PmixError::InvalidArgument(format!(
                "PMIx key {name:?} is published by this process already: PMIx would not carry \
                 a second value under it to the others (publish each round under a key of its \
                 own, as Job::exchange does)"
            )));
        }
        let mut v = pmix_value_t {
            r#type: PMIX_BYTE_OBJECT,
            data: pmix_value_data {
                bo: pmix_byte_object_t {
                    bytes: value.as_ptr().cast_mut().cast(),
                    size: value.len(),
                },
            },
        };
        // SAFETY: the key is NUL-terminated; PMIx copies the value (its bytes are only read)
        // before returning.
        let rc = unsafe { (self.lib.PMIx_Put)(PMIX_GLOBAL, key.as_ptr(), &mut v) };
        self.check("PMIx_Put", rc)?;
        // SAFETY: no arguments.
        let rc = unsafe { (self.lib.PMIx_Commit)() };
        self.check("PMIx_Commit", rc)?;
        published.insert(name.to_string());
        Ok(())
    }

    /// Waits until every process of the job has reached its own fence, with data collection
    /// (`PMIx_Fence` over the whole namespace with `PMIX_COLLECT_DATA`): afterwards, whatever
    /// any process [put](Job::put) before its fence can be [read](Job::get).
    ///
    /// # Errors
    ///
    /// [`PmixError::Timeout`] when a process of the job has not reached its fence within the
    /// [deadline](Job::deadline); [`PmixError::Call`] (a process of the job failed or left, for
    /// instance).
    pub fn fence(&self) -> Result<()> {
        let mut all = self.me;
        all.rank = PMIX_RANK_WILDCARD;
        let info = [
            info(
                PMIX_COLLECT_DATA,
                pmix_value_t {
                    r#type: PMIX_BOOL,
                    data: pmix_value_data { flag: true },
                },
            ),
            self.timeout_info(),
        ];
        // SAFETY: one process (the namespace's wildcard) and `info.len()` infos, all live
        // across the call.
        let rc = unsafe { (self.lib.PMIx_Fence)(&all, 1, info.as_ptr(), info.len()) };
        self.check_waited("PMIx_Fence", rc)
    }

    /// What process `rank` published under `key` (before a fence this process has passed).
    ///
    /// # Errors
    ///
    /// [`PmixError::InvalidArgument`] for a rank outside the job or a bad key;
    /// [`PmixError::Call`] (`PMIX_ERR_NOT_FOUND` when it published nothing under the key);
    /// [`PmixError::Timeout`] when the value has not arrived within the
    /// [deadline](Job::deadline); [`PmixError::Peer`] when the value is not a byte string.
    pub fn get(&self, rank: u32, key: &str) -> Result<Vec<u8>> {
        if rank >= self.size {
            return Err(PmixError::InvalidArgument(format!(
                "rank {rank} of a job of {}",
                self.size
            )));
        }
        let key = c_key(key)?;
        let mut p = self.me;
        p.rank = rank;
        let v = self.get_value(&p, &key, || {
            format!("PMIx_Get({} of rank {rank})", key.to_string_lossy())
        })?;
        match v.get() {
            Some(v) if v.r#type == PMIX_BYTE_OBJECT => {
                // SAFETY: the type says the union holds a byte object.
                let bo = unsafe { v.data.bo };
                if bo.size == 0 {
                    return Ok(Vec::new());
                }
                // SAFETY: PMIx's byte object: `size` readable bytes at `bytes`, owned by the
                // value, which lives until `v` is dropped.
                Ok(unsafe { std::slice::from_raw_parts(bo.bytes.cast::<u8>(), bo.size) }.to_vec())
            }
            other => Err(PmixError::Peer {
                rank,
                detail: format!(
                    "under {key:?} a value of type {} where a byte string was expected",
                    other.map_or(0, |v| v.r#type)
                ),
            }),
        }
    }

    /// Publishes `value`, fences, and returns every process's value, in rank order (this
    /// process's own included). Collective: every process of the job calls it, its calls in
    /// the same order. Each call is a round of its own: its values are published under
    /// `key` followed by `.` and the round's number (this job's calls of `exchange` so far,
    /// the same in every process), so the same `key` can be exchanged again (which a plain
    /// [`Job::put`] of it cannot).
    ///
    /// # Errors
    ///
    /// As [`Job::put`], [`Job::fence`] and [`Job::get`].
    pub fn exchange(&self, key: &str, value: &[u8]) -> Result<Vec<Vec<u8>>> {
        let round = self.rounds.fetch_add(1, Ordering::Relaxed);
        let key = &round_key(key, round);
        self.put(key, value)?;
        self.fence()?;
        (0..self.size)
            .map(|r| {
                if r == self.rank() {
                    Ok(value.to_vec())
                } else {
                    self.get(r, key)
                }
            })
            .collect()
    }

    /// Connects this process to every other process of the job, one RC QP per peer.
    ///
    /// `make_qp(peer_rank)` creates the QP for each peer (its CQs, depths and backend are the
    /// caller's choice); `region`, if any, is published with this process's address and
    /// comes back as each peer's [`MeshPeer::region`]. Every process of the job must call it
    /// (it fences twice). The QPs connect with [`Qp::connect`]'s defaults: the device's
    /// first active port, its default GID and the port's active MTU.
    ///
    /// # Errors
    ///
    /// [`PmixError::Verbs`] from `make_qp` or a connection; [`PmixError::Peer`] for a
    /// record that does not decode or was made for a job of another size; and as
    /// [`Job::exchange`].
    pub fn connect_all(
        &self,
        region: Option<RemoteRegion>,
        mut make_qp: impl FnMut(u32) -> crate::error::Result<Qp>,
    ) -> Result<Mesh> {
        let n = self.size;
        let me = self.rank();
        let mut qps: Vec<Option<Qp>> = Vec::with_capacity(n as usize);
        for r in 0..n {
            qps.push(if r == me { None } else { Some(make_qp(r)?) });
        }
        let mut rec = MeshRecord {
            lid: 0,
            gid: Gid::default(),
            region: region.unwrap_or_default(),
            qps: vec![(0, 0); n as usize],
        };
        for (r, qp) in qps.iter().enumerate() {
            if let Some(qp) = qp {
                let ep = qp.endpoint()?;
                rec.lid = ep.lid;
                rec.gid = ep.gid;
                rec.qps[r] = (ep.qpn, ep.psn);
            }
        }
        let records = self.exchange(MESH_KEY, &rec.encode())?;
        let mut peers = Vec::with_capacity(n.saturating_sub(1) as usize);
        for (r, (bytes, qp)) in (0u32..).zip(records.iter().zip(qps)) {
            let Some(qp) = qp else { continue };
            let theirs = MeshRecord::decode(bytes).map_err(|detail| PmixError::Peer {
                rank: r,
                detail: format!("a mesh record that does not decode: {detail}"),
            })?;
            if theirs.qps.len() != n as usize {
                return Err(PmixError::Peer {
                    rank: r,
                    detail: format!(
                        "a mesh record for {} processes in a job of {n}",
                        theirs.qps.len()
                    ),
                });
            }
            let (qpn, psn) = theirs.qps[me as usize];
            qp.connect(&Endpoint {
                lid: theirs.lid,
                qpn,
                psn,
                gid: theirs.gid,
            })?;
            peers.push(MeshPeer {
                rank: r,
                qp,
                region: (theirs.region.len != 0).then_some(theirs.region),
            });
        }
        // Every QP of the job is ready to receive before any process sends.
        self.fence()?;
        Ok(Mesh { rank: me, peers })
    }

    /// Connects this process to every other process of the job over the dynamically connected
    /// transport: `dci` reaches every peer's target, `dct` serves every peer.
    ///
    /// `dci` is a new DC initiator and `dct` a new DC target (with an SRQ), both of `pd`'s
    /// device (`pd.qp_builder(..).dc_initiator()`, `.srq(&srq).dc_target(key)`). Both are made
    /// ready ([`Qp::ready_dc`]); the target's address and `region`, if any, are published in one
    /// [`DcRecord`]; after the fence every peer's record becomes a [`DcPeer`] made with `pd`
    /// (one address handle each). Every process of the job must call it (it fences twice: the
    /// second so that no process sends before every target is ready).
    ///
    /// # Errors
    ///
    /// [`PmixError::InvalidArgument`] when `dci` is not a DC initiator or `dct` not a DC
    /// target; [`PmixError::Verbs`] from readying the QPs or making a peer
    /// ([`crate::Error::Backend`] where the device is not driven directly: libibverbs has no
    /// DC); [`PmixError::Peer`] for a record that does not decode; and as [`Job::exchange`].
    pub fn connect_all_dc(
        &self,
        pd: &Pd,
        region: Option<RemoteRegion>,
        dci: Qp,
        dct: Qp,
    ) -> Result<DcMesh> {
        use crate::types::qp::QpType;
        if dci.qp_type() != QpType::Dci || dct.qp_type() != QpType::Dct {
            return Err(PmixError::InvalidArgument(format!(
                "connect_all_dc takes a DC initiator and a DC target, got {:?} and {:?}",
                dci.qp_type(),
                dct.qp_type()
            )));
        }
        dct.ready_dc()?;
        dci.ready_dc()?;
        let rec = DcRecord {
            addr: dct.dc_addr()?,
            region: region.unwrap_or_default(),
        };
        let records = self.exchange(DC_KEY, &rec.encode())?;
        let me = self.rank();
        let mut peers = Vec::with_capacity(records.len().saturating_sub(1));
        for (r, bytes) in (0u32..).zip(&records) {
            if r == me {
                continue;
            }
            let theirs = DcRecord::decode(bytes).map_err(|detail| PmixError::Peer {
                rank: r,
                detail: format!("a DC record that does not decode: {detail}"),
            })?;
            peers.push(DcMeshPeer {
                rank: r,
                peer: pd.dc_peer(&theirs.addr)?,
                region: (theirs.region.len != 0).then_some(theirs.region),
            });
        }
        // Every target of the job is ready before any process sends.
        self.fence()?;
        Ok(DcMesh {
            rank: me,
            dci,
            dct,
            peers,
        })
    }

    /// `PMIx_Get` of `key` from `p` within the deadline; `step` names the call in a timeout.
    fn get_value(
        &self,
        p: &pmix_proc_t,
        key: &CStr,
        step: impl FnOnce() -> String,
    ) -> Result<Value> {
        let mut out: *mut pmix_value_t = std::ptr::null_mut();
        let info = [self.timeout_info()];
        // SAFETY: the process, the NUL-terminated key and the info are live across the call;
        // `out` receives a value that `Value` releases.
        let rc =
            unsafe { (self.lib.PMIx_Get)(p, key.as_ptr(), info.as_ptr(), info.len(), &mut out) };
        let v = Value {
            lib: self.lib,
            ptr: out,
        };
        if rc == PMIX_ERR_TIMEOUT {
            return Err(self.timeout(step()));
        }
        self.check("PMIx_Get", rc)?;
        Ok(v)
    }

    /// `PMIX_TIMEOUT` with the job's deadline.
    fn timeout_info(&self) -> pmix_info_t {
        info(
            PMIX_TIMEOUT,
            pmix_value_t {
                r#type: PMIX_INT,
                data: pmix_value_data {
                    integer: self.deadline,
                },
            },
        )
    }

    fn timeout(&self, step: String) -> PmixError {
        PmixError::Timeout {
            step,
            deadline: self.deadline(),
        }
    }

    /// [`Job::check`] for a call that waits for the other processes: `PMIX_ERR_TIMEOUT` is a
    /// [`PmixError::Timeout`].
    fn check_waited(&self, call: &'static str, rc: pmix_status_t) -> Result<()> {
        if rc == PMIX_ERR_TIMEOUT {
            return Err(self.timeout(call.into()));
        }
        self.check(call, rc)
    }

    fn check(&self, call: &'static str, rc: pmix_status_t) -> Result<()> {
        if rc == PMIX_SUCCESS {
            Ok(())
        } else {
            Err(PmixError::Call {
                call,
                status: rc,
                text: error_text(self.lib, rc),
            })
        }
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        // SAFETY: `PMIx_Init` succeeded for this `Job`; no info array.
        unsafe { (self.lib.PMIx_Finalize)(std::ptr::null(), 0) };
    }
}

/// A value `PMIx_Get` returned, released (`PMIX_VALUE_RELEASE`) on drop.
struct Value {
    lib: &'static Pmix,
    ptr: *mut pmix_value_t,
}

impl Value {
    fn get(&self) -> Option<&pmix_value_t> {
        // SAFETY: null or a value PMIx allocated, live until drop.
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for Value {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: a value `PMIx_Get` allocated with malloc and handed over: its contents
            // are destructed by PMIx, the struct freed, once.
            unsafe {
                (self.lib.PMIx_Value_destruct)(self.ptr);
                libc::free(self.ptr.cast());
            }
        }
    }
}

fn error_text(lib: &Pmix, rc: pmix_status_t) -> String {
    // SAFETY: PMIx returns a static NUL-terminated string for any status.
    let p = unsafe { (lib.PMIx_Error_string)(rc) };
    if p.is_null() {
        return "unknown status".into();
    }
    // SAFETY: as above.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// A required `pmix_info_t` of `key` and `value`.
fn info(key: &CStr, value: pmix_value_t) -> pmix_info_t {
    // SAFETY: all-zero is a valid `pmix_info_t`; the key and the value are set below.
    let mut info: pmix_info_t = unsafe { std::mem::zeroed() };
    for (d, s) in info.key.iter_mut().zip(key.to_bytes()) {
        *d = *s as c_char;
    }
    info.flags = PMIX_INFO_REQD;
    info.value = value;
    info
}

/// `deadline` in whole seconds, rounded up, as `PMIX_TIMEOUT` takes it.
fn deadline_secs(deadline: Duration) -> Result<c_int> {
    let secs = deadline
        .as_secs()
        .saturating_add(u64::from(deadline.subsec_nanos() > 0));
    match c_int::try_from(secs) {
        Ok(s) if s > 0 => Ok(s),
        _ => Err(PmixError::InvalidArgument(format!(
            "PMIx deadline {deadline:?}: 1 s to {} s",
            c_int::MAX
        ))),
    }
}

fn c_key(key: &str) -> Result<CString> {
    if key.is_empty() || key.len() > PMIX_MAX_KEYLEN {
        return Err(PmixError::InvalidArgument(format!(
            "PMIx key {key:?}: 1 to {PMIX_MAX_KEYLEN} bytes"
        )));
    }
    // PMIx reserves the keys starting with "pmix" for its own attributes: a get of one is
    // answered from the job's information, never from what a process put (NOT-FOUND).
    if key.starts_with("pmix") {
        return Err(PmixError::InvalidArgument(format!(
            "PMIx key {key:?}: keys starting with \"pmix\" are PMIx's own attributes"
        )));
    }
    CString::new(key)
        .map_err(|_| PmixError::InvalidArgument(format!("PMIx key {key:?} contains a NUL")))
}

/// The key of a [`Job::exchange`] round: `key.round`.
fn round_key(key: &str, round: u32) -> String {
    format!("{key}.{round}")
}

/// The PMIx key of the [`Job::exchange`] in which [`Job::connect_all`] publishes each
/// process's [`MeshRecord`] (followed by the round's number).
pub const MESH_KEY: &str = "zverbs.mesh.1";

/// Every RC connection of one process to the others of its job: [`Job::connect_all`].
#[derive(Debug)]
pub struct Mesh {
    rank: u32,
    peers: Vec<MeshPeer>,
}

impl Mesh {
    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The peers in rank order, this process left out.
    pub fn peers(&self) -> &[MeshPeer] {
        &self.peers
    }

    /// The peers, taken.
    pub fn into_peers(self) -> Vec<MeshPeer> {
        self.peers
    }
}

/// One peer of a [`Mesh`]: its rank, the QP connected to it, and the region it published.
#[derive(Debug)]
pub struct MeshPeer {
    /// The peer's rank.
    pub rank: u32,
    /// This process's QP connected to the peer's QP for this process (in RTS).
    pub qp: Qp,
    /// The region the peer published, if any.
    pub region: Option<RemoteRegion>,
}

/// What one process publishes for [`Job::connect_all`]: its port's LID and GID, a region of its
/// registered memory (length 0 for none), and for every rank of the job the QP number and PSN
/// of its QP for that rank (zeros for itself).
///
/// Encoded little-endian: the magic `zvm1`, the number of ranks (u32), the LID (u16), two
/// bytes of zero, the GID (16 bytes), the region's address (u64), rkey (u32) and length (u64),
/// then per rank the QP number and the PSN (u32 each): 48 + 8·N bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MeshRecord {
    /// The port's LID (0 on RoCE).
    pub lid: u16,
    /// The GID (zero when LID routing is used).
    pub gid: Gid,
    /// A region peers may target; length 0 when none.
    pub region: RemoteRegion,
    /// Per rank: the QP number and first PSN of this process's QP for that rank.
    pub qps: Vec<(u32, u32)>,
}

const MESH_MAGIC: &[u8; 4] = b"zvm1";
const MESH_HEADER: usize = 48;

impl MeshRecord {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(MESH_HEADER + 8 * self.qps.len());
        out.extend_from_slice(MESH_MAGIC);
        out.extend_from_slice(&(self.qps.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.lid.to_le_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.gid.0);
        out.extend_from_slice(&self.region.addr.to_le_bytes());
        out.extend_from_slice(&self.region.rkey.to_le_bytes());
        out.extend_from_slice(&self.region.len.to_le_bytes());
        for &(qpn, psn) in &self.qps {
            out.extend_from_slice(&qpn.to_le_bytes());
            out.extend_from_slice(&psn.to_le_bytes());
        }
        out
    }

    /// Reads a record.
    ///
    /// # Errors
    ///
    /// What is wrong with the bytes: another magic, a length that does not match the number of
    /// ranks, a QP number or PSN wider than 24 bits.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, String> {
        if b.len() < MESH_HEADER || &b[..4] != MESH_MAGIC {
            return Err(format!(
                "{} bytes without the magic {:?}",
                b.len(),
                std::str::from_utf8(MESH_MAGIC).unwrap_or_default()
            ));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        let n = u32_at(4) as usize;
        if b.len() != MESH_HEADER + 8 * n {
            return Err(format!(
                "{} bytes for {n} ranks (expected {})",
                b.len(),
                MESH_HEADER + 8 * n
            ));
        }
        let mut gid = [0; 16];
        gid.copy_from_slice(&b[12..28]);
        let mut qps = Vec::with_capacity(n);
        for r in 0..n {
            let (qpn, psn) = (u32_at(MESH_HEADER + 8 * r), u32_at(MESH_HEADER + 8 * r + 4));
            if qpn > 0xff_ffff || psn > 0xff_ffff {
                return Err(format!(
                    "QP number {qpn:#x} / PSN {psn:#x} for rank {r}: wider than 24 bits"
                ));
            }
            qps.push((qpn, psn));
        }
        Ok(Self {
            lid: u16::from_le_bytes([b[8], b[9]]),
            gid: Gid(gid),
            region: RemoteRegion {
                addr: u64_at(28),
                rkey: u32_at(36),
                len: u64_at(40),
            },
            qps,
        })
    }
}

/// The PMIx key of the [`Job::exchange`] in which [`Job::connect_all_dc`] publishes each
/// process's [`DcRecord`] (followed by the round's number).
pub const DC_KEY: &str = "zverbs.dc.1";

/// Every peer of one process over the dynamically connected transport:
/// [`Job::connect_all_dc`]. Holds the process's DCI and DCT.
#[derive(Debug)]
pub struct DcMesh {
    rank: u32,
    dci: Qp,
    dct: Qp,
    peers: Vec<DcMeshPeer>,
}

impl DcMesh {
    /// This process's rank.
    pub fn rank(&self) -> u32 {
        self.rank
    }

    /// The DC initiator (ready to send): its [`Qp::send_queue`] posts to the peers.
    pub fn dci(&self) -> &Qp {
        &self.dci
    }

    /// The DC target every peer reaches.
    pub fn dct(&self) -> &Qp {
        &self.dct
    }

    /// The peers in rank order, this process left out.
    pub fn peers(&self) -> &[DcMeshPeer] {
        &self.peers
    }
}

/// One peer of a [`DcMesh`]: its rank, its target as the DCI addresses it, and the region it
/// published.
#[derive(Debug)]
pub struct DcMeshPeer {
    /// The peer's rank.
    pub rank: u32,
    /// The peer's DC target.
    pub peer: DcPeer,
    /// The region the peer published, if any.
    pub region: Option<RemoteRegion>,
}

/// What one process publishes for [`Job::connect_all_dc`]: its DC target's address and a region
/// of its registered memory (length 0 for none). The same size in a job of any size.
///
/// Encoded: the magic `zvd1`, the [`DcAddr`] ([`DcAddr::to_bytes`], 34 bytes), two bytes of
/// zero, then the region's address (u64), rkey (u32) and length (u64) little-endian:
/// [`DcRecord::LEN`] bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DcRecord {
    /// The DC target's address.
    pub addr: DcAddr,
    /// A region peers may target; length 0 when none.
    pub region: RemoteRegion,
}

const DC_MAGIC: &[u8; 4] = b"zvd1";

impl DcRecord {
    /// The length of an encoded record.
    pub const LEN: usize = 4 + DcAddr::LEN + 2 + 20;

    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::LEN);
        out.extend_from_slice(DC_MAGIC);
        out.extend_from_slice(&self.addr.to_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&self.region.addr.to_le_bytes());
        out.extend_from_slice(&self.region.rkey.to_le_bytes());
        out.extend_from_slice(&self.region.len.to_le_bytes());
        out
    }

    /// Reads a record.
    ///
    /// # Errors
    ///
    /// What is wrong with the bytes: another length or magic, or an address
    /// [`DcAddr::from_bytes`] refuses.
    pub fn decode(b: &[u8]) -> std::result::Result<Self, String> {
        if b.len() != Self::LEN || &b[..4] != DC_MAGIC {
            return Err(format!(
                "{} bytes (expected {} starting with {:?})",
                b.len(),
                Self::LEN,
                std::str::from_utf8(DC_MAGIC).unwrap_or_default()
            ));
        }
        let addr = DcAddr::from_bytes(&b[4..4 + DcAddr::LEN]).map_err(|e| e.to_string())?;
        let at = 4 + DcAddr::LEN + 2;
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u64_at = |i: usize| u64::from(u32_at(i)) | (u64::from(u32_at(i + 4)) << 32);
        Ok(Self {
            addr,
            region: RemoteRegion {
                addr: u64_at(at),
                rkey: u32_at(at + 8),
                len: u64_at(at + 12),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> MeshRecord {
        MeshRecord {
            lid: 0x1234,
            gid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
            region: RemoteRegion {
                addr: 0x7f00_1234_5678,
                rkey: 0xabcd,
                len: 4096,
            },
            qps: vec![(0, 0), (0x11, 0xfff), (0xff_ffff, 7)],
        }
    }

    #[test]
    fn a_record_has_its_bytes_and_decodes_to_itself() {
        let r = record();
        let b = r.encode();
        assert_eq!(b.len(), 48 + 3 * 8);
        assert_eq!(&b[..12], b"zvm1\x03\0\0\0\x34\x12\0\0");
        assert_eq!(&b[12..14], &[0xfe, 0x80]);
        assert_eq!(&b[28..36], &0x7f00_1234_5678u64.to_le_bytes());
        assert_eq!(&b[36..40], &[0xcd, 0xab, 0, 0]);
        assert_eq!(&b[40..48], &[0, 0x10, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[56..64], &[0x11, 0, 0, 0, 0xff, 0x0f, 0, 0]);
        assert_eq!(MeshRecord::decode(&b), Ok(r));
    }

    #[test]
    fn bad_records_are_refused() {
        let b = record().encode();
        let short = MeshRecord::decode(&b[..b.len() - 1]).unwrap_err();
        assert!(short.contains("for 3 ranks"), "{short}");
        assert!(MeshRecord::decode(&b[..47]).is_err());
        let mut magic = b.clone();
        magic[0] = b'Z';
        assert!(MeshRecord::decode(&magic).unwrap_err().contains("magic"));
        let mut wide = b.clone();
        wide[48 + 8 + 3] = 1; // rank 1's QP number gets bit 24
        assert!(
            MeshRecord::decode(&wide)
                .unwrap_err()
                .contains("wider than 24 bits")
        );
        let mut wide_psn = b.clone();
        wide_psn[48 + 16 + 4 + 3] = 0x80; // rank 2's PSN gets bit 31
        assert!(
            MeshRecord::decode(&wide_psn)
                .unwrap_err()
                .contains("for rank 2")
        );
    }

    #[test]
    fn a_dc_record_has_a_constant_size_and_decodes_to_itself() {
        let r = DcRecord {
            addr: DcAddr {
                lid: 0x1234,
                gid: Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]),
                dctn: 0x12_3456,
                access_key: 0x0123_4567_89ab_cdef,
            },
            region: RemoteRegion {
                addr: 0x7f00_1234_5678,
                rkey: 0xabcd,
                len: 4096,
            },
        };
        let b = r.encode();
        assert_eq!(b.len(), DcRecord::LEN);
        assert_eq!(DcRecord::LEN, 60);
        assert_eq!(&b[..4], b"zvd1");
        assert_eq!(&b[4..38], &r.addr.to_bytes());
        assert_eq!(&b[40..48], &0x7f00_1234_5678u64.to_le_bytes());
        assert_eq!(&b[48..52], &[0xcd, 0xab, 0, 0]);
        assert_eq!(&b[52..60], &4096u64.to_le_bytes());
        assert_eq!(DcRecord::decode(&b), Ok(r));
        assert!(DcRecord::decode(&b[..59]).unwrap_err().contains("59 bytes"));
        let mut magic = b.clone();
        magic[3] = b'2';
        assert!(DcRecord::decode(&magic).is_err());
        let mut wide = b.clone();
        wide[4 + 22] = 1; // the DCT number gets bit 24
        assert!(DcRecord::decode(&wide).unwrap_err().contains("24 bits"));
    }

    #[test]
    fn deadlines_are_whole_seconds_rounded_up() {
        assert_eq!(deadline_secs(Job::DEFAULT_DEADLINE).unwrap(), 30);
        assert_eq!(deadline_secs(Duration::from_secs(2)).unwrap(), 2);
        assert_eq!(deadline_secs(Duration::from_millis(1500)).unwrap(), 2);
        assert_eq!(deadline_secs(Duration::from_nanos(1)).unwrap(), 1);
        let max = Duration::from_secs(c_int::MAX as u64);
        assert_eq!(deadline_secs(max).unwrap(), c_int::MAX);
        for bad in [Duration::ZERO, max + Duration::from_nanos(1), Duration::MAX] {
            let e = deadline_secs(bad).unwrap_err();
            assert!(matches!(e, PmixError::InvalidArgument(_)), "{e:?}");
        }
    }

    #[test]
    fn a_timeout_names_the_step_and_the_deadline() {
        let e = PmixError::Timeout {
            step: "PMIx_Fence".into(),
            deadline: Duration::from_secs(2),
        };
        let msg = e.to_string();
        assert!(msg.starts_with("PMIx_Fence did not complete"), "{msg}");
        assert!(msg.contains("deadline of 2 s"), "{msg}");
    }

    #[test]
    fn the_timeout_info_is_an_int_of_seconds() {
        let i = info(
            PMIX_TIMEOUT,
            pmix_value_t {
                r#type: PMIX_INT,
                data: pmix_value_data { integer: 7 },
            },
        );
        let key: Vec<u8> = i
            .key
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        assert_eq!(key, b"pmix.timeout");
        assert_eq!(i.flags, PMIX_INFO_REQD);
        assert_eq!(i.value.r#type, PMIX_INT);
        // SAFETY: the value was made with `integer`.
        assert_eq!(unsafe { i.value.data.integer }, 7);
    }

    #[test]
    fn keys_pmix_cannot_carry_are_refused() {
        assert!(c_key("zverbs.mesh.1").is_ok());
        assert!(c_key("").is_err());
        assert!(c_key("a\0b").is_err());
        assert!(c_key(&"k".repeat(511)).is_ok());
        assert!(c_key(&"k".repeat(512)).is_err());
        // PMIx's own attributes: a get of one never finds what a process put.
        assert!(c_key("pmix_rounds.value").is_err());
        assert!(c_key("my.pmix.value").is_ok());
        assert_eq!(round_key("zverbs.mesh.1", 3), "zverbs.mesh.1.3");
    }

    #[test]
    #[cfg_attr(miri, ignore = "dlopen: Miri calls no C library")]
    fn a_missing_library_names_the_package_to_install() {
        let lib = Pmix::open("libpmix-not-installed.so.2").map(|p| &*Box::leak(Box::new(p)));
        let e = Job::init_from(lib, |_| true).unwrap_err();
        assert!(matches!(e, PmixError::Library(_)), "{e:?}");
        let msg = e.to_string();
        assert!(msg.contains("apt-get install libpmix2"), "{msg}");
    }

    #[test]
    #[cfg_attr(miri, ignore = "dlopen: Miri calls no C library")]
    fn outside_a_launcher_the_error_says_how_to_launch() {
        // Without libpmix installed the library error comes first: nothing to check here.
        let Ok(lib) = zverbs_ffi::pmix::pmix() else {
            return;
        };
        let e = Job::init_from(Ok(lib), |_| false).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, PmixError::NotLaunched { .. }), "{e:?}");
        assert!(msg.contains("PMIX_NAMESPACE is not set"), "{msg}");
        assert!(msg.contains("mpirun -n N"), "{msg}");
        assert!(msg.contains("srun --mpi=pmix"), "{msg}");
    }
}

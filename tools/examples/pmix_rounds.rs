//! Processes of a PMIx job exchanging values in rounds: each round publishes every process's
//! value under the same key through `Job::exchange` (which numbers the rounds), and each
//! process checks every peer's value of every round. Then a plain `Job::put` of a key this
//! process has published already is refused.
//!
//! ```text
//! mpirun -n 4 target/release/examples/pmix_rounds [rounds]
//! ```
//!
//! Each process prints `rank R: N rounds of K values checked` and exits 0, or says what
//! differed and exits 1.

use zverbs::connect::pmix::{Job, PmixError};

fn main() {
    let rounds: Option<Result<u32, ()>> = std::env::args_os()
        .nth(1)
        .map(|n| n.to_str().and_then(|n| n.parse().ok()).ok_or(()));
    let rounds = match rounds {
        Some(Ok(n)) if std::env::args_os().nth(2).is_none() => n,
        Some(_) => {
            eprintln!("usage: pmix_rounds [rounds] (a number of rounds, 8 if none)");
            std::process::exit(2);
        }
        None => 8,
    };
    if let Err(e) = run(rounds) {
        eprintln!("pmix_rounds: {e}");
        std::process::exit(1);
    }
}

fn run(rounds: u32) -> Result<(), String> {
    let job = Job::init().map_err(|e| e.to_string())?;
    let me = job.rank();
    let value = |rank: usize, round: u32| format!("rank {rank} round {round}").into_bytes();
    for round in 0..rounds {
        // The same key every round: a value of an earlier round must not come back.
        let all = job
            .exchange("example.value", &value(me as usize, round))
            .map_err(|e| format!("rank {me}, round {round}: {e}"))?;
        for (rank, got) in all.iter().enumerate() {
            if *got != value(rank, round) {
                return Err(format!(
                    "rank {me}, round {round}: rank {rank}'s value is {:?}",
                    String::from_utf8_lossy(got)
                ));
            }
        }
    }
    job.put("example.once", b"first")
        .map_err(|e| format!("rank {me}: {e}"))?;
    match job.put("example.once", b"second") {
        Err(PmixError::InvalidArgument(_)) => {}
        other => return Err(format!("rank {me}: a second put of a key gave {other:?}")),
    }
    println!(
        "rank {me}: {rounds} rounds of {} values checked",
        job.size()
    );
    Ok(())
}

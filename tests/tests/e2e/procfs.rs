//! What the tests read of a worker process from `/proc` (its memory and its CPU time), and the
//! victim executions submitted while an attack runs.

use anyhow::{Context, Result};

/// `VmRSS` and `VmHWM` of `pid`, in kB.
pub(crate) fn memory_kb(pid: u32) -> Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// User + system CPU time of `pid` in seconds (`/proc/<pid>/stat`, 100 ticks a second).
pub(crate) fn cpu_s(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command (which ends at the last ')'): state is field 3, utime 14, stime 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("bad stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .context("bad stat field")
    };
    Ok((ticks(11)? + ticks(12)?) / 100.0)
}

/// What [`victims_during`] saw.
pub(crate) struct Attack {
    /// The victim executions submitted while the attack ran.
    pub(crate) victims: Vec<uuid::Uuid>,
    /// The worker's peak RSS (`VmHWM`, kB) seen meanwhile.
    pub(crate) peak_hwm_kb: u64,
}

/// Submits a victim `echo` execution every 50 ms while any of `attacks` is not terminal (and
/// until at least `min_victims` are in), following the peak RSS of the worker `pid`; fails after
/// `limit`.
pub(crate) async fn victims_during(
    env: &onestep_e2e::Env,
    attacks: &[uuid::Uuid],
    pid: u32,
    min_victims: usize,
    limit: std::time::Duration,
) -> Result<Attack> {
    let started = std::time::Instant::now();
    let mut victims = Vec::new();
    let mut peak_hwm_kb = 0;
    loop {
        let mut done = true;
        for id in attacks {
            done &= env.get(*id).await?.terminal();
        }
        if done && victims.len() >= min_victims {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < limit,
            "the attack did not end within {limit:?}: peak (VmHWM) {} MB, {} victims submitted",
            peak_hwm_kb / 1024,
            victims.len()
        );
        let victim = serde_json::json!({"victim": victims.len()});
        victims.push(env.submit("echo", victim).await?.id);
        peak_hwm_kb = peak_hwm_kb.max(memory_kb(pid)?.1);
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    peak_hwm_kb = peak_hwm_kb.max(memory_kb(pid)?.1);
    Ok(Attack {
        victims,
        peak_hwm_kb,
    })
}

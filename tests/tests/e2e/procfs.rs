//! What the tests read of a worker process from `/proc`: its memory and its CPU time.

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

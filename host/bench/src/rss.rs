//! Resident memory of this process from `/proc/self/status` (Linux only; `None` elsewhere):
//! `VmRSS` now and `VmHWM` (the peak since start), and a sampler that keeps the highest `VmRSS`
//! seen during the drain.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A `kB` field of `/proc/self/status`, in bytes.
fn status_bytes(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kb: u64 = line
        .trim_start_matches(field)
        .trim_start_matches(':')
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    Some(kb * 1024)
}

/// `VmRSS`: resident memory now.
pub fn rss_bytes() -> Option<u64> {
    status_bytes("VmRSS")
}

/// `VmHWM`: the highest resident memory since the process started.
pub fn hwm_bytes() -> Option<u64> {
    status_bytes("VmHWM")
}

/// Samples `VmRSS` every `period` on a thread of its own until stopped.
pub struct RssSampler {
    peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl RssSampler {
    /// Starts sampling (also calls `on_sample` with each sample, e.g. to track what is in
    /// flight at the same moments).
    pub fn start(period: Duration, on_sample: impl Fn() + Send + 'static) -> Self {
        let peak = Arc::new(AtomicU64::new(rss_bytes().unwrap_or(0)));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (Arc::clone(&peak), Arc::clone(&stop));
        let thread = std::thread::Builder::new()
            .name("bench-rss".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    if let Some(rss) = rss_bytes() {
                        p.fetch_max(rss, Ordering::Relaxed);
                    }
                    on_sample();
                    std::thread::sleep(period);
                }
            })
            .ok();
        RssSampler { peak, stop, thread }
    }

    /// Stops the thread; returns the highest `VmRSS` seen (bytes).
    pub fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.peak.load(Ordering::Relaxed)
    }
}

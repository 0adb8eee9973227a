//! The worker's log under attack, on MariaDB and MySQL (`config/e2e/isolation_logs.yaml`,
//! logging at DEBUG): eight `flood` attempts (four at a time) each say 5,000 lines of 100 bytes
//! through `log`, `progress`, stdout and stderr and fail with a 10 MiB error message; two `forge`
//! attempts send forged log lines through every channel; two more write stdout one byte at a
//! time (500,000 writes). Meanwhile a victim `echo` task in the same worker gets an execution
//! every 50 ms.
//!
//! Every victim succeeds at its first attempt, the worker stays up, no guest text starts a log
//! line, and the guest's lines in the log stay within the budgets: 256 KiB per attempt and
//! 512 KiB per minute for the `flood` task (`app.sandbox`), where without them one attempt
//! alone would write about 17 MB.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, e2e_config, on_each_server, statuses};
use serde_json::json;
use uuid::Uuid;

use crate::procfs::{cpu_s, memory_kb, victims_during};

const LIMIT: Duration = Duration::from_secs(240);
const FLOODS: usize = 8;
const FLOOD_LINES: u64 = 5_000;
/// The flood task's rate (`app.sandbox.log_rate_bytes_per_minute`).
const RATE_PER_MINUTE: u64 = 512 * 1024;
/// Bytes of log lines carrying guest text (target `onestep_wasm::guest`) the case may write:
/// what the flood task's rate allows over the case (a minute's burst plus the refill, at most
/// two minutes; each line is charged at least what it writes), with room to spare, plus the
/// forge attempts' lines.
const MAX_GUEST_LOG_BYTES: u64 = 3 * RATE_PER_MINUTE * 3 / 2 + 256 * 1024;
/// The whole log of the worker during the case (DEBUG lines of every victim included).
const MAX_LOG_BYTES: u64 = 12 * 1024 * 1024;
/// Peak RSS the worker may reach above its RSS before the attack.
const MAX_RSS_GROWTH_KB: u64 = 256 * 1024;
/// The timestamp of the line `misbehave` forges (`log-injection`).
const FORGED_LINE_START: &str = "2026-01-01T00:00:00";

/// The value of `key=N` on a text log line.
fn field(line: &str, key: &str) -> Option<u64> {
    let pattern = format!(" {key}=");
    let at = line.find(&pattern)? + pattern.len();
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_log_floods_forgeries_and_byte_writes_stay_bounded() -> Result<()> {
    let config = e2e_config("isolation_logs.yaml");
    on_each_server(
        "log attacks next to a victim",
        &config,
        Schedule::Exclusive,
        |env| async move {
            let mut worker = env.spawn_worker("w1")?;
            let pid = worker.pid();
            let warm = env.submit("echo", json!({"warm": true})).await?;
            env.wait_status(warm.id, &[S::Succeeded], LIMIT).await?;
            let (rss_before, _) = memory_kb(pid)?;
            let cpu_before = cpu_s(pid)?;
            let log_before = std::fs::metadata(&worker.log_path)?.len();

            let started = Instant::now();
            let mut floods = Vec::new();
            for _ in 0..FLOODS {
                let payload = json!({"mode": "log-flood", "n": FLOOD_LINES});
                floods.push(env.submit("flood", payload).await?.id);
            }
            let mut forgeries = Vec::new();
            let mut writers = Vec::new();
            for _ in 0..2 {
                forgeries.push(env.submit("forge", json!({"mode": "log-injection"})).await?.id);
                let payload = json!({"mode": "byte-writes", "n": 500_000});
                writers.push(env.submit("forge", payload).await?.id);
            }
            let attacks: Vec<Uuid> = floods
                .iter()
                .chain(&forgeries)
                .chain(&writers)
                .copied()
                .collect();

            let attack = victims_during(&env, &attacks, pid, 10, LIMIT).await?;
            let (victims, mut peak_hwm) = (attack.victims, attack.peak_hwm_kb);
            let attack_s = started.elapsed().as_secs_f64();
            let cpu = cpu_s(pid)? - cpu_before;

            for id in &victims {
                let done = env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
                ensure!(done.attempts == 1, "victim {done:?}");
            }
            for id in floods.iter().chain(&forgeries) {
                env.wait_status(*id, &[S::Failed], LIMIT).await?;
                let attempts = env.db.attempts(*id).await?;
                ensure!(statuses(&attempts) == ["failed"], "{attempts:?}");
            }
            for id in &writers {
                env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
            }
            let (_, hwm) = memory_kb(pid)?;
            peak_hwm = peak_hwm.max(hwm);
            let growth = peak_hwm.saturating_sub(rss_before);

            let log = std::fs::read_to_string(&worker.log_path)?;
            let case_log = log.get(usize::try_from(log_before)?..).context("log shrank")?;
            let log_bytes = case_log.len() as u64;
            let guest_lines: Vec<&str> = case_log
                .lines()
                .filter(|l| l.contains("onestep_wasm::guest"))
                .collect();
            let guest_bytes: u64 = guest_lines.iter().map(|l| l.len() as u64 + 1).sum();

            // Item 6: no guest text starts a line; forged text stays on the forger's own lines.
            for line in case_log.lines() {
                ensure!(
                    !line.starts_with(FORGED_LINE_START) && !line.contains('\u{1b}'),
                    "a guest started a log line or sent an escape sequence: {line:?}"
                );
                if line.contains("victim-execution") {
                    ensure!(
                        forgeries
                            .iter()
                            .any(|id| line.contains(&format!("execution_id={id}"))),
                        "forged text outside the forger's own line: {line:?}"
                    );
                }
            }

            // Item 5: every flood attempt's end line gives what it lost; the task's rate cut in.
            let mut dropped = 0;
            let mut rate_limited = 0;
            for id in &floods {
                let end = case_log
                    .lines()
                    .find(|l| l.contains("handler error") && l.contains(&id.to_string()))
                    .with_context(|| format!("no end line for flood {id}"))?;
                let lost = field(end, "log_dropped_lines").context("log_dropped_lines")?;
                ensure!(lost > 0, "{end}");
                ensure!(
                    end.len() < 2048,
                    "the 10 MiB error message is cut on the end line: {} bytes",
                    end.len()
                );
                dropped += lost;
                rate_limited += field(end, "log_rate_limited_lines").unwrap_or(0);
            }
            let with_message = case_log
                .lines()
                .filter(|l| l.contains(&"e".repeat(200)))
                .count();
            eprintln!(
                "[{}] {FLOODS} floods + 4 forge attempts over {attack_s:.2} s: worker log +{log_bytes} B \
                 ({} guest lines, {guest_bytes} B), {dropped} guest lines dropped ({rate_limited} by \
                 the task's rate), error messages logged {with_message} times; RSS before {} MB, peak \
                 (VmHWM) {} MB (+{} MB), worker CPU {cpu:.2} s; {} victims ok",
                env.server(),
                guest_lines.len(),
                rss_before / 1024,
                peak_hwm / 1024,
                growth / 1024,
                victims.len(),
            );
            ensure!(
                with_message == FLOODS,
                "each error message is logged once, {with_message} lines carry one"
            );
            ensure!(
                rate_limited > 0,
                "{FLOODS} attempts at 256 KiB each exceed the task's {RATE_PER_MINUTE} B/min"
            );
            ensure!(
                guest_bytes <= MAX_GUEST_LOG_BYTES,
                "guest log lines {guest_bytes} B (bound {MAX_GUEST_LOG_BYTES} B)"
            );
            ensure!(
                log_bytes <= MAX_LOG_BYTES,
                "worker log grew by {log_bytes} B (bound {MAX_LOG_BYTES} B)"
            );
            ensure!(
                growth <= MAX_RSS_GROWTH_KB,
                "worker peak RSS grew by {} MB (bound {} MB)",
                growth / 1024,
                MAX_RSS_GROWTH_KB / 1024
            );
            ensure!(
                worker.wait_exit(Duration::from_millis(1)).is_err(),
                "the worker exited"
            );
            Ok(())
        },
    )
    .await
}

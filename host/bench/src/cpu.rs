//! CPU accounting from `/proc` (Linux only; absent elsewhere): this process's and the database
//! server's `utime + stime`, and the server's status counters.

use std::path::Path;

/// Clock ticks per second of `/proc/<pid>/stat` (`USER_HZ`, 100 on every Linux ABI we run on).
const TICKS_PER_S: f64 = 100.0;

/// `utime + stime` of `/proc/<pid>/stat` in milliseconds (all threads of the process).
pub fn process_cpu_ms(pid: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(Path::new("/proc").join(pid).join("stat")).ok()?;
    // The command name (field 2) is parenthesised and may contain spaces: split after it.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime and stime are fields 14 and 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) * 1000.0 / TICKS_PER_S)
}

/// A database server process found under `/proc`.
#[derive(Debug, Clone)]
pub struct ServerProcess {
    /// Its pid.
    pub pid: String,
    /// Its command name (`mariadbd` or `mysqld`).
    pub name: String,
}

/// Finds the server process listening on `port`: among processes named `mariadbd` or `mysqld`,
/// the one owning a listening socket on `port` (needs permission to read its fds); failing
/// that, the first whose name fits the product (`mariadbd` or `mysqld` for MariaDB, `mysqld`
/// for MySQL). `None` when the server is not a visible process (e.g. another host or
/// container), rather than measuring the wrong one.
pub fn find_server(port: u16, mariadb: bool) -> Option<ServerProcess> {
    let mut candidates = Vec::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(comm) = std::fs::read_to_string(entry.path().join("comm")) else {
            continue;
        };
        let comm = comm.trim();
        if comm == "mariadbd" || comm == "mysqld" {
            candidates.push(ServerProcess {
                pid,
                name: comm.to_owned(),
            });
        }
    }
    let inodes = listening_inodes(port);
    if let Some(p) = candidates.iter().find(|c| owns_any_socket(&c.pid, &inodes)) {
        return Some(p.clone());
    }
    let fits: &[&str] = if mariadb {
        &["mariadbd", "mysqld"]
    } else {
        &["mysqld"]
    };
    candidates
        .into_iter()
        .find(|c| fits.contains(&c.name.as_str()))
}

/// The PostgreSQL server as one "process": PostgreSQL runs one OS process per connection
/// plus its background workers, so its CPU is [`postgres_cpu_ms`], the sum over every process
/// named `postgres`. `None` when none is visible.
pub fn postgres_processes() -> Option<ServerProcess> {
    let pids = postgres_pids();
    (!pids.is_empty()).then(|| ServerProcess {
        pid: pids.first().cloned().unwrap_or_default(),
        name: format!("postgres, all {} processes", pids.len()),
    })
}

/// `utime + stime` summed over every process named `postgres`, in milliseconds. A backend that
/// exits between two readings takes its CPU with it, so compare readings taken while the
/// measured connections stay open.
pub fn postgres_cpu_ms() -> Option<f64> {
    let pids = postgres_pids();
    (!pids.is_empty()).then(|| pids.iter().filter_map(|p| process_cpu_ms(p)).sum())
}

fn postgres_pids() -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid = entry.file_name().to_string_lossy().into_owned();
            if !pid.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            (comm.trim() == "postgres").then_some(pid)
        })
        .collect()
}

/// Socket inodes listening on `port` (IPv4 and IPv6).
fn listening_inodes(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    let want = format!(":{port:04X}");
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            // local_address, st (0A = LISTEN), inode.
            if f.len() > 9 && f[1].ends_with(&want) && f[3] == "0A" {
                out.push(f[9].to_owned());
            }
        }
    }
    out
}

fn owns_any_socket(pid: &str, inodes: &[String]) -> bool {
    if inodes.is_empty() {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(Path::new("/proc").join(pid).join("fd")) else {
        return false;
    };
    fds.flatten().any(|fd| {
        std::fs::read_link(fd.path()).is_ok_and(|target| {
            let t = target.to_string_lossy();
            inodes.iter().any(|i| t == format!("socket:[{i}]"))
        })
    })
}

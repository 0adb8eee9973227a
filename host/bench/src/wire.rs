//! A loopback TCP proxy in front of a database server that counts the protocol messages its
//! clients send (docs/benchmarks.md#deployments): what a process really sends, whatever the
//! code meant to, without touching the server's settings. `deploy-bench` puts it between an
//! idle worker and PostgreSQL or MySQL/MariaDB to count the follower's statements per minute.
//!
//! Only the client → server direction is parsed; both directions are forwarded unchanged as they
//! arrive. Plain TCP only: a connection that negotiates TLS is counted as garbage from then on
//! (the benchmark's DSNs have no `sslmode`/TLS).
//!
//! * **PostgreSQL**: after the untyped startup packets (an `SSLRequest`/`GSSENCRequest` first,
//!   when sent), every message is `type byte + length`; each is counted under its frontend
//!   message name (`Query`, `Parse`, `Bind`, `Describe`, `Execute`, `Sync`, …). Each `Sync` or
//!   `Query` ends an implicit transaction when none is open: with autocommit reads they are the
//!   round trips the server commits.
//! * **MySQL/MariaDB**: packets are `3-byte length + sequence id`; a packet with sequence id 0
//!   starts a command, counted under its command name (`COM_QUERY`, `COM_STMT_PREPARE`,
//!   `COM_STMT_EXECUTE`, `COM_PING`, `COM_RESET_CONNECTION`, …). The handshake response and the
//!   continuation packets of a long command have other sequence ids and are not counted.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The wire protocol parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// The PostgreSQL frontend/backend protocol (version 3).
    Postgres,
    /// The MySQL client/server protocol (MariaDB's too).
    Mysql,
}

impl Protocol {
    /// The server's port when a DSN names none.
    fn default_port(self) -> u16 {
        match self {
            Protocol::Postgres => 5432,
            Protocol::Mysql => 3306,
        }
    }
}

/// Messages counted so far, by name.
pub type Counts = BTreeMap<String, u64>;

/// A running counting proxy; stops accepting when dropped (open connections end when their
/// client or the server closes them).
pub struct WireCounter {
    addr: SocketAddr,
    counts: Arc<Mutex<Counts>>,
    accept: JoinHandle<()>,
}

impl WireCounter {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(protocol: Protocol, upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the counting proxy")?;
        let addr = listener.local_addr()?;
        let counts: Arc<Mutex<Counts>> = Arc::default();
        let shared = Arc::clone(&counts);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let counts = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Err(e) = relay(protocol, client, upstream, counts).await {
                        eprintln!("counting proxy: a connection ended with an error: {e:#}");
                    }
                });
            }
        });
        Ok(WireCounter {
            addr,
            counts,
            accept,
        })
    }

    /// The proxy's address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The counts so far.
    pub fn snapshot(&self) -> Counts {
        self.counts.lock().map(|c| c.clone()).unwrap_or_default()
    }
}

impl Drop for WireCounter {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// `b - a` per name (names absent from `a` count from 0).
pub fn delta(a: &Counts, b: &Counts) -> Counts {
    b.iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(a.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// `dsn` with its host and port replaced by `proxy`, and the server address it named.
pub async fn via_proxy(
    dsn: &str,
    protocol: Protocol,
    proxy: SocketAddr,
) -> Result<(String, SocketAddr)> {
    let Some((scheme, rest)) = dsn.split_once("://") else {
        bail!("not a URL DSN (scheme://…)");
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(i) => (&authority[..=i], &authority[i + 1..]),
        None => ("", authority),
    };
    // `host`, `host:port`, `[v6]` or `[v6]:port`.
    let (host, port) = match hostport.rsplit_once(':') {
        Some((h, p)) if !hostport.starts_with('[') || h.ends_with(']') => (
            h,
            p.parse::<u16>()
                .with_context(|| format!("port {p:?} of the DSN"))?,
        ),
        _ => (hostport, protocol.default_port()),
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let upstream = tokio::net::lookup_host((host, port))
        .await
        .with_context(|| format!("resolve {host}"))?
        .next()
        .with_context(|| format!("{host} resolves to no address"))?;
    Ok((format!("{scheme}://{userinfo}{proxy}{tail}"), upstream))
}

async fn relay(
    protocol: Protocol,
    client: TcpStream,
    upstream: SocketAddr,
    counts: Arc<Mutex<Counts>>,
) -> Result<()> {
    let server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("connect to {upstream}"))?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    let (mut from_client, mut to_client) = client.into_split();
    let (mut from_server, mut to_server) = server.into_split();
    let down = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
        let _ = to_client.shutdown().await;
    });
    let mut parser = Parser::new(protocol);
    let mut buf = vec![0u8; 64 * 1024];
    let outcome = async {
        loop {
            let n = from_client.read(&mut buf).await?;
            if n == 0 {
                break;
            }
            let seen = parser.feed(&buf[..n]);
            if !seen.is_empty()
                && let Ok(mut c) = counts.lock()
            {
                for name in seen {
                    *c.entry(name).or_default() += 1;
                }
            }
            to_server.write_all(&buf[..n]).await?;
        }
        let _ = to_server.shutdown().await;
        anyhow::Ok(())
    }
    .await;
    if outcome.is_err() {
        down.abort();
    } else {
        let _ = down.await;
    }
    outcome
}

/// What the parser waits for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// A header of this many bytes.
    Header(usize),
    /// The rest of a message's body.
    Body(usize),
}

/// A streaming parser of the client's side of the protocol.
struct Parser {
    protocol: Protocol,
    want: Want,
    header: Vec<u8>,
    /// PostgreSQL: still in the untyped startup packets.
    startup: bool,
    /// MySQL: the next body byte is a command byte.
    command_next: bool,
}

impl Parser {
    fn new(protocol: Protocol) -> Self {
        let want = match protocol {
            Protocol::Postgres => Want::Header(8),
            Protocol::Mysql => Want::Header(4),
        };
        Parser {
            protocol,
            want,
            header: Vec::with_capacity(8),
            startup: true,
            command_next: false,
        }
    }

    /// Consumes `data`; returns the names of the messages that started in it.
    fn feed(&mut self, mut data: &[u8]) -> Vec<String> {
        let mut seen = Vec::new();
        while !data.is_empty() {
            match self.want {
                Want::Header(n) => {
                    let take = (n - self.header.len()).min(data.len());
                    self.header.extend_from_slice(&data[..take]);
                    data = &data[take..];
                    if self.header.len() == n {
                        let body = self.header_done(&mut seen);
                        self.header.clear();
                        self.want = if body == 0 {
                            self.next_header()
                        } else {
                            Want::Body(body)
                        };
                    }
                }
                Want::Body(left) => {
                    if self.command_next {
                        seen.push(mysql_command(data[0]));
                        self.command_next = false;
                    }
                    let take = left.min(data.len());
                    data = &data[take..];
                    self.want = if take == left {
                        self.next_header()
                    } else {
                        Want::Body(left - take)
                    };
                }
            }
        }
        seen
    }

    fn next_header(&self) -> Want {
        match (self.protocol, self.startup) {
            (Protocol::Postgres, true) => Want::Header(8),
            (Protocol::Postgres, false) => Want::Header(5),
            (Protocol::Mysql, _) => Want::Header(4),
        }
    }

    /// Reads the complete header; returns the body length that follows it.
    fn header_done(&mut self, seen: &mut Vec<String>) -> usize {
        let h = &self.header;
        match self.protocol {
            Protocol::Postgres if self.startup => {
                let len = u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize;
                let code = u32::from_be_bytes([h[4], h[5], h[6], h[7]]);
                match code {
                    80_877_103 => seen.push("SSLRequest".into()),
                    80_877_104 => seen.push("GSSENCRequest".into()),
                    80_877_102 => seen.push("CancelRequest".into()),
                    _ => {
                        seen.push("StartupMessage".into());
                        self.startup = false;
                    }
                }
                len.saturating_sub(8)
            }
            Protocol::Postgres => {
                seen.push(pg_message(h[0]));
                let len = u32::from_be_bytes([h[1], h[2], h[3], h[4]]) as usize;
                len.saturating_sub(4)
            }
            Protocol::Mysql => {
                let len = usize::from(h[0]) | usize::from(h[1]) << 8 | usize::from(h[2]) << 16;
                let seq = h[3];
                self.command_next = seq == 0 && len > 0;
                len
            }
        }
    }
}

fn pg_message(t: u8) -> String {
    match t {
        b'Q' => "Query".into(),
        b'P' => "Parse".into(),
        b'B' => "Bind".into(),
        b'D' => "Describe".into(),
        b'E' => "Execute".into(),
        b'S' => "Sync".into(),
        b'C' => "Close".into(),
        b'H' => "Flush".into(),
        b'X' => "Terminate".into(),
        b'p' => "PasswordMessage".into(),
        b'F' => "FunctionCall".into(),
        b'd' => "CopyData".into(),
        b'c' => "CopyDone".into(),
        b'f' => "CopyFail".into(),
        other => format!("message 0x{other:02x}"),
    }
}

fn mysql_command(c: u8) -> String {
    match c {
        0x01 => "COM_QUIT".into(),
        0x02 => "COM_INIT_DB".into(),
        0x03 => "COM_QUERY".into(),
        0x0e => "COM_PING".into(),
        0x11 => "COM_CHANGE_USER".into(),
        0x16 => "COM_STMT_PREPARE".into(),
        0x17 => "COM_STMT_EXECUTE".into(),
        0x18 => "COM_STMT_SEND_LONG_DATA".into(),
        0x19 => "COM_STMT_CLOSE".into(),
        0x1a => "COM_STMT_RESET".into(),
        0x1b => "COM_SET_OPTION".into(),
        0x1f => "COM_RESET_CONNECTION".into(),
        other => format!("COM_0x{other:02x}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pg_typed(t: u8, body: &[u8]) -> Vec<u8> {
        let mut m = vec![t];
        m.extend_from_slice(&((body.len() + 4) as u32).to_be_bytes());
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn postgres_startup_then_typed_messages_in_any_split() {
        let mut wire = Vec::new();
        // SSLRequest, then a startup message with parameters.
        wire.extend_from_slice(&8u32.to_be_bytes());
        wire.extend_from_slice(&80_877_103u32.to_be_bytes());
        let params = b"user\0postgres\0\0";
        wire.extend_from_slice(&((params.len() + 8) as u32).to_be_bytes());
        wire.extend_from_slice(&196_608u32.to_be_bytes());
        wire.extend_from_slice(params);
        wire.extend(pg_typed(b'P', b"\0SELECT 1\0\0\0"));
        wire.extend(pg_typed(b'D', b"S\0"));
        wire.extend(pg_typed(b'S', b""));
        wire.extend(pg_typed(b'B', &[0u8; 300]));
        wire.extend(pg_typed(b'E', b"\0\0\0\0\0"));
        wire.extend(pg_typed(b'S', b""));
        let want = [
            "SSLRequest",
            "StartupMessage",
            "Parse",
            "Describe",
            "Sync",
            "Bind",
            "Execute",
            "Sync",
        ];
        for chunk in [1, 2, 3, 7, 64, wire.len()] {
            let mut p = Parser::new(Protocol::Postgres);
            let seen: Vec<String> = wire.chunks(chunk).flat_map(|c| p.feed(c)).collect();
            assert_eq!(seen, want, "chunks of {chunk}");
        }
    }

    fn mysql_packet(seq: u8, body: &[u8]) -> Vec<u8> {
        let len = body.len();
        let mut m = vec![len as u8, (len >> 8) as u8, (len >> 16) as u8, seq];
        m.extend_from_slice(body);
        m
    }

    #[test]
    fn mysql_counts_commands_not_handshake_or_continuations() {
        let mut wire = Vec::new();
        wire.extend(mysql_packet(1, &[0x03; 60])); // handshake response (seq 1)
        wire.extend(mysql_packet(0, b"\x03SET time_zone = '+00:00'"));
        wire.extend(mysql_packet(0, b"\x16SELECT revision FROM t WHERE id = 1"));
        wire.extend(mysql_packet(0, &[0x17, 1, 0, 0, 0, 0, 1, 0, 0, 0]));
        wire.extend(mysql_packet(1, &[0x17; 10])); // a continuation: not a command
        wire.extend(mysql_packet(0, &[0x0e]));
        wire.extend(mysql_packet(0, &[]));
        let want = [
            "COM_QUERY",
            "COM_STMT_PREPARE",
            "COM_STMT_EXECUTE",
            "COM_PING",
        ];
        for chunk in [1, 3, 5, 11, wire.len()] {
            let mut p = Parser::new(Protocol::Mysql);
            let seen: Vec<String> = wire.chunks(chunk).flat_map(|c| p.feed(c)).collect();
            assert_eq!(seen, want, "chunks of {chunk}");
        }
    }

    #[tokio::test]
    async fn dsn_through_the_proxy() {
        let proxy: SocketAddr = "127.0.0.1:4000".parse().expect("addr");
        let (dsn, up) = via_proxy(
            "postgres://u:p@127.0.0.1:5433/db?x=1",
            Protocol::Postgres,
            proxy,
        )
        .await
        .expect("dsn");
        assert_eq!(dsn, "postgres://u:p@127.0.0.1:4000/db?x=1");
        assert_eq!(up, "127.0.0.1:5433".parse().expect("addr"));
        let (dsn, up) = via_proxy("mysql://root@127.0.0.1/db", Protocol::Mysql, proxy)
            .await
            .expect("dsn");
        assert_eq!(dsn, "mysql://root@127.0.0.1:4000/db");
        assert_eq!(up.port(), 3306);
    }
}

//! A loopback latency proxy in front of an S3 server, so that any engine's own
//! S3 client — object_store, DuckDB's httpfs, the AWS C++ SDK — sees the same
//! store: each request's first byte delayed by a first-byte latency drawn from
//! a [`LatencyModel`] (LIST requests from the LIST model), and each
//! connection's responses throttled to a bandwidth. It counts requests and
//! bytes for everyone.
//!
//! HTTP/1.1 only (every client here speaks it over `http://`): a client sends
//! a request, then waits for its response before sending the next on the same
//! connection. So the proxy holds each request back for its latency before
//! forwarding it, and paces the bytes coming back; it parses request heads
//! (and skips over request bodies by `Content-Length`), never responses.
//!
//! In front of an s3s-fs started without credentials
//! (`LatencyProxy::start` with its folder), it also makes that server answer
//! as S3 does where it would not: s3s-fs answers a suffix range longer than
//! the object (`Range: bytes=-N`, which Polars sends for a small file's
//! footer) with `500 InternalError` where S3 returns the whole object, so the
//! proxy shortens such a range to the object's size, read from the server's
//! folder. Since that changes a signed header, it forwards every request
//! without its `Authorization` header, which a server without credentials
//! needs anyway.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion_prefetch_simstore::{LatencyModel, SimulatedStoreConfig};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What the proxy adds to every request.
#[derive(Debug, Clone, Copy)]
pub struct ProxyConfig {
    /// First-byte latency of GET and HEAD requests on objects.
    pub latency: LatencyModel,
    /// First-byte latency of LIST requests (`GET /bucket?list-type=2…`).
    pub list_latency: LatencyModel,
    /// Bytes per second of one connection's responses; `None` = unlimited.
    pub bandwidth_bytes_per_sec: Option<u64>,
    /// Seed of the latency draws.
    pub seed: u64,
}

impl From<&SimulatedStoreConfig> for ProxyConfig {
    fn from(store: &SimulatedStoreConfig) -> Self {
        Self {
            latency: store.latency,
            list_latency: store.list_latency,
            bandwidth_bytes_per_sec: store.bandwidth_bytes_per_sec,
            seed: store.seed,
        }
    }
}

/// Counters of everything that went through the proxy since the last reset.
#[derive(Debug, Default)]
pub struct ProxyStats {
    requests: AtomicU64,
    list_requests: AtomicU64,
    bytes_to_clients: AtomicU64,
    connections: AtomicU64,
}

/// A copy of [`ProxyStats`] at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProxyCounts {
    /// HTTP requests of any kind (GET, HEAD, LIST, …).
    pub requests: u64,
    /// Of which LIST requests.
    pub list_requests: u64,
    /// Bytes sent back to clients: response heads and bodies.
    pub bytes_to_clients: u64,
    /// TCP connections accepted.
    pub connections: u64,
}

impl ProxyStats {
    pub fn counts(&self) -> ProxyCounts {
        ProxyCounts {
            requests: self.requests.load(Ordering::SeqCst),
            list_requests: self.list_requests.load(Ordering::SeqCst),
            bytes_to_clients: self.bytes_to_clients.load(Ordering::SeqCst),
            connections: self.connections.load(Ordering::SeqCst),
        }
    }

    pub fn reset(&self) {
        self.requests.store(0, Ordering::SeqCst);
        self.list_requests.store(0, Ordering::SeqCst);
        self.bytes_to_clients.store(0, Ordering::SeqCst);
        self.connections.store(0, Ordering::SeqCst);
    }
}

/// A running proxy on `127.0.0.1`; stops accepting when dropped.
pub struct LatencyProxy {
    addr: SocketAddr,
    stats: Arc<ProxyStats>,
    acceptor: JoinHandle<()>,
}

struct Shared {
    upstream: SocketAddr,
    config: ProxyConfig,
    /// The folder of an s3s-fs upstream (`<folder>/<bucket>/<key>`): requests
    /// are forwarded unsigned and suffix ranges clamped to the object.
    s3s_fs_folder: Option<PathBuf>,
    rng: Mutex<StdRng>,
    stats: Arc<ProxyStats>,
}

impl LatencyProxy {
    /// Listen on a free loopback port and forward every connection to
    /// `upstream`. With `s3s_fs_folder`, the upstream is an s3s-fs without
    /// credentials serving that folder: requests go on without
    /// `Authorization`, and a suffix range longer than its object is shortened
    /// to the object's size (see the module's documentation).
    pub async fn start(
        upstream: SocketAddr,
        config: ProxyConfig,
        s3s_fs_folder: Option<&Path>,
    ) -> std::io::Result<Self> {
        let s3s_fs_folder = s3s_fs_folder.map(Path::to_path_buf);
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let shared = Arc::new(Shared {
            upstream,
            config,
            s3s_fs_folder,
            rng: Mutex::new(StdRng::seed_from_u64(config.seed)),
            stats: Arc::clone(&stats),
        });
        let acceptor = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                shared.stats.connections.fetch_add(1, Ordering::SeqCst);
                let shared = Arc::clone(&shared);
                tokio::spawn(async move {
                    if let Ok(server) = TcpStream::connect(shared.upstream).await {
                        relay(client, server, shared).await;
                    }
                });
            }
        });
        Ok(Self {
            addr,
            stats,
            acceptor,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr())
    }

    pub fn stats(&self) -> &Arc<ProxyStats> {
        &self.stats
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        self.acceptor.abort();
    }
}

async fn relay(client: TcpStream, server: TcpStream, shared: Arc<Shared>) {
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = requests(client_read, server_write, Arc::clone(&shared));
    let down = responses(server_read, client_write, shared);
    // When either direction ends, the connection is over.
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// Where the head of a request ends (after its blank line), if it is complete.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

/// A request head's request line, its method and target, and its header
/// lines.
struct Head<'a> {
    request_line: &'a str,
    method: &'a str,
    target: &'a str,
    headers: std::str::Split<'a, &'static str>,
}

impl<'a> Head<'a> {
    fn of(text: &'a str) -> Self {
        let mut lines = text.split("\r\n");
        let request_line = lines.next().unwrap_or_default();
        let mut parts = request_line.split(' ');
        Self {
            request_line,
            method: parts.next().unwrap_or_default(),
            target: parts.next().unwrap_or_default(),
            headers: lines,
        }
    }
}

/// Whether a request head is a LIST, and its body length.
fn parse_head(head: &[u8]) -> (bool, u64) {
    let text = String::from_utf8_lossy(head);
    let Head {
        method,
        target,
        headers,
        ..
    } = Head::of(&text);
    // Path-style LIST: `GET /bucket?list-type=2&prefix=…` (or `GET /bucket/?…`).
    let path = target.split('?').next().unwrap_or_default();
    let is_list =
        method == "GET" && target.contains('?') && path.trim_matches('/').split('/').count() == 1;
    let body = headers
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0);
    (is_list, body)
}

/// A request head for an s3s-fs without credentials serving `folder`: without
/// its `Authorization` header, and a GET's suffix range longer than its object
/// shortened to the object's size (s3s-fs answers it with a 500; S3 with the
/// whole object). Keys are taken as they are written in the path.
fn as_s3_for_s3s_fs(head: &[u8], folder: &Path) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let Head {
        request_line,
        method,
        target,
        headers,
    } = Head::of(&text);
    let object = folder.join(
        target
            .split('?')
            .next()
            .unwrap_or_default()
            .trim_start_matches('/'),
    );
    let mut out = vec![request_line.to_string()];
    for line in headers {
        let (name, value) = line.split_once(':').unwrap_or((line, ""));
        let name = name.trim();
        if name.eq_ignore_ascii_case("authorization") {
            continue;
        }
        if method == "GET" && name.eq_ignore_ascii_case("range") {
            let suffix = value
                .trim()
                .strip_prefix("bytes=-")
                .and_then(|n| n.parse::<u64>().ok());
            let size = std::fs::metadata(&object).map(|m| m.len()).ok();
            if let (Some(suffix), Some(size)) = (suffix, size)
                && suffix > size
                && size > 0
            {
                out.push(format!("{name}: bytes=-{size}"));
                continue;
            }
        }
        out.push(line.to_string());
    }
    out.join("\r\n").into_bytes()
}

/// Client → server: hold each request back for its latency, then forward it.
async fn requests(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, shared: Arc<Shared>) {
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut chunk = vec![0u8; 64 * 1024];
    // Body bytes of the current request still to forward as they come.
    let mut body_left: u64 = 0;
    loop {
        if body_left > 0 && !buf.is_empty() {
            let n = (body_left as usize).min(buf.len());
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
            buf.drain(..n);
            body_left -= n as u64;
            continue;
        }
        if body_left == 0
            && let Some(end) = head_end(&buf)
        {
            let (is_list, body) = parse_head(&buf[..end]);
            shared.stats.requests.fetch_add(1, Ordering::SeqCst);
            let model = if is_list {
                shared.stats.list_requests.fetch_add(1, Ordering::SeqCst);
                shared.config.list_latency
            } else {
                shared.config.latency
            };
            let delay = model.sample(&mut *shared.rng.lock().unwrap_or_else(|e| e.into_inner()));
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let head = match &shared.s3s_fs_folder {
                Some(folder) => as_s3_for_s3s_fs(&buf[..end], folder),
                None => buf[..end].to_vec(),
            };
            if to.write_all(&head).await.is_err() {
                return;
            }
            buf.drain(..end);
            body_left = body;
            continue;
        }
        match from.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Server → client: pace the bytes to the connection's bandwidth and count them.
async fn responses(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, shared: Arc<Shared>) {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut link_free_at = Instant::now();
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let _ = to.shutdown().await;
                return;
            }
            Ok(n) => n,
        };
        if let Some(bandwidth) = shared.config.bandwidth_bytes_per_sec {
            // A link of this bandwidth: the chunk has arrived once the link
            // has carried it, after whatever it was still carrying.
            let now = Instant::now();
            let transfer = Duration::from_secs_f64(n as f64 / bandwidth as f64);
            link_free_at = link_free_at.max(now) + transfer;
            tokio::time::sleep_until(link_free_at).await;
        }
        if to.write_all(&chunk[..n]).await.is_err() {
            return;
        }
        shared
            .stats
            .bytes_to_clients
            .fetch_add(n as u64, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An upstream answering every request with `body_len` bytes.
    async fn upstream(body_len: usize) -> SocketAddr {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![];
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Some(end) = head_end(&buf) {
                            buf.drain(..end);
                            let head =
                                format!("HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\n\r\n");
                            conn.write_all(head.as_bytes()).await.unwrap();
                            conn.write_all(&vec![7u8; body_len]).await.unwrap();
                        }
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        addr
    }

    /// Send `request` and read a response of `len` bytes in all.
    async fn exchange(conn: &mut TcpStream, request: &str, len: usize) -> Duration {
        let started = std::time::Instant::now();
        conn.write_all(request.as_bytes()).await.unwrap();
        let mut got = vec![0u8; len];
        conn.read_exact(&mut got).await.unwrap();
        started.elapsed()
    }

    #[tokio::test]
    async fn delays_each_request_throttles_responses_and_counts() {
        let body = 512 * 1024;
        let config = ProxyConfig {
            latency: LatencyModel::Fixed(Duration::from_millis(40)),
            list_latency: LatencyModel::Fixed(Duration::from_millis(120)),
            bandwidth_bytes_per_sec: Some(4 * 1024 * 1024),
            seed: 1,
        };
        let proxy = LatencyProxy::start(upstream(body).await, config, None)
            .await
            .unwrap();
        let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
        let head_len = format!("HTTP/1.1 200 OK\r\nContent-Length: {body}\r\n\r\n").len();
        let get = "GET /bucket/key HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9\r\n\r\n";
        // 40 ms, then 512 KiB at 4 MiB/s: 125 ms.
        let took = exchange(&mut conn, get, head_len + body).await;
        assert!(took >= Duration::from_millis(160), "{took:?}");
        assert!(took < Duration::from_secs(2), "{took:?}");
        // A second request on the same connection waits its own latency; a
        // LIST waits the LIST latency. A PUT's body is forwarded, not parsed.
        let list = "GET /bucket?list-type=2&prefix=t%2F HTTP/1.1\r\nHost: x\r\n\r\n";
        let took = exchange(&mut conn, list, head_len + body).await;
        assert!(took >= Duration::from_millis(240), "{took:?}");
        let put = "PUT /bucket/k HTTP/1.1\r\nHost: x\r\nContent-Length: 14\r\n\r\nGET / HTTP/1.1";
        exchange(&mut conn, put, head_len + body).await;
        let counts = proxy.stats().counts();
        assert_eq!(counts.requests, 3);
        assert_eq!(counts.list_requests, 1);
        assert_eq!(counts.connections, 1);
        assert_eq!(counts.bytes_to_clients, 3 * (head_len + body) as u64);
        proxy.stats().reset();
        assert_eq!(proxy.stats().counts(), ProxyCounts::default());
    }

    #[test]
    fn before_s3s_fs_requests_go_unsigned_and_suffix_ranges_fit_the_object() {
        let folder = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(folder.path().join("b/t")).unwrap();
        std::fs::write(folder.path().join("b/t/small.parquet"), [0u8; 10]).unwrap();
        let rewrite = |head: &str| {
            String::from_utf8(as_s3_for_s3s_fs(head.as_bytes(), folder.path())).unwrap()
        };
        let signed = "GET /b/t/small.parquet HTTP/1.1\r\nHost: x\r\n\
            Authorization: AWS4-HMAC-SHA256 Credential=k\r\nrange: bytes=-100\r\n\r\n";
        assert_eq!(
            rewrite(signed),
            "GET /b/t/small.parquet HTTP/1.1\r\nHost: x\r\nrange: bytes=-10\r\n\r\n"
        );
        // Ranges the server answers right, other objects and other methods
        // pass as they are (unsigned).
        for unchanged in [
            "GET /b/t/small.parquet HTTP/1.1\r\nRange: bytes=-10\r\n\r\n",
            "GET /b/t/small.parquet HTTP/1.1\r\nRange: bytes=0-99\r\n\r\n",
            "GET /b/t/missing.parquet HTTP/1.1\r\nRange: bytes=-100\r\n\r\n",
            "HEAD /b/t/small.parquet HTTP/1.1\r\nRange: bytes=-100\r\n\r\n",
            "GET /b?list-type=2&prefix=t%2F HTTP/1.1\r\nHost: x\r\n\r\n",
        ] {
            assert_eq!(rewrite(unchanged), unchanged);
        }
    }

    #[test]
    fn tells_lists_from_object_reads() {
        let head = |line: &str| parse_head(format!("{line}\r\nHost: x\r\n\r\n").as_bytes());
        assert_eq!(head("GET /b?list-type=2&prefix=a HTTP/1.1"), (true, 0));
        assert_eq!(head("GET /b/?list-type=2 HTTP/1.1"), (true, 0));
        assert_eq!(head("GET /b/a/c.parquet HTTP/1.1"), (false, 0));
        assert_eq!(head("GET /b/a.parquet?versionId=1 HTTP/1.1"), (false, 0));
        assert_eq!(head("HEAD /b/a.parquet HTTP/1.1"), (false, 0));
        assert_eq!(
            parse_head(b"PUT /b/k HTTP/1.1\r\ncontent-length: 42\r\n\r\n"),
            (false, 42)
        );
    }
}

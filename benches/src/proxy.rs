//! A loopback latency proxy in front of an object store server (S3, GCS,
//! Azure Blob or HTTP/WebDAV), so that any engine's own client for that store
//! — object_store, DuckDB's httpfs and azure extensions, the AWS, Google
//! Cloud and Azure C++ SDKs — sees the same store: each request's first byte
//! delayed by a first-byte latency drawn from a [`LatencyModel`] (LIST
//! requests, as the store's [`Wire`] tells them, from the LIST model), and
//! each connection's responses throttled to a bandwidth. It counts requests
//! and bytes for everyone. It can also answer a share of the GETs of objects
//! itself with S3's `503 SlowDown`, as a throttling S3 does, so that each
//! client's retries are exercised on the wire.
//!
//! HTTP/1.1 only (every client here speaks it over `http://`): a client sends
//! a request, then waits for its response before sending the next on the same
//! connection. So the proxy holds each request back for its latency before
//! forwarding it, and paces the bytes coming back; it parses request heads
//! (and skips over request bodies by `Content-Length`), never responses.
//!
//! What is particular to one store is its [`Wire`]: how a LIST request looks,
//! and what the proxy changes in a request head so that the emulator answers
//! as the service would. In front of an s3s-fs started without credentials
//! ([`Wire::S3`] with its folder), it makes that server answer
//! as S3 does where it would not: s3s-fs answers a suffix range longer than
//! the object (`Range: bytes=-N`, which Polars sends for a small file's
//! footer) with `500 InternalError` where S3 returns the whole object, so the
//! proxy shortens such a range to the object's size, read from the server's
//! folder. Since that changes a signed header, it forwards every request
//! without its `Authorization` header, which a server without credentials
//! needs anyway. In front of fake-gcs-server ([`Wire::Gcs`]) it forwards every
//! request with the server's own address as `Host`, the only one its XML API
//! answers.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use datafusion_prefetch_simstore::{LatencyModel, SimulatedStoreConfig};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
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
    /// First-byte latency of LIST requests (as [`Wire`] tells them).
    pub list_latency: LatencyModel,
    /// Bytes per second of one connection's responses; `None` = unlimited.
    pub bandwidth_bytes_per_sec: Option<u64>,
    /// Seed of the latency draws.
    pub seed: u64,
    /// The share (0 to 1) of GETs of objects answered `503 SlowDown` after
    /// their latency, without reaching the server; drawn per request.
    pub slow_down: f64,
}

impl From<&SimulatedStoreConfig> for ProxyConfig {
    fn from(store: &SimulatedStoreConfig) -> Self {
        Self {
            latency: store.latency,
            list_latency: store.list_latency,
            bandwidth_bytes_per_sec: store.bandwidth_bytes_per_sec,
            seed: store.seed,
            slow_down: 0.0,
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
    slowed_down: AtomicU64,
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
    /// GETs the proxy answered `503 SlowDown` itself (counted in `requests`
    /// too; the server never saw them).
    pub slowed_down: u64,
}

impl ProxyStats {
    pub fn counts(&self) -> ProxyCounts {
        ProxyCounts {
            requests: self.requests.load(Ordering::SeqCst),
            list_requests: self.list_requests.load(Ordering::SeqCst),
            bytes_to_clients: self.bytes_to_clients.load(Ordering::SeqCst),
            connections: self.connections.load(Ordering::SeqCst),
            slowed_down: self.slowed_down.load(Ordering::SeqCst),
        }
    }

    pub fn reset(&self) {
        self.requests.store(0, Ordering::SeqCst);
        self.list_requests.store(0, Ordering::SeqCst);
        self.bytes_to_clients.store(0, Ordering::SeqCst);
        self.connections.store(0, Ordering::SeqCst);
        self.slowed_down.store(0, Ordering::SeqCst);
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
    wire: Wire,
    rng: Mutex<StdRng>,
    stats: Arc<ProxyStats>,
}

impl LatencyProxy {
    /// Listen on a free loopback port and forward every connection to
    /// `upstream`, a server of `wire`'s store.
    pub async fn start(
        upstream: SocketAddr,
        config: ProxyConfig,
        wire: Wire,
    ) -> std::io::Result<Self> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(ProxyStats::default());
        let shared = Arc::new(Shared {
            upstream,
            config,
            wire,
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
    // Both directions answer the client: the server's responses, and the
    // proxy's own `503`s. A client sends its next request only once the
    // last response is in, so the two never interleave.
    let client_write = Arc::new(tokio::sync::Mutex::new(client_write));
    let up = requests(
        client_read,
        server_write,
        Arc::clone(&client_write),
        Arc::clone(&shared),
    );
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

/// The store a [`LatencyProxy`] stands in front of: how its LIST requests
/// look, and what the proxy changes in a request head before the server sees
/// it. Every client of the same store sends the same kind of LIST, except GCS,
/// which has two APIs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wire {
    /// S3, path style: LIST is `GET /<bucket>?list-type=2…` (ListObjectsV2,
    /// which every client here sends). With `s3s_fs_folder`, the server is an
    /// s3s-fs without credentials serving that folder
    /// (`<folder>/<bucket>/<key>`): requests go on without `Authorization`,
    /// and a suffix range longer than its object is shortened to the object's
    /// size (see the module's documentation).
    S3 { s3s_fs_folder: Option<PathBuf> },
    /// Google Cloud Storage: LIST is the XML API's `GET
    /// /<bucket>?list-type=2…` (object_store, and DuckDB through the S3
    /// interoperability API) or the JSON API's `GET /storage/v1/b/<bucket>/o?…`
    /// (the Google Cloud C++ client in PyArrow). Requests are forwarded with
    /// the server's address as `Host`: fake-gcs-server answers its XML API
    /// only for its own (`-public-host`).
    Gcs,
    /// Azure Blob Storage: LIST is List Blobs, `GET
    /// /<account>/<container>?restype=container&comp=list…` (path style, as on
    /// Azurite). Forwarded as they are (Shared Key signs no host).
    Azure,
    /// Plain HTTP with WebDAV: LIST is `PROPFIND` (object_store's
    /// `HttpStore`; the other engines are given file URLs and never list).
    Http,
}

impl Wire {
    /// Whether a request (its method and target) is this store's LIST.
    fn is_list(&self, method: &str, target: &str) -> bool {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
        let param = |name: &str, value: &str| {
            query
                .split('&')
                .any(|pair| pair.split_once('=').unwrap_or((pair, "")) == (name, value))
        };
        let s3_list = method == "GET" && segments.len() == 1 && param("list-type", "2");
        match self {
            Wire::S3 { .. } => s3_list,
            Wire::Gcs => {
                s3_list
                    || (method == "GET"
                        && matches!(segments.as_slice(), ["storage", "v1", "b", _, "o"]))
            }
            Wire::Azure => {
                method == "GET" && param("restype", "container") && param("comp", "list")
            }
            Wire::Http => method == "PROPFIND",
        }
    }

    /// The head to send the server at `upstream` for a client's `head`.
    fn forward(&self, head: &[u8], upstream: SocketAddr) -> Vec<u8> {
        match self {
            Wire::S3 {
                s3s_fs_folder: Some(folder),
            } => as_s3_for_s3s_fs(head, folder),
            Wire::Gcs => with_host(head, &upstream.to_string()),
            Wire::S3 {
                s3s_fs_folder: None,
            }
            | Wire::Azure
            | Wire::Http => head.to_vec(),
        }
    }
}

/// The body of S3's answer to a request over its rate.
const SLOW_DOWN_BODY: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error>\
    <Code>SlowDown</Code><Message>Please reduce your request rate.</Message>\
    <RequestId>proxy</RequestId></Error>";

/// S3's answer to a request over its rate: `503 Slow Down`.
fn slow_down_response() -> String {
    format!(
        "HTTP/1.1 503 Slow Down\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{SLOW_DOWN_BODY}",
        SLOW_DOWN_BODY.len()
    )
}

/// What a request is, as far as the proxy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    List,
    /// A GET of an object (not a LIST).
    Get,
    Other,
}

/// A request head's kind under `wire`, and its body length.
fn parse_head(head: &[u8], wire: &Wire) -> (Kind, u64) {
    let text = String::from_utf8_lossy(head);
    let Head {
        method,
        target,
        headers,
        ..
    } = Head::of(&text);
    let body = headers
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0);
    let kind = match (wire.is_list(method, target), method) {
        (true, _) => Kind::List,
        (false, "GET") => Kind::Get,
        _ => Kind::Other,
    };
    (kind, body)
}

/// `head` with its `Host` header (or a new one) set to `host`.
fn with_host(head: &[u8], host: &str) -> Vec<u8> {
    let text = String::from_utf8_lossy(head);
    let Head {
        request_line,
        headers,
        ..
    } = Head::of(&text);
    let mut out = vec![request_line.to_string(), format!("Host: {host}")];
    out.extend(
        headers
            .filter(|line| {
                !line
                    .split_once(':')
                    .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("host"))
            })
            .map(str::to_string),
    );
    out.join("\r\n").into_bytes()
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

/// Client → server: hold each request back for its latency, then forward it
/// (or answer a GET `503 SlowDown` to the client, a share of the time).
async fn requests(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    client: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    shared: Arc<Shared>,
) {
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
            let (kind, body) = parse_head(&buf[..end], &shared.wire);
            shared.stats.requests.fetch_add(1, Ordering::SeqCst);
            let model = if kind == Kind::List {
                shared.stats.list_requests.fetch_add(1, Ordering::SeqCst);
                shared.config.list_latency
            } else {
                shared.config.latency
            };
            let (delay, slow_down) = {
                let mut rng = shared.rng.lock().unwrap_or_else(|e| e.into_inner());
                let delay = model.sample(&mut *rng);
                // Drawn only when asked for, so the latencies stay as seeded.
                let slow_down = kind == Kind::Get
                    && body == 0
                    && shared.config.slow_down > 0.0
                    && rng.random::<f64>() < shared.config.slow_down;
                (delay, slow_down)
            };
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if slow_down {
                shared.stats.slowed_down.fetch_add(1, Ordering::SeqCst);
                if client
                    .lock()
                    .await
                    .write_all(slow_down_response().as_bytes())
                    .await
                    .is_err()
                {
                    return;
                }
                buf.drain(..end);
                continue;
            }
            let head = shared.wire.forward(&buf[..end], shared.upstream);
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
async fn responses(
    mut from: OwnedReadHalf,
    to: Arc<tokio::sync::Mutex<OwnedWriteHalf>>,
    shared: Arc<Shared>,
) {
    let mut chunk = vec![0u8; 64 * 1024];
    let mut link_free_at = Instant::now();
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let _ = to.lock().await.shutdown().await;
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
        if to.lock().await.write_all(&chunk[..n]).await.is_err() {
            return;
        }
        shared
            .stats
            .bytes_to_clients
            .fetch_add(n as u64, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests;

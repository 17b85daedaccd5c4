//! Real Google Cloud Storage, Azure Blob Storage and HTTP (WebDAV) servers on
//! loopback, for tests and benchmarks over the wire — the counterparts of
//! `datafusion-prefetch-s3server` for object_store's other HTTP clients.
//!
//! | server | emulates | handle | object_store client |
//! |---|---|---|---|
//! | [fake-gcs-server] 1.54.0 | GCS (XML API for reads and lists) | [`GcsServer`] | `GoogleCloudStorageBuilder` |
//! | [Azurite] 3.35.0 (blob service) | Azure Blob Storage | [`AzureServer`] | `MicrosoftAzureBuilder` |
//! | [rclone] 1.75.2 `serve webdav` | a plain HTTP / WebDAV server | [`HttpServer`] | `HttpBuilder` |
//!
//! Each `start` runs the server as a child process on `127.0.0.1` and a free
//! port over a fresh temporary folder (or a kept one, `start_in`), waits until
//! it accepts connections, and kills it (SIGKILL) when the handle is dropped;
//! the handle's `builder` gives object_store's client for it, configured for
//! the emulator (endpoint, plain HTTP, credentials).
//!
//! The servers are installed outside the clone, under
//! `/var/tmp/dfprefetch-wire/<server>/<version>` (`$DFPREFETCH_WIRE_PREFIX`
//! moves it), by the `install-*.sh` scripts beside this crate's manifest; if a
//! server is missing, its first start runs its script (once per process), and
//! fails with what to do if that does not work. `$DFPREFETCH_FAKE_GCS_SERVER`,
//! `$DFPREFETCH_AZURITE_BLOB` and `$DFPREFETCH_RCLONE` point at other binaries.
//!
//! What each server does not do like the real service is on its handle:
//! notably fake-gcs-server does not take object_store's uploads (upload with
//! [`GcsServer::put_object`]) and checks no credentials.
//!
//! [fake-gcs-server]: https://github.com/fsouza/fake-gcs-server
//! [Azurite]: https://github.com/Azure/Azurite
//! [rclone]: https://rclone.org/commands/rclone_serve_webdav/
//!
//! ```no_run
//! use datafusion_prefetch_wireservers::GcsServer;
//!
//! let server = GcsServer::start(&["data"]).unwrap();
//! server.put_object("data", "t/file.parquet", b"PAR1...").unwrap();
//! let gcs = server.builder("data").build().unwrap();
//! ```

/// A server's handle dereferences to its [`Running`] process (address,
/// folder, output, kill).
macro_rules! derefs_to_running {
    ($handle:ty) => {
        impl std::ops::Deref for $handle {
            type Target = $crate::Running;

            fn deref(&self) -> &$crate::Running {
                &self.running
            }
        }

        impl std::ops::DerefMut for $handle {
            fn deref_mut(&mut self) -> &mut $crate::Running {
                &mut self.running
            }
        }
    };
}

pub mod azure;
pub mod gcs;
pub mod http;

pub use azure::AzureServer;
pub use gcs::GcsServer;
pub use http::HttpServer;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a starting server may take to listen (Azurite, a Node.js
/// program, takes about a second on a busy 2-core machine).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Server output lines kept for error messages.
const LOG_LINES: usize = 40;

/// Set to a file's path, every server's whole output is appended to it too
/// (with `rclone serve webdav`, which logs only errors otherwise, every
/// request: it runs with `-vv` then), to tell a server that never answered
/// from a request that never reached it.
pub const LOG_COPY_VAR: &str = "DFPREFETCH_WIRE_LOG";

/// Where the install scripts put the servers.
pub fn install_prefix() -> PathBuf {
    std::env::var_os("DFPREFETCH_WIRE_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/dfprefetch-wire"))
}

/// One server's installation: its script, where it installs to, and the
/// variable that overrides it.
pub(crate) struct Install {
    /// Shown in messages, e.g. `fake-gcs-server 1.54.0`.
    pub name: &'static str,
    /// The script beside the manifest, e.g. `install-gcs.sh`.
    pub script: &'static str,
    /// The installed program, relative to [`install_prefix`].
    pub program: &'static str,
    /// The folder whose `.installed` stamp marks a complete install,
    /// relative to [`install_prefix`].
    pub folder: &'static str,
    /// Environment variable naming another binary to run.
    pub env: &'static str,
}

impl Install {
    fn script_path(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(self.script)
    }

    fn installed(&self) -> Option<PathBuf> {
        let prefix = install_prefix();
        let program = prefix.join(self.program);
        let complete = prefix.join(self.folder).join(".installed").is_file();
        (complete && program.is_file()).then_some(program)
    }

    fn run_script(&self) -> Result<PathBuf, String> {
        let script = self.script_path();
        eprintln!(
            "{} is not installed; running {}",
            self.name,
            script.display()
        );
        let out = Command::new("bash")
            .arg(&script)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
        let path = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && Path::new(&path).is_file() {
            Ok(PathBuf::from(path))
        } else {
            Err(format!("{} failed ({})", script.display(), out.status))
        }
    }

    /// The program to run: `$env` if set, else the installed one, else the
    /// one the script installs (run at most once per process, `once`).
    pub(crate) fn binary(
        &self,
        once: &'static OnceLock<Result<PathBuf, String>>,
    ) -> Result<PathBuf, String> {
        if let Some(path) = std::env::var_os(self.env) {
            let path = PathBuf::from(path);
            return if path.is_file() {
                Ok(path)
            } else {
                Err(format!("{}={} is not a file", self.env, path.display()))
            };
        }
        if let Some(path) = self.installed() {
            return Ok(path);
        }
        once.get_or_init(|| self.run_script()).clone().map_err(|e| {
            format!(
                "the {} server of the real-wire tests is not installed and installing it \
                     failed: {e}. Install it with `bash {}`, or point {} at a binary.",
                self.name,
                self.script_path().display(),
                self.env
            )
        })
    }
}

/// Where a server keeps its objects: a temporary folder, or one the caller
/// keeps (data that survives runs).
pub(crate) enum Root {
    Temporary(tempfile::TempDir),
    Kept(PathBuf),
}

impl Root {
    pub(crate) fn temporary() -> Result<Self, String> {
        tempfile::tempdir()
            .map(Self::Temporary)
            .map_err(|e| format!("temporary folder: {e}"))
    }

    pub(crate) fn path(&self) -> &Path {
        match self {
            Self::Temporary(dir) => dir.path(),
            Self::Kept(path) => path,
        }
    }
}

/// A free port on 127.0.0.1, for a server that cannot bind port 0 and say
/// which port it got (fake-gcs-server). Another process may take it before
/// the server binds it: callers retry on `address already in use`.
pub(crate) fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind(("127.0.0.1", 0)).map_err(|e| format!("finding a free port: {e}"))?;
    listener
        .local_addr()
        .map(|addr| addr.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// The port in `line` right after `marker` (e.g. `http://127.0.0.1:`).
pub(crate) fn port_after(line: &str, marker: &str) -> Option<u16> {
    let rest = &line[line.find(marker)? + marker.len()..];
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Remove from `command`'s environment every variable whose name starts with
/// one of `prefixes`: the servers read settings from such variables
/// (`RCLONE_*`, `AZURITE_*`), and a developer's must not change the tests.
pub(crate) fn clear_env(command: &mut Command, prefixes: &[&str]) {
    for (name, _) in std::env::vars_os() {
        if let Some(name) = name.to_str()
            && prefixes.iter().any(|prefix| name.starts_with(prefix))
        {
            command.env_remove(name);
        }
    }
}

/// A server running on loopback: where it listens, the folder it serves
/// and the binary that runs; killed when dropped. Each server's handle
/// dereferences to it.
pub struct Running {
    process: ServerProcess,
    addr: SocketAddr,
    root: Root,
    binary: PathBuf,
}

impl std::fmt::Debug for Running {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Running")
            .field("addr", &self.addr)
            .field("root", &self.root.path())
            .field("binary", &self.binary)
            .finish()
    }
}

impl Running {
    pub(crate) fn new(
        process: ServerProcess,
        addr: SocketAddr,
        root: Root,
        binary: PathBuf,
    ) -> Self {
        Self {
            process,
            addr,
            root,
            binary,
        }
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The folder the server keeps its data in.
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The program that runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The server's last lines of output.
    pub fn recent_output(&self) -> String {
        self.process.recent_output()
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        self.process.is_running()
    }

    /// Kill the server at once (SIGKILL): open connections are reset and new
    /// ones refused.
    pub fn kill(&mut self) {
        self.process.kill();
    }
}

/// A running server process: its output's last lines, killed when dropped.
pub(crate) struct ServerProcess {
    child: Option<Child>,
    log: Arc<Mutex<VecDeque<String>>>,
    /// Shown in messages, e.g. `fake-gcs-server (/var/tmp/...)`.
    what: String,
}

/// Keep the last lines of a child's output, sending the port of the first
/// line `announce` recognises.
fn drain(
    out: impl Read + Send + 'static,
    log: Arc<Mutex<VecDeque<String>>>,
    announce: fn(&str) -> Option<u16>,
    ready: mpsc::Sender<u16>,
) {
    let copy = std::env::var_os(LOG_COPY_VAR).and_then(|path| {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .ok()
    });
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if let Some(port) = announce(&line) {
                let _ = ready.send(port);
            }
            if let Some(file) = &copy {
                let _ = writeln!(&*file, "{line}");
            }
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            if log.len() == LOG_LINES {
                log.pop_front();
            }
            log.push_back(line);
        }
    });
}

impl ServerProcess {
    /// Spawn `command` (stdin closed, stdout and stderr read), wait for the
    /// output line `announce` takes a port from — a line the server prints
    /// once it listens — then until the port accepts connections.
    pub(crate) fn start(
        what: String,
        mut command: Command,
        announce: fn(&str) -> Option<u16>,
    ) -> Result<(Self, SocketAddr), String> {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {what}: {e}"))?;
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (ready, announced) = mpsc::channel();
        drain(
            child.stdout.take().expect("piped"),
            Arc::clone(&log),
            announce,
            ready.clone(),
        );
        drain(
            child.stderr.take().expect("piped"),
            Arc::clone(&log),
            announce,
            ready,
        );
        let mut process = Self {
            child: Some(child),
            log,
            what,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        let port = loop {
            match announced.recv_timeout(Duration::from_millis(50)) {
                Ok(port) => break port,
                // Both outputs closed without the line: it exited.
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(process.failure("exited while starting"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if !process.is_running() {
                        // Let the drain threads read its last words.
                        std::thread::sleep(Duration::from_millis(50));
                        return Err(process.failure("exited while starting"));
                    }
                    if Instant::now() > deadline {
                        return Err(process.failure("did not start listening in time"));
                    }
                }
            }
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err(process.failure("does not accept connections"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok((process, addr))
    }

    /// Kill the process and describe why, with its last output.
    pub(crate) fn failure(&mut self, why: &str) -> String {
        self.kill();
        format!(
            "{} {why}; its last output:\n{}",
            self.what,
            self.recent_output()
        )
    }

    pub(crate) fn recent_output(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    pub(crate) fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL and reap: open connections are reset and new ones refused.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Percent-encode everything but RFC 3986's unreserved characters (for
/// object names in query strings and paths).
pub(crate) fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for byte in s.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// One blocking HTTP/1.1 request on a fresh connection (`Connection: close`),
/// for setting a server up (buckets, uploads) without an HTTP client crate.
/// Returns the status code and the response (head and body) as text.
pub(crate) fn http_request(
    addr: SocketAddr,
    method: &str,
    path_and_query: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<(u16, String), String> {
    let what = || format!("{method} http://{addr}{path_and_query}");
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .map_err(|e| format!("{}: {e}", what()))?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| format!("{}: {e}", what()))?;
    let mut head = format!(
        "{method} {path_and_query} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Length: {}\r\n",
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(body))
        .map_err(|e| format!("{}: {e}", what()))?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .map_err(|e| format!("{}: {e}", what()))?;
    let response = String::from_utf8_lossy(&response).into_owned();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("{}: no HTTP status in {response:?}", what()))?;
    Ok((status, response))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_ports_after_markers() {
        let gcs = r#"time=2026-12-02T06:01:37.408Z level=INFO msg="server started at http://127.0.0.1:47001""#;
        assert_eq!(
            port_after(gcs, "server started at http://127.0.0.1:"),
            Some(47001)
        );
        let rclone = "2026/12/02 06:05:50 NOTICE: Local file system at /tmp/x: WebDav Server started on [http://127.0.0.1:34861/]";
        assert_eq!(port_after(rclone, "http://127.0.0.1:"), Some(34861));
        assert_eq!(port_after("no port here", "http://127.0.0.1:"), None);
    }

    #[test]
    fn percent_encodes_all_but_unreserved() {
        assert_eq!(
            percent_encode("t/region=north/file_00.parquet"),
            "t%2Fregion%3Dnorth%2Ffile_00.parquet"
        );
    }
}

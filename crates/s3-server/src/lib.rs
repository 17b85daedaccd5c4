//! A real S3-compatible server on loopback, for tests and benchmarks.
//!
//! [`S3Server::start`] runs [s3s-fs](https://crates.io/crates/s3s-fs) — an S3
//! server (signature V4 authentication, ranged GETs, ListObjectsV2, multipart
//! uploads) that stores each object as a file — as a child process on
//! `127.0.0.1` and a free port, waits until it listens, and kills it when
//! dropped. The binary is installed outside the clone by `install.sh` beside
//! this crate's manifest; if it is missing, the first start runs that script
//! (about a minute), and fails with what to do if that does not work.
//!
//! Which binary runs: `$DFPREFETCH_S3S_FS` if set, else an installed release
//! build, else an installed debug build, else the one `install.sh` builds.
//!
//! ```no_run
//! use datafusion_prefetch_s3server::{ACCESS_KEY, S3Server};
//!
//! let server = S3Server::start(&["bucket"]).unwrap();
//! println!("S3 at {} (key {ACCESS_KEY})", server.endpoint());
//! ```

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The s3s-fs release `install.sh` installs.
pub const S3S_FS_VERSION: &str = "0.14.1";
/// The access key the server accepts (signature V4).
pub const ACCESS_KEY: &str = "dfprefetch";
/// The secret key the server accepts.
pub const SECRET_KEY: &str = "dfprefetch-secret-key";
/// The region clients sign for.
pub const REGION: &str = "us-east-1";

/// How long a starting server may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Server output lines kept for error messages.
const LOG_LINES: usize = 40;

/// The script that installs the server binary.
pub fn install_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("install.sh")
}

fn install_prefix() -> PathBuf {
    std::env::var_os("DFPREFETCH_S3S_PREFIX")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/dfprefetch-s3s"))
}

/// An installed build of the pinned version, release first.
fn installed_binary() -> Option<PathBuf> {
    ["release", "debug"]
        .iter()
        .map(|profile| {
            install_prefix()
                .join(S3S_FS_VERSION)
                .join(profile)
                .join("bin/s3s-fs")
        })
        .find(|path| path.is_file())
}

fn run_install_script() -> Result<PathBuf, String> {
    let script = install_script();
    eprintln!(
        "s3s-fs {S3S_FS_VERSION} is not installed; running {} (about a minute)",
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

/// The s3s-fs binary to run, installing it (once per process) if needed.
pub fn server_binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("DFPREFETCH_S3S_FS") {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "DFPREFETCH_S3S_FS={} is not a file",
                path.display()
            ))
        };
    }
    if let Some(path) = installed_binary() {
        return Ok(path);
    }
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALLED
        .get_or_init(run_install_script)
        .clone()
        .map_err(|e| {
            format!(
                "the S3 server of the real-wire tests (s3s-fs {S3S_FS_VERSION}) is not installed \
             and installing it failed: {e}. Install it with `bash {}` (needs cargo and \
             crates.io), or point DFPREFETCH_S3S_FS at an s3s-fs binary.",
                install_script().display()
            )
        })
}

/// Where the server keeps its objects: a temporary folder, or one the caller
/// keeps (benchmark data that survives runs).
enum Root {
    Temporary(tempfile::TempDir),
    Kept(PathBuf),
}

impl Root {
    fn path(&self) -> &Path {
        match self {
            Self::Temporary(dir) => dir.path(),
            Self::Kept(path) => path,
        }
    }
}

/// A running s3s-fs server on `127.0.0.1`, killed when dropped.
pub struct S3Server {
    child: Option<Child>,
    addr: SocketAddr,
    root: Root,
    binary: PathBuf,
    log: Arc<Mutex<VecDeque<String>>>,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Server")
            .field("addr", &self.addr)
            .field("root", &self.root.path())
            .field("binary", &self.binary)
            .finish()
    }
}

/// Keep the last lines of a child's output, forwarding the first line that
/// announces the listening address.
fn drain(
    out: impl Read + Send + 'static,
    log: Arc<Mutex<VecDeque<String>>>,
    ready: mpsc::Sender<SocketAddr>,
) {
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { return };
            if let Some(rest) = line.split("server is running at http://").nth(1)
                && let Ok(addr) = rest.trim().parse()
            {
                let _ = ready.send(addr);
            }
            let mut log = log.lock().unwrap_or_else(|e| e.into_inner());
            if log.len() == LOG_LINES {
                log.pop_front();
            }
            log.push_back(line);
        }
    });
}

impl S3Server {
    /// Start a server over a fresh temporary folder holding the (empty)
    /// `buckets`.
    pub fn start(buckets: &[&str]) -> Result<Self, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("temporary folder: {e}"))?;
        Self::start_with_root(Root::Temporary(dir), buckets, true)
    }

    /// Start a server over `root`, which keeps its objects after the server
    /// stops; `buckets` are created if missing.
    pub fn start_in(root: &Path, buckets: &[&str]) -> Result<Self, String> {
        Self::start_with_root(Root::Kept(root.to_path_buf()), buckets, true)
    }

    /// As [`Self::start_in`], without credentials: the server then accepts
    /// unsigned requests and refuses signed ones (`NotImplemented`: it has
    /// nothing to check them against), so clients must not sign (object_store:
    /// `with_skip_signature(true)`) or go through something that drops their
    /// `Authorization` header.
    pub fn start_anonymous_in(root: &Path, buckets: &[&str]) -> Result<Self, String> {
        Self::start_with_root(Root::Kept(root.to_path_buf()), buckets, false)
    }

    fn start_with_root(root: Root, buckets: &[&str], credentials: bool) -> Result<Self, String> {
        // s3s-fs serves each folder of its root as a bucket.
        for bucket in buckets {
            let dir = root.path().join(bucket);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating bucket folder {}: {e}", dir.display()))?;
        }
        let binary = server_binary()?;
        let mut command = Command::new(&binary);
        command.args(["--host", "127.0.0.1", "--port", "0"]);
        if credentials {
            command.args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY]);
        }
        let mut child = command
            .arg(root.path())
            .env("RUST_LOG", "s3s_fs=info")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (ready, announced) = mpsc::channel();
        drain(
            child.stdout.take().expect("piped"),
            Arc::clone(&log),
            ready.clone(),
        );
        drain(child.stderr.take().expect("piped"), Arc::clone(&log), ready);
        let mut server = Self {
            child: Some(child),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            root,
            binary,
            log,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match announced.recv_timeout(Duration::from_millis(50)) {
                Ok(addr) => {
                    server.addr = addr;
                    break;
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < deadline => {
                    if !server.is_running() {
                        return Err(server.failure("exited while starting"));
                    }
                }
                Err(_) => return Err(server.failure("did not start listening in time")),
            }
        }
        // It logs after binding; make sure a client can connect.
        while TcpStream::connect_timeout(&server.addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err(server.failure("does not accept connections"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }

    fn failure(&mut self, what: &str) -> String {
        self.kill();
        format!(
            "s3s-fs ({}) {what}; its last output:\n{}",
            self.binary.display(),
            self.recent_output()
        )
    }

    /// The server's last lines of output.
    pub fn recent_output(&self) -> String {
        let log = self.log.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The folder the objects are kept in (`<root>/<bucket>/<key>`).
    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The binary that runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// Whether the process is still alive.
    pub fn is_running(&mut self) -> bool {
        match &mut self.child {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Kill the server at once (SIGKILL) and reap it: open connections are
    /// reset and new ones refused.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// An unsigned request: the server must answer, and refuse it.
    fn anonymous_get(addr: SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(addr).unwrap();
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).unwrap();
        response
    }

    #[test]
    fn starts_on_loopback_requires_signatures_and_stops_when_killed() {
        let mut server = S3Server::start(&["bucket"]).unwrap();
        assert!(server.addr().ip().is_loopback());
        assert!(server.root().join("bucket").is_dir());
        let response = anonymous_get(server.addr(), "/bucket/missing");
        assert!(
            response.starts_with("HTTP/1.1 403"),
            "an unsigned GET must be refused: {response}"
        );
        let addr = server.addr();
        server.kill();
        assert!(!server.is_running());
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    }
}

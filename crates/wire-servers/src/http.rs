//! A plain HTTP server with WebDAV: [rclone](https://rclone.org) 1.75.2's
//! `rclone serve webdav` over a local folder, on loopback — the server
//! object_store's own CI tests its `HttpStore` against.
//!
//! What object_store's `HttpStore` sends (object_store 0.13.2, `src/http/`):
//!
//! - `GET` / `HEAD` `{url}/{path}`, with `Range: bytes=a-b` for ranges; a ranged
//!   GET must be answered `206` with `Content-Range` (a `200` is an error:
//!   "Range request not supported"), and every answer needs `Content-Length`
//!   (`ETag` and `Last-Modified` are optional for this store).
//! - `list` (DataFusion's listing of a table's files): `PROPFIND` with
//!   `Depth: infinity`; `list_with_delimiter` (partition pruning): `Depth: 1`.
//!   The multistatus needs `getlastmodified` on every entry, `getcontentlength`
//!   on files, `resourcetype`/`collection` on folders; a `404` is an empty list.
//! - `put`: `PUT`; on `409` or `404` it creates the parents with `MKCOL` and
//!   puts again. `delete`: `DELETE`; `copy`: `COPY`.
//!
//! Why rclone and not Debian's nginx with `libnginx-mod-http-dav-ext`: that
//! module answers `PROPFIND` with `Depth: infinity` `403 Forbidden` (it serves
//! Depth 0 and 1 only), so `list` and DataFusion's file listing fail.
//!
//! Observed (`probe.py`): ranged GET `206` with `Content-Range: bytes
//! 100-199/10240`, `Content-Length`, `ETag`, `Last-Modified`; a range running
//! past the end is clipped (`bytes 10000-10239/10240`); one starting past the
//! end is `416` with `Content-Range: bytes */10240`; suffix ranges work. HEAD
//! `200`; `PROPFIND` `207` at every depth, `404` for a missing path; `PUT`
//! under a missing folder `409`, `MKCOL` `201`; `DELETE` `204`. No
//! authentication (rclone's `--user`/`--pass` would add Basic auth, which
//! `HttpStore` can send only as a default `Authorization` header).
//!
//! The store is built on the server's root URL, not on a folder: `HttpStore`
//! resolves listed `href`s against the host, so locations are whole URL paths
//! (`<folder>/t/file.parquet`), which is also what DataFusion expects of a
//! store registered for `http://127.0.0.1:<port>`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use object_store::ClientOptions;
use object_store::http::HttpBuilder;

use crate::{Install, Root, Running, ServerProcess, clear_env, port_after};

/// The rclone release `install-http.sh` installs.
pub const RCLONE_VERSION: &str = "1.75.2";

const INSTALL: Install = Install {
    name: "rclone 1.75.2",
    script: "install-http.sh",
    program: "http/1.75.2/bin/rclone",
    folder: "http/1.75.2",
    env: "DFPREFETCH_RCLONE",
};

/// The rclone binary, installing it (once per process) if needed.
pub fn server_binary() -> Result<PathBuf, String> {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALL.binary(&INSTALLED)
}

/// `NOTICE: Local file system at <root>: WebDav Server started on
/// [http://127.0.0.1:PORT/]` (1.75; 1.60 prints the URL without brackets).
fn announce(line: &str) -> Option<u16> {
    if line.contains("Server started on") {
        port_after(line, "http://127.0.0.1:")
    } else {
        None
    }
}

/// A running `rclone serve webdav` on `127.0.0.1`, killed when dropped.
#[derive(Debug)]
pub struct HttpServer {
    running: Running,
}

impl HttpServer {
    /// Start a server over a fresh temporary folder holding the (empty)
    /// `folders` (the HTTP counterpart of buckets: `http://…/<folder>/`).
    pub fn start(folders: &[&str]) -> Result<Self, String> {
        Self::start_with_root(Root::temporary()?, folders)
    }

    /// Start a server over `root`, whose files it serves as they are (files
    /// written there directly are served too); `folders` are created if missing.
    pub fn start_in(root: &Path, folders: &[&str]) -> Result<Self, String> {
        Self::start_with_root(Root::Kept(root.to_path_buf()), folders)
    }

    fn start_with_root(root: Root, folders: &[&str]) -> Result<Self, String> {
        for folder in folders {
            let dir = root.path().join(folder);
            std::fs::create_dir_all(&dir)
                .map_err(|e| format!("creating folder {}: {e}", dir.display()))?;
        }
        let binary = server_binary()?;
        let mut command = Command::new(&binary);
        command
            .args(["serve", "webdav"])
            .arg(root.path())
            .args(["--addr", "127.0.0.1:0"])
            // No rclone.conf is read or written.
            .args(["--config", "/dev/null"])
            // A directory cache of 1 ms: a listing shows the folder as it
            // is, also after files were written or deleted behind rclone.
            // Not 0s: once a folder was made through rclone (MKCOL, PUT),
            // rclone 1.75's cache cleaner then re-arms itself at once and
            // spins a whole core for as long as the server runs (measured:
            // 91% of a core, idle; with 1 ms, under 1%) — on a 2-core
            // machine it starved the tests beside it until requests to it
            // timed out.
            .args(["--dir-cache-time", "1ms", "--poll-interval", "0"]);
        if std::env::var_os(crate::LOG_COPY_VAR).is_some() {
            command.args(["-vv", "--log-format", "date,time,microseconds"]);
        }
        // rclone takes every flag from RCLONE_<FLAG> variables too.
        clear_env(&mut command, &["RCLONE_"]);
        let what = format!("rclone serve webdav ({})", binary.display());
        let (process, addr) = ServerProcess::start(what, command, announce)?;
        Ok(Self {
            running: Running::new(process, addr, root, binary),
        })
    }

    /// `http://127.0.0.1:<port>`: the URL to build the store on and to
    /// register it for.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.running.addr())
    }

    /// `http://127.0.0.1:<port>/<folder>/`: a folder's URL, e.g. the root of a
    /// table's path (`{url}t/`).
    pub fn url(&self, folder: &str) -> String {
        format!("http://{}/{folder}/", self.running.addr())
    }

    /// object_store's HTTP client for this server: its root URL, plain HTTP
    /// allowed. Add a retry policy before `build()`.
    pub fn builder(&self) -> HttpBuilder {
        builder(&self.endpoint())
    }
}

derefs_to_running!(HttpServer);

/// [`HttpServer::builder`] for a server reached at `endpoint`
/// (`http://host:port`), e.g. through a proxy in front of it.
pub fn builder(endpoint: &str) -> HttpBuilder {
    HttpBuilder::new()
        .with_url(endpoint)
        .with_client_options(ClientOptions::new().with_allow_http(true))
}

#[cfg(test)]
mod tests {
    use std::net::TcpStream;
    use std::time::Duration;

    use futures::TryStreamExt;
    use object_store::path::Path as ObjectPath;
    use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

    use super::*;

    #[tokio::test]
    async fn object_store_round_trip_with_recursive_and_delimited_lists() {
        let mut server = HttpServer::start(&["data"]).unwrap();
        assert!(server.addr().ip().is_loopback());
        let store = server.builder().build().unwrap();
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_240).collect();
        let path = ObjectPath::from("data/t/region=north/file_00.parquet");
        // The parent folders do not exist: PUT, 409, MKCOL, PUT.
        store
            .put(&path, PutPayload::from(bytes.clone()))
            .await
            .unwrap();
        assert!(
            server
                .root()
                .join("data/t/region=north/file_00.parquet")
                .is_file()
        );

        assert_eq!(
            store.get_range(&path, 100..200).await.unwrap(),
            &bytes[100..200]
        );
        assert_eq!(
            store.get_range(&path, 10_000..20_000).await.unwrap(),
            &bytes[10_000..]
        );
        assert_eq!(store.head(&path).await.unwrap().size, 10_240);
        // PROPFIND Depth: infinity.
        let listed: Vec<_> = store
            .list(Some(&ObjectPath::from("data/t")))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].location, path);
        // PROPFIND Depth: 1.
        let delimited = store
            .list_with_delimiter(Some(&ObjectPath::from("data/t")))
            .await
            .unwrap();
        assert_eq!(
            delimited.common_prefixes,
            vec![ObjectPath::from("data/t/region=north")]
        );

        store.delete(&path).await.unwrap();
        assert!(store.head(&path).await.is_err());
        let addr = server.addr();
        server.kill();
        assert!(!server.is_running());
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    }
}

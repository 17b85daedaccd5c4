//! Azure Blob Storage: [Azurite](https://github.com/Azure/Azurite) 3.35.0's
//! blob service on loopback.
//!
//! Azurite binds port 0 and logs the port it got (`Azurite Blob service
//! successfully listens on http://127.0.0.1:PORT`). It serves the well-known
//! development account `devstoreaccount1` with path-style URLs
//! (`http://127.0.0.1:PORT/devstoreaccount1/<container>/<blob>`) and checks
//! every request's Shared Key signature: a wrong key or none is `403
//! AuthorizationFailure`, as on Azure.
//!
//! object_store's client is pointed at it with an explicit endpoint rather
//! than `with_use_emulator(true)`: in emulator mode object_store takes the
//! URL only from the `AZURITE_BLOB_STORAGE_URL` environment variable (default
//! `http://127.0.0.1:10000`), one value per process, which would not do for
//! servers on free ports in parallel tests. With the endpoint
//! `http://127.0.0.1:PORT/devstoreaccount1` the requests (URLs and signatures)
//! are exactly the emulator mode's; the one difference is that
//! `list_with_offset` sends `startFrom`, which Azurite ignores (emulator mode
//! filters on the client instead) — DataFusion does not use it.
//!
//! Observed (`probe.py`): ranged GET `206` with `Content-Range: bytes
//! 100-199/10240`, `Content-Length`, `ETag`, `Last-Modified`; a range running
//! past the end is clipped (`bytes 10000-10239/10240`); one starting past the
//! end is `416 InvalidRange` with `Content-Range: bytes */10240`; a suffix
//! range (`bytes=-100`) is `500` — object_store never sends one to Azure
//! (it refuses suffix ranges itself). HEAD `200`; List Blobs `200` with
//! `<Blob>` / `<BlobPrefix>`; DELETE `202`. object_store has no call that
//! creates a container: [`AzureServer`] creates them at start.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use object_store::ClientOptions;
use object_store::azure::MicrosoftAzureBuilder;

use crate::{Install, Root, Running, ServerProcess, clear_env, http_request, port_after};

/// The Azurite release `install-azure.sh` installs.
pub const AZURITE_VERSION: &str = "3.35.0";
/// Azurite's well-known development account.
pub const ACCOUNT: &str = "devstoreaccount1";
/// Its well-known key (Shared Key authentication).
pub const ACCOUNT_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// An account SAS of [`ACCOUNT`] signed with [`ACCOUNT_KEY`]: blob service,
/// container and object level, read/write/delete/list/add/create, valid
/// 2020–2099. It lets this crate create containers with a plain HTTP request
/// instead of computing Shared Key signatures (HMAC-SHA256) itself. Signed
/// with version 2023-11-03, the one object_store 0.13.2 sends.
const CONTAINER_SAS: &str = "sv=2023-11-03&ss=b&srt=co&sp=rwdlac\
    &st=2020-01-01T00%3A00%3A00Z&se=2099-12-31T23%3A59%3A59Z&spr=https%2Chttp\
    &sig=%2BMDx65m%2Bv4ZvK0WJ%2BWLdj%2F2X4aWX80c%2BEoII6tI7JJQ%3D";

/// Under Azurite's keep-alive timeout of 5 s.
const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(3);

const INSTALL: Install = Install {
    name: "Azurite 3.35.0",
    script: "install-azure.sh",
    program: "azure/3.35.0/node_modules/.bin/azurite-blob",
    folder: "azure/3.35.0",
    env: "DFPREFETCH_AZURITE_BLOB",
};

/// The `azurite-blob` launcher (a Node.js script: `node` must be on `PATH`),
/// installing Azurite (once per process) if needed.
pub fn server_binary() -> Result<PathBuf, String> {
    static INSTALLED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    INSTALL.binary(&INSTALLED)
}

fn announce(line: &str) -> Option<u16> {
    port_after(line, "successfully listens on http://127.0.0.1:")
}

/// A running Azurite blob service on `127.0.0.1`, killed when dropped.
#[derive(Debug)]
pub struct AzureServer {
    running: Running,
}

impl AzureServer {
    /// Start a server over a fresh temporary folder, with the (empty)
    /// `containers`.
    pub fn start(containers: &[&str]) -> Result<Self, String> {
        Self::start_with_root(Root::temporary()?, containers, &[])
    }

    /// Start a server over `root` (Azurite's `--location`: its metadata
    /// database and blob extents), which keeps the blobs after the server
    /// stops; `containers` are created if missing.
    pub fn start_in(root: &Path, containers: &[&str]) -> Result<Self, String> {
        Self::start_in_with_args(root, containers, &[])
    }

    /// [`start_in`](Self::start_in) with more Azurite command-line flags,
    /// e.g. `--skipApiVersionCheck` for clients (the Azure SDK for C++ in
    /// PyArrow 26) that send a service version newer than Azurite 3.35.0
    /// knows, which it otherwise refuses with `400 InvalidHeaderValue`.
    pub fn start_in_with_args(
        root: &Path,
        containers: &[&str],
        args: &[&str],
    ) -> Result<Self, String> {
        std::fs::create_dir_all(root).map_err(|e| format!("creating {}: {e}", root.display()))?;
        Self::start_with_root(Root::Kept(root.to_path_buf()), containers, args)
    }

    fn start_with_root(root: Root, containers: &[&str], args: &[&str]) -> Result<Self, String> {
        let binary = server_binary()?;
        let mut command = Command::new(&binary);
        command
            .args(["--blobHost", "127.0.0.1", "--blobPort", "0"])
            .arg("--location")
            .arg(root.path())
            // No telemetry (there is no network anyway), no access log.
            .args(["--disableTelemetry", "--silent"])
            .args(args);
        // AZURITE_ACCOUNTS, AZURITE_DB, ... would change accounts or storage.
        clear_env(&mut command, &["AZURITE_"]);
        let what = format!("Azurite ({})", binary.display());
        let (process, addr) = ServerProcess::start(what, command, announce)?;
        let server = Self {
            running: Running::new(process, addr, root, binary),
        };
        for container in containers {
            server.create_container(container)?;
        }
        Ok(server)
    }

    /// `http://127.0.0.1:<port>/devstoreaccount1`: the account's blob endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://{}/{ACCOUNT}", self.running.addr())
    }

    /// object_store's Azure client for `container` on this server: the
    /// account, its key, the endpoint, plain HTTP allowed. Add a retry policy
    /// etc. before `build()`; `.with_access_key(other)` for a refused one.
    /// (`with_client_options` would replace the options set here.)
    pub fn builder(&self, container: &str) -> MicrosoftAzureBuilder {
        builder(&self.endpoint(), container)
    }

    /// Create a container now (`201`), or find it there (`409`).
    pub fn create_container(&self, container: &str) -> Result<(), String> {
        let path = format!("/{ACCOUNT}/{container}?restype=container&{CONTAINER_SAS}");
        let (status, response) = http_request(self.running.addr(), "PUT", &path, &[], b"")?;
        match status {
            201 | 409 => Ok(()),
            _ => Err(format!("creating container {container}: {response}")),
        }
    }
}

derefs_to_running!(AzureServer);

/// [`AzureServer::builder`] for an Azurite account endpoint
/// (`http://host:port/devstoreaccount1`) reached some other way, e.g.
/// through a proxy in front of the server (Shared Key signatures do not cover
/// the host, so a proxy may forward requests as they are).
pub fn builder(endpoint: &str, container: &str) -> MicrosoftAzureBuilder {
    MicrosoftAzureBuilder::new()
        .with_account(ACCOUNT)
        .with_access_key(ACCOUNT_KEY)
        .with_endpoint(endpoint.to_string())
        .with_client_options(
            ClientOptions::new()
                .with_allow_http(true)
                // Azurite (Node.js) closes a connection idle for 5 s
                // (`Keep-Alive: timeout=5`; its --blobKeepAliveTimeout
                // does not change that in 3.35.0): drop idle pooled
                // connections before that rather than race the close.
                .with_pool_idle_timeout(POOL_IDLE_TIMEOUT),
        )
        .with_container_name(container)
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
    async fn object_store_round_trip_and_a_wrong_key_is_refused() {
        let mut server = AzureServer::start(&["data"]).unwrap();
        assert!(server.addr().ip().is_loopback());
        let azure = server.builder("data").build().unwrap();
        let bytes: Vec<u8> = (0..=255u8).cycle().take(10_240).collect();
        let path = ObjectPath::from("t/region=north/file_00.parquet");
        azure
            .put(&path, PutPayload::from(bytes.clone()))
            .await
            .unwrap();

        assert_eq!(
            azure.get_range(&path, 100..200).await.unwrap(),
            &bytes[100..200]
        );
        assert_eq!(
            azure.get_range(&path, 10_000..20_000).await.unwrap(),
            &bytes[10_000..]
        );
        assert_eq!(azure.head(&path).await.unwrap().size, 10_240);
        let listed: Vec<_> = azure
            .list(Some(&ObjectPath::from("t")))
            .try_collect()
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].location, path);

        let wrong_key = "bm90IHRoZSBrZXkgbm90IHRoZSBrZXkgbm90IHRoZSBrZXk=";
        let refused = server
            .builder("data")
            .with_access_key(wrong_key)
            .build()
            .unwrap();
        let err = refused.head(&path).await.unwrap_err().to_string();
        assert!(err.contains("403"), "a wrong key must be refused: {err}");

        azure.delete(&path).await.unwrap();
        assert!(azure.head(&path).await.is_err());
        let addr = server.addr();
        server.kill();
        assert!(!server.is_running());
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
    }
}

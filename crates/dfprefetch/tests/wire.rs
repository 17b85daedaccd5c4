//! `dfprefetch --table t=<URL>` against real servers on loopback: S3
//! (s3s-fs), GCS (fake-gcs-server), Azure Blob (Azurite) and HTTP (rclone's
//! WebDAV server), each store configured only from the environment variables
//! object_store reads, as a user's shell would have them.
//!
//! The servers are installed by `crates/s3-server/install.sh` and
//! `crates/wire-servers/install-*.sh` (`.ci/run` runs them); a server that is
//! not installed fails its test and says how to install it.

use std::path::Path;
use std::process::Output;

use datafusion_prefetch_s3server::{ACCESS_KEY, REGION, S3Server, SECRET_KEY};
use datafusion_prefetch_wireservers::{AzureServer, GcsServer, HttpServer, azure};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use tempfile::TempDir;

mod common;

use common::{DATASET_FILES, text, write_dataset};

/// The bucket, container or folder the table lives in, and the table's folder.
const BUCKET: &str = "data";
const TABLE: &str = "t";

/// What every policy must print for [`QUERY`] over [`dataset`]'s files.
const QUERY: &str = "SELECT count(*) AS n, sum(id) AS s, max(k) AS k FROM t";
const EXPECTED: [&str; 2] = ["n,s,k", "10000,50005000,6"];

/// `dfprefetch` with `args`, the cloud variables of this process's
/// environment removed and `env` set instead.
fn dfprefetch(args: &[&str], env: &[(&str, String)]) -> Output {
    let mut command = common::command(args);
    for (name, _) in std::env::vars() {
        if ["AWS_", "GOOGLE_", "AZURE_", "AZURITE_"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
        {
            command.env_remove(name);
        }
    }
    command.envs(env.iter().map(|(k, v)| (*k, v)));
    command.output().expect("run dfprefetch")
}

/// [`write_dataset`]'s files, as (key under the table's folder, bytes).
fn dataset() -> (TempDir, Vec<(String, Vec<u8>)>) {
    let dir = tempfile::tempdir().unwrap();
    write_dataset(dir.path());
    let files = DATASET_FILES
        .into_iter()
        .map(|name| {
            let bytes = std::fs::read(dir.path().join(name)).unwrap();
            (format!("{TABLE}/{name}"), bytes)
        })
        .collect();
    (dir, files)
}

async fn upload(store: &dyn ObjectStore, files: &[(String, Vec<u8>)]) {
    for (key, bytes) in files {
        store
            .put(&ObjectPath::from(key.as_str()), bytes.clone().into())
            .await
            .unwrap_or_else(|e| panic!("uploading {key}: {e}"));
    }
}

/// Run [`QUERY`] on `t` at `url` under every policy, with `--metrics`: each
/// prints [`EXPECTED`], and each prefetching policy reads its bytes over the
/// wire.
fn every_policy_answers(url: &str, env: &[(&str, String)], server: &str) {
    let table = format!("{TABLE}={url}");
    for policy in ["off", "batched", "pipelined", "streaming", "auto"] {
        let set = format!("SET prefetch.policy = '{policy}'");
        let out = dfprefetch(
            &[
                "--table",
                &table,
                "--format",
                "csv",
                "--metrics",
                "-c",
                &set,
                "-c",
                QUERY,
            ],
            env,
        );
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert!(
            out.status.success(),
            "{server}, {policy}: dfprefetch failed\nstdout: {stdout}\nstderr: {stderr}"
        );
        assert_eq!(
            stdout.lines().collect::<Vec<_>>(),
            EXPECTED,
            "{server}, {policy}"
        );
        let select: serde_json::Value = stderr
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .find(|m| m["sql"].as_str().is_some_and(|s| s.contains("count(*)")))
            .unwrap_or_else(|| panic!("{server}, {policy}: no metrics line in: {stderr}"));
        assert_eq!(select["policy"], policy, "{server}: {select}");
        // Without a simulated store only prefetching scans count their
        // requests (`off` reports none).
        if policy != "off" {
            let count = |key: &str| select[key].as_u64().unwrap_or(0);
            assert!(
                count("requests") > 0 && count("bytes_fetched") > 0,
                "{server}, {policy}: nothing read over the wire: {select}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_flag_reads_s3_urls_from_aws_variables() {
    let (_dir, files) = dataset();
    let server = S3Server::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
    let env = vec![
        ("AWS_ENDPOINT", server.endpoint()),
        ("AWS_ALLOW_HTTP", "true".to_string()),
        ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
        ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
        ("AWS_REGION", REGION.to_string()),
    ];
    let client = AmazonS3Builder::new()
        .with_endpoint(server.endpoint())
        .with_allow_http(true)
        .with_bucket_name(BUCKET)
        .with_region(REGION)
        .with_access_key_id(ACCESS_KEY)
        .with_secret_access_key(SECRET_KEY)
        .build()
        .unwrap();
    upload(&client, &files).await;
    let url = format!("s3://{BUCKET}/{TABLE}/");
    tokio::task::spawn_blocking(move || every_policy_answers(&url, &env, "S3"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_flag_reads_gs_urls_from_google_variables() {
    let (_dir, files) = dataset();
    let server = GcsServer::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
    for (key, bytes) in &files {
        server.put_object(BUCKET, key, bytes).unwrap();
    }
    // The service-account key carries the server's URL and turns OAuth off.
    let env = vec![
        ("GOOGLE_SERVICE_ACCOUNT_KEY", server.service_account_key()),
        ("GOOGLE_ALLOW_HTTP", "true".to_string()),
    ];
    let url = format!("gs://{BUCKET}/{TABLE}/");
    tokio::task::spawn_blocking(move || every_policy_answers(&url, &env, "GCS"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_flag_reads_az_urls_from_azure_variables() {
    let (_dir, files) = dataset();
    let server = AzureServer::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
    upload(&server.builder(BUCKET).build().unwrap(), &files).await;
    let env = vec![
        ("AZURE_STORAGE_ACCOUNT_NAME", azure::ACCOUNT.to_string()),
        ("AZURE_STORAGE_ACCOUNT_KEY", azure::ACCOUNT_KEY.to_string()),
        ("AZURE_STORAGE_ENDPOINT", server.endpoint()),
        ("AZURE_ALLOW_HTTP", "true".to_string()),
    ];
    let url = format!("az://{BUCKET}/{TABLE}/");
    tokio::task::spawn_blocking(move || every_policy_answers(&url, &env, "Azure"))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_flag_reads_http_urls() {
    let (_dir, files) = dataset();
    let server = HttpServer::start(&[BUCKET]).unwrap_or_else(|e| panic!("{e}"));
    let folder = server.root().join(BUCKET);
    for (key, bytes) in &files {
        write(&folder.join(key), bytes);
    }
    // Nothing to configure: an http:// URL is a request for plain HTTP.
    let url = server.url(&format!("{BUCKET}/{TABLE}"));
    tokio::task::spawn_blocking(move || every_policy_answers(&url, &[], "HTTP"))
        .await
        .unwrap();
}

fn write(path: &Path, bytes: &[u8]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

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
                        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\n\r\n");
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
        slow_down: 0.0,
    };
    let proxy = LatencyProxy::start(upstream(body).await, config, Wire::Http)
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
    let list = "PROPFIND /bucket/t/ HTTP/1.1\r\nHost: x\r\nDepth: infinity\r\n\r\n";
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

#[tokio::test]
async fn answers_gets_slow_down_itself_and_passes_the_rest() {
    let config = ProxyConfig {
        latency: LatencyModel::Fixed(Duration::ZERO),
        list_latency: LatencyModel::Fixed(Duration::ZERO),
        bandwidth_bytes_per_sec: None,
        seed: 1,
        slow_down: 1.0,
    };
    let proxy = LatencyProxy::start(upstream(10).await, config, Wire::Http)
        .await
        .unwrap();
    let mut conn = TcpStream::connect(proxy.addr()).await.unwrap();
    let refused = slow_down_response();
    let get = "GET /bucket/key HTTP/1.1\r\nHost: x\r\n\r\n";
    for _ in 0..2 {
        conn.write_all(get.as_bytes()).await.unwrap();
        let mut got = vec![0u8; refused.len()];
        conn.read_exact(&mut got).await.unwrap();
        assert_eq!(String::from_utf8(got).unwrap(), refused);
    }
    assert!(refused.starts_with("HTTP/1.1 503 Slow Down\r\n"));
    assert!(refused.ends_with("<Code>SlowDown</Code><Message>Please reduce your request rate.</Message><RequestId>proxy</RequestId></Error>"));
    // A LIST, and anything but a GET, reaches the server.
    let list = "PROPFIND /bucket/t/ HTTP/1.1\r\nHost: x\r\n\r\n";
    let ok = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
    exchange(&mut conn, list, ok.len() + 10).await;
    let counts = proxy.stats().counts();
    assert_eq!((counts.requests, counts.slowed_down), (3, 2));
}

#[test]
fn before_s3s_fs_requests_go_unsigned_and_suffix_ranges_fit_the_object() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(folder.path().join("b/t")).unwrap();
    std::fs::write(folder.path().join("b/t/small.parquet"), [0u8; 10]).unwrap();
    let rewrite =
        |head: &str| String::from_utf8(as_s3_for_s3s_fs(head.as_bytes(), folder.path())).unwrap();
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
fn tells_each_stores_lists_from_object_reads() {
    let s3 = Wire::S3 {
        s3s_fs_folder: None,
    };
    let lists = [
        (&s3, "GET /b?list-type=2&prefix=a"),
        (&s3, "GET /b/?list-type=2"),
        (&s3, "GET /b?prefix=a&list-type=2&continuation-token=x"),
        (&Wire::Gcs, "GET /b?list-type=2&prefix=a%2F"),
        (&Wire::Gcs, "GET /storage/v1/b/b/o?prefix=a%2F&pageToken=x"),
        (&Wire::Gcs, "GET /storage/v1/b/b/o"),
        (
            &Wire::Azure,
            "GET /devstoreaccount1/c?restype=container&comp=list&prefix=a%2F",
        ),
        (
            &Wire::Azure,
            "GET /devstoreaccount1/c?comp=list&restype=container",
        ),
        (&Wire::Http, "PROPFIND /peers/t/"),
    ];
    let reads = [
        (&s3, "GET /b/a/c.parquet"),
        (&s3, "GET /b/a.parquet?versionId=1"),
        (&s3, "HEAD /b/a.parquet"),
        (&s3, "GET /b?location"),
        (&s3, "GET /b/a?list-type=2"),
        (&s3, "PROPFIND /b/"),
        (&Wire::Gcs, "GET /b/a/c.parquet"),
        (&Wire::Gcs, "GET /storage/v1/b/b/o/a%2Fc.parquet?alt=media"),
        (&Wire::Gcs, "GET /storage/v1/b/b/o/a%2Fc.parquet"),
        (&Wire::Gcs, "GET /storage/v1/b/b"),
        (&Wire::Azure, "GET /devstoreaccount1/c/a/c.parquet"),
        (&Wire::Azure, "HEAD /devstoreaccount1/c/a/c.parquet"),
        (&Wire::Azure, "GET /devstoreaccount1/c?restype=container"),
        (&Wire::Azure, "GET /devstoreaccount1/c?list-type=2"),
        (&Wire::Http, "GET /peers/t/a.parquet"),
        (&Wire::Http, "HEAD /peers/t/a.parquet"),
        (&Wire::Http, "GET /b?list-type=2"),
    ];
    let head = |wire: &Wire, line: &str| {
        parse_head(
            format!("{line} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
            wire,
        )
    };
    for (wire, line) in lists {
        assert_eq!(head(wire, line), (Kind::List, 0), "{wire:?} {line}");
    }
    for (wire, line) in reads {
        let kind = match line.starts_with("GET ") {
            true => Kind::Get,
            false => Kind::Other,
        };
        assert_eq!(head(wire, line), (kind, 0), "{wire:?} {line}");
    }
    assert_eq!(
        parse_head(b"PUT /b/k HTTP/1.1\r\ncontent-length: 42\r\n\r\n", &s3),
        (Kind::Other, 42)
    );
}

#[test]
fn only_s3s_fs_and_gcs_requests_are_changed() {
    let upstream: SocketAddr = "127.0.0.1:4443".parse().unwrap();
    let signed = "GET /b/t/k.parquet HTTP/1.1\r\nhost: 127.0.0.1:9\r\n\
        Authorization: AWS4-HMAC-SHA256 Credential=k\r\nRange: bytes=-100\r\n\r\n";
    let forward =
        |wire: Wire| String::from_utf8(wire.forward(signed.as_bytes(), upstream)).unwrap();
    // Only in front of s3s-fs does a signed request lose its signature.
    for wire in [
        Wire::S3 {
            s3s_fs_folder: None,
        },
        Wire::Azure,
        Wire::Http,
    ] {
        assert_eq!(forward(wire), signed);
    }
    let folder = tempfile::tempdir().unwrap();
    assert!(
        !forward(Wire::S3 {
            s3s_fs_folder: Some(folder.path().to_path_buf())
        })
        .contains("Authorization")
    );
    // GCS: the server's own address as Host, everything else as it was.
    assert_eq!(
        forward(Wire::Gcs),
        "GET /b/t/k.parquet HTTP/1.1\r\nHost: 127.0.0.1:4443\r\n\
        Authorization: AWS4-HMAC-SHA256 Credential=k\r\nRange: bytes=-100\r\n\r\n"
    );
}

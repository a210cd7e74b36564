//! The status page at `/`, rendered by a real headless Chromium: the DOM Chromium builds holds
//! the devices per tier and the departures, and its screenshot is a real picture (not blank).
//! The screenshot is kept in target/ (ROAMKV_SCREENSHOT_DIR overrides) for a person to look at.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use roamkv_testbed::prerequisite::{self, require_tool};

fn chromium() -> &'static str {
    if std::path::Path::new("/usr/bin/chromium").exists() {
        "/usr/bin/chromium"
    } else {
        "chromium"
    }
}

/// Runs headless Chromium with the given arguments on `url`; returns stdout. Bounded in time.
fn run_chromium(args: &[&str], url: &str, profile: &std::path::Path) -> String {
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start chromium");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(status.success(), "chromium exited with {status}");
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut out = String::new();
    use std::io::Read;
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_page_renders_in_headless_chromium() {
    let tool = require_tool("chromium", "chromium");
    if !prerequisite::met("status_page_renders_in_headless_chromium", tool) {
        return;
    }
    let server = Server::start(|_| {}).await;
    let now = now_ns();
    for device in ["truck-1", "truck-2", "bus-9"] {
        let (status, _) = server
            .post_event(&event(device, now, &[("speed", "50"), ("fuel", "0.7")]))
            .await;
        assert_eq!(status, 201);
    }
    let (status, _) = server.delete("/api/v3/event/device/name/bus-9").await;
    assert_eq!(status, 202);
    // Two samples of history so the charts have a line.
    tokio::time::sleep(Duration::from_millis(2200)).await;

    let url = format!("{}/", server.base);
    let profile = tempfile::tempdir().expect("profile dir");
    let url_for_dom = url.clone();
    let profile_path = profile.path().to_path_buf();
    let dom = tokio::task::spawn_blocking(move || {
        run_chromium(&["--dump-dom"], &url_for_dom, &profile_path)
    })
    .await
    .expect("dom");
    assert!(dom.contains("truck-1") && dom.contains("truck-2"), "{dom}");
    assert!(dom.contains("bus-9"), "departure listed: {dom}");
    assert!(dom.contains(r#"id="upper">upper tier<b>2</b>"#), "{dom}");
    assert!(dom.contains("<svg"), "{dom}");

    let shots = std::env::var("ROAMKV_SCREENSHOT_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/screenshots")
        });
    std::fs::create_dir_all(&shots).expect("screenshot dir");
    let png_path = shots.join("status-page.png");
    let _ = std::fs::remove_file(&png_path);
    let shot_arg = format!("--screenshot={}", png_path.display());
    let profile_path = profile.path().to_path_buf();
    tokio::task::spawn_blocking(move || {
        run_chromium(&[&shot_arg, "--window-size=1280,900"], &url, &profile_path)
    })
    .await
    .expect("screenshot");

    let decoder = png::Decoder::new(std::fs::File::open(&png_path).expect("screenshot written"));
    let mut reader = decoder.read_info().expect("a PNG");
    let mut pixels = vec![0; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut pixels).expect("PNG frame");
    assert_eq!((frame.width, frame.height), (1280, 900));
    let pixels = &pixels[..frame.buffer_size()];
    let distinct: std::collections::HashSet<&[u8]> = pixels
        .chunks(frame.color_type.samples())
        .take(2_000_000)
        .collect();
    assert!(
        distinct.len() > 20,
        "the screenshot has {} colours: blank?",
        distinct.len()
    );
    eprintln!("status page screenshot: {}", png_path.display());
    server.stop().await;
}

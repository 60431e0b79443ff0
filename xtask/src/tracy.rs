//! Tracy GPU zones: the trace crate's zones writer under each Tracy client
//! version it takes, and `ci/tracy-check` against a real Tracy server,
//! PyPI `iree-base-runtime`'s `iree-tracy-capture` (Tracy 0.11, protocol
//! 66), installed into a virtual environment under the target folder.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};

use crate::{cargo, root, run, target_dir};

/// The wheel that carries a headless Tracy 0.11 server.
const CAPTURE_WHEEL: &str = "iree-base-runtime==3.1.0";
const TRACE_PACKAGE: &str = "device-events-trace";

/// `iree-tracy-capture` itself, installed if missing: the wheel's script
/// runs it as a child, which a signal to stop and save would not reach.
pub(crate) fn ensure_capture() -> Result<PathBuf> {
    let venv = target_dir().join("tracy-venv");
    let python = venv.join("bin").join("python3");
    if !python.exists() {
        run(
            "python3 -m venv (for Tracy's capture server)",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        )?;
    }
    let find = || {
        Command::new(&python)
            .args([
                "-c",
                "import os, iree._runtime_libs_tracy as m; \
                 print(os.path.join(m.__path__[0], 'iree-tracy-capture'))",
            ])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            .filter(|path| path.exists())
    };
    if let Some(found) = find() {
        return Ok(found);
    }
    run(
        &format!("pip install {CAPTURE_WHEEL} (iree-tracy-capture: Tracy 0.11's server)"),
        Command::new(&python).args(["-m", "pip", "install", "--quiet", CAPTURE_WHEEL]),
    )?;
    find().context("iree-tracy-capture not found after installing its wheel")
}

/// The zones writer's tests and lints under each client version, then the
/// check against the real server under both client APIs (0.17's one
/// upload; 0.18's two and its re-sync), each on Tracy 0.11.
pub(crate) fn tracy_checks() -> Result<()> {
    for feature in ["tracy", "tracy-0-17"] {
        run(
            &format!("cargo clippy (the trace crate, feature {feature})"),
            cargo().args([
                "clippy",
                "--package",
                TRACE_PACKAGE,
                "--features",
                feature,
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]),
        )?;
    }
    run(
        "cargo test (the trace crate's Tracy zones, tracy-client 0.19)",
        cargo().args(["test", "--package", TRACE_PACKAGE, "--features", "tracy"]),
    )?;
    let capture = ensure_capture()?;
    let manifest = root().join("ci").join("tracy-check").join("Cargo.toml");
    // Its captures go here; it builds in the workspace's target folder,
    // sharing what the two build alike (the core, the trace crate's
    // dependencies, Tracy 0.11's client, built above under `tracy-0-17`).
    let dir = target_dir().join("tracy-check");
    std::fs::create_dir_all(&dir)?;
    for (client, feature) in [
        ("tracy-client 0.17.1", "client-0-17"),
        ("tracy-client 0.18.4, re-synced", "client-0-18"),
    ] {
        let check = |verb: &str| {
            let mut cmd = cargo();
            cmd.args([verb, "--quiet", "--no-default-features"])
                .args(["--features", feature, "--manifest-path"])
                .arg(&manifest)
                .arg("--target-dir")
                .arg(target_dir());
            cmd
        };
        run(
            &format!("cargo clippy (ci/tracy-check, {client})"),
            check("clippy").args(["--", "-D", "warnings"]),
        )?;
        run(
            &format!("Tracy GPU zones against iree-tracy-capture ({client}, protocol 66)"),
            check("run")
                .arg("--")
                .arg(&capture)
                .arg(dir.join(format!("{feature}.tracy"))),
        )?;
    }
    Ok(())
}

/// The headless capture `cargo xtask demo --tracy` streams the demo to.
pub(crate) struct DemoCapture {
    child: Child,
    file: PathBuf,
    log: PathBuf,
}

/// Start the capture, waiting for the demo on a free port, into
/// `out/demo.tracy` (its messages in `out/capture.log`), and point `demo`
/// at it: the demo's client keeps the process up at exit until the
/// capture has everything (`TRACY_NO_EXIT`).
pub(crate) fn demo_capture(demo: &mut Command, out: &Path) -> Result<DemoCapture> {
    let capture = ensure_capture()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port()
        .to_string();
    std::fs::create_dir_all(out)?;
    let file = out.join("demo.tracy");
    let log = out.join("capture.log");
    let child = Command::new(&capture)
        .arg("-o")
        .arg(&file)
        .args(["-f", "-a", "127.0.0.1", "-p", &port])
        .stdout(std::fs::File::create(&log)?)
        .spawn()
        .with_context(|| format!("could not start {}", capture.display()))?;
    demo.arg("--tracy")
        .env("TRACY_PORT", &port)
        .env("TRACY_NO_EXIT", "1");
    Ok(DemoCapture { child, file, log })
}

impl DemoCapture {
    /// Run the demo (`step`, echoed) into the capture, then wait for the
    /// capture to save (it stops when the demo disconnects). A capture that
    /// ends first (a protocol it does not speak) would leave the demo
    /// waiting at its exit for ever: the demo is then stopped.
    pub(crate) fn run(mut self, step: &str, demo: &mut Command) -> Result<()> {
        eprintln!("xtask: {step}");
        let mut demo = demo
            .spawn()
            .with_context(|| format!("could not start {step}"))?;
        let mut capture_ended: Option<Instant> = None;
        let status = loop {
            if let Some(status) = demo.try_wait()? {
                break status;
            }
            if capture_ended.is_none() && self.child.try_wait()?.is_some() {
                capture_ended = Some(Instant::now());
            }
            if capture_ended.is_some_and(|at| at.elapsed() > Duration::from_secs(10)) {
                demo.kill()?;
                demo.wait()?;
                bail!(
                    "the capture ended before the demo did, which then waits for ever: see {}",
                    self.log.display()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while status.success() && Instant::now() < deadline {
            if self.child.try_wait()?.is_some() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if self.child.try_wait()?.is_none() {
            self.child.kill()?;
            self.child.wait()?;
        }
        ensure!(status.success(), "{step} failed ({status})");
        ensure!(
            std::fs::metadata(&self.file).is_ok_and(|m| m.len() > 0),
            "the capture wrote no {}: see {}",
            self.file.display(),
            self.log.display()
        );
        eprintln!(
            "xtask: Tracy capture written to {} (open it in Tracy's profiler, 0.11 or later)",
            self.file.display()
        );
        Ok(())
    }
}

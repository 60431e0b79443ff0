//! Tracy GPU zones: the trace crate's zones writer under each Tracy client
//! version it takes, and `ci/tracy-check` against a real Tracy server,
//! PyPI `iree-base-runtime`'s `iree-tracy-capture` (Tracy 0.11, protocol
//! 66), installed into a virtual environment under the target folder.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result};

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
/// check against the real server.
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
    let dir = target_dir().join("tracy-check");
    run(
        "cargo clippy (ci/tracy-check)",
        cargo()
            .args(["clippy", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&dir)
            .args(["--", "-D", "warnings"]),
    )?;
    let file = dir.join("capture.tracy");
    run(
        "Tracy GPU zones against iree-tracy-capture (tracy-client 0.17.1, protocol 66)",
        cargo()
            .args(["run", "--quiet", "--manifest-path"])
            .arg(&manifest)
            .arg("--target-dir")
            .arg(&dir)
            .arg("--")
            .arg(&capture)
            .arg(&file),
    )
}

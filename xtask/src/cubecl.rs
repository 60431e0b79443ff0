//! `cargo xtask cubecl`: the proof that device-events drops into CubeCL's
//! own backends. The published `cubecl-cuda`, `cubecl-hip` and
//! `cubecl-wgpu` sources are fetched through cargo, `ci/cubecl/*.patch`
//! swaps their `device_events` (wgpu: its timestamps' placement) for ours,
//! and each is checked as a CubeCL user builds it. Then CubeCL kernels run
//! through cubecl-wgpu on lavapipe, patched and not, each window's placed
//! ends held against lavapipe's exact clock (`ci/cubecl/wgpu-check`).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, root, run};

/// The CubeCL release the patches are written against.
pub(crate) const VERSION: &str = "0.12.0-pre.1";
/// The patched crates, each with its patch under `ci/cubecl/`.
const CRATES: [&str; 3] = ["cubecl-cuda", "cubecl-hip", "cubecl-wgpu"];
/// The program that runs CubeCL kernels through cubecl-wgpu on lavapipe.
const WGPU_CHECK: &str = "wgpu-check";
/// The crates the patched ones take from this workspace.
const OURS: [&str; 4] = [
    "device-events-core",
    "device-events-cuda",
    "device-events-hip",
    "device-events-cubecl",
];

pub(crate) fn cubecl() -> Result<()> {
    let (dir, target) = patched()?;
    // Their build scripts download LLVM unless told it is a docs build.
    let check = |name: &str, cuda_version: Option<&str>| -> Result<()> {
        let mut cmd = cargo();
        cmd.current_dir(&dir)
            .args(["check", "--package", name])
            .env("DOCS_RS", "1")
            .env("CARGO_TARGET_DIR", &target);
        match cuda_version {
            Some(version) => cmd.env("CUDARC_CUDA_VERSION", version),
            // As a CubeCL user builds: the level from the build system.
            None => cmd.env_remove("CUDARC_CUDA_VERSION"),
        };
        let level = cuda_version.map_or_else(String::new, |v| format!(", CUDARC_CUDA_VERSION={v}"));
        run(&format!("cargo check {name} (patched{level})"), &mut cmd)
    };
    check("cubecl-cuda", None)?;
    check("cubecl-cuda", Some("13000"))?;
    check("cubecl-hip", None)?;
    check("cubecl-wgpu", None)?;
    eprintln!("xtask: CubeCL {VERSION}'s CUDA, HIP and wgpu backends build on device-events");
    let compared = wgpu_comparison_in(&dir, &target)?;
    eprintln!("xtask: cubecl-wgpu on lavapipe, placement against the exact clock: {compared}");
    Ok(())
}

/// CubeCL kernels through cubecl-wgpu on lavapipe, unpatched and patched:
/// what `ci/cubecl/wgpu-check` measured of each (its last line, JSON).
pub(crate) fn wgpu_comparison() -> Result<Value> {
    let (dir, target) = patched()?;
    wgpu_comparison_in(&dir, &target)
}

/// [`wgpu_comparison`], the patched crates already in `patched_dir`.
fn wgpu_comparison_in(patched_dir: &Path, target: &Path) -> Result<Value> {
    crate::ensure_lavapipe()?;
    let unpatched_dir = std::env::temp_dir().join("device-events-cubecl-unpatched");
    let _ = std::fs::remove_dir_all(&unpatched_dir);
    std::fs::create_dir_all(&unpatched_dir)?;
    copy_dir(
        &root().join("ci/cubecl").join(WGPU_CHECK),
        &unpatched_dir.join(WGPU_CHECK),
    )?;
    std::fs::write(
        unpatched_dir.join("Cargo.toml"),
        format!(
            "# Written by `cargo xtask cubecl`.\n[workspace]\nmembers = [\"{WGPU_CHECK}\"]\nresolver = \"2\"\n"
        ),
    )?;
    let mut out = serde_json::Map::new();
    for (key, dir) in [
        ("unpatched", unpatched_dir.as_path()),
        ("patched", patched_dir),
    ] {
        eprintln!(
            "xtask: CubeCL kernels through cubecl-wgpu ({key}) on lavapipe: building and running {WGPU_CHECK}"
        );
        let output = crate::on_lavapipe(
            cargo()
                .current_dir(dir)
                .args(["run", "--quiet", "--package", WGPU_CHECK, "--", "300"])
                .env("DOCS_RS", "1")
                .env("CARGO_TARGET_DIR", target),
        )?
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {WGPU_CHECK} ({key})"))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        for line in stdout.lines().filter(|l| l.starts_with("wgpu-check:")) {
            eprintln!("xtask: {line}");
        }
        if !output.status.success() {
            bail!("{WGPU_CHECK} ({key}) failed ({}): {stdout}", output.status);
        }
        let last = stdout.lines().last().unwrap_or_default();
        let figures: Value = serde_json::from_str(last)
            .with_context(|| format!("{WGPU_CHECK}'s last line: {last}"))?;
        out.insert(key.into(), figures);
    }
    Ok(Value::Object(out))
}

/// The patched crates in a workspace of their own, with `wgpu-check`, and
/// the target folder they build in.
fn patched() -> Result<(PathBuf, PathBuf)> {
    // Outside the repository, so that its `.cargo/config.toml` (which sets
    // the workspace's CUDA bindings level) is not in force, as for a user.
    let dir = std::env::temp_dir().join("device-events-cubecl-check");
    let target = root().join("target/cubecl-check");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let sources = fetch(&dir)?;
    for (name, source) in CRATES.iter().zip(&sources) {
        let copy = dir.join(name);
        copy_dir(source, &copy)?;
        let patch = root().join("ci/cubecl").join(format!("{name}.patch"));
        run(
            &format!("patch {name} {VERSION} with {}", patch.display()),
            Command::new("git")
                .arg("-C")
                .arg(&copy)
                .arg("apply")
                .arg(&patch),
        )?;
        let (added, removed) = size(&patch)?;
        eprintln!("xtask: {name}: the patch adds {added} lines and removes {removed}");
    }
    copy_dir(
        &root().join("ci/cubecl").join(WGPU_CHECK),
        &dir.join(WGPU_CHECK),
    )?;
    let mut manifest = format!(
        "# Written by `cargo xtask cubecl`.\n[workspace]\nmembers = [{}, \"{WGPU_CHECK}\"]\nresolver = \"2\"\n\n[patch.crates-io]\n",
        CRATES.map(|c| format!("\"{c}\"")).join(", ")
    );
    // wgpu-check takes the patched cubecl-wgpu.
    manifest.push_str("cubecl-wgpu = { path = \"cubecl-wgpu\" }\n");
    for ours in OURS {
        let path = root().join("crates").join(ours);
        manifest.push_str(&format!(
            "{ours} = {{ path = {:?} }}\n",
            path.display().to_string()
        ));
    }
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
    Ok((dir, target))
}

/// The published sources of [`CRATES`], downloaded by cargo: their folders
/// in cargo's registry.
fn fetch(dir: &Path) -> Result<Vec<PathBuf>> {
    let fetch = dir.join("fetch");
    std::fs::create_dir_all(fetch.join("src"))?;
    std::fs::write(fetch.join("src/lib.rs"), "")?;
    let mut manifest = String::from(
        "[package]\nname = \"fetch\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n[workspace]\n\n[dependencies]\n",
    );
    for name in CRATES {
        manifest.push_str(&format!("{name} = \"={VERSION}\"\n"));
    }
    std::fs::write(fetch.join("Cargo.toml"), manifest)?;
    eprintln!("xtask: fetch {} {VERSION}", CRATES.join(", "));
    let output = cargo()
        .current_dir(&fetch)
        .args(["metadata", "--format-version", "1"])
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: Value = serde_json::from_slice(&output.stdout)?;
    CRATES
        .iter()
        .map(|name| {
            metadata["packages"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|p| p["name"] == *name && p["version"] == VERSION)
                .and_then(|p| p["manifest_path"].as_str())
                .and_then(|m| Path::new(m).parent().map(Path::to_path_buf))
                .with_context(|| format!("{name} {VERSION} not in cargo's metadata"))
        })
        .collect()
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// Lines the patch adds and removes, its headers left out.
fn size(patch: &Path) -> Result<(usize, usize)> {
    let text = std::fs::read_to_string(patch)?;
    let added = text
        .lines()
        .filter(|l| l.starts_with('+') && !l.starts_with("+++"))
        .count();
    let removed = text
        .lines()
        .filter(|l| l.starts_with('-') && !l.starts_with("---"))
        .count();
    Ok((added, removed))
}

//! `cargo xtask cubecl`: the proof that device-events drops into CubeCL's
//! own backends. The published `cubecl-cuda` and `cubecl-hip` sources are
//! fetched through cargo, `ci/cubecl/*.patch` swaps their `device_events`
//! for ours, and both are checked as a CubeCL user builds them.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, root, run};

/// The CubeCL release the patches are written against.
const VERSION: &str = "0.12.0-pre.1";
/// The patched crates, each with its patch under `ci/cubecl/`.
const CRATES: [&str; 2] = ["cubecl-cuda", "cubecl-hip"];
/// The crates the patched ones take from this workspace.
const OURS: [&str; 4] = [
    "device-events-core",
    "device-events-cuda",
    "device-events-hip",
    "device-events-cubecl",
];

pub(crate) fn cubecl() -> Result<()> {
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
    let mut manifest = format!(
        "# Written by `cargo xtask cubecl`.\n[workspace]\nmembers = [{}]\nresolver = \"2\"\n\n[patch.crates-io]\n",
        CRATES.map(|c| format!("\"{c}\"")).join(", ")
    );
    for ours in OURS {
        let path = root().join("crates").join(ours);
        manifest.push_str(&format!(
            "{ours} = {{ path = {:?} }}\n",
            path.display().to_string()
        ));
    }
    std::fs::write(dir.join("Cargo.toml"), manifest)?;
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
    eprintln!("xtask: CubeCL {VERSION}'s CUDA and HIP backends build on device-events");
    Ok(())
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

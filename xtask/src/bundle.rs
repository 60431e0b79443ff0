//! `cargo xtask bundle-cuda` / `bundle-hip`: a backend's test binaries, the
//! software driver, and for CUDA the bench's probe and the spin kernel (its
//! PTX, and an `sm_90` cubin where a PTX assembler is at hand), with a
//! `run.sh` (`bundle_run.sh`) that runs them on a machine with a GPU and
//! no Rust toolchain and no network, every step bounded and written into
//! `$OUT` as it ends.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::{
    Backend, CUDA, SERVER_CHECKS, SOFT_LIB, built_file, cargo, cargo_build, lay_out_soft_driver,
    root, soft_driver,
};

/// The spin kernel's PTX, which the probe and the CUDA tests embed.
const SPIN_PTX: &str = "crates/device-events-bench/src/spin.ptx";

/// The architecture of the cubin shipped beside the PTX: the H100's and
/// the H200's.
const CUBIN_ARCH: &str = "sm_90";

/// PyPI's wheel that carries NVIDIA's PTX assembler (`ptxas`), the one
/// file of it the kit needs.
const PTXAS_WHEEL: &str = "nvidia-cuda-nvcc-cu12";
const PTXAS_IN_WHEEL: &str = "nvidia/cuda_nvcc/bin/ptxas";

/// CubeCL's server checks, in the kit: `run.sh` runs their tests of its
/// backend alone.
const SERVER_BINARY: &str = "cubecl_server";

/// A lease carries 64 MiB.
const LIMIT: u64 = 64 * 1024 * 1024;

/// Build `backend`'s kit into `target/bundle-<name>`.
pub(crate) fn bundle(backend: Backend) -> Result<PathBuf> {
    let name = backend.name;
    let dir = root().join("target").join(format!("bundle-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin"))?;
    let binaries = test_binaries(backend, &dir.join("bin"))?;
    let cuda = backend.name == CUDA.name;
    let cubin = if cuda {
        probe(&dir.join("probe"))?;
        Some(spin_kernel(&dir.join("spin"))?)
    } else {
        None
    };
    compress(&dir)?;
    let soft = soft_driver()?;
    lay_out_soft_driver(
        &soft.join("lib").join(SOFT_LIB),
        &dir.join("soft").join("lib"),
    )?;
    let script = dir.join("run.sh");
    std::fs::write(&script, run_script(backend))?;
    let mut permissions = std::fs::metadata(&script)?.permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&script, permissions)?;
    let size = folder_size(&dir)?;
    let spin = match &cubin {
        Some(Ok(_)) => format!(", the spin kernel as PTX and an {CUBIN_ARCH} cubin"),
        Some(Err(why)) => format!(", the spin kernel as PTX only ({why})"),
        None => String::new(),
    };
    eprintln!(
        "xtask: {} ({:.1} MiB): {} test binaries{spin}; run `bash {}/run.sh` (real driver) \
         or `run.sh --soft`, with OUT=<folder> for its results",
        dir.display(),
        size as f64 / (1024.0 * 1024.0),
        binaries.len(),
        dir.display()
    );
    if size > LIMIT {
        bail!("the bundle is over 64 MiB");
    }
    Ok(dir)
}

/// Build `backend`'s test binaries (release, stripped), and CubeCL's
/// server checks as `cubecl_server` (its `run.sh` runs their `<backend>::`
/// tests), and copy them into `bin`; their names.
fn test_binaries(backend: Backend, bin: &Path) -> Result<Vec<String>> {
    let name = backend.name;
    let (server_package, server_test) = SERVER_CHECKS;
    let mut binaries = Vec::new();
    for (targets, rename) in [
        (vec!["--package", backend.package], None),
        (
            vec!["--package", server_package, "--test", server_test],
            Some(SERVER_BINARY),
        ),
    ] {
        eprintln!(
            "xtask: build the {name} test binaries ({})",
            targets.join(" ")
        );
        let output = cargo()
            .args(["test", "--release", "--no-run", "--message-format=json"])
            .args(targets)
            // A lease carries 64 MiB, and each binary links the same crates:
            // stripped, they fit with room (a failure still names its test
            // and says why; its backtrace has no names).
            .env("CARGO_PROFILE_RELEASE_STRIP", "symbols")
            .output()
            .context("could not start cargo")?;
        if !output.status.success() {
            bail!(
                "building the {name} tests failed:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        for line in String::from_utf8_lossy(&output.stdout).lines() {
            let Ok(message) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            let is_test = message["profile"]["test"].as_bool() == Some(true);
            if let (true, Some(exe)) = (is_test, message["executable"].as_str()) {
                let target =
                    rename.unwrap_or(message["target"]["name"].as_str().unwrap_or("tests"));
                std::fs::copy(exe, bin.join(target)).with_context(|| format!("copying {exe}"))?;
                binaries.push(target.to_owned());
            }
        }
    }
    if binaries.len() < 2 || !binaries.iter().any(|b| b == SERVER_BINARY) {
        bail!("the {name} test binaries or the server checks were not built");
    }
    Ok(binaries)
}

/// The bench's probe, stripped, into `dir`.
fn probe(dir: &Path) -> Result<()> {
    let built = cargo_build(
        "build the bench's probe",
        cargo()
            .args([
                "build",
                "--release",
                "--package",
                "device-events-bench",
                "--bin",
                PROBE,
            ])
            .env("CARGO_PROFILE_RELEASE_STRIP", "symbols"),
    )?;
    let probe = built_file(&built, PROBE, |name| name == PROBE)?;
    std::fs::create_dir_all(dir)?;
    std::fs::copy(&probe, dir.join(PROBE))
        .with_context(|| format!("copying {}", probe.display()))?;
    Ok(())
}

const PROBE: &str = "bench-probe";

/// The spin kernel into `dir`: its PTX, and its cubin for [`CUBIN_ARCH`]
/// (which a driver loads without its JIT) where a PTX assembler is found;
/// `Err` says why there is none, and the kit goes on with the PTX.
fn spin_kernel(dir: &Path) -> Result<std::result::Result<PathBuf, String>> {
    std::fs::create_dir_all(dir)?;
    let ptx = dir.join("spin.ptx");
    std::fs::copy(root().join(SPIN_PTX), &ptx)?;
    let cubin = dir.join(format!("spin.{CUBIN_ARCH}.cubin"));
    let built = ptxas().and_then(|ptxas| {
        eprintln!(
            "xtask: assemble the spin kernel for {CUBIN_ARCH} ({})",
            ptxas.display()
        );
        let output = Command::new(&ptxas)
            .arg(format!("-arch={CUBIN_ARCH}"))
            .arg(&ptx)
            .arg("-o")
            .arg(&cubin)
            .output()
            .map_err(|e| format!("could not start {}: {e}", ptxas.display()))?;
        if output.status.success() {
            Ok(cubin.clone())
        } else {
            Err(format!(
                "ptxas failed: {}",
                String::from_utf8_lossy(&output.stderr).trim()
            ))
        }
    });
    if let Err(why) = &built {
        let _ = std::fs::remove_file(&cubin);
        eprintln!("xtask: no {CUBIN_ARCH} cubin ({why}): the kit carries the PTX alone");
    }
    Ok(built)
}

/// NVIDIA's PTX assembler: `PTXAS`, else `ptxas` on the `PATH`, else the
/// one from PyPI's [`PTXAS_WHEEL`], fetched once with `pip download` into
/// `target/ptxas`.
fn ptxas() -> std::result::Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("PTXAS") {
        return Ok(PathBuf::from(path));
    }
    let runs = |p: &Path| {
        Command::new(p)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if runs(Path::new("ptxas")) {
        return Ok(PathBuf::from("ptxas"));
    }
    let cache = root().join("target").join("ptxas");
    let kept = cache.join("ptxas");
    if runs(&kept) {
        return Ok(kept);
    }
    let wheels = cache.join("wheel");
    let _ = std::fs::remove_dir_all(&wheels);
    eprintln!("xtask: fetch {PTXAS_WHEEL} from PyPI for its ptxas (once)");
    let fetched = Command::new("python3")
        .args(["-m", "pip", "download", "--no-deps", "--quiet", "--dest"])
        .arg(&wheels)
        .arg(PTXAS_WHEEL)
        .status()
        .map_err(|e| format!("python3 could not start: {e}"))?;
    if !fetched.success() {
        return Err(format!("pip download {PTXAS_WHEEL} failed ({fetched})"));
    }
    let wheel = std::fs::read_dir(&wheels)
        .map_err(|e| e.to_string())?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or_else(|| format!("pip left no wheel of {PTXAS_WHEEL}"))?;
    // One member of the wheel (a zip), with Python's own zipfile.
    let unpacked = Command::new("python3")
        .args([
            "-c",
            "import sys, zipfile; open(sys.argv[3], 'wb').write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))",
        ])
        .arg(&wheel)
        .arg(PTXAS_IN_WHEEL)
        .arg(&kept)
        .status()
        .map_err(|e| format!("python3 could not start: {e}"))?;
    let _ = std::fs::remove_dir_all(&wheels);
    if !unpacked.success() {
        return Err(format!("{} has no {PTXAS_IN_WHEEL}", wheel.display()));
    }
    let mut permissions = std::fs::metadata(&kept)
        .map_err(|e| e.to_string())?
        .permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&kept, permissions).map_err(|e| e.to_string())?;
    if runs(&kept) {
        Ok(kept)
    } else {
        Err(format!("{} does not run here", kept.display()))
    }
}

/// The binaries, compressed: a lease carries 64 MiB; `run.sh` unpacks them.
fn compress(dir: &Path) -> Result<()> {
    for sub in ["bin", "probe"] {
        let Ok(entries) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            let status = Command::new("gzip")
                .args(["-9", "-n"])
                .arg(&path)
                .status()
                .context("could not start gzip")?;
            if !status.success() {
                bail!("gzip {} failed", path.display());
            }
        }
    }
    Ok(())
}

fn folder_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let meta = entry.path().symlink_metadata()?;
        total += if meta.is_dir() {
            folder_size(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

/// `run.sh` for `backend`: `bundle_run.sh` with the backend's name and the
/// driver library its preflight looks for.
pub(crate) fn run_script(backend: Backend) -> String {
    let (library, folders) = if backend.name == CUDA.name {
        (
            "libcuda.so.1",
            "/usr/local/nvidia/lib64 /usr/local/nvidia/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib/wsl/lib",
        )
    } else {
        (
            "libamdhip64.so",
            "${ROCM_PATH:-/opt/rocm}/lib /opt/rocm/lib /usr/lib/x86_64-linux-gnu",
        )
    };
    include_str!("bundle_run.sh")
        .replace("@NAME@", backend.name)
        .replace("@DRIVER@", backend.driver)
        .replace("@LIBRARY@", library)
        .replace("@FOLDERS@", folders)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HIP;

    /// Each kit's `run.sh` has every placeholder filled and is a script
    /// bash reads.
    #[test]
    fn each_run_script_is_filled_in_and_parses() {
        for backend in [CUDA, HIP] {
            let script = run_script(backend);
            for placeholder in ["@NAME@", "@DRIVER@", "@LIBRARY@", "@FOLDERS@"] {
                assert!(!script.contains(placeholder), "{placeholder} is left");
            }
            let mut bash = Command::new("bash")
                .arg("-n")
                .stdin(std::process::Stdio::piped())
                .spawn()
                .expect("bash runs");
            std::io::Write::write_all(
                &mut bash.stdin.take().expect("its input"),
                script.as_bytes(),
            )
            .expect("the script is written");
            assert!(
                bash.wait().expect("bash ends").success(),
                "{}",
                backend.name
            );
        }
    }
}

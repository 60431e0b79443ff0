//! How a test binary starts under a plain `cargo test`: on the software
//! driver, which it builds and finds itself, or, for a suite that needs a
//! runtime installed on the machine (PoCL), not at all, in one line that
//! names the command that runs it.
//!
//! The bindings (cudarc's, the HIP backend's search, CubeCL's) open the
//! driver by name, and the dynamic loader reads `LD_LIBRARY_PATH` once, as
//! the process starts. So a test binary started without the software
//! driver builds it, lays it out as `cargo xtask` does, and starts itself
//! again under it, before any test runs. Under `cargo xtask`, which sets
//! the variables itself, nothing happens.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::soft::{LIB_VAR, REAL_VAR};

/// Set on a child process that a test starts without the driver on
/// purpose (`run_without_driver`): it runs as it was started, never
/// restarted under the software driver.
pub const AS_STARTED_VAR: &str = "DEVICE_EVENTS_AS_STARTED";

/// Set by `cargo xtask test` and `test-opencl`: the suites that need a
/// runtime installed on the machine run, and fail loudly without it.
pub const INSTALLED_VAR: &str = "DEVICE_EVENTS_INSTALLED_RUNTIME";

/// The software driver's file, and the names the bindings look for (as
/// `cargo xtask` lays it out).
const SOFT_LIB: &str = "libdevice_events_soft_driver.so";
const SOFT_NAMES: [&str; 4] = [
    "libcuda.so",
    "libcuda.so.1",
    "libamdhip64.so",
    "libhiprtc.so",
];

/// Make this test binary's tests run on the software driver: expanded once
/// at the top of a test file, it runs
/// [`on_the_software_driver`](crate::start::on_the_software_driver) as the
/// process starts.
#[macro_export]
macro_rules! tests_run_on_the_software_driver {
    () => {
        // SAFETY: `.init_array` holds `extern "C" fn()` pointers that the
        // loader calls once before `main`; this one only reads the
        // environment, runs cargo, and may replace the process.
        #[cfg(target_os = "linux")]
        #[used]
        #[unsafe(link_section = ".init_array")]
        static START_ON_THE_SOFTWARE_DRIVER: extern "C" fn() = {
            extern "C" fn start() {
                $crate::start::on_the_software_driver();
            }
            start
        };
    };
}

/// Make this test binary run only when `cargo xtask` asks for it
/// ([`INSTALLED_VAR`](crate::start::INSTALLED_VAR)): under a plain `cargo test` it says in one line that
/// it needs `$runtime` and which command runs it, and exits having passed.
#[macro_export]
macro_rules! tests_need_an_installed_runtime {
    ($runtime:literal, $command:literal) => {
        // SAFETY: as in `tests_run_on_the_software_driver!`; this one only
        // reads the environment and may end the process.
        #[cfg(target_os = "linux")]
        #[used]
        #[unsafe(link_section = ".init_array")]
        static START_WITH_AN_INSTALLED_RUNTIME: extern "C" fn() = {
            extern "C" fn start() {
                $crate::start::unless_asked_for($runtime, $command);
            }
            start
        };
    };
}

/// Unless the loaders already point somewhere (`SOFT_DRIVER_LIB`, set by
/// `cargo xtask` and by a restart; `DEVICE_EVENTS_REAL_DRIVER`, the
/// machine's driver under test; [`AS_STARTED_VAR`]): build the software
/// driver, lay it out under `<target>/soft-driver/lib`, and start this
/// process again with the loaders pointed at it. Where that cannot be done
/// it says why in a line, and the tests that need the driver then fail.
pub fn on_the_software_driver() {
    if [LIB_VAR, REAL_VAR, AS_STARTED_VAR]
        .iter()
        .any(|var| std::env::var_os(var).is_some())
    {
        return;
    }
    let why = restart_under_the_software_driver();
    eprintln!(
        "device-events: could not start these tests on the software driver: {why}; \
         `cargo xtask test` runs them"
    );
}

/// Under a plain `cargo test`, one line and the end of the process;
/// nothing when [`INSTALLED_VAR`] is set.
pub fn unless_asked_for(runtime: &str, command: &str) {
    if std::env::var_os(INSTALLED_VAR).is_some() {
        return;
    }
    println!("skipped: these tests need {runtime}; `{command}` runs them");
    std::process::exit(0);
}

/// Returns only on failure, with why.
fn restart_under_the_software_driver() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    if !root.join("Cargo.toml").is_file() {
        return format!("the workspace it was built in ({}) is gone", root.display());
    }
    let soft = target_dir(&root).join("soft-driver");
    let lib = soft.join("lib");
    let quiet = lib.join(SOFT_LIB).is_file();
    let built = match built(build(&root, &soft.join("build"), quiet)) {
        Ok(built) => built,
        Err(why) => return why,
    };
    if let Err(err) = lay_out(&built, &lib) {
        return format!("laying it out in {}: {err}", lib.display());
    }
    let mut paths = vec![lib.clone()];
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        paths.extend(std::env::split_paths(&old));
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(err) => return format!("this test binary's path: {err}"),
    };
    let mut args = std::env::args_os();
    let arg0 = args.next().unwrap_or_else(|| exe.clone().into_os_string());
    let err = Command::new(&exe)
        .arg0(arg0)
        .args(args)
        .env(
            "LD_LIBRARY_PATH",
            std::env::join_paths(paths).unwrap_or_default(),
        )
        .env("ROCM_PATH", &soft)
        .env(LIB_VAR, lib.join(SOFT_LIB))
        .exec();
    format!("starting {} again: {err}", exe.display())
}

/// Where cargo builds, as `cargo xtask` reads it: `CARGO_TARGET_DIR`
/// (relative to the workspace), else `target/`.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| root.join("target"), |dir| root.join(dir))
}

/// A release build of the software driver, as `cargo xtask` makes (a debug
/// build's own cost per call would skew placements), in a target folder of
/// its own: the `cargo test` that started this process holds the lock on
/// its own. `quiet` when there is a build already, which cargo only
/// refreshes.
fn build(root: &Path, target: &Path, quiet: bool) -> Command {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root).args([
        "build",
        "--release",
        "--package",
        "device-events-soft-driver",
        "--message-format=json-render-diagnostics",
        "--target-dir",
    ]);
    cmd.arg(target);
    if quiet {
        cmd.arg("--quiet");
    } else {
        eprintln!(
            "device-events: building the software driver these tests run on, once, into {} \
             (cargo's progress follows)",
            target.display()
        );
    }
    cmd
}

/// Run `build`; the driver's file, as cargo names it among what it built
/// (with a target triple configured, `CARGO_BUILD_TARGET` or
/// `build.target`, it lands in `<target>/<triple>/release`).
fn built(mut build: Command) -> Result<PathBuf, String> {
    // Cargo's own output, progress included, goes to stderr, beside the
    // tests' own; its messages, to stdout, are read here.
    let output = match build.stderr(std::process::Stdio::inherit()).output() {
        Ok(output) if output.status.success() => output,
        Ok(output) => return Err(format!("building it failed ({})", output.status)),
        Err(err) => return Err(format!("could not run cargo to build it: {err}")),
    };
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(driver_in)
        .ok_or_else(|| "cargo built it but named no file of it".to_owned())
}

/// The driver's file, where cargo's JSON `message` names it.
fn driver_in(message: &str) -> Option<PathBuf> {
    let message: serde_json::Value = serde_json::from_str(message).ok()?;
    if message["reason"] != "compiler-artifact"
        || message["target"]["name"] != "device_events_soft_driver"
    {
        return None;
    }
    message["filenames"]
        .as_array()?
        .iter()
        .filter_map(serde_json::Value::as_str)
        .map(PathBuf::from)
        .find(|file| file.file_name().is_some_and(|name| name == SOFT_LIB))
}

/// Copy the driver into `lib` under its own name (a new file renamed into
/// place, so that a process that has the old one open keeps it whole), and
/// link the bindings' names to it.
fn lay_out(built: &Path, lib: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(lib)?;
    let dest = lib.join(SOFT_LIB);
    if !same_build(built, &dest) {
        let fresh = lib.join(format!(".{SOFT_LIB}.{}", std::process::id()));
        std::fs::copy(built, &fresh)?;
        std::fs::rename(&fresh, &dest)?;
    }
    for name in SOFT_NAMES {
        let link = lib.join(name);
        if std::fs::read_link(&link).is_ok_and(|to| to == Path::new(SOFT_LIB)) {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        match std::os::unix::fs::symlink(SOFT_LIB, &link) {
            // Another test binary, starting beside this one, linked it.
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            made => made?,
        }
    }
    Ok(())
}

/// Whether `dest` is a copy of `built` made since it was built.
fn same_build(built: &Path, dest: &Path) -> bool {
    let (Ok(built), Ok(dest)) = (std::fs::metadata(built), std::fs::metadata(dest)) else {
        return false;
    };
    let newer = match (built.modified(), dest.modified()) {
        (Ok(built), Ok(dest)) => dest >= built,
        _ => false,
    };
    built.len() == dest.len() && newer
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// The triple this toolchain builds for by default.
    fn host_triple() -> String {
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| OsString::from("rustc"));
        let version = Command::new(rustc).arg("-vV").output().unwrap().stdout;
        String::from_utf8(version)
            .unwrap()
            .lines()
            .find_map(|line| line.strip_prefix("host: "))
            .expect("rustc -vV names its host")
            .to_owned()
    }

    #[test]
    fn with_a_target_triple_configured_the_driver_is_found_where_cargo_built_it() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let soft = target_dir(&root).join("soft-driver");
        let triple = host_triple();
        let mut cmd = build(&root, &soft.join("build"), false);
        cmd.env("CARGO_BUILD_TARGET", &triple);
        let built = built(cmd).unwrap();
        assert!(built.is_file(), "{}", built.display());
        assert!(
            built
                .components()
                .any(|part| part.as_os_str() == triple.as_str()),
            "{} is not under {triple}",
            built.display()
        );
        let lib = soft.join("laid-out-for-a-triple").join("lib");
        lay_out(&built, &lib).unwrap();
        assert!(lib.join("libcuda.so").is_file());
    }
}

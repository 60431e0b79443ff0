//! Project tasks; run `cargo xtask --help`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{CommandFactory, Parser, Subcommand};

mod bench;
mod bundle;
mod ci;
mod cubecl;
mod docs;
mod layers;
mod snippets;
mod tracy;

#[derive(Parser)]
#[command(about = "device-events project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Everything CI checks: formatting, the docs' generated figures and
    /// links, clippy, the workflows and packages, every test (the CUDA and
    /// HIP backends on the software driver, HIP also on AMD's runtime
    /// without a GPU, OpenCL on PoCL, Vulkan on lavapipe, placement truth on
    /// both), and the API docs.
    Test,
    /// The CUDA backend's tests and conformance suite on the real driver.
    TestCuda {
        /// Run them on the software driver instead.
        #[arg(long)]
        soft: bool,
    },
    /// The HIP backend's tests and conformance suite on the real runtime.
    TestHip {
        /// Run them on the software driver instead.
        #[arg(long)]
        soft: bool,
    },
    /// The OpenCL backend's tests, conformance suite and placement truth on
    /// this machine's OpenCL platform (PoCL in CI).
    TestOpencl,
    /// Build the CUDA suite into `target/bundle-cuda`, to run with `run.sh` on a
    /// machine with an NVIDIA driver and no Rust toolchain.
    BundleCuda,
    /// Build the HIP suite into `target/bundle-hip`, likewise.
    BundleHip,
    /// The main job: a profiled two-stream pipeline on the best device found.
    Demo {
        /// How many processes run it, each writing its Perfetto file,
        /// merged by the `perfetto_manifest.json` written beside them.
        #[arg(long, default_value_t = 1)]
        processes: usize,
        /// Also stream every window to Tracy as a GPU zone, a context per
        /// stream, captured headless into `target/demo/demo.tracy`.
        #[arg(long)]
        tracy: bool,
    },
    /// Benchmarks: the core's own cost, the CUDA backend against cudarc's
    /// safe API on the software driver, scaling and placement; a table,
    /// `docs/bench.json`, and the docs' figures generated from it.
    Bench,
    /// The docs' figures, generated from `docs/bench.json`
    /// (`docs/measurements.md` and each `bench:` block), their links
    /// checked, and their snippets held to what CI compiles.
    Docs {
        /// Write nothing: fail where a generated part differs from the
        /// JSON, a link is broken, or a snippet is not compiled as written.
        #[arg(long)]
        check: bool,
    },
    /// CubeCL's published CUDA, HIP and wgpu backends, patched to take
    /// device-events (`ci/cubecl/`), checked as CubeCL builds them; then on
    /// lavapipe, cubecl-wgpu published and patched: CubeCL's profiling tests
    /// and its `tests/` compared test by test, and `wgpu-check` (release).
    Cubecl,
    /// The workspace's imports: no circle in any crate, and no file of the
    /// core importing from a folder above its own; `--verbose` prints each
    /// crate's floors.
    Layers {
        /// Print each crate's files floor by floor.
        #[arg(long)]
        verbose: bool,
    },
}

/// A backend: its crate, and how to find its real driver.
#[derive(Clone, Copy)]
struct Backend {
    name: &'static str,
    /// What the real driver is called, in a sentence.
    driver: &'static str,
    package: &'static str,
    /// Library names the bindings try, in order.
    libraries: &'static [&'static str],
    /// Variables naming a root whose `lib/` the bindings search first.
    roots: &'static [&'static str],
}

const CUDA: Backend = Backend {
    name: "cuda",
    driver: "CUDA driver",
    package: "device-events-cuda",
    libraries: &["libcuda.so", "libcuda.so.1"],
    roots: &[],
};

/// The HIP runtime is found by the crate's own search (its `probe`
/// example), which also tells a runtime without a GPU from none.
const HIP: Backend = Backend {
    name: "hip",
    driver: "HIP runtime (ROCm)",
    package: "device-events-hip",
    libraries: &[],
    roots: &[],
};

fn main() {
    let cli = Cli::parse();
    let outcome = match cli.task {
        Task::Test => test(),
        Task::TestCuda { soft } => test_backend(CUDA, soft),
        Task::TestHip { soft } => test_backend(HIP, soft),
        Task::TestOpencl => test_opencl(),
        Task::BundleCuda => bundle(CUDA).map(drop),
        Task::BundleHip => bundle(HIP).map(drop),
        Task::Demo { processes, tracy } => demo(processes, tracy),
        Task::Bench => bench::bench(),
        Task::Docs { check } => docs::docs(check),
        Task::Cubecl => cubecl::cubecl(),
        Task::Layers { verbose } => layers::layers(verbose),
    };
    if let Err(err) = outcome {
        eprintln!("xtask: {err:#}");
        std::process::exit(1);
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// Where cargo builds: `CARGO_TARGET_DIR` (relative to the workspace, as
/// cargo reads it when run there), else `target/`.
fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .filter(|dir| !dir.is_empty())
        .map_or_else(|| root().join("target"), |dir| root().join(dir))
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Run a step, echoing it and then how long it took; stop at the first
/// failure.
fn run(step: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: {step}");
    let began = std::time::Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("could not start {step}"))?;
    let took = began.elapsed().as_secs_f64();
    if !status.success() {
        bail!("{step} failed ({status}) after {took:.0} s");
    }
    eprintln!("xtask: {step}: done in {took:.0} s");
    Ok(())
}

fn test() -> Result<()> {
    run(
        "cargo fmt --check",
        cargo().args(["fmt", "--all", "--", "--check"]),
    )?;
    eprintln!("xtask: docs --check");
    docs::docs(true)?;
    run(
        "cargo clippy",
        cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    )?;
    layers::layers(false)?;
    let subcommands: Vec<String> = Cli::command()
        .get_subcommands()
        .map(|sub| sub.get_name().to_owned())
        .collect();
    ci::check(&subcommands)?;
    ensure_svg_renderer()?;
    ensure_debian_package("libamdhip64-5", "AMD's HIP runtime")?;
    ensure_pocl()?;
    ensure_lavapipe()?;
    let soft = soft_driver()?;
    let mut tests = cargo();
    tests.args(["test", "--workspace"]);
    for backend in [CUDA, HIP] {
        tests.args(["--exclude", backend.package]);
    }
    tests.args(["--exclude", OPENCL_PACKAGE, "--exclude", BENCH_PACKAGE]);
    tests.args(["--exclude", VULKAN_PACKAGE]);
    // The tools installed above are asked for: the demo's SVG test fails
    // without its renderer rather than skip.
    tests.env(INSTALLED_VAR, "1");
    run(
        "cargo test (everything but the backends)",
        soft_env(&mut tests, &soft),
    )?;
    // Its placement tests print what they measured (the fit against no
    // fit, every setting's error): shown, as CI's record of them.
    run(
        "placement truth on PoCL and lavapipe",
        soft_env(
            on_lavapipe(
                cargo()
                    .args(["test", "--package", BENCH_PACKAGE, "--", "--show-output"])
                    .env(INSTALLED_VAR, "1"),
            )?,
            &soft,
        ),
    )?;
    perfetto_checks(&soft)?;
    tracy::tracy_checks()?;
    for backend in [CUDA, HIP] {
        run_backend_tests(backend, Some(&soft))?;
    }
    hip_on_amds_runtime_without_a_gpu()?;
    opencl_tests()?;
    vulkan_tests()?;
    run(
        "cargo doc",
        cargo()
            .args(["doc", "--workspace", "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    Ok(())
}

/// The demo's test renders its SVG with `rsvg-convert`, from Debian's
/// `librsvg2-bin`.
fn ensure_svg_renderer() -> Result<()> {
    ensure_debian_tool("rsvg-convert", "librsvg2-bin")
}

/// Install Debian's `package` when `tool --version` does not run.
fn ensure_debian_tool(tool: &str, package: &str) -> Result<()> {
    let found = Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if found {
        return Ok(());
    }
    apt_install(package, tool)
}

/// Install Debian's `package` (`what`, in words) unless it is installed.
fn ensure_debian_package(package: &str, what: &str) -> Result<()> {
    let installed = Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|o| o.stdout.ends_with(b"install ok installed"));
    if installed {
        return Ok(());
    }
    apt_install(package, what)
}

fn apt_install(package: &str, what: &str) -> Result<()> {
    run(
        "apt-get update",
        Command::new("apt-get").args(["update", "-qq"]),
    )?;
    run(
        &format!("install {package} ({what})"),
        Command::new("apt-get")
            .args(["install", "-y", "-qq", package])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

const OPENCL_PACKAGE: &str = "device-events-opencl";
const VULKAN_PACKAGE: &str = "device-events-vulkan";

/// Mesa's lavapipe, a real Vulkan driver on the CPU whose timestamps are
/// the host's `CLOCK_MONOTONIC`, and the Vulkan loader.
pub(crate) fn ensure_lavapipe() -> Result<()> {
    ensure_debian_package("libvulkan1", "the Vulkan loader")?;
    ensure_debian_package(
        "mesa-vulkan-drivers",
        "Mesa's Vulkan drivers, lavapipe among them",
    )
}

/// Point `command`'s Vulkan loader at lavapipe alone, by its driver
/// manifest: the Vulkan checks' truth is its clock.
pub(crate) fn on_lavapipe(command: &mut Command) -> Result<&mut Command> {
    let dir = Path::new("/usr/share/vulkan/icd.d");
    let manifest = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .find(|path| {
            path.file_name()
                .is_some_and(|name| name.to_string_lossy().starts_with("lvp_icd"))
        })
        .with_context(|| format!("no lavapipe manifest (lvp_icd*.json) in {}", dir.display()))?;
    Ok(command
        .env("VK_DRIVER_FILES", &manifest)
        .env("VK_ICD_FILENAMES", &manifest))
}

/// The Vulkan backend's checks on lavapipe alone, one at a time (its
/// device is the CPU they would otherwise share); a missing driver fails.
fn vulkan_tests() -> Result<()> {
    run(
        "vulkan tests on lavapipe",
        on_lavapipe(
            cargo()
                .args([
                    "test",
                    "--package",
                    VULKAN_PACKAGE,
                    "--",
                    "--test-threads=1",
                    "--show-output",
                ])
                .env(INSTALLED_VAR, "1"),
        )?,
    )
}

/// PoCL, a real OpenCL runtime with a CPU device, and the ICD loader.
pub(crate) fn ensure_pocl() -> Result<()> {
    ensure_debian_package("ocl-icd-libopencl1", "the OpenCL ICD loader")?;
    ensure_debian_package("pocl-opencl-icd", "PoCL, an OpenCL runtime on the CPU")
}

/// The OpenCL backend's suites, one test at a time: the device is the CPU
/// they would otherwise share.
fn opencl_tests() -> Result<()> {
    run(
        "opencl tests",
        cargo()
            .args([
                "test",
                "--package",
                OPENCL_PACKAGE,
                "--",
                "--test-threads=1",
            ])
            .env(INSTALLED_VAR, "1"),
    )
}

/// Asks the suites that need a runtime installed on the machine (PoCL) to
/// run, and to fail without it; under a plain `cargo test` they say in a
/// line which command runs them (the conformance crate's `start`).
const INSTALLED_VAR: &str = "DEVICE_EVENTS_INSTALLED_RUNTIME";

/// The OpenCL devices here, as the backend's `devices` example lists them in
/// a line; `None` without one.
fn probe_opencl() -> Result<Option<String>> {
    let output = cargo()
        .args([
            "run",
            "--quiet",
            "--package",
            OPENCL_PACKAGE,
            "--example",
            "devices",
        ])
        .output()
        .context("could not start the OpenCL probe")?;
    let line = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    Ok(output.status.success().then_some(line))
}

/// `cargo xtask test-opencl`: the platform found, in a line, then the
/// suites and the placement truth; one line and a failure without one.
fn test_opencl() -> Result<()> {
    let Some(line) = probe_opencl()? else {
        bail!(
            "no OpenCL platform with a device found: install one \
             (on Debian, pocl-opencl-icd), or run cargo xtask test"
        );
    };
    eprintln!("xtask: {line}");
    opencl_tests()?;
    run(
        "placement truth on OpenCL",
        cargo()
            .args([
                "test",
                "--package",
                BENCH_PACKAGE,
                "--test",
                "pocl_placement",
            ])
            .env(INSTALLED_VAR, "1"),
    )
}

/// The bench crate, whose tests are the placement truth on PoCL.
const BENCH_PACKAGE: &str = "device-events-bench";

/// Variables that point the HIP backend's search somewhere: cleared to
/// run it against what is installed.
const HIP_SEARCH_VARS: [&str; 4] = [
    "ROCM_PATH",
    "HIP_PATH",
    "DEVICE_EVENTS_HIP_RUNTIME",
    "LD_LIBRARY_PATH",
];

/// What the HIP backend finds here, as its `probe` example says in one
/// line: `Ok` with a device, else the line.
fn probe_hip() -> Result<std::result::Result<String, String>> {
    let mut cmd = cargo();
    cmd.args([
        "run",
        "--quiet",
        "--package",
        "device-events-hip",
        "--example",
        "probe",
    ]);
    let output = cmd.output().context("could not start the HIP probe")?;
    let line = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    match output.status.code() {
        Some(0) => Ok(Ok(line)),
        Some(1 | 2) => Ok(Err(line)),
        _ => bail!(
            "the HIP probe failed ({}):\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ),
    }
}

/// The HIP backend against AMD's real runtime, which CI has and no GPU:
/// found, versioned, and every way in a clean no-device error.
fn hip_on_amds_runtime_without_a_gpu() -> Result<()> {
    let mut cmd = cargo();
    cmd.args([
        "test",
        "--package",
        "device-events-hip",
        "--test",
        "no_device",
        "--",
        "--ignored",
    ]);
    for var in HIP_SEARCH_VARS {
        cmd.env_remove(var);
    }
    run("hip tests on AMD's runtime, no GPU", &mut cmd)
}

/// The software driver's file, and the names the bindings look for.
const SOFT_LIB: &str = "libdevice_events_soft_driver.so";
const SOFT_NAMES: [&str; 4] = [
    "libcuda.so",
    "libcuda.so.1",
    "libamdhip64.so",
    "libhiprtc.so",
];

/// Build the software driver and lay it out under `target/soft-driver/lib`
/// with the names the bindings search for. Returns `target/soft-driver`.
///
/// Always a release build: a driver's own cost per call is part of every
/// bracket the anchor takes, and a debug build's skews placements by
/// microseconds.
fn soft_driver() -> Result<PathBuf> {
    let built = cargo_build(
        "build the software driver",
        cargo().args(["build", "--release", "--package", SOFT_PACKAGE]),
    )?;
    lay_out_built_soft_driver(&built)
}

const SOFT_PACKAGE: &str = "device-events-soft-driver";
/// The software driver's library target, as cargo names it.
const SOFT_TARGET: &str = "device_events_soft_driver";

/// Lay the software driver that `built` holds out under
/// `target/soft-driver/lib`; returns `target/soft-driver`.
fn lay_out_built_soft_driver(built: &[Artifact]) -> Result<PathBuf> {
    let library = built_file(built, SOFT_TARGET, |file| file.ends_with(SOFT_LIB))?;
    let dir = target_dir().join("soft-driver");
    lay_out_soft_driver(&library, &dir.join("lib"))?;
    Ok(dir)
}

/// Copy the driver into `lib` under its own name, and link the bindings'
/// names to it. The copy is a new file renamed into place: a test binary
/// that has the old one mapped keeps it whole, where a copy onto it would
/// rewrite the code under the running process.
fn lay_out_soft_driver(built: &Path, lib: &Path) -> Result<()> {
    std::fs::create_dir_all(lib)?;
    let fresh = lib.join(format!(".{SOFT_LIB}.{}", std::process::id()));
    std::fs::copy(built, &fresh).with_context(|| format!("copying {}", built.display()))?;
    std::fs::rename(&fresh, lib.join(SOFT_LIB))
        .with_context(|| format!("renaming {} into place", fresh.display()))?;
    for name in SOFT_NAMES {
        let link = lib.join(name);
        if std::fs::read_link(&link).is_ok_and(|to| to == Path::new(SOFT_LIB)) {
            continue;
        }
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(SOFT_LIB, &link)
            .with_context(|| format!("linking {}", link.display()))?;
    }
    Ok(())
}

/// A file `cargo build` made, as its JSON messages name it.
#[derive(Debug)]
struct Artifact {
    /// The target's name (`device_events_soft_driver`, `bench-probe`).
    target: String,
    /// The files made: a library's, or a binary's executable.
    files: Vec<PathBuf>,
}

/// Run `build`, a `cargo build`, its progress and diagnostics shown as
/// usual; what it made, as cargo says in its `compiler-artifact` messages.
/// Read from cargo rather than guessed: with a target triple configured
/// (`CARGO_BUILD_TARGET`, `build.target`), a build lands in
/// `target/<triple>/release`, not `target/release`.
fn cargo_build(step: &str, build: &mut Command) -> Result<Vec<Artifact>> {
    eprintln!("xtask: {step}");
    let output = build
        .arg("--message-format=json-render-diagnostics")
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("could not start {step}"))?;
    if !output.status.success() {
        bail!("{step} failed ({})", output.status);
    }
    Ok(artifacts(&String::from_utf8_lossy(&output.stdout)))
}

/// The `compiler-artifact` messages among cargo's JSON `messages`.
fn artifacts(messages: &str) -> Vec<Artifact> {
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["reason"] == "compiler-artifact")
        .map(|message| {
            let mut files: Vec<PathBuf> = message["filenames"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|file| file.as_str().map(PathBuf::from))
                .collect();
            if let Some(exe) = message["executable"].as_str() {
                files.push(PathBuf::from(exe));
            }
            Artifact {
                target: message["target"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                files,
            }
        })
        .collect()
}

/// The file of `target` in `built` whose name `matches`.
fn built_file(built: &[Artifact], target: &str, matches: impl Fn(&str) -> bool) -> Result<PathBuf> {
    built
        .iter()
        .filter(|artifact| artifact.target == target)
        .flat_map(|artifact| &artifact.files)
        .find(|file| {
            file.file_name()
                .is_some_and(|name| matches(&name.to_string_lossy()))
        })
        .cloned()
        .with_context(|| format!("cargo named no file of {target} among what it built"))
}

/// Point the CUDA and HIP loaders, and the tests' control client, at the
/// software driver in `dir`.
fn soft_env<'a>(cmd: &'a mut Command, dir: &Path) -> &'a mut Command {
    let lib = dir.join("lib");
    let mut paths = vec![lib.clone()];
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        paths.extend(std::env::split_paths(&old));
    }
    cmd.env(
        "LD_LIBRARY_PATH",
        std::env::join_paths(paths).unwrap_or_default(),
    )
    .env("ROCM_PATH", dir)
    .env("SOFT_DRIVER_LIB", lib.join(SOFT_LIB))
}

/// Whether a real driver for `backend` can be loaded here: a library the
/// bindings would open, and not the software driver.
fn find_real_driver(backend: Backend) -> Option<String> {
    let mut candidates: Vec<PathBuf> = Vec::new();
    for var in backend.roots {
        if let Some(root) = std::env::var_os(var) {
            for name in backend.libraries {
                candidates.push(Path::new(&root).join("lib").join(name));
            }
        }
    }
    candidates.extend(backend.libraries.iter().map(PathBuf::from));
    for candidate in candidates {
        // SAFETY: loading a driver library runs its initialisers, which is
        // what the bindings do on first use anyway.
        let Ok(lib) = (unsafe { libloading::Library::new(&candidate) }) else {
            continue;
        };
        // SAFETY: only looked up, never called.
        let soft = unsafe { lib.get::<unsafe extern "C" fn()>(b"soft_driver_reset\0") }.is_ok();
        if !soft {
            return Some(candidate.display().to_string());
        }
    }
    None
}

fn test_backend(backend: Backend, soft: bool) -> Result<()> {
    let dir = if soft { Some(soft_driver()?) } else { None };
    run_backend_tests(backend, dir.as_deref())
}

/// The real driver `backend`'s suites would run on, in a line; the line
/// that says why there is none otherwise.
fn real_driver(backend: Backend) -> Result<std::result::Result<String, String>> {
    if backend.name == HIP.name {
        return probe_hip();
    }
    Ok(find_real_driver(backend).ok_or_else(|| {
        format!(
            "no {} found on this machine ({} not loadable)",
            backend.driver,
            backend.libraries.join(", ")
        )
    }))
}

/// `backend`'s tests, then CubeCL's server checks on it
/// ([`SERVER_CHECKS`]), on the software driver laid out in `soft`, or else
/// on the machine's real driver.
fn run_backend_tests(backend: Backend, soft: Option<&Path>) -> Result<()> {
    let name = backend.name;
    let filter = format!("{name}::");
    let suites = [
        (
            vec!["--package", backend.package],
            None,
            format!("{name} tests"),
        ),
        (
            vec!["--package", SERVER_CHECKS.0, "--test", SERVER_CHECKS.1],
            Some(filter.as_str()),
            format!("CubeCL's server checks on {name}"),
        ),
    ];
    let found = match soft {
        Some(_) => None,
        None => match real_driver(backend)? {
            Ok(found) => Some(found),
            Err(why) => {
                bail!("{why}: run `cargo xtask test-{name} --soft` to use the software driver")
            }
        },
    };
    if let Some(found) = &found {
        eprintln!("xtask: {name} driver: {found}");
    }
    for (package, filter, what) in suites {
        let mut cmd = cargo();
        cmd.arg("test").args(package).arg("--");
        cmd.args(filter);
        // Shown: what the placement checks measured, the fit against no fit.
        cmd.arg("--show-output");
        if let Some(dir) = soft {
            soft_env(&mut cmd, dir);
            run(&format!("{what} on the software driver"), &mut cmd)?;
        } else {
            cmd.env("DEVICE_EVENTS_REAL_DRIVER", "1");
            // One test at a time, as the kit runs them: on a real driver one
            // test's GLOBAL capture refuses another's allocations and module
            // loads in the same process.
            cmd.arg("--test-threads=1");
            run(&format!("{what} on the real driver"), &mut cmd)?;
        }
    }
    Ok(())
}

/// CubeCL's server checks, whose `cuda::` and `hip::` tests run with each
/// backend's (package, test).
pub(crate) const SERVER_CHECKS: (&str, &str) = ("device-events-cubecl", "server");

/// Build `backend`'s kit into `target/bundle-<name>` (`bundle.rs`).
fn bundle(backend: Backend) -> Result<PathBuf> {
    bundle::bundle(backend)
}

/// The main job, on the best device here: the real CUDA driver, else a
/// HIP runtime with a GPU, else an OpenCL device, else the software
/// driver. One release build makes everything it runs (the demo, which
/// also answers the probes, and the software driver), with cargo's
/// progress shown; each step says what it does.
fn demo(processes: usize, tracy: bool) -> Result<()> {
    anyhow::ensure!(
        !tracy || processes == 1,
        "--tracy streams one process: leave out --processes"
    );
    let started = std::time::Instant::now();
    eprintln!(
        "xtask: demo, step 1 of 3: build the demo and the software driver, once, in release \
         (the first time takes minutes, the README says how long; cargo's progress follows)"
    );
    let built = cargo_build(
        "cargo build --release (the demo and the software driver)",
        cargo()
            .args([
                "build",
                "--release",
                "--package",
                DEMO_PACKAGE,
                "--package",
                SOFT_PACKAGE,
            ])
            .args(if tracy {
                &["--features", "device-events-demo/tracy"][..]
            } else {
                &[]
            }),
    )?;
    let demo = built_file(&built, DEMO_PACKAGE, |name| name == DEMO_PACKAGE)?;
    eprintln!(
        "xtask: demo, step 2 of 3: look for a device: a CUDA driver, a HIP runtime with a GPU, \
         an OpenCL device, else the software driver"
    );
    let mut cmd = Command::new(&demo);
    let device = if let Some(found) = find_real_driver(CUDA) {
        eprintln!("xtask:   cuda: {found}");
        cmd.args(["--backend", "cuda"]);
        "the CUDA driver"
    } else {
        eprintln!(
            "xtask:   cuda: no CUDA driver ({} not loadable)",
            CUDA.libraries.join(", ")
        );
        if demo_probe(&demo, "hip")? {
            cmd.args(["--backend", "hip"]);
            "the HIP runtime"
        } else if demo_probe(&demo, "opencl")? {
            cmd.args(["--backend", "opencl"]);
            "the OpenCL device"
        } else {
            let dir = lay_out_built_soft_driver(&built)?;
            eprintln!(
                "xtask:   the software driver, laid out in {}",
                dir.display()
            );
            soft_env(&mut cmd, &dir);
            cmd.args(["--backend", "cuda", "--soft"]);
            "the software driver"
        }
    };
    let out = target_dir().join("demo");
    cmd.arg("--out").arg(&out);
    cmd.args(["--processes", &processes.to_string()]);
    let capture = tracy
        .then(|| tracy::demo_capture(&mut cmd, &out))
        .transpose()?;
    eprintln!("xtask: demo, step 3 of 3: the pipeline on {device}");
    let line: Vec<String> = std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|arg| arg.to_string_lossy().into_owned())
        .collect();
    match capture {
        Some(capture) => capture.run(&line.join(" "), &mut cmd)?,
        None => run(&line.join(" "), &mut cmd)?,
    }
    eprintln!(
        "xtask: demo done in {:.0} s: open {} in https://ui.perfetto.dev, and {} in a browser",
        started.elapsed().as_secs_f64(),
        out.join("process-0.pftrace").display(),
        out.join(if processes > 1 {
            "merged_timeline.svg"
        } else {
            "timeline.svg"
        })
        .display()
    );
    Ok(())
}

const DEMO_PACKAGE: &str = "device-events-demo";

/// Whether the demo can run on `backend` here, as the demo itself says in a
/// line (`--probe`), which is echoed.
fn demo_probe(demo: &Path, backend: &str) -> Result<bool> {
    let output = Command::new(demo)
        .args(["--backend", backend, "--probe"])
        .output()
        .with_context(|| format!("could not start {}", demo.display()))?;
    let line = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    eprintln!("xtask:   {backend}: {line}");
    Ok(output.status.success())
}

/// The demo's Perfetto files read with Perfetto's published schema (PyPI
/// `perfetto`, installed into a virtual environment under the target
/// folder), and held against the software driver's truth on the merged
/// timeline, by `perfetto_check.py`: two processes of this machine (on
/// BOOTTIME, each end within its window's bound); two simulated machines,
/// one with its REALTIME 3 ms off, stating 5 ms (on REALTIME, each end
/// within the file's own UTC interval); and a simulated machine whose
/// clock says it is unsynchronised, refused a manifest. Perfetto's
/// `trace_processor_shell` downloads itself from a host CI cannot reach,
/// so the merge itself is not run here.
fn perfetto_checks(soft: &Path) -> Result<()> {
    let venv = target_dir().join("perfetto-venv");
    let python = venv.join("bin").join("python3");
    if !python.exists() {
        run(
            "python3 -m venv (for Perfetto's schema)",
            Command::new("python3").args(["-m", "venv"]).arg(&venv),
        )?;
    }
    run(
        "pip install perfetto==0.59.1 (Perfetto's published schema)",
        Command::new(&python).args(["-m", "pip", "install", "--quiet", "perfetto==0.59.1"]),
    )?;
    run(
        "cargo build (the demo)",
        cargo().args(["build", "--package", DEMO_PACKAGE]),
    )?;
    let demo = target_dir().join("debug").join(DEMO_PACKAGE);
    let two_processes = |out: &Path, machines: Option<&str>| {
        let mut cmd = Command::new(&demo);
        cmd.args([
            "--backend",
            "cuda",
            "--soft",
            "--steps",
            "4",
            "--processes",
            "2",
        ]);
        if let Some(machines) = machines {
            cmd.args(["--simulated-machines", machines]);
        }
        cmd.arg("--out").arg(out);
        soft_env(&mut cmd, soft);
        cmd
    };
    let check = |out: &Path| {
        let mut cmd = Command::new(&python);
        cmd.arg(root().join("xtask").join("src").join("perfetto_check.py"))
            .arg(out);
        cmd
    };
    for (out, machines, what) in [
        ("perfetto-check", None, "this machine"),
        (
            "perfetto-check-machines",
            Some("0:1000000,3000000:5000000"),
            "two simulated machines, the second's REALTIME 3 ms off, stating 5 ms",
        ),
    ] {
        let out = target_dir().join(out);
        let _ = std::fs::remove_dir_all(&out);
        run(
            &format!(
                "the demo in two processes on the software driver, each writing its Perfetto \
                 file: {what}"
            ),
            &mut two_processes(&out, machines),
        )?;
        run(
            "every packet of both files and the manifest, read with Perfetto's schema; every \
             window's ends against the driver's truth on the merged timeline",
            &mut check(&out),
        )?;
    }
    let out = target_dir().join("perfetto-check-unsynchronised");
    let _ = std::fs::remove_dir_all(&out);
    let step = "a simulated machine whose clock is unsynchronised, refused a merge across machines";
    eprintln!("xtask: {step}");
    let output = two_processes(&out, Some("0:1000000,0:unsynchronised"))
        .output()
        .with_context(|| format!("could not start {step}"))?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    if output.status.success()
        || !stderr.contains("refused for a merge across machines")
        || out.join("perfetto_manifest.json").exists()
    {
        bail!("{step}: not refused ({}): {stderr}", output.status);
    }
    eprintln!("xtask:   refused: {}", stderr.trim());
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::io::Read;

    use super::*;

    /// A fresh, empty folder under the target folder.
    fn scratch(name: &str) -> PathBuf {
        let dir = target_dir().join("xtask-tests").join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn laying_the_driver_out_again_leaves_the_copy_a_running_test_has_open_whole() {
        let dir = scratch("lay-out-again");
        let lib = dir.join("lib");
        let (old, new) = (dir.join("old.so"), dir.join("new.so"));
        std::fs::write(&old, b"the driver a test binary has mapped").unwrap();
        std::fs::write(&new, b"a rebuild").unwrap();
        lay_out_soft_driver(&old, &lib).unwrap();
        // As the loader maps it: the file, open, read after the rebuild.
        let mut mapped = std::fs::File::open(lib.join(SOFT_LIB)).unwrap();
        lay_out_soft_driver(&new, &lib).unwrap();
        let mut seen = String::new();
        mapped.read_to_string(&mut seen).unwrap();
        assert_eq!(seen, "the driver a test binary has mapped");
        assert_eq!(std::fs::read(lib.join(SOFT_LIB)).unwrap(), b"a rebuild");
        for name in SOFT_NAMES {
            assert_eq!(
                std::fs::read(lib.join(name)).unwrap(),
                b"a rebuild",
                "{name}"
            );
        }
        let left: Vec<_> = std::fs::read_dir(&lib)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name != SOFT_LIB && !SOFT_NAMES.contains(&name.as_str()))
            .collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    #[test]
    fn the_test_tasks_doc_names_every_backend_it_tests() {
        let cli = Cli::command();
        let doc = cli
            .find_subcommand("test")
            .and_then(|test| test.get_about())
            .map(ToString::to_string)
            .unwrap_or_default();
        for backend in ["CUDA", "HIP", "OpenCL", "Vulkan"] {
            assert!(doc.contains(backend), "no {backend} in: {doc}");
        }
    }

    #[test]
    fn no_two_examples_in_the_workspace_share_a_name() {
        let mut seen: std::collections::BTreeMap<String, PathBuf> = Default::default();
        for krate in std::fs::read_dir(root().join("crates")).unwrap() {
            let examples = krate.unwrap().path().join("examples");
            let Ok(entries) = std::fs::read_dir(&examples) else {
                continue;
            };
            for entry in entries {
                let path = entry.unwrap().path();
                let Some(name) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
                    continue;
                };
                if let Some(first) = seen.insert(name.clone(), path.clone()) {
                    panic!(
                        "two examples named `{name}`: {} and {}",
                        first.display(),
                        path.display()
                    );
                }
            }
        }
    }

    /// Cargo's messages for a release build of the software driver with
    /// `CARGO_BUILD_TARGET=x86_64-unknown-linux-gnu`, as it printed them.
    const BUILT_FOR_A_TRIPLE: &str = r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#libc@0.2.177","manifest_path":"/c/libc/Cargo.toml","target":{"kind":["lib"],"crate_types":["lib"],"name":"libc","src_path":"/c/libc/src/lib.rs","edition":"2021","doc":true,"doctest":true,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":["default","std"],"filenames":["/w/target/x86_64-unknown-linux-gnu/release/deps/liblibc-1.rlib"],"executable":null,"fresh":true}
{"reason":"compiler-artifact","package_id":"path+file:///w/crates/device-events-soft-driver#0.1.0","manifest_path":"/w/crates/device-events-soft-driver/Cargo.toml","target":{"kind":["cdylib"],"crate_types":["cdylib"],"name":"device_events_soft_driver","src_path":"/w/crates/device-events-soft-driver/src/lib.rs","edition":"2024","doc":true,"doctest":false,"test":true},"profile":{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":false},"features":[],"filenames":["/w/target/x86_64-unknown-linux-gnu/release/libdevice_events_soft_driver.so"],"executable":null,"fresh":false}
{"reason":"build-finished","success":true}"#;

    #[test]
    fn the_driver_is_taken_from_where_cargo_says_it_built_it() {
        let built = artifacts(BUILT_FOR_A_TRIPLE);
        let found = built_file(&built, SOFT_TARGET, |file| file.ends_with(SOFT_LIB)).unwrap();
        assert_eq!(
            found,
            Path::new("/w/target/x86_64-unknown-linux-gnu/release/libdevice_events_soft_driver.so")
        );
    }

    #[test]
    fn a_build_that_names_no_driver_is_an_error_that_says_so() {
        let built = artifacts(BUILT_FOR_A_TRIPLE.lines().next().unwrap());
        let err = built_file(&built, SOFT_TARGET, |file| file.ends_with(SOFT_LIB)).unwrap_err();
        assert!(err.to_string().contains(SOFT_TARGET), "{err}");
    }
}

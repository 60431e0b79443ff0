//! `cargo xtask cubecl`: the proof that device-events drops into CubeCL's
//! own backends. The published `cubecl-cuda`, `cubecl-hip` and
//! `cubecl-wgpu` sources are fetched through cargo, `ci/cubecl/*.patch`
//! swaps their `device_events` (wgpu: its timestamps' placement) for ours,
//! and each is checked as a CubeCL user builds it; `cubecl-runtime` is
//! patched too, its `profile-tracy` writing a Tracy GPU context per stream
//! through `device-events-trace`. Then, on lavapipe, cubecl-wgpu published
//! and patched: CubeCL's own profiling tests and cubecl-wgpu's `tests/`,
//! each test in a process of its own, compared test by test; the patch's
//! own unit tests inside cubecl-wgpu (its query-set budget); and CubeCL
//! kernels whose windows' placed ends are held against
//! lavapipe's exact clock (`ci/cubecl/wgpu-check`), built in release.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use serde_json::Value;

use crate::{cargo, root, run};

/// The CubeCL release the patches are written against.
pub(crate) const VERSION: &str = "0.12.0-pre.1";
/// The patched crates, each with its patch under `ci/cubecl/`.
const CRATES: [&str; 4] = ["cubecl-cuda", "cubecl-hip", "cubecl-wgpu", "cubecl-runtime"];
/// The crate whose tests run on lavapipe, published and patched.
const WGPU: &str = "cubecl-wgpu";
/// The program that runs CubeCL kernels through cubecl-wgpu on lavapipe,
/// and whose `tests/profiling.rs` holds CubeCL's profiling tests.
const WGPU_CHECK: &str = "wgpu-check";
/// The windows `wgpu-check` times.
const WINDOWS: &str = "300";
/// The longest one CubeCL test may run on lavapipe.
const TEST_LIMIT: Duration = Duration::from_secs(300);
/// The crates the patched ones take from this workspace.
const OURS: [&str; 5] = [
    "device-events-core",
    "device-events-cuda",
    "device-events-hip",
    "device-events-cubecl",
    "device-events-trace",
];
/// What turns on CubeCL's `profile-tracy` in a backend: `cubecl-server`'s
/// feature, which takes `cubecl-runtime`'s (cubecl-wgpu has its own too).
const TRACY_FEATURES: &str = "cubecl-server/profile-tracy";

pub(crate) fn cubecl() -> Result<()> {
    let patched = patched()?;
    let check = |name: &str, cuda_version: Option<&str>, features: Option<&str>| -> Result<()> {
        let mut cmd = patched.cargo();
        cmd.args(["check", "--package", name])
            .args(features.map(|f| format!("--features={f}")));
        match cuda_version {
            Some(version) => cmd.env("CUDARC_CUDA_VERSION", version),
            // As a CubeCL user builds: the level from the build system.
            None => cmd.env_remove("CUDARC_CUDA_VERSION"),
        };
        let level = cuda_version.map_or_else(String::new, |v| format!(", CUDARC_CUDA_VERSION={v}"));
        let features = features.map_or_else(String::new, |f| format!(", {f}"));
        run(
            &format!("cargo check {name} (patched{level}{features})"),
            &mut cmd,
        )
    };
    check("cubecl-cuda", None, None)?;
    check("cubecl-cuda", Some("13000"), None)?;
    check("cubecl-hip", None, None)?;
    check("cubecl-wgpu", None, None)?;
    check(
        "cubecl-wgpu",
        None,
        Some(&format!("profile-tracy,{TRACY_FEATURES}")),
    )?;
    check("cubecl-cuda", None, Some(TRACY_FEATURES))?;
    eprintln!(
        "xtask: CubeCL {VERSION}'s CUDA, HIP and wgpu backends build on device-events, with profile-tracy's zones per stream"
    );
    crate::ensure_lavapipe()?;
    let published = build("unpatched", &published()?)?;
    let patched_workspace = patched;
    let patched = build("patched", &patched_workspace)?;
    compare(&run_tests(&published)?, &run_tests(&patched)?)?;
    patch_unit_tests(&patched_workspace)?;
    let compared = wgpu_checks(&published, &patched)?;
    eprintln!("xtask: cubecl-wgpu on lavapipe, placement against the exact clock: {compared}");
    Ok(())
}

/// CubeCL kernels through cubecl-wgpu on lavapipe, unpatched and patched:
/// what `ci/cubecl/wgpu-check` measured of each (its last line, JSON).
pub(crate) fn wgpu_comparison() -> Result<Value> {
    crate::ensure_lavapipe()?;
    let published = build("unpatched", &published()?)?;
    let patched = build("patched", &patched()?)?;
    wgpu_checks(&published, &patched)
}

/// A workspace of CubeCL crates, and the target folder it builds in (one
/// for both, so that what the two share is built once).
struct Workspace {
    dir: PathBuf,
    target: PathBuf,
}

impl Workspace {
    /// Cargo in the workspace, building in its target folder. CubeCL's
    /// build scripts download LLVM unless told it is a docs build.
    fn cargo(&self) -> Command {
        let mut cmd = cargo();
        cmd.current_dir(&self.dir)
            .env("DOCS_RS", "1")
            .env("CARGO_TARGET_DIR", &self.target);
        cmd
    }
}

/// What [`build`] made of a workspace: the `wgpu-check` program and the
/// test binaries, by their target's name.
struct Built {
    key: &'static str,
    check: PathBuf,
    tests: BTreeMap<String, PathBuf>,
}

/// The patched crates in a workspace of their own, with `wgpu-check`.
fn patched() -> Result<Workspace> {
    let dir = scratch("check")?;
    let sources = fetch(&dir)?;
    for (name, source) in CRATES.iter().zip(&sources) {
        // Patched beside the workspace, then synced in: a file the patch
        // leaves as it was keeps its time, and cargo does not rebuild it.
        let staging = dir.join("staging").join(name);
        let _ = std::fs::remove_dir_all(&staging);
        copy_dir(source, &staging)?;
        let patch = root().join("ci/cubecl").join(format!("{name}.patch"));
        run(
            &format!("patch {name} {VERSION} with {}", patch.display()),
            Command::new("git")
                .arg("-C")
                .arg(&staging)
                .arg("apply")
                .arg(&patch),
        )?;
        if *name == WGPU {
            without_cubecls_lib_suite(&staging)?;
        }
        sync_dir(&staging, &dir.join(name))?;
        let (added, removed) = size(&patch)?;
        eprintln!("xtask: {name}: the patch adds {added} lines and removes {removed}");
    }
    sync_dir(
        &root().join("ci/cubecl").join(WGPU_CHECK),
        &dir.join(WGPU_CHECK),
    )?;
    let mut manifest = format!(
        "# Written by `cargo xtask cubecl`.\n[workspace]\nmembers = [{}, \"{WGPU_CHECK}\"]\nresolver = \"2\"\n\n[patch.crates-io]\n",
        CRATES.map(|c| format!("\"{c}\"")).join(", ")
    );
    // wgpu-check takes the patched cubecl-wgpu; every crate, the patched
    // cubecl-runtime.
    manifest.push_str("cubecl-wgpu = { path = \"cubecl-wgpu\" }\n");
    manifest.push_str("cubecl-runtime = { path = \"cubecl-runtime\" }\n");
    for ours in OURS {
        let path = root().join("crates").join(ours);
        manifest.push_str(&format!(
            "{ours} = {{ path = {:?} }}\n",
            path.display().to_string()
        ));
    }
    write_if_changed(&dir.join("Cargo.toml"), &manifest)?;
    Ok(Workspace {
        dir,
        target: target(),
    })
}

/// The attribute on cubecl-wgpu's lib suite (`src/lib.rs`: CubeCL's
/// `testgen_all!` and the rest, for WGSL), and what it becomes here.
const LIB_SUITE: &str = "#[cfg(all(test, not(feature = \"spirv\"), not(feature = \"msl\")))]\n#[allow(unexpected_cfgs)]\nmod tests {";
const LIB_SUITE_OFF: &str = "// `cargo xtask cubecl`: CubeCL's lib suite is not built here; its\n// profiling tests run through wgpu-check's `tests/profiling.rs`.\n#[cfg(any())]\n#[allow(unexpected_cfgs)]\nmod tests {";

/// In the patched copy, CubeCL's lib suite turned off, so that building
/// the lib's tests for the patch's own unit tests
/// ([`patch_unit_tests`]) takes a minute, not twenty (thousands of
/// generated tests); nothing outside `cfg(test)` changes. Its profiling
/// tests run through `wgpu-check`, published and patched.
fn without_cubecls_lib_suite(crate_dir: &Path) -> Result<()> {
    let lib = crate_dir.join("src").join("lib.rs");
    let source =
        std::fs::read_to_string(&lib).with_context(|| format!("reading {}", lib.display()))?;
    if !source.contains(LIB_SUITE) {
        bail!(
            "{}: CubeCL's lib suite is not where it was in {VERSION}",
            lib.display()
        );
    }
    std::fs::write(&lib, source.replacen(LIB_SUITE, LIB_SUITE_OFF, 1))?;
    Ok(())
}

/// Published cubecl-wgpu, as it is, in a workspace with `wgpu-check`.
fn published() -> Result<Workspace> {
    let dir = scratch("published")?;
    let sources = fetch(&dir)?;
    let wgpu = CRATES
        .iter()
        .position(|c| *c == WGPU)
        .and_then(|at| sources.get(at))
        .context("cubecl-wgpu's sources")?;
    sync_dir(wgpu, &dir.join(WGPU))?;
    sync_dir(
        &root().join("ci/cubecl").join(WGPU_CHECK),
        &dir.join(WGPU_CHECK),
    )?;
    write_if_changed(
        &dir.join("Cargo.toml"),
        &format!(
            "# Written by `cargo xtask cubecl`.\n[workspace]\nmembers = [\"{WGPU}\", \"{WGPU_CHECK}\"]\nresolver = \"2\"\n\n[patch.crates-io]\n{WGPU} = {{ path = \"{WGPU}\" }}\n"
        ),
    )?;
    Ok(Workspace {
        dir,
        target: target(),
    })
}

/// A folder of this checkout's own for `what`, outside the repository, so
/// that its `.cargo/config.toml` (which sets the workspace's CUDA bindings
/// level) is not in force, as for a user.
fn scratch(what: &str) -> Result<PathBuf> {
    let checkout: u32 = root()
        .to_string_lossy()
        .bytes()
        .fold(0, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
    let dir = std::env::temp_dir().join(format!("device-events-cubecl-{what}-{checkout:08x}"));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn target() -> PathBuf {
    crate::target_dir().join("cubecl-check")
}

/// Build, in release as a user's program is built, `wgpu-check` and the
/// tests that run on lavapipe: cubecl-wgpu's `tests/`, CubeCL's profiling
/// tests (`wgpu-check`'s `tests/profiling.rs`) and what a window promises
/// its reader besides (`tests/windows.rs`). One cargo run, so
/// that the program and the tests share one build of CubeCL.
fn build(key: &'static str, workspace: &Workspace) -> Result<Built> {
    let mut cmd = workspace.cargo();
    cmd.args([
        "test",
        "--release",
        "--no-run",
        "--message-format=json-render-diagnostics",
    ])
    .args(["--package", WGPU]);
    for test in test_targets(workspace, WGPU)? {
        cmd.args(["--test", &test]);
    }
    cmd.args(["--package", WGPU_CHECK]);
    for test in test_targets(workspace, WGPU_CHECK)? {
        cmd.args(["--test", &test]);
    }
    cmd.stderr(Stdio::inherit());
    eprintln!(
        "xtask: build cubecl-wgpu's tests, CubeCL's profiling tests and {WGPU_CHECK} ({key}, release)"
    );
    let output = cmd.output().context("could not start cargo")?;
    if !output.status.success() {
        bail!("building cubecl-wgpu's tests ({key}) failed");
    }
    let (mut check, mut tests) = (None, BTreeMap::new());
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let Ok(message) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let (Some(exe), Some(name)) = (
            message["executable"].as_str(),
            message["target"]["name"].as_str(),
        ) else {
            continue;
        };
        if message["profile"]["test"].as_bool() == Some(true) {
            tests.insert(name.to_owned(), kept(workspace, key, name, Path::new(exe))?);
        } else if name == WGPU_CHECK {
            check = Some(PathBuf::from(exe));
        }
    }
    let built = check.with_context(|| format!("cargo built no {WGPU_CHECK} ({key})"))?;
    let check = kept(workspace, key, WGPU_CHECK, &built)?;
    Ok(Built { key, check, tests })
}

/// A copy of `built`, the binary `name` of build `key`: the two builds
/// share a target folder, and may put a binary in the same place.
fn kept(workspace: &Workspace, key: &str, name: &str, built: &Path) -> Result<PathBuf> {
    let dir = workspace.target.join(format!("built-{key}"));
    std::fs::create_dir_all(&dir)?;
    let copy = dir.join(name);
    std::fs::copy(built, &copy).with_context(|| format!("copying {}", built.display()))?;
    Ok(copy)
}

/// `package`'s integration tests (`tests/`), from its manifest: those of
/// cubecl-wgpu only macOS runs build empty here, and list nothing.
fn test_targets(workspace: &Workspace, package: &str) -> Result<Vec<String>> {
    let output = cargo()
        .current_dir(&workspace.dir)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .context("running cargo metadata")?;
    if !output.status.success() {
        bail!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let metadata: Value = serde_json::from_slice(&output.stdout)?;
    let found = metadata["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["name"] == package)
        .with_context(|| format!("{package} is not in its workspace"))?;
    Ok(found["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            t["kind"]
                .as_array()
                .is_some_and(|k| k.iter().any(|k| k == "test"))
        })
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect())
}

/// How one test ended.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Passed,
    Ignored,
    /// Failed, aborted or ran past [`TEST_LIMIT`]: why, in a line.
    Failed(String),
}

/// Every test of `built`, each in a process of its own on lavapipe, so
/// that one that aborts the process (lavapipe's LLVM has) ends only
/// itself, and a failed one run once more: `binary::test` → how it ended.
fn run_tests(built: &Built) -> Result<BTreeMap<String, Outcome>> {
    let mut outcomes = BTreeMap::new();
    for (binary, exe) in &built.tests {
        let list = Command::new(exe)
            .args(["--list", "--format", "terse"])
            .output()
            .with_context(|| format!("listing {}", exe.display()))?;
        let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
            .lines()
            .filter_map(|l| l.strip_suffix(": test"))
            .map(str::to_owned)
            .collect();
        for name in names {
            // Run again once after a failure: lavapipe's device is this
            // machine's CPU, shared with whatever else runs on it.
            let mut outcome = run_test(exe, &name)?;
            if let Outcome::Failed(why) = &outcome {
                eprintln!(
                    "xtask: {} {binary}::{name} failed ({why}): once more",
                    built.key
                );
                outcome = run_test(exe, &name)?;
            }
            eprintln!("xtask: {} {binary}::{name}: {outcome:?}", built.key);
            outcomes.insert(format!("{binary}::{name}"), outcome);
        }
    }
    Ok(outcomes)
}

/// One test, alone, on lavapipe.
fn run_test(exe: &Path, name: &str) -> Result<Outcome> {
    let dir =
        std::env::temp_dir().join(format!("device-events-cubecl-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let log = dir.join("output");
    let file = std::fs::File::create(&log)?;
    let mut child = crate::on_lavapipe(
        Command::new(exe)
            .args(["--exact", name, "--test-threads=1"])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file),
    )?
    .spawn()
    .with_context(|| format!("starting {}", exe.display()))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break Some(status);
        }
        if started.elapsed() > TEST_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&dir);
    let Some(status) = status else {
        return Ok(Outcome::Failed(format!(
            "ran past {} s",
            TEST_LIMIT.as_secs()
        )));
    };
    if status.success() {
        return Ok(if output.contains("1 ignored") {
            Outcome::Ignored
        } else {
            Outcome::Passed
        });
    }
    // The line that says why: the panic's message, or the abort's.
    let why = output
        .lines()
        .find(|l| l.contains("panicked at") || l.contains("ERROR"))
        .map(|l| {
            let at = output.find(l).map_or(0, |i| i + l.len());
            let next = output[at..]
                .lines()
                .find(|n| !n.trim().is_empty())
                .unwrap_or("");
            format!("{} {}", l.trim(), next.trim())
        })
        .unwrap_or_else(|| format!("{status}"));
    Ok(Outcome::Failed(why))
}

/// Each test published against patched: every test that passes published
/// passes patched.
fn compare(
    published: &BTreeMap<String, Outcome>,
    patched: &BTreeMap<String, Outcome>,
) -> Result<()> {
    eprintln!("xtask: CubeCL's tests on lavapipe, published → patched:");
    let mut lost = Vec::new();
    for (test, before) in published {
        let after = patched.get(test);
        let shown = after.map_or_else(|| "not run".to_owned(), |o| format!("{o:?}"));
        eprintln!("xtask:   {test}: {before:?} → {shown}");
        if *before == Outcome::Passed && after != Some(&Outcome::Passed) {
            lost.push(test.as_str());
        }
    }
    for test in patched.keys().filter(|t| !published.contains_key(*t)) {
        eprintln!("xtask:   {test}: patched only: {:?}", patched[test]);
    }
    let count =
        |o: &BTreeMap<String, Outcome>| o.values().filter(|o| **o == Outcome::Passed).count();
    eprintln!(
        "xtask: {} of {} pass published, {} of {} patched",
        count(published),
        published.len(),
        count(patched),
        patched.len()
    );
    if published.is_empty() {
        bail!("no CubeCL tests ran");
    }
    if !lost.is_empty() {
        bail!("passing published, not patched: {}", lost.join(", "));
    }
    Ok(())
}

/// The unit tests the patch adds inside cubecl-wgpu, where they reach what
/// is private to it (the query-set budget): by their module's name.
const PATCH_UNIT_TESTS: &str = "budget_tests";

/// The patch's own unit tests, in cubecl-wgpu's lib test binary (built
/// without CubeCL's lib suite: [`without_cubecls_lib_suite`]); none needs
/// a device.
fn patch_unit_tests(workspace: &Workspace) -> Result<()> {
    let mut cmd = workspace.cargo();
    cmd.args([
        "test",
        "--release",
        "--lib",
        "--package",
        WGPU,
        PATCH_UNIT_TESTS,
    ])
    .stderr(Stdio::inherit());
    eprintln!("xtask: the patch's unit tests in {WGPU} ({PATCH_UNIT_TESTS})");
    let began = Instant::now();
    let output = cmd.output().context("could not start cargo")?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    for line in stdout.lines().filter(|l| l.starts_with("test ")) {
        eprintln!("xtask:   {line}");
    }
    if !output.status.success() {
        bail!("the patch's unit tests in {WGPU} failed: {stdout}");
    }
    let passed = stdout
        .lines()
        .filter(|l| l.starts_with("test ") && l.ends_with(" ok"))
        .count();
    if passed == 0 {
        bail!("no unit test of the patch ran in {WGPU} (filter {PATCH_UNIT_TESTS})");
    }
    eprintln!(
        "xtask: the patch's unit tests in {WGPU}: {passed} passed, in {:.0} s with the build",
        began.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `wgpu-check` of each build on lavapipe: what it measured of each (its
/// last line, JSON), by key.
fn wgpu_checks(published: &Built, patched: &Built) -> Result<Value> {
    let mut out = serde_json::Map::new();
    for built in [published, patched] {
        let key = built.key;
        eprintln!(
            "xtask: CubeCL kernels through cubecl-wgpu ({key}) on lavapipe: running {WGPU_CHECK} (release)"
        );
        let output = crate::on_lavapipe(Command::new(&built.check).arg(WINDOWS))?
            .stderr(Stdio::inherit())
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

/// Make `to` hold what `from` holds, writing only the files that differ
/// (the others keep their time, so cargo does not rebuild them) and
/// removing those `from` lacks; `target` and `Cargo.lock` are left.
fn sync_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    let mut names = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        names.insert(entry.file_name());
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            sync_dir(&entry.path(), &target)?;
        } else {
            let bytes = std::fs::read(entry.path())?;
            if std::fs::read(&target).ok().as_ref() != Some(&bytes) {
                std::fs::write(&target, bytes)
                    .with_context(|| format!("writing {}", target.display()))?;
            }
        }
    }
    for entry in std::fs::read_dir(to)? {
        let entry = entry?;
        let name = entry.file_name();
        if names.contains(&name) || name == "target" || name == "Cargo.lock" {
            continue;
        }
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

fn write_if_changed(path: &Path, text: &str) -> Result<()> {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
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

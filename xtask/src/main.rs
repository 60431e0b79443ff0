//! Project tasks; run `cargo xtask --help`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "device-events project tasks")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Everything CI checks: formatting, clippy, the tests (both backends on
    /// the software driver), and the docs.
    Test,
    /// The main job: a profiled two-stream pipeline on the best device found.
    Demo,
}

fn main() {
    let cli = Cli::parse();
    let outcome = match cli.task {
        Task::Test => test(),
        Task::Demo => demo(),
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

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

/// Run a step, echoing it; stop at the first failure.
fn run(step: &str, cmd: &mut Command) -> Result<()> {
    eprintln!("xtask: {step}");
    let status = cmd
        .status()
        .with_context(|| format!("could not start {step}"))?;
    if !status.success() {
        bail!("{step} failed ({status})");
    }
    Ok(())
}

fn test() -> Result<()> {
    run(
        "cargo fmt --check",
        cargo().args(["fmt", "--all", "--", "--check"]),
    )?;
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
    run("cargo test", cargo().args(["test", "--workspace"]))?;
    run(
        "cargo doc",
        cargo()
            .args(["doc", "--workspace", "--no-deps"])
            .env("RUSTDOCFLAGS", "-D warnings"),
    )?;
    Ok(())
}

fn demo() -> Result<()> {
    run(
        "core example",
        cargo().args([
            "run",
            "-p",
            "device-events-core",
            "--features",
            "sim",
            "--example",
            "pipeline",
        ]),
    )
}

//! The Rust snippets of the repository's Markdown, compiled by `cargo test`
//! as this crate's doctests: each file below is included whole, so what CI
//! compiles is the text a reader sees, and a snippet that stops building
//! fails the tests. They are marked `no_run`: they need a driver.
//!
//! `cargo xtask docs --check` fails where a Markdown file has a Rust
//! snippet and is not included here, where a snippet is marked so that it
//! would not compile, and where a `Cargo.toml` snippet lacks a
//! crate its Rust snippet names or the `[patch.crates-io]` path of an
//! unpublished one.

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct Readme;

#[cfg(doctest)]
#[doc = include_str!("../../../docs/using.md")]
struct Using;

#[cfg(doctest)]
#[doc = include_str!("../../../docs/design.md")]
struct Design;

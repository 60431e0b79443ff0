//! A section of the GPU kit's probe: its value, or its error or panic in
//! words, with its seconds, written to its JSON file the moment it ends,
//! so that one refusal by the driver, one panic or one hang loses only
//! that section (`run.sh` runs each in a process of its own, under a time
//! limit).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::{Mutex, Once, PoisonError};
use std::time::Instant;

use serde_json::{Map, Value, json};

/// The last panic's message and place, kept by the hook [`Report::new`]
/// installs.
static PANICKED: Mutex<Option<String>> = Mutex::new(None);

/// `DEVICE_EVENTS_PROBE_HANG`: the name of a section made to hang on
/// purpose (a kernel that spins for an hour, then a wait for it), to
/// rehearse a step the kit must bound.
pub const HANG_VAR: &str = "DEVICE_EVENTS_PROBE_HANG";

/// Whether [`HANG_VAR`] names section `name`.
pub fn hang_asked(name: &str) -> bool {
    std::env::var(HANG_VAR).is_ok_and(|v| v == name)
}

/// The sections run so far and where they are written.
pub struct Report {
    path: PathBuf,
    sections: Map<String, Value>,
}

impl Report {
    /// A report written to `path`, as an object of sections by name.
    pub fn new(path: PathBuf) -> Self {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let default = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                let place = info
                    .location()
                    .map(|l| format!(" at {}:{}", l.file(), l.line()))
                    .unwrap_or_default();
                let message = info
                    .payload()
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| info.payload().downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned());
                *PANICKED.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some(format!("panicked{place}: {message}"));
                default(info);
            }));
        });
        Self {
            path,
            sections: Map::new(),
        }
    }

    /// Run `measure` as section `name` and write the report at once:
    /// `{"seconds": …, "value": …}`, or `{"seconds": …, "error": …}` for
    /// an error or a panic. Whether it gave a value.
    pub fn run(&mut self, name: &str, measure: impl FnOnce() -> Result<Value, String>) -> bool {
        let started = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(measure)).unwrap_or_else(|_| {
            Err(PANICKED
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
                .unwrap_or_else(|| "panicked".to_owned()))
        });
        let seconds = started.elapsed().as_secs_f64();
        let ok = outcome.is_ok();
        let entry = match outcome {
            Ok(value) => json!({ "seconds": seconds, "value": value }),
            Err(error) => {
                println!("{name}: {error}");
                json!({ "seconds": seconds, "error": error })
            }
        };
        self.sections.insert(name.to_owned(), entry);
        self.write();
        ok
    }

    /// Record `error` for each of `names` without running them (what
    /// they all needed failed first).
    pub fn fail(&mut self, names: &[&str], error: &str) {
        for name in names {
            println!("{name}: {error}");
            self.sections.insert(
                (*name).to_owned(),
                json!({ "seconds": 0.0, "error": error }),
            );
        }
        self.write();
    }

    /// Written beside and renamed over: a process killed mid-write leaves
    /// the last whole report, never half of one.
    fn write(&self) {
        let text = serde_json::to_string_pretty(&self.sections).unwrap_or_default();
        let partial = self.path.with_extension("partial");
        let written =
            std::fs::write(&partial, text).and_then(|()| std::fs::rename(&partial, &self.path));
        if let Err(err) = written {
            eprintln!("could not write {}: {err}", self.path.display());
        }
    }
}

//! Protocol ids agree with the Aigenora reference.
//!
//! Runs the real `pipehub protocol hash` and the reference's `aigenora protocol hash` on
//! every spec the reference ships, on the spec files of `scripts/oracle-specs/` (written to
//! hit each serialization and subset rule where two readers could differ), and on our own
//! three protocols' `spec.json`, and requires the same id from both. The reference is found
//! at `$PIPEHUB_ORACLE`, else `<workspace>/.venv/oracle/bin/aigenora`; when it is missing the
//! test fails and says how to install it (it never skips, and it installs nothing).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const SETUP: &str = "run scripts/test, which creates it with \
    `python3 -m venv .venv/oracle && .venv/oracle/bin/pip install aigenora==0.1.4`";

/// How many specs aigenora 0.1.4 ships.
const SHIPPED: usize = 21;

fn workspace() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

fn oracle() -> PathBuf {
    let path = std::env::var_os("PIPEHUB_ORACLE")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join(".venv/oracle/bin/aigenora"));
    assert!(
        path.is_file(),
        "the protocol-id oracle (the Aigenora reference) is missing at {}: {SETUP}",
        path.display()
    );
    path
}

fn pipehub() -> PathBuf {
    let path = pipehub_tests::pipehub_bin();
    assert!(
        path.is_file(),
        "the pipehub binary is missing at {}: run `cargo build -p pipehub-hub --bin pipehub` \
         (scripts/test builds every binary first)",
        path.display()
    );
    path
}

struct Output {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs a command to completion, killing it after a minute so the test always ends.
fn run(program: &Path, args: &[&str]) -> Output {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let Some(status) = pipehub_tests::wait_within(&mut child, Duration::from_secs(60)) else {
        panic!("{} {args:?} did not finish within 60 s", program.display());
    };
    let mut stdout = String::new();
    let mut stderr = String::new();
    if let Some(mut out) = child.stdout.take() {
        out.read_to_string(&mut stdout).expect("stdout is text");
    }
    if let Some(mut err) = child.stderr.take() {
        err.read_to_string(&mut stderr).expect("stderr is text");
    }
    Output {
        code: status.code(),
        stdout,
        stderr,
    }
}

fn json_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

/// Every `spec.json` that the installed reference ships.
fn shipped_specs(oracle: &Path) -> Vec<PathBuf> {
    let python = oracle.with_file_name("python");
    let out = run(
        &python,
        &[
            "-c",
            "import aigenora, os; print(os.path.dirname(aigenora.__file__))",
        ],
    );
    assert_eq!(
        out.code,
        Some(0),
        "cannot locate the aigenora package: {}",
        out.stderr
    );
    let root = PathBuf::from(out.stdout.trim()).join("protocols");
    let mut specs = Vec::new();
    for prefix in std::fs::read_dir(&root)
        .expect("aigenora ships protocols")
        .flatten()
    {
        for entry in std::fs::read_dir(prefix.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let spec = entry.path().join("spec.json");
            if spec.is_file() {
                specs.push(spec);
            }
        }
    }
    specs.sort();
    specs
}

/// Hashes one file with both programs; returns a complaint when they disagree.
fn compare(pipehub: &Path, oracle: &Path, spec: &Path) -> Option<String> {
    let file = spec.to_str().expect("a UTF-8 path");
    let ours = run(pipehub, &["protocol", "hash", file]);
    let theirs = run(oracle, &["protocol", "hash", file]);
    let id = theirs.stdout.trim();
    let ok = ours.code == Some(0)
        && theirs.code == Some(0)
        && id.len() == 64
        && ours.stdout.trim() == id
        && ours.stderr.contains("warning") == theirs.stderr.contains("warning");
    (!ok).then(|| {
        format!(
            "{file}:\n  pipehub  exit {:?} id {:?} stderr {:?}\n  aigenora exit {:?} id {:?} stderr {:?}",
            ours.code,
            ours.stdout.trim(),
            ours.stderr.trim(),
            theirs.code,
            id,
            theirs.stderr.trim()
        )
    })
}

fn compare_all(specs: &[PathBuf]) {
    let (pipehub, oracle) = (pipehub(), oracle());
    let failures: Vec<String> = specs
        .iter()
        .filter_map(|spec| compare(&pipehub, &oracle, spec))
        .collect();
    assert!(failures.is_empty(), "ids differ:\n{}", failures.join("\n"));
}

#[test]
fn ids_of_the_references_shipped_specs_agree() {
    let specs = shipped_specs(&oracle());
    assert_eq!(
        specs.len(),
        SHIPPED,
        "aigenora 0.1.4 ships {SHIPPED} specs: {specs:?}"
    );
    compare_all(&specs);
}

#[test]
fn ids_of_the_edge_case_specs_agree() {
    let specs = json_files(&workspace().join("scripts/oracle-specs"));
    assert!(
        specs.len() >= 20,
        "scripts/oracle-specs lost its files: {specs:?}"
    );
    compare_all(&specs);
}

#[test]
fn ids_of_our_protocols_agree_and_are_listed() {
    let dir = workspace().join("games/protocols");
    let specs: Vec<PathBuf> = ["tic-tac-toe", "connect-four", "rock-paper-scissors"]
        .iter()
        .map(|name| dir.join(name).join("spec.json"))
        .collect();
    compare_all(&specs);
    let list = run(&pipehub(), &["protocol", "list", "--json"]);
    assert_eq!(list.code, Some(0), "{}", list.stderr);
    for (name, spec) in ["tic-tac-toe", "connect-four", "rock-paper-scissors"]
        .iter()
        .zip(&specs)
    {
        let theirs = run(
            &oracle(),
            &["protocol", "hash", spec.to_str().expect("UTF-8")],
        );
        let line = list
            .stdout
            .lines()
            .find(|l| l.contains(&format!("\"pipehub:{name}\"")))
            .unwrap_or_else(|| panic!("pipehub:{name} is not listed: {}", list.stdout));
        let entry: serde_json::Value = serde_json::from_str(line).expect("a JSON line");
        assert_eq!(entry["id"], theirs.stdout.trim(), "{name}");
    }
}

#[test]
fn unreadable_or_invalid_files_are_errors_naming_the_file() {
    let dir = std::env::temp_dir().join(format!("pipehub-protocol-ids-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let cases = [
        ("broken.json", "{\"messages\": [1,]}"),
        ("array.json", "[1, 2]"),
        ("lone-surrogate.json", "{\"rules\": \"\\ud800\"}"),
        ("bom.json", "\u{feff}{}"),
    ];
    let mut paths: Vec<PathBuf> = cases
        .iter()
        .map(|(name, text)| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("writing a temporary file");
            path
        })
        .collect();
    paths.push(dir.join("missing.json"));
    for path in &paths {
        let file = path.to_str().expect("UTF-8");
        let out = run(&pipehub(), &["protocol", "hash", file]);
        assert_eq!(out.code, Some(2), "{file}: {}", out.stderr);
        assert!(out.stdout.is_empty(), "{file}: printed {}", out.stdout);
        assert!(
            out.stderr.contains(file),
            "{file}: stderr does not name it: {}",
            out.stderr
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

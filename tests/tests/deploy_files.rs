//! The files under `deploy/` are read by tools this machine mostly does not run (a
//! container engine, Kubernetes, Grafana), so these tests check what can be checked here:
//! every YAML file parses, the dashboard is JSON with panels, the Kubernetes Deployment is
//! ready on `/readyz`, and every `pipehub_*` series that an alert or a panel queries is one
//! the hub declares — a renamed metric would otherwise leave a silent alert and an empty
//! panel. Prometheus's own `promtool` (from Debian's `prometheus`, which `scripts/test`
//! unpacks to `.tools/promtool` and names in `PIPEHUB_PROMTOOL`) checks the scrape
//! configuration and the alerting rules, and runs the rules' unit tests,
//! `deploy/prometheus/alerts_test.yml`.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn all_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    files(&deploy(), &mut out);
    out.sort();
    out
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn yaml(path: &Path) -> Vec<Yaml> {
    YamlLoader::load_from_str(&read(path))
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()))
}

fn is_yaml(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yml" | "yaml")
    )
}

#[test]
fn every_yaml_file_parses_into_documents() {
    let yamls: Vec<_> = all_files().into_iter().filter(|p| is_yaml(p)).collect();
    assert!(yamls.len() >= 6, "deploy/ lost its YAML files: {yamls:?}");
    for path in yamls {
        let docs = yaml(&path);
        assert!(
            docs.iter().any(|d| !d.is_null()),
            "{} holds no document",
            path.display()
        );
    }
}

#[test]
fn kubernetes_manifests_name_their_kind_and_the_hub_is_ready_on_readyz() {
    let mut kinds = BTreeSet::new();
    for name in ["pipehub.yaml", "redis.yaml"] {
        for doc in yaml(&deploy().join("k8s").join(name)) {
            assert!(
                doc["apiVersion"].as_str().is_some(),
                "{name}: no apiVersion"
            );
            let kind = doc["kind"].as_str().expect("every manifest has a kind");
            kinds.insert(kind.to_string());
            if kind == "Deployment" {
                let containers = doc["spec"]["template"]["spec"]["containers"]
                    .as_vec()
                    .expect("a Deployment has containers");
                let probe = &containers[0]["readinessProbe"]["httpGet"]["path"];
                assert_eq!(probe.as_str(), Some("/readyz"), "{name}");
                // A pause before SIGTERM (the pod leaves the endpoints meanwhile), then the
                // hub's 10 s drain, within the grace period.
                let pause = &containers[0]["lifecycle"]["preStop"]["exec"]["command"];
                let pause: Vec<&str> = pause.as_vec().map_or(Vec::new(), |c| {
                    c.iter().filter_map(|w| w.as_str()).collect()
                });
                assert_eq!(pause.first(), Some(&"sleep"), "{name}: preStop {pause:?}");
                let secs: i64 = pause.get(1).and_then(|s| s.parse().ok()).unwrap_or(0);
                let grace = doc["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
                    .as_i64()
                    .unwrap_or(30);
                assert!(
                    secs > 0 && secs + 10 < grace,
                    "{name}: {secs} s + 10 s in {grace} s"
                );
            }
        }
    }
    for kind in ["Deployment", "Service", "StatefulSet"] {
        assert!(kinds.contains(kind), "no {kind} in deploy/k8s: {kinds:?}");
    }
}

#[test]
fn the_compose_file_runs_redis_with_aof_and_three_hub_nodes() {
    let compose = yaml(&deploy().join("compose.yaml"));
    let services = compose[0]["services"]
        .as_hash()
        .expect("compose.yaml has services");
    let text = read(&deploy().join("compose.yaml"));
    assert!(text.contains("appendonly"), "Redis without AOF");
    let hubs = services
        .iter()
        .filter(|(_, s)| {
            let s = format!("{s:?}");
            s.contains("PIPEHUB_REDIS") || s.contains("--redis")
        })
        .count();
    assert!(hubs >= 3, "compose.yaml runs {hubs} hub nodes");
}

#[test]
fn the_image_is_built_from_the_sources_alone() {
    // The Dockerfile copies the whole build context; without these the builder was sent
    // target/ (gigabytes) and a default data directory's hub secret.
    let ignored = read(&deploy().join("../.dockerignore"));
    let lines: BTreeSet<&str> = ignored.lines().map(str::trim).collect();
    for path in ["/target", "/data", "/.venv", "/.tools", "/.git"] {
        assert!(
            lines.contains(path),
            ".dockerignore does not leave out {path}"
        );
    }
    assert!(read(&deploy().join("Dockerfile")).contains("COPY . ."));
}

/// Every `pipehub_*` name in a query, without the suffixes Prometheus adds to histograms.
fn queried_metrics(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("pipehub_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_') {
            end += 1;
        }
        let mut name = &text[start..end];
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(stem) = name.strip_suffix(suffix) {
                name = stem;
            }
        }
        names.insert(name.to_string());
        i = end;
    }
    names
}

#[test]
fn alerts_and_dashboard_query_only_metrics_the_hub_declares() {
    let declared = read(&deploy().join("../hub/src/metrics.rs"));
    let dashboard = deploy().join("grafana/dashboards/pipehub.json");
    let json: serde_json::Value = serde_json::from_str(&read(&dashboard))
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", dashboard.display()));
    let panels = json["panels"].as_array().expect("the dashboard has panels");
    assert!(!panels.is_empty());

    let mut queried = queried_metrics(&read(&dashboard));
    queried.extend(queried_metrics(&read(
        &deploy().join("prometheus/alerts.yml"),
    )));
    assert!(queried.len() >= 5, "alerts and panels query {queried:?}");
    for name in &queried {
        assert!(
            declared.contains(&format!("\"{name}\"")),
            "{name} is queried in deploy/ but hub/src/metrics.rs declares no such metric"
        );
    }
}

/// Runs promtool (`PIPEHUB_PROMTOOL`, else `promtool` on the path) with `args` in
/// `deploy/prometheus`; panics, naming `scripts/test`, when there is none, and with its
/// output when it fails.
fn promtool(args: &[&str]) {
    let tool = std::env::var_os("PIPEHUB_PROMTOOL").unwrap_or_else(|| "promtool".into());
    let out = std::process::Command::new(&tool)
        .args(args)
        .current_dir(deploy().join("prometheus"))
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}): run scripts/test, which unpacks it from Debian's \
                 prometheus package to .tools/promtool",
                tool.to_string_lossy()
            )
        });
    assert!(
        out.status.success(),
        "promtool {}: {}\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_accepts_the_scrape_config_and_the_alerts_pass_their_unit_tests() {
    // The scrape configuration names the rules by their path in the container.
    promtool(&["check", "config", "--syntax-only", "prometheus.yml"]);
    promtool(&["check", "rules", "alerts.yml"]);
    promtool(&["test", "rules", "alerts_test.yml"]);
}

//! The credential programs tests run pinhook with, both examples of this package: the
//! credential provider plugin (`examples/credential_provider.rs`) installed into a kubelet-style
//! plugin directory with its `CredentialProviderConfig`, and the docker credential helper
//! (`examples/docker_credential_helper.rs`) installed as `docker-credential-<name>` in a
//! directory to put on `PATH`. Each run of either is counted in a file of the test's.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use serde_json::{json, Value};
use tempfile::TempDir;

/// Serialises the one `cargo build` of the examples (tests of a file run in parallel).
static BUILD: Mutex<bool> = Mutex::new(false);

/// The path of example `name`, built first when `cargo test` did not (it builds examples only
/// when it runs every target).
pub fn example(name: &str) -> PathBuf {
    let Some(pinhook) = option_env!("CARGO_BIN_EXE_pinhook") else {
        panic!(
            "the examples are found beside the pinhook binary, which only integration tests know"
        )
    };
    let debug = Path::new(pinhook)
        .parent()
        .expect("the binary has a directory");
    let path = debug.join("examples").join(name);
    let mut built = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    if !*built {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "--example", "credential_provider"])
            .args(["--example", "docker_credential_helper"])
            .arg("--manifest-path")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
            .arg("--target-dir")
            .arg(debug.parent().expect("debug/ is in the target directory"))
            .status()
            .expect("cargo runs");
        assert!(
            status.success(),
            "building the credential program examples failed"
        );
        *built = true;
    }
    path
}

/// A plugin directory and `CredentialProviderConfig` for the example plugin.
pub struct PluginSetup {
    dir: TempDir,
    providers: Vec<Value>,
}

/// One provider entry: the example plugin under `name`, with `env` (see the example's doc).
pub struct Provider<'a> {
    pub name: &'a str,
    pub match_images: &'a [&'a str],
    pub default_cache_duration: &'a str,
    pub env: &'a [(&'a str, &'a str)],
}

impl PluginSetup {
    pub fn new() -> PluginSetup {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("bin")).expect("bin dir");
        PluginSetup {
            dir,
            providers: Vec::new(),
        }
    }

    /// Adds `provider`, counting its runs in [`PluginSetup::count_file`]`(name)`.
    pub fn provider(mut self, provider: Provider<'_>) -> PluginSetup {
        let binary = self.bin_dir().join(provider.name);
        std::os::unix::fs::symlink(example("credential_provider"), &binary).expect("install");
        let count = self.count_file(provider.name);
        let mut env: Vec<Value> = provider
            .env
            .iter()
            .map(|(name, value)| json!({"name": name, "value": value}))
            .collect();
        env.push(json!({"name": "PLUGIN_COUNT_FILE", "value": count.to_string_lossy()}));
        self.providers.push(json!({
            "name": provider.name,
            "matchImages": provider.match_images,
            "defaultCacheDuration": provider.default_cache_duration,
            "apiVersion": "credentialprovider.kubelet.k8s.io/v1",
            "args": ["get-credentials"],
            "env": env,
        }));
        self
    }

    /// Writes the config (JSON, which kubelet reads as YAML too) and returns its path.
    pub fn write_config(&self) -> PathBuf {
        let path = self.dir.path().join("credential-provider-config.json");
        let config = json!({
            "apiVersion": "kubelet.config.k8s.io/v1",
            "kind": "CredentialProviderConfig",
            "providers": self.providers,
        });
        std::fs::write(&path, config.to_string()).expect("write the config");
        path
    }

    pub fn bin_dir(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    pub fn count_file(&self, provider: &str) -> PathBuf {
        self.dir.path().join(format!("{provider}.runs"))
    }

    /// How often `provider` ran.
    pub fn runs(&self, provider: &str) -> usize {
        runs(&self.count_file(provider))
    }
}

/// A directory holding `docker-credential-<name>` (the example helper), for `PATH`.
pub fn helper_dir(name: &str) -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let link = dir.path().join(format!("docker-credential-{name}"));
    std::os::unix::fs::symlink(example("docker_credential_helper"), link).expect("install");
    dir
}

/// Lines in a count file (0 when the program never ran).
pub fn runs(count_file: &Path) -> usize {
    std::fs::read_to_string(count_file)
        .map(|text| text.lines().count())
        .unwrap_or(0)
}

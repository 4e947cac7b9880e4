//! Running the `pinhook` binary as a user does: a subcommand in an environment cleared of what
//! the developer's shell may hold (`HOME`, `DOCKER_CONFIG`, `NO_COLOR`, `PINHOOK_REGISTRY_CA`),
//! so a test sees only the flags and variables it sets; and the docker credentials file a user
//! has after `docker login`.

use std::process::Command;

use base64::Engine as _;

/// `pinhook <subcommand>` with a clean environment and logs limited to errors; the test adds
/// its arguments and any variable it wants set.
pub fn pinhook_command(subcommand: &str) -> Command {
    // Cargo sets this for integration tests and benchmarks; the examples that share this
    // harness never run the binary.
    let Some(binary) = option_env!("CARGO_BIN_EXE_pinhook") else {
        panic!("pinhook_command runs the binary, which only integration tests are built with")
    };
    let mut command = Command::new(binary);
    command
        .arg(subcommand)
        .env("HOME", "/nonexistent")
        .env_remove("DOCKER_CONFIG")
        .env_remove("NO_COLOR")
        .env_remove("PINHOOK_REGISTRY_CA")
        .env("PINHOOK_LOG", "error");
    command
}

/// A docker `config.json` holding one registry's username and password, as `docker login`
/// writes it.
pub fn docker_config_json(registry: &str, user: &str, password: &str) -> String {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    serde_json::json!({"auths": {registry: {"auth": auth}}}).to_string()
}

//! A docker credential helper for tests, installed as `docker-credential-<name>` on `PATH`:
//! `get` reads a server address on stdin and answers `{"ServerURL", "Username", "Secret"}` as
//! docker-credential-helpers do, with what its environment says.
//!
//! Environment (all optional):
//! - `HELPER_SERVER`: the only server it has credentials for; any other gets docker's
//!   "credentials not found in native keychain" and exit 1;
//! - `HELPER_USERNAME` (`<token>` makes the secret an identity token), `HELPER_SECRET`;
//! - `HELPER_MODE`: `answer` (default), `fail` (exit 1 with the secret on stdout and stderr),
//!   `garbage`, `sleep` (never answer within pinhook's bound), `hog` (take and touch
//!   `HELPER_HOG_MIB` MiB of memory, then answer);
//! - `HELPER_COUNT_FILE`: append the asked server and a newline, once per run.

use std::io::{Read, Write};
use std::time::Duration;

fn main() {
    let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    if std::env::args().nth(1).as_deref() != Some("get") {
        eprintln!("only `get` is supported");
        std::process::exit(2);
    }
    let mut server = String::new();
    if std::io::stdin().read_to_string(&mut server).is_err() {
        std::process::exit(2);
    }
    let server = server.trim().to_string();
    if let Some(path) = env("HELPER_COUNT_FILE") {
        let appended = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut file| writeln!(file, "{server}"));
        if appended.is_err() {
            std::process::exit(3);
        }
    }
    let secret = env("HELPER_SECRET").unwrap_or_default();
    if env("HELPER_SERVER").is_some_and(|only| only != server) {
        println!("credentials not found in native keychain");
        std::process::exit(1);
    }
    let answer = serde_json::json!({
        "ServerURL": server,
        "Username": env("HELPER_USERNAME").unwrap_or_default(),
        "Secret": secret,
    });
    match env("HELPER_MODE").as_deref().unwrap_or("answer") {
        "answer" => println!("{answer}"),
        "fail" => {
            println!("keychain locked, secret={secret}");
            eprintln!("keychain locked, secret={secret}");
            std::process::exit(1);
        }
        "garbage" => println!("secret={secret}"),
        "sleep" => std::thread::sleep(Duration::from_secs(3600)),
        "hog" => {
            let mib: usize = env("HELPER_HOG_MIB")
                .and_then(|mib| mib.parse().ok())
                .unwrap_or(0);
            // Touched, so that it is memory and not a promise; past a cap, the allocation
            // fails and the process aborts.
            let held = vec![1u8; mib << 20];
            println!("{answer}");
            std::hint::black_box(held);
        }
        other => {
            eprintln!("unknown HELPER_MODE {other}");
            std::process::exit(2);
        }
    }
}

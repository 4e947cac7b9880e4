//! Driving pinhook's registry client directly, without the webhook in front: the
//! [`OciResolver`] a test builds from a [`RegistryConfig`] and the references it is asked about.
//! The configuration itself (which CAs, which hosts are insecure) is the test's to choose.

use pinhook::reference::Reference;
use pinhook::registry::{OciResolver, RegistryConfig};

/// pinhook's registry client with `config` and no policy in front of it.
pub fn resolver(config: RegistryConfig) -> OciResolver {
    OciResolver::new(config).expect("resolver builds")
}

/// `text` parsed as an image reference; tests only pass valid ones.
pub fn reference(text: &str) -> Reference {
    Reference::parse(text).expect("valid reference")
}

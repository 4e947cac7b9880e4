//! The one outbound HTTP path every registry request takes: a client whose name lookups the
//! address guard judges ([`dns`]), whose redirects stay within the origin ([`redirect`]),
//! built in one place ([`outbound`]), and whose bodies are read within a bound ([`body`]); and
//! the token realms registries name, judged before they are asked ([`realm`]).

pub(crate) mod body;
pub(crate) mod dns;
pub(crate) mod outbound;
pub(crate) mod realm;
pub(crate) mod redirect;

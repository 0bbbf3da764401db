//! Typed option keys: the [`OptionKey`] trait, the [`option_keys!`](crate::option_keys!) macro
//! that declares a backend's keys, the [`CommonKey`]s every backend takes, and the error for an
//! unknown key.

use std::fmt;

use crate::error::Error;

/// A backend's set of option keys. Implement it with [`option_keys!`](crate::option_keys!).
pub trait OptionKey: Copy + Eq + fmt::Debug + Send + Sync + 'static {
    /// Every key, in the order error messages list them.
    const ALL: &'static [Self];

    /// The key as written in URLs and `LockConfig::options`.
    fn as_str(self) -> &'static str;

    /// The key named `s`, if any.
    fn lookup(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|k| k.as_str() == s)
    }
}

/// Declares an enum of option keys with [`OptionKey`], `FromStr` (unknown keys are
/// [`Config`](crate::ErrorKind::Config) errors listing the known ones) and `Display`.
///
/// ```
/// lockkit_core::option_keys! {
///     /// My backend's options.
///     pub enum MyKey {
///         /// `depth`: how deep.
///         Depth = "depth",
///     }
/// }
/// assert_eq!("depth".parse::<MyKey>().unwrap(), MyKey::Depth);
/// assert!("deep".parse::<MyKey>().is_err());
/// ```
#[macro_export]
macro_rules! option_keys {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($(#[$vmeta:meta])* $variant:ident = $key:literal),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($(#[$vmeta])* $variant),*
        }

        impl $crate::option_key::OptionKey for $name {
            const ALL: &'static [Self] = &[$($name::$variant),*];
            fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $key),*
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::Error;
            fn from_str(s: &str) -> $crate::Result<Self> {
                <Self as $crate::option_key::OptionKey>::lookup(s)
                    .ok_or_else(|| $crate::option_key::unknown_key::<Self>(s))
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str($crate::option_key::OptionKey::as_str(*self))
            }
        }
    };
}

option_keys! {
    /// The options every backend takes.
    pub enum CommonKey {
        /// `prefix`: the key prefix (also `LockConfig::key_prefix`).
        Prefix = "prefix",
        /// `lease`: the handle's default lease (also `LockConfig::lease`).
        Lease = "lease",
        /// `connect_timeout` (also `LockConfig::connect_timeout`).
        ConnectTimeout = "connect_timeout",
        /// `command_timeout` (also `LockConfig::command_timeout`).
        CommandTimeout = "command_timeout",
    }
}

/// The [`Config`](crate::ErrorKind::Config) error for an unknown key of a backend with keys
/// `K` (the common keys are listed too).
pub fn unknown_key<K: OptionKey>(key: &str) -> Error {
    unknown_key_among::<K>(key, &[])
}

/// [`unknown_key`] for a backend that also takes the options `extra` (TLS keys, say).
pub fn unknown_key_among<K: OptionKey>(key: &str, extra: &[&str]) -> Error {
    let known: Vec<&str> = CommonKey::ALL
        .iter()
        .map(|k| k.as_str())
        .chain(K::ALL.iter().map(|k| k.as_str()))
        .chain(extra.iter().copied())
        .collect();
    Error::config(format!(
        "unknown option {key:?}; known options: {}",
        known.join(", ")
    ))
}

/// A backend without options of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NoKey {}

impl OptionKey for NoKey {
    const ALL: &'static [Self] = &[];
    fn as_str(self) -> &'static str {
        match self {}
    }
}

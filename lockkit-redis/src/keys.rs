//! The key layout: every key and channel of one lock shares the hash tag `{<escaped name>}`, so
//! each script touches one cluster slot.

/// The Redis keys and channel of one mutex, as lockkit writes them.
///
/// ```
/// let k = lockkit_redis::LockKeys::mutex("lockkit", "orders/42");
/// assert_eq!(k.lock, "lockkit:lock:{orders/42}");
/// assert_eq!(k.fence, "lockkit:fence:{orders/42}");
/// assert_eq!(k.channel, "lockkit:channel:{orders/42}");
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockKeys {
    /// The lock hash: one field `<client-uuid>:<owner-id>` holding the hold count, with the
    /// lease as the key's expiry.
    pub lock: String,
    /// The fencing counter (a string holding the last token), expiring `fence_ttl` after its
    /// last use.
    pub fence: String,
    /// The pub/sub channel on which releases are announced.
    pub channel: String,
    /// The prefix of the short-lived unlock latches (`<unlock>:<owner>`).
    pub unlock: String,
    /// The fair-lock queue: a list of waiting owners, first in line first.
    pub queue: String,
    /// The fair-lock waiters' heartbeats (hash owner -> deadline, server ms); for read-write
    /// locks, the waiting writers (sorted set owner -> deadline).
    pub waiters: String,
    /// Shared holders (read locks, semaphore permits): a sorted set member -> lease deadline
    /// (server ms). Unused for mutexes.
    pub holders: String,
}

impl LockKeys {
    /// The keys of mutex `name` under `prefix`.
    pub fn mutex(prefix: &str, name: &str) -> LockKeys {
        Self::of_kind(prefix, "", name)
    }

    /// The keys of read-write lock `name`: `lock` is the write lock's hash, `holders` the
    /// readers, `waiters` the waiting writers.
    pub fn rwlock(prefix: &str, name: &str) -> LockKeys {
        Self::of_kind(prefix, "rw", name)
    }

    /// The keys of semaphore `name`: `holders` holds one member `<owner>|<permits>` per permit
    /// holder.
    pub fn semaphore(prefix: &str, name: &str) -> LockKeys {
        Self::of_kind(prefix, "sem", name)
    }

    fn of_kind(prefix: &str, kind: &str, name: &str) -> LockKeys {
        let tag = tag(name);
        let (prefix, kind) = if kind.is_empty() {
            (prefix.to_string(), String::new())
        } else {
            (prefix.to_string(), format!("{kind}-"))
        };
        let prefix = format!("{prefix}:{kind}");
        LockKeys {
            lock: format!("{prefix}lock:{tag}"),
            fence: format!("{prefix}fence:{tag}"),
            channel: format!("{prefix}channel:{tag}"),
            unlock: format!("{prefix}unlock:{tag}"),
            queue: format!("{prefix}queue:{tag}"),
            waiters: format!("{prefix}waiters:{tag}"),
            holders: format!("{prefix}holders:{tag}"),
        }
    }

    /// The unlock latch of one ownership.
    pub fn unlock_latch(&self, owner: &str) -> String {
        format!("{}:{owner}", self.unlock)
    }
}

/// `{name}` with `%`, `{` and `}` escaped, so the tag always ends where the name does and two
/// names never share keys.
fn tag(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 2);
    out.push('{');
    for c in name.chars() {
        match c {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            c => out.push(c),
        }
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn braces_are_escaped_and_names_stay_distinct() {
        let k = LockKeys::mutex("p", "a{b}c%");
        assert_eq!(k.lock, "p:lock:{a%7Bb%7Dc%25}");
        assert_ne!(
            LockKeys::mutex("p", "a%7B").lock,
            LockKeys::mutex("p", "a{").lock
        );
    }
}

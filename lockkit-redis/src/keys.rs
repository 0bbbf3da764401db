//! The key layout: every key and channel of one lock shares the hash tag `{<escaped name>}`, so
//! each script touches one cluster slot.

use lockkit_core::Primitive;

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
    /// The pub/sub channel on which releases are announced (Redisson's layouts, read-write locks
    /// and semaphores). A native mutex waiter hears of a hand-off on its client's channel of
    /// the lock, `<lock>:<client-uuid>`, instead.
    pub channel: String,
    /// The prefix of the short-lived unlock latches (`<unlock>:<owner>`).
    pub unlock: String,
    /// The mutex's waiter queue: a list of waiting owners, first in line first (with
    /// `redisson_compat`, fair waiters only).
    pub queue: String,
    /// The mutex waiters' heartbeats (hash owner -> `<deadline, server ms> <grant ms>`; with
    /// `redisson_compat`, Redisson's sorted set owner -> deadline, client ms); for read-write
    /// locks, the waiting writers (sorted set owner -> deadline).
    pub waiters: String,
    /// Shared holders (read locks, semaphore permits): a sorted set member -> lease deadline
    /// (server ms). Unused for mutexes. In Redisson's read-write layout, the base of the
    /// readers' `rwlock_timeout` keys instead (see [`LockKeys::redisson_rwlock`]).
    pub holders: String,
    /// An election's leader hash (`owner`, `term`, `value` of the candidate that leads, with
    /// the lock's expiry), `<lock>:leader`; `None` for locks. An election's `channel` announces
    /// each change of leader (`!`).
    pub leader: Option<String>,
    /// A native semaphore's size (a string holding the number of permits, with no expiry: the
    /// size is the semaphore's, kept for operators' `set_permits` while nobody uses it),
    /// `<prefix>:sem-size:{<name>}`; `None` otherwise (Redisson's `RSemaphore` keeps no size,
    /// only its free count).
    pub size: Option<String>,
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

    /// The keys of election `name`: a native mutex whose owner leads, with its [`leader`]
    /// hash, and the `channel` on which each change of leader is announced. Elections have no
    /// Redisson layout (Redisson has no election), so these are the same with
    /// `redisson_compat`.
    ///
    /// ```
    /// let k = lockkit_redis::LockKeys::election("lockkit", "scheduler");
    /// assert_eq!(k.lock, "lockkit:elect-lock:{scheduler}");
    /// assert_eq!(k.leader.as_deref(), Some("lockkit:elect-lock:{scheduler}:leader"));
    /// assert_eq!(k.channel, "lockkit:elect-channel:{scheduler}");
    /// ```
    ///
    /// [`leader`]: LockKeys::leader
    pub fn election(prefix: &str, name: &str) -> LockKeys {
        let mut keys = Self::of_kind(prefix, "elect", name);
        keys.leader = Some(format!("{}:leader", keys.lock));
        keys
    }

    /// The keys of semaphore `name`: `holders` holds one member `<owner>|<permits>` per permit
    /// holder, `size` the semaphore's size.
    ///
    /// ```
    /// let k = lockkit_redis::LockKeys::semaphore("lockkit", "pool");
    /// assert_eq!(k.holders, "lockkit:sem-holders:{pool}");
    /// assert_eq!(k.size.as_deref(), Some("lockkit:sem-size:{pool}"));
    /// ```
    pub fn semaphore(prefix: &str, name: &str) -> LockKeys {
        let mut keys = Self::of_kind(prefix, "sem", name);
        keys.size = Some(format!("{prefix}:sem-size:{}", tag(name)));
        keys
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
            leader: None,
            size: None,
        }
    }

    /// The keys of mutex `name` in Redisson's layout (`redisson_compat`): the lock hash is the
    /// name itself, the channel `redisson_lock__channel:{name}`, the fencing counter
    /// `redisson_lock_token:{name}` and the fair queue `redisson_lock_queue:{name}` with its
    /// deadlines `redisson_lock_timeout:{name}`, as Redisson's `RLock`, `RFencedLock` and
    /// `RFairLock` write them; lockkit's unlock latches sit next to it in the same hash slot.
    ///
    /// A name whose cluster slot cannot be shared by other keys (it holds a `}` but no
    /// `{tag}`) is an `InvalidName` error.
    ///
    /// ```
    /// let k = lockkit_redis::LockKeys::redisson_mutex("orders").unwrap();
    /// assert_eq!(k.lock, "orders");
    /// assert_eq!(k.channel, "redisson_lock__channel:{orders}");
    /// assert_eq!(k.fence, "redisson_lock_token:{orders}");
    /// assert_eq!(k.queue, "redisson_lock_queue:{orders}");
    /// assert_eq!(k.waiters, "redisson_lock_timeout:{orders}");
    /// assert!(lockkit_redis::LockKeys::redisson_mutex("a}b").is_err());
    /// assert!(lockkit_redis::LockKeys::redisson_mutex("a{b").is_err());
    /// ```
    pub fn redisson_mutex(name: &str) -> lockkit_core::Result<LockKeys> {
        let tag = redisson_tag(name)?;
        let extra = |what: &str| format!("{{{tag}}}:lockkit-{what}");
        Ok(LockKeys {
            lock: name.to_string(),
            fence: prefix_name("redisson_lock_token", name),
            channel: prefix_name("redisson_lock__channel", name),
            unlock: extra("unlock"),
            queue: prefix_name("redisson_lock_queue", name),
            waiters: prefix_name("redisson_lock_timeout", name),
            holders: extra("holders"),
            leader: None,
            size: None,
        })
    }

    /// The keys of read-write lock `name` in Redisson's `RReadWriteLock` layout
    /// (`redisson_compat`): `lock` is the hash `name` (`mode` → `read`/`write`, reader field
    /// `<uuid>:<id>` and writer field `<uuid>:<id>:write` → hold count), `channel` is
    /// `redisson_rwlock:{name}`, and `holders` is the base of each reader hold's expiry key
    /// `<holders>:<field>:rwlock_timeout:<n>`. lockkit's extras: `waiters` (waiting lockkit
    /// writers, `{tag}:lockkit-rw-writers:<name>`: one per lock, even where locks share a tag),
    /// `fence` and the latches.
    ///
    /// ```
    /// let k = lockkit_redis::LockKeys::redisson_rwlock("doc").unwrap();
    /// assert_eq!(k.lock, "doc");
    /// assert_eq!(k.channel, "redisson_rwlock:{doc}");
    /// assert_eq!(k.holders, "{doc}");
    /// assert_eq!(k.waiters, "{doc}:lockkit-rw-writers:doc");
    /// ```
    pub fn redisson_rwlock(name: &str) -> lockkit_core::Result<LockKeys> {
        let tag = redisson_tag(name)?;
        let extra = |what: &str| format!("{{{tag}}}:lockkit-rw-{what}");
        Ok(LockKeys {
            lock: name.to_string(),
            fence: extra("fence"),
            channel: prefix_name("redisson_rwlock", name),
            unlock: extra("unlock"),
            queue: format!("{}:{name}", extra("queue")),
            waiters: format!("{}:{name}", extra("writers")),
            holders: suffix_base(name),
            leader: None,
            size: None,
        })
    }

    /// The keys of semaphore `name` in Redisson's `RSemaphore` layout (`redisson_compat`):
    /// `lock` is the string `name` holding the number of free permits, `channel` is
    /// `redisson_sc:{name}`; `holders` holds lockkit's own permit leases (sorted set
    /// `<uuid>:<id>|<permits>` → deadline), named `{tag}:lockkit-permits:<name>` so that the
    /// server-side scripts can find the count key from it.
    ///
    /// ```
    /// let k = lockkit_redis::LockKeys::redisson_semaphore("pool").unwrap();
    /// assert_eq!(k.lock, "pool");
    /// assert_eq!(k.channel, "redisson_sc:{pool}");
    /// assert_eq!(k.holders, "{pool}:lockkit-permits:pool");
    /// ```
    pub fn redisson_semaphore(name: &str) -> lockkit_core::Result<LockKeys> {
        let tag = redisson_tag(name)?;
        let extra = |what: &str| format!("{{{tag}}}:lockkit-sem-{what}");
        Ok(LockKeys {
            lock: name.to_string(),
            fence: extra("fence"),
            channel: prefix_name("redisson_sc", name),
            unlock: extra("unlock"),
            queue: format!("{}:{name}", extra("queue")),
            waiters: format!("{}:{name}", extra("waiters")),
            holders: format!("{{{tag}}}:lockkit-permits:{name}"),
            leader: None,
            size: None,
        })
    }

    /// The unlock latch of one ownership.
    pub fn unlock_latch(&self, owner: &str) -> String {
        format!("{}:{owner}", self.unlock)
    }
}

/// The start of every client's holder channel, `<prefix>:holder:`: client `<client-uuid>` hears
/// on `<prefix>:holder:<client-uuid>` which of its ownerships a force-unlock took (`<owner>
/// <key>`), so it checks them at once.
pub(crate) fn holder_channels(prefix: &str) -> String {
    format!("{prefix}:holder:")
}

/// Redisson's `prefixName`: `prefix:{name}`, or `prefix:name` when the name has a `{` already.
fn prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// The start of Redisson's `suffixName`: `{name}`, or `name` when it has a `{` already.
fn suffix_base(name: &str) -> String {
    if name.contains('{') {
        name.to_string()
    } else {
        format!("{{{name}}}")
    }
}

/// The hash tag that puts lockkit's extra keys in `name`'s cluster slot: Redis hashes a key's
/// first non-empty `{…}` tag if it has one, else the whole key, which a tag can hold only
/// without a `}`.
fn redisson_tag(name: &str) -> lockkit_core::Result<&str> {
    let own_tag = name.find('{').and_then(|open| {
        let close = name[open + 1..].find('}')? + open + 1;
        (close > open + 1).then(|| &name[open + 1..close])
    });
    match own_tag {
        Some(t) => Ok(t),
        // Without a `{`, Redisson's `prefixName` adds the braces, so `{name}` keys share the
        // name's slot. With one but no `{tag}`, its keys and the name hash differently.
        None if !name.contains(['{', '}']) => Ok(name),
        None => Err(lockkit_core::Error::new(
            lockkit_core::ErrorKind::InvalidName,
            format!(
                "lock name {name:?} cannot be used with redisson_compat: it holds a brace but \
                 no {{tag}}, so Redisson's keys of it would not share its cluster slot"
            ),
        )),
    }
}

/// `{name}` with `%`, `{` and `}` escaped, so the tag always ends where the name does and two
/// names never share keys.
pub(crate) fn tag(name: &str) -> String {
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

/// The name [`tag`] wrapped (its braces stripped), or `None` when `tag` is not exactly what
/// [`tag`] produces for some name.
pub(crate) fn untag(tag_text: &str) -> Option<String> {
    let name = unescape(tag_text);
    (tag(&name) == format!("{{{tag_text}}}")).then_some(name)
}

/// Turns `%25`, `%7B` and `%7D` back.
fn unescape(tag: &str) -> String {
    let mut out = String::with_capacity(tag.len());
    let mut rest = tag;
    while let Some(i) = rest.find('%') {
        out.push_str(&rest[..i]);
        let esc = rest.get(i..i + 3);
        let c = match esc {
            Some("%25") => '%',
            Some("%7B") => '{',
            Some("%7D") => '}',
            _ => {
                out.push('%');
                rest = &rest[i + 1..];
                continue;
            }
        };
        out.push(c);
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    out
}

/// The lock a native key under `prefix` belongs to, when it is one of the keys that exist only
/// while the lock is held or waited for (the lock hash, the queue, the waiters, the shared
/// holders); the fencing counter, channels and latches outlive their holders and give `None`.
pub(crate) fn native_lock_of(prefix: &str, key: &str) -> Option<(Primitive, String)> {
    let rest = key.strip_prefix(prefix)?.strip_prefix(':')?;
    let (kind, tagged) = rest.split_once(":{")?;
    let inner = tagged.strip_suffix('}')?;
    if inner.contains(['{', '}']) {
        return None; // a latch `<unlock>:<owner>`, or a foreign key
    }
    let primitive = match kind {
        "lock" | "queue" | "waiters" => Primitive::Mutex,
        "rw-lock" | "rw-holders" | "rw-waiters" => Primitive::RwLock,
        "sem-holders" => Primitive::Semaphore,
        "elect-lock" | "elect-queue" | "elect-waiters" => Primitive::Election,
        _ => return None,
    };
    Some((primitive, untag(inner)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_keys_parse_back_to_their_locks() {
        for name in ["a", "a{b}%c", "%7B", "x:y}", "ü"] {
            let m = LockKeys::mutex("lockkit", name);
            for key in [&m.lock, &m.queue, &m.waiters] {
                assert_eq!(
                    native_lock_of("lockkit", key),
                    Some((Primitive::Mutex, name.to_string()))
                );
            }
            assert_eq!(native_lock_of("lockkit", &m.fence), None);
            let e = LockKeys::election("lockkit", name);
            for key in [&e.lock, &e.queue, &e.waiters] {
                assert_eq!(
                    native_lock_of("lockkit", key),
                    Some((Primitive::Election, name.to_string()))
                );
            }
            assert_eq!(native_lock_of("lockkit", e.leader.as_ref().unwrap()), None);
            assert_eq!(native_lock_of("lockkit", &e.channel), None);
            assert_eq!(
                native_lock_of("lockkit", &format!("{}:owner", m.unlock)),
                None
            );
            let rw = LockKeys::rwlock("lockkit", name);
            assert_eq!(
                native_lock_of("lockkit", &rw.holders),
                Some((Primitive::RwLock, name.to_string()))
            );
            let sem = LockKeys::semaphore("lockkit", name);
            assert_eq!(
                native_lock_of("lockkit", &sem.holders),
                Some((Primitive::Semaphore, name.to_string()))
            );
        }
        assert_eq!(native_lock_of("lockkit", "other:lock:{x}"), None);
        assert_eq!(
            native_lock_of("lockkit", "lockkit:lock:{a%}"),
            None,
            "not canonical"
        );
        assert_eq!(
            native_lock_of("lock", "lockkit:lock:{x}"),
            None,
            "another prefix"
        );
    }

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

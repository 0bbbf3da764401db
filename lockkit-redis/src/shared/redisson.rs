//! The read-write lock and the semaphore on Redisson's layouts (`redisson_compat`): the
//! `RReadWriteLock` hash with its `mode` field, per-read-hold `rwlock_timeout` keys and
//! `redisson_rwlock` channel, and the `RSemaphore` permit count with its `redisson_sc` channel,
//! plus lockkit's own permit leases. The scripts are `rs_*.lua`.

use std::time::Duration;

use lockkit_core::Result;
use redis::ScriptInvocation;

use super::handle::{Core, Mode};
use crate::client::Inner;
use crate::keys::LockKeys;

/// The acquire call of `mode` for `member` (sent unchanged on every attempt).
pub(super) fn acquire_call<'a>(
    core: &'a Core,
    mode: Mode,
    member: &str,
    lease: Duration,
) -> ScriptInvocation<'a> {
    let (scripts, settings, keys) = (&core.inner.scripts, &core.inner.settings, &core.keys);
    let lease_ms = lease.as_millis() as u64;
    let fence_ttl = settings.fence_ttl.as_millis() as u64;
    match mode {
        Mode::Permits(n) => {
            let mut inv = scripts.rs_sem_acquire.prepare_invoke();
            inv.key(&keys.lock)
                .key(&keys.holders)
                .key(&keys.fence)
                .arg(member)
                .arg(lease_ms)
                .arg(fence_ttl)
                .arg(n)
                .arg(core.capacity.arg())
                .arg(&keys.channel);
            inv
        }
        Mode::Read | Mode::Write => {
            let mut inv = scripts.rs_rw_acquire.prepare_invoke();
            inv.key(&keys.lock)
                .key(&keys.waiters)
                .key(&keys.fence)
                .arg(member)
                .arg(lease_ms)
                .arg(fence_ttl)
                .arg(if mode == Mode::Read { "r" } else { "w" })
                .arg(settings.waiter_timeout().as_millis() as u64)
                .arg(&keys.holders)
                .arg(&keys.channel);
            inv
        }
    }
}

/// Owner-checked, idempotent release: `w` write hold, `s` read hold or permits, `i` a waiting
/// writer's intent. A semaphore's keys are told apart by its `holders` set.
pub(super) async fn release(
    inner: &Inner,
    keys: &LockKeys,
    member: &str,
    mode: &str,
) -> Result<bool> {
    if is_semaphore(keys) && mode == "i" {
        return Ok(true);
    }
    let latch = keys.unlock_latch(member);
    // As long as the mutex's: every retry of the release below finds it.
    let latch_ttl = inner.latch_ttl_ms();
    let inv = if is_semaphore(keys) {
        let mut inv = inner.scripts.rs_sem_release.prepare_invoke();
        inv.key(&keys.lock)
            .key(&keys.holders)
            .key(&latch)
            .arg(member)
            .arg(&keys.channel)
            .arg(latch_ttl);
        inv
    } else {
        let mut inv = inner.scripts.rs_rw_release.prepare_invoke();
        inv.key(&keys.lock)
            .key(&latch)
            .key(&keys.waiters)
            .arg(member)
            .arg(&keys.channel)
            .arg(latch_ttl)
            .arg(mode)
            .arg(&keys.holders);
        inv
    };
    Ok(inner.invoke_retrying(&inv, "release").await? == 1)
}

fn is_semaphore(keys: &LockKeys) -> bool {
    keys.holders.contains("}:lockkit-permits:")
}

/// Whether the read-write lock hash exists (it is deleted with its last holder).
pub(super) async fn is_locked(core: &Core) -> Result<bool> {
    let cmd = redis::cmd("EXISTS").arg(&core.keys.lock).clone();
    Ok(core.inner.query::<i64>(&cmd, "is_locked").await? == 1)
}

/// The free permits in Redisson's count (lockkit leases that ended count as free).
pub(super) async fn available(core: &Core) -> Result<u32> {
    let mut inv = core.inner.scripts.rs_sem_probe.prepare_invoke();
    inv.key(&core.keys.lock)
        .key(&core.keys.holders)
        .arg(core.capacity.arg());
    let free: i64 = core.inner.invoke(&inv, "available").await?;
    Ok(free.clamp(0, i64::from(u32::MAX)) as u32)
}

/// Admin force-unlock of the read-write lock.
pub(super) async fn force(core: &Core) -> Result<bool> {
    let mut inv = core.inner.scripts.rs_rw_force.prepare_invoke();
    inv.key(&core.keys.lock)
        .arg(&core.keys.holders)
        .arg(&core.keys.channel)
        .arg(core.inner.holder_channels());
    Ok(core.inner.invoke::<i64>(&inv, "force_unlock").await? == 1)
}

//! The conformance suite: every backend passes every case (feature `testing`).
//!
//! Each case is a plain async fn over a [`Locks`](crate::Locks) handle. [`conformance_suite!`]
//! expands them into one `#[tokio::test]` per case for a backend:
//!
//! ```ignore
//! async fn locks() -> Option<lockkit_core::Locks> {
//!     let url = lockkit_core::testing::server_url("redis")?;
//!     Some(lockkit_redis::connect(&lockkit_core::LockConfig::new(url)).await.unwrap())
//! }
//! lockkit_core::conformance_suite!(locks);
//! ```
//!
//! Every case works under a fresh random name prefix, so runs never see each other's locks. A
//! capability the backend lacks must answer `Unsupported`, and the cases check that instead of
//! skipping.
//!
//! [`conformance_suite!`]: crate::conformance_suite

pub mod cases;
mod credentials;
pub mod failover;
mod support;

pub use credentials::{
    assert_refused, password_of, secure_certs, BadCredential, QUICK, WRONG_PASSWORD,
};
pub use support::{
    free_port, make_client_cert, make_test_certs, server_url, tool_available, unique_name,
    wait_for_port, ClientCert, OverlapDetector, PrivateServer, TestCerts,
};

/// Expands the whole conformance suite into one `#[tokio::test]` per case. `$make` is an async fn
/// returning `Option<Locks>`: `None` skips (only allowed when the backend is not required).
#[macro_export]
macro_rules! conformance_suite {
    ($make:path) => {
        $crate::__conformance_cases!($make;
            mutex_excludes_many_tasks,
            try_lock_on_held_returns_none_at_once,
            try_lock_on_free_lock_succeeds,
            wait_budget_is_honoured,
            forever_wait_wakes_on_release,
            timed_wait_wakes_on_release,
            same_handle_second_acquire_waits,
            reenter_counts_holds,
            reenter_release_last_hold_unlocks,
            handle_hold_count_tracks_guards,
            tokens_increase_across_100_holders,
            tokens_increase_across_drop_release,
            tokens_increase_across_lease_expiry,
            fixed_lease_expires_and_old_guard_is_lost,
            watchdog_keeps_lock_past_three_leases,
            release_after_takeover_is_not_held,
            release_after_force_unlock_is_not_held,
            release_of_lost_guard_is_an_error_not_a_panic,
            drop_releases_in_background,
            dropped_waiting_acquire_leaves_no_trace,
            timed_out_acquire_leaves_no_trace,
            fifo_order_of_ten_waiters,
            is_locked_reflects_holder,
            force_unlock_frees_lock_and_marks_holder_lost,
            extend_pushes_fixed_lease,
            extend_after_expiry_fails_and_does_not_recreate,
            extend_on_watchdog_lease_is_invalid,
            independent_names_do_not_block,
            state_stays_held_while_renewed,
            invalid_names_are_rejected,
            unusual_valid_names_work,
            unsupported_capabilities_say_so,
            rw_readers_share,
            rw_writer_is_exclusive,
            rw_waiting_writer_blocks_new_readers,
            rw_downgrade_keeps_readers_out_of_write,
            rw_upgrade_fails_typed,
            rw_write_tokens_increase,
            rw_reentrant_reads,
            semaphore_never_exceeds_permits,
            semaphore_permits_return_on_drop,
            semaphore_permits_return_on_lease_expiry,
            semaphore_available_counts,
            semaphore_acquire_n_at_once,
            semaphore_bad_counts_are_invalid,
            semaphore_dropped_waiter_leaves_no_trace
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($make:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(locks) = $make().await {
                    $crate::testing::cases::$case(&locks).await;
                }
            }
        )*
    };
}

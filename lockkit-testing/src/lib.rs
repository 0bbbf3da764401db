//! lockkit's conformance suite and the real-server helpers of its tests (not published).
//!
//! Each case is a plain async fn over a [`Locks`](lockkit_core::Locks) handle or, when it needs
//! several handles or its own config, over a [`Harness`]. [`conformance_suite!`] expands them
//! into one `#[tokio::test]` per case for a backend, given a fn that returns the base config
//! (`None` skips, only allowed when the backend is not required) and the backend's connect:
//!
//! ```ignore
//! fn config() -> Option<lockkit_core::LockConfig> {
//!     lockkit_testing::server_url("redis").map(lockkit_core::LockConfig::new)
//! }
//! lockkit_testing::conformance_suite!(config, lockkit_redis::connect);
//! ```
//!
//! The fn may return any [`Fixture`] (a `LockConfig` is one): `file://`'s returns a
//! [`ScratchDir`], which the case keeps until it ends and which then removes the directory.
//!
//! Every case works under a fresh random name prefix, so runs never see each other's locks. A
//! capability the backend lacks must answer `Unsupported`, and the cases check that instead of
//! skipping.

pub mod cases;
mod credentials;
pub mod failover;
mod fixture;
pub mod harness;
pub mod idle;
pub mod metrics;
pub mod network;
pub mod proxy;
pub mod spans;
mod support;

#[doc(hidden)]
pub use lockkit_core as __core;

pub use fixture::{Fixture, ScratchDir};
pub use harness::{ChildHolder, Harness, Hold};

pub use credentials::{
    assert_refused, password_of, secure_certs, BadCredential, QUICK, WRONG_PASSWORD,
};
pub use support::{
    free_port, make_client_cert, make_test_certs, observe_until, server_url, tool_available,
    unique_name, wait_for_port, ClientCert, OverlapDetector, PrivateServer, TestCerts,
};

/// Expands the whole conformance suite into one `#[tokio::test]` per case. `$config` is a fn
/// returning `Option` of a [`Fixture`] (a `LockConfig`, or a [`ScratchDir`] removed when the
/// case ends), called once per case; `$connect` an async fn `(&LockConfig) -> Result<Locks>`.
/// It also adds the `__conformance_child` test, which is a holder process when
/// [`Harness::spawn_holder`] starts the binary and does nothing otherwise.
#[macro_export]
macro_rules! conformance_suite {
    ($config:path, $connect:path) => {
        $crate::holder_process!($connect);

        $crate::__conformance_harness_cases!($config, $connect;
            configured_lease_is_the_default_lease,
            asked_for_lease_is_the_lease_you_get,
            killed_holder_frees_the_lock_after_its_lease,
            unknown_options_are_refused,
            handles_and_guards_outlive_the_locks_handle,
            close_loses_guards_and_refuses_acquires,
            close_racing_acquires_leaves_nothing_held,
            separate_connects_exclude_each_other,
            election_killed_leader_is_replaced_after_its_lease,
            election_paused_leader_is_replaced_and_told,
            multi_sets_that_cross_between_processes_do_not_deadlock,
        );

        $crate::__conformance_cases!($config, $connect;
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
            release_after_takeover_is_lost,
            release_after_force_unlock_is_lost,
            release_of_lost_guard_is_an_error_not_a_panic,
            drop_releases_in_background,
            dropped_waiting_acquire_leaves_no_trace,
            waiter_behind_one_that_gave_up_gets_the_lock,
            timed_out_acquire_leaves_no_trace,
            fifo_order_of_ten_waiters,
            is_locked_reflects_holder,
            force_unlock_frees_lock_and_marks_holder_lost,
            force_unlock_is_heard_at_once,
            extend_pushes_fixed_lease,
            extend_after_expiry_fails_and_does_not_recreate,
            extend_on_watchdog_lease_is_invalid,
            extend_to_a_shorter_lease_moves_the_deadline,
            huge_budgets_and_leases_are_typed_not_panics,
            fixed_lease_starts_when_the_lock_is_taken,
            independent_names_do_not_block,
            state_stays_held_while_renewed,
            invalid_names_are_rejected,
            unusual_valid_names_work,
            unsupported_capabilities_say_so,
            spans_read_the_same_on_every_backend,
            metrics_count_a_scripted_sequence,
            state_changes_and_force_unlock_are_events,
            list_finds_the_locks_under_a_prefix,
            multi_takes_all_or_none,
            multi_sets_that_cross_do_not_deadlock,
            dropped_multi_acquire_leaves_no_member_held,
            multi_is_lost_when_a_member_is,
            multi_never_returns_a_lost_member,
            multi_mixes_read_and_write_members,
            multi_budget_is_for_the_whole_set,
            multi_watchdog_keeps_every_member,
            rw_readers_share,
            rw_writer_is_exclusive,
            rw_waiting_writer_blocks_new_readers,
            rw_downgrade_keeps_readers_out_of_write,
            rw_upgrade_fails_typed,
            rw_write_tokens_increase,
            rw_reentrant_reads,
            rw_extend_keeps_a_reader_a_reader,
            rw_downgrade_does_not_fire_lost,
            rw_downgrade_after_an_extend_keeps_the_extended_lease,
            rw_force_unlock_is_heard_at_once,
            semaphore_never_exceeds_permits,
            semaphore_permits_return_on_drop,
            semaphore_permits_return_on_lease_expiry,
            semaphore_available_counts,
            semaphore_acquire_n_at_once,
            semaphore_bad_counts_are_invalid,
            semaphore_dropped_waiter_leaves_no_trace,
            semaphore_extend_keeps_the_permits,
            semaphore_size_is_stored_with_it,
            semaphore_set_permits_changes_the_size,
            semaphore_disagreeing_handles_never_oversubscribe,
            semaphore_waiter_follows_a_size_change,
            semaphore_holders_past_a_shrink_are_counted,
            election_one_leader_at_a_time_with_rising_terms,
            election_candidates_lead_in_arrival_order,
            election_leader_and_observers_follow_every_change,
            election_lost_leadership_is_signalled_and_refused,
            election_withdrawn_candidates_leave_nothing,
            election_deleted_leader_is_demoted,
            election_observer_starts_on_the_state_just_made
        );
    };
}

/// Adds the `__conformance_child` test to a test binary, so that [`Harness::spawn`] can start
/// the binary again as a holder process (connecting with `$connect`, an async fn
/// `(&LockConfig) -> Result<Locks>`). In a normal test run the test does nothing.
#[macro_export]
macro_rules! holder_process {
    ($connect:path) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn __conformance_child() {
            $crate::harness::run_child(|c: $crate::__core::LockConfig| async move {
                $connect(&c).await
            })
            .await;
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_cases {
    ($config:path, $connect:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(fixture) = $config() {
                    let cfg = $crate::Fixture::config(&fixture);
                    let locks = $connect(&cfg).await.expect("the backend connects");
                    $crate::cases::$case(&locks).await;
                }
            }
        )*
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_harness_cases {
    ($config:path, $connect:path; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                if let Some(fixture) = $config() {
                    let cfg = $crate::Fixture::config(&fixture);
                    let h = $crate::Harness::new(cfg, |c: $crate::__core::LockConfig| async move {
                        $connect(&c).await
                    });
                    $crate::cases::$case(&h).await;
                }
            }
        )*
    };
}

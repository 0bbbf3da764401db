//! `lockkit elect`: run a command only while this process leads an election, and
//! `lockkit leader`: show an election's leader and follow its changes.

use clap::Args;
use lockkit::Leader;
use serde::Serialize;

use crate::exec::{self, ExecArgs, Holding};
use crate::exit::{complain, error_code, say};
use crate::target::Target;

/// Arguments of `lockkit elect`.
#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    /// The election's name.
    name: String,

    /// What this candidate proclaims while it leads (`lockkit leader` shows it). Default:
    /// `<host name>:<pid>`.
    #[arg(long, value_name = "VALUE")]
    value: Option<String>,

    #[command(flatten)]
    holding: Holding,

    /// The command and its arguments (after `--`).
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// This process's default candidate value: `<host name>:<pid>`.
fn default_value() -> String {
    let uname = rustix::system::uname();
    let host = uname.nodename().to_string_lossy();
    format!("{host}:{}", std::process::id())
}

pub(crate) async fn run(target: &Target, args: ElectArgs) -> u8 {
    let value = args.value.unwrap_or_else(default_value);
    let exec = ExecArgs {
        name: args.name,
        holding: args.holding,
        shared: false,
        write: false,
        semaphore: None,
        command: args.command,
    };
    exec::run_as(target, exec, Some(value)).await
}

/// One line of `lockkit leader --json`.
#[derive(Serialize)]
struct View<'a> {
    name: &'a str,
    /// `null` when nobody leads.
    leader: Option<LeaderView>,
}

#[derive(Serialize)]
struct LeaderView {
    value: String,
    term: u64,
}

/// Prints the leader; `false` once stdout is closed.
fn print(name: &str, leader: Option<&Leader>, json: bool) -> bool {
    if json {
        let view = View {
            name,
            leader: leader.map(|l| LeaderView {
                value: l.value_str().into_owned(),
                term: l.term().0,
            }),
        };
        say!(
            "{}",
            serde_json::to_string(&view).expect("a view serializes")
        )
    } else {
        match leader {
            Some(l) => say!("{} (term {})", l.value_str(), l.term()),
            None => say!("no leader"),
        }
    }
}

/// `lockkit leader NAME [--watch] [--json]`: the leader now, or (with `watch`) every change of
/// leader until interrupted.
pub(crate) async fn leader(target: &Target, name: &str, watch: bool, json: bool) -> u8 {
    let (_, locks) = match target.connect().await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let election = match locks.election(name) {
        Ok(e) => e,
        Err(e) => {
            complain(format!("election {name:?}: {e}"));
            return error_code(&e);
        }
    };
    if !watch {
        return match election.leader().await {
            Ok(l) => {
                print(name, l.as_ref(), json);
                0
            }
            Err(e) => {
                complain(format!("leader of {name:?}: {e}"));
                error_code(&e)
            }
        };
    }
    let mut changes = match election.observe().await {
        Ok(c) => c,
        Err(e) => {
            complain(format!("observe {name:?}: {e}"));
            return error_code(&e);
        }
    };
    while let Some(change) = changes.next().await {
        match change {
            // Nobody reads any more (`| head -1`): done.
            Ok(l) => {
                if !print(name, l.as_ref(), json) {
                    break;
                }
            }
            // The backend lost track for a while; the next item is the state as it then is.
            Err(e) => complain(format!("following {name:?}: {e}")),
        }
    }
    0
}

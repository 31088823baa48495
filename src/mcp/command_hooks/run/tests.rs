//! Each bound of a command's run against a real `sh`.

use std::time::Duration;

use super::*;

fn scratch(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("hookloop-run-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

async fn sh(text: &str, stdin: &[u8], within: Duration) -> Ran {
    let cwd = std::env::temp_dir();
    let env = [("EXTRA".to_owned(), "from the settings".to_owned())];
    let command = Command {
        text,
        cwd: &cwd,
        env: &env,
    };
    let (_keep, mut kill) = watch::channel(0);
    run(&command, stdin, Instant::now() + within, &mut kill).await
}

/// Whether `pid` runs: it exists and is not a zombie waiting for a parent that does not reap.
pub(crate) fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command's name in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn exited(ran: Ran) -> (i32, String, String) {
    match ran {
        Ran::Exited {
            code,
            stdout,
            stderr,
            ..
        } => (code, stdout, stderr),
        other => panic!("expected an exit, got {other:?}"),
    }
}

#[tokio::test]
async fn the_event_goes_to_stdin_and_the_exit_and_both_streams_come_back() {
    let (code, stdout, stderr) = exited(
        sh(
            "read line; echo \"got $line\"; echo \"$EXTRA\" >&2; exit 2",
            b"{\"x\":1}\n",
            Duration::from_secs(10),
        )
        .await,
    );
    assert_eq!(code, 2);
    assert_eq!(stdout, "got {\"x\":1}\n");
    assert_eq!(stderr, "from the settings\n");
}

#[tokio::test]
async fn it_runs_in_the_session_directory_with_the_children_environment_only() {
    // SAFETY (test): the variable is this test's own; nothing reads it concurrently.
    unsafe { std::env::set_var("HOOKLOOP_TEST_SECRET_KEY", "sk-secret") };
    let (_, stdout, _) = exited(
        sh(
            "pwd; echo \"dir=$CLAUDE_PROJECT_DIR key=${HOOKLOOP_TEST_SECRET_KEY:-none}\"",
            b"",
            Duration::from_secs(10),
        )
        .await,
    );
    let tmp = std::env::temp_dir().canonicalize().unwrap();
    let mut lines = stdout.lines();
    assert_eq!(
        std::path::Path::new(lines.next().unwrap())
            .canonicalize()
            .unwrap(),
        tmp
    );
    let rest = lines.next().unwrap();
    assert!(rest.ends_with("key=none"), "{rest}");
    assert!(rest.starts_with("dir="), "{rest}");
}

#[tokio::test]
async fn a_hung_command_is_killed_with_its_group_at_the_deadline() {
    let dir = scratch("hang");
    let pid_file = dir.join("pid");
    let text = format!("sleep 300 & echo $! > {}; wait", pid_file.to_string_lossy());
    let started = std::time::Instant::now();
    let ran = sh(&text, b"", Duration::from_millis(500)).await;
    assert_eq!(ran, Ran::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // The grandchild went with the group.
    let gone = (0..50).any(|_| {
        std::thread::sleep(Duration::from_millis(20));
        !alive(pid)
    });
    assert!(gone, "the sleep {pid} outlived the kill");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_command_that_leaves_a_daemon_holding_its_stdout_ends_the_run_when_it_exits() {
    let started = std::time::Instant::now();
    let (code, stdout, _) = exited(
        sh(
            "echo '{\"decision\":\"block\",\"reason\":\"x\"}'; (sleep 30) & exit 0",
            b"",
            Duration::from_secs(20),
        )
        .await,
    );
    assert_eq!(code, 0);
    assert!(stdout.contains("block"), "{stdout}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_command_that_never_reads_a_large_event_is_not_a_deadlock() {
    let event = vec![b'x'; 8 << 20];
    let started = std::time::Instant::now();
    let (code, stdout, _) =
        exited(sh("echo ignored the input", &event, Duration::from_secs(20)).await);
    assert_eq!((code, stdout.as_str()), (0, "ignored the input\n"));
    assert!(started.elapsed() < Duration::from_secs(5));
    // One that neither reads nor exits meets the deadline.
    assert_eq!(
        sh("sleep 300", &event, Duration::from_millis(300)).await,
        Ran::TimedOut
    );
}

#[tokio::test]
async fn output_past_the_cap_is_cut_and_a_flood_is_killed() {
    let ran = sh(
        "head -c 3000000 /dev/zero | tr '\\0' a",
        b"",
        Duration::from_secs(20),
    )
    .await;
    match ran {
        Ran::Exited { stdout, cut, .. } => {
            assert!(cut);
            assert_eq!(stdout.len(), MAX_STDOUT_BYTES);
        }
        other => panic!("{other:?}"),
    }
    let ran = sh("yes", b"", Duration::from_secs(30)).await;
    match ran {
        Ran::Failed(why) => assert!(why.contains("stdout"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn the_engine_kill_ends_a_running_command() {
    let cwd = std::env::temp_dir();
    let command = Command {
        text: "sleep 300",
        cwd: &cwd,
        env: &[],
    };
    let (sender, mut kill) = watch::channel(0);
    let run = run(
        &command,
        b"",
        Instant::now() + Duration::from_secs(60),
        &mut kill,
    );
    let killer = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sender.send_modify(|n| *n += 1);
        std::future::pending::<()>().await;
    };
    let ran = tokio::select! {
        ran = run => ran,
        () = killer => unreachable!(),
    };
    assert_eq!(ran, Ran::Failed("killed on the engine's order".into()));
}

#[tokio::test]
async fn a_command_sh_cannot_find_is_exit_127() {
    let (code, _, stderr) =
        exited(sh("no-such-hook-command-x", b"", Duration::from_secs(10)).await);
    assert_eq!(code, 127);
    assert!(stderr.contains("not found"), "{stderr}");
}

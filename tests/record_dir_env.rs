//! `HOOKLOOP_RECORD_DIR`: alone in its test binary, since it changes the process environment.

use hookloop::transcript::RecordDir;

#[test]
fn the_record_dir_comes_from_the_environment() {
    let dir = std::env::temp_dir().join(format!("hookloop-env-{}", std::process::id()));
    // SAFETY: this binary's only test; no other thread reads the environment meanwhile.
    unsafe { std::env::remove_var(RecordDir::ENV_VAR) };
    assert!(RecordDir::from_env().unwrap().is_none(), "off by default");
    unsafe { std::env::set_var(RecordDir::ENV_VAR, "") };
    assert!(RecordDir::from_env().unwrap().is_none(), "empty is off");
    unsafe { std::env::set_var(RecordDir::ENV_VAR, &dir) };
    let records = RecordDir::from_env().unwrap().expect("set");
    assert_eq!(records.path(), dir);
    assert!(dir.is_dir(), "created");
    std::fs::remove_dir_all(&dir).unwrap();
}

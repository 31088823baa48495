//! Files that hold what a session said (prompts, tool output, tokens) are the user's alone:
//! created mode 0600, in directories created mode 0700, from the moment they exist (never
//! created open and narrowed after). A file that was there before (`--record` or `--html` naming
//! an old file mode 0644) is narrowed to 0600 through its open descriptor before a byte is
//! written. Every such file and directory the crate creates or writes is opened here:
//! transcripts, the agent's side files and lock files, the token store, the HTML view, the JUnit
//! report.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

/// The mode of a file the crate creates.
const FILE_MODE: u32 = 0o600;
/// The mode of a directory the crate creates.
const DIR_MODE: u32 = 0o700;

/// Creates `dir` and its missing parents, each mode 0700; directories that exist are left as
/// they are.
pub(crate) fn create_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(DIR_MODE).create(dir)
}

/// Options that open a file for writing, mode 0600 whether it is new or was there; callers add
/// how (`create`, `create_new`, `truncate`).
pub(crate) fn write_options() -> WriteOptions {
    let mut options = OpenOptions::new();
    options.write(true).mode(FILE_MODE);
    WriteOptions(options)
}

/// [`OpenOptions`] whose [`open`](WriteOptions::open) leaves the file mode 0600.
pub(crate) struct WriteOptions(OpenOptions);

impl WriteOptions {
    /// Creates the file when it is missing.
    pub(crate) fn create(&mut self, create: bool) -> &mut Self {
        self.0.create(create);
        self
    }

    /// Creates the file, failing when it exists.
    pub(crate) fn create_new(&mut self, create_new: bool) -> &mut Self {
        self.0.create_new(create_new);
        self
    }

    /// Empties the file when it exists.
    pub(crate) fn truncate(&mut self, truncate: bool) -> &mut Self {
        self.0.truncate(truncate);
        self
    }

    /// Opens the file at `path`; one that was there with another mode is narrowed to 0600
    /// first (see [`narrow`]).
    pub(crate) fn open(&self, path: &Path) -> io::Result<File> {
        let file = self.0.open(path)?;
        narrow(&file)?;
        Ok(file)
    }
}

/// Sets a regular file's mode to 0600 through its descriptor (no second lookup of the path to
/// race with). The mode given at creation only applies to a new file: an old one named by
/// `--record` or `--html` kept its 0644. Anything else (`/dev/null`, a pipe, a terminal) is not
/// the engine's to change and holds nothing afterwards.
fn narrow(file: &File) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let metadata = file.metadata()?;
    if !metadata.file_type().is_file() || metadata.permissions().mode() & 0o7777 == FILE_MODE {
        return Ok(());
    }
    file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))
        .map_err(|e| io::Error::new(e.kind(), format!("cannot make it mode 0600: {e}")))
}

/// Creates (or truncates) the file at `path`, mode 0600 whether it is new or was there.
pub(crate) fn create_file(path: &Path) -> io::Result<File> {
    write_options().create(true).truncate(true).open(path)
}

/// Writes `contents` to the file at `path` as [`create_file`] opens it.
#[cfg_attr(
    not(any(feature = "acp", feature = "html", feature = "junit")),
    allow(dead_code)
)]
pub(crate) fn write_file(path: &Path, contents: impl AsRef<[u8]>) -> io::Result<()> {
    use std::io::Write;
    create_file(path)?.write_all(contents.as_ref())
}

/// Takes an exclusive `flock` on `file` without waiting: `Ok(false)` when another open file
/// holds it. The lock lives as long as this open file (every clone of it), and the kernel lets
/// go of it when the process ends, however it ends: a killed process never leaves a stale lock.
#[cfg(any(feature = "mcp", feature = "acp"))]
pub(crate) fn try_lock(file: &File) -> io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        // SAFETY: flock on a descriptor the `File` owns, valid for the call.
        let done = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if done == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        match error.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(error),
        }
    }
}

/// An exclusive lock on a lock file, held until dropped (see [`try_lock`]). Each
/// [`lock_exclusive`] opens the file anew, so two holders in one process exclude each other as
/// two processes do.
#[cfg(any(feature = "mcp", feature = "acp"))]
#[derive(Debug)]
pub(crate) struct FileLock {
    _file: File,
}

#[cfg(any(feature = "mcp", feature = "acp"))]
impl FileLock {
    /// The locked file, open.
    pub(crate) fn file(&self) -> &File {
        &self._file
    }
}

/// Takes the exclusive lock of the file at `path` (created mode 0600, its directory 0700, when
/// missing), waiting at most `wait` for another holder to let go; `Ok(None)` when it did not.
#[cfg(any(feature = "mcp", feature = "acp"))]
pub(crate) fn lock_exclusive(
    path: &Path,
    wait: std::time::Duration,
) -> io::Result<Option<FileLock>> {
    if let Some(dir) = path.parent() {
        create_dir(dir)?;
    }
    let file = write_options().create(true).truncate(false).open(path)?;
    let deadline = std::time::Instant::now() + wait;
    while !try_lock(&file)? {
        if std::time::Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(Some(FileLock { _file: file }))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn files_and_directories_are_the_owners_alone() {
        let base = std::env::temp_dir().join(format!(
            "hookloop-private-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let dir = base.join("a").join("b");
        create_dir(&dir).unwrap();
        assert_eq!(mode(&base.join("a")), 0o700);
        assert_eq!(mode(&dir), 0o700);
        let file = dir.join("f");
        write_file(&file, "secret").unwrap();
        assert_eq!(mode(&file), 0o600);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "secret");
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn a_file_that_was_there_is_narrowed_to_0600_however_it_is_opened() {
        use std::fs::Permissions;
        let base = std::env::temp_dir().join(format!(
            "hookloop-narrow-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        create_dir(&base).unwrap();
        let (written, kept) = (base.join("written"), base.join("kept"));
        for old in [&written, &kept] {
            std::fs::write(old, "old").unwrap();
            std::fs::set_permissions(old, Permissions::from_mode(0o644)).unwrap();
        }
        write_file(&written, "secret").unwrap();
        assert_eq!(mode(&written), 0o600);
        assert_eq!(std::fs::read_to_string(&written).unwrap(), "secret");
        // A lock file is opened without truncating: its mode is narrowed all the same.
        drop(
            write_options()
                .create(true)
                .truncate(false)
                .open(&kept)
                .unwrap(),
        );
        assert_eq!(mode(&kept), 0o600);
        assert_eq!(std::fs::read_to_string(&kept).unwrap(), "old");
        // What is not a regular file is left as it is.
        let null = Path::new("/dev/null");
        let before = mode(null);
        drop(write_options().open(null).unwrap());
        assert_eq!(mode(null), before);
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[cfg(any(feature = "mcp", feature = "acp"))]
    #[test]
    fn a_lock_excludes_others_and_dies_with_its_holder() {
        use std::io::BufRead;
        use std::time::Duration;
        let base = std::env::temp_dir().join(format!(
            "hookloop-lock-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        let path = base.join("d").join("f.lock");
        let held = lock_exclusive(&path, Duration::ZERO)
            .unwrap()
            .expect("free");
        assert_eq!(mode(&path), 0o600);
        // A second holder in the same process waits, then gives up.
        assert!(
            lock_exclusive(&path, Duration::from_millis(50))
                .unwrap()
                .is_none()
        );
        drop(held);
        drop(
            lock_exclusive(&path, Duration::ZERO)
                .unwrap()
                .expect("free again"),
        );
        // Another process holds it, then dies without letting go.
        let script = "import fcntl, sys, time\n\
                      f = open(sys.argv[1], 'a')\n\
                      fcntl.flock(f, fcntl.LOCK_EX)\n\
                      print('locked', flush=True)\n\
                      time.sleep(600)\n";
        let mut holder = std::process::Command::new("python3")
            .args(["-c", script])
            .arg(&path)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufReader::new(holder.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "locked");
        assert!(
            lock_exclusive(&path, Duration::from_millis(50))
                .unwrap()
                .is_none()
        );
        holder.kill().unwrap();
        holder.wait().unwrap();
        assert!(
            lock_exclusive(&path, Duration::from_secs(5))
                .unwrap()
                .is_some()
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}

//! Files that hold what a session said (prompts, tool output, tokens) are the user's alone:
//! created mode 0600, in directories created mode 0700, from the moment they exist (never
//! created open and narrowed after). Every such file and directory the crate creates is made
//! here: transcripts, the agent's side files, the token store, the HTML view, the JUnit report.

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

/// Options that create a file mode 0600 and open it for writing; callers add how (`create`,
/// `create_new`, `truncate`).
pub(crate) fn write_options() -> OpenOptions {
    let mut options = OpenOptions::new();
    options.write(true).mode(FILE_MODE);
    options
}

/// Creates (or truncates) the file at `path`, mode 0600 when it is new.
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
}
